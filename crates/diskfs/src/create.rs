//! Making inodes with a name: create, mkdir, symlink, mknod.
//!
//! Soft-updates order: allocate the inode (and a directory's or a slow
//! symlink's block), initialize them after their bitmap bits (a slow
//! symlink's block written before the inode points at it), raise the
//! parent's link count (mkdir), then add the entry after the initialized
//! inode (rule 1).

use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, LINK_MAX, META};
use crate::Refusal;
use stitch_format::dir::new_dir_block;
use stitch_format::symlink::{self, FAST_MAX};
use stitch_format::{FileType, Inode, InodeNo, Timestamp};
use stitch_patch::PatchId;

/// The kind of special file `mknod` makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    Fifo,
    Socket,
    Char { major: u32, minor: u32 },
    Block { major: u32, minor: u32 },
}

/// Who owns a new inode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

impl DiskFs {
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
        let (ino, ib) =
            self.alloc
                .alloc_inode(&mut self.m, parent, false, self.wanted_ino.take())?;
        let mut inode = Inode::new(FileType::Regular, perm, self.layout.inode_size, now);
        inode.set_owner(uid, gid);
        let init = self
            .inodes
            .write_clearing_attrs(&mut self.m, ino, &inode, &[ib])?;
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
            return Err(DiskError::Refused(Refusal::TooManyLinks));
        }
        let (ino, ib) =
            self.alloc
                .alloc_inode(&mut self.m, parent, true, self.wanted_ino.take())?;
        // The new ".." is a reference to the parent: count it first.
        pinode.core.links_count += 1;
        let plink = self.inodes.write(&mut self.m, parent, &pinode, &[])?;
        let (blk, bb) = self
            .alloc
            .alloc_block(&mut self.m, self.alloc.inode_group_start(ino))?;
        let contents = new_dir_block(self.bs, ino, parent);
        let data = self.m.byte(blk, 0, &contents, &plink, META)?;
        let mut inode = Inode::new(FileType::Directory, perm, self.layout.inode_size, now);
        inode.set_owner(uid, gid);
        inode.core.links_count = 2;
        inode.set_block_ptr(0, blk);
        inode.set_size(self.bs as u64);
        inode.core.blocks_lo = (self.bs / 512) as u32;
        let init = self
            .inodes
            .write_clearing_attrs(&mut self.m, ino, &inode, &[ib, bb, data])?;
        let entry = self.add_entry(parent, name, ino, FileType::Directory, &init, now)?;
        Ok((
            ino,
            self.stands_for(&[&[ib, bb, data], &plink, &init, &entry])?,
        ))
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
            return Err(DiskError::Refused(Refusal::NotFound));
        }
        if target.contains(&0) {
            return Err(DiskError::Refused(Refusal::Invalid(
                "NUL in a symlink target",
            )));
        }
        if target.len() >= self.bs {
            return Err(DiskError::Refused(Refusal::NameTooLong));
        }
        self.check_new_name(parent, name)?;
        let (ino, ib) =
            self.alloc
                .alloc_inode(&mut self.m, parent, false, self.wanted_ino.take())?;
        let mut inode = Inode::new(FileType::Symlink, 0o777, self.layout.inode_size, now);
        inode.set_owner(uid, gid);
        let mut deps = vec![ib];
        if target.len() < FAST_MAX {
            symlink::set_fast_target(&mut inode, target)?;
        } else {
            let (blk, bb) = self
                .alloc
                .alloc_block(&mut self.m, self.alloc.inode_group_start(ino))?;
            let data = self.m.byte(
                blk,
                0,
                &symlink::slow_block(target, self.bs)?,
                &[],
                // A target is part of the namespace, not file data: the
                // journal journals it in every data mode (as e2fsck checks
                // it like any metadata).
                META,
            )?;
            inode.set_block_ptr(0, blk);
            inode.core.blocks_lo = (self.bs / 512) as u32;
            inode.set_size(target.len() as u64);
            deps.extend([bb, data]);
        }
        let init = self
            .inodes
            .write_clearing_attrs(&mut self.m, ino, &inode, &deps)?;
        let entry = self.add_entry(parent, name, ino, FileType::Symlink, &init, now)?;
        Ok((ino, self.stands_for(&[&deps, &init, &entry])?))
    }

    /// A fifo, socket or device node `name` in `parent`.
    pub fn mknod(
        &mut self,
        parent: InodeNo,
        name: &[u8],
        kind: Special,
        perm: u16,
        owner: Owner,
        now: Timestamp,
    ) -> Result<(InodeNo, PatchId)> {
        self.check_new_name(parent, name)?;
        let (ft, dev) = match kind {
            Special::Fifo => (FileType::Fifo, None),
            Special::Socket => (FileType::Socket, None),
            Special::Char { major, minor } => (FileType::CharDevice, Some((major, minor))),
            Special::Block { major, minor } => (FileType::BlockDevice, Some((major, minor))),
        };
        let (ino, ib) =
            self.alloc
                .alloc_inode(&mut self.m, parent, false, self.wanted_ino.take())?;
        let mut inode = Inode::new(ft, perm, self.layout.inode_size, now);
        inode.set_owner(owner.uid, owner.gid);
        if let Some((major, minor)) = dev {
            inode.set_device(major, minor);
        }
        let init = self
            .inodes
            .write_clearing_attrs(&mut self.m, ino, &inode, &[ib])?;
        let entry = self.add_entry(parent, name, ino, ft, &init, now)?;
        Ok((ino, self.stands_for(&[&[ib], &init, &entry])?))
    }
}
