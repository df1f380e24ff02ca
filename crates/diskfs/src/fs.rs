//! The mounted file system: the in-memory superblock and group descriptors,
//! mount and unmount, and the writes that keep their on-disk copies in step.
//!
//! Invariants:
//! - `sb` and `gds` are the file system as the cache holds it (every
//!   uncommitted patch applied); they change only through `write_super` and
//!   `write_group`, which patch the cached blocks to match.
//! - Free counts are never a dependency of anything: after a crash they may
//!   be wrong, which `fsck` classifies as a soft-updates leak.
//! - Mount marks the file system not clean and makes that durable before it
//!   returns; unmount makes everything durable, then marks it clean.

use crate::diff;
use crate::error::{DiskError, Result};
use crate::journal::Replayed;
use stitch_format::features::incompat;
use stitch_format::group_desc::{decode_table, GroupDesc};
use stitch_format::{Geometry, InodeNo, Superblock, TimeRange, Timestamp};
use stitch_modes::{Consistency, JournalConfig, Modes};
use stitch_patch::{BlockNo, PatchCache, PatchFlags, PatchId};

/// ext2's `s_state` bit meaning "cleanly unmounted".
const STATE_VALID: u16 = 1;
pub(crate) const META: PatchFlags = PatchFlags { data: false };
pub(crate) const DATA: PatchFlags = PatchFlags { data: true };
const SUPERBLOCK_BYTES: usize = 1024;

/// An ext2 file system on the patch cache.
pub struct DiskFs {
    pub(crate) m: Modes,
    pub(crate) sb: Superblock,
    pub(crate) geo: Geometry,
    pub(crate) gds: Vec<GroupDesc>,
    pub(crate) bs: usize,
    /// Open counts of inodes the layer above holds open (in memory only).
    pub(crate) open: rustc_hash::FxHashMap<InodeNo, u32>,
    /// Orphans made since mount, with the patches that put each on the
    /// list and dropped its last link (see `orphan`).
    pub(crate) orphaned: rustc_hash::FxHashMap<InodeNo, crate::orphan::Orphaned>,
    /// The patch that added each directory entry since mount, to tell at
    /// removal whether the entry ever reached the disk (Featherstitch
    /// §4.5): if the removal merged into it, it never did.
    /// With it, for a name a rename made, the removals of the names the
    /// inode had before that may still be on disk (see `never_on_disk`).
    pub(crate) entry_adds: std::collections::HashMap<(InodeNo, Vec<u8>), crate::dir::Added>,
    /// The patches that gave each non-directory inode a name since mount,
    /// while they may not be on disk: a name removed from an inode that
    /// keeps others waits for them, so no crash leaves it nameless (see
    /// `names_elsewhere`).
    pub(crate) names_added: rustc_hash::FxHashMap<InodeNo, Vec<PatchId>>,
    /// Blocks freed while their data is not journaled, with the patch that
    /// freed them: not reused until that free is durable (ext3's rule; see
    /// `alloc`).
    pub(crate) pending_frees: crate::alloc::PendingFrees,
    pub(crate) replayed: Option<Replayed>,
    /// Inode numbers handed out by [`DiskFs::reserve_inode`] whose
    /// allocation has not reached the bitmap yet (memory only).
    pub(crate) reserved: crate::alloc::Reserved,
    /// The reserved number the operation being applied must take
    /// ([`DiskFs::apply_as`]).
    pub(crate) wanted_ino: Option<InodeNo>,
    /// Directories' names by block (memory only; see `dir`).
    pub(crate) dirs: rustc_hash::FxHashMap<InodeNo, crate::dir::DirIndex>,
}

impl DiskFs {
    /// Mounts the file system on `cache`: reads and validates the superblock
    /// and descriptors, refuses what it can't handle, replays the journal if
    /// it holds transactions, and durably marks the file system in use.
    pub fn mount(cache: PatchCache, consistency: Consistency, now: Timestamp) -> Result<DiskFs> {
        Self::mount_with(cache, consistency, JournalConfig::default(), now)
    }

    /// [`DiskFs::mount`] with the journal's commit policy.
    pub fn mount_with(
        cache: PatchCache,
        consistency: Consistency,
        jcfg: JournalConfig,
        now: Timestamp,
    ) -> Result<DiskFs> {
        let mut m = Modes::new(cache, consistency);
        let bs_dev = m.cache().block_size();
        let sb = read_super(&mut m, bs_dev)?;
        let geo = Geometry::from_superblock(&sb)?;
        let bs = geo.block_size.bytes() as usize;
        if bs != bs_dev {
            return Err(DiskError::Invalid(
                "file system block size differs from the device's",
            ));
        }
        let gds = read_descriptors(&mut m, &geo)?;
        let mut fs = DiskFs {
            m,
            sb,
            geo,
            gds,
            bs,
            open: Default::default(),
            orphaned: Default::default(),
            entry_adds: Default::default(),
            names_added: Default::default(),
            pending_frees: Default::default(),
            replayed: None,
            reserved: Default::default(),
            wanted_ino: None,
            dirs: Default::default(),
        };
        fs.replayed = fs.replay_journal()?;
        if fs.replayed.is_some() {
            // Replay may have rewritten the superblock and descriptors.
            fs.sb = read_super(&mut fs.m, bs)?;
            fs.sb.feature_incompat &= !incompat::RECOVER.bit;
            fs.geo = Geometry::from_superblock(&fs.sb)?;
            fs.gds = read_descriptors(&mut fs.m, &fs.geo)?;
        }
        // The superblock's free totals lag the descriptors after a crash
        // (see `alloc`); the descriptors decide.
        fs.sb.free_blocks_count_lo = fs.gds.iter().map(|g| u32::from(g.free_blocks_count)).sum();
        fs.sb.free_inodes_count = fs.gds.iter().map(|g| u32::from(g.free_inodes_count)).sum();
        let area = match consistency {
            Consistency::Journal(_) => {
                fs.sb.feature_incompat |= incompat::RECOVER.bit;
                Some(fs.journal_area()?)
            }
            _ => None,
        };
        fs.sb.state &= !STATE_VALID;
        fs.sb.mnt_count = fs.sb.mnt_count.wrapping_add(1);
        fs.sb.mtime = now.secs() as u32;
        let p = fs.write_super()?;
        // A crash from here on must find the file system marked in use
        // (and, journaled, needing recovery before the log names anything).
        fs.sync_patches(&p)?;
        if let Some(area) = area {
            let jsb = fs.read_journal_superblock(&area)?;
            fs.m.start_journal(area, jsb, jcfg)?;
        }
        // Files unlinked while open before a crash go now.
        fs.free_orphans(now)?;
        Ok(fs)
    }

    /// What the journal replay at mount did, if there was one.
    pub fn replayed(&self) -> Option<&Replayed> {
        self.replayed.as_ref()
    }

    /// Makes everything durable, marks the file system clean, and returns
    /// the cache. A journal is checkpointed and left empty first.
    pub fn unmount(mut self, now: Timestamp) -> Result<PatchCache> {
        self.sync()?;
        if self.m.journal().is_some() {
            self.m.stop_journal()?;
            self.sb.feature_incompat &= !incompat::RECOVER.bit;
        }
        self.sb.state |= STATE_VALID;
        self.sb.wtime = now.secs() as u32;
        // `sync` writes the superblock first.
        self.sync()?;
        Ok(self.m.into_cache())
    }

    /// Writes and flushes everything, the superblock's free totals too (in
    /// journal mode: commits, then checkpoints, leaving the log empty).
    pub fn sync(&mut self) -> Result<()> {
        self.write_super()?;
        Ok(self.m.sync()?)
    }

    /// Makes `p` durable: what it needs and itself in soft updates; its
    /// transaction's commit in journal mode.
    pub fn sync_patch(&mut self, p: PatchId) -> Result<()> {
        Ok(self.m.sync_patch(p)?)
    }

    /// [`DiskFs::sync_patch`] one round at a time, for a caller whose lock
    /// on this file system should not be held through device flushes; see
    /// [`Modes::sync_step`](stitch_modes::Modes::sync_step).
    pub fn sync_step(&mut self, goal: PatchId) -> Result<stitch_patch::SyncStep> {
        Ok(self.m.sync_step(goal)?)
    }

    /// See [`PatchCache::flushed`](stitch_patch::PatchCache::flushed).
    pub fn flushed(
        &mut self,
        ticket: stitch_patch::FlushTicket,
        result: std::result::Result<(), stitch_patch::DevError>,
    ) -> Result<()> {
        Ok(self.m.flushed(ticket, result)?)
    }

    pub(crate) fn sync_patches(&mut self, ps: &[PatchId]) -> Result<()> {
        ps.iter().try_for_each(|&p| self.sync_patch(p))
    }

    /// How many directory entries added since mount are still remembered
    /// for Featherstitch's §4.5 elision. Bounded: an add that reached the
    /// disk is forgotten once the count reaches a power of two from 4096.
    pub fn remembered_adds(&self) -> usize {
        self.entry_adds.len()
    }

    pub fn block_size(&self) -> usize {
        self.bs
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// The times this file system's inodes hold (its inode size decides,
    /// as for the kernel): what the layer above clamps times to.
    pub fn time_range(&self) -> TimeRange {
        TimeRange::of_inode_size(self.geo.inode_size)
    }

    pub fn modes(&self) -> &Modes {
        &self.m
    }

    pub fn modes_mut(&mut self) -> &mut Modes {
        &mut self.m
    }

    /// Patches the cached superblock to match `self.sb`.
    pub(crate) fn write_super(&mut self) -> Result<Vec<PatchId>> {
        self.write_super_after(&[])
    }

    /// Patches the cached superblock after `deps`.
    pub(crate) fn write_super_after(&mut self, deps: &[PatchId]) -> Result<Vec<PatchId>> {
        let (blk, off) = superblock_location(self.bs);
        let mut bytes = self.m.read(blk)?[off..off + SUPERBLOCK_BYTES].to_vec();
        self.sb.encode_into(&mut bytes);
        Ok(diff::write(&mut self.m, blk, off, &bytes, deps, META)?)
    }

    /// Patches the cached descriptor of group `g` to match `self.gds[g]`.
    pub(crate) fn write_group(&mut self, g: usize) -> Result<Vec<PatchId>> {
        let at = g * GroupDesc::SIZE;
        let blk = BlockNo(u64::from(self.geo.first_data_block) + 1 + (at / self.bs) as u64);
        let off = at % self.bs;
        let mut bytes = vec![0u8; GroupDesc::SIZE];
        self.gds[g].encode_into(&mut bytes);
        Ok(diff::write(&mut self.m, blk, off, &bytes, &[], META)?)
    }
}

/// Where the primary superblock lives: byte 1024 of the device.
fn superblock_location(bs: usize) -> (BlockNo, usize) {
    if bs > 1024 {
        (BlockNo(0), 1024)
    } else {
        (BlockNo(1), 0)
    }
}

fn read_super(m: &mut Modes, bs: usize) -> Result<Superblock> {
    let (blk, off) = superblock_location(bs);
    Ok(Superblock::decode(
        &m.read(blk)?[off..off + SUPERBLOCK_BYTES],
    )?)
}

fn read_descriptors(m: &mut Modes, geo: &Geometry) -> Result<Vec<GroupDesc>> {
    let first = u64::from(geo.first_data_block) + 1;
    let mut table = Vec::new();
    for i in 0..u64::from(geo.gdt_blocks()) {
        table.extend_from_slice(m.read(BlockNo(first + i))?);
    }
    let gds = decode_table(&table, geo)?;
    for (g, gd) in gds.iter().enumerate() {
        gd.validate(geo, stitch_format::GroupNo(g as u32))?;
    }
    Ok(gds)
}
