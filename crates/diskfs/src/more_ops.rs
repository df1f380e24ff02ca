//! The rest of the namespace and attribute operations: link, symlink and
//! readlink, mknod, setattr, truncate.
//!
//! Soft-updates order:
//! - link: the link count goes up first, the new entry after it (the count
//!   is never below the references on disk);
//! - symlink, mknod: as create (inode initialized before its entry; a slow
//!   symlink's block written before the inode points at it);
//! - truncate down: the pointers to the cut blocks are cleared (in indirect
//!   blocks first, then in the inode together with the new size, so no
//!   block is ever mapped past the size on disk), and the blocks are freed
//!   only after that (rule 2).

use crate::dir::check_name;
use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, DATA, META};
use stitch_format::indirect::{pointers, ptrs_per_block, set_pointer};
use stitch_format::inode::mode::S_IFMT;
use stitch_format::inode::TimeField;
use stitch_format::symlink::{self, FAST_MAX};
use stitch_format::{FileType, Inode, InodeNo, Timestamp};
use stitch_patch::{BlockNo, PatchId};

/// ext2's largest link count.
const LINK_MAX: u16 = 32_000;

/// What `setattr` changes; `None` leaves a field alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub perm: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<Timestamp>,
    pub mtime: Option<Timestamp>,
    /// The change time; `None` means the operation's `now`.
    pub ctime: Option<Timestamp>,
}

/// The kind of special file `mknod` makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    Fifo,
    Socket,
    Char { major: u32, minor: u32 },
    Block { major: u32, minor: u32 },
}

impl DiskFs {
    /// A new name `name` in `parent` for the non-directory `ino`.
    pub fn link(
        &mut self,
        ino: InodeNo,
        parent: InodeNo,
        name: &[u8],
        now: Timestamp,
    ) -> Result<PatchId> {
        let mut inode = self.read_inode(ino)?;
        self.check_free_name(parent, name)?;
        if inode.is_dir() {
            return Err(DiskError::NotPermitted("hard link to a directory"));
        }
        if inode.core.links_count >= LINK_MAX {
            return Err(DiskError::TooManyLinks);
        }
        inode.core.links_count += 1;
        inode.set_time(TimeField::Change, now);
        let up = self.write_inode(ino, &inode, &[])?;
        let ft = inode
            .file_type()
            .ok_or_else(|| DiskError::Corrupt(format!("inode {} has no type", ino.0)))?;
        let entry = self.add_entry(parent, name, ino, ft, &up, now)?;
        self.group_of(&[&up, &entry])
    }

    /// A symbolic link `name` in `parent` pointing at `target`.
    pub fn symlink(
        &mut self,
        parent: InodeNo,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
        now: Timestamp,
    ) -> Result<(InodeNo, PatchId)> {
        if target.is_empty() {
            return Err(DiskError::NotFound);
        }
        if target.contains(&0) {
            return Err(DiskError::Invalid("NUL in a symlink target"));
        }
        if target.len() >= self.bs {
            return Err(DiskError::NameTooLong);
        }
        self.check_free_name(parent, name)?;
        let (ino, ib) = self.alloc_inode(parent, false)?;
        let mut inode = Inode::new(FileType::Symlink, 0o777, self.geo.inode_size, now);
        inode.set_owner(uid, gid);
        let mut deps = vec![ib];
        if target.len() < FAST_MAX {
            symlink::set_fast_target(&mut inode, target)?;
        } else {
            let (blk, bb) = self.alloc_block(self.inode_group_start(ino))?;
            let data = self.m.byte(
                BlockNo(u64::from(blk)),
                0,
                &symlink::slow_block(target, self.bs)?,
                &[],
                // A target is part of the namespace, not file data: the
                // journal journals it in every data mode (as e2fsck checks
                // it like any metadata).
                META,
            )?;
            inode.core.block[0] = blk;
            inode.core.blocks_lo = (self.bs / 512) as u32;
            inode.set_size(target.len() as u64);
            deps.extend([bb, data]);
        }
        let init = self.write_inode_clearing_attrs(ino, &inode, &deps)?;
        let entry = self.add_entry(parent, name, ino, FileType::Symlink, &init, now)?;
        Ok((ino, self.group_of(&[&deps, &init, &entry])?))
    }

    /// The target of symlink `ino`.
    pub fn readlink(&mut self, ino: InodeNo) -> Result<Vec<u8>> {
        let inode = self.read_inode(ino)?;
        if inode.file_type() != Some(FileType::Symlink) {
            return Err(DiskError::Invalid("not a symlink"));
        }
        if symlink::is_fast(&inode) {
            return Ok(symlink::fast_target(&inode)?);
        }
        let blk = inode.core.block[0];
        Ok(symlink::slow_target(
            &inode,
            self.m.read(BlockNo(u64::from(blk)))?,
        )?)
    }

    /// A fifo, socket or device node `name` in `parent`.
    #[allow(clippy::too_many_arguments)]
    pub fn mknod(
        &mut self,
        parent: InodeNo,
        name: &[u8],
        kind: Special,
        perm: u16,
        uid: u32,
        gid: u32,
        now: Timestamp,
    ) -> Result<(InodeNo, PatchId)> {
        self.check_free_name(parent, name)?;
        let (ft, dev) = match kind {
            Special::Fifo => (FileType::Fifo, None),
            Special::Socket => (FileType::Socket, None),
            Special::Char { major, minor } => (FileType::CharDevice, Some((major, minor))),
            Special::Block { major, minor } => (FileType::BlockDevice, Some((major, minor))),
        };
        let (ino, ib) = self.alloc_inode(parent, false)?;
        let mut inode = Inode::new(ft, perm, self.geo.inode_size, now);
        inode.set_owner(uid, gid);
        if let Some((major, minor)) = dev {
            inode.set_device(major, minor);
        }
        let init = self.write_inode_clearing_attrs(ino, &inode, &[ib])?;
        let entry = self.add_entry(parent, name, ino, ft, &init, now)?;
        Ok((ino, self.group_of(&[&[ib], &init, &entry])?))
    }

    /// Changes permission bits, owner and times; the change time is
    /// `set.ctime`, else `now`.
    pub fn setattr(&mut self, ino: InodeNo, set: SetAttr, now: Timestamp) -> Result<PatchId> {
        let mut inode = self.read_inode(ino)?;
        if let Some(perm) = set.perm {
            inode.core.mode = (inode.core.mode & S_IFMT) | (perm & 0o7777);
        }
        if set.uid.is_some() || set.gid.is_some() {
            let (uid, gid) = (
                set.uid.unwrap_or(inode.uid()),
                set.gid.unwrap_or(inode.gid()),
            );
            inode.set_owner(uid, gid);
        }
        if let Some(t) = set.atime {
            inode.set_time(TimeField::Access, t);
        }
        if let Some(t) = set.mtime {
            inode.set_time(TimeField::Modify, t);
        }
        inode.set_time(TimeField::Change, set.ctime.unwrap_or(now));
        let ps = self.write_inode(ino, &inode, &[])?;
        self.group_of(&[&ps])
    }

    /// Sets the size of regular file `ino`: growing leaves a hole, shrinking
    /// frees the blocks past the new end.
    pub fn truncate(&mut self, ino: InodeNo, size: u64, now: Timestamp) -> Result<PatchId> {
        let mut inode = self.read_inode(ino)?;
        if inode.is_dir() {
            return Err(DiskError::IsDir);
        }
        if inode.file_type() != Some(FileType::Regular) {
            return Err(DiskError::Invalid("truncate of a special file"));
        }
        let max = stitch_format::indirect::max_blocks(self.bs) * self.bs as u64;
        if size > max {
            return Err(DiskError::TooLarge);
        }
        let mut out = Vec::new();
        if size < inode.size() {
            // A cut inside the indirect map copies the kept part of each
            // indirect block on the way.
            self.room_before_op(3)?;
            out.extend(self.zero_tail(&inode, size)?);
            let (freed, cleared) = self.cut_map(&mut inode, size.div_ceil(self.bs as u64))?;
            inode.core.blocks_lo -= freed.len() as u32 * (self.bs / 512) as u32;
            inode.set_size(size);
            inode.touch(now);
            let ip = self.write_inode(ino, &inode, &cleared)?;
            let after: Vec<PatchId> = cleared.iter().chain(&ip).copied().collect();
            for b in freed {
                out.push(self.free_block(b, &after)?);
            }
            out.extend(after);
        } else if size > inode.size() {
            inode.set_size(size);
            inode.touch(now);
            out.extend(self.write_inode(ino, &inode, &[])?);
        }
        self.group_of(&[&out])
    }

    fn check_free_name(&mut self, parent: InodeNo, name: &[u8]) -> Result<()> {
        check_name(name)?;
        if self.lookup(parent, name)?.is_some() {
            return Err(DiskError::Exists);
        }
        Ok(())
    }

    /// Zeros the bytes of the last kept block past the new size, so a later
    /// extension reads zeros there (POSIX), not the cut data.
    fn zero_tail(&mut self, inode: &Inode, size: u64) -> Result<Vec<PatchId>> {
        let in_block = (size % self.bs as u64) as usize;
        if in_block == 0 {
            return Ok(Vec::new());
        }
        match self.bmap(inode, size / self.bs as u64)? {
            Some(p) => Ok(vec![self.m.byte(
                BlockNo(u64::from(p)),
                in_block,
                &vec![0u8; self.bs - in_block],
                &[],
                DATA,
            )?]),
            None => Ok(Vec::new()),
        }
    }

    /// Unmaps every logical block from `keep` on, without touching any
    /// block that stays mapped: a partly cut indirect tree is copied (the
    /// kept pointers only) into new indirect blocks, which the inode will
    /// point at. So the inode write that switches to them, with the new size
    /// and block count, is the single atomic step, and no crash can leave a
    /// block count or size that disagrees with the map. Returns the blocks to
    /// free (cut data, cut subtrees, replaced indirect blocks) and the
    /// patches the inode write must follow (the new indirect blocks).
    fn cut_map(&mut self, inode: &mut Inode, keep: u64) -> Result<(Vec<u32>, Vec<PatchId>)> {
        let (mut freed, mut written) = (Vec::new(), Vec::new());
        for slot in 0..12 {
            if slot as u64 >= keep && inode.core.block[slot] != 0 {
                freed.push(inode.core.block[slot]);
                inode.core.block[slot] = 0;
            }
        }
        let p = ptrs_per_block(self.bs);
        let mut base = 12u64;
        let sectors = (self.bs / 512) as u32;
        for (slot, depth) in [(12usize, 1u32), (13, 2), (14, 3)] {
            let span = p.pow(depth);
            let top = inode.core.block[slot];
            if top != 0 && keep < base + span {
                if keep <= base {
                    self.collect_tree(top, depth, &mut freed)?;
                    inode.core.block[slot] = 0;
                } else {
                    let (copy, made) =
                        self.copy_cut(top, depth, base, keep, &mut freed, &mut written)?;
                    inode.core.block[slot] = copy;
                    inode.core.blocks_lo += made * sectors;
                }
            }
            base += span;
        }
        Ok((freed, written))
    }

    /// A copy of indirect block `block` (mapping logical blocks from
    /// `base`) holding only the pointers below `keep`, its partly cut child
    /// copied the same way. The original goes to `freed` with everything
    /// cut; the copies' writes go to `written`. Returns the copy's number and
    /// how many blocks were allocated for copies.
    fn copy_cut(
        &mut self,
        block: u32,
        depth: u32,
        base: u64,
        keep: u64,
        freed: &mut Vec<u32>,
        written: &mut Vec<PatchId>,
    ) -> Result<(u32, u32)> {
        let per = ptrs_per_block(self.bs).pow(depth - 1);
        let mut bytes = self.m.read(BlockNo(u64::from(block)))?.to_vec();
        let children: Vec<u32> = pointers(&bytes).collect();
        let mut made = 0;
        let mut deps = Vec::new();
        for (i, &child) in children.iter().enumerate() {
            let child_base = base + i as u64 * per;
            if child == 0 || child_base + per <= keep {
                continue;
            }
            let replacement = if child_base >= keep {
                if depth > 1 {
                    self.collect_tree(child, depth - 1, freed)?;
                } else {
                    freed.push(child);
                }
                0
            } else {
                let before = written.len();
                let (copy, m) =
                    self.copy_cut(child, depth - 1, child_base, keep, freed, written)?;
                deps.extend_from_slice(&written[before..]);
                made += m;
                copy
            };
            set_pointer(&mut bytes, i as u32, stitch_format::BlockNo(replacement));
        }
        let (copy, ab) = self.alloc_block(block)?;
        let w = self
            .m
            .byte(BlockNo(u64::from(copy)), 0, &bytes, &deps, META)?;
        written.extend([ab, w]);
        freed.push(block);
        Ok((copy, made + 1))
    }

    fn group_of(&mut self, parts: &[&[PatchId]]) -> Result<PatchId> {
        let all: Vec<PatchId> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        Ok(self.m.group(&all)?)
    }
}
