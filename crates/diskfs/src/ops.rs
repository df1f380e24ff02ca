//! The logical operations diskfs offers the layer above. Each returns the
//! patch that stands for it (an empty patch over the patches of its change
//! to the tree), so a caller can make later work depend on it or wait for
//! it: the `patch_t **p` convention of Featherstitch §6. Deleting an inode
//! whose last name went is not part of it (see [`DiskFs::drop_name`]).
//!
//! Soft-updates order, per operation:
//! - create / mkdir: allocate the inode (and a directory's block), initialize
//!   them after their bitmap bits, raise the parent's link count (mkdir),
//!   then add the entry after the initialized inode (rule 1);
//! - unlink / rmdir: remove the entry first; lower the link count after it
//!   (rule 3: the count is never below the references on disk); when the
//!   last link goes, mark the inode deleted, and free its blocks and inode
//!   only after that (rule 2: a resource is reusable only once nothing on
//!   disk points to it). The operation waits for the entry's removal (and a
//!   surviving inode's lower count); the deletion follows on its own.

use crate::bmap::Src;
use crate::dir::check_name;
use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, META};
use std::sync::Arc;
use stitch_format::dir::new_dir_block;
use stitch_format::inode::{TimeField, ROOT_INO};
use stitch_format::{FileType, Inode, InodeNo, Timestamp};
use stitch_patch::{BlockNo, PatchId};

/// The attributes `stat` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub ino: InodeNo,
    pub kind: Option<FileType>,
    /// Permission bits (and setuid/setgid/sticky).
    pub perm: u16,
    pub nlink: u16,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte sectors allocated.
    pub sectors: u32,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    /// A device node's (major, minor); `None` for other kinds.
    pub rdev: Option<(u32, u32)>,
    /// The inode's extended-attribute block, which `sectors` counts.
    pub xattr_block: XattrBlock,
}

/// A file write made of whole pages: the first `len` bytes of `pages`, each
/// page one block long, written from byte `offset`, a block boundary.
#[derive(Clone, Copy, Debug)]
pub struct Pages<'a> {
    pub offset: u64,
    pub pages: &'a [Arc<Vec<u8>>],
    pub len: usize,
}

/// Whether an inode names an extended-attribute block, and whether the
/// block goes with it: a deletion frees a block only its inode names,
/// and drops a shared block's count instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XattrBlock {
    None,
    /// Named by this inode alone.
    Own,
    /// Named by other inodes too (or unreadable, so not to be counted on).
    Shared,
}

/// ext2's largest link count.
const LINK_MAX: u16 = 32_000;

impl DiskFs {
    pub fn root(&self) -> InodeNo {
        ROOT_INO
    }

    pub fn getattr(&mut self, ino: InodeNo) -> Result<Attr> {
        let i = self.read_inode(ino)?;
        let xattr_block = match i.file_acl() {
            0 => XattrBlock::None,
            b => match self.xattr_block(ino, b, stitch_format::xattr::XattrHeader::parse) {
                Ok(h) if h.refcount == 1 => XattrBlock::Own,
                _ => XattrBlock::Shared,
            },
        };
        Ok(Attr {
            ino,
            kind: i.file_type(),
            perm: i.core.mode & 0o7777,
            nlink: i.core.links_count,
            uid: i.uid(),
            gid: i.gid(),
            size: i.size(),
            sectors: i.sectors(),
            atime: i.time(TimeField::Access),
            mtime: i.time(TimeField::Modify),
            ctime: i.time(TimeField::Change),
            rdev: matches!(
                i.file_type(),
                Some(FileType::CharDevice | FileType::BlockDevice)
            )
            .then(|| i.device()),
            xattr_block,
        })
    }

    /// Creates a regular file `name` in `parent`.
    pub fn create(
        &mut self,
        parent: InodeNo,
        name: &[u8],
        perm: u16,
        uid: u32,
        gid: u32,
        now: Timestamp,
    ) -> Result<(InodeNo, PatchId)> {
        self.check_new_name(parent, name)?;
        let (ino, ib) = self.alloc_inode(parent, false)?;
        let mut inode = Inode::new(FileType::Regular, perm, self.geo.inode_size, now);
        inode.set_owner(uid, gid);
        let init = self.write_inode_clearing_attrs(ino, &inode, &[ib])?;
        // FAULT INJECTION (feature `fault-injection`): the switch drops the
        // entry's dependency on the initialized inode.
        #[cfg(feature = "fault-injection")]
        let drop_dep = crate::fault::entry_before_inode();
        #[cfg(not(feature = "fault-injection"))]
        let drop_dep = false;
        let deps: &[PatchId] = if drop_dep { &[] } else { &init };
        let entry = self.add_entry(parent, name, ino, FileType::Regular, deps, now)?;
        Ok((ino, self.stands_for(&[&[ib], &init, &entry])?))
    }

    /// Creates a directory `name` in `parent`.
    pub fn mkdir(
        &mut self,
        parent: InodeNo,
        name: &[u8],
        perm: u16,
        uid: u32,
        gid: u32,
        now: Timestamp,
    ) -> Result<(InodeNo, PatchId)> {
        self.check_new_name(parent, name)?;
        let mut pinode = self.dir_inode(parent)?;
        if pinode.core.links_count >= LINK_MAX {
            return Err(DiskError::TooManyLinks);
        }
        let (ino, ib) = self.alloc_inode(parent, true)?;
        // The new ".." is a reference to the parent: count it first.
        pinode.core.links_count += 1;
        let plink = self.write_inode(parent, &pinode, &[])?;
        let (blk, bb) = self.alloc_block(self.inode_group_start(ino))?;
        let contents = new_dir_block(self.bs, ino, parent);
        let data = self
            .m
            .byte(BlockNo(u64::from(blk)), 0, &contents, &plink, META)?;
        let mut inode = Inode::new(FileType::Directory, perm, self.geo.inode_size, now);
        inode.set_owner(uid, gid);
        inode.core.links_count = 2;
        inode.core.block[0] = blk;
        inode.set_size(self.bs as u64);
        inode.core.blocks_lo = (self.bs / 512) as u32;
        let init = self.write_inode_clearing_attrs(ino, &inode, &[ib, bb, data])?;
        let entry = self.add_entry(parent, name, ino, FileType::Directory, &init, now)?;
        Ok((
            ino,
            self.stands_for(&[&[ib, bb, data], &plink, &init, &entry])?,
        ))
    }

    /// Removes the name `name` of a non-directory from `parent`.
    pub fn unlink(&mut self, parent: InodeNo, name: &[u8], now: Timestamp) -> Result<PatchId> {
        let entry = self.lookup(parent, name)?.ok_or(DiskError::NotFound)?;
        let inode = self.read_inode(entry.ino)?;
        if inode.is_dir() {
            return Err(DiskError::IsDir);
        }
        let elsewhere = self.names_elsewhere(entry.ino, inode.core.links_count, parent, name);
        let (entry, removed, never_on_disk) = self.remove_entry(parent, name, &elsewhere, now)?;
        // An entry that never reached the disk needs no waiting for (§4.5),
        // but an older name a rename took the inode from may still be there.
        if let Some(before) = never_on_disk {
            // On disk the removal is a no-op: the operation is the inode's.
            let dropped = self.drop_link(entry.ino, &before, now)?;
            return self.stands_for(&[&dropped]);
        }
        let dropped = self.drop_name(entry.ino, &removed, now)?;
        self.stands_for(&[&removed, &dropped])
    }

    /// [`DiskFs::drop_link`], returning what the operation that removed the
    /// name stands for: the lower count of an inode that keeps other names.
    /// An inode losing its last name leaves the tree with that name; its
    /// deletion (cleared, then its blocks and number freed) follows the
    /// removal on its own and reaches the disk with later writes. A crash
    /// before then leaves a leak, never a lost name, and a sync of the
    /// operation waits for the tree only: in soft updates one device flush,
    /// not three (removal, cleared inode, freed bits).
    pub(crate) fn drop_name(
        &mut self,
        ino: InodeNo,
        removed: &[PatchId],
        now: Timestamp,
    ) -> Result<Vec<PatchId>> {
        let keeps_names = self.read_inode(ino)?.core.links_count > 1;
        let dropped = self.drop_link(ino, removed, now)?;
        Ok(if keeps_names { dropped } else { Vec::new() })
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir(&mut self, parent: InodeNo, name: &[u8], now: Timestamp) -> Result<PatchId> {
        let entry = self.lookup(parent, name)?.ok_or(DiskError::NotFound)?;
        if !self.read_inode(entry.ino)?.is_dir() {
            return Err(DiskError::NotDir);
        }
        if !self.is_empty_dir(entry.ino)? {
            return Err(DiskError::NotEmpty);
        }
        let (entry, removed, never_on_disk) = self.remove_entry(parent, name, &[], now)?;
        let after: &[PatchId] = never_on_disk.as_deref().unwrap_or(&removed);
        let gone = self.delete_inode(entry.ino, true, after, now)?;
        // The child's ".." no longer counts once the child is deleted.
        let mut pinode = self.read_inode(parent)?;
        pinode.core.links_count -= 1;
        let plink = self.write_inode(parent, &pinode, &gone)?;
        self.stands_for(&[&removed, &gone, &plink])
    }

    /// Writes `data` at `offset` of regular file `ino`; returns the bytes
    /// written (short only when the disk filled up part-way).
    pub fn write(
        &mut self,
        ino: InodeNo,
        offset: u64,
        data: &[u8],
        now: Timestamp,
    ) -> Result<(usize, PatchId)> {
        self.write_src(ino, offset, Src::Bytes(data), now)
    }

    /// [`write`](Self::write) of a [`Pages`] run. A block a page fills
    /// whole takes the page as it is rather than a copy, and the device
    /// writes it from there: the caller keeps sharing it but must not change
    /// it in place (copy first, as `Arc::make_mut` does).
    pub fn write_pages(
        &mut self,
        ino: InodeNo,
        run: Pages<'_>,
        now: Timestamp,
    ) -> Result<(usize, PatchId)> {
        let Pages { offset, pages, len } = run;
        let bs = self.bs;
        if !offset.is_multiple_of(bs as u64)
            || pages.iter().any(|p| p.len() != bs)
            || len > pages.len() * bs
        {
            return Err(DiskError::Invalid(
                "write_pages: block-sized pages from a block boundary",
            ));
        }
        if len == 0 {
            return self.write(ino, offset, &[], now);
        }
        self.write_src(ino, offset, Src::Pages { pages, len }, now)
    }

    fn write_src(
        &mut self,
        ino: InodeNo,
        offset: u64,
        data: Src<'_>,
        now: Timestamp,
    ) -> Result<(usize, PatchId)> {
        let mut inode = self.read_inode(ino)?;
        if inode.is_dir() {
            return Err(DiskError::IsDir);
        }
        let max = stitch_format::indirect::max_blocks(self.bs) * self.bs as u64;
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|end| end > max)
        {
            return Err(DiskError::TooLarge);
        }
        // Every block new, each 1,024 with an indirect block, and the
        // chain to the first (a double or triple indirect block).
        let blocks = (data.len() as u64).div_ceil(self.bs as u64) + 1;
        self.room_before_op(blocks + blocks / (self.bs as u64 / 4) + 3)?;
        let (n, ps) = self.write_data(ino, &mut inode, offset, data, now)?;
        Ok((n, self.stands_for(&[&ps])?))
    }

    fn check_new_name(&mut self, parent: InodeNo, name: &[u8]) -> Result<()> {
        check_name(name)?;
        if self.lookup(parent, name)?.is_some() {
            return Err(DiskError::Exists);
        }
        Ok(())
    }

    /// One link fewer, after `removed`; the inode goes with its last link.
    pub(crate) fn drop_link(
        &mut self,
        ino: InodeNo,
        removed: &[PatchId],
        now: Timestamp,
    ) -> Result<Vec<PatchId>> {
        let mut inode = self.read_inode(ino)?;
        if inode.core.links_count > 1 {
            inode.core.links_count -= 1;
            inode.set_time(TimeField::Change, now);
            return self.write_inode(ino, &inode, removed);
        }
        if self.open.get(&ino).is_some_and(|&n| n > 0) {
            return self.orphan(ino, removed, now);
        }
        self.delete_inode(ino, false, removed, now)
    }

    /// Marks an inode deleted (no links, deletion time) after `deps`, then
    /// frees its blocks and itself after that.
    pub(crate) fn delete_inode(
        &mut self,
        ino: InodeNo,
        dir: bool,
        deps: &[PatchId],
        now: Timestamp,
    ) -> Result<Vec<PatchId>> {
        let mut inode = self.read_inode(ino)?;
        let blocks = self.owned_blocks(&inode)?;
        let xattrs = inode.file_acl();
        inode.core.links_count = 0;
        inode.core.dtime = now.secs() as u32;
        let mut out = self.write_inode(ino, &inode, deps)?;
        let cleared = if out.is_empty() {
            deps.to_vec()
        } else {
            out.clone()
        };
        for b in blocks {
            out.push(self.free_block(b, &cleared)?);
        }
        if xattrs != 0 {
            out.push(self.release_xattr_block(ino, xattrs, &cleared)?);
        }
        out.push(self.free_inode(ino, dir, &cleared)?);
        Ok(out)
    }

    /// An extended-attribute block an inode no longer names (the file was
    /// deleted, or its attributes moved to a new block): freed if the
    /// inode was its only user, else its reference count drops by one.
    /// Either waits for the inode's change (`cleared`), so a crash leaves
    /// the count too high (a leak e2fsck repairs), never too low.
    pub(crate) fn release_xattr_block(
        &mut self,
        ino: InodeNo,
        block: u32,
        cleared: &[PatchId],
    ) -> Result<PatchId> {
        let mut h = self.xattr_block(ino, block, stitch_format::xattr::XattrHeader::parse)?;
        if h.refcount == 1 {
            return self.free_block(block, cleared);
        }
        h.refcount -= 1;
        Ok(self
            .m
            .byte(BlockNo(u64::from(block)), 0, &h.to_bytes(), cleared, META)?)
    }

    /// An empty patch depending on every patch of an operation.
    fn stands_for(&mut self, parts: &[&[PatchId]]) -> Result<PatchId> {
        let all: Vec<PatchId> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        Ok(self.m.group(&all)?)
    }
}
