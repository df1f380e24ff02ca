//! The result of a check: findings, totals, journal state, and the exit code
//! e2fsck would give.
//!
//! Exit codes follow e2fsck(8): 0 clean, 4 errors left uncorrected (this
//! checker corrects nothing but, with `--recover`, replays the journal), 8
//! operational error. Leaks are "not clean" too
//! (4), as `e2fsck -n` says; the class of each finding is in the text and in
//! the JSON, so callers that accept leaks decide by class, not by code.
//! Notes (superblock free totals behind the group descriptors) leave a
//! file system clean, as they leave e2fsck's exit 0.

use crate::finding::{Class, Finding};
use serde::Serialize;
use std::fmt;

pub const EXIT_CLEAN: i32 = 0;
pub const EXIT_UNCORRECTED: i32 = 4;
pub const EXIT_ERROR: i32 = 8;

/// Counts over the whole file system, as e2fsck's last line gives them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub blocks: u32,
    pub blocks_used: u32,
    pub inodes: u32,
    pub inodes_used: u32,
    pub directories: u32,
    pub corruptions: usize,
    pub leaks: usize,
    /// Findings of [`Class::Note`]: not counted against the file system.
    pub notes: usize,
}

/// What replaying the journal wrote, or would write (then the check ran on
/// the image as if replayed, in memory).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecoverySummary {
    /// Committed transactions replayed.
    pub transactions: u32,
    /// Distinct home blocks written.
    pub blocks: usize,
    /// Journal copies skipped because a revoke record covered them.
    pub revoked: u32,
    /// A transaction whose commit checksum failed: neither it nor any
    /// later one is replayed.
    pub failed_commit: Option<u32>,
    /// Written to the image (`--recover`), not just laid over it.
    pub applied: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    pub findings: Vec<Finding>,
    pub summary: Summary,
    /// The superblock says the journal must be replayed before the file
    /// system is consistent (e2fsck -n then skips replay and warns), and
    /// `--recover` did not replay it.
    pub needs_recovery: bool,
    /// The journal replay the check was made under; `None` if nothing
    /// asked for one or the journal could not be replayed (a finding says
    /// why).
    pub recovery: Option<RecoverySummary>,
    /// Inodes on the orphan list that are still in use (truncations the
    /// kernel finishes at mount; not a problem for e2fsck -n).
    pub orphans_in_use: Vec<u32>,
}

impl Report {
    /// No corruption and no leak; notes may remain.
    pub fn is_clean(&self) -> bool {
        self.findings.iter().all(|f| f.class == Class::Note)
    }

    /// True if no finding is corruption: only soft-updates leaks (and
    /// notes), if anything.
    pub fn only_leaks(&self) -> bool {
        self.findings.iter().all(|f| f.class != Class::Corruption)
    }

    /// e2fsck's exit code for this result.
    pub fn exit_code(&self) -> i32 {
        if self.findings.iter().any(|f| f.kind.is_error()) {
            EXIT_UNCORRECTED
        } else {
            EXIT_CLEAN
        }
    }

    pub(crate) fn finish(&mut self) {
        let count = |c| self.findings.iter().filter(|f| f.class == c).count();
        self.summary.corruptions = count(Class::Corruption);
        self.summary.leaks = count(Class::Leak);
        self.summary.notes = count(Class::Note);
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.recovery {
            Some(r) if r.applied => writeln!(
                f,
                "journal recovered: {} transaction(s), {} block(s) written; journal reset",
                r.transactions, r.blocks
            )?,
            Some(r) => writeln!(
                f,
                "journal needs recovery: {} transaction(s), {} block(s); checked as replayed",
                r.transactions, r.blocks
            )?,
            None if self.needs_recovery => writeln!(
                f,
                "warning: the journal needs recovery; checked without replaying it"
            )?,
            None => {}
        }
        for x in &self.findings {
            let tag = match x.class {
                Class::Corruption => "corruption",
                Class::Leak => "leak",
                Class::Note => "note",
            };
            writeln!(f, "[{tag}] {}", x.message)?;
        }
        let s = &self.summary;
        writeln!(
            f,
            "{}/{} inodes, {}/{} blocks, {} directories",
            s.inodes_used, s.inodes, s.blocks_used, s.blocks, s.directories
        )?;
        match (s.corruptions, s.leaks) {
            (0, 0) => writeln!(f, "clean"),
            (0, l) => writeln!(f, "{l} soft-updates leak(s), no corruption"),
            (c, l) => writeln!(f, "{c} corruption(s), {l} soft-updates leak(s)"),
        }
    }
}
