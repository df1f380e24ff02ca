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

use std::collections::HashMap;
use std::sync::Mutex;

const SHARDS: usize = 16;

#[derive(Default)]
struct Held {
    /// Lookups the kernel holds (over every generation of the id).
    lookups: u64,
    generation: u64,
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
    /// generation. Returns the generation to send.
    pub(crate) fn hold(&self, id: u64, fresh: bool) -> u64 {
        let mut m = self.shard(id);
        let h = m.entry(id).or_default();
        if fresh && h.lookups > 0 {
            h.generation += 1;
        }
        h.lookups += 1;
        h.generation
    }

    /// The generation of `id` now (for replies the kernel does not count,
    /// such as `.` and `..` in a listing).
    pub(crate) fn generation(&self, id: u64) -> u64 {
        self.shard(id).get(&id).map_or(0, |h| h.generation)
    }

    /// The kernel dropped `n` lookups of `id`.
    pub(crate) fn forget(&self, id: u64, n: u64) {
        let mut m = self.shard(id);
        if let Some(h) = m.get_mut(&id) {
            h.lookups = h.lookups.saturating_sub(n);
            if h.lookups == 0 {
                m.remove(&id);
            }
        }
    }

    #[cfg(test)]
    fn held(&self, id: u64) -> Option<(u64, u64)> {
        self.shard(id).get(&id).map(|h| (h.lookups, h.generation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_id_the_kernel_still_holds_gets_a_new_generation() {
        let n = Nodes::default();
        assert_eq!(n.hold(12, true), 0);
        assert_eq!(n.hold(12, false), 0); // a lookup of the same inode
        assert_eq!(n.hold(12, true), 1); // reused while held
        assert_eq!(n.generation(12), 1);
        assert_eq!(n.held(12), Some((3, 1)));
        n.forget(12, 2); // the old inode goes
        assert_eq!(n.hold(12, false), 1);
        n.forget(12, 2);
        assert_eq!(n.held(12), None);
        // Held by nothing: the next inode may start at 0 again.
        assert_eq!(n.hold(12, true), 0);
        n.forget(99, 5); // an id never sent is ignored
        assert_eq!(n.held(99), None);
    }
}
