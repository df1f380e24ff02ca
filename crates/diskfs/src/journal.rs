//! The ext3 journal as diskfs sees it: where it is (inode 8's blocks),
//! replay at mount, and the superblock flags around a journaled mount.
//!
//! Order at mount: the replay is worked out and staged in the cache behind
//! a held patch ([`DiskFs::stage_replay`]), so that mount checks the file
//! system as the replay leaves it before anything is written; then
//! [`DiskFs::apply_replay`] writes it: home blocks durable, then the
//! journal marked empty, then (with the superblock mount writes)
//! `needs_recovery` cleared, so a crash during replay replays again. In
//! journal mode `needs_recovery` is then set durably before the journal
//! superblock names a log, and cleared at unmount only after the log is
//! checkpointed and marked empty: the kernel wipes a journal whose file
//! system does not say it needs recovery, so the flag must never be clear
//! while the log holds a committed transaction.

use crate::error::{Damage, DiskError, Result};
use crate::fs::{DiskFs, META};
use crate::Refusal;
use stitch_format::features::incompat;
use stitch_format::inode::JOURNAL_INO;
use stitch_format::jbd2::recovery::{recover, RecoverError, Recovery};
use stitch_format::jbd2::JournalSuperblock;
use stitch_format::{FileType, JournalBlockNo};
use stitch_patch::{BlockNo, PatchId};

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

/// A replay in the cache, not yet written: its home blocks wait on `hold`.
pub(crate) struct Staged {
    hold: PatchId,
    log_superblock: BlockNo,
    /// The journal superblock emptied, for when the home blocks are durable.
    emptied: JournalSuperblock,
    replayed: Replayed,
}

impl DiskFs {
    /// The journal's blocks in logical order (block 0 holds its
    /// superblock), every one inside the file system.
    pub(crate) fn journal_area(&mut self) -> Result<Vec<BlockNo>> {
        if !self.sb.has_journal() || self.sb.journal_inum != JOURNAL_INO.0 {
            return Err(DiskError::Refused(Refusal::Invalid(
                "the image has no journal in inode 8 (make one with `stitchfs mkfs --journal`)",
            )));
        }
        let bad = |why: String| DiskError::from(Damage::Journal(why));
        let inode = self
            .read_inode(JOURNAL_INO)
            .map_err(|e| bad(format!("inode does not decode: {e}")))?;
        if inode.core.links_count == 0 || inode.file_type() != Some(FileType::Regular) {
            return Err(bad(format!(
                "inode is not an in-use regular file (mode 0o{:o}, {} links)",
                inode.core.mode, inode.core.links_count
            )));
        }
        let n = inode.size() / self.bs as u64;
        if n == 0 {
            return Err(bad("inode is empty".into()));
        }
        let mut area = Vec::with_capacity(n as usize);
        for logical in 0..n {
            let phys = self
                .bmap(&inode, logical)?
                .filter(|&b| self.layout.in_data_area(b));
            let phys = phys.ok_or_else(|| {
                bad(format!(
                    "block {logical} is not mapped inside the file system"
                ))
            })?;
            area.push(phys);
        }
        Ok(area)
    }

    pub(crate) fn read_journal_superblock(
        &mut self,
        area: &[BlockNo],
    ) -> Result<JournalSuperblock> {
        let bytes = self.m.read(area[0])?.to_vec();
        JournalSuperblock::decode(&bytes, self.bs as u32, area.len() as u32)
            .map_err(|e| Damage::Journal(format!("superblock: {e}")).into())
    }

    /// If the journal holds transactions, works out their replay and puts
    /// it in the cache behind a held patch: every later read sees the
    /// replayed file system, and nothing of it reaches the disk until
    /// [`DiskFs::apply_replay`] (or ever, if mount refuses and drops the
    /// cache). `needs_recovery` is then clear in memory.
    pub(crate) fn stage_replay(&mut self) -> Result<Option<Staged>> {
        if !self.sb.has_journal() {
            if self.sb.needs_recovery() {
                return Err(Damage::Journal(
                    "is missing, yet the superblock asks for recovery".into(),
                )
                .into());
            }
            return Ok(None);
        }
        let area = self.journal_area()?;
        let jsb = self.read_journal_superblock(&area)?;
        if jsb.start == 0 {
            self.sb.feature_incompat &= !incompat::RECOVER.bit;
            return Ok(None);
        }
        let rec = self.recovery(&jsb, &area)?;
        let hold = self.m.cache_mut().create_held(&[])?;
        for (&b, data) in &rec.blocks {
            self.m.cache_mut().create_byte(b, 0, data, &[hold], META)?;
        }
        self.sb.feature_incompat &= !incompat::RECOVER.bit;
        Ok(Some(Staged {
            hold,
            log_superblock: area[0],
            emptied: jsb.reset(rec.next_sequence),
            replayed: Replayed {
                transactions: rec.transactions,
                blocks: rec.blocks.len(),
                revoked: rec.revoked,
                failed_commit: rec.failed_commit,
            },
        }))
    }

    /// What replaying the log writes, every block inside the file system.
    fn recovery(&mut self, jsb: &JournalSuperblock, area: &[BlockNo]) -> Result<Recovery> {
        let cache = self.m.cache_mut();
        let rec = recover(jsb, |n: JournalBlockNo| -> Result<Vec<u8>> {
            let at = area.get(n.0 as usize).ok_or_else(|| {
                DiskError::from(Damage::Journal(format!("block {} is past its end", n.0)))
            })?;
            Ok(cache.read(*at)?.to_vec())
        })
        .map_err(|e| match e {
            RecoverError::Read { source, .. } => source,
            RecoverError::Corrupt(e) => Damage::Journal(format!("cannot be recovered: {e}")).into(),
        })?;
        let fs_blocks = self.layout.blocks_count;
        if let Some((&b, _)) = rec.blocks.range(self.layout.end()..).next() {
            return Err(Damage::Journal(format!(
                "replays {b}, outside the file system ({fs_blocks} blocks)"
            ))
            .into());
        }
        if let Some((&b, _)) = rec.blocks.iter().find(|(_, d)| d.len() != self.bs) {
            return Err(Damage::Journal(format!("replays {b} with a short copy")).into());
        }
        Ok(rec)
    }

    /// Writes a staged replay: its home blocks durably, then the journal
    /// superblock emptied, durably.
    pub(crate) fn apply_replay(&mut self, staged: Staged) -> Result<Replayed> {
        let cache = self.m.cache_mut();
        cache.release(staged.hold)?;
        // Journal rule: the home blocks are durable before the journal
        // stops holding them, or a crash in between loses them.
        cache.sync()?;
        let emptied = staged.emptied.to_bytes();
        cache.create_byte(staged.log_superblock, 0, &emptied, &[], META)?;
        cache.sync()?;
        Ok(staged.replayed)
    }
}
