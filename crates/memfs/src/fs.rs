//! The memfs handle, its shared state, and the namespace operations.
//!
//! Locking, outermost first: the cut gate (shared by every operation,
//! exclusive for a flush's cut); the global rename lock (moves of a
//! directory to another parent, McoreFS §4.3); inode locks, always taken
//! together in inode-number order; diskfs's own lock (inside [`Disk`]);
//! the inode table. Nothing here takes an inode lock or the gate while a
//! diskfs batch is open. A flush waiting for the device holds none of
//! these: diskfs drops its lock around each device flush, so another flush
//! may apply and write its plan meanwhile.

use crate::domains::{self, Domains, GLOBAL};
use crate::error::{MemError, Result};
use crate::flush::{Merged, Orders};
use crate::log::{LogOp, Logs, Made};
use crate::node::{Node, NodeState, PagePool, Xattrs};
use crate::types::{Attr, DirEntry, FlushCause, Kind, Options, Order, StatFs, Stats};
use parking_lot::{Condvar, Mutex, RwLock, RwLockWriteGuard};
use rustc_hash::FxHashMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use stitch_diskfs::Refusal;
use stitch_diskfs::{
    BlockDevice, Counts, Disk, DiskFs, FileType, InodeNo, RenameFlags, Special, StackOptions,
    TimeRange, Timestamp,
};

pub(crate) const ROOT: InodeNo = InodeNo::ROOT;
const NAME_MAX: usize = 255;
const LINK_MAX: u32 = 32_000;
/// Inode numbers reserved from diskfs at a time.
const POOL_REFILL: usize = 32;

/// The in-memory file system. Cheap to clone; every clone is the same
/// mount.
#[derive(Clone)]
pub struct MemFs {
    pub(crate) inner: Arc<Inner>,
}

/// See [`MemFs::on_attr_change`].
pub type AttrHook = Arc<dyn Fn(InodeNo) + Send + Sync>;
pub type FlushHook = Arc<dyn Fn(FlushCause) + Send + Sync>;

pub(crate) struct Inner {
    /// diskfs, with its own lock (held for a read, a batch, or a round of
    /// writes; never through a device flush).
    pub disk: Disk,
    pub nodes: RwLock<FxHashMap<InodeNo, Arc<Node>>>,
    /// Shared by every operation, exclusive for a cut (McoreFS §4.2).
    pub gate: RwLock<()>,
    pub rename_lock: Mutex<()>,
    pub logs: Logs,
    /// The merged, not yet applied entries; held for a cut.
    pub merged: Mutex<Merged>,
    /// Held while a plan is applied: plans reach diskfs in cut order.
    /// Not held while it becomes durable (see `durable`).
    pub apply_lock: Mutex<()>,
    /// Which applied plans are durable: a flush returns only once every
    /// plan applied before its own is.
    pub durable: crate::flush::Durable,
    /// Reserved inode numbers not yet used: [files, directories].
    pub pool: Mutex<[Vec<InodeNo>; 2]>,
    /// Blocks the in-memory changes will need: every inode's `reserved`,
    /// the log entries' `reserves`, and claims of changes in progress.
    pub reserved_blocks: AtomicI64,
    /// Blocks the disk will free once flushes apply what memory holds
    /// (`frees`); `disk_free_blocks` is stored under this lock too.
    pub frees: Mutex<crate::frees::Frees>,
    /// Free blocks and inodes on disk after the last flush.
    pub disk_free_blocks: AtomicU64,
    pub disk_free_inodes: AtomicU64,
    /// Inode numbers diskfs holds reserved (`DiskFs::reserved_inodes`),
    /// as of the last reservation or flush: `statfs` reads it without
    /// waiting for the disk, which a long flush may hold for seconds.
    pub disk_reserved_inodes: AtomicU64,
    pub total_blocks: u64,
    pub total_inodes: u64,
    pub reserved_root_blocks: u64,
    pub block_size: u64,
    /// The times the image holds: every time memfs keeps is cut to it.
    pub times: TimeRange,
    /// The image has the `ext_attr` feature (extended attributes can be set).
    pub xattrs: bool,
    /// The disk is in soft updates, where a flush's changes reach it one
    /// by one: a file's state in a stream must not span another change
    /// (`MemFs::settle_before_change`).
    pub soft_updates: bool,
    /// What the last plan applied without waiting for the device needs
    /// to be durable (`MemFs::apply`).
    pub unawaited: Mutex<Option<stitch_diskfs::Durability>>,
    /// Every change stamped below this is durable: the stamp at the cut
    /// of the last whole flush that returned (`MemFs::durable_below`).
    pub durable_below: std::sync::atomic::AtomicU64,
    /// Dirty pages settled without waiting since write-behind last took
    /// them (`MemFs::settled`).
    pub settled_pages: AtomicU64,
    /// The mount's patchgroups (`groups`).
    pub groups: Arc<crate::groups::GroupTable>,
    /// Pages in memory, and the bound.
    pub pages: AtomicU64,
    /// Buffers of pages written behind, for the next pages written.
    pub page_pool: PagePool,
    pub opts: Options,
    /// A device error was latched: no more changes.
    pub read_only: AtomicBool,
    pub stats: Mutex<Stats>,
    /// The background flusher's orders, and its bell.
    pub bg: (Mutex<Orders>, Condvar),
    /// Told the inode number of every inode whose attributes a flush
    /// changed on its own (blocks read back from the disk, a directory's
    /// size): no request changed them, so a kernel caching attributes must
    /// be told.
    pub attr_changed: RwLock<Option<AttrHook>>,
    /// Told as each flush memfs makes on its own begins.
    pub own_flush: RwLock<Option<FlushHook>>,
    pub flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Room for two write-behind rounds of buffers: one being filled while
/// the other's pages are on their way to disk. None without the background
/// flusher: nothing would empty the pool once it went idle.
fn page_pool_cap(opts: &Options, block_size: u64) -> usize {
    match opts.flush_interval {
        Some(_) => (2 * opts.write_behind / block_size) as usize,
        None => 0,
    }
}

pub(crate) fn kind_of(ft: Option<FileType>) -> Kind {
    match ft {
        Some(FileType::Directory) => Kind::Dir,
        Some(FileType::Symlink) => Kind::Symlink,
        Some(FileType::Fifo) => Kind::Fifo,
        Some(FileType::Socket) => Kind::Socket,
        Some(FileType::CharDevice) => Kind::CharDev,
        Some(FileType::BlockDevice) => Kind::BlockDev,
        _ => Kind::File,
    }
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return Err(MemError::Refused(Refusal::Invalid("bad file name")));
    }
    if name.len() > NAME_MAX {
        return Err(MemError::Refused(Refusal::NameTooLong));
    }
    Ok(())
}

impl MemFs {
    /// Opens the whole stack on `dev` ([`DiskFs::mount`], with `stack`'s
    /// settings for the layers below) and mounts memfs over it. The mount
    /// is stamped with memfs's clock (`opts.fixed_time`, or now). memfs
    /// hands the device to diskfs unopened and never uses it itself.
    pub fn mount_device(
        dev: Arc<dyn BlockDevice>,
        stack: impl Into<StackOptions>,
        opts: Options,
    ) -> Result<MemFs> {
        let now = opts.fixed_time.unwrap_or_else(Timestamp::now);
        MemFs::mount(DiskFs::mount(dev, stack, now)?, opts)
    }

    /// Puts memfs in front of a mounted diskfs and starts the background
    /// flusher (if `opts.flush_interval` is set).
    pub fn mount(disk: DiskFs, opts: Options) -> Result<MemFs> {
        let disk = Disk::new(disk);
        let shape = disk.shape()?;
        let counts = disk.counts()?;
        let inner = Arc::new(Inner {
            total_blocks: shape.blocks,
            total_inodes: shape.inodes,
            reserved_root_blocks: shape.reserved_root_blocks,
            disk_free_blocks: AtomicU64::new(counts.free_blocks),
            disk_free_inodes: AtomicU64::new(counts.free_inodes),
            disk_reserved_inodes: AtomicU64::new(counts.reserved_inodes),
            block_size: shape.block_size,
            times: shape.times,
            xattrs: shape.xattrs,
            soft_updates: shape.soft_updates,
            unawaited: Mutex::new(None),
            durable_below: std::sync::atomic::AtomicU64::new(0),
            settled_pages: AtomicU64::new(0),
            groups: Arc::default(),
            disk,
            nodes: RwLock::new(FxHashMap::default()),
            gate: RwLock::new(()),
            rename_lock: Mutex::new(()),
            logs: Logs::new(),
            merged: Mutex::new(Merged::default()),
            apply_lock: Mutex::new(()),
            durable: Default::default(),
            pool: Mutex::new([Vec::new(), Vec::new()]),
            reserved_blocks: AtomicI64::new(0),
            frees: Mutex::new(Default::default()),
            pages: AtomicU64::new(0),
            page_pool: PagePool::new(page_pool_cap(&opts, shape.block_size)),
            opts,
            read_only: AtomicBool::new(false),
            stats: Mutex::new(Stats::default()),
            bg: (Mutex::new(Orders::default()), Condvar::new()),
            attr_changed: RwLock::new(None),
            own_flush: RwLock::new(None),
            flusher: Mutex::new(None),
        });
        let fs = MemFs { inner };
        fs.node(ROOT)?;
        if let Some(every) = fs.inner.opts.flush_interval {
            let bg = fs.clone();
            let h = std::thread::Builder::new()
                .name("stitch-flush".into())
                .spawn(move || bg.background(every))
                .map_err(MemError::Thread)?;
            *fs.inner.flusher.lock() = Some(h);
        }
        Ok(fs)
    }

    pub fn root(&self) -> InodeNo {
        ROOT
    }

    /// What an fsync outside any stream makes durable (`Options::order`).
    pub fn order(&self) -> Order {
        self.inner.opts.order
    }

    /// The time stamped on changes: the wall clock, or the tests' fixed
    /// one, as the image holds it (the kernel's `current_time` cuts the
    /// clock to the file system's granularity too).
    pub(crate) fn now(&self) -> Timestamp {
        let t = self.inner.opts.fixed_time.unwrap_or_else(Timestamp::now);
        self.inner.times.truncate(t)
    }

    /// The times the image holds (the kernel's granularity for this mount).
    pub fn time_range(&self) -> TimeRange {
        self.inner.times
    }

    pub fn stats(&self) -> Stats {
        Stats {
            pages_reused: self.inner.page_pool.reused(),
            ..*self.inner.stats.lock()
        }
    }

    /// What memory holds now: a walk of the inode table under its read
    /// lock (for `stitchfs stats`, not for every request).
    pub fn memory(&self) -> crate::types::Memory {
        let nodes = self.inner.nodes.read();
        let mut m = crate::types::Memory {
            pages: self.inner.pages.load(Ordering::Acquire),
            inodes: nodes.len() as u64,
            ..Default::default()
        };
        for n in nodes.values() {
            let s = n.s.read();
            if s.dirty {
                m.dirty_inodes += 1;
                m.dirty_pages += s.dirty_pages.len() as u64;
            }
        }
        m
    }

    /// The logged changes not yet flushed, in all and by ordering domain
    /// (for `stitchfs stats`): the merged log's and the threads' logs'.
    pub fn pending(&self) -> crate::types::Pending {
        let mut p = crate::types::Pending::default();
        self.inner.merged.lock().pending(&mut p);
        self.inner.logs.pending(&mut p);
        p
    }

    /// Runs `f` on diskfs (tests and tools: the device, the journal).
    pub fn with_disk<R>(&self, f: impl FnOnce(&mut DiskFs) -> R) -> Result<R> {
        Ok(self.inner.disk.inspect(f)?)
    }

    // ---- inode table ------------------------------------------------

    /// The node of `ino` if memory holds it.
    pub(crate) fn cached_node(&self, ino: InodeNo) -> Option<Arc<Node>> {
        self.inner.nodes.read().get(&ino).cloned()
    }

    /// The node of `ino`, loaded from diskfs if memory lacks it.
    pub(crate) fn node(&self, ino: InodeNo) -> Result<Arc<Node>> {
        match self.cached_node(ino) {
            Some(n) => Ok(n),
            None => self.load(ino, None),
        }
    }

    /// Loads `ino` from diskfs; `parent` is a directory's, if known.
    fn load(&self, ino: InodeNo, parent: Option<InodeNo>) -> Result<Arc<Node>> {
        let attr = self.on_disk(self.inner.disk.getattr(ino))?;
        let disk_size = attr.size;
        if attr.nlink == 0 || attr.kind.is_none() {
            return Err(MemError::Stale(ino));
        }
        let kind = kind_of(attr.kind);
        let s = NodeState {
            kind,
            perm: attr.perm,
            nlink: u32::from(attr.nlink),
            uid: attr.uid,
            gid: attr.gid,
            size: attr.size,
            atime: attr.atime,
            mtime: attr.mtime,
            ctime: attr.ctime,
            rdev: attr.rdev.unwrap_or((0, 0)),
            disk_sectors: u64::from(attr.sectors),
            xattr_block: attr.xattr_block,
            disk_size,
            min_size: disk_size,
            entries: None,
            xattrs: None,
            ..NodeState::fresh(kind, 0, 0, 0, Timestamp::EPOCH)
        };
        let parent = if ino == ROOT { Some(ROOT) } else { parent };
        let node = Node::new(ino, parent, s);
        let mut nodes = self.inner.nodes.write();
        Ok(nodes.entry(ino).or_insert(node).clone())
    }

    /// The result of a diskfs call, latching device errors.
    pub(crate) fn on_disk<R>(&self, r: stitch_diskfs::Result<R>) -> Result<R> {
        r.map_err(|e| self.latch(e))
    }

    /// Turns a diskfs error into ours; a device failure makes the mount
    /// read-only for good.
    pub(crate) fn latch(&self, e: stitch_diskfs::DiskError) -> MemError {
        use stitch_diskfs::DiskError as D;
        if matches!(e, D::Patch(_) | D::Journal(_) | D::Corrupt(_)) {
            self.inner.read_only.store(true, Ordering::SeqCst);
        }
        e.into()
    }

    pub(crate) fn writable(&self) -> Result<()> {
        if self.inner.read_only.load(Ordering::SeqCst) {
            Err(MemError::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// Makes sure a directory's entries are in memory.
    pub(crate) fn loaded_dir(&self, dir: InodeNo) -> Result<Arc<Node>> {
        let n = self.node(dir)?;
        {
            let s = n.s.read();
            if s.kind != Kind::Dir {
                return Err(MemError::Refused(Refusal::NotDir));
            }
            if s.entries.is_some() {
                return Ok(n.clone());
            }
        }
        let mut s = n.s.write();
        if s.entries.is_none() {
            let list = self.on_disk(self.inner.disk.readdir(dir))?;
            let mut map = HashMap::with_capacity(list.len());
            for e in list {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                map.insert(e.name, (e.ino, kind_of(e.kind)));
            }
            s.entries = Some(map);
        }
        drop(s);
        Ok(n)
    }

    /// A directory's parent, read from disk if not yet known.
    pub fn parent(&self, dir: InodeNo) -> Result<InodeNo> {
        let n = self.node(dir)?;
        if n.s.read().kind != Kind::Dir {
            return Err(MemError::Refused(Refusal::NotDir));
        }
        if let Some(p) = n.parent() {
            return Ok(p);
        }
        let e = self
            .on_disk(self.inner.disk.lookup(dir, b".."))?
            .ok_or_else(|| {
                let why = format!("directory {} has no .. entry", dir.0);
                MemError::Corrupt(stitch_diskfs::DiskError::Corrupt(why))
            })?;
        // Only a rename (under the rename lock) sets a known parent.
        Ok(n.learn_parent(e.ino))
    }

    /// The entry `name` in `dir`.
    pub(crate) fn entry(&self, dir: &Node, name: &[u8]) -> Result<Option<(InodeNo, Kind)>> {
        let s = dir.s.read();
        let e = s
            .entries
            .as_ref()
            .ok_or(MemError::Refused(Refusal::NotDir))?;
        Ok(e.get(name).copied())
    }

    /// Locks `nodes` for writing in inode order (duplicates once).
    pub(crate) fn lock_all<'a>(
        nodes: &[&'a Arc<Node>],
    ) -> Vec<(InodeNo, RwLockWriteGuard<'a, NodeState>)> {
        let mut order: Vec<&Arc<Node>> = nodes.to_vec();
        order.sort_by_key(|n| n.ino);
        order.dedup_by_key(|n| n.ino);
        order.into_iter().map(|n| (n.ino, n.s.write())).collect()
    }

    pub(crate) fn log(&self, time: Timestamp, op: LogOp) {
        self.log_held(time, op, self.unclaimed())
    }

    /// Logs `op`, its entry holding the room it needs (`LogOp::reserves`,
    /// given back by the flush that applies it) out of `room`, the claim
    /// the change made before it began; the rest of the claim goes back.
    pub(crate) fn log_held(&self, time: Timestamp, op: LogOp, mut room: Claim<'_>) {
        for o in op.objects() {
            if let Some(n) = self.inner.nodes.read().get(&o) {
                n.pending.fetch_add(1, Ordering::AcqRel);
            }
        }
        room.take(op.reserves());
        let domains = self.stream_now().all();
        self.inner.logs.append(time, op, domains);
    }

    /// Logs `op`, which touches no inode, in `domain` alone (a patchgroup
    /// dependency), as an operation: inside the cut gate.
    pub(crate) fn log_in_domain(&self, op: LogOp, domain: u64) {
        let _g = self.inner.gate.read();
        self.inner.logs.append(self.now(), op, vec![domain]);
    }

    /// The calling thread's ordering domains, with the mount's order
    /// applied: a thread in no stream is in [`GLOBAL`] under
    /// `Order::Global`.
    pub(crate) fn stream_now(&self) -> Domains {
        let mut d = domains::current();
        if d.stream.is_none() && self.inner.opts.order == Order::Global {
            d.stream = Some(GLOBAL);
        }
        d
    }

    /// Holds room for the longest prefix of `costs` (blocks, in order)
    /// that fits beside what memory already needs, in one step against
    /// every other claim (two writers cannot both take the last blocks):
    /// how many fit, and the claim.
    pub(crate) fn claim_prefix(&self, costs: &[i64]) -> (usize, Claim<'_>) {
        let free = self.inner.disk_free_blocks.load(Ordering::Acquire) as i64;
        // Slack for what is not counted (a large directory's indirect
        // blocks, say).
        let margin = free / 512 + 8;
        let held = &self.inner.reserved_blocks;
        let mut now = held.load(Ordering::Acquire);
        loop {
            let room = free - margin - now;
            let (mut k, mut sum) = (0, 0);
            while k < costs.len() && sum + costs[k] <= room {
                sum += costs[k];
                k += 1;
            }
            match held.compare_exchange_weak(now, now + sum, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    let claim = Claim {
                        fs: self,
                        left: sum,
                    };
                    return (k, claim);
                }
                Err(seen) => now = seen,
            }
        }
    }

    /// Room for `n` blocks, if memory's needs leave it.
    pub(crate) fn claim(&self, n: i64) -> Option<Claim<'_>> {
        let (k, c) = self.claim_prefix(&[n]);
        (k == 1).then_some(c)
    }

    /// Room for `n` blocks: flushes once if memory's needs would exceed the
    /// disk's free space, then `ENOSPC`.
    pub(crate) fn claim_or_flush(&self, n: i64) -> Result<Claim<'_>> {
        if let Some(c) = self.claim(n) {
            return Ok(c);
        }
        self.flush_own(FlushCause::Room)?;
        self.claim(n).ok_or(MemError::NoSpace)
    }

    /// A claim of nothing: what an inode takes from it is added as it goes.
    pub(crate) fn unclaimed(&self) -> Claim<'_> {
        Claim { fs: self, left: 0 }
    }

    /// A reserved inode number for a new inode in `parent`.
    fn new_ino(&self, parent: InodeNo, dir: bool) -> Result<InodeNo> {
        let i = usize::from(dir);
        if let Some(ino) = self.inner.pool.lock()[i].pop() {
            return Ok(ino);
        }
        let mut got = match self.reserve_inodes(parent, dir, POOL_REFILL) {
            Ok(v) => v,
            Err(MemError::NoSpace) => {
                // Frees may be waiting in the logs: flush and try once more.
                self.flush_own(FlushCause::Room)?;
                self.reserve_inodes(parent, dir, 1)?
            }
            Err(e) => return Err(e),
        };
        got.reverse();
        let ino = got.pop().ok_or(MemError::NoSpace)?;
        self.inner.pool.lock()[i].extend(got);
        Ok(ino)
    }

    /// Calls `hook` with the inode number of every inode whose attributes
    /// changed without a request that changes them saying so: `stat`'s
    /// blocks and a directory's size after a flush, set-ID bits a write
    /// dropped ([`MemFs::write_as`]). Called on the flushing or writing
    /// thread; it must not wait for other memfs calls.
    pub fn on_attr_change(&self, hook: impl Fn(InodeNo) + Send + Sync + 'static) {
        *self.inner.attr_changed.write() = Some(Arc::new(hook));
    }

    /// Tells the [`MemFs::on_attr_change`] hook that `inos` changed.
    pub(crate) fn attrs_changed(&self, inos: impl IntoIterator<Item = InodeNo>) {
        let hook = self.inner.attr_changed.read().clone();
        if let Some(hook) = hook {
            inos.into_iter().for_each(|ino| hook(ino));
        }
    }

    /// Calls `hook` as each flush that memfs makes on its own begins (no
    /// caller asked for it: see [`FlushCause`]), on the flushing thread,
    /// before the flush takes any lock. Nothing memfs writes to the disk
    /// is outside a flush, so with this a caller watching the device can
    /// tell every write it sees by the flush it belongs to. The hook must
    /// not call memfs. (The background flusher starts at mount, so with a
    /// short `flush_interval` a periodic flush may come before the hook
    /// is set, untold.)
    pub fn on_own_flush(&self, hook: impl Fn(FlushCause) + Send + Sync + 'static) {
        *self.inner.own_flush.write() = Some(Arc::new(hook));
    }

    /// Records how many inode numbers `disk` holds reserved, for `statfs`.
    pub(crate) fn note_reserved(&self, counts: Counts) {
        self.inner
            .disk_reserved_inodes
            .store(counts.reserved_inodes, Ordering::Release);
    }

    /// Up to `n` inode numbers reserved in diskfs (at least one, or the
    /// error that stopped the first).
    fn reserve_inodes(&self, parent: InodeNo, dir: bool, n: usize) -> Result<Vec<InodeNo>> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            match self.inner.disk.reserve_inode(parent, dir) {
                Ok((ino, counts)) => {
                    v.push(ino);
                    self.note_reserved(counts);
                }
                Err(stitch_diskfs::DiskError::NoSpace(_)) if !v.is_empty() => break,
                Err(e) => return Err(self.latch(e)),
            }
        }
        Ok(v)
    }

    /// Gives back the number of an inode that will never reach the disk.
    pub(crate) fn recycle_ino(&self, ino: InodeNo, dir: bool) {
        self.inner.pool.lock()[usize::from(dir)].push(ino);
    }

    // ---- lookups ----------------------------------------------------

    pub fn lookup(&self, parent: InodeNo, name: &[u8]) -> Result<Attr> {
        if name.len() > NAME_MAX {
            return Err(MemError::Refused(Refusal::NameTooLong));
        }
        let _g = self.inner.gate.read();
        let dir = self.loaded_dir(parent)?;
        let (ino, kind) = self
            .entry(&dir, name)?
            .ok_or(MemError::Refused(Refusal::NotFound))?;
        let child = match self.cached_node(ino) {
            Some(n) => n,
            None => self.load(ino, (kind == Kind::Dir).then_some(parent))?,
        };
        let a = child.s.read().attr(ino, self.inner.block_size);
        Ok(a)
    }

    pub fn getattr(&self, ino: InodeNo) -> Result<Attr> {
        let _g = self.inner.gate.read();
        let n = self.node(ino)?;
        let s = n.s.read();
        if s.attrs_stale() {
            return Err(MemError::Stale(ino));
        }
        Ok(s.attr(ino, self.inner.block_size))
    }

    pub fn readdir(&self, dir: InodeNo) -> Result<Vec<DirEntry>> {
        let _g = self.inner.gate.read();
        let n = self.loaded_dir(dir)?;
        let s = n.s.read();
        let mut v: Vec<DirEntry> = s
            .entries
            .as_ref()
            .ok_or(MemError::Refused(Refusal::NotDir))?
            .iter()
            .map(|(name, (ino, kind))| DirEntry {
                name: name.clone(),
                ino: *ino,
                kind: *kind,
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    pub fn readlink(&self, ino: InodeNo) -> Result<Vec<u8>> {
        let _g = self.inner.gate.read();
        let n = self.node(ino)?;
        {
            let s = n.s.read();
            if s.kind != Kind::Symlink {
                return Err(MemError::Refused(Refusal::Invalid("not a symlink")));
            }
            if let Some(t) = &s.target {
                return Ok(t.clone());
            }
        }
        let t = self.on_disk(self.inner.disk.readlink(ino))?;
        n.s.write().target = Some(t.clone());
        Ok(t)
    }

    /// The extended attributes of `ino` (full names and values), read from
    /// disk the first time. Attributes under a name index we do not know
    /// are left out.
    pub fn xattrs(&self, ino: InodeNo) -> Result<Arc<Xattrs>> {
        let _g = self.inner.gate.read();
        let n = self.node(ino)?;
        if let Some(x) = &n.s.read().xattrs {
            return Ok(x.clone());
        }
        let stored = self.on_disk(self.inner.disk.xattrs(ino))?;
        let x: Arc<Xattrs> = Arc::new(
            stored
                .into_iter()
                .filter_map(|a| Some((a.full_name()?, a.value)))
                .collect(),
        );
        let x = n.s.write().xattrs.get_or_insert(x).clone();
        Ok(x)
    }

    /// The disk's figures as they will be once memory reaches it: free
    /// blocks are the disk's, plus what removals and truncates will free
    /// (`frees`), less the room held for changes not yet on it.
    pub fn statfs(&self) -> Result<StatFs> {
        let i = &self.inner;
        let (free, freeing) = self.free_and_freeing();
        let reserved = i.reserved_blocks.load(Ordering::Acquire).max(0) as u64;
        let bfree = (free + freeing)
            .saturating_sub(reserved)
            .min(i.total_blocks);
        let pooled = {
            let p = i.pool.lock();
            (p[0].len() + p[1].len()) as u64
        };
        let unflushed = i.disk_reserved_inodes.load(Ordering::Acquire);
        let ffree = i
            .disk_free_inodes
            .load(Ordering::Acquire)
            .saturating_sub(unflushed.saturating_sub(pooled));
        Ok(StatFs {
            blocks: i.total_blocks,
            bfree,
            bavail: bfree.saturating_sub(i.reserved_root_blocks),
            files: i.total_inodes,
            ffree,
            bsize: i.block_size as u32,
            namelen: NAME_MAX as u32,
        })
    }

    // ---- namespace changes -------------------------------------------

    /// A regular file, fifo, socket or device node. The arguments are
    /// mknod(2)'s and the caller's, as the frontend receives them; this is
    /// the one public call that takes so many (an argument struct here
    /// would change every caller in the workspace for no clearer call).
    #[allow(clippy::too_many_arguments)]
    pub fn mknod(
        &self,
        parent: InodeNo,
        name: &[u8],
        kind: Kind,
        perm: u16,
        rdev: (u32, u32),
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        let made = match kind {
            Kind::File => Made::File { perm },
            Kind::Fifo => Made::Special {
                kind: Special::Fifo,
                perm,
            },
            Kind::Socket => Made::Special {
                kind: Special::Socket,
                perm,
            },
            Kind::CharDev => Made::Special {
                kind: Special::Char {
                    major: rdev.0,
                    minor: rdev.1,
                },
                perm,
            },
            Kind::BlockDev => Made::Special {
                kind: Special::Block {
                    major: rdev.0,
                    minor: rdev.1,
                },
                perm,
            },
            Kind::Dir | Kind::Symlink => {
                return Err(MemError::Refused(Refusal::Invalid("mknod of this kind")))
            }
        };
        let new = NewNode {
            kind,
            made,
            perm,
            rdev,
            uid,
            gid,
        };
        self.make(parent, name, new)
    }

    pub fn mkdir(
        &self,
        parent: InodeNo,
        name: &[u8],
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        let new = NewNode {
            kind: Kind::Dir,
            made: Made::Dir { perm },
            perm,
            rdev: (0, 0),
            uid,
            gid,
        };
        self.make(parent, name, new)
    }

    pub fn symlink(
        &self,
        parent: InodeNo,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        if target.is_empty() || target.len() >= self.inner.block_size as usize {
            return Err(if target.is_empty() {
                MemError::Refused(Refusal::NotFound)
            } else {
                MemError::Refused(Refusal::NameTooLong)
            });
        }
        let made = Made::Symlink {
            target: target.to_vec(),
        };
        let new = NewNode {
            kind: Kind::Symlink,
            made,
            perm: 0o777,
            rdev: (0, 0),
            uid,
            gid,
        };
        self.make(parent, name, new)
    }

    /// Makes `name` in `parent`: reserves an inode number, checks the
    /// name under the directory's lock, builds the node
    /// (`new_node_state`), enters and logs it.
    fn make(&self, parent: InodeNo, name: &[u8], new: NewNode) -> Result<Attr> {
        check_name(name)?;
        self.writable()?;
        let room = self.claim_or_flush(1 + new.made.blocks())?;
        let is_dir = new.kind == Kind::Dir;
        // Reserved before the gate: running out may need a flush.
        let ino = self.new_ino(parent, is_dir)?;
        let _g = self.inner.gate.read();
        let dir = match self.loaded_dir(parent) {
            Ok(d) => d,
            Err(e) => {
                self.recycle_ino(ino, is_dir);
                return Err(e);
            }
        };
        let mut d = dir.s.write();
        let t = self.now();
        let entries = d
            .entries
            .as_mut()
            .ok_or(MemError::Refused(Refusal::NotDir))?;
        let refused = if entries.contains_key(name) {
            Some(MemError::Refused(Refusal::Exists))
        } else if d.nlink == 0 {
            Some(MemError::Refused(Refusal::NotFound))
        } else if is_dir && d.nlink >= LINK_MAX {
            Some(MemError::Refused(Refusal::TooManyLinks))
        } else {
            None
        };
        if let Some(e) = refused {
            drop(d);
            self.recycle_ino(ino, is_dir);
            return Err(e);
        }
        let kind = new.kind;
        let (made, s) = self.new_node_state(new, &d, t);
        let (uid, gid) = (s.uid, s.gid);
        let node = Node::new(ino, is_dir.then_some(parent), s);
        d.entries
            .as_mut()
            .expect("checked above")
            .insert(name.to_vec(), (ino, kind));
        if is_dir {
            d.nlink += 1;
        }
        d.mtime = t;
        d.ctime = t;
        let attr = node.s.read().attr(ino, self.inner.block_size);
        self.inner.nodes.write().insert(ino, node);
        let create = LogOp::Create {
            parent,
            name: name.to_vec(),
            ino,
            made,
            uid,
            gid,
        };
        self.log_held(t, create, room);
        drop(d);
        Ok(attr)
    }

    /// The state of a node `make` creates in the directory whose state is
    /// `dir`, at time `t`, and what the log records it as made.
    fn new_node_state(&self, new: NewNode, dir: &NodeState, t: Timestamp) -> (Made, NodeState) {
        let NewNode {
            kind,
            made,
            perm,
            rdev,
            uid,
            mut gid,
        } = new;
        let is_dir = kind == Kind::Dir;
        // ext2's inode_init_owner: a setgid directory passes its group on,
        // and its setgid bit to new directories.
        let mut perm = perm & 0o7777;
        if dir.perm & 0o2000 != 0 {
            gid = dir.gid;
            if is_dir {
                perm |= 0o2000;
            }
        }
        let made = match made {
            Made::File { .. } => Made::File { perm },
            Made::Dir { .. } => Made::Dir { perm },
            Made::Special { kind, .. } => Made::Special { kind, perm },
            m @ Made::Symlink { .. } => m,
        };
        let mut s = NodeState::fresh(kind, perm, uid, gid, t);
        s.rdev = rdev;
        if is_dir {
            // mkdir gives a directory its first block.
            s.size = self.inner.block_size;
            s.disk_size = s.size;
            s.min_size = s.size;
            s.disk_sectors = self.inner.block_size / 512;
        }
        if let Made::Symlink { target } = &made {
            s.size = target.len() as u64;
            s.target = Some(target.clone());
        }
        (made, s)
    }

    pub fn link(&self, ino: InodeNo, newparent: InodeNo, newname: &[u8]) -> Result<Attr> {
        check_name(newname)?;
        self.writable()?;
        let room = self.claim_or_flush(1)?;
        let _g = self.inner.gate.read();
        let dir = self.loaded_dir(newparent)?;
        if self.entry(&dir, newname)?.is_some() {
            return Err(MemError::Refused(Refusal::Exists));
        }
        if ino == newparent {
            return Err(MemError::Refused(Refusal::NotPermitted(
                "hard link to a directory",
            )));
        }
        let n = self.node(ino)?;
        let mut locks = Self::lock_all(&[&dir, &n]);
        let (d, s) = pair(&mut locks, newparent, ino);
        if s.kind == Kind::Dir {
            return Err(MemError::Refused(Refusal::NotPermitted(
                "hard link to a directory",
            )));
        }
        if s.nlink == 0 {
            return Err(MemError::Refused(Refusal::NotFound));
        }
        if s.nlink >= LINK_MAX {
            return Err(MemError::Refused(Refusal::TooManyLinks));
        }
        if d.nlink == 0 {
            return Err(MemError::Refused(Refusal::NotFound));
        }
        let entries = d
            .entries
            .as_mut()
            .ok_or(MemError::Refused(Refusal::NotDir))?;
        if entries.contains_key(newname) {
            return Err(MemError::Refused(Refusal::Exists));
        }
        let t = self.now();
        entries.insert(newname.to_vec(), (ino, s.kind));
        s.nlink += 1;
        s.ctime = t;
        d.mtime = t;
        d.ctime = t;
        let attr = s.attr(ino, self.inner.block_size);
        let link = LogOp::Link {
            ino,
            parent: newparent,
            name: newname.to_vec(),
        };
        self.log_held(t, link, room);
        Ok(attr)
    }

    /// Before a change that may take the last name of the file `name` in
    /// `parent` names: its state is settled (`settle_before_change`), as
    /// memory lets go of a removed file's pages and they could never be
    /// written in their place after.
    fn settle_name(&self, parent: InodeNo, name: &[u8]) -> Result<()> {
        if !self.inner.soft_updates {
            return Ok(());
        }
        let found = {
            let _g = self.inner.gate.read();
            let dir = self.loaded_dir(parent)?;
            self.entry(&dir, name)?
        };
        match found {
            Some((ino, kind)) if kind != Kind::Dir => self.settle_before_change(ino),
            _ => Ok(()),
        }
    }

    pub fn unlink(&self, parent: InodeNo, name: &[u8]) -> Result<()> {
        self.remove(parent, name, false)
    }

    pub fn rmdir(&self, parent: InodeNo, name: &[u8]) -> Result<()> {
        if name == b"." {
            return Err(MemError::Refused(Refusal::Invalid("rmdir of .")));
        }
        if name == b".." {
            return Err(MemError::Refused(Refusal::NotEmpty));
        }
        self.remove(parent, name, true)
    }

    fn remove(&self, parent: InodeNo, name: &[u8], want_dir: bool) -> Result<()> {
        if name.len() > NAME_MAX {
            return Err(MemError::Refused(Refusal::NameTooLong));
        }
        self.writable()?;
        self.settle_name(parent, name)?;
        let _g = self.inner.gate.read();
        let dir = self.loaded_dir(parent)?;
        let (ino, kind) = self
            .entry(&dir, name)?
            .ok_or(MemError::Refused(Refusal::NotFound))?;
        let victim = if kind == Kind::Dir {
            self.loaded_dir(ino)?
        } else {
            self.node(ino)?
        };
        let mut locks = Self::lock_all(&[&dir, &victim]);
        let (d, v) = pair(&mut locks, parent, ino);
        if d.entries.as_ref().and_then(|e| e.get(name)).map(|e| e.0) != Some(ino) {
            return Err(MemError::Refused(Refusal::NotFound)); // changed under us; the caller may retry
        }
        if want_dir && !v.is_dir() {
            return Err(MemError::Refused(Refusal::NotDir));
        }
        if !want_dir && v.is_dir() {
            return Err(MemError::Refused(Refusal::IsDir));
        }
        if want_dir && !v.entries.as_ref().is_some_and(|e| e.is_empty()) {
            return Err(MemError::Refused(Refusal::NotEmpty));
        }
        let t = self.now();
        d.entries.as_mut().expect("loaded").remove(name);
        d.mtime = t;
        d.ctime = t;
        if want_dir {
            d.nlink -= 1;
            v.nlink = 0;
        } else {
            v.nlink -= 1;
        }
        v.ctime = t;
        self.unreachable_or_recount(v);
        self.log(
            t,
            LogOp::Unlink {
                parent,
                name: name.to_vec(),
                ino,
                dir: want_dir,
            },
        );
        Ok(())
    }

    /// Renames `parent/name` to `newparent/newname`, in phases: look both
    /// names up, check a directory's move against its new ancestors
    /// (`move_ancestors`), lock the nodes and check again
    /// (`check_rename`), change memory (`change_names`),
    /// log.
    pub fn rename(
        &self,
        parent: InodeNo,
        name: &[u8],
        newparent: InodeNo,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        if flags.noreplace && flags.exchange {
            return Err(MemError::Refused(Refusal::Invalid(
                "RENAME_NOREPLACE with RENAME_EXCHANGE",
            )));
        }
        if name.len() > NAME_MAX {
            return Err(MemError::Refused(Refusal::NameTooLong));
        }
        self.writable()?;
        if !flags.exchange {
            self.settle_name(newparent, newname)?;
        }
        let room = self.claim_or_flush(1)?;
        let _g = self.inner.gate.read();
        let from = self.loaded_dir(parent)?;
        let to = self.loaded_dir(newparent)?;
        let (moved, mkind) = self
            .entry(&from, name)?
            .ok_or(MemError::Refused(Refusal::NotFound))?;
        check_name(newname).map_err(|e| match e {
            MemError::Refused(Refusal::Invalid(_)) if newname == b"." || newname == b".." => {
                MemError::Refused(Refusal::Invalid("rename to . or .."))
            }
            e => e,
        })?;
        let other = self.entry(&to, newname)?;
        match other {
            None if flags.exchange => return Err(MemError::Refused(Refusal::NotFound)),
            Some(_) if flags.noreplace => return Err(MemError::Refused(Refusal::Exists)),
            _ => {}
        }
        let mv = Moving {
            parent,
            name,
            newparent,
            newname,
            flags,
            moved,
            mkind,
            other,
        };
        let dir_moves =
            (mkind == Kind::Dir || other.is_some_and(|o| o.1 == Kind::Dir)) && parent != newparent;
        // Moves of directories between parents are serialized (McoreFS
        // §4.3): no loop in memory, and a stable list of ancestors.
        let _r = dir_moves.then(|| self.inner.rename_lock.lock());
        let ancestors = if dir_moves {
            self.move_ancestors(&mv)?
        } else {
            Vec::new()
        };
        let mnode = if mkind == Kind::Dir {
            self.loaded_dir(moved)?
        } else {
            self.node(moved)?
        };
        let onode = match other {
            Some((o, Kind::Dir)) => Some(self.loaded_dir(o)?),
            Some((o, _)) => Some(self.node(o)?),
            None => None,
        };
        let mut set = vec![&from, &to, &mnode];
        if let Some(o) = &onode {
            set.push(o);
        }
        let mut locks = Self::lock_all(&set);
        if !self.check_rename(&mv, &mut locks)? {
            return Ok(()); // two names of one file
        }
        let t = self.now();
        self.change_names(&mv, &mut locks, (&mnode, onode.as_ref()), t);
        self.log_held(t, mv.log_op(ancestors), room);
        drop(locks);
        Ok(())
    }

    /// The ancestors of the directories a rename moves between parents,
    /// in their new places, sorted; refused if one would move below
    /// itself.
    fn move_ancestors(&self, mv: &Moving<'_>) -> Result<Vec<InodeNo>> {
        let mut ancestors = Vec::new();
        let other = mv.other.map(|o| o.0);
        for (k, (d, p)) in [(Some(mv.moved), mv.newparent), (other, mv.parent)]
            .into_iter()
            .enumerate()
        {
            let Some(d) = d else { continue };
            if self.node(d)?.s.read().kind != Kind::Dir {
                continue;
            }
            let mut a = p;
            loop {
                if a == d {
                    if k == 1 && !mv.flags.exchange {
                        return Err(MemError::Refused(Refusal::NotEmpty));
                    }
                    return Err(MemError::Refused(Refusal::Invalid(
                        "a directory moved below itself",
                    )));
                }
                ancestors.push(a);
                if a == ROOT {
                    break;
                }
                a = self.parent(a)?;
            }
        }
        ancestors.sort_unstable();
        ancestors.dedup();
        Ok(ancestors)
    }

    /// With the nodes locked: everything looked up must still hold, and
    /// the rename must be allowed (Linux's checks, in its order). `false`
    /// for a rename between two names of one file, which changes nothing.
    fn check_rename(
        &self,
        mv: &Moving<'_>,
        locks: &mut [(InodeNo, RwLockWriteGuard<'_, NodeState>)],
    ) -> Result<bool> {
        let cur = |locks: &[(InodeNo, RwLockWriteGuard<'_, NodeState>)], dir: InodeNo, n: &[u8]| {
            locks
                .iter()
                .find(|(i, _)| *i == dir)
                .and_then(|(_, s)| s.entries.as_ref())
                .and_then(|e| e.get(n).copied())
        };
        if cur(locks, mv.parent, mv.name) != Some((mv.moved, mv.mkind))
            || cur(locks, mv.newparent, mv.newname) != mv.other
        {
            return Err(MemError::Refused(Refusal::NotFound));
        }
        if get(locks, mv.parent).nlink == 0 || get(locks, mv.newparent).nlink == 0 {
            return Err(MemError::Refused(Refusal::NotFound));
        }
        match mv.other {
            Some((o, _)) if o == mv.moved => return Ok(false),
            None if mv.flags.exchange => return Err(MemError::Refused(Refusal::NotFound)),
            Some(_) if mv.flags.noreplace => return Err(MemError::Refused(Refusal::Exists)),
            _ => {}
        }
        let okind = mv.other.map(|o| o.1);
        if let (false, Some(ok)) = (mv.flags.exchange, okind) {
            if mv.mkind == Kind::Dir && ok != Kind::Dir {
                return Err(MemError::Refused(Refusal::NotDir));
            }
            if mv.mkind != Kind::Dir && ok == Kind::Dir {
                return Err(MemError::Refused(Refusal::IsDir));
            }
            if ok == Kind::Dir {
                let o = mv.other.expect("some").0;
                if !get(locks, o).entries.as_ref().is_some_and(|e| e.is_empty()) {
                    return Err(MemError::Refused(Refusal::NotEmpty));
                }
            }
        }
        if mv.mkind == Kind::Dir
            && mv.parent != mv.newparent
            && okind != Some(Kind::Dir)
            && get(locks, mv.newparent).nlink >= LINK_MAX
        {
            return Err(MemError::Refused(Refusal::TooManyLinks));
        }
        Ok(true)
    }

    /// The rename's change, in memory, at time `t`: the entries, the
    /// times, the link counts of parents gaining or losing a directory,
    /// the moved nodes' parents, and a replaced node's lost link. `nodes`
    /// are the moved node and the other one, if any.
    fn change_names(
        &self,
        mv: &Moving<'_>,
        locks: &mut [(InodeNo, RwLockWriteGuard<'_, NodeState>)],
        nodes: (&Arc<Node>, Option<&Arc<Node>>),
        t: Timestamp,
    ) {
        let (mnode, onode) = nodes;
        {
            let f = get(locks, mv.parent);
            f.entries.as_mut().expect("loaded").remove(mv.name);
            f.mtime = t;
            f.ctime = t;
        }
        {
            let d = get(locks, mv.newparent);
            d.entries
                .as_mut()
                .expect("loaded")
                .insert(mv.newname.to_vec(), (mv.moved, mv.mkind));
            d.mtime = t;
            d.ctime = t;
        }
        get(locks, mv.moved).ctime = t;
        if mv.mkind == Kind::Dir && mv.parent != mv.newparent {
            get(locks, mv.parent).nlink -= 1;
            get(locks, mv.newparent).nlink += 1;
            mnode.set_parent(mv.newparent);
        }
        let Some((o, ok)) = mv.other else {
            return;
        };
        if mv.flags.exchange {
            get(locks, mv.parent)
                .entries
                .as_mut()
                .expect("loaded")
                .insert(mv.name.to_vec(), (o, ok));
            get(locks, o).ctime = t;
            if ok == Kind::Dir && mv.parent != mv.newparent {
                get(locks, mv.newparent).nlink -= 1;
                get(locks, mv.parent).nlink += 1;
                if let Some(on) = onode {
                    on.set_parent(mv.parent);
                }
            }
        } else {
            let v = get(locks, o);
            v.ctime = t;
            if ok == Kind::Dir {
                v.nlink = 0;
            } else {
                v.nlink -= 1;
            }
            self.unreachable_or_recount(v);
            if ok == Kind::Dir {
                get(locks, mv.newparent).nlink -= 1;
            }
        }
    }

    // ---- open handles --------------------------------------------------

    pub fn open(&self, ino: InodeNo) -> Result<()> {
        let _g = self.inner.gate.read();
        let n = self.node(ino)?;
        let mut s = n.s.write();
        if s.gone() {
            return Err(MemError::Stale(ino));
        }
        s.open += 1;
        Ok(())
    }

    pub fn release(&self, ino: InodeNo) -> Result<()> {
        let _g = self.inner.gate.read();
        let n = self.node(ino)?;
        let mut s = n.s.write();
        if s.open == 0 {
            return Err(MemError::Refused(Refusal::Invalid(
                "release of an inode not open",
            )));
        }
        s.open -= 1;
        if s.open == 0 && s.nlink == 0 {
            // The last close of an unlinked inode: its pages go now.
            self.unreachable_or_recount(&mut s);
            if s.disk_open {
                s.disk_open = false;
                self.log(self.now(), LogOp::Release { ino });
            } else if s.never_disk {
                let dir = s.is_dir();
                drop(s);
                self.inner.nodes.write().remove(&ino);
                self.recycle_ino(ino, dir);
            }
        }
        Ok(())
    }
}

impl MemFs {
    /// After `s` lost a name or a handle: once nothing reaches it (no
    /// name, no handle) its pages go and the room held for them comes
    /// back, and what the disk will free for it is counted anew.
    fn unreachable_or_recount(&self, s: &mut NodeState) {
        if s.gone() {
            let dropped = s.take_reserved();
            self.inner
                .reserved_blocks
                .fetch_sub(dropped, Ordering::AcqRel);
            self.inner
                .pages
                .fetch_sub(s.pages.len() as u64, Ordering::AcqRel);
            s.pages.clear();
            s.dirty_pages.clear();
        }
        self.recount_frees(s);
    }
}

/// Room held in `reserved_blocks` while a change is made. What the change
/// passes to an inode (`hold`) or to its log entry (`MemFs::log_held`)
/// stays held until a flush takes the inode's state or applies the entry;
/// the rest goes back when the claim is dropped.
pub(crate) struct Claim<'a> {
    fs: &'a MemFs,
    left: i64,
}

impl Claim<'_> {
    /// Passes `n` blocks to the inode `s`.
    pub(crate) fn hold(&mut self, s: &mut NodeState, n: i64) {
        s.reserved += n;
        self.take(n);
    }

    /// Takes `n` blocks out of the claim, to stay held once it is dropped:
    /// from the claim as far as it goes, and beyond it (an estimate that
    /// fell short) held anew.
    fn take(&mut self, n: i64) {
        let from = n.min(self.left);
        self.left -= from;
        if n > from {
            self.fs
                .inner
                .reserved_blocks
                .fetch_add(n - from, Ordering::AcqRel);
        }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.left > 0 {
            self.fs
                .inner
                .reserved_blocks
                .fetch_sub(self.left, Ordering::AcqRel);
        }
    }
}

/// The guards of two locked inodes (the same inode twice is refused by
/// the callers' checks, so `a != b` here unless both are the same dir).
pub(crate) fn pair<'a, 'b>(
    locks: &'b mut [(InodeNo, RwLockWriteGuard<'a, NodeState>)],
    a: InodeNo,
    b: InodeNo,
) -> (&'b mut NodeState, &'b mut NodeState) {
    let ia = locks.iter().position(|(i, _)| *i == a).expect("locked");
    let ib = locks.iter().position(|(i, _)| *i == b).expect("locked");
    assert_ne!(ia, ib, "pair of one inode");
    let (lo, hi) = locks.split_at_mut(ia.max(ib));
    let (x, y) = (&mut *lo[ia.min(ib)].1, &mut *hi[0].1);
    if ia < ib {
        (x, y)
    } else {
        (y, x)
    }
}

impl Moving<'_> {
    /// The rename as the log records it.
    fn log_op(&self, ancestors: Vec<InodeNo>) -> LogOp {
        LogOp::Rename {
            from_dir: self.parent,
            from: self.name.to_vec(),
            to_dir: self.newparent,
            to: self.newname.to_vec(),
            flags: self.flags,
            moved: self.moved,
            other: self.other.map(|o| o.0),
            ancestors,
        }
    }
}

/// A node [`MemFs::make`] creates: its kind, what the log will record it
/// as made, its permission bits (before a setgid directory has its say),
/// device numbers and owner.
struct NewNode {
    kind: Kind,
    made: Made,
    perm: u16,
    rdev: (u32, u32),
    uid: u32,
    gid: u32,
}

/// A rename as looked up: `name` in `parent` (naming `moved`, of kind
/// `mkind`) to `newname` in `newparent` (naming `other`, if anything).
#[derive(Clone, Copy)]
struct Moving<'a> {
    parent: InodeNo,
    name: &'a [u8],
    newparent: InodeNo,
    newname: &'a [u8],
    flags: RenameFlags,
    moved: InodeNo,
    mkind: Kind,
    other: Option<(InodeNo, Kind)>,
}

pub(crate) fn get<'a, 'b>(
    locks: &'b mut [(InodeNo, RwLockWriteGuard<'a, NodeState>)],
    ino: InodeNo,
) -> &'b mut NodeState {
    let i = locks.iter().position(|(n, _)| *n == ino).expect("locked");
    &mut locks[i].1
}
