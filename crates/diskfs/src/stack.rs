//! How [`DiskFs::mount`](crate::DiskFs::mount) builds the storage stack under
//! a file system: the device goes under a patch cache, the cache under the
//! consistency mode, and diskfs on top. [`StackOptions`] holds what each
//! layer takes, so a caller names the layers' settings without building
//! them by hand.

use crate::repair::Leak;
use stitch_modes::{Consistency, JournalConfig};
use stitch_patch::CacheConfig;

/// What each layer of the stack is opened with. From a [`Consistency`]
/// alone every other setting takes its default.
#[derive(Clone, Debug)]
pub struct StackOptions {
    /// The consistency mode (the modes layer).
    pub consistency: Consistency,
    /// The journal's commit policy (journal modes only).
    pub journal: JournalConfig,
    /// The patch cache: its optimizations, size and invariant checks.
    pub cache: CacheConfig,
    /// Leaks a checker found, reclaimed at mount after an unclean
    /// soft-updates shutdown: the group summaries are set to what the
    /// bitmaps say right after the file system is marked in use and before
    /// anything else moves them (the orphans' frees first of all), then the
    /// rest are repaired (see `repair`). Only in soft updates: any other
    /// mode is refused.
    pub reclaim: Vec<Leak>,
}

impl StackOptions {
    /// `consistency` with every other layer's defaults.
    pub fn new(consistency: Consistency) -> Self {
        StackOptions {
            consistency,
            journal: JournalConfig::default(),
            cache: CacheConfig::default(),
            reclaim: Vec::new(),
        }
    }

    /// These options with the journal's commit policy `journal`.
    pub fn journal(self, journal: JournalConfig) -> Self {
        StackOptions { journal, ..self }
    }

    /// These options with the patch cache configured as `cache`.
    pub fn cache(self, cache: CacheConfig) -> Self {
        StackOptions { cache, ..self }
    }

    /// Soft updates, reclaiming `leaks` at mount.
    pub fn reclaiming(leaks: &[Leak]) -> Self {
        StackOptions {
            reclaim: leaks.to_vec(),
            ..StackOptions::new(Consistency::SoftUpdates)
        }
    }
}

impl From<Consistency> for StackOptions {
    fn from(consistency: Consistency) -> Self {
        StackOptions::new(consistency)
    }
}
