//! One patch: a change to one block (or none, for an empty patch), its direct
//! dependencies in both directions, its ready counts and its undo data
//! (Featherstitch §3.3, §3.5, §4.4).
//!
//! Invariants (checked by `PatchCache::check_graph` in tests):
//! - `ddeps` and `rdeps` mirror each other: `q ∈ ddeps[p] ⇔ p ∈ rdeps[q]`;
//!   `ddeps` is sorted (edge tests are binary searches).
//! - `n_unc` counts direct dependencies that are uncommitted and not in
//!   flight; `n_infl` those in flight. Committed ones are removed.
//! - A hard patch has no undo data; a soft byte patch's undo data covers
//!   exactly its range; a bit patch needs none (a flip is its own inverse).

use crate::id::PatchId;
use smallvec::SmallVec;

/// Index of a block in the cache's block table (not a disk block number).
pub(crate) type BlockIdx = u32;
pub(crate) const NO_BLOCK: BlockIdx = u32::MAX;

/// What a patch changes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Bytes `[offset, offset + len)` of the block.
    Byte { offset: u32, len: u32 },
    /// The bits of `mask` in the little-endian 32-bit word at `offset`.
    Bit { offset: u32, mask: u32 },
    /// No data and no block: only dependencies.
    Empty,
}

impl Kind {
    /// The byte range the patch touches (a bit patch touches its word).
    pub fn range(&self) -> (u32, u32) {
        match *self {
            Kind::Byte { offset, len } => (offset, offset + len),
            Kind::Bit { offset, .. } => (offset, offset + 4),
            Kind::Empty => (0, 0),
        }
    }

    /// Whether two patches on one block change a common bit. Bit patches on
    /// one word with disjoint masks do not overlap: that independence is the
    /// reason bit patches exist (§3.5).
    pub fn overlaps(&self, other: &Kind) -> bool {
        match (*self, *other) {
            (Kind::Bit { offset: a, mask: m }, Kind::Bit { offset: b, mask: n }) => {
                a == b && m & n != 0
            }
            _ => {
                let (a0, a1) = self.range();
                let (b0, b1) = other.range();
                a0 < b1 && b0 < a1
            }
        }
    }
}

/// Where a patch is in its life. Committed patches do not exist.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum State {
    Uncommitted,
    InFlight,
}

/// Per-patch flags chosen by the creator; the cache never interprets them, a
/// mode (journal) may.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PatchFlags {
    /// The patch changes file data rather than metadata. To the cache this
    /// means a block not worth keeping once written (its clean blocks sit
    /// in a short LRU of their own), which is also true of the journal's
    /// log; the modes read it to tell data from metadata.
    pub data: bool,
}

pub(crate) type Deps = SmallVec<[PatchId; 2]>;

pub(crate) struct Patch {
    pub block: BlockIdx,
    pub kind: Kind,
    pub state: State,
    pub hard: bool,
    /// An empty patch held in memory does not commit even with no
    /// dependencies left (§3.5).
    pub held: bool,
    pub flags: PatchFlags,
    /// Old bytes of `kind.range()`, for soft byte patches only.
    pub undo: Option<Box<[u8]>>,
    pub ddeps: Deps,
    pub rdeps: Deps,
    /// How many of `rdeps` are patches on a block (not empty patches): a
    /// patch that ends up waited on by every operation's empty group patch
    /// has thousands of reverse edges, and overlap merging asks this on
    /// every change.
    pub block_rdeps: u32,
    pub n_unc: u32,
    pub n_infl: u32,
    /// Scratch for the same-block closure of §4.4 and for graph searches.
    pub scratch: u32,
    pub mark: u32,
    pub in_ready: bool,
    /// Slots forwarded to this patch by merges; freed when it commits.
    pub forwards: Vec<PatchId>,
    /// The merge epoch it was created in: patches of different epochs are
    /// never merged (the journal's transactions).
    pub epoch: u32,
}

impl Patch {
    pub fn new(block: BlockIdx, kind: Kind, flags: PatchFlags) -> Self {
        Patch {
            block,
            kind,
            state: State::Uncommitted,
            hard: false,
            held: false,
            flags,
            undo: None,
            ddeps: Deps::new(),
            rdeps: Deps::new(),
            block_rdeps: 0,
            n_unc: 0,
            n_infl: 0,
            scratch: 0,
            mark: 0,
            in_ready: false,
            forwards: Vec::new(),
            epoch: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.kind == Kind::Empty
    }

    /// Ready to write: every direct dependency committed (§4.4's two counts).
    pub fn is_ready(&self) -> bool {
        self.n_unc == 0 && self.n_infl == 0
    }

    /// Undoes this patch on a copy of its block (used while writing a block
    /// without it; the cached block keeps the patch applied).
    pub fn revert_onto(&self, out: &mut [u8]) {
        match self.kind {
            Kind::Byte { offset, len } => {
                let undo = self
                    .undo
                    .as_ref()
                    .expect("reverting a patch without undo data");
                out[offset as usize..(offset + len) as usize].copy_from_slice(undo);
            }
            Kind::Bit { offset, mask } => xor_word(out, offset, mask),
            Kind::Empty => {}
        }
    }

    /// Approximate heap and inline bytes this patch costs, for the memory
    /// figure of the optimizations benchmark.
    pub fn memory(&self) -> usize {
        let spill = |d: &Deps| if d.spilled() { d.capacity() * 8 } else { 0 };
        std::mem::size_of::<Patch>()
            + self.undo.as_ref().map_or(0, |u| u.len())
            + spill(&self.ddeps)
            + spill(&self.rdeps)
            + self.forwards.capacity() * 8
    }
}

/// Flips `mask` in the little-endian word at `offset`.
pub(crate) fn xor_word(buf: &mut [u8], offset: u32, mask: u32) {
    let at = offset as usize;
    let word = u32::from_le_bytes(buf[at..at + 4].try_into().unwrap()) ^ mask;
    buf[at..at + 4].copy_from_slice(&word.to_le_bytes());
}
