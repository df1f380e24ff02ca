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

use std::collections::HashMap;
use std::sync::Mutex;

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
                }
                m.remove(&id);
            }
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
}
