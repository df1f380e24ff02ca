//! Invariant checks. The two safety properties of §3.2 are checked on every
//! write-out and commit when `check_invariants` is on; `check_graph` checks
//! every bookkeeping invariant of the graph and is meant for tests.

use crate::id::PatchId;
use crate::patch::{BlockIdx, Kind, State, NO_BLOCK};
use crate::PatchCache;
use std::collections::{HashMap, HashSet};

impl PatchCache {
    /// In-flight safety: `dep[F_B] ⊆ C ∪ F_B` for each block about to be
    /// written. Committed patches are gone from dependency lists, so every
    /// remaining direct dependency must be written with the same block
    /// (direct suffices: what is in `C` has its own dependencies in `C`).
    pub(crate) fn check_inflight_safety(
        &self,
        picks: &[(BlockIdx, Vec<PatchId>)],
    ) -> Result<(), String> {
        for (b, set) in picks {
            let members: HashSet<PatchId> = set.iter().copied().collect();
            for &p in set {
                let pp = self.arena.get(p);
                if pp.block != *b || pp.state != State::Uncommitted {
                    return Err(format!(
                        "{p:?} picked for block {b} is not an uncommitted patch of it"
                    ));
                }
                if let Some(d) = pp.ddeps.iter().find(|d| !members.contains(d)) {
                    return Err(format!(
                        "in-flight safety: {p:?} would be written before its dependency {d:?}"
                    ));
                }
            }
            let block = self.blocks.get(*b);
            if let Some(h) = block.hard.filter(|h| !members.contains(h)) {
                return Err(format!(
                    "block {} written without its hard patch {h:?}",
                    block.no.0
                ));
            }
        }
        Ok(())
    }

    /// Disk safety, `dep[C] ⊆ C`, at the moment a flush commits what was
    /// written up to write `upto`: each dependency must be in flight too,
    /// and written no later.
    pub(crate) fn check_disk_safety(&self, upto: u64) -> Result<(), String> {
        let committing: HashSet<PatchId> = self
            .inflight_blocks
            .iter()
            .take_while(|(seq, _)| *seq <= upto)
            .flat_map(|&(_, b)| self.blocks.get(b).inflight.iter().copied())
            .collect();
        for &p in &committing {
            let Some(live) = self.arena.resolve(p) else {
                continue;
            };
            // A dependency must be in flight and on a list this flush
            // commits: not unwritten, nor written after the flush began.
            if let Some(d) =
                self.arena.get(live).ddeps.iter().find(|d| {
                    self.arena.get(**d).state != State::InFlight || !committing.contains(d)
                })
            {
                return Err(format!(
                    "disk safety: {p:?} would commit before its dependency {d:?}"
                ));
            }
        }
        Ok(())
    }

    /// The most patches any live empty patch waits on directly (tests:
    /// [`crate::EMPTY_FAN_IN`] bounds it).
    pub fn widest_empty_wait(&self) -> usize {
        self.arena
            .live_ids()
            .map(|id| self.arena.get(id))
            .filter(|p| p.block == NO_BLOCK)
            .map(|p| p.ddeps.len())
            .max()
            .unwrap_or(0)
    }

    /// Checks every bookkeeping invariant; returns the first broken one.
    pub fn check_graph(&self) -> Result<(), String> {
        let mut ext_in: HashMap<BlockIdx, u32> = HashMap::new();
        let mut held = 0;
        for id in self.arena.live_ids() {
            let p = self.arena.get(id);
            held += usize::from(p.held);
            if !p.ddeps.windows(2).all(|w| w[0] < w[1]) {
                return Err(format!("{id:?}'s dependency list is not sorted"));
            }
            let (mut unc, mut infl) = (0, 0);
            for &d in &p.ddeps {
                let pd = self.arena.get(d);
                if !pd.rdeps.contains(&id) {
                    return Err(format!("{id:?} → {d:?} has no reverse edge"));
                }
                match pd.state {
                    State::InFlight => infl += 1,
                    State::Uncommitted => unc += 1,
                }
                if pd.state == State::Uncommitted && pd.block != NO_BLOCK && pd.block != p.block {
                    *ext_in.entry(pd.block).or_default() += 1;
                }
            }
            if p.state == State::Uncommitted && (unc, infl) != (p.n_unc, p.n_infl) {
                return Err(format!(
                    "{id:?} counts ({}, {}) but has ({unc}, {infl})",
                    p.n_unc, p.n_infl
                ));
            }
            for &r in &p.rdeps {
                if !self.arena.get(r).ddeps.contains(&id) {
                    return Err(format!("{r:?} ← {id:?} has no forward edge"));
                }
            }
            let on_blocks = p
                .rdeps
                .iter()
                .filter(|&&r| self.arena.get(r).block != NO_BLOCK)
                .count();
            if on_blocks != p.block_rdeps as usize {
                return Err(format!(
                    "{id:?} counts {} reverse edges from blocks but has {on_blocks}",
                    p.block_rdeps
                ));
            }
            // Liveness (§4.4): a patch with nothing left to wait for is on
            // its block's ready list, or write-back would never pick it.
            if self.cfg.optimizations.ready_lists
                && p.state == State::Uncommitted
                && !p.is_empty()
                && p.is_ready()
                && !(p.in_ready && self.blocks.get(p.block).ready.contains(&id))
            {
                return Err(format!("{id:?} is ready but not on its block's ready list"));
            }
            self.check_patch_data(id)?;
        }
        if held != self.held {
            return Err(format!(
                "{held} held patches but the count says {}",
                self.held
            ));
        }
        self.check_blocks(&ext_in)
    }

    fn check_patch_data(&self, id: PatchId) -> Result<(), String> {
        let p = self.arena.get(id);
        let undo_len = p.undo.as_ref().map(|u| u.len());
        let ok = match (p.hard, p.state, p.kind) {
            (_, State::InFlight, _) | (true, _, _) => undo_len.is_none(),
            (false, _, Kind::Byte { len, .. }) => undo_len == Some(len as usize),
            (false, _, _) => undo_len.is_none(),
        };
        if !ok {
            return Err(format!(
                "{id:?} ({:?}, hard {}) has undo {undo_len:?}",
                p.kind, p.hard
            ));
        }
        if p.is_empty() != (p.block == NO_BLOCK) {
            return Err(format!("{id:?}: empty patches and only they have no block"));
        }
        Ok(())
    }

    fn check_blocks(&self, ext_in: &HashMap<BlockIdx, u32>) -> Result<(), String> {
        let mut dirty = 0;
        for b in self.blocks.indices() {
            let block = self.blocks.get(b);
            let want = ext_in.get(&b).copied().unwrap_or(0);
            if block.ext_in != want {
                return Err(format!(
                    "block {}: ext_in {} but {want} edges come in",
                    block.no.0, block.ext_in
                ));
            }
            dirty += usize::from(!block.patches.is_empty());
            let mut chunks = crate::block::SoftChunks::default();
            for &p in &block.patches {
                let pp = self.arena.get(p);
                let (lo, hi) = pp.kind.range();
                if !pp.hard {
                    chunks.add(crate::block::chunk_mask(lo, hi, self.block_size));
                }
                if pp.block != b || pp.state != State::Uncommitted {
                    return Err(format!(
                        "block {} lists {p:?} which is not its uncommitted patch",
                        block.no.0
                    ));
                }
                if let Some(h) = block.hard.filter(|&h| h != p) {
                    let after_h = block.patches.iter().position(|&x| x == h)
                        < block.patches.iter().position(|&x| x == p);
                    if after_h && !pp.ddeps.contains(&h) {
                        return Err(format!(
                            "{p:?} was created after hard {h:?} but does not depend on it"
                        ));
                    }
                }
            }
            if chunks != block.soft_chunks {
                return Err(format!(
                    "block {}: soft chunk counts {:?} but its soft patches make {chunks:?}",
                    block.no.0, block.soft_chunks
                ));
            }
        }
        if dirty != self.blocks.dirty {
            return Err(format!(
                "{dirty} dirty blocks but the count says {}",
                self.blocks.dirty
            ));
        }
        Ok(())
    }
}
