//! Writing blocks so that both safety properties hold (Featherstitch §3.2,
//! §4.4, §6.3), committing what a flush made durable, and the memory bounds.
//!
//! A write round walks dirty blocks in modified-FIFO order (the order they
//! became dirty, skipping blocks with nothing writable), extends each pick
//! with blocks n+1, n+2, … while they are writable (§6.3's sequential
//! heuristic), and sends the batch to the device. For each block it takes
//! the ready set `P` (ready list plus same-block closure, §4.4), builds the
//! image to write by reverting every other patch on a copy in reverse order,
//! and moves `P` in flight. A flush then commits everything in flight.
//!
//! A block whose hard patch is not in `P` cannot be written: a hard patch
//! has no undo data. Such a block waits; §4.1 guarantees its hard patch does
//! not wait on the block itself, so this cannot deadlock.

use crate::block::Blocks;
use crate::id::PatchId;
use crate::patch::{BlockIdx, State};
use crate::{BlockNo, PatchCache, PatchError, Result};
use stitch_blockdev::BlockWrite;

/// A device flush begun by [`PatchCache::flush_ticket`]: it may run while
/// other threads use the cache, and commits only what was written before.
#[must_use = "a flush ticket commits nothing until `PatchCache::flushed` gets it"]
pub struct FlushTicket {
    upto: u64,
    dev: std::sync::Arc<dyn stitch_blockdev::BlockDevice>,
}

impl FlushTicket {
    /// Flushes the device (no cache lock needed).
    pub fn flush(&self) -> std::result::Result<(), stitch_blockdev::DevError> {
        self.dev.flush()
    }
}

/// What [`PatchCache::sync_step_or_wait`] leaves its caller to do.
#[must_use = "a step's flush or wait is what makes the patch durable"]
pub enum SyncStep {
    /// The patch has committed.
    Done,
    /// Run this flush (without the cache), end it with
    /// [`PatchCache::flushed`], and step again.
    Flush(FlushTicket),
    /// A flush already running (another thread's ticket) covers what the
    /// patch is waiting for: wait until a ticket ends, then step again. A
    /// flush of its own now would commit only part of what it needs and
    /// cost a second flush after.
    Wait,
}

/// Which blocks a write round may pick.
pub(crate) enum Scope<'a> {
    All,
    Only(&'a [bool]),
}

impl PatchCache {
    /// Loads a block into the cache. A write covering the whole block needs
    /// no read (its old contents don't matter).
    pub(crate) fn load_block(&mut self, no: BlockNo, full_write: bool) -> Result<BlockIdx> {
        if let Some(idx) = self.blocks.lookup(no) {
            self.blocks.touch(idx);
            return Ok(idx);
        }
        let num_blocks = self.dev.num_blocks();
        if no.0 >= num_blocks {
            return Err(PatchError::OutOfRange {
                block: no,
                num_blocks,
            });
        }
        self.evict_to(self.cfg.max_blocks.saturating_sub(1));
        // A whole-block write overwrites the buffer; a read fills it.
        let mut data = self.blocks.buffer(self.block_size);
        if !full_write {
            self.dev.read(no, &mut data)?;
            self.stats.blocks_read += 1;
        }
        Ok(self.blocks.insert(no, data))
    }

    fn evict_to(&mut self, limit: usize) {
        while self.blocks.len() > limit && self.blocks.evict_one() {
            self.stats.evictions += 1;
        }
    }

    pub(crate) fn became_dirty(&mut self, b: BlockIdx) {
        self.blocks.make_dirty(b);
        let block = self.blocks.get_mut(b);
        if !block.in_fifo {
            block.in_fifo = true;
            self.fifo.push_back(b);
        }
    }

    /// Back-pressure: a writer that pushed dirty blocks past the bound waits
    /// while the cache writes back, down to 7/8 of the bound or until nothing
    /// more can be written (held patches may pin the rest).
    pub(crate) fn apply_backpressure(&mut self) -> Result<()> {
        if self.blocks.dirty <= self.cfg.max_dirty_blocks {
            return Ok(());
        }
        self.stats.backpressure_waits += 1;
        let low = self.cfg.max_dirty_blocks - self.cfg.max_dirty_blocks / 8;
        while self.blocks.dirty > low {
            let written = self.write_round(usize::MAX)?;
            self.flush()?;
            if written == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Writes up to `limit` blocks that have writable patches; returns how
    /// many. The patches written are in flight until the next [`flush`].
    ///
    /// [`flush`]: PatchCache::flush
    pub fn write_round(&mut self, limit: usize) -> Result<usize> {
        self.write_round_in(limit, Scope::All)
    }

    pub(crate) fn write_round_in(&mut self, limit: usize, scope: Scope<'_>) -> Result<usize> {
        self.check_running()?;
        let picks = self.pick_blocks(limit, &scope);
        if picks.is_empty() {
            return Ok(0);
        }
        if self.cfg.check_invariants {
            if let Err(why) = self.check_inflight_safety(&picks) {
                return Err(self.stop(PatchError::Invariant(why)));
            }
        }
        self.write_picks(&picks)?;
        self.write_seq += 1;
        let written = picks.len();
        for (b, set) in picks {
            self.move_in_flight(b, set);
        }
        Ok(written)
    }

    /// Modified FIFO plus the n+1 heuristic. Returns blocks sorted by number,
    /// each with the patches to write.
    fn pick_blocks(&mut self, limit: usize, scope: &Scope<'_>) -> Vec<(BlockIdx, Vec<PatchId>)> {
        self.compact_fifo();
        let mut picks: Vec<(BlockIdx, Vec<PatchId>)> = Vec::new();
        let order: Vec<BlockIdx> = self.fifo.iter().copied().collect();
        for b in order {
            if picks.len() >= limit {
                break;
            }
            let mut next = Some(b);
            while let Some(b) = next.filter(|_| picks.len() < limit) {
                let Some(set) = self.pickable(b, scope) else {
                    break;
                };
                self.blocks.get_mut(b).picked = true;
                picks.push((b, set));
                let n = BlockNo(self.blocks.get(b).no.0 + 1);
                next = self.blocks.lookup(n);
            }
        }
        for (b, _) in &picks {
            self.blocks.get_mut(*b).picked = false;
        }
        picks.sort_by_key(|(b, _)| self.blocks.get(*b).no);
        picks
    }

    fn pickable(&mut self, b: BlockIdx, scope: &Scope<'_>) -> Option<Vec<PatchId>> {
        let block = self.blocks.get(b);
        let in_scope = match scope {
            Scope::All => true,
            Scope::Only(mask) => mask.get(b as usize).copied().unwrap_or(false),
        };
        if !in_scope || block.picked || block.writing || block.patches.is_empty() {
            return None;
        }
        if self.cfg.optimizations.ready_lists && block.ready.is_empty() {
            return None;
        }
        self.writable_set(b)
    }

    /// Drops FIFO entries of blocks that are no longer dirty.
    fn compact_fifo(&mut self) {
        let blocks = &mut self.blocks;
        self.fifo.retain(|&b| {
            let block = blocks.get_mut(b);
            block.in_fifo = !block.patches.is_empty();
            block.in_fifo
        });
    }

    /// The patches of block `b` that may go in flight now, or `None` if the
    /// block can't be written (nothing ready, or its hard patch not ready).
    fn writable_set(&mut self, b: BlockIdx) -> Option<Vec<PatchId>> {
        let epoch = self.next_epoch();
        let set = if self.cfg.optimizations.ready_lists {
            self.ready_closure(b, epoch)
        } else {
            self.scan_closure(b, epoch)
        };
        let hard_ok = match self.blocks.get(b).hard {
            Some(h) => self.arena.get(h).mark == epoch,
            None => true,
        };
        (!set.is_empty() && hard_ok).then_some(set)
    }

    /// §4.4: start from the ready list; a patch on the same block whose every
    /// remaining dependency is in the set joins it ("as if p had committed").
    fn ready_closure(&mut self, b: BlockIdx, epoch: u32) -> Vec<PatchId> {
        let mut ready = std::mem::take(&mut self.blocks.get_mut(b).ready);
        ready.retain(|&p| {
            let live = self.arena.resolve(p) == Some(p);
            let keep = live && {
                let pp = self.arena.get(p);
                pp.block == b && pp.state == State::Uncommitted && pp.is_ready()
            };
            if live && !keep {
                self.arena.get_mut(p).in_ready = false;
            }
            keep
        });
        self.blocks.get_mut(b).ready = ready.clone();
        let mut stack = ready;
        for &p in &stack {
            self.arena.get_mut(p).mark = epoch;
        }
        let mut set = Vec::with_capacity(stack.len());
        let mut touched = Vec::new();
        while let Some(p) = stack.pop() {
            set.push(p);
            for r in self.arena.get(p).rdeps.clone() {
                let pr = self.arena.get_mut(r);
                if pr.block != b || pr.mark == epoch || pr.n_infl != 0 {
                    continue;
                }
                pr.scratch += 1;
                touched.push(r);
                if pr.scratch == pr.n_unc {
                    pr.mark = epoch;
                    stack.push(r);
                }
            }
        }
        for r in touched {
            self.arena.get_mut(r).scratch = 0;
        }
        set
    }

    /// Without ready lists: find the set by repeated scans of the block's
    /// patches, checking every dependency (the slow path §4.4 replaced).
    fn scan_closure(&mut self, b: BlockIdx, epoch: u32) -> Vec<PatchId> {
        let list = self.blocks.get(b).patches.clone();
        let mut set = Vec::new();
        loop {
            let before = set.len();
            for &p in &list {
                let pp = self.arena.get(p);
                if pp.mark == epoch {
                    continue;
                }
                let ok = pp.ddeps.iter().all(|&d| {
                    let pd = self.arena.get(d);
                    pd.block == b && pd.mark == epoch
                });
                if ok {
                    self.arena.get_mut(p).mark = epoch;
                    set.push(p);
                }
            }
            if set.len() == before {
                return set;
            }
        }
    }

    /// Builds each block's image (reverting patches not written, newest
    /// first, on a copy) and hands the batch to the device.
    fn write_picks(&mut self, picks: &[(BlockIdx, Vec<PatchId>)]) -> Result<()> {
        let mut copies: Vec<Option<Vec<u8>>> = Vec::with_capacity(picks.len());
        for (b, set) in picks {
            copies.push(self.reverted_copy(*b, set));
        }
        let writes: Vec<BlockWrite<'_>> = picks
            .iter()
            .zip(&copies)
            .map(|((b, _), copy)| {
                let block = self.blocks.get(*b);
                BlockWrite {
                    block: block.no,
                    data: copy.as_deref().unwrap_or(&block.data[..]),
                }
            })
            .collect();
        let result = self.dev.write_batch(&writes);
        drop(writes);
        if let Err(e) = result {
            return Err(self.stop(e.into()));
        }
        self.stats.write_batches += 1;
        self.stats.blocks_written += picks.len() as u64;
        Ok(())
    }

    /// `None` when every patch of the block is written (no copy needed).
    fn reverted_copy(&mut self, b: BlockIdx, set: &[PatchId]) -> Option<Vec<u8>> {
        let block = self.blocks.get(b);
        if set.len() == block.patches.len() {
            return None;
        }
        let epoch = self.mark_set(set);
        let block = self.blocks.get(b);
        let mut copy = block.data.to_vec();
        let mut reverts = 0;
        for &p in block.patches.iter().rev() {
            let pp = self.arena.get(p);
            if pp.mark != epoch {
                debug_assert!(!pp.hard, "reverting hard patch {p:?}");
                pp.revert_onto(&mut copy);
                reverts += 1;
            }
        }
        self.stats.reverts += reverts;
        Some(copy)
    }

    /// The patches of `set` are now in flight: their undo data is no longer
    /// needed, and what depends on them counts them as in flight.
    fn move_in_flight(&mut self, b: BlockIdx, set: Vec<PatchId>) {
        for &p in &set {
            let pp = self.arena.get_mut(p);
            pp.state = State::InFlight;
            pp.in_ready = false;
            let undo = pp.undo.take();
            self.stats.undo_bytes_live -= undo.map_or(0, |u| u.len() as u64);
            for r in self.arena.get(p).rdeps.clone() {
                let pr = self.arena.get_mut(r);
                pr.n_unc -= 1;
                pr.n_infl += 1;
                if pr.block != b {
                    self.blocks.get_mut(b).ext_in -= 1;
                }
            }
        }
        let epoch = self.mark_set(&set);
        let arena = &self.arena;
        let block_size = self.block_size;
        let block = self.blocks.get_mut(b);
        block.patches.retain(|&p| arena.get(p).mark != epoch);
        block.soft_chunks.clear();
        for p in block
            .patches
            .iter()
            .map(|&p| arena.get(p))
            .filter(|p| !p.hard)
        {
            let (lo, hi) = p.kind.range();
            block
                .soft_chunks
                .add(crate::block::chunk_mask(lo, hi, block_size));
        }
        if block.hard.is_some_and(|h| arena.get(h).mark == epoch) {
            block.hard = None;
        }
        block.inflight = set;
        block.writing = true;
        block.write_seq = self.write_seq;
        if block.patches.is_empty() {
            self.blocks.dirty -= 1;
        }
        self.inflight_blocks.push_back((self.write_seq, b));
    }

    /// Marks the members of a set with a fresh epoch, for membership tests.
    fn mark_set(&mut self, set: &[PatchId]) -> u32 {
        let epoch = self.next_epoch();
        for &p in set {
            self.arena.get_mut(p).mark = epoch;
        }
        epoch
    }

    /// Flushes the device; everything in flight commits (§3.1: the write is
    /// acknowledged durable only now).
    pub fn flush(&mut self) -> Result<()> {
        let ticket = self.flush_ticket()?;
        let result = ticket.flush();
        self.flushed(ticket, result)
    }

    /// Begins a flush that the caller runs without the cache, so that other
    /// threads may write while the device flushes: [`FlushTicket::flush`],
    /// then [`PatchCache::flushed`]. What is in flight now commits then;
    /// what is written meanwhile waits for a later flush.
    pub fn flush_ticket(&mut self) -> Result<FlushTicket> {
        self.check_running()?;
        self.outstanding.push(self.write_seq);
        Ok(FlushTicket {
            upto: self.write_seq,
            dev: self.dev.clone(),
        })
    }

    /// Ends the flush `ticket` began: on success, commits every patch
    /// written before it began (unless an earlier-ending flush did).
    pub fn flushed(
        &mut self,
        ticket: FlushTicket,
        result: std::result::Result<(), stitch_blockdev::DevError>,
    ) -> Result<()> {
        if let Some(i) = self.outstanding.iter().position(|&u| u == ticket.upto) {
            self.outstanding.swap_remove(i);
        }
        self.check_running()?;
        if let Err(e) = result {
            return Err(self.stop(e.into()));
        }
        self.stats.flushes += 1;
        if self.cfg.check_invariants {
            if let Err(why) = self.check_disk_safety(ticket.upto) {
                return Err(self.stop(PatchError::Invariant(why)));
            }
        }
        let mut shared = Vec::new();
        while let Some(&(seq, b)) = self.inflight_blocks.front() {
            if seq > ticket.upto {
                break;
            }
            self.inflight_blocks.pop_front();
            let list = std::mem::take(&mut self.blocks.get_mut(b).inflight);
            for p in list {
                if self.arena.resolve(p) == Some(p) {
                    self.commit(p);
                }
            }
            let block = self.blocks.get_mut(b);
            block.writing = false;
            if block.patches.is_empty() {
                self.blocks.make_clean(b);
                if self.blocks.holds_shared_page(b) {
                    shared.push(b);
                }
            }
        }
        // Blocks become clean only here; drop their FIFO entries before any
        // of them can be evicted and its slot reused.
        self.compact_fifo();
        // A clean block whose page the layer above still holds goes now: it
        // has the contents, and keeping the block would stop it reusing the
        // page.
        for &b in &shared {
            self.blocks.evict_clean(b);
        }
        self.stats.evictions += shared.len() as u64;
        self.evict_to(self.cfg.max_blocks);
        self.stats.evictions += self.blocks.evict_data_to(crate::DATA_KEEP) as u64;
        Ok(())
    }

    /// If more than `max_dirty` blocks are dirty, writes what can be written
    /// now and flushes, so a large write streams to the device in slices
    /// and its buffers are reused (clean file data is evicted at the flush)
    /// instead of the whole of it sitting in the cache. Safe at any moment:
    /// a write round only writes what every dependency allows.
    ///
    /// What stays dirty after a try could not go (a running transaction's
    /// metadata, held patches): unless some of it has gone since, the next
    /// try waits until another quarter of the bound has become dirty.
    /// Trying at every call scanned every dirty block, and wrote and flushed
    /// each new file's data alone, once per operation of a large journal
    /// transaction.
    pub fn write_back_over(&mut self, max_dirty: usize) -> Result<()> {
        let dirty = self.blocks.dirty;
        if dirty <= max_dirty {
            return Ok(());
        }
        let step = (max_dirty / 4).max(1);
        if let Some(left) = self.stream_left {
            if dirty >= left && dirty < left + step {
                return Ok(());
            }
        }
        if self.write_round(usize::MAX)? > 0 {
            self.flush()?;
        }
        self.stream_left = Some(self.blocks.dirty);
        Ok(())
    }

    /// Writes and flushes until nothing is dirty. Fails with `HeldBack` if
    /// held empty patches pin what is left, `Stuck` if nothing can be written
    /// for no reason (a bug; writes stop).
    pub fn sync(&mut self) -> Result<()> {
        loop {
            if self.blocks.dirty == 0 && self.inflight_blocks.is_empty() {
                return self.flush();
            }
            let had_inflight = !self.inflight_blocks.is_empty();
            let written = self.write_round(usize::MAX)?;
            self.flush()?;
            if written == 0 && !had_inflight {
                return Err(self.no_progress());
            }
        }
    }

    /// Writes and flushes until `id` has committed, writing only blocks that
    /// hold `id` or something it depends on.
    pub fn sync_patch(&mut self, id: PatchId) -> Result<()> {
        // Under the caller's lock throughout, so never a wait: a ticket
        // another thread holds ends only once this returns.
        while let Some(ticket) = self.step(id, false)? {
            let result = ticket.flush();
            self.flushed(ticket, result)?;
        }
        Ok(())
    }

    /// One round of [`PatchCache::sync_patch`] whose flush the caller runs
    /// (see [`PatchCache::flush_ticket`]): writes what `id` needs and can
    /// go now, and returns the flush to run, or `None` once `id` has
    /// committed. Fails when nothing is in flight and nothing can be
    /// written, as no flush would then help.
    pub fn sync_step(&mut self, id: PatchId) -> Result<Option<FlushTicket>> {
        self.step(id, false)
    }

    /// [`PatchCache::sync_step`] that may ask to [wait](SyncStep::Wait)
    /// rather than flush: when another ticket is running and `id` waits on
    /// blocks that ticket covers, either because something `id` needs
    /// could not be written yet because of them (a journal's commit block
    /// behind the previous commit), or because all of it is already in
    /// flight under that ticket. With no ticket running it never waits.
    /// (Soft updates do better flushing beside the other thread: what
    /// their sync needs next often does not wait on the running flush.)
    pub fn sync_step_or_wait(&mut self, id: PatchId) -> Result<SyncStep> {
        let wait = !self.outstanding.is_empty();
        Ok(match self.step(id, wait)? {
            Some(t) => SyncStep::Flush(t),
            None if self.arena.resolve(id).is_none() => SyncStep::Done,
            None => SyncStep::Wait,
        })
    }

    /// A step's writes; the flush to run, or `None` when `id` has committed
    /// or (with `may_wait`) a running ticket covers what it waits for.
    fn step(&mut self, id: PatchId, may_wait: bool) -> Result<Option<FlushTicket>> {
        let Some(live) = self.arena.resolve(id) else {
            return Ok(None);
        };
        let mask = self.dependency_blocks(live)?;
        let written = self.write_round_in(usize::MAX, Scope::Only(&mask))?;
        if may_wait && self.covered_by_running_flush(live) {
            return Ok(None);
        }
        if written == 0 && self.inflight_blocks.is_empty() {
            return Err(self.no_progress());
        }
        self.flush_ticket().map(Some)
    }

    /// Whether waiting for the tickets now running serves `id` as well as
    /// a flush of its own (see [`PatchCache::sync_step_or_wait`]).
    fn covered_by_running_flush(&mut self, id: PatchId) -> bool {
        let Some(&upto) = self.outstanding.iter().max() else {
            return false;
        };
        let (mut unwritten, mut covered, mut uncovered) = (false, false, false);
        let Ok(()) = self.walk_closure::<std::convert::Infallible>(id, |p, blocks| {
            if !p.is_empty() {
                match p.state {
                    State::Uncommitted => unwritten = true,
                    State::InFlight if blocks.get(p.block).write_seq <= upto => covered = true,
                    State::InFlight => uncovered = true,
                }
            }
            Ok(())
        });
        covered && (unwritten || !uncovered)
    }

    /// Visits `id` and every uncommitted patch it depends on, once each,
    /// until `visit` fails.
    fn walk_closure<E>(
        &mut self,
        id: PatchId,
        mut visit: impl FnMut(&crate::patch::Patch, &Blocks) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let epoch = self.next_epoch();
        let mut stack = vec![id];
        while let Some(x) = stack.pop() {
            let p = self.arena.get_mut(x);
            if p.mark == epoch {
                continue;
            }
            p.mark = epoch;
            let p = self.arena.get(x);
            visit(p, &self.blocks)?;
            stack.extend(p.ddeps.iter().copied());
        }
        Ok(())
    }

    fn no_progress(&mut self) -> PatchError {
        if self.held > 0 {
            PatchError::HeldBack { held: self.held }
        } else {
            let dirty = self.blocks.dirty;
            self.stop(PatchError::Stuck { dirty })
        }
    }

    /// Marks the blocks of `id` and of every uncommitted patch it depends on.
    fn dependency_blocks(&mut self, id: PatchId) -> Result<Vec<bool>> {
        let held = self.held;
        let mut mask = Vec::new();
        self.walk_closure(id, |p, _| {
            if p.is_empty() && p.held {
                return Err(PatchError::HeldBack { held });
            }
            if !p.is_empty() {
                let b = p.block as usize;
                if mask.len() <= b {
                    mask.resize(b + 1, false);
                }
                mask[b] = true;
            }
            Ok(())
        })?;
        Ok(mask)
    }
}
