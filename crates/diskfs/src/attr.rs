//! An inode's attributes: what `stat` shows, `setattr`, and a symlink's
//! target.

use crate::error::{DiskError, Result};
use crate::fs::DiskFs;
use crate::Refusal;
use stitch_format::inode::mode::S_IFMT;
use stitch_format::inode::{TimeField, ROOT_INO};
use stitch_format::symlink;
use stitch_format::{FileType, InodeNo, Timestamp, NO_BLOCK};
use stitch_patch::PatchId;

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

impl DiskFs {
    pub fn root(&self) -> InodeNo {
        ROOT_INO
    }

    pub fn getattr(&mut self, ino: InodeNo) -> Result<Attr> {
        let i = self.read_inode(ino)?;
        let xattr_block = match i.file_acl() {
            NO_BLOCK => XattrBlock::None,
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
        let ps = self.inodes.write(&mut self.m, ino, &inode, &[])?;
        self.stands_for(&[&ps])
    }

    /// The target of symlink `ino`.
    pub fn readlink(&mut self, ino: InodeNo) -> Result<Vec<u8>> {
        let inode = self.read_inode(ino)?;
        if inode.file_type() != Some(FileType::Symlink) {
            return Err(DiskError::Refused(Refusal::Invalid("not a symlink")));
        }
        if symlink::is_fast(&inode) {
            return Ok(symlink::fast_target(&inode)?);
        }
        let blk = inode.block_ptr(0);
        Ok(symlink::slow_target(&inode, self.m.read(blk)?)?)
    }
}
