//! Per-thread operation logs (McoreFS §4.1–§4.2, after OpLog). Each
//! operation that changes the namespace or an inode appends one entry to
//! the log of the thread that ran it, stamped at its linearization point:
//! the stamp is taken while the operation still holds the locks of every
//! inode it changed, so two operations on a common inode are stamped in
//! the order readers saw them. A cut (the flush) merges the logs by stamp.
//!
//! The merge rule of §4.2 (a cut must wait for operations in progress that
//! started before it, or it could miss one stamped before the cut) is kept
//! by the cut gate in `fs`: every operation holds it shared from start to
//! end, the cut takes it exclusively.
//!
//! Entries name the objects they depend on (`objects`); the flush closes
//! over them. Ordering domains (streams) are more objects on an entry
//! (`domains`): the closure then keeps a domain's prefix exactly as it
//! keeps a directory's.

use parking_lot::Mutex;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use stitch_diskfs::{InodeNo, RenameFlags, Special, Timestamp};

/// What a create made.
#[derive(Clone, Debug)]
pub(crate) enum Made {
    File { perm: u16 },
    Dir { perm: u16 },
    Special { kind: Special, perm: u16 },
    Symlink { target: Vec<u8> },
}

impl Made {
    /// Blocks the new inode needs on disk when made: a directory's first
    /// block, a slow symlink's target block (ext2 keeps a target shorter
    /// than 60 bytes in the inode).
    pub fn blocks(&self) -> i64 {
        match self {
            Made::Dir { .. } => 1,
            Made::Symlink { target } => i64::from(target.len() >= stitch_diskfs::FAST_SYMLINK_MAX),
            Made::File { .. } | Made::Special { .. } => 0,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) enum LogOp {
    Create {
        parent: InodeNo,
        name: Vec<u8>,
        ino: InodeNo,
        made: Made,
        uid: u32,
        gid: u32,
    },
    Link {
        ino: InodeNo,
        parent: InodeNo,
        name: Vec<u8>,
    },
    Unlink {
        parent: InodeNo,
        name: Vec<u8>,
        ino: InodeNo,
        dir: bool,
    },
    Rename {
        from_dir: InodeNo,
        from: Vec<u8>,
        to_dir: InodeNo,
        to: Vec<u8>,
        flags: RenameFlags,
        moved: InodeNo,
        /// The inode the rename replaced (or, for an exchange, the other).
        other: Option<InodeNo>,
        /// For a directory moved to another parent: the new parent's
        /// ancestors at the time (McoreFS Appendix A, loop avoidance).
        ancestors: Vec<InodeNo>,
    },
    /// The inode's data or attributes changed; the flush writes the values
    /// it finds then.
    Dirty { ino: InodeNo },
    /// The last close of an inode that diskfs holds open.
    Release { ino: InodeNo },
    /// A patchgroup dependency: logged in the dependent group's domain,
    /// its closure takes every change of domain `on` (`groups`). Changes
    /// nothing on disk.
    Depend { on: u64 },
}

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub stamp: u64,
    /// The clock when the operation ran (its on-disk times).
    pub time: Timestamp,
    pub op: LogOp,
    /// Ordering domains the operation belongs to (its stream, the
    /// patchgroups engaged).
    pub domains: Vec<u64>,
}

/// What an entry is ordered with: an inode, or an ordering domain (a
/// stream). The two are numbered apart, so neither is taken for the
/// other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Object {
    Inode(InodeNo),
    Domain(u64),
}

impl Entry {
    /// Every object the entry is ordered with: the inodes its operation
    /// touches, then its ordering domains.
    pub fn objects(&self) -> impl Iterator<Item = Object> + '_ {
        let inodes = self.op.objects().into_iter().map(Object::Inode);
        inodes.chain(self.domains.iter().copied().map(Object::Domain))
    }
}

impl LogOp {
    /// Every inode the operation touches: an earlier operation on any of
    /// them must reach the disk no later than this one.
    pub fn objects(&self) -> Vec<InodeNo> {
        match self {
            LogOp::Create { parent, ino, .. } | LogOp::Link { ino, parent, .. } => {
                vec![*parent, *ino]
            }
            LogOp::Unlink { parent, ino, .. } => vec![*parent, *ino],
            LogOp::Rename {
                from_dir,
                to_dir,
                moved,
                other,
                ancestors,
                ..
            } => {
                let mut v = vec![*from_dir, *to_dir, *moved];
                v.extend(other);
                v.extend(ancestors);
                v.sort_unstable();
                v.dedup();
                v
            }
            LogOp::Dirty { ino } | LogOp::Release { ino } => vec![*ino],
            LogOp::Depend { .. } => Vec::new(),
        }
    }

    /// The directories whose entries the operation changes.
    pub fn dirs_edited(&self) -> Vec<InodeNo> {
        match self {
            LogOp::Create { parent, .. }
            | LogOp::Link { parent, .. }
            | LogOp::Unlink { parent, .. } => vec![*parent],
            LogOp::Rename {
                from_dir, to_dir, ..
            } => vec![*from_dir, *to_dir],
            LogOp::Dirty { .. } | LogOp::Release { .. } | LogOp::Depend { .. } => Vec::new(),
        }
    }

    /// The inodes the operation is about (not the directories it edits):
    /// it may be absorbed only if every one of them is.
    pub fn subjects(&self) -> Vec<InodeNo> {
        match self {
            LogOp::Create { ino, .. }
            | LogOp::Link { ino, .. }
            | LogOp::Unlink { ino, .. }
            | LogOp::Dirty { ino }
            | LogOp::Release { ino } => vec![*ino],
            LogOp::Rename { moved, other, .. } => {
                let mut v = vec![*moved];
                v.extend(other);
                v
            }
            LogOp::Depend { .. } => Vec::new(),
        }
    }

    /// Whether the operation may vanish with its subjects: a rename that
    /// replaced or exchanged another inode changed that inode too.
    pub fn absorbable(&self) -> bool {
        match self {
            LogOp::Rename { other, .. } => other.is_none(),
            _ => true,
        }
    }

    /// Blocks the operation may take on disk, held from when it is logged
    /// until a flush applies it: one for a new directory entry (a rename
    /// over an existing name, or an exchange, retargets entries in place,
    /// diskfs `retarget_entry`, and needs none), and one more for a new
    /// directory's first block or a slow symlink's target.
    /// Its kind, as [`crate::types::OpKinds`] counts them.
    pub fn kind(&self) -> usize {
        match self {
            LogOp::Create { .. } => 0,
            LogOp::Link { .. } => 1,
            LogOp::Unlink { .. } => 2,
            LogOp::Rename { .. } => 3,
            LogOp::Dirty { .. } => 4,
            LogOp::Release { .. } => 5,
            LogOp::Depend { .. } => 6,
        }
    }

    pub fn reserves(&self) -> i64 {
        match self {
            LogOp::Create { made, .. } => 1 + made.blocks(),
            LogOp::Link { .. } => 1,
            LogOp::Rename { other, .. } => i64::from(other.is_none()),
            _ => 0,
        }
    }
}

type Log = Mutex<Vec<Entry>>;

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// This thread's log in each mounted memfs, by memfs id.
    static MINE: RefCell<Vec<(usize, Weak<Log>)>> = const { RefCell::new(Vec::new()) };
}

/// The logs of one memfs: one per thread that ever changed something.
pub(crate) struct Logs {
    id: usize,
    stamp: AtomicU64,
    all: Mutex<Vec<Arc<Log>>>,
}

impl Logs {
    pub fn new() -> Logs {
        Logs {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            stamp: AtomicU64::new(1),
            all: Mutex::new(Vec::new()),
        }
    }

    /// Appends `op` to the calling thread's log, stamped now: call it while
    /// holding the locks of the inodes the operation changed.
    pub fn append(&self, time: Timestamp, op: LogOp, domains: Vec<u64>) -> u64 {
        let log = self.mine();
        let stamp = self.stamp.fetch_add(1, Ordering::SeqCst);
        log.lock().push(Entry {
            stamp,
            time,
            op,
            domains,
        });
        stamp
    }

    /// The stamp the next entry will get: every entry appended so far has
    /// a smaller one.
    pub fn next_stamp(&self) -> u64 {
        self.stamp.load(Ordering::SeqCst)
    }

    /// Takes every entry from every log, merged by stamp. The caller holds
    /// the cut gate exclusively, so no operation is half-logged.
    pub fn drain(&self) -> Vec<Entry> {
        let logs = self.all.lock().clone();
        let mut out = Vec::new();
        for l in logs {
            out.append(&mut l.lock());
        }
        out.sort_unstable_by_key(|e| e.stamp);
        out
    }

    /// The entries not yet drained, each counted once, and once more
    /// for each domain it is in (for the figures, not for flushes).
    pub fn pending(&self, into: &mut crate::types::Pending) {
        let logs = self.all.lock().clone();
        for l in logs {
            for e in l.lock().iter() {
                into.count(&e.domains);
            }
        }
    }

    fn mine(&self) -> Arc<Log> {
        MINE.with(|m| {
            let mut m = m.borrow_mut();
            if let Some(l) = m
                .iter()
                .find(|(id, _)| *id == self.id)
                .and_then(|(_, w)| w.upgrade())
            {
                return l;
            }
            m.retain(|(_, w)| w.strong_count() > 0);
            let l = Arc::new(Mutex::new(Vec::new()));
            self.all.lock().push(l.clone());
            m.push((self.id, Arc::downgrade(&l)));
            l
        })
    }
}
