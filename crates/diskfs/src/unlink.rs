//! Removing names: unlink and rmdir, and what follows an inode's last
//! name going (its deletion, or the orphan list while it is open).
//!
//! Soft-updates order: remove the entry first; lower the link count after
//! it (rule 3: the count is never below the references on disk); when the
//! last link goes, mark the inode deleted, and free its blocks and inode
//! only after that (rule 2: a resource is reusable only once nothing on
//! disk points to it). The operation waits for the entry's removal (and a
//! surviving inode's lower count); the deletion follows on its own (see
//! [`DiskFs::drop_name`]).

use crate::error::{DiskError, Result};
use crate::fs::DiskFs;
use crate::Refusal;
use stitch_format::inode::TimeField;
use stitch_format::{InodeNo, Timestamp, NO_BLOCK};
use stitch_patch::PatchId;

impl DiskFs {
    /// Removes the name `name` of a non-directory from `parent`.
    pub fn unlink(&mut self, parent: InodeNo, name: &[u8], now: Timestamp) -> Result<PatchId> {
        let entry = self
            .lookup(parent, name)?
            .ok_or(DiskError::Refused(Refusal::NotFound))?;
        let inode = self.read_inode(entry.ino)?;
        if inode.is_dir() {
            return Err(DiskError::Refused(Refusal::IsDir));
        }
        let links = inode.core.links_count;
        let elsewhere = self
            .adds
            .names_elsewhere(self.m.cache(), entry.ino, links, parent, name);
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
        let entry = self
            .lookup(parent, name)?
            .ok_or(DiskError::Refused(Refusal::NotFound))?;
        if !self.read_inode(entry.ino)?.is_dir() {
            return Err(DiskError::Refused(Refusal::NotDir));
        }
        if !self.is_empty_dir(entry.ino)? {
            return Err(DiskError::Refused(Refusal::NotEmpty));
        }
        let (entry, removed, never_on_disk) = self.remove_entry(parent, name, &[], now)?;
        let after: &[PatchId] = never_on_disk.as_deref().unwrap_or(&removed);
        let gone = self.delete_inode(entry.ino, true, after, now)?;
        // The child's ".." no longer counts once the child is deleted.
        let mut pinode = self.read_inode(parent)?;
        pinode.core.links_count -= 1;
        let plink = self.inodes.write(&mut self.m, parent, &pinode, &gone)?;
        self.stands_for(&[&removed, &gone, &plink])
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
            return self.inodes.write(&mut self.m, ino, &inode, removed);
        }
        if self.orphans.is_open(ino) {
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
        let mut out = self.inodes.write(&mut self.m, ino, &inode, deps)?;
        let cleared = if out.is_empty() {
            deps.to_vec()
        } else {
            out.clone()
        };
        for b in blocks {
            out.push(self.alloc.free_block(&mut self.m, b, &cleared)?);
        }
        if xattrs != NO_BLOCK {
            out.push(self.release_xattr_block(ino, xattrs, &cleared)?);
        }
        out.push(self.free_inode(ino, dir, &cleared)?);
        Ok(out)
    }
}
