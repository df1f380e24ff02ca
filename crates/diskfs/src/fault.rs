//! FAULT INJECTION, compiled only with the feature `fault-injection` (for
//! `crates/crashtest`'s tests): process-wide runtime switches, off unless a
//! test turns them on. This one drops a soft-updates dependency; the
//! journal's switch is re-exported from the modes crate.

use std::sync::atomic::{AtomicBool, Ordering};

pub use stitch_modes::fault::{home_before_commit, set_home_before_commit};

static ENTRY_BEFORE_INODE: AtomicBool = AtomicBool::new(false);

/// When on, a new regular file's directory entry does not wait for its
/// initialized inode (soft-updates rule 1 broken): a crash may leave an
/// entry naming an unused inode.
pub fn set_entry_before_inode(on: bool) {
    ENTRY_BEFORE_INODE.store(on, Ordering::SeqCst);
}

pub fn entry_before_inode() -> bool {
    ENTRY_BEFORE_INODE.load(Ordering::SeqCst)
}
