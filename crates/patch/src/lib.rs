//! The patch engine: every change to stable storage is a patch with explicit
//! write-before dependencies, and one dependency-agnostic cache decides when
//! each block may be written (Featherstitch §3, §4, §6.3).
//!
//! This crate knows blocks and dependencies, never file systems: it does not
//! know what a patch means, only what must reach the disk before it. It never
//! decides *what* must be ordered, only enforces it.
//!
//! The two safety properties of §3.2 hold at every write-out:
//! - disk safety: `dep[C] ⊆ C` (a committed patch's dependencies are committed);
//! - in-flight safety: for every block `B`, `dep[F_B] ⊆ C ∪ F_B`.
//!
//! Both are asserted on every write-out and commit when
//! [`CacheConfig::check_invariants`] is on (the default in debug and test
//! builds). A violated invariant stops all further writes: an impossible state
//! is never quietly repaired.
//!
//! Module map: `id` (handles and the arena), `patch` (one patch),
//! `block` (one cached block), `graph` (edges, counts, searches), `create`
//! (patch creation and the §4.1–4.3 optimizations), `writeout` (choosing,
//! reverting, writing, committing: §4.4 and §6.3), `check` (invariants),
//! `dot` (Graphviz export).

mod block;
mod check;
mod config;
mod create;
mod dot;
mod graph;
mod id;
mod patch;
mod stats;
mod writeout;

pub use block::DATA_KEEP;
pub use config::{CacheConfig, Optimizations, CHAIN_DEPTH_LIMIT, CHAIN_NODE_LIMIT};
pub use create::EMPTY_FAN_IN;
pub use id::PatchId;
pub use patch::{Kind, PatchFlags};
pub use stats::Stats;
pub use stitch_blockdev::{BlockDevice, BlockNo, DevError};
pub use writeout::{FlushTicket, SyncStep};

use block::Blocks;
use id::Arena;
use std::collections::VecDeque;
use std::sync::Arc;

/// What can go wrong in the patch cache. Device errors describe the world;
/// `Stuck` and `Invariant` describe a bug and stop all writes.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    #[error(transparent)]
    Device(#[from] DevError),
    #[error("the patch cache stopped writing after an earlier failure: {why}")]
    Stopped { cause: Stop, why: String },
    #[error("a dependency of {from} on {to} would close a cycle")]
    Cycle { from: PatchId, to: PatchId },
    #[error("a dependency of {from} on {to} would make hard patch {hard} wait for its own block")]
    BlockCycle {
        from: PatchId,
        to: PatchId,
        hard: PatchId,
    },
    #[error("{0} is not an uncommitted empty patch")]
    NotEmpty(PatchId),
    #[error("{0} is not a held empty patch")]
    NotHeld(PatchId),
    #[error(
        "a change of {len} bytes at offset {offset} does not fit in a {block_size}-byte block"
    )]
    OutOfBlock {
        offset: usize,
        len: usize,
        block_size: usize,
    },
    #[error("{block} is beyond the end of the device ({num_blocks} blocks)")]
    OutOfRange { block: BlockNo, num_blocks: u64 },
    #[error("write-back waits on {held} held empty patch(es)")]
    HeldBack { held: usize },
    #[error("write-back is stuck: {dirty} dirty blocks, none writable, none in flight")]
    Stuck { dirty: usize },
    #[error("invariant violated: {0}")]
    Invariant(String),
}

pub type Result<T> = std::result::Result<T, PatchError>;

/// Why the cache stopped writing: the kind of its first failure, which
/// every later refusal ([`PatchError::Stopped`]) carries with its text.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The device failed a write or a flush.
    Device,
    /// The cache broke one of its own invariants (or got stuck): a bug.
    Invariant,
    /// The layer above met a state its file system cannot be in
    /// ([`PatchCache::halt`]).
    Halted,
}

impl PatchError {
    /// The kind of failure this is, as a stop would record it.
    fn stop_cause(&self) -> Stop {
        match self {
            PatchError::Device(_) => Stop::Device,
            PatchError::Stopped { cause, .. } => *cause,
            _ => Stop::Invariant,
        }
    }
}

/// Where a patch is in its life.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PatchState {
    Uncommitted,
    InFlight,
    Committed,
}

/// The patch cache of Featherstitch §6.3: caches blocks, holds every
/// uncommitted patch, and writes blocks in an order that keeps both safety
/// properties. Single-threaded: the layer above serializes calls. Only the
/// device flush may run outside that lock ([`PatchCache::flush_ticket`]).
pub struct PatchCache {
    dev: Arc<dyn BlockDevice>,
    cfg: CacheConfig,
    block_size: usize,
    arena: Arena,
    blocks: Blocks,
    /// Dirty blocks in the order they became dirty (modified FIFO, §6.3).
    fifo: VecDeque<u32>,
    /// Blocks with a version in flight, each with the number of the write
    /// that sent it, in write order; a flush commits those written before
    /// it began.
    inflight_blocks: VecDeque<(u64, u32)>,
    /// Numbers the writes (see [`FlushTicket`]).
    write_seq: u64,
    /// The `upto` of each ticket taken and not yet ended: flushes running
    /// outside the cache.
    outstanding: Vec<u64>,
    /// Live held empty patches (they can hold write-back back).
    held: usize,
    mark_epoch: u32,
    /// Patches are created in this merge epoch (see [`PatchCache::set_merge_epoch`]).
    merge_epoch: u32,
    /// Dirty blocks left by `write_back_over`'s last try (see there).
    stream_left: Option<usize>,
    stats: Stats,
    /// Set by the first device failure or violated invariant.
    stopped: Option<(Stop, String)>,
}

impl PatchCache {
    pub fn new(dev: Arc<dyn BlockDevice>, cfg: CacheConfig) -> Self {
        let block_size = dev.block_size();
        PatchCache {
            dev,
            cfg,
            block_size,
            arena: Arena::new(),
            blocks: Blocks::new(),
            fifo: VecDeque::new(),
            stream_left: None,
            inflight_blocks: VecDeque::new(),
            write_seq: 0,
            outstanding: Vec::new(),
            held: 0,
            mark_epoch: 0,
            merge_epoch: 0,
            stats: Stats::default(),
            stopped: None,
        }
    }

    pub fn config(&self) -> &CacheConfig {
        &self.cfg
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    /// Starts a new merge epoch: no patch created from now on merges with
    /// one created before (hard, soft-to-hard, overlap or sibling merging),
    /// though overlap dependencies still link them. (Patches with different
    /// [`PatchFlags`] never merge either.) The journal starts one
    /// per transaction, so a transaction's home writes never wait on a later
    /// transaction's commit (Featherstitch §6.2 gets the same effect with a
    /// temporary dependency of each transaction's hold on the previous one's
    /// completion). Epochs only ever grow.
    pub fn set_merge_epoch(&mut self, epoch: u32) {
        debug_assert!(epoch >= self.merge_epoch, "merge epochs only grow");
        self.merge_epoch = epoch;
    }

    pub fn merge_epoch(&self) -> u32 {
        self.merge_epoch
    }

    /// The current contents of a block, with every uncommitted patch applied.
    pub fn read(&mut self, block: BlockNo) -> Result<&[u8]> {
        let idx = self.load_block(block, false)?;
        Ok(&self.blocks.get(idx).data)
    }

    /// A block of file data, as [`read`](Self::read), for a reader that
    /// wants the bytes once: a block loaded for it joins the clean
    /// file-data LRU, which is cut to [`DATA_KEEP`] blocks first, so reading
    /// a large file neither evicts the metadata the next operations need nor
    /// keeps a second copy of what memfs caches.
    pub fn read_data(&mut self, block: BlockNo) -> Result<&[u8]> {
        let idx = match self.blocks.lookup(block) {
            Some(idx) => {
                self.blocks.touch(idx);
                idx
            }
            None => {
                self.stats.evictions +=
                    self.blocks.evict_data_to(DATA_KEEP.saturating_sub(1)) as u64;
                let idx = self.load_block(block, false)?;
                self.blocks.mark_file_data(idx);
                idx
            }
        };
        Ok(&self.blocks.get(idx).data)
    }

    /// Where `id` is in its life. A handle to a merged patch reports the
    /// state of the patch it merged into.
    pub fn state(&self, id: PatchId) -> PatchState {
        match self.arena.resolve(id) {
            None => PatchState::Committed,
            Some(live) => match self.arena.get(live).state {
                patch::State::Uncommitted => PatchState::Uncommitted,
                patch::State::InFlight => PatchState::InFlight,
            },
        }
    }

    pub fn is_committed(&self, id: PatchId) -> bool {
        self.state(id) == PatchState::Committed
    }

    /// The live patch a handle stands for now (itself, or what it merged
    /// into); `None` once committed.
    pub fn resolve(&self, id: PatchId) -> Option<PatchId> {
        self.arena.resolve(id)
    }

    /// Whether a live patch is hard (has no undo data).
    pub fn is_hard(&self, id: PatchId) -> bool {
        self.arena
            .resolve(id)
            .is_some_and(|p| self.arena.get(p).hard)
    }

    /// The flags a live patch was created with (a mode such as the journal
    /// reads `data` to tell data from metadata).
    pub fn flags(&self, id: PatchId) -> Option<PatchFlags> {
        self.arena.resolve(id).map(|p| self.arena.get(p).flags)
    }

    /// The counters, with the live figures filled in.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
        s.live_patches = self.arena.live() as u64;
        s.dirty_blocks = self.blocks.dirty as u64;
        s.cached_blocks = self.blocks.len() as u64;
        s
    }

    /// Bytes of memory live patches take now (structures, undo data and
    /// dependency lists), for the memory-overhead figure of §8.2.
    pub fn patch_memory(&self) -> usize {
        self.arena
            .live_ids()
            .map(|id| self.arena.get(id).memory())
            .sum()
    }

    /// The `n` blocks holding the most uncommitted patches, with their
    /// counts (soft, hard), most first: where the graph is thick.
    pub fn busiest_blocks(&self, n: usize) -> Vec<(BlockNo, usize, usize)> {
        let mut v: Vec<(BlockNo, usize, usize)> = self
            .blocks
            .indices()
            .map(|b| {
                let block = self.blocks.get(b);
                let hard = block
                    .patches
                    .iter()
                    .filter(|&&p| self.arena.get(p).hard)
                    .count();
                (block.no, block.patches.len() - hard, hard)
            })
            .filter(|&(_, s, h)| s + h > 0)
            .collect();
        v.sort_by_key(|&(_, s, h)| std::cmp::Reverse(s + h));
        v.truncate(n);
        v
    }

    /// Number of blocks holding uncommitted patches not yet in flight.
    pub fn dirty_blocks(&self) -> usize {
        self.blocks.dirty
    }

    /// Stops every later patch creation, write and flush, as a violated
    /// invariant does, for a reason found above the cache: the layer above
    /// met a state its file system cannot be in, so nothing more of it may
    /// reach the disk. The first reason stays.
    pub fn halt(&mut self, why: String) {
        self.stopped.get_or_insert((Stop::Halted, why));
    }

    /// Why writes stopped (a device failure, a violated invariant, a
    /// [`PatchCache::halt`]), if they did.
    pub fn stopped(&self) -> Option<&str> {
        self.stopped.as_ref().map(|(_, why)| why.as_str())
    }

    fn check_running(&self) -> Result<()> {
        match &self.stopped {
            Some((cause, why)) => Err(PatchError::Stopped {
                cause: *cause,
                why: why.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Records the first failure; every later write or flush refuses.
    fn stop(&mut self, err: PatchError) -> PatchError {
        if self.stopped.is_none() {
            self.stopped = Some((err.stop_cause(), err.to_string()));
        }
        err
    }

    fn next_epoch(&mut self) -> u32 {
        self.mark_epoch = self.mark_epoch.wrapping_add(1);
        if self.mark_epoch == 0 {
            // Wrapped: clear every mark so an old one can't pass for new.
            let ids: Vec<PatchId> = self.arena.live_ids().collect();
            for id in ids {
                self.arena.get_mut(id).mark = 0;
            }
            self.mark_epoch = 1;
        }
        self.mark_epoch
    }
}
