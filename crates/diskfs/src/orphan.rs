//! Open-but-unlinked files (orphans), in ext3's format so e2fsck and the
//! kernel understand them: the superblock's `s_last_orphan` heads a list
//! chained through the orphans' `i_dtime` fields.
//!
//! Order: the inode joins the list (its `i_dtime` names the old head, then
//! the superblock names it) before its link count drops to zero, so after a
//! crash a file with no name and no links is always on the list, and mount
//! frees it. Release takes it off the list and deletes it (blocks and inode
//! freed after it is marked deleted, as for any deletion).

use crate::error::{DiskError, Result};
use crate::fs::DiskFs;
use stitch_format::InodeNo;
use stitch_patch::PatchId;

impl DiskFs {
    /// The layer above opened `ino`: an unlink of its last name keeps it
    /// until [`DiskFs::release`].
    pub fn open(&mut self, ino: InodeNo) -> Result<()> {
        self.read_inode(ino)?;
        *self.open.entry(ino).or_default() += 1;
        Ok(())
    }

    /// The layer above closed `ino`; the last close of an unlinked file
    /// deletes it.
    pub fn release(&mut self, ino: InodeNo, now: u32) -> Result<Option<PatchId>> {
        let n = self
            .open
            .get_mut(&ino)
            .ok_or(DiskError::Invalid("release of a file not open"))?;
        *n -= 1;
        if *n > 0 {
            return Ok(None);
        }
        self.open.remove(&ino);
        if self.read_inode(ino)?.core.links_count > 0 {
            return Ok(None);
        }
        let off = self.unlist(ino)?;
        let dir = self.read_inode(ino)?.is_dir();
        let gone = self.delete_inode(ino, dir, &off, now)?;
        Ok(Some(self.m.group(&gone)?))
    }

    /// Puts `ino` on the orphan list, then drops its last link (after
    /// `removed`, the entry's removal).
    pub(crate) fn orphan(
        &mut self,
        ino: InodeNo,
        removed: &[PatchId],
        now: u32,
    ) -> Result<Vec<PatchId>> {
        let mut inode = self.read_inode(ino)?;
        inode.core.dtime = self.sb.last_orphan;
        // The list head must not name an inode not yet allocated and
        // initialized on disk: the chain link covers the whole slot.
        let linked = self.write_whole_inode(ino, &inode, &[])?;
        self.sb.last_orphan = ino.0;
        let head = self.write_super_after(&linked)?;
        inode.core.links_count = 0;
        inode.core.ctime = now;
        let deps: Vec<PatchId> = removed
            .iter()
            .chain(&linked)
            .chain(&head)
            .copied()
            .collect();
        let mut out = self.write_inode(ino, &inode, &deps)?;
        out.extend(linked);
        out.extend(head);
        Ok(out)
    }

    /// Takes `ino` off the orphan list.
    fn unlist(&mut self, ino: InodeNo) -> Result<Vec<PatchId>> {
        let next = self.read_inode(ino)?.core.dtime;
        if self.sb.last_orphan == ino.0 {
            self.sb.last_orphan = next;
            return self.write_super_after(&[]);
        }
        let mut at = self.sb.last_orphan;
        for _ in 0..self.geo.inodes_count() {
            if at == 0 {
                break;
            }
            let mut prev = self.read_inode(InodeNo(at))?;
            if prev.core.dtime == ino.0 {
                prev.core.dtime = next;
                return self.write_inode(InodeNo(at), &prev, &[]);
            }
            at = prev.core.dtime;
        }
        Err(DiskError::Corrupt(format!(
            "inode {} is not on the orphan list",
            ino.0
        )))
    }

    /// Frees every inode on the orphan list (at mount: their files were
    /// open when the system stopped).
    pub(crate) fn free_orphans(&mut self, now: u32) -> Result<()> {
        let mut seen = 0;
        while self.sb.last_orphan != 0 {
            seen += 1;
            if seen > self.geo.inodes_count() {
                return Err(DiskError::Corrupt("the orphan list loops".into()));
            }
            let ino = InodeNo(self.sb.last_orphan);
            let inode = self.read_inode(ino)?;
            let off = self.unlist(ino)?;
            if inode.core.links_count != 0 {
                // The crash came before the last link went: the name may
                // still be there, so the file stays (at worst a leak).
                let mut kept = self.read_inode(ino)?;
                kept.core.dtime = 0;
                self.write_inode(ino, &kept, &off)?;
                continue;
            }
            self.delete_inode(ino, inode.is_dir(), &off, now)?;
        }
        Ok(())
    }
}
