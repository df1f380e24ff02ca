//! Creating patches, and the optimizations that decide how (Featherstitch
//! §4.1–§4.3):
//!
//! 1. **Hard** (§4.1): if no patch on another block (or empty patch) depends
//!    on an uncommitted patch of this block (`ext_in == 0`), no block-level
//!    cycle can ever have its head here, so the new patch needs no undo data
//!    (unless an older soft patch of the block would be stuck behind it; see
//!    `create_hard`).
//! 2. **Hard merging** (§4.2): such a patch merges into the block's hard
//!    patch; with **soft-to-hard** merging the block's soft patches become
//!    hard and merge too, so a block holds at most one hard patch and that
//!    patch depends on nothing on its own block.
//! 3. **Overlap merging** (§4.3): otherwise a patch merges into the newest
//!    patch it overlaps, when a bounded chain search proves the new edges
//!    close no cycle and make no hard patch wait on its own block.
//!
//! Direct dependencies are given at creation; the only later additions are
//! merges (proved safe as above) and `add_dependency` on an empty patch
//! (checked exactly). So every block-level cycle through a patch exists when
//! the patch is born (§4.1 and its footnote).

use crate::block::{chunk_mask, BlockBuf};
use crate::graph::EdgeCheck;
use crate::id::PatchId;
use crate::patch::{xor_word, BlockIdx, Kind, Patch, PatchFlags, State, NO_BLOCK};
use crate::{BlockNo, PatchCache, PatchError, Result};
use smallvec::SmallVec;
use std::sync::Arc;

/// The change a new patch makes: bytes to write, a whole block's page to
/// take as the block's contents, or bits to flip.
#[derive(Copy, Clone)]
enum Change<'a> {
    Bytes(&'a [u8]),
    Page(&'a Arc<Vec<u8>>),
    Flip,
}

type DepList = SmallVec<[PatchId; 8]>;

/// The most patches an empty patch waits on directly; more are put under
/// intermediate empty patches, a tree of this fan-in. A patch that commits
/// leaves the sorted dependency list of each patch waiting on it, a shift of
/// the list behind it; patches commit about oldest first, so from the
/// front, and one patch waiting on N of them cost O(N²). memfs groups every
/// patch of a flush (after 20,000 new files, one group waited on about
/// 56,000): a sync after 40,000 new files took 0.54–0.58 s of server CPU
/// with one wide patch, 0.30–0.39 s with the tree.
pub const EMPTY_FAN_IN: usize = 64;

impl PatchCache {
    /// Creates a patch writing `data` at `offset` of `block`, depending on
    /// `deps` (committed handles are ignored). Returns the patch that now
    /// stands for the change: new, or the one it merged into.
    pub fn create_byte(
        &mut self,
        block: BlockNo,
        offset: usize,
        data: &[u8],
        deps: &[PatchId],
        flags: PatchFlags,
    ) -> Result<PatchId> {
        self.check_fits(offset, data.len())?;
        let kind = Kind::Byte {
            offset: offset as u32,
            len: data.len() as u32,
        };
        let full = offset == 0 && data.len() == self.block_size;
        self.create_on_block(block, kind, Change::Bytes(data), deps, flags, full)
    }

    /// [`create_byte`](Self::create_byte) of a whole block whose new
    /// contents are `page`, which the caller keeps sharing: the block takes
    /// the page as its buffer instead of a copy, and goes to the device from
    /// it. Neither side writes a shared page in place (the caller must copy
    /// it before changing it, as `Arc::make_mut` does; the cache copies it
    /// before any later change to the block). Fails with `OutOfBlock` unless
    /// the page is one block long.
    pub fn create_byte_shared(
        &mut self,
        block: BlockNo,
        page: &Arc<Vec<u8>>,
        deps: &[PatchId],
        flags: PatchFlags,
    ) -> Result<PatchId> {
        if page.len() != self.block_size {
            return Err(PatchError::OutOfBlock {
                offset: 0,
                len: page.len(),
                block_size: self.block_size,
            });
        }
        let kind = Kind::Byte {
            offset: 0,
            len: self.block_size as u32,
        };
        self.create_on_block(block, kind, Change::Page(page), deps, flags, true)
    }

    /// Creates a patch flipping the bits of `mask` in the little-endian
    /// 32-bit word at `offset` (bitmaps: each bit may carry its own
    /// dependencies, §3.5).
    pub fn create_bit(
        &mut self,
        block: BlockNo,
        offset: usize,
        mask: u32,
        deps: &[PatchId],
        flags: PatchFlags,
    ) -> Result<PatchId> {
        self.check_fits(offset, 4)?;
        let kind = Kind::Bit {
            offset: offset as u32,
            mask,
        };
        self.create_on_block(block, kind, Change::Flip, deps, flags, false)
    }

    /// Creates an empty patch: no block, no data, only dependencies. It
    /// commits as soon as everything it depends on has committed.
    pub fn create_empty(&mut self, deps: &[PatchId]) -> Result<PatchId> {
        self.new_empty(deps, false)
    }

    /// Creates an empty patch held in memory: it does not commit, and what
    /// depends on it is not written, until [`PatchCache::release`] (§3.5; the
    /// journal holds home writes back this way until the commit record exists).
    pub fn create_held(&mut self, deps: &[PatchId]) -> Result<PatchId> {
        self.new_empty(deps, true)
    }

    /// Lets a held or otherwise uncommitted empty patch depend on `dep` too
    /// (the footnote of §4.1). Refused if it would close a cycle or make a
    /// hard patch wait on its own block; the check is exact.
    pub fn add_dependency(&mut self, empty: PatchId, dep: PatchId) -> Result<()> {
        self.check_running()?;
        let e = self
            .arena
            .resolve(empty)
            .ok_or(PatchError::NotEmpty(empty))?;
        let p = self.arena.get(e);
        if !p.is_empty() || p.state != State::Uncommitted {
            return Err(PatchError::NotEmpty(empty));
        }
        let Some(d) = self.arena.resolve(dep) else {
            return Ok(());
        };
        if d == e {
            return Err(PatchError::Cycle {
                from: empty,
                to: dep,
            });
        }
        if self.has_edge(e, d) {
            return Ok(());
        }
        match self.check_new_edges(e, &[d], false) {
            EdgeCheck::Safe => {}
            EdgeCheck::Cycle | EdgeCheck::TooFar => {
                return Err(PatchError::Cycle {
                    from: empty,
                    to: dep,
                })
            }
            EdgeCheck::BlockCycle(hard) => {
                return Err(PatchError::BlockCycle {
                    from: empty,
                    to: dep,
                    hard,
                })
            }
        }
        self.add_edge(e, d);
        Ok(())
    }

    /// Releases a held empty patch: it commits once its dependencies have.
    pub fn release(&mut self, held: PatchId) -> Result<()> {
        let e = self.arena.resolve(held).ok_or(PatchError::NotHeld(held))?;
        let p = self.arena.get_mut(e);
        if !p.held {
            return Err(PatchError::NotHeld(held));
        }
        p.held = false;
        self.held -= 1;
        self.settle(e);
        Ok(())
    }

    fn check_fits(&self, offset: usize, len: usize) -> Result<()> {
        if len == 0
            || offset
                .checked_add(len)
                .is_none_or(|end| end > self.block_size)
        {
            return Err(PatchError::OutOfBlock {
                offset,
                len,
                block_size: self.block_size,
            });
        }
        Ok(())
    }

    fn new_empty(&mut self, deps: &[PatchId], held: bool) -> Result<PatchId> {
        self.check_running()?;
        self.stats.requests += 1;
        let mut deps = self.live_deps(deps);
        while deps.len() > EMPTY_FAN_IN {
            // Each part holds live patches, so its patch waits and does not
            // commit before the level above links it.
            deps = deps
                .chunks(EMPTY_FAN_IN)
                .map(|part| self.insert_empty(part, false))
                .collect();
        }
        let id = self.insert_empty(&deps, held);
        self.settle(id);
        Ok(id)
    }

    /// A new empty patch waiting on `deps` (live patches), not yet settled.
    fn insert_empty(&mut self, deps: &[PatchId], held: bool) -> PatchId {
        let mut patch = Patch::new(NO_BLOCK, Kind::Empty, PatchFlags::default());
        patch.held = held;
        let id = self.arena.insert(patch);
        self.stats.created_empty += 1;
        if held {
            self.held += 1;
        }
        for &d in deps {
            self.add_edge(id, d);
        }
        id
    }

    /// Resolves handles to live patches (following merges), drops committed
    /// ones and duplicates.
    fn live_deps(&self, deps: &[PatchId]) -> DepList {
        let mut out = DepList::new();
        // Long lists (a flush's group of every patch it made) are deduplicated
        // by a set; short ones by a scan.
        let mut seen = (deps.len() > 16).then(rustc_hash::FxHashSet::default);
        for &d in deps {
            if let Some(live) = self.arena.resolve(d) {
                let new = match &mut seen {
                    Some(set) => set.insert(live),
                    None => !out.contains(&live),
                };
                if new {
                    out.push(live);
                }
            }
        }
        out
    }

    fn create_on_block(
        &mut self,
        no: BlockNo,
        kind: Kind,
        change: Change<'_>,
        deps: &[PatchId],
        flags: PatchFlags,
        full: bool,
    ) -> Result<PatchId> {
        self.check_running()?;
        self.stats.requests += 1;
        let b = self.load_block(no, full)?;
        let deps = self.live_deps(deps);
        let opts = self.cfg.optimizations;
        let was_dirty = !self.blocks.get(b).patches.is_empty();
        let id = if opts.hard_patches
            && self.blocks.get(b).ext_in == 0
            && !(opts.prompt_rounds
                && (self.waits_on_other_block(&deps) || self.block_waits_on_other_blocks(b)))
        {
            self.create_hard(b, kind, change, deps, flags)
        } else {
            self.create_soft(b, kind, change, deps, flags)
        };
        if !was_dirty {
            self.became_dirty(b);
        }
        self.blocks.get_mut(b).file_data = flags.data;
        self.apply_backpressure()?;
        Ok(id)
    }

    /// §4.1–4.2: nothing outside the block waits on it. A new hard patch
    /// must not sit above an older soft patch of its block: the soft patch
    /// could become ready while the hard one waits, and the block could then
    /// not be written at all (the hard patch can't be rolled back). §4.1's
    /// liveness argument needs every later patch on a block to depend on its
    /// hard patch. So without soft-to-hard merging, a block that still holds
    /// soft patches only takes the change into its existing hard patch, or
    /// as a soft patch; and without hard merging, a second hard patch may not
    /// wait on another block (see `waits_off_block`).
    fn create_hard(
        &mut self,
        b: BlockIdx,
        kind: Kind,
        change: Change<'_>,
        deps: DepList,
        flags: PatchFlags,
    ) -> PatchId {
        let opts = self.cfg.optimizations;
        let block = self.blocks.get(b);
        let has_soft = block.patches.iter().any(|&p| !self.arena.get(p).hard);
        let epoch = self.merge_epoch;
        if block.patches.iter().any(|&p| {
            let pp = self.arena.get(p);
            pp.epoch != epoch || pp.flags != flags
        }) {
            // Another epoch's patches, or patches the creator flagged
            // differently (data and metadata), wait here: neither merge
            // with them nor gate them behind a hard patch of this one.
            return self.create_soft(b, kind, change, deps, flags);
        }
        let target = if block.patches.is_empty() || !opts.hard_merging {
            None
        } else if !has_soft || opts.soft_to_hard {
            Some(self.collapse_block(b))
        } else {
            self.hard_merge_target(b, &kind, &deps)
        };
        let Some(target) = target else {
            if has_soft || (self.blocks.get(b).hard.is_some() && self.waits_off_block(b, &deps)) {
                return self.create_soft(b, kind, change, deps, flags);
            }
            let mut all = deps;
            self.add_overlap_deps(b, &kind, &mut all);
            let id = self.insert_patch(b, kind, change, &all, flags, true);
            self.stats.created_hard += 1;
            return id;
        };
        self.apply_change(b, kind, change);
        self.widen_hard_range(target, kind);
        for d in deps {
            if let Some(d) = self.arena.resolve(d) {
                if d != target {
                    self.add_edge(target, d);
                }
            }
        }
        // Collapsing dropped the edges between the merged patches: a target
        // that waited only on patches of its own block may be ready now, and
        // nothing else would put it on the ready list (write-back stalled
        // with it as the only writable patch; proptest seed in the
        // regressions file).
        self.settle(target);
        self.stats.merged_hard += 1;
        target
    }

    /// Whether any dependency is an uncommitted patch on a block (another
    /// one: a patch of the block itself would be merged or overlapped).
    /// Empty patches do not count (a journal transaction's hold: every
    /// change of its blocks waits on it alike).
    fn waits_on_other_block(&self, deps: &DepList) -> bool {
        deps.iter().any(|&d| {
            let p = self.arena.get(d);
            p.state == State::Uncommitted && p.block != NO_BLOCK
        })
    }

    /// Whether a patch of block `b` waits on a patch of another block.
    /// Then no new patch of `b` is made hard (nor merged into a hard one):
    /// a hard patch cannot be rolled back, so it would hold every later
    /// change of the block behind that wait, however independent: a
    /// bitmap's allocation behind a free that waits on an inode, which
    /// waits on a directory entry, one device flush per link. Soft
    /// patches keep their undo data and go out as soon as each is ready.
    fn block_waits_on_other_blocks(&self, b: BlockIdx) -> bool {
        self.blocks.get(b).patches.iter().any(|&p| {
            self.arena.get(p).ddeps.iter().any(|&d| {
                let dp = self.arena.get(d);
                dp.state == State::Uncommitted && dp.block != NO_BLOCK && dp.block != b
            })
        })
    }

    /// Whether any dependency is an uncommitted patch off block `b` (or an
    /// empty one). Without hard merging, a second hard patch on a block must
    /// not wait on another block: it would gate the block (it can't be rolled
    /// back) while the older hard patch is ready, and two such blocks can wait
    /// on each other.
    fn waits_off_block(&self, b: BlockIdx, deps: &DepList) -> bool {
        deps.iter().any(|&d| {
            let p = self.arena.get(d);
            p.state == State::Uncommitted && p.block != b
        })
    }

    /// Hard merging without soft-to-hard: the block's hard patch can take
    /// the change only if the change touches no soft patch and depends on
    /// none of the block's soft patches (either would close a cycle).
    fn hard_merge_target(&self, b: BlockIdx, kind: &Kind, deps: &DepList) -> Option<PatchId> {
        let block = self.blocks.get(b);
        let h = block.hard?;
        let touches_soft = block.patches.iter().any(|&p| {
            let pp = self.arena.get(p);
            !pp.hard && (pp.kind.overlaps(kind) || deps.contains(&p))
        });
        (!touches_soft).then_some(h)
    }

    /// A hard patch's range is only informative (it overlaps everything);
    /// keep it the hull of what it changed, for the graph view.
    fn widen_hard_range(&mut self, t: PatchId, kind: Kind) {
        let tp = self.arena.get_mut(t);
        let (a0, a1) = tp.kind.range();
        let (c0, c1) = kind.range();
        let (lo, hi) = (a0.min(c0), a1.max(c1));
        tp.kind = Kind::Byte {
            offset: lo,
            len: hi - lo,
        };
    }

    /// Soft-to-hard and hard merging (§4.2): turns every patch of the block
    /// that is not in flight into one hard patch. Valid because `ext_in == 0`:
    /// no chain leaves the block and comes back, so none of them can head a
    /// block-level cycle, and none needs its undo data.
    fn collapse_block(&mut self, b: BlockIdx) -> PatchId {
        let list = self.blocks.get(b).patches.clone();
        let target = self.blocks.get(b).hard.unwrap_or(list[0]);
        let (mut lo, mut hi) = self.arena.get(target).kind.range();
        for &m in &list {
            let (l, h) = self.arena.get(m).kind.range();
            lo = lo.min(l);
            hi = hi.max(h);
            if m == target {
                continue;
            }
            if self.arena.get(m).hard {
                self.stats.merged_hard += 1;
            } else {
                self.stats.merged_soft_to_hard += 1;
            }
            let same = move |c: &PatchCache, x: PatchId| {
                let p = c.arena.get(x);
                p.block == b && p.state == State::Uncommitted
            };
            self.merge_into(m, target, &same);
        }
        let t = self.arena.get_mut(target);
        if !t.hard {
            self.stats.merged_soft_to_hard += 1;
        }
        let undo = t.undo.take();
        t.hard = true;
        t.kind = Kind::Byte {
            offset: lo,
            len: hi - lo,
        };
        self.stats.undo_bytes_live -= undo.map_or(0, |u| u.len() as u64);
        let block = self.blocks.get_mut(b);
        block.patches.clear();
        block.patches.push(target);
        block.hard = Some(target);
        block.soft_chunks.clear();
        target
    }

    /// A patch some other block may wait on: it may need rolling back.
    fn create_soft(
        &mut self,
        b: BlockIdx,
        kind: Kind,
        change: Change<'_>,
        deps: DepList,
        flags: PatchFlags,
    ) -> PatchId {
        let mut all = deps;
        let (newest_overlap, sibling) = self.overlap_scan(b, &kind, &mut all);
        if self.cfg.optimizations.overlap_merging {
            // Merges stay within one merge epoch and one set of flags: a
            // mode reads both (the journal: transaction, data or metadata).
            let epoch = self.merge_epoch;
            let same_kind = |c: &PatchCache, p: PatchId| {
                let pp = c.arena.get(p);
                pp.epoch == epoch && pp.flags == flags
            };
            let newest_overlap = newest_overlap.filter(|&t| same_kind(self, t));
            let sibling = sibling.filter(|&s| same_kind(self, s));
            if let Some(t) = newest_overlap {
                if let Some(id) = self.try_overlap_merge(b, t, kind, change, &all) {
                    return id;
                }
            }
            if let Some(s) = sibling.filter(|&s| self.joins_sibling(s, &all)) {
                self.apply_change(b, kind, change);
                if let (Kind::Bit { mask, .. }, Kind::Bit { offset, mask: m }) =
                    (kind, self.arena.get(s).kind)
                {
                    self.arena.get_mut(s).kind = Kind::Bit {
                        offset,
                        mask: m | mask,
                    };
                }
                self.stats.merged_overlap += 1;
                return s;
            }
        }
        self.insert_patch(b, kind, change, &all, flags, false)
    }

    /// A new bit patch may join a soft bit patch of the same word (with no
    /// newer patch overlapping it) when both wait on exactly the same
    /// patches: no edge is added, so no cycle or block-level cycle can come
    /// of it, and the bits were free to be written together anyway. Frees
    /// of one file's blocks, all waiting on the same cleared inode, become
    /// one patch per bitmap word this way. Bits that wait on less must not
    /// join: an allocation beside a free would wait for the free's whole
    /// chain (entry, inode), one device flush per link.
    fn joins_sibling(&self, s: PatchId, deps: &DepList) -> bool {
        let sp = self.arena.get(s);
        deps.iter().all(|&d| d == s || sp.ddeps.contains(&d))
            && sp
                .ddeps
                .iter()
                .all(|&d| deps.contains(&d) || self.arena.get(d).state != State::Uncommitted)
    }

    /// Adds overlap dependencies (§3.5) on the block's newest hard patch
    /// (which overlaps everything) and, for each byte or bit the change
    /// touches, on the newest patch that touched it. Older writers need no
    /// edge: by the same rule the newest one depends on them, so a counter
    /// rewritten n times costs n edges, not n²/2. Returns the newest patch
    /// overlapped, the merge candidate.
    fn add_overlap_deps(&self, b: BlockIdx, kind: &Kind, deps: &mut DepList) -> Option<PatchId> {
        self.overlap_scan(b, kind, deps).0
    }

    /// The scan behind [`Self::add_overlap_deps`]. Also returns the newest
    /// soft bit patch on the same word as a new bit patch, if no patch newer
    /// than it overlaps the new one: a sibling the new bits may join.
    fn overlap_scan(
        &self,
        b: BlockIdx,
        kind: &Kind,
        deps: &mut DepList,
    ) -> (Option<PatchId>, Option<PatchId>) {
        let block = self.blocks.get(b);
        let mut uncovered = Uncovered::of(kind);
        let mut newest = None;
        let mut sibling = None;
        let (lo, hi) = kind.range();
        let chunks = chunk_mask(lo, hi, self.block_size);
        // Soft patches touching these chunks not yet passed: none left, no
        // older soft patch can overlap (the hard one is handled below).
        let mut unmet = block.soft_chunks.incidences(chunks);
        let word = match *kind {
            Kind::Bit { offset, .. } => Some(offset),
            _ => None,
        };
        for &p in block.patches.iter().rev() {
            if uncovered.is_empty() || unmet == 0 {
                break;
            }
            let pp = self.arena.get(p);
            if pp.hard {
                continue;
            }
            let (plo, phi) = pp.kind.range();
            unmet -= u64::from((chunk_mask(plo, phi, self.block_size) & chunks).count_ones());
            if uncovered.cover(&pp.kind) {
                newest.get_or_insert(p);
                if !deps.contains(&p) {
                    deps.push(p);
                }
            } else if newest.is_none() && sibling.is_none() {
                if let (Some(w), Kind::Bit { offset, .. }) = (word, pp.kind) {
                    if offset == w {
                        sibling = Some(p);
                    }
                }
            }
        }
        if let Some(h) = block.hard {
            newest.get_or_insert(h);
            if !deps.contains(&h) {
                deps.push(h);
            }
        }
        (newest, sibling)
    }

    /// §4.3: merge into `t`, the newest patch the change overlaps, if the new
    /// edges are proved safe. Merging into the newest overlapped patch keeps
    /// reverse-order rollback exact: no patch after `t` touches these bytes.
    fn try_overlap_merge(
        &mut self,
        b: BlockIdx,
        t: PatchId,
        kind: Kind,
        change: Change<'_>,
        all: &DepList,
    ) -> Option<PatchId> {
        let new: DepList = all
            .iter()
            .copied()
            .filter(|&d| d != t && !self.has_edge(t, d))
            .collect();
        // A patch others wait on takes no new waits by a merge: they would
        // all wait longer (a directory entry's removal, waited on by the
        // inode it frees, would wait for the next file's inode too).
        let waited_on = self.arena.get(t).block_rdeps > 0;
        let adds_wait = new.iter().any(|&d| {
            let p = self.arena.get(d);
            p.state == State::Uncommitted && p.block != NO_BLOCK
        });
        if self.cfg.optimizations.prompt_rounds && waited_on && adds_wait {
            self.stats.overlap_merge_refused += 1;
            return None;
        }
        if self.check_new_edges(t, &new, true) != EdgeCheck::Safe {
            self.stats.overlap_merge_refused += 1;
            return None;
        }
        if self.arena.get(t).hard {
            self.widen_hard_range(t, kind);
        } else {
            let (a0, a1) = self.arena.get(t).kind.range();
            self.widen_undo(b, t, kind);
            let (lo, hi) = self.arena.get(t).kind.range();
            let chunks = &mut self.blocks.get_mut(b).soft_chunks;
            chunks.remove(chunk_mask(a0, a1, self.block_size));
            chunks.add(chunk_mask(lo, hi, self.block_size));
        }
        self.apply_change(b, kind, change);
        for d in new {
            self.add_edge(t, d);
        }
        self.stats.merged_overlap += 1;
        Some(t)
    }

    /// Extends soft patch `t` so it also covers `kind`, saving the current
    /// bytes (the state just before the new change) as undo data for what it
    /// did not cover. Overlapping ranges make the union contiguous.
    fn widen_undo(&mut self, b: BlockIdx, t: PatchId, kind: Kind) {
        let data = &self.blocks.get(b).data;
        let tp = self.arena.get(t);
        if let (
            Kind::Bit {
                offset: o1,
                mask: m1,
            },
            Kind::Bit {
                offset: o2,
                mask: m2,
            },
        ) = (tp.kind, kind)
        {
            debug_assert_eq!(o1, o2);
            // A bit flipped back cancels: the patch keeps its dependencies
            // but overlaps that bit no more, so a later change of the bit
            // gets no overlap dependency on it. A caller whose later change
            // must wait for those dependencies names the patch itself
            // (diskfs's giving back of a reserved inode number does).
            self.arena.get_mut(t).kind = Kind::Bit {
                offset: o1,
                mask: m1 ^ m2,
            };
            return;
        }
        let (a0, a1) = tp.kind.range();
        let (c0, c1) = kind.range();
        let (lo, hi) = (a0.min(c0), a1.max(c1));
        if matches!(tp.kind, Kind::Byte { .. }) && (lo, hi) == (a0, a1) {
            // The change falls inside `t`: its undo data already covers it.
            return;
        }
        let mut undo = data[lo as usize..hi as usize].to_vec();
        match tp.kind {
            Kind::Byte { .. } => {
                let old = tp.undo.as_ref().expect("soft byte patch without undo");
                undo[(a0 - lo) as usize..(a1 - lo) as usize].copy_from_slice(old);
            }
            Kind::Bit { offset, mask } => xor_word(&mut undo, offset - lo, mask),
            Kind::Empty => unreachable!("empty patches have no block"),
        }
        let old_len = tp.undo.as_ref().map_or(0, |u| u.len()) as u64;
        self.stats.undo_bytes_allocated += undo.len() as u64;
        self.stats.undo_bytes_live += undo.len() as u64 - old_len;
        let tp = self.arena.get_mut(t);
        tp.undo = Some(undo.into_boxed_slice());
        tp.kind = Kind::Byte {
            offset: lo,
            len: hi - lo,
        };
    }

    fn apply_change(&mut self, b: BlockIdx, kind: Kind, change: Change<'_>) {
        if let Change::Page(page) = change {
            debug_assert_eq!(kind.range(), (0, self.block_size as u32));
            let new = BlockBuf::Shared(Arc::clone(page));
            let old = std::mem::replace(&mut self.blocks.get_mut(b).data, new);
            self.blocks.recycle(old);
            return;
        }
        let data = self.blocks.get_mut(b).data.make_mut();
        match (kind, change) {
            (Kind::Byte { offset, len }, Change::Bytes(bytes)) => {
                data[offset as usize..(offset + len) as usize].copy_from_slice(bytes)
            }
            (Kind::Bit { offset, mask }, Change::Flip) => xor_word(data, offset, mask),
            _ => unreachable!("change does not match its kind"),
        }
    }

    /// Allocates a new patch on block `b`, saving undo data unless hard.
    fn insert_patch(
        &mut self,
        b: BlockIdx,
        kind: Kind,
        change: Change<'_>,
        deps: &DepList,
        flags: PatchFlags,
        hard: bool,
    ) -> PatchId {
        let mut patch = Patch::new(b, kind, flags);
        patch.hard = hard;
        patch.epoch = self.merge_epoch;
        if let (false, Kind::Byte { offset, len }) = (hard, kind) {
            let old = &self.blocks.get(b).data[offset as usize..(offset + len) as usize];
            patch.undo = Some(old.into());
            self.stats.undo_bytes_allocated += u64::from(len);
            self.stats.undo_bytes_live += u64::from(len);
        }
        match kind {
            Kind::Bit { .. } => self.stats.created_bit += 1,
            _ => self.stats.created_byte += 1,
        }
        let id = self.arena.insert(patch);
        self.apply_change(b, kind, change);
        for &d in deps {
            self.add_edge(id, d);
        }
        let (lo, hi) = kind.range();
        let mask = chunk_mask(lo, hi, self.block_size);
        let block = self.blocks.get_mut(b);
        block.patches.push(id);
        if hard {
            block.hard = Some(id);
        } else {
            block.soft_chunks.add(mask);
        }
        self.settle(id);
        id
    }
}

/// The part of a new change not yet known to be written by a newer patch,
/// while scanning a block's patches from newest to oldest.
enum Uncovered {
    /// Byte intervals, `[lo, hi)`.
    Bytes(SmallVec<[(u32, u32); 2]>),
    /// Bits of one word.
    Bits { offset: u32, mask: u32 },
}

impl Uncovered {
    fn of(kind: &Kind) -> Self {
        match *kind {
            Kind::Bit { offset, mask } => Uncovered::Bits { offset, mask },
            _ => {
                let (lo, hi) = kind.range();
                Uncovered::Bytes(smallvec::smallvec![(lo, hi)])
            }
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Uncovered::Bytes(v) => v.is_empty(),
            Uncovered::Bits { mask, .. } => *mask == 0,
        }
    }

    /// Removes what `older` covers; true if it overlapped anything left.
    fn cover(&mut self, older: &Kind) -> bool {
        match (self, *older) {
            (Uncovered::Bits { offset, mask }, Kind::Bit { offset: o, mask: m }) => {
                let hit = *offset == o && *mask & m != 0;
                if hit {
                    *mask &= !m;
                }
                hit
            }
            (Uncovered::Bits { offset, mask }, other) => {
                let (lo, hi) = other.range();
                let hit = *mask != 0 && lo < *offset + 4 && *offset < hi;
                if hit {
                    // A byte patch over the word rewrote every bit of it only
                    // if it covers the whole word; otherwise keep looking.
                    if lo <= *offset && *offset + 4 <= hi {
                        *mask = 0;
                    }
                }
                hit
            }
            (Uncovered::Bytes(v), other) => {
                let (lo, hi) = match other {
                    // A bit patch changes bits, not whole bytes: it overlaps
                    // but never covers.
                    Kind::Bit { offset, .. } => {
                        return v.iter().any(|&(a, b)| a < offset + 4 && offset < b);
                    }
                    k => k.range(),
                };
                let mut hit = false;
                let mut rest: SmallVec<[(u32, u32); 2]> = SmallVec::new();
                for &(a, b) in v.iter() {
                    if lo < b && a < hi {
                        hit = true;
                        if a < lo {
                            rest.push((a, lo));
                        }
                        if hi < b {
                            rest.push((hi, b));
                        }
                    } else {
                        rest.push((a, b));
                    }
                }
                *v = rest;
                hit
            }
        }
    }
}
