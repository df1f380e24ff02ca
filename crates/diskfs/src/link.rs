//! A new name for an existing inode.
//!
//! Soft-updates order: the link count goes up first, the new entry after
//! it (the count is never below the references on disk).

use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, LINK_MAX};
use crate::Refusal;
use stitch_format::inode::TimeField;
use stitch_format::{InodeNo, Timestamp};
use stitch_patch::PatchId;

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
        self.check_new_name(parent, name)?;
        if inode.is_dir() {
            return Err(DiskError::Refused(Refusal::NotPermitted(
                "hard link to a directory",
            )));
        }
        if inode.core.links_count >= LINK_MAX {
            return Err(DiskError::Refused(Refusal::TooManyLinks));
        }
        inode.core.links_count += 1;
        inode.set_time(TimeField::Change, now);
        let up = self.inodes.write(&mut self.m, ino, &inode, &[])?;
        let ft = inode
            .file_type()
            .ok_or_else(|| DiskError::Corrupt(format!("inode {} has no type", ino.0)))?;
        let entry = self.add_entry(parent, name, ino, ft, &up, now)?;
        self.stands_for(&[&up, &entry])
    }
}
