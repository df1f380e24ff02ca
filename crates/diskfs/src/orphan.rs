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
use crate::Refusal;
use rustc_hash::FxHashMap;
use stitch_format::inode::TimeField;
use stitch_format::{InodeNo, Timestamp};
use stitch_patch::PatchId;

/// What made an orphan, for the changes that must follow it.
#[derive(Debug, Default)]
pub(crate) struct Orphaned {
    /// Its place on the list: its link onward and the head naming it. What
    /// a later orphan's removal from behind it waits for, so that the list
    /// on disk then runs through it too.
    listed: Vec<PatchId>,
    /// The drop of its last link (after its name's removal): what freeing
    /// it and writing to it wait for.
    dropped: Vec<PatchId>,
}

/// The inodes the layer above holds open, and the orphans made since
/// mount (memory only).
#[derive(Default)]
pub(crate) struct Orphans {
    /// Open counts.
    open: FxHashMap<InodeNo, u32>,
    /// Orphans made since mount, with the patches that put each on the
    /// list and dropped its last link.
    made: FxHashMap<InodeNo, Orphaned>,
}

impl Orphans {
    /// Whether the layer above holds `ino` open.
    pub(crate) fn is_open(&self, ino: InodeNo) -> bool {
        self.open.get(&ino).is_some_and(|&n| n > 0)
    }

    fn opened(&mut self, ino: InodeNo) {
        *self.open.entry(ino).or_default() += 1;
    }

    /// One close of `ino`: at its last, what made it an orphan (nothing,
    /// if it is not one).
    fn closed(&mut self, ino: InodeNo) -> Result<Option<Orphaned>> {
        let n = self
            .open
            .get_mut(&ino)
            .ok_or(DiskError::Refused(Refusal::Invalid(
                "release of a file not open",
            )))?;
        *n -= 1;
        if *n > 0 {
            return Ok(None);
        }
        self.open.remove(&ino);
        Ok(Some(self.made.remove(&ino).unwrap_or_default()))
    }
}

impl DiskFs {
    /// The layer above opened `ino`: an unlink of its last name keeps it
    /// until [`DiskFs::release`].
    pub fn open(&mut self, ino: InodeNo) -> Result<()> {
        self.read_inode(ino)?;
        self.orphans.opened(ino);
        Ok(())
    }

    /// The layer above closed `ino`; the last close of an unlinked file
    /// deletes it.
    pub fn release(&mut self, ino: InodeNo, now: Timestamp) -> Result<Option<PatchId>> {
        let Some(made) = self.orphans.closed(ino)? else {
            return Ok(None);
        };
        if self.read_inode(ino)?.core.links_count > 0 {
            return Ok(None);
        }
        // Marked deleted only once off the list on disk and once its link
        // count of zero is there: taken out of the middle of the list, only
        // the inode before it changes, which says nothing of this one.
        let mut off = self.unlist(ino)?;
        off.extend(made.dropped);
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
        now: Timestamp,
    ) -> Result<Vec<PatchId>> {
        let mut inode = self.read_inode(ino)?;
        inode.core.dtime = self.sb.last_orphan;
        // The list head must not name an inode not yet allocated and
        // initialized on disk: the chain link covers the whole slot.
        let linked = self.inodes.write_whole(&mut self.m, ino, &inode, &[])?;
        self.sb.last_orphan = ino.0;
        let head = self.write_super_after(&linked)?;
        inode.core.links_count = 0;
        inode.set_time(TimeField::Change, now);
        let deps: Vec<PatchId> = removed
            .iter()
            .chain(&linked)
            .chain(&head)
            .copied()
            .collect();
        let mut out = self.inodes.write(&mut self.m, ino, &inode, &deps)?;
        let dropped = if out.is_empty() { deps } else { out.clone() };
        let listed = linked.iter().chain(&head).copied().collect();
        self.orphans.made.insert(ino, Orphaned { listed, dropped });
        out.extend(linked);
        out.extend(head);
        Ok(out)
    }

    /// Called before the data or attributes of `ino` are written: if it
    /// is an orphan whose last link's drop (and so its name's removal) is
    /// not on disk yet, puts that there first. Otherwise a crash could show
    /// the file under its old name holding what was written after the name
    /// went. Soft updates only: a journal transaction holds both whole.
    pub fn settle_unlink(&mut self, ino: InodeNo) -> Result<()> {
        if self.m.consistency() != crate::Consistency::SoftUpdates {
            return Ok(());
        }
        let Some(made) = self.orphans.made.get(&ino) else {
            return Ok(());
        };
        // Returns at once for what is already on disk.
        let dropped = made.dropped.clone();
        self.sync_patches(&dropped)
    }

    /// Takes `ino` off the orphan list.
    fn unlist(&mut self, ino: InodeNo) -> Result<Vec<PatchId>> {
        let next = self.read_inode(ino)?.core.dtime;
        if self.sb.last_orphan == ino.0 {
            self.sb.last_orphan = next;
            return self.write_super_after(&[]);
        }
        // Out of the middle: the inode before it skips it. That takes it
        // off the list on disk only once the list there runs through the
        // inodes ahead of it, so the result also names their places.
        let mut ahead: Vec<PatchId> = Vec::new();
        let mut at = self.sb.last_orphan;
        for _ in 0..self.layout.inodes_count() {
            if at == 0 {
                break;
            }
            if let Some(made) = self.orphans.made.get(&InodeNo(at)) {
                ahead.extend(&made.listed);
            }
            let mut prev = self.read_inode(InodeNo(at))?;
            if prev.core.dtime == ino.0 {
                prev.core.dtime = next;
                let mut out = self.inodes.write(&mut self.m, InodeNo(at), &prev, &[])?;
                out.extend(ahead);
                return Ok(out);
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
    pub(crate) fn free_orphans(&mut self, now: Timestamp) -> Result<()> {
        let mut seen = 0;
        while self.sb.last_orphan != 0 {
            seen += 1;
            if seen > self.layout.inodes_count() {
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
                self.inodes.write(&mut self.m, ino, &kept, &off)?;
                continue;
            }
            self.delete_inode(ino, inode.is_dir(), &off, now)?;
        }
        Ok(())
    }
}
