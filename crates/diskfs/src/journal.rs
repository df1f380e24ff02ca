//! The ext3 journal as diskfs sees it: where it is (inode 8's blocks),
//! replay at mount, and the superblock flags around a journaled mount.
//!
//! Order at mount: replay (home blocks durable, then the journal marked
//! empty, then `needs_recovery` cleared), so a crash during replay replays
//! again. In journal mode `needs_recovery` is then set durably before the
//! journal superblock names a log, and cleared at unmount only after the
//! log is checkpointed and marked empty: the kernel wipes a journal whose
//! file system does not say it needs recovery, so the flag must never be
//! clear while the log holds a committed transaction.

use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, META};
use stitch_format::features::incompat;
use stitch_format::inode::JOURNAL_INO;
use stitch_format::jbd2::recovery::{recover, Recovery};
use stitch_format::jbd2::JournalSuperblock;
use stitch_patch::BlockNo;

/// What replay at mount did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    pub transactions: u32,
    pub blocks: usize,
    pub revoked: u32,
    /// A transaction whose checksum failed: it and what follows were not
    /// replayed (a torn commit).
    pub failed_commit: Option<u32>,
}

impl DiskFs {
    /// The journal's blocks in logical order (block 0 holds its superblock).
    pub(crate) fn journal_area(&mut self) -> Result<Vec<BlockNo>> {
        if !self.sb.has_journal() || self.sb.journal_inum != JOURNAL_INO.0 {
            return Err(DiskError::Invalid(
                "the image has no journal in inode 8 (make one with `stitchfs mkfs --journal`)",
            ));
        }
        let inode = self.read_inode(JOURNAL_INO)?;
        let n = inode.size() / self.bs as u64;
        let mut area = Vec::with_capacity(n as usize);
        for logical in 0..n {
            let phys = self.bmap(&inode, logical)?.ok_or_else(|| {
                DiskError::Corrupt(format!("journal block {logical} is not mapped"))
            })?;
            area.push(BlockNo(u64::from(phys)));
        }
        if area.is_empty() {
            return Err(DiskError::Corrupt("the journal inode is empty".into()));
        }
        Ok(area)
    }

    pub(crate) fn read_journal_superblock(
        &mut self,
        area: &[BlockNo],
    ) -> Result<JournalSuperblock> {
        let bytes = self.m.read(area[0])?.to_vec();
        Ok(JournalSuperblock::decode(
            &bytes,
            self.bs as u32,
            area.len() as u32,
        )?)
    }

    /// Replays the journal if it holds transactions; returns what it did.
    /// Afterwards the log is empty and `needs_recovery` is clear in memory
    /// (the caller writes the superblock).
    pub(crate) fn replay_journal(&mut self) -> Result<Option<Replayed>> {
        if !self.sb.has_journal() {
            return Ok(None);
        }
        let area = self.journal_area()?;
        let jsb = self.read_journal_superblock(&area)?;
        if jsb.start == 0 {
            self.sb.feature_incompat &= !incompat::RECOVER.bit;
            return Ok(None);
        }
        let cache = self.m.cache_mut();
        let rec: Recovery = recover(&jsb, |n: u32| -> Result<Vec<u8>> {
            let at = area
                .get(n as usize)
                .ok_or_else(|| DiskError::Corrupt(format!("journal block {n} out of range")))?;
            Ok(cache.read(*at)?.to_vec())
        })
        .map_err(|e| DiskError::Corrupt(format!("journal replay: {e}")))?;
        for (&b, data) in &rec.blocks {
            if b >= u64::from(self.geo.blocks_count) || data.len() != self.bs {
                return Err(DiskError::Corrupt(format!(
                    "journal replays block {b}, outside the file system"
                )));
            }
            self.m
                .cache_mut()
                .create_byte(BlockNo(b), 0, data, &[], META)?;
        }
        self.m.cache_mut().sync()?;
        let mut reset = jsb.clone();
        reset.start = 0;
        reset.sequence = rec.next_sequence;
        reset.update_checksum();
        self.m
            .cache_mut()
            .create_byte(area[0], 0, &reset.to_bytes(), &[], META)?;
        self.m.cache_mut().sync()?;
        Ok(Some(Replayed {
            transactions: rec.transactions,
            blocks: rec.blocks.len(),
            revoked: rec.revoked,
            failed_commit: rec.failed_commit,
        }))
    }
}
