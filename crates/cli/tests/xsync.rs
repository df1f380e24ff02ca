//! External synchrony through a real mount: the Python package's test of
//! the mount's side (`python/tests/xsync.py`: members' fsyncs return at
//! once, commits, outside observers waiting, misuse), in each mode that
//! orders.

mod posix_support;

use posix_support::{python_test, Scratch, JOURNAL_ORDERED, SOFTUPDATES};

#[test]
fn members_sync_at_once_commits_make_durable_and_outsiders_wait() {
    for mode in [JOURNAL_ORDERED, SOFTUPDATES] {
        let mut s = Scratch::new(mode, 64);
        // No background flush: every flush counted is one a call caused.
        s.mount_args = vec!["--flush-interval".into(), "0".into()];
        s.with_mount(|mnt| {
            let text = python_test("xsync", mnt, "python xsync ok");
            assert!(text.contains("commit outside:"), "{text}");
        });
    }
}
