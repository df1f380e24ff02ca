//! Ordering domains of the calling thread: the stream its changes belong
//! to ("Consistency Without Ordering", streams). The frontend knows who
//! made a request; memfs does not. So the frontend runs each request
//! inside [`in_domains`], and every change memfs logs on that thread
//! carries the stream as one more object of its log entry
//! (`Object::Domain`), which the flush's closure then keeps in order
//! exactly as it keeps a directory's.
//!
//! What a stream gets (every mode but async):
//! - **Prefix.** A flush that takes any change of a stream takes every
//!   change the stream made before the cut, so the disk holds a prefix of
//!   each stream at every flush boundary (and, each flush being one
//!   journal transaction, at every crash in journal modes).
//! - **Related changes keep their order** across streams: they touch a
//!   common inode (the same file, a directory and its entry), which the
//!   closure orders already.
//! - **An fsync** in a stream makes the stream's prefix up to it durable
//!   (and whatever that prefix depends on), nothing else; with
//!   [`Domains::ignore_fsync`] it only orders, and returns at once.
//!
//! The patchgroups the calling process has engaged are domains too
//! (module `groups`): each change belongs to every group engaged.
//!
//! A thread outside any stream has the mount's order (`Order`); in
//! `Order::Global` it is in one stream every such thread shares
//! ([`GLOBAL`]).

use std::cell::RefCell;

/// The stream of every thread that chose none, under `Order::Global`.
pub const GLOBAL: u64 = u64::MAX;

/// What the calling thread's changes are ordered with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Domains {
    /// The stream (a number the frontend gives each named stream; never
    /// [`GLOBAL`]), if the thread is in one.
    pub stream: Option<u64>,
    /// `fsync` and `fdatasync` in the stream order only: they return at
    /// once, and the stream's order keeps what they would have.
    pub ignore_fsync: bool,
    /// The patchgroups the calling process has engaged, as domains
    /// (`groups::GROUP_DOMAIN | n`): each change belongs to all of them.
    pub groups: Vec<u64>,
}

impl Domains {
    /// Every domain a change made now belongs to: the stream, then the
    /// groups.
    pub fn all(&self) -> Vec<u64> {
        let mut v = Vec::with_capacity(self.groups.len() + 1);
        v.extend(self.stream);
        v.extend_from_slice(&self.groups);
        v
    }

    /// Whether a change made now belongs to no domain.
    pub fn is_empty(&self) -> bool {
        self.stream.is_none() && self.groups.is_empty()
    }
}

thread_local! {
    static CURRENT: RefCell<Domains> = const {
        RefCell::new(Domains { stream: None, ignore_fsync: false, groups: Vec::new() })
    };
}

/// Runs `f` with the calling thread's changes in `d` (the frontend, for
/// the span of one request). Nests: the previous domains come back after.
pub fn in_domains<R>(d: Domains, f: impl FnOnce() -> R) -> R {
    struct Restore(Domains);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.replace(std::mem::take(&mut self.0)));
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.replace(d)));
    f()
}

/// The calling thread's domains now.
pub(crate) fn current() -> Domains {
    CURRENT.with(|c| c.borrow().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_hold_for_the_span_of_a_call_and_nest() {
        assert_eq!(current(), Domains::default());
        let a = Domains {
            stream: Some(3),
            ignore_fsync: true,
            groups: vec![5],
        };
        in_domains(a.clone(), || {
            assert_eq!(current(), a);
            in_domains(Domains::default(), || assert_eq!(current().stream, None));
            assert_eq!(current(), a);
        });
        assert_eq!(current(), Domains::default());
        std::thread::spawn(|| assert_eq!(current(), Domains::default()))
            .join()
            .unwrap();
    }
}
