//! Edges of the dependency graph and everything kept in step with them: the
//! two ready counts (§4.4), each block's `ext_in` count (§4.1), ready lists,
//! commits (which destroy patches, §3.5), merges of one patch into another,
//! and the bounded searches that prove a new edge safe (§4.3).

use crate::config::{CHAIN_DEPTH_LIMIT, CHAIN_NODE_LIMIT};
use crate::id::PatchId;
use crate::patch::{BlockIdx, State, NO_BLOCK};
use crate::PatchCache;
use smallvec::SmallVec;

/// Outcome of checking whether `target` may gain new direct dependencies.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum EdgeCheck {
    Safe,
    /// A new dependency reaches `target`: a cycle.
    Cycle,
    /// A hard patch that reaches `target` would wait on its own block through
    /// another block: a block-level cycle no rollback can break.
    BlockCycle(PatchId),
    /// The search ran past its bounds; treat as unsafe.
    TooFar,
}

fn remove_sorted(list: &mut SmallVec<[PatchId; 2]>, id: PatchId) {
    let pos = list.binary_search(&id).expect("edge lists out of step");
    list.remove(pos);
}

fn remove_one(list: &mut SmallVec<[PatchId; 2]>, id: PatchId) {
    let pos = list
        .iter()
        .position(|&x| x == id)
        .expect("edge lists out of step");
    list.swap_remove(pos);
}

impl PatchCache {
    /// Whether `a → b` exists: a binary search, since `ddeps` is kept
    /// sorted (a hard patch may have hundreds of dependencies, and the
    /// patch it shares with its neighbours thousands of reverse edges).
    pub(crate) fn has_edge(&self, a: PatchId, b: PatchId) -> bool {
        self.arena.get(a).ddeps.binary_search(&b).is_ok()
    }

    /// Adds `a → b` (a depends on b) unless it exists. `a` must be
    /// uncommitted and not in flight; `b` live.
    pub(crate) fn add_edge(&mut self, a: PatchId, b: PatchId) {
        if a == b || self.has_edge(a, b) {
            return;
        }
        let a_on_block = self.arena.get(a).block != NO_BLOCK;
        let (b_block, b_state) = {
            let pb = self.arena.get_mut(b);
            pb.rdeps.push(a);
            pb.block_rdeps += u32::from(a_on_block);
            (pb.block, pb.state)
        };
        let pa = self.arena.get_mut(a);
        debug_assert_eq!(pa.state, State::Uncommitted);
        let at = pa.ddeps.binary_search(&b).unwrap_err();
        pa.ddeps.insert(at, b);
        match b_state {
            State::InFlight => pa.n_infl += 1,
            State::Uncommitted => pa.n_unc += 1,
        }
        let a_block = pa.block;
        if b_state == State::Uncommitted && b_block != NO_BLOCK && a_block != b_block {
            self.blocks.get_mut(b_block).ext_in += 1;
        }
    }

    /// Removes `a → b` and updates counts; `b` is still live.
    pub(crate) fn remove_edge(&mut self, a: PatchId, b: PatchId) {
        let a_on_block = self.arena.get(a).block != NO_BLOCK;
        let (b_block, b_state) = {
            let pb = self.arena.get_mut(b);
            remove_one(&mut pb.rdeps, a);
            pb.block_rdeps -= u32::from(a_on_block);
            (pb.block, pb.state)
        };
        let pa = self.arena.get_mut(a);
        remove_sorted(&mut pa.ddeps, b);
        match b_state {
            State::InFlight => pa.n_infl -= 1,
            State::Uncommitted => pa.n_unc -= 1,
        }
        let a_block = pa.block;
        if b_state == State::Uncommitted && b_block != NO_BLOCK && a_block != b_block {
            self.blocks.get_mut(b_block).ext_in -= 1;
        }
    }

    /// Puts a patch whose counts reached zero on its block's ready list, or
    /// commits an empty patch that has nothing left to wait for.
    pub(crate) fn settle(&mut self, id: PatchId) {
        let p = self.arena.get(id);
        if !p.is_ready() || p.state != State::Uncommitted {
            return;
        }
        if p.is_empty() {
            if !p.held {
                self.commit(id);
            }
            return;
        }
        if self.cfg.optimizations.ready_lists && !p.in_ready {
            let block = p.block;
            self.arena.get_mut(id).in_ready = true;
            self.blocks.get_mut(block).ready.push(id);
        }
    }

    /// Commits and destroys a patch (in flight, or an empty patch whose
    /// dependencies committed), then settles what waited on it. Iterative:
    /// a chain of empty patches commits in one call.
    pub(crate) fn commit(&mut self, first: PatchId) {
        let mut work = vec![first];
        while let Some(id) = work.pop() {
            let Some(patch) = self.arena.free(id) else {
                continue;
            };
            for d in &patch.ddeps {
                if let Some(pd) = self.arena.resolve(*d).map(|d| self.arena.get_mut(d)) {
                    remove_one(&mut pd.rdeps, id);
                    pd.block_rdeps -= u32::from(patch.block != NO_BLOCK);
                }
            }
            for &r in &patch.rdeps {
                let pr = self.arena.get_mut(r);
                remove_sorted(&mut pr.ddeps, id);
                match patch.state {
                    State::InFlight => pr.n_infl -= 1,
                    State::Uncommitted => pr.n_unc -= 1,
                }
                let pr = self.arena.get(r);
                if pr.is_ready() && pr.state == State::Uncommitted {
                    if pr.is_empty() {
                        if !pr.held {
                            work.push(r);
                        }
                    } else {
                        self.settle(r);
                    }
                }
            }
            for fwd in patch.forwards {
                self.arena.free(fwd);
            }
            if patch.held {
                self.held -= 1;
            }
            self.stats.undo_bytes_live -= patch.undo.as_ref().map_or(0, |u| u.len() as u64);
            self.stats.commits += 1;
        }
    }

    /// Merges patch `m` into `t` (same block, both uncommitted and not in
    /// flight): `m`'s edges move to `t`, except edges between patches being
    /// merged together (`same_set` says which), and `m`'s handle forwards to `t`.
    pub(crate) fn merge_into(
        &mut self,
        m: PatchId,
        t: PatchId,
        same_set: &dyn Fn(&Self, PatchId) -> bool,
    ) {
        let ddeps: SmallVec<[PatchId; 2]> = self.arena.get(m).ddeps.clone();
        for d in ddeps {
            self.remove_edge(m, d);
            if d != t && !same_set(self, d) {
                self.add_edge(t, d);
            }
        }
        let rdeps: SmallVec<[PatchId; 2]> = self.arena.get(m).rdeps.clone();
        for r in rdeps {
            self.remove_edge(r, m);
            if r != t && !same_set(self, r) {
                self.add_edge(r, t);
            }
        }
        let gone = self.arena.forward(m, t);
        self.stats.undo_bytes_live -= gone.undo.as_ref().map_or(0, |u| u.len() as u64);
        let tp = self.arena.get_mut(t);
        tp.forwards.push(m);
        tp.forwards.extend(gone.forwards);
    }

    /// May `target` gain direct dependencies on `new`? Proves three things:
    /// no new dependency reaches `target` (no cycle); no hard patch that
    /// reaches `target` could, through the new edges, come to wait on its own
    /// block (hard patches can't be rolled back, §4.1); and, with `bounded`,
    /// that it proved this within the §4.3 limits. Chains through `target`'s
    /// existing direct dependencies are white-listed (§4.3): what `target`
    /// already reaches adds nothing new.
    pub(crate) fn check_new_edges(
        &mut self,
        target: PatchId,
        new: &[PatchId],
        bounded: bool,
    ) -> EdgeCheck {
        if new.is_empty() {
            return EdgeCheck::Safe;
        }
        let epoch = self.next_epoch();
        let t_block = self.arena.get(target).block;
        let reached = match self.reach_forward(target, t_block, new, epoch, bounded) {
            Ok(r) => r,
            Err(e) => return e,
        };
        if reached.is_empty() {
            return EdgeCheck::Safe;
        }
        self.find_hard_reaching(target, &reached, bounded)
    }

    /// Depth-first from `new` over uncommitted patches. Returns the blocks
    /// reached: every block for nodes off `t_block`, and `t_block` itself
    /// only when reached after leaving it (a same-block chain is harmless).
    fn reach_forward(
        &mut self,
        target: PatchId,
        t_block: BlockIdx,
        new: &[PatchId],
        epoch: u32,
        bounded: bool,
    ) -> Result<Vec<BlockIdx>, EdgeCheck> {
        let mut stack: Vec<(PatchId, u32, bool)> = new.iter().map(|&d| (d, 1, false)).collect();
        let mut reached: Vec<BlockIdx> = Vec::new();
        let mut visited = 0usize;
        while let Some((x, depth, left)) = stack.pop() {
            if x == target {
                return Err(EdgeCheck::Cycle);
            }
            // White-list (§4.3): the target's direct dependencies. Tested as
            // met rather than marked up front: a hard patch may have hundreds.
            if self.arena.get(x).mark != epoch && self.has_edge(target, x) {
                self.arena.get_mut(x).mark = epoch;
            }
            let p = self.arena.get_mut(x);
            if p.mark == epoch {
                // Seen, or white-listed: what lies beyond adds nothing, but
                // the node's own block does if this path left the target's
                // block to get here (an empty patch on the way hides the
                // edge from the same-block closure).
                let block = p.block;
                if left && block != NO_BLOCK && !reached.contains(&block) {
                    reached.push(block);
                }
                continue;
            }
            p.mark = epoch;
            if p.state == State::InFlight {
                // Its dependencies are committed or in flight with it: it
                // reaches nothing that waits.
                continue;
            }
            visited += 1;
            let block = p.block;
            let left = left || block != t_block;
            if block != NO_BLOCK && (block != t_block || left) && !reached.contains(&block) {
                reached.push(block);
            }
            let p = self.arena.get(x);
            // §4.3 gives up on chains that grow too long and on too many
            // chains: count the frontier too, or one patch with hundreds of
            // dependencies makes every search visit all of them.
            let too_wide = visited + stack.len() + p.ddeps.len() > CHAIN_NODE_LIMIT;
            if bounded && !p.ddeps.is_empty() && (depth >= CHAIN_DEPTH_LIMIT || too_wide) {
                return Err(EdgeCheck::TooFar);
            }
            stack.extend(p.ddeps.iter().map(|&y| (y, depth + 1, left)));
        }
        Ok(reached)
    }

    /// Is there a hard patch on a block in `reached` that reaches `target`
    /// (the target itself included)? Searched forward from those hard
    /// patches, which are few (one per block with merging), rather than
    /// backward from the target, whose reverse edges fan out wide.
    fn find_hard_reaching(
        &mut self,
        target: PatchId,
        reached: &[BlockIdx],
        bounded: bool,
    ) -> EdgeCheck {
        let t = self.arena.get(target);
        if t.hard && reached.contains(&t.block) {
            return EdgeCheck::BlockCycle(target);
        }
        for &b in reached {
            let hards: SmallVec<[PatchId; 2]> = self
                .blocks
                .get(b)
                .patches
                .iter()
                .copied()
                .filter(|&p| self.arena.get(p).hard)
                .collect();
            for h in hards {
                match self.reaches(h, target, bounded) {
                    Some(true) => return EdgeCheck::BlockCycle(h),
                    Some(false) => {}
                    None => return EdgeCheck::TooFar,
                }
            }
        }
        EdgeCheck::Safe
    }

    /// Whether `from` depends (transitively) on `to`; `None` if a bounded
    /// search ran out of its limits.
    fn reaches(&mut self, from: PatchId, to: PatchId, bounded: bool) -> Option<bool> {
        let epoch = self.next_epoch();
        let mut stack = vec![(from, 0u32)];
        let mut visited = 0usize;
        while let Some((x, depth)) = stack.pop() {
            if x == to {
                return Some(true);
            }
            let p = self.arena.get_mut(x);
            if p.mark == epoch || p.state == State::InFlight {
                continue;
            }
            p.mark = epoch;
            visited += 1;
            let p = self.arena.get(x);
            let too_wide = visited + stack.len() + p.ddeps.len() > CHAIN_NODE_LIMIT;
            if bounded && !p.ddeps.is_empty() && (depth >= CHAIN_DEPTH_LIMIT || too_wide) {
                return None;
            }
            stack.extend(p.ddeps.iter().map(|&y| (y, depth + 1)));
        }
        Some(false)
    }
}
