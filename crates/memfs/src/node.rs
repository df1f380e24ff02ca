//! In-memory inodes: attributes, a directory's entries (a hash table
//! loaded from diskfs on first use), a file's pages with dirty tracking,
//! a symlink's target. Pages are reference-counted so a flush snapshots
//! them by cloning the pointer; a writer that finds its page shared copies
//! it first (copy-on-write), so writers never wait for the disk and the
//! disk never sees a half-applied write.

use crate::types::{Attr, Kind};
use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashSet;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use stitch_diskfs::{InodeNo, Timestamp, XattrBlock};

pub(crate) type Page = Arc<Vec<u8>>;

/// Page buffers a file let go of once they were on disk, kept for the
/// next pages written. On the project's VM first-touched memory costs
/// about 0.5 ms per MiB (the guest's page fault, zeroing, and the host
/// backing it), five times the copy into memory already touched; a
/// large write allocated every page fresh, a quarter of the server's time
/// in a 100 MB write (`perf`). At most `cap` buffers; emptied by the
/// background flusher when a whole interval took none.
pub(crate) struct PagePool {
    free: Mutex<Vec<Vec<u8>>>,
    cap: usize,
    /// A buffer was taken since the last `trim_idle`.
    taken: AtomicBool,
    reused: AtomicU64,
}

impl PagePool {
    pub fn new(cap: usize) -> PagePool {
        PagePool {
            free: Mutex::new(Vec::new()),
            cap,
            taken: AtomicBool::new(false),
            reused: AtomicU64::new(0),
        }
    }

    /// A `len`-byte buffer: zeroed if `zeroed`, else whatever a freed page
    /// held (for a write that covers all of it).
    pub fn take(&self, len: usize, zeroed: bool) -> Vec<u8> {
        let reused = self.free.lock().pop();
        match reused {
            Some(mut p) if p.len() == len => {
                self.taken.store(true, Ordering::Relaxed);
                self.reused.fetch_add(1, Ordering::Relaxed);
                if zeroed {
                    p.fill(0);
                }
                p
            }
            _ => vec![0; len],
        }
    }

    /// Keeps `page`'s buffer for reuse if nothing else holds it (a flush's
    /// snapshot, a reader) and the pool has room; else it is freed.
    pub fn give(&self, page: Page) {
        if let Ok(p) = Arc::try_unwrap(page) {
            let mut free = self.free.lock();
            if free.len() < self.cap {
                free.push(p);
            }
        }
    }

    /// Frees every kept buffer if none was taken since the last call.
    pub fn trim_idle(&self) {
        if !self.taken.swap(false, Ordering::Relaxed) {
            *self.free.lock() = Vec::new();
        }
    }

    /// Buffers handed out again since mount.
    pub fn reused(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }
}

pub(crate) struct Node {
    pub ino: InodeNo,
    /// A directory's parent's number; 0 while unknown (read from disk on
    /// demand, [`Node::learn_parent`]). Changed only by renames holding the
    /// global rename lock ([`Node::set_parent`]).
    parent: AtomicU32,
    /// Logged operations naming this inode not yet applied to diskfs
    /// (a node with any is never evicted).
    pub pending: AtomicU32,
    pub s: RwLock<NodeState>,
}

pub(crate) struct NodeState {
    pub kind: Kind,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub rdev: (u32, u32),
    /// Sectors allocated on disk at the last flush or load.
    pub disk_sectors: u64,
    /// The attribute block those sectors count, as the last flush or load
    /// read it (`Shared` too while a flush that rewrites the set is on its
    /// way: not to be counted on).
    pub xattr_block: XattrBlock,
    /// The blocks the disk will free for this inode once a flush applies
    /// what memory holds, counted in `Frees::pending` (see `frees`).
    pub freeing: u64,
    /// The create was absorbed: nothing of this inode ever reaches disk.
    pub never_disk: bool,
    /// Open handles (files and directories).
    pub open: u32,
    /// diskfs was told the inode is open (an unlink reached the disk while
    /// it was open); its last release must reach diskfs too.
    pub disk_open: bool,
    /// Data or attributes changed since the last flush took them (a
    /// `Dirty` entry is logged when this turns on).
    pub dirty: bool,
    /// The domains (streams, patchgroups) that logged a `Dirty` entry for
    /// this inode since the last flush took its state: a write from
    /// another domain logs one more, so a flush that writes the state
    /// (which has that domain's data in it) takes that domain's earlier
    /// changes too.
    pub dirty_domains: Vec<u64>,
    /// Size on disk after the last flush.
    pub disk_size: u64,
    /// The smallest size since the last flush (the flush truncates to it
    /// first, so no stale bytes reappear when the file grows again).
    pub min_size: u64,
    pub pages: BTreeMap<u64, Page>,
    pub dirty_pages: BTreeSet<u64>,
    /// A directory's entries, once loaded.
    pub entries: Option<HashMap<Vec<u8>, (InodeNo, Kind)>>,
    /// A symlink's target, once loaded.
    pub target: Option<Vec<u8>>,
    /// Extended attributes (full name, value), once loaded. stitchfs sets
    /// none, so a new inode has none and a loaded one has what the disk has.
    pub xattrs: Option<Arc<Xattrs>>,
    /// The attributes changed since the last flush took them (one block
    /// is reserved for them meanwhile).
    pub xattrs_dirty: bool,
    /// Blocks held for this inode in `reserved_blocks` since a flush last
    /// took its state: new pages, the indirect blocks that map them, the
    /// attribute block. The flush that takes the state gives them back,
    /// and so does the last close of an unlinked file.
    pub reserved: i64,
    /// The indirect blocks counted in `reserved` (`data::map_blocks`).
    pub reserved_maps: FxHashSet<u64>,
}

/// An inode's extended attributes: full names (`user.k`) and values.
pub type Xattrs = Vec<(Vec<u8>, Vec<u8>)>;

impl Node {
    /// A node; `parent` is a directory's, if known.
    pub fn new(ino: InodeNo, parent: Option<InodeNo>, s: NodeState) -> Arc<Node> {
        Arc::new(Node {
            ino,
            parent: AtomicU32::new(parent.map_or(0, |p| p.0)),
            pending: AtomicU32::new(0),
            s: RwLock::new(s),
        })
    }

    /// A directory's parent, if known.
    pub fn parent(&self) -> Option<InodeNo> {
        let p = self.parent.load(Ordering::Acquire);
        (p != 0).then_some(InodeNo(p))
    }

    /// A rename moved this directory under `parent`.
    pub fn set_parent(&self, parent: InodeNo) {
        self.parent.store(parent.0, Ordering::Release);
    }

    /// The parent as read from disk, kept unless a rename set one first;
    /// returns the parent now known.
    pub fn learn_parent(&self, parent: InodeNo) -> InodeNo {
        let _ = self
            .parent
            .compare_exchange(0, parent.0, Ordering::AcqRel, Ordering::Acquire);
        InodeNo(self.parent.load(Ordering::Acquire))
    }
}

impl NodeState {
    /// The blocks held for this inode, given up (the caller returns them
    /// to `reserved_blocks`, at once or with the flush that took them).
    pub fn take_reserved(&mut self) -> i64 {
        self.reserved_maps.clear();
        std::mem::take(&mut self.reserved)
    }

    /// No name and no open handle: nothing can reach the inode through the
    /// file system any more, and its number may be freed and reused.
    pub fn gone(&self) -> bool {
        self.nlink == 0 && self.open == 0
    }

    /// Gone and not a directory. A removed directory can still be someone's
    /// working directory, whose attributes the kernel reads and sets (`stat
    /// .`, `ls`, `chmod .`): it answers, with no links, as ext2 does, while
    /// memory holds it.
    pub fn attrs_stale(&self) -> bool {
        self.gone() && self.kind != Kind::Dir
    }

    /// A brand-new inode (not on disk yet).
    pub fn fresh(kind: Kind, perm: u16, uid: u32, gid: u32, now: Timestamp) -> NodeState {
        NodeState {
            kind,
            perm,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            uid,
            gid,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            rdev: (0, 0),
            disk_sectors: 0,
            xattr_block: XattrBlock::None,
            freeing: 0,
            never_disk: false,
            open: 0,
            disk_open: false,
            dirty: false,
            dirty_domains: Vec::new(),
            disk_size: 0,
            min_size: 0,
            pages: BTreeMap::new(),
            dirty_pages: BTreeSet::new(),
            entries: (kind == Kind::Dir).then(HashMap::new),
            target: None,
            xattrs: Some(Arc::default()),
            xattrs_dirty: false,
            reserved: 0,
            reserved_maps: FxHashSet::default(),
        }
    }

    pub fn attr(&self, ino: InodeNo, block_size: u64) -> Attr {
        // Sectors: what the disk holds, or what the data will need.
        let need = self.size.div_ceil(block_size) * (block_size / 512);
        let blocks = match self.kind {
            Kind::File => self
                .disk_sectors
                .max(need.min(self.pages_sectors(block_size))),
            _ => self.disk_sectors,
        };
        Attr {
            ino,
            kind: self.kind,
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            size: self.size,
            blocks,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            rdev: self.rdev,
        }
    }

    fn pages_sectors(&self, block_size: u64) -> u64 {
        self.dirty_pages.len() as u64 * (block_size / 512) + self.disk_sectors
    }

    pub fn is_dir(&self) -> bool {
        self.kind == Kind::Dir
    }
}
