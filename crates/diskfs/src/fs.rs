//! The mounted file system: the in-memory superblock and group descriptors,
//! mount and unmount, and the writes that keep their on-disk copies in step.
//!
//! Invariants:
//! - `sb` is the superblock as the cache holds it (every uncommitted patch
//!   applied), but for the free totals, which the allocator keeps (see
//!   `alloc`) and `write_super` copies in; it changes on disk only through
//!   `write_super`, which patches the cached block to match.
//! - Free counts are never a dependency of anything: after a crash they may
//!   be wrong, which `fsck` classifies as a soft-updates leak.
//! - Mount writes nothing until everything it relies on has been read and
//!   checked (`read_and_check`, `validate`): a damaged image is refused unchanged.
//!   A journal needing recovery is replayed into the cache behind a held
//!   patch, and the file system it leaves is what is checked.
//! - Mount marks the file system not clean and makes that durable before it
//!   returns; unmount makes everything durable, then marks it clean, and
//!   only then discards free blocks (on a device that can).

use crate::alloc::Allocator;
use crate::diff;
use crate::dir::{Indexes, NameAdds};
use crate::error::{Damage, DiskError, Result};
use crate::inode::InodeTable;
use crate::journal::Replayed;
use crate::orphan::Orphans;
use crate::stack::StackOptions;
use crate::Refusal;
use std::sync::Arc;
use stitch_format::features::incompat;
use stitch_format::group_desc::{decode_table, GroupDesc};
use stitch_format::{InodeNo, Layout, Superblock, TimeRange, Timestamp};
use stitch_modes::{Consistency, JournalConfig, Modes};
use stitch_patch::{BlockDevice, BlockNo, PatchCache, PatchFlags, PatchId};

/// ext2's `s_state` bit meaning "cleanly unmounted".
const STATE_VALID: u16 = 1;
pub(crate) const META: PatchFlags = PatchFlags { data: false };
pub(crate) const DATA: PatchFlags = PatchFlags { data: true };
const SUPERBLOCK_BYTES: usize = 1024;
/// ext2's largest link count.
pub(crate) const LINK_MAX: u16 = 32_000;

/// An ext2 file system on the patch cache. It composes the parts, each a
/// type of its own with private state: the allocator (`alloc`), the inode
/// table (`inode`), the directory indexes and the names added since mount
/// (`dir`), the open files and orphans (`orphan`); the operations, each in
/// a module named for it, join them through their methods, and the
/// superblock, layout and consistency mode (`m`) are shared by all.
pub struct DiskFs {
    pub(crate) m: Modes,
    pub(crate) sb: Superblock,
    pub(crate) layout: Layout,
    pub(crate) alloc: Allocator,
    pub(crate) inodes: InodeTable,
    pub(crate) bs: usize,
    /// Open files and orphans (see `orphan`).
    pub(crate) orphans: Orphans,
    /// The patches that gave names since mount, while they may not be on
    /// disk (Featherstitch §4.5's elision; soft-updates rule 3).
    pub(crate) adds: NameAdds,
    pub(crate) replayed: Option<Replayed>,
    /// The reserved number the operation being applied must take
    /// ([`DiskFs::apply_as`]).
    pub(crate) wanted_ino: Option<InodeNo>,
    /// Directories' names by block (memory only; see `dir`).
    pub(crate) dirs: Indexes,
}

impl DiskFs {
    /// Opens the stack on `dev` (a patch cache, the consistency mode,
    /// diskfs; each set as `opts` says) and mounts the file system: reads
    /// and checks everything it relies on (see `validate`), refusing a
    /// damaged image before writing a byte; replays the journal if it holds
    /// transactions; durably marks the file system in use; reclaims the
    /// leaks `opts` names; frees the orphans a crash left.
    pub fn mount(
        dev: Arc<dyn BlockDevice>,
        opts: impl Into<StackOptions>,
        now: Timestamp,
    ) -> Result<DiskFs> {
        let opts = opts.into();
        if !opts.reclaim.is_empty() && opts.consistency != Consistency::SoftUpdates {
            return Err(DiskError::Refused(Refusal::Invalid(
                "leaks are reclaimed in soft updates only",
            )));
        }
        let cache = PatchCache::new(dev, opts.cache);
        Self::read_and_check(cache, opts.consistency)?.mount(opts.journal, now, &opts.reclaim)
    }

    /// Everything [`DiskFs::mount`] checks before its first write, and
    /// nothing more: the stack (with a journal replay staged in its cache,
    /// if any) is dropped unwritten. For a caller that must refuse a
    /// damaged image before it does anything else with it.
    pub fn check_mountable(dev: Arc<dyn BlockDevice>, opts: impl Into<StackOptions>) -> Result<()> {
        let opts = opts.into();
        let cache = PatchCache::new(dev, opts.cache);
        Self::read_and_check(cache, opts.consistency).map(drop)
    }

    /// Reads the superblock and descriptors and checks them and the rest
    /// mount relies on; a journal that needs recovery is replayed into the
    /// cache only (behind a held patch) and the file system it leaves is
    /// checked. Nothing reaches the disk here.
    fn read_and_check(cache: PatchCache, consistency: Consistency) -> Result<Opened> {
        let mut m = Modes::new(cache, consistency);
        let bs = m.cache().block_size();
        let (sb, layout, gds) = load(&mut m, bs)?;
        let mut fs = DiskFs {
            m,
            alloc: Allocator::new(&sb, layout.clone(), gds.clone()),
            inodes: inode_table(&layout, &gds),
            sb,
            layout,
            bs,
            orphans: Default::default(),
            adds: Default::default(),
            replayed: None,
            wanted_ino: None,
            dirs: Default::default(),
        };
        let replay = fs.stage_replay()?;
        if replay.is_some() {
            // Every later read sees the file system as replayed: that is
            // what is checked, and what is mounted.
            let (sb, layout, gds) = load(&mut fs.m, bs).map_err(|e| match e {
                e if e.is_damage() => {
                    Damage::Journal(format!("replays into a damaged file system: {e}")).into()
                }
                e => e,
            })?;
            fs.inodes = inode_table(&layout, &gds);
            fs.alloc = Allocator::new(&sb, layout.clone(), gds);
            (fs.sb, fs.layout) = (sb, layout);
            fs.sb.feature_incompat &= !incompat::RECOVER.bit;
        }
        fs.check_tree(consistency)?;
        Ok(Opened { fs, replay })
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
        self.discard_free()?;
        Ok(self.m.into_cache())
    }

    /// Tells a device that can discard (NBD's TRIM) that every block the
    /// bitmaps show free holds nothing; returns how many it took. Only
    /// once everything is durable (unmount): a block free then is free in
    /// every state a crash can leave, so no file can come back pointing at
    /// a trimmed block. While mounted, a freed block may still be named by
    /// what is on disk until its free commits, so nothing is discarded.
    fn discard_free(&mut self) -> Result<u64> {
        let dev = self.m.cache().device().clone();
        if !dev.discards() {
            return Ok(0);
        }
        let mut total = 0;
        self.alloc.free_runs(&mut self.m, &mut |first, n| {
            total += dev
                .discard(first, n)
                .map_err(|e| DiskError::Patch(stitch_patch::PatchError::Device(e)))?;
            Ok(())
        })?;
        Ok(total)
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
        self.adds.len()
    }

    pub fn block_size(&self) -> usize {
        self.bs
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The superblock as the next write of it will hold it (with the free
    /// totals the allocator keeps).
    pub fn superblock(&self) -> Superblock {
        let mut sb = self.sb.clone();
        self.alloc.fill_totals(&mut sb);
        sb
    }

    /// The times this file system's inodes hold (its inode size decides,
    /// as for the kernel): what the layer above clamps times to.
    pub fn time_range(&self) -> TimeRange {
        TimeRange::of_inode_size(self.layout.inode_size)
    }

    pub fn modes(&self) -> &Modes {
        &self.m
    }

    pub fn modes_mut(&mut self) -> &mut Modes {
        &mut self.m
    }

    /// An empty patch depending on every patch of an operation.
    pub(crate) fn stands_for(&mut self, parts: &[&[PatchId]]) -> Result<PatchId> {
        let all: Vec<PatchId> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        Ok(self.m.group(&all)?)
    }

    /// Free blocks, as the superblock's total says.
    pub fn free_blocks(&self) -> u32 {
        self.alloc.free_blocks()
    }

    /// Free inodes, counting those reserved and marked ahead in soft
    /// updates (free to the layer above, which counts its reservations).
    pub fn free_inodes(&self) -> u32 {
        self.alloc.free_inodes()
    }

    /// Reserves the number a new file in `parent` (or a new directory)
    /// will have, without touching the disk: the layer above shows it at
    /// once and creates the inode later with [`DiskFs::apply_as`]. The
    /// reservation lives in memory; [`DiskFs::unreserve_inode`] returns a
    /// number whose file never reached the disk. In soft updates the
    /// number is also marked used in the bitmap now (see `alloc`).
    pub fn reserve_inode(&mut self, parent: InodeNo, dir: bool) -> Result<InodeNo> {
        self.alloc.reserve_inode(&mut self.m, parent, dir)
    }

    /// Gives back a reserved number (and frees its bit, if marked ahead).
    pub fn unreserve_inode(&mut self, ino: InodeNo) -> Result<()> {
        if self.alloc.unreserve_inode(&mut self.m, ino)? {
            self.forget_dir(ino);
        }
        Ok(())
    }

    /// How many free inodes are reserved.
    pub fn reserved_inodes(&self) -> usize {
        self.alloc.reserved_inodes()
    }

    /// Frees an inode once `deps` are on disk, and forgets its directory
    /// index (its number may come back as another directory).
    pub(crate) fn free_inode(
        &mut self,
        ino: InodeNo,
        dir: bool,
        deps: &[PatchId],
    ) -> Result<PatchId> {
        let p = self.alloc.free_inode(&mut self.m, ino, dir, deps)?;
        self.forget_dir(ino);
        Ok(p)
    }

    /// Patches the cached superblock to match `self.sb`.
    pub(crate) fn write_super(&mut self) -> Result<Vec<PatchId>> {
        self.write_super_after(&[])
    }

    /// Patches the cached superblock after `deps`.
    pub(crate) fn write_super_after(&mut self, deps: &[PatchId]) -> Result<Vec<PatchId>> {
        let (blk, off) = superblock_location(self.bs);
        let mut bytes = self.m.read(blk)?[off..off + SUPERBLOCK_BYTES].to_vec();
        self.alloc.fill_totals(&mut self.sb);
        self.sb.encode_into(&mut bytes);
        Ok(diff::write(&mut self.m, blk, off, &bytes, deps, META)?)
    }
}

/// A file system mount has read and checked, and not yet written to.
struct Opened {
    fs: DiskFs,
    /// A journal replay staged in the cache, not yet written.
    replay: Option<crate::journal::Staged>,
}

impl Opened {
    /// The writes of a mount, in order: the staged replay (home blocks,
    /// then the emptied log), the superblock marked in use (durably), the
    /// journal started, the group summaries set as `leaks` count them, the
    /// orphans freed, the other leaks repaired.
    fn mount(self, jcfg: JournalConfig, now: Timestamp, leaks: &[crate::Leak]) -> Result<DiskFs> {
        let Opened { mut fs, replay } = self;
        // Every check passed: from here on mount writes.
        if let Some(staged) = replay {
            fs.replayed = Some(fs.apply_replay(staged)?);
        }
        fs.alloc.sum_totals();
        let journal = match fs.m.consistency() {
            Consistency::Journal(_) => {
                fs.sb.feature_incompat |= incompat::RECOVER.bit;
                let area = fs.journal_area()?;
                let jsb = fs.read_journal_superblock(&area)?;
                Some((area, jsb))
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
        if let Some((area, jsb)) = journal {
            fs.m.start_journal(area, jsb, jcfg)?;
        }
        // Counts first: every later free and allocation moves them.
        let (counts, rest): (Vec<crate::Leak>, Vec<crate::Leak>) =
            leaks.iter().partition(|l| l.is_count());
        fs.repair_leaks(&counts, now)?;
        // Files unlinked while open before a crash go now.
        fs.free_orphans(now)?;
        fs.repair_leaks(&rest, now)?;
        Ok(fs)
    }
}

/// The inode table of a file system with descriptors `gds`.
fn inode_table(layout: &Layout, gds: &[GroupDesc]) -> InodeTable {
    let tables = gds.iter().map(|g| g.inode_table).collect();
    InodeTable::new(layout.clone(), tables)
}

/// Where the primary superblock lives: byte 1024 of the device.
fn superblock_location(bs: usize) -> (BlockNo, usize) {
    if bs > 1024 {
        (BlockNo(0), 1024)
    } else {
        (BlockNo(1), 0)
    }
}

/// The superblock and descriptors as the cache holds them, checked: the
/// superblock's values, its block size against the device's (`bs`), the
/// device's size against its block count, every descriptor.
fn load(m: &mut Modes, bs: usize) -> Result<(Superblock, Layout, Vec<GroupDesc>)> {
    let sb = read_super(m, bs)?;
    let layout = Layout::from_superblock(&sb)?;
    let fs_bs = layout.block_size.bytes() as usize;
    if fs_bs != bs {
        return Err(Damage::BlockSize {
            fs: fs_bs,
            device: bs,
        }
        .into());
    }
    let held = m.cache().device().num_blocks();
    if held < u64::from(layout.blocks_count) {
        return Err(Damage::TooSmall {
            held,
            claimed: layout.blocks_count,
        }
        .into());
    }
    let gds = read_descriptors(m, &layout)?;
    Ok((sb, layout, gds))
}

fn read_super(m: &mut Modes, bs: usize) -> Result<Superblock> {
    let (blk, off) = superblock_location(bs);
    Ok(Superblock::decode(
        &m.read(blk)?[off..off + SUPERBLOCK_BYTES],
    )?)
}

fn read_descriptors(m: &mut Modes, layout: &Layout) -> Result<Vec<GroupDesc>> {
    let first = BlockNo::from(layout.first_data_block).plus(1);
    let mut table = Vec::new();
    for i in 0..u64::from(layout.gdt_blocks()) {
        table.extend_from_slice(m.read(first.plus(i))?);
    }
    // Each descriptor validated as the kernel checks it.
    Ok(decode_table(&table, layout)?)
}
