//! Settings of the patch cache: the four optimizations of Featherstitch §4,
//! each of which can be switched off to measure it (Figure 9), and the
//! bounds on memory.

/// Which of the §4 optimizations are on.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Optimizations {
    /// §4.1: create a patch without undo data when no other block depends
    /// on its block (the O(1) test).
    pub hard_patches: bool,
    /// §4.2: at most one hard patch per block; a new hard patch merges into it.
    pub hard_merging: bool,
    /// §4.2: when a block may take a hard patch, its soft patches become hard
    /// and merge too.
    pub soft_to_hard: bool,
    /// §4.3: merge a patch into the newest patch it overlaps when a bounded
    /// chain search proves no block-level cycle can come of it.
    pub overlap_merging: bool,
    /// §4.4: per-block ready lists kept by two counts, with the same-block
    /// closure; off means the cache scans blocks and patches to find what it
    /// may write.
    pub ready_lists: bool,
    /// Ours, not the paper's: fewer write rounds (device flushes) before a
    /// patch is durable, at the price of undo data. A patch that waits on
    /// another block, or any new patch of a block holding one, is made soft
    /// (never hard, never merged into the block's hard patch), and no merge
    /// gives new waits to a patch others wait on. Featherstitch's hard
    /// patches cannot be rolled back, so one that waits would hold every
    /// later change of its block behind it: an fsync in soft updates took
    /// six flushes that way (entry → inode → bitmap → data → inode →
    /// entry), three with this.
    pub prompt_rounds: bool,
}

impl Optimizations {
    /// Every optimization of the paper (§4.1–§4.4), as it has them.
    pub const ALL: Optimizations = Optimizations {
        hard_patches: true,
        hard_merging: true,
        soft_to_hard: true,
        overlap_merging: true,
        ready_lists: true,
        prompt_rounds: false,
    };
    /// What stitchfs runs with: the paper's optimizations and ours
    /// ([`Optimizations::prompt_rounds`]).
    pub const STITCH: Optimizations = Optimizations {
        prompt_rounds: true,
        ..Self::ALL
    };
    pub const NONE: Optimizations = Optimizations {
        hard_patches: false,
        hard_merging: false,
        soft_to_hard: false,
        overlap_merging: false,
        ready_lists: false,
        prompt_rounds: false,
    };

    /// The four rows of Featherstitch Figure 9. "Hard patches" there means
    /// §4.1 and §4.2 together; ready lists stay on in all four, as in the paper.
    pub fn figure9() -> [(&'static str, Optimizations); 4] {
        let hard = Optimizations {
            overlap_merging: false,
            ..Self::ALL
        };
        let overlap = Optimizations {
            hard_patches: false,
            hard_merging: false,
            soft_to_hard: false,
            ..Self::ALL
        };
        let none = Optimizations {
            ready_lists: true,
            ..Self::NONE
        };
        [
            ("none", none),
            ("hard patches", hard),
            ("overlap merging", overlap),
            ("both", Self::ALL),
        ]
    }
}

impl Default for Optimizations {
    fn default() -> Self {
        Self::STITCH
    }
}

/// Limits of the overlap-merging chain search (§4.3: "more than 10 links").
pub const CHAIN_DEPTH_LIMIT: u32 = 10;
/// Patches the chain search may visit before it gives up (and does not merge).
pub const CHAIN_NODE_LIMIT: usize = 64;

/// How the cache behaves.
#[derive(Copy, Clone, Debug)]
pub struct CacheConfig {
    pub optimizations: Optimizations,
    /// Blocks kept in memory; clean blocks beyond this are evicted, least
    /// recently used first.
    pub max_blocks: usize,
    /// Dirty blocks allowed before a writer is made to wait while the cache
    /// writes back (back-pressure).
    pub max_dirty_blocks: usize,
    /// Check disk safety and in-flight safety on every write-out and commit.
    pub check_invariants: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            optimizations: Optimizations::STITCH,
            max_blocks: 65_536,
            max_dirty_blocks: 32_768,
            check_invariants: cfg!(debug_assertions),
        }
    }
}
