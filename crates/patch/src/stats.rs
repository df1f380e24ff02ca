//! Counters of the patch cache (Featherstitch §8.2's figures). Part of the
//! public API: `stitchfs stats` and the benchmarks print them.

/// Monotonic counters plus a few live figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls that asked for a patch (each one either created a patch or
    /// merged into one).
    pub requests: u64,
    /// Patch structures allocated, by kind (merges do not allocate).
    pub created_byte: u64,
    pub created_bit: u64,
    pub created_empty: u64,
    /// Patches created without undo data (§4.1).
    pub created_hard: u64,
    /// Patch requests absorbed by a merge, by rule.
    pub merged_hard: u64,
    pub merged_soft_to_hard: u64,
    pub merged_overlap: u64,
    /// Overlap merges refused by the chain search (cycle possible, or the
    /// search ran out of its bounds).
    pub overlap_merge_refused: u64,
    /// Undo bytes ever allocated, and those alive now.
    pub undo_bytes_allocated: u64,
    pub undo_bytes_live: u64,
    /// Patches rolled back on a copy of their block while writing it.
    pub reverts: u64,
    /// Patches committed (including empty patches).
    pub commits: u64,
    pub blocks_written: u64,
    pub write_batches: u64,
    pub flushes: u64,
    pub blocks_read: u64,
    pub evictions: u64,
    /// Times a writer waited for write-back because dirty memory was full.
    pub backpressure_waits: u64,
    /// Live now.
    pub live_patches: u64,
    pub dirty_blocks: u64,
    pub cached_blocks: u64,
}

impl Stats {
    pub fn patches_created(&self) -> u64 {
        self.created_byte + self.created_bit + self.created_empty
    }

    pub fn merged(&self) -> u64 {
        self.merged_hard + self.merged_soft_to_hard + self.merged_overlap
    }
}
