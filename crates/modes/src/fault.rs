//! FAULT INJECTION, compiled only with the feature `fault-injection` (for
//! `crates/crashtest`'s tests): process-wide runtime switches, off unless a
//! test turns them on, each breaking one ordering rule on purpose so a
//! crash test can show it notices.

use std::sync::atomic::{AtomicBool, Ordering};

static HOME_BEFORE_COMMIT: AtomicBool = AtomicBool::new(false);

/// When on, a journal transaction's home blocks are written before its
/// commit block (the commit waits for them instead of the other way
/// round): a crash in between leaves part of a transaction in place with
/// nothing to replay.
pub fn set_home_before_commit(on: bool) {
    HOME_BEFORE_COMMIT.store(on, Ordering::SeqCst);
}

pub fn home_before_commit() -> bool {
    HOME_BEFORE_COMMIT.load(Ordering::SeqCst)
}
