//! Node ids the kernel holds, and their generations.
//!
//! A node id is the ext2 inode number, and ext2 reuses the number of a
//! deleted inode at once. The kernel may still hold the old inode then:
//! an unlinked file open somewhere pins its dentry and so its removed
//! parent directory; a removed directory may be someone's working
//! directory. Answered with the same node id and generation, the kernel
//! takes the new inode for the old one: a directory made with a reused
//! number is the dead one (`IS_DEADDIR`), and every create in it fails
//! with ENOENT. The kernel tells them apart by generation (`fuse_iget`
//! marks an inode whose generation differs bad and makes a new one).
//!
//! So this table counts the lookups the kernel holds on each node id
//! (every entry it was sent, less what it forgot) and gives a node id that
//! is handed out again for a new inode while the kernel still holds it a
//! new generation. A node id the kernel holds nothing of leaves the table;
//! its next inode starts again at generation 0, as nothing can confuse it.
//!
//! The same count tells memfs how long to keep a removed file. The mount
//! answers the kernel's first `open` with `ENOSYS` (the kernel's no-open
//! support), so opening and closing a file are no round trip and no
//! `release` ever says that the last handle on a file is gone. But an
//! open file holds its inode in the kernel, and an inode the kernel holds
//! keeps its lookups until the kernel forgets it: so a file is *pinned*
//! in memfs (one memfs open) from its first lookup the kernel holds to
//! the forget that drops the last, and memfs keeps an unlinked file's
//! data, in memory and on disk, until then.
//!
//! So a file nobody has open is freed by the forget, not by the `unlink`
//! that took its last name. The kernel queues that forget before the
//! `unlink` returns, but it is one request among others, served by
//! whichever thread reads it: a `statfs` asked right after can be served
//! by the other thread first, and `df` would not yet count the room (a
//! script that removes files until `df` shows enough would remove one too
//! many). So a removal that leaves a pinned file without a name marks it
//! *awaited*, and [`Nodes::settle`], which `statfs` calls first, waits
//! until the forget has freed it, or, should the file be open somewhere
//! (no forget comes until it is closed), until [`GRACE`] has passed since
//! the removal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long [`Nodes::settle`] waits after a removal for its forget: far
/// longer than the kernel takes to send it and a thread to begin it, and
/// short enough not to be noticed where the file was open after all.
pub(crate) const GRACE: Duration = Duration::from_millis(20);

const SHARDS: usize = 16;

#[derive(Default)]
struct Held {
    /// Lookups the kernel holds (over every generation of the id).
    lookups: u64,
    generation: u64,
    /// memfs holds the inode open for the kernel (see the module's doc).
    pinned: bool,
}

#[derive(Default)]
pub(crate) struct Nodes {
    shards: [Mutex<HashMap<u64, Held>>; SHARDS],
    /// Pinned ids left without a name, and when (see the module's doc).
    /// Taken after a shard's lock where both are held.
    awaited: Mutex<HashMap<u64, Instant>>,
    /// How many `awaited` holds, so that most calls need not lock it.
    awaiting: AtomicUsize,
}

impl Nodes {
    fn shard(&self, id: u64) -> std::sync::MutexGuard<'_, HashMap<u64, Held>> {
        self.shards[(id as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// An entry for `id` is about to be sent: one more lookup. `fresh`
    /// says the inode was just made (a create, mkdir, mknod, symlink):
    /// if the kernel still holds the id, the new inode gets a new
    /// generation. An id not yet pinned is offered to `pin`, which says
    /// whether it pinned it; it runs under this table's lock, so no forget
    /// of the same id comes between. Returns the generation to send.
    pub(crate) fn hold(&self, id: u64, fresh: bool, pin: impl FnOnce() -> bool) -> u64 {
        let mut m = self.shard(id);
        let h = m.entry(id).or_default();
        if fresh && h.lookups > 0 {
            h.generation += 1;
        }
        h.lookups += 1;
        if !h.pinned {
            h.pinned = pin();
        }
        h.generation
    }

    /// The generation of `id` now (for replies the kernel does not count,
    /// such as `.` and `..` in a listing).
    pub(crate) fn generation(&self, id: u64) -> u64 {
        self.shard(id).get(&id).map_or(0, |h| h.generation)
    }

    /// The kernel dropped `n` lookups of `id`. When that was the last and
    /// the id is pinned, `unpin` runs (under this table's lock).
    pub(crate) fn forget(&self, id: u64, n: u64, unpin: impl FnOnce()) {
        let mut m = self.shard(id);
        if let Some(h) = m.get_mut(&id) {
            h.lookups = h.lookups.saturating_sub(n);
            if h.lookups == 0 {
                if h.pinned {
                    unpin();
                    self.arrived(id);
                }
                m.remove(&id);
            }
        }
    }

    fn lock_awaited(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Instant>> {
        self.awaited.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A removal left `id` without a name: if it is pinned, its forget
    /// frees it, and [`Nodes::settle`] waits for that forget.
    pub(crate) fn await_forget(&self, id: u64) {
        let m = self.shard(id);
        if m.get(&id).is_some_and(|h| h.pinned) {
            let mut a = self.lock_awaited();
            a.insert(id, Instant::now());
            self.awaiting.store(a.len(), Ordering::Release);
        }
    }

    /// `id`'s forget came and freed what it pinned.
    fn arrived(&self, id: u64) {
        if self.awaiting.load(Ordering::Acquire) > 0 {
            let mut a = self.lock_awaited();
            a.remove(&id);
            self.awaiting.store(a.len(), Ordering::Release);
        }
    }

    /// Returns once every awaited forget has come, or its file has had
    /// [`GRACE`] since its removal to be let go of (it is open somewhere).
    pub(crate) fn settle(&self) {
        while self.awaiting.load(Ordering::Acquire) > 0 {
            {
                let mut a = self.lock_awaited();
                a.retain(|_, since| since.elapsed() < GRACE);
                self.awaiting.store(a.len(), Ordering::Release);
                if a.is_empty() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// The kernel will forget nothing more (the session is over): every
    /// pinned id is handed to `unpin`, and the table is emptied.
    pub(crate) fn drain(&self, mut unpin: impl FnMut(u64)) {
        for shard in &self.shards {
            let mut m = shard.lock().unwrap_or_else(|p| p.into_inner());
            for (id, h) in m.drain() {
                if h.pinned {
                    unpin(id);
                }
            }
        }
        self.lock_awaited().clear();
        self.awaiting.store(0, Ordering::Release);
    }

    #[cfg(test)]
    fn held(&self, id: u64) -> Option<(u64, u64)> {
        self.shard(id).get(&id).map(|h| (h.lookups, h.generation))
    }

    #[cfg(test)]
    fn pinned(&self, id: u64) -> bool {
        self.shard(id).get(&id).is_some_and(|h| h.pinned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_id_the_kernel_still_holds_gets_a_new_generation() {
        let n = Nodes::default();
        let no = || false;
        assert_eq!(n.hold(12, true, no), 0);
        assert_eq!(n.hold(12, false, no), 0); // a lookup of the same inode
        assert_eq!(n.hold(12, true, no), 1); // reused while held
        assert_eq!(n.generation(12), 1);
        assert_eq!(n.held(12), Some((3, 1)));
        n.forget(12, 2, || {}); // the old inode goes
        assert_eq!(n.hold(12, false, no), 1);
        n.forget(12, 2, || {});
        assert_eq!(n.held(12), None);
        // Held by nothing: the next inode may start at 0 again.
        assert_eq!(n.hold(12, true, no), 0);
        n.forget(99, 5, || {}); // an id never sent is ignored
        assert_eq!(n.held(99), None);
    }

    #[test]
    fn a_pin_lasts_from_the_first_held_lookup_to_the_forget_of_the_last() {
        use std::cell::Cell;
        let n = Nodes::default();
        let (pins, unpins) = (Cell::new(0), Cell::new(0));
        let pin = || {
            pins.set(pins.get() + 1);
            true
        };
        n.hold(30, true, pin);
        n.hold(30, false, pin); // already pinned: not asked again
        assert_eq!((pins.get(), n.pinned(30)), (1, true));
        n.forget(30, 1, || unpins.set(unpins.get() + 1));
        assert_eq!(unpins.get(), 0, "one lookup is still held");
        n.forget(30, 1, || unpins.set(unpins.get() + 1));
        assert_eq!((unpins.get(), n.held(30)), (1, None));
        // What `pin` refuses (a directory, a mount that counts opens) is
        // asked again at the next lookup, and never unpinned.
        n.hold(31, false, || false);
        assert!(!n.pinned(31));
        n.hold(31, false, pin);
        assert_eq!((pins.get(), n.pinned(31)), (2, true));
        n.hold(32, false, || false);
        n.forget(32, 1, || panic!("32 was never pinned"));
        // The end of the session lets go of every pin, once.
        let mut drained = Vec::new();
        n.drain(|id| drained.push(id));
        assert_eq!(drained, vec![31]);
        assert_eq!(n.held(31), None);
    }

    #[test]
    fn settling_waits_for_the_forget_of_a_removed_pinned_file() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Barrier;
        let n = Nodes::default();
        n.hold(40, true, || true);
        n.hold(41, true, || false);
        n.await_forget(41); // not pinned: no forget frees it
        n.await_forget(42); // not held at all
        assert_eq!(n.awaiting.load(Ordering::Acquire), 0);
        n.await_forget(40);
        let (go, freed) = (Barrier::new(2), AtomicBool::new(false));
        std::thread::scope(|s| {
            s.spawn(|| {
                go.wait();
                // Slower than a settle that did not wait would take.
                std::thread::sleep(Duration::from_millis(5));
                n.forget(40, 1, || freed.store(true, Ordering::SeqCst));
            });
            go.wait();
            n.settle();
            assert!(freed.load(Ordering::SeqCst), "settled before the forget");
        });
        assert_eq!(n.awaiting.load(Ordering::Acquire), 0);
        // A removed file held open sends no forget: settling gives up
        // after the grace, and forgets the wait.
        n.hold(43, true, || true);
        n.await_forget(43);
        n.settle();
        assert_eq!(n.awaiting.load(Ordering::Acquire), 0);
        assert!(n.pinned(43), "still open, still pinned");
    }
}
