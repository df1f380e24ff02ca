//! Consistency modes: how the dependencies diskfs states reach the patch
//! cache (DESIGN.md "Consistency modes"; Featherstitch §6.2).
//!
//! diskfs always states soft-updates dependencies. A mode rewrites them
//! without knowing what the patches mean beyond their data/metadata flag:
//! - `SoftUpdates` passes them through;
//! - `Async` drops every dependency (the control case: after a crash
//!   anything may be on disk in any order);
//! - the journal (a later milestone) will turn them into transactions.
//!
//! Architecture invariant: this crate knows patches and flags, never the
//! ext2 layout, and sits strictly between diskfs and the patch cache.

use stitch_patch::{BlockNo, PatchCache, PatchFlags, PatchId, Result};

/// Which dependency transform is in force.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Consistency {
    /// No ordering at all (Featherstitch's asynchronous mode).
    Async,
    /// The soft-updates rules, as diskfs states them.
    SoftUpdates,
}

impl std::str::FromStr for Consistency {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "async" => Ok(Consistency::Async),
            "softupdates" | "soft-updates" => Ok(Consistency::SoftUpdates),
            other => Err(format!(
                "unknown consistency mode {other:?} (async, softupdates)"
            )),
        }
    }
}

/// The patch cache seen through a consistency mode.
pub struct Modes {
    cache: PatchCache,
    consistency: Consistency,
}

impl Modes {
    pub fn new(cache: PatchCache, consistency: Consistency) -> Self {
        Modes { cache, consistency }
    }

    pub fn consistency(&self) -> Consistency {
        self.consistency
    }

    /// The dependencies this mode keeps of those diskfs stated.
    fn keep<'a>(&self, deps: &'a [PatchId]) -> &'a [PatchId] {
        match self.consistency {
            Consistency::Async => &[],
            Consistency::SoftUpdates => deps,
        }
    }

    pub fn byte(
        &mut self,
        block: BlockNo,
        offset: usize,
        data: &[u8],
        deps: &[PatchId],
        flags: PatchFlags,
    ) -> Result<PatchId> {
        let deps = self.keep(deps);
        self.cache.create_byte(block, offset, data, deps, flags)
    }

    pub fn bit(
        &mut self,
        block: BlockNo,
        offset: usize,
        mask: u32,
        deps: &[PatchId],
        flags: PatchFlags,
    ) -> Result<PatchId> {
        let deps = self.keep(deps);
        self.cache.create_bit(block, offset, mask, deps, flags)
    }

    /// An empty patch standing for a set of patches (an operation's result).
    pub fn group(&mut self, deps: &[PatchId]) -> Result<PatchId> {
        self.cache.create_empty(deps)
    }

    /// A block's current contents, every uncommitted patch applied.
    pub fn read(&mut self, block: BlockNo) -> Result<&[u8]> {
        self.cache.read(block)
    }

    pub fn cache(&self) -> &PatchCache {
        &self.cache
    }

    pub fn cache_mut(&mut self) -> &mut PatchCache {
        &mut self.cache
    }

    pub fn into_cache(self) -> PatchCache {
        self.cache
    }
}
