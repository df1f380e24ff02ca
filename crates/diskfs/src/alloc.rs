//! Allocation of blocks and inodes in the group bitmaps, and freeing.
//!
//! Policy: a block goes near `goal` (the file's previous block, or its
//! inode's group), so a file's blocks stay together; a directory's inode
//! goes to the group with the most free inodes among those with at least
//! average free blocks (spreading directories, as ext2 does); a file's inode
//! goes to its directory's group.
//!
//! Soft-updates rule 2 (never reuse a resource before every old pointer to
//! it is cleared on disk) needs no code here: allocating a bit that a free
//! flipped overlaps the free's bit patch, so the cache makes the allocation
//! depend on the free, which depends on the cleared pointer.
//!
//! The journal drops those dependencies, and unjournaled data (data modes
//! `writeback` and `ordered`) goes home before its transaction commits. So,
//! as ext3 does, a block freed in journal mode is not reused until its free
//! is durable (`Allocator::pending`); otherwise the old owner, still owning it
//! after a crash, would show the new owner's data. When only such blocks
//! are left, allocation commits and checkpoints, then tries again.
//!
//! In soft updates a number reserved for the layer above
//! ([`DiskFs::reserve_inode`](crate::DiskFs::reserve_inode)) is marked used in the bitmap at once, not
//! when its inode is made: a new inode's initialization waits for its bit,
//! and its entry for the initialization, so a new file's fsync took one
//! device flush per link of that chain. The layer above reserves numbers
//! in batches, so most new inodes find their bit on disk already (written
//! with an earlier flush) and an fsync needs two flushes: the initialized
//! inode, then its entry. A crash leaves the unused numbers marked used
//! for nothing (a leak); unreserving one frees its bit.
//!
//! Soft updates use the same rule as a preference: reusing a block whose
//! free is not yet durable is correct (the dependency above) but chains the
//! new owner behind the old owner's whole deletion (entry, inode, bitmap),
//! one device flush per link; an fsync of a new file after an unlink took
//! six flushes that way. A fresh block has no such chain. When only such
//! blocks are left, allocation syncs and tries again, as in journal mode.
//!
//! An allocation or free patches its bitmap and its group descriptor, not
//! the superblock: the superblock's free totals are kept in memory and
//! written at [`DiskFs::sync`](crate::DiskFs::sync) and unmount, as ext3 and ext4 do. Otherwise
//! every journal transaction that allocates carries the superblock, one more
//! block in each small commit. After a crash the totals on disk may lag;
//! they are hints (mount sums the descriptors, as the kernel does, and
//! e2fsck -n reports them and exits 0; stitchfs fsck calls them notes).
//!
//! Every count an allocation or free moves is checked before the bitmap
//! changes (`move_count`): one that would go below zero or above what its
//! group holds is damage, never a wrapped number. After a soft-updates
//! crash the descriptors may lag their bitmaps (a count is no dependency
//! of anything), so the mount that follows brings them in step first
//! (`stitchfs mount` runs the checker and reclaims its leaks at mount,
//! `StackOptions::reclaiming`);
//! a count out of bounds after that stops every write.

use crate::diff;
use crate::error::{DiskError, Result};
use crate::fs::{DATA, META};
use crate::Refusal;
use rustc_hash::FxHashMap;
use std::borrow::Cow;
use std::collections::VecDeque;
use stitch_format::bitmap::Bitmap;
use stitch_format::group_desc::{free_totals, GroupDesc};
use stitch_format::{GroupNo, InodeNo, Layout, Superblock};
use stitch_modes::Modes;
use stitch_patch::{BlockNo, PatchId};

/// The group bitmaps and the counts that summarize them: the group
/// descriptors and the superblock's free totals (kept here, and copied into
/// the superblock when it is written: [`Allocator::fill_totals`]), blocks
/// held back until their free is durable, and inode numbers reserved for
/// the layer above.
///
/// Invariant: `gds` is the descriptor table as the cache holds it (every
/// uncommitted patch applied); a descriptor changes only here, through
/// `write_group`, which patches the cached block to match.
pub(crate) struct Allocator {
    layout: Layout,
    /// The first inode number files may use (`s_first_ino`).
    first_ino: u32,
    gds: Vec<GroupDesc>,
    free_blocks_total: u32,
    free_inodes_total: u32,
    /// Blocks freed while their data is not journaled, with the patch that
    /// freed them: not reused until that free is durable (ext3's rule).
    pending: PendingFrees,
    /// Inode numbers handed out by `reserve_inode` whose allocation has not
    /// reached the bitmap yet (memory only).
    reserved: Reserved,
}

impl Allocator {
    /// The allocator of a file system whose superblock is `sb` and whose
    /// descriptors (checked) are `gds`; the totals are the superblock's
    /// until [`Allocator::sum_totals`].
    pub(crate) fn new(sb: &Superblock, layout: Layout, gds: Vec<GroupDesc>) -> Allocator {
        Allocator {
            layout,
            first_ino: sb.first_ino(),
            gds,
            free_blocks_total: sb.free_blocks_count_lo,
            free_inodes_total: sb.free_inodes_count,
            pending: PendingFrees::default(),
            reserved: Reserved::default(),
        }
    }

    /// How many groups the file system has.
    pub(crate) fn groups(&self) -> usize {
        self.gds.len()
    }

    /// Group `g`'s descriptor.
    pub(crate) fn group(&self, g: usize) -> &GroupDesc {
        &self.gds[g]
    }

    /// Free blocks, as the superblock's total says.
    pub(crate) fn free_blocks(&self) -> u32 {
        self.free_blocks_total
    }

    /// Sets the free totals to the sum of the descriptors' counts, which
    /// decide (the totals on disk may lag; see the module comment).
    pub(crate) fn sum_totals(&mut self) {
        (self.free_blocks_total, self.free_inodes_total) = free_totals(&self.gds);
    }

    /// Sets the free totals (leak repair: what a checker counted).
    pub(crate) fn set_totals(&mut self, blocks: Option<u32>, inodes: Option<u32>) {
        self.free_blocks_total = blocks.unwrap_or(self.free_blocks_total);
        self.free_inodes_total = inodes.unwrap_or(self.free_inodes_total);
    }

    /// Copies the free totals into `sb`, for writing it.
    pub(crate) fn fill_totals(&self, sb: &mut Superblock) {
        sb.free_blocks_count_lo = self.free_blocks_total;
        sb.free_inodes_count = self.free_inodes_total;
    }

    /// Replaces group `g`'s descriptor with `gd` (leak repair: counts as a
    /// checker counted them), checked as mount checks it; the totals
    /// follow the descriptors.
    pub(crate) fn set_group(&mut self, m: &mut Modes, g: usize, gd: GroupDesc) -> Result<()> {
        gd.validate(&self.layout, GroupNo(g as u32))?;
        self.gds[g] = gd;
        self.sum_totals();
        self.write_group(m, g).map(drop)
    }

    /// Patches the cached descriptor of group `g` to match `self.gds[g]`.
    fn write_group(&mut self, m: &mut Modes, g: usize) -> Result<Vec<PatchId>> {
        let bs = self.layout.block_size.bytes() as usize;
        let at = g * GroupDesc::SIZE;
        let blk = BlockNo::from(self.layout.first_data_block).plus(1 + (at / bs) as u64);
        let off = at % bs;
        let mut bytes = vec![0u8; GroupDesc::SIZE];
        self.gds[g].encode_into(&mut bytes);
        Ok(diff::write(m, blk, off, &bytes, &[], META)?)
    }

    /// Allocates a block, preferably at or after `goal`.
    pub(crate) fn alloc_block(
        &mut self,
        m: &mut Modes,
        goal: BlockNo,
    ) -> Result<(BlockNo, PatchId)> {
        let (block, _, patches) = self.alloc_run(m, goal, 1)?;
        Ok((block, patches[0]))
    }

    /// Allocates a run of up to `want` blocks (at least one): the block
    /// [`Self::alloc_block`] would take and the free blocks right after it
    /// in its group. The run's bits are set one 32-bit word per patch, and
    /// the group descriptor and superblock are written once for the run, not
    /// once per block (a 100 MB file is 25,600 blocks). Returns the first
    /// block, the run's length and the bitmap patches.
    pub(crate) fn alloc_run(
        &mut self,
        m: &mut Modes,
        goal: BlockNo,
        want: usize,
    ) -> Result<(BlockNo, usize, Vec<PatchId>)> {
        match self.alloc_run_once(m, goal, want) {
            Err(DiskError::NoSpace(_)) if !self.pending.is_empty() => {
                m.sync()?;
                self.pending.release_durable(m.cache());
                self.alloc_run_once(m, goal, want)
            }
            other => other,
        }
    }

    fn alloc_run_once(
        &mut self,
        m: &mut Modes,
        goal: BlockNo,
        want: usize,
    ) -> Result<(BlockNo, usize, Vec<PatchId>)> {
        self.pending.release_durable(m.cache());
        let groups = self.gds.len();
        let first = BlockNo::from(self.layout.first_data_block);
        let goal = goal.clamp(first, BlockNo(self.layout.end().0 - 1));
        let g0 = self.layout.group_of_block(goal).map_or(0, |g| g.0 as usize);
        for k in 0..groups {
            let g = (g0 + k) % groups;
            if self.gds[g].free_blocks_count == 0 {
                continue;
            }
            let start = if k == 0 {
                goal.since(self.group_first(g)) as usize
            } else {
                0
            };
            let in_group = self.layout.blocks_in_group(GroupNo(g as u32)) as usize;
            if let Some((bit, len)) = self.free_run(m, g, start, in_group, want)? {
                self.move_count(m, g, Summary::FreeBlocks, -(len as i64))?;
                let patches = self.set_run(m, self.gds[g].block_bitmap, bit, len)?;
                self.write_group(m, g)?;
                return Ok((self.group_first(g).plus(bit as u64), len, patches));
            }
        }
        Err(DiskError::NoSpace("no free block"))
    }

    /// Before an operation that may allocate up to `need` blocks: if fewer
    /// are free for reuse now (the rest are frees not yet durable), makes
    /// the frees durable first, here at the operation's start. Otherwise
    /// `alloc_run` would sync in the middle of the operation, and in
    /// journal mode that commit would hold half of it: blocks marked used
    /// with no owner yet, a leak after a crash (found by the crashtest
    /// workload `full`). Between operations a commit only splits a batch,
    /// as `Modes::split_point` does.
    pub(crate) fn room_before_op(&mut self, m: &mut Modes, need: u64) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.pending.release_durable(m.cache());
        let free = u64::from(self.free_blocks_total);
        if free.saturating_sub(self.pending.count()) >= need {
            return Ok(());
        }
        m.sync()?;
        self.pending.release_durable(m.cache());
        Ok(())
    }

    /// Frees a block once `deps` (the patches that cleared every pointer to
    /// it, and marked its owner deleted) are on disk.
    pub(crate) fn free_block(
        &mut self,
        m: &mut Modes,
        block: BlockNo,
        deps: &[PatchId],
    ) -> Result<PatchId> {
        let g = self
            .layout
            .group_of_block(block)
            .ok_or_else(|| DiskError::Corrupt(format!("freeing {block} beyond the file system")))?
            .0 as usize;
        let bit = block.since(self.group_first(g)) as usize;
        self.expect_bit(
            m,
            self.gds[g].block_bitmap,
            bit,
            true,
            "freeing a free block",
        )?;
        self.move_count(m, g, Summary::FreeBlocks, 1)?;
        let p = self.flip(m, self.gds[g].block_bitmap, bit, deps)?;
        let soft_updates = m.consistency() == stitch_modes::Consistency::SoftUpdates;
        if soft_updates || (m.journal().is_some() && !m.journals(DATA)) {
            self.pending.push(g, bit, p);
        }
        self.write_group(m, g)?;
        Ok(p)
    }

    /// Allocates an inode for a new file in `parent`, or a new directory:
    /// the number the operation being applied reserved, if any, else a
    /// free one by the placement policy.
    pub(crate) fn alloc_inode(
        &mut self,
        m: &mut Modes,
        parent: InodeNo,
        dir: bool,
        wanted: Option<InodeNo>,
    ) -> Result<(InodeNo, PatchId)> {
        let (ino, marked) = match wanted {
            Some(ino) => match self.reserved.allocated(ino, self.layout.inodes_per_group) {
                Some(marked) => (ino, marked),
                None => {
                    return Err(DiskError::Refused(Refusal::Invalid(
                        "inode number not reserved",
                    )))
                }
            },
            None => (self.pick_inode(m, parent, dir)?, None),
        };
        let (g, index) = self
            .layout
            .inode_group(ino)
            .ok_or(DiskError::Refused(Refusal::Invalid("inode out of range")))?;
        let g = g.0 as usize;
        // A number reserved in soft updates is marked and counted already.
        let p = match marked {
            Some(p) => p,
            None => self.mark_inode(m, g, index as usize)?,
        };
        if dir {
            self.move_count(m, g, Summary::Dirs, 1)?;
            self.write_group(m, g)?;
        }
        Ok((ino, p))
    }

    /// Marks inode bit `index` of group `g` used and counts it.
    fn mark_inode(&mut self, m: &mut Modes, g: usize, index: usize) -> Result<PatchId> {
        self.expect_bit(
            m,
            self.gds[g].inode_bitmap,
            index,
            false,
            "allocating a used inode",
        )?;
        self.move_count(m, g, Summary::FreeInodes, -1)?;
        let p = self.flip(m, self.gds[g].inode_bitmap, index, &[])?;
        self.write_group(m, g)?;
        Ok(p)
    }

    /// Free inodes, counting those reserved and marked ahead in soft
    /// updates (free to the layer above, which counts its reservations).
    pub(crate) fn free_inodes(&self) -> u32 {
        self.free_inodes_total + self.reserved.marked() as u32
    }

    /// Reserves the number a new file in `parent` (or a new directory)
    /// will have (see [`DiskFs::reserve_inode`](crate::DiskFs::reserve_inode)); in soft updates it is
    /// marked used in the bitmap now (see the module comment).
    pub(crate) fn reserve_inode(
        &mut self,
        m: &mut Modes,
        parent: InodeNo,
        dir: bool,
    ) -> Result<InodeNo> {
        let ino = self.pick_inode(m, parent, dir)?;
        let marked = if m.consistency() == crate::Consistency::SoftUpdates {
            let (g, index) = self
                .layout
                .inode_group(ino)
                .ok_or(DiskError::Refused(Refusal::Invalid("inode out of range")))?;
            Some(self.mark_inode(m, g.0 as usize, index as usize)?)
        } else {
            None
        };
        self.reserved
            .insert(ino, self.layout.inodes_per_group, marked);
        Ok(ino)
    }

    /// Gives back a reserved number (and frees its bit, if marked ahead).
    /// Returns whether it freed a bit.
    ///
    /// The free waits for the mark. The number may have come from a file
    /// deleted moments before, whose cleared inode is not on disk yet: the
    /// mark then merged with that file's free into one patch that flips
    /// nothing but still waits for the cleared inode. Without this wait the
    /// bit could reach the disk clear while the old inode there still has
    /// its links: an inode in use but marked free, which e2fsck calls
    /// corruption (the crash tests found it under load).
    pub(crate) fn unreserve_inode(&mut self, m: &mut Modes, ino: InodeNo) -> Result<bool> {
        if let Some(Some(mark)) = self.reserved.remove(ino, self.layout.inodes_per_group) {
            self.free_inode(m, ino, false, &[mark])?;
            return Ok(true);
        }
        Ok(false)
    }

    /// How many free inodes are reserved.
    pub(crate) fn reserved_inodes(&self) -> usize {
        self.reserved.len()
    }

    /// A free, unreserved inode number by the placement policy.
    fn pick_inode(&mut self, m: &mut Modes, parent: InodeNo, dir: bool) -> Result<InodeNo> {
        let groups = self.gds.len();
        let g0 = if dir {
            self.roomiest_group()
        } else {
            self.layout
                .inode_group(parent)
                .map_or(0, |(g, _)| g.0 as usize)
        };
        let first_ino = self.first_ino as usize;
        let ipg = self.layout.inodes_per_group as usize;
        for k in 0..groups {
            let g = (g0 + k) % groups;
            let free = self.gds[g].free_inodes_count as usize;
            if free <= self.reserved.unmarked_in_group(g) {
                continue;
            }
            // Inodes below first_ino are reserved (root, journal, ...).
            let start = if g == 0 { first_ino - 1 } else { 0 };
            let mut from = start.max(self.reserved.hint(g));
            let bytes = m.read(self.gds[g].inode_bitmap)?;
            let bitmap = Bitmap::new(bytes);
            while let Some(bit) = bitmap.find_clear(from, ipg) {
                let ino = InodeNo((g * ipg + bit + 1) as u32);
                if !self.reserved.contains(ino) {
                    return Ok(ino);
                }
                from = bit + 1;
            }
        }
        Err(DiskError::NoSpace("no free inode"))
    }

    /// Frees an inode once `deps` are on disk.
    pub(crate) fn free_inode(
        &mut self,
        m: &mut Modes,
        ino: InodeNo,
        dir: bool,
        deps: &[PatchId],
    ) -> Result<PatchId> {
        let (g, index) = self
            .layout
            .inode_group(ino)
            .ok_or_else(|| DiskError::Corrupt(format!("inode {} out of range", ino.0)))?;
        let g = g.0 as usize;
        self.expect_bit(
            m,
            self.gds[g].inode_bitmap,
            index as usize,
            true,
            "freeing a free inode",
        )?;
        if dir {
            self.move_count(m, g, Summary::Dirs, -1)?;
        }
        self.move_count(m, g, Summary::FreeInodes, 1)?;
        let p = self.flip(m, self.gds[g].inode_bitmap, index as usize, deps)?;
        self.reserved.freed(g, index as usize);
        self.write_group(m, g)?;
        Ok(p)
    }

    /// Moves group `g`'s count `what` by `delta`, and the superblock's
    /// total with it (the free counts), before the bitmap changes. A count
    /// that would go below zero or above what the group holds says the
    /// descriptor disagrees with its bitmap: a state the file system cannot
    /// be in once mount has brought the summaries in step (see `fs`). It
    /// is never wrapped or clamped: the cache stops every write, so nothing
    /// more reaches the disk, and the error names the count.
    fn move_count(&mut self, m: &mut Modes, g: usize, what: Summary, delta: i64) -> Result<()> {
        let group = GroupNo(g as u32);
        let gd = &self.gds[g];
        let (now, cap) = match what {
            Summary::FreeBlocks => (gd.free_blocks_count, self.layout.blocks_in_group(group)),
            Summary::FreeInodes => (gd.free_inodes_count, self.layout.inodes_per_group),
            Summary::Dirs => (gd.used_dirs_count, self.layout.inodes_per_group),
        };
        let total = match what {
            Summary::FreeBlocks => Some((self.free_blocks_total, self.layout.blocks_count)),
            Summary::FreeInodes => Some((self.free_inodes_total, self.layout.inodes_count())),
            Summary::Dirs => None,
        };
        let new = stepped(u32::from(now), delta, cap).and_then(|n| u16::try_from(n).ok());
        let new_total = total.map(|(t, cap)| stepped(t, delta, cap));
        let why = match (new, new_total) {
            (None, _) => format!(
                "{group}'s {} count {now} cannot move by {delta} (the group holds {cap})",
                what.name()
            ),
            (Some(_), Some(None)) => format!(
                "the superblock's {} total cannot move by {delta}",
                what.name()
            ),
            (Some(n), total) => {
                let gd = &mut self.gds[g];
                match what {
                    Summary::FreeBlocks => gd.free_blocks_count = n,
                    Summary::FreeInodes => gd.free_inodes_count = n,
                    Summary::Dirs => gd.used_dirs_count = n,
                }
                match (what, total.flatten()) {
                    (Summary::FreeBlocks, Some(t)) => self.free_blocks_total = t,
                    (Summary::FreeInodes, Some(t)) => self.free_inodes_total = t,
                    _ => {}
                }
                return Ok(());
            }
        };
        m.cache_mut().halt(why.clone());
        Err(crate::error::Damage::Count(why).into())
    }

    /// The first block of `ino`'s group: where its blocks go when nothing
    /// better is known.
    pub(crate) fn inode_group_start(&self, ino: InodeNo) -> BlockNo {
        let g = self.layout.inode_group(ino).map_or(0, |(g, _)| g.0);
        self.layout.group_first_block(GroupNo(g))
    }

    /// Where an indirect block goes: away from the data stream (three
    /// quarters into the data block's group), so the file's data blocks stay
    /// one contiguous run that can be written in one request (§4.5).
    pub(crate) fn indirect_goal(&self, data: BlockNo) -> BlockNo {
        let g = self.layout.group_of_block(data).map_or(0, |g| g.0);
        let gn = GroupNo(g);
        let in_group = self.layout.blocks_in_group(gn) / 4 * 3;
        self.layout.group_first_block(gn).plus(u64::from(in_group))
    }

    fn group_first(&self, g: usize) -> BlockNo {
        self.layout.group_first_block(GroupNo(g as u32))
    }

    /// The group with the most free inodes among those with at least the
    /// average number of free blocks.
    fn roomiest_group(&self) -> usize {
        let avg = self
            .gds
            .iter()
            .map(|g| u64::from(g.free_blocks_count))
            .sum::<u64>()
            / self.gds.len() as u64;
        (0..self.gds.len())
            .filter(|&g| u64::from(self.gds[g].free_blocks_count) >= avg)
            .max_by_key(|&g| self.gds[g].free_inodes_count)
            .unwrap_or(0)
    }

    /// The first free block of group `g` at or after `start` (wrapping to
    /// the group's start) and how many free blocks follow it in `..end`,
    /// `want` at most (at least one): the bitmap read once, a block whose
    /// free is not durable yet counting as used.
    fn free_run(
        &mut self,
        m: &mut Modes,
        g: usize,
        start: usize,
        end: usize,
        want: usize,
    ) -> Result<Option<(usize, usize)>> {
        let bytes = m.read(self.gds[g].block_bitmap)?;
        let seen: Cow<[u8]> = match self.pending.mask(g) {
            None => Cow::Borrowed(bytes),
            Some(mask) => {
                let mut seen = bytes.to_vec();
                for (b, m) in seen.iter_mut().zip(mask) {
                    *b |= m;
                }
                Cow::Owned(seen)
            }
        };
        let map = Bitmap::new(&seen);
        let Some(bit) = clear_from(&map, start, end) else {
            return Ok(None);
        };
        let most = want.clamp(1, end - bit);
        let len = 1
            + (1..most)
                .take_while(|&n| map.get(bit + n) == Some(false))
                .count();
        Ok(Some((bit, len)))
    }

    /// Sets the clear bits `bit..bit + len` of a bitmap: one patch per
    /// 32-bit word they touch.
    fn set_run(
        &mut self,
        m: &mut Modes,
        bitmap: BlockNo,
        bit: usize,
        len: usize,
    ) -> Result<Vec<PatchId>> {
        let mut patches = Vec::with_capacity(len.div_ceil(32) + 1);
        let (mut i, end) = (bit, bit + len);
        while i < end {
            let n = (32 - i % 32).min(end - i);
            let mask = (u32::MAX >> (32 - n)) << (i % 32);
            let word = i / 32 * 4;
            patches.push(m.bit(bitmap, word, mask, &[], META)?);
            i += n;
        }
        Ok(patches)
    }

    /// Calls `f(first, count)` for every run of blocks the bitmaps mark
    /// free, group by group (bits past the file system's end excluded).
    pub(crate) fn free_runs(
        &self,
        m: &mut Modes,
        f: &mut dyn FnMut(BlockNo, u64) -> Result<()>,
    ) -> Result<()> {
        for g in 0..self.gds.len() {
            let n = self.layout.blocks_in_group(GroupNo(g as u32)) as usize;
            let bytes = m.read(self.gds[g].block_bitmap)?.to_vec();
            let map = Bitmap::new(&bytes);
            let first = self.group_first(g);
            let mut bit = 0;
            while let Some(start) = map.find_clear(bit, n) {
                let len = 1
                    + (start + 1..n)
                        .take_while(|&b| map.get(b) == Some(false))
                        .count();
                f(first.plus(start as u64), len as u64)?;
                bit = start + len;
                if bit >= n {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Whether block `block` is marked used in its group's bitmap.
    pub(crate) fn block_marked(&self, m: &mut Modes, block: BlockNo) -> Result<bool> {
        let g = self
            .layout
            .group_of_block(block)
            .ok_or(DiskError::Refused(Refusal::Invalid(
                "block beyond the file system",
            )))?
            .0 as usize;
        let bit = block.since(self.group_first(g)) as usize;
        let bytes = m.read(self.gds[g].block_bitmap)?;
        Ok(Bitmap::new(bytes).get(bit) == Some(true))
    }

    /// Whether inode `ino` is marked used in its group's bitmap.
    pub(crate) fn inode_marked(&self, m: &mut Modes, ino: InodeNo) -> Result<bool> {
        let (g, index) = self
            .layout
            .inode_group(ino)
            .ok_or(DiskError::Refused(Refusal::Invalid("inode out of range")))?;
        let bytes = m.read(self.gds[g.0 as usize].inode_bitmap)?;
        Ok(Bitmap::new(bytes).get(index as usize) == Some(true))
    }

    fn expect_bit(
        &self,
        m: &mut Modes,
        bitmap: BlockNo,
        bit: usize,
        want: bool,
        what: &str,
    ) -> Result<()> {
        let bytes = m.read(bitmap)?;
        if Bitmap::new(bytes).get(bit) != Some(want) {
            return Err(DiskError::Corrupt(format!(
                "{what}: bit {bit} of bitmap {bitmap}"
            )));
        }
        Ok(())
    }

    /// Flips one bit with a bit patch (its own dependencies, §3.5).
    fn flip(
        &mut self,
        m: &mut Modes,
        bitmap: BlockNo,
        bit: usize,
        deps: &[PatchId],
    ) -> Result<PatchId> {
        let word = bit / 32 * 4;
        Ok(m.bit(bitmap, word, 1 << (bit % 32), deps, META)?)
    }
}

/// A count in a group descriptor that allocation and free move.
#[derive(Clone, Copy, Debug)]
enum Summary {
    FreeBlocks,
    FreeInodes,
    Dirs,
}

impl Summary {
    fn name(self) -> &'static str {
        match self {
            Summary::FreeBlocks => "free block",
            Summary::FreeInodes => "free inode",
            Summary::Dirs => "directory",
        }
    }
}

/// `v` moved by `delta`, if that stays in `0..=cap`.
fn stepped(v: u32, delta: i64, cap: u32) -> Option<u32> {
    u32::try_from(i64::from(v) + delta)
        .ok()
        .filter(|&n| n <= cap)
}

/// The first clear bit in `[start, end)`, else in `[0, start)`.
fn clear_from(map: &Bitmap<'_>, start: usize, end: usize) -> Option<usize> {
    map.find_clear(start, end)
        .or_else(|| map.find_clear(0, start.min(end)))
}

/// Blocks freed while their data is not journaled, not reusable until the
/// free is durable: a queue in free order (frees become durable roughly in
/// that order, so only its head is ever tested) and, per group, a mask of
/// the bits the allocator must treat as still in use.
#[derive(Default)]
pub(crate) struct PendingFrees {
    queue: VecDeque<(usize, usize, PatchId)>,
    /// Per group: the mask and how many bits it has set.
    masks: FxHashMap<usize, (Vec<u8>, usize)>,
    /// Bits set in all the masks (checked before every operation that
    /// may allocate, `room_before_op`).
    held: u64,
}

impl PendingFrees {
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Blocks held back.
    fn count(&self) -> u64 {
        self.held
    }

    fn push(&mut self, group: usize, bit: usize, free: PatchId) {
        let (mask, set) = self.masks.entry(group).or_default();
        if mask.len() <= bit / 8 {
            mask.resize(bit / 8 + 1, 0);
        }
        if mask[bit / 8] & (1 << (bit % 8)) == 0 {
            mask[bit / 8] |= 1 << (bit % 8);
            *set += 1;
            self.held += 1;
        }
        self.queue.push_back((group, bit, free));
    }

    /// Lets the allocator have the blocks whose frees are durable, from the
    /// head of the queue up to the first that is not.
    pub(crate) fn release_durable(&mut self, cache: &stitch_patch::PatchCache) {
        while let Some(&(g, bit, p)) = self.queue.front() {
            if !cache.is_committed(p) {
                break;
            }
            self.queue.pop_front();
            if let Some((mask, set)) = self.masks.get_mut(&g) {
                if mask[bit / 8] & (1 << (bit % 8)) != 0 {
                    mask[bit / 8] &= !(1 << (bit % 8));
                    *set -= 1;
                    self.held -= 1;
                }
                if *set == 0 {
                    self.masks.remove(&g);
                }
            }
        }
    }

    fn mask(&self, group: usize) -> Option<&[u8]> {
        self.masks.get(&group).map(|(m, _)| m.as_slice())
    }
}

/// Inode numbers reserved ahead of their allocation
/// ([`DiskFs::reserve_inode`](crate::DiskFs::reserve_inode)), each with the patch that marked it used if
/// soft updates marked it at once, and what keeps picking the next one
/// cheap while thousands are reserved: per group a count of the reserved
/// numbers its free count still includes (the unmarked ones), and a bit
/// below which every inode is in use or reserved (the search starts there).
#[derive(Default)]
pub(crate) struct Reserved {
    set: FxHashMap<InodeNo, Option<PatchId>>,
    unmarked_per_group: Vec<usize>,
    marked: usize,
    hints: Vec<usize>,
}

impl Reserved {
    fn slot(v: &mut Vec<usize>, g: usize) -> &mut usize {
        if v.len() <= g {
            v.resize(g + 1, 0);
        }
        &mut v[g]
    }

    fn split(ino: InodeNo, ipg: u32) -> (usize, usize) {
        let i = ino.0 as usize - 1;
        (i / ipg as usize, i % ipg as usize)
    }

    pub(crate) fn contains(&self, ino: InodeNo) -> bool {
        self.set.contains_key(&ino)
    }

    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }

    fn unmarked_in_group(&self, g: usize) -> usize {
        self.unmarked_per_group.get(g).copied().unwrap_or(0)
    }

    /// How many reserved numbers are marked used already.
    fn marked(&self) -> usize {
        self.marked
    }

    fn hint(&self, g: usize) -> usize {
        self.hints.get(g).copied().unwrap_or(0)
    }

    /// Records `ino`, the first free unreserved inode at or above its
    /// group's hint (what `pick_inode` returns), so the hint moves past it.
    fn insert(&mut self, ino: InodeNo, ipg: u32, marked: Option<PatchId>) {
        if self.set.insert(ino, marked).is_none() {
            let (g, bit) = Self::split(ino, ipg);
            *self.counter(g, marked) += 1;
            let h = Self::slot(&mut self.hints, g);
            *h = (*h).max(bit + 1);
        }
    }

    /// Where a reservation in group `g` is counted: with the marked ones,
    /// or in its group's count of unmarked ones.
    fn counter(&mut self, g: usize, marked: Option<PatchId>) -> &mut usize {
        match marked {
            Some(_) => &mut self.marked,
            None => Self::slot(&mut self.unmarked_per_group, g),
        }
    }

    /// Forgets `ino` (returning its mark, if it was reserved); a number
    /// given back may be picked again.
    fn remove(&mut self, ino: InodeNo, ipg: u32) -> Option<Option<PatchId>> {
        let marked = self.allocated(ino, ipg)?;
        let (g, bit) = Self::split(ino, ipg);
        self.freed(g, bit);
        Some(marked)
    }

    /// `ino` reached the bitmap: no longer reserved, and still not free.
    /// Returns its mark, if it was reserved.
    fn allocated(&mut self, ino: InodeNo, ipg: u32) -> Option<Option<PatchId>> {
        let marked = self.set.remove(&ino)?;
        *self.counter(Self::split(ino, ipg).0, marked) -= 1;
        Some(marked)
    }

    /// Bit `bit` of group `g` became free (or unreserved): search from it.
    fn freed(&mut self, g: usize, bit: usize) {
        let h = Self::slot(&mut self.hints, g);
        *h = (*h).min(bit);
    }
}
