//! The FUSE floor: a FUSE server that does only what every durable FUSE
//! file system over an image file must do, so that `bench mount` can show
//! how fast any of them could be on this machine (`stitchfs bench
//! floor-server`, the system `fuse-floor`).
//!
//! It is mounted as stitchfs is (the same `fuser`, worker threads, cloned
//! device descriptors, `max_write`, `default_permissions`, capabilities and
//! cache lifetimes), so the kernel sends it the same requests. It answers
//! each from memory: the namespace and attributes are a map under one lock,
//! and a file's data goes into the image file at once, one `pwrite` per
//! contiguous run, into 64 KiB chunks handed out in order and reused once
//! freed. `fsync`, `fsyncdir` and the sync ioctl are one `fdatasync` of
//! the image: the data reaches the disk, and nothing else does — no
//! metadata, no ordering, no journal. So it is a bound, not a file system:
//! a crash loses its whole namespace. The namespace is saved beside the
//! image at unmount and loaded at mount, for workloads that remount.

use anyhow::Context;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use stitch_control::IOC_SYNC;
use stitch_fusekit::{ErrorReply, MAX_WRITE, NAME_MAX, TTL};

/// The unit the image is handed out in.
const CHUNK: u64 = 64 << 10;
/// One chunk of a file: where it is in the image (in chunks), and how
/// many bytes from its start hold the file's bytes. Past those it reads as
/// zeros, whatever a freed chunk held before, and a write past them zeroes
/// the gap first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Chunk {
    at: u64,
    filled: u32,
}

/// A chunk slot with no chunk (a hole).
const HOLE: Chunk = Chunk {
    at: u64::MAX,
    filled: 0,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Kind {
    File,
    Dir,
}

#[derive(Debug, Serialize, Deserialize)]
struct Node {
    kind: Kind,
    perm: u16,
    uid: u32,
    gid: u32,
    nlink: u32,
    size: u64,
    atime: u64,
    mtime: u64,
    ctime: u64,
    /// A directory's entries.
    entries: Vec<(Vec<u8>, u64)>,
    /// A file's chunks, in file order ([`HOLE`] where none).
    chunks: Vec<Chunk>,
    /// Open handles (not saved: none are open at unmount).
    #[serde(skip)]
    open: u32,
    /// Lookups the kernel holds (entries sent, less those forgotten): an
    /// unlinked file is kept while the kernel holds it, as the kernel
    /// opens files without asking when the server answers `open` with
    /// `ENOSYS`. Not saved: the kernel holds nothing at unmount.
    #[serde(skip)]
    held: u64,
    /// The entries by name, built from `entries` when loaded.
    #[serde(skip)]
    index: HashMap<Vec<u8>, u64>,
}

impl Node {
    fn new(kind: Kind, perm: u16, uid: u32, gid: u32) -> Node {
        let now = now();
        Node {
            kind,
            perm,
            uid,
            gid,
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            entries: Vec::new(),
            chunks: Vec::new(),
            open: 0,
            held: 0,
            index: HashMap::new(),
        }
    }

    fn attr(&self, ino: u64) -> FileAttr {
        let t = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        FileAttr {
            ino: INodeNo(ino),
            size: self.size,
            blocks: self.chunks.iter().filter(|c| **c != HOLE).count() as u64 * (CHUNK / 512),
            atime: t(self.atime),
            mtime: t(self.mtime),
            ctime: t(self.ctime),
            crtime: t(self.ctime),
            kind: match self.kind {
                Kind::File => FileType::RegularFile,
                Kind::Dir => FileType::Directory,
            },
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Everything but the image's bytes.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Chunks never handed out start here.
    next_chunk: u64,
    /// Chunks freed, to hand out again first.
    free: Vec<u64>,
    /// How many chunks the image holds.
    capacity: u64,
}

type Result<T> = std::result::Result<T, Errno>;

/// Where a range of a file lives in the image: (image offset, length)
/// runs, `None` for a hole.
type Runs = Vec<(Option<u64>, u64)>;

/// Image ranges to zero: (offset, length).
type Zeros = Vec<(u64, u64)>;

impl State {
    fn new(capacity: u64) -> State {
        let mut nodes = HashMap::new();
        nodes.insert(INodeNo::ROOT.0, Node::new(Kind::Dir, 0o755, 0, 0));
        State {
            nodes,
            next_ino: INodeNo::ROOT.0 + 1,
            next_chunk: 0,
            free: Vec::new(),
            capacity,
        }
    }

    fn node(&mut self, ino: u64) -> Result<&mut Node> {
        self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    fn dir(&mut self, ino: u64) -> Result<&mut Node> {
        let n = self.node(ino)?;
        match n.kind {
            Kind::Dir => Ok(n),
            Kind::File => Err(Errno::ENOTDIR),
        }
    }

    fn lookup(&mut self, dir: u64, name: &[u8]) -> Result<Option<u64>> {
        Ok(self.dir(dir)?.index.get(name).copied())
    }

    fn make(&mut self, dir: u64, name: &[u8], node: Node) -> Result<u64> {
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if self.lookup(dir, name)?.is_some() {
            return Err(Errno::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        let is_dir = node.kind == Kind::Dir;
        self.nodes.insert(ino, node);
        self.attach(dir, name, ino, is_dir)?;
        Ok(ino)
    }

    /// Names `ino` in `dir` (a subdirectory links its parent).
    fn attach(&mut self, dir: u64, name: &[u8], ino: u64, is_dir: bool) -> Result<()> {
        let d = self.dir(dir)?;
        d.index.insert(name.to_vec(), ino);
        d.nlink += u32::from(is_dir);
        d.mtime = now();
        d.ctime = d.mtime;
        Ok(())
    }

    /// Takes `name` out of `dir`, leaving what it named alone.
    fn detach(&mut self, dir: u64, name: &[u8], is_dir: bool) -> Result<()> {
        let d = self.dir(dir)?;
        d.index.remove(name);
        d.nlink -= u32::from(is_dir);
        d.mtime = now();
        d.ctime = d.mtime;
        Ok(())
    }

    /// Whether `dir` is `ino` or lies below it.
    fn is_within(&self, dir: u64, ino: u64) -> bool {
        let mut todo = vec![ino];
        while let Some(d) = todo.pop() {
            if d == dir {
                return true;
            }
            let Some(n) = self.nodes.get(&d) else {
                continue;
            };
            let subdirs = n
                .index
                .values()
                .filter(|i| self.nodes.get(i).is_some_and(|c| c.kind == Kind::Dir));
            todo.extend(subdirs);
        }
        false
    }

    /// Moves `name` in `dir` to `newname` in `newdir`, replacing a target
    /// of the same kind unless `noreplace`.
    fn rename(
        &mut self,
        dir: u64,
        name: &[u8],
        newdir: u64,
        newname: &[u8],
        noreplace: bool,
    ) -> Result<()> {
        if newname.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let ino = self.lookup(dir, name)?.ok_or(Errno::ENOENT)?;
        let is_dir = self.node(ino)?.kind == Kind::Dir;
        if is_dir && self.is_within(newdir, ino) {
            return Err(Errno::EINVAL);
        }
        if let Some(old) = self.lookup(newdir, newname)? {
            if old == ino {
                return Ok(());
            }
            if noreplace {
                return Err(Errno::EEXIST);
            }
            let old_dir = self.node(old)?.kind == Kind::Dir;
            if old_dir != is_dir {
                return Err(if is_dir {
                    Errno::ENOTDIR
                } else {
                    Errno::EISDIR
                });
            }
            self.remove(newdir, newname, old_dir)?;
        }
        self.detach(dir, name, is_dir)?;
        self.attach(newdir, newname, ino, is_dir)?;
        self.node(ino)?.ctime = now();
        Ok(())
    }

    /// Records a write of `len` bytes at `offset` (at the end with
    /// `append`): the file's new size, and where the bytes go.
    fn write(&mut self, ino: u64, offset: u64, len: u64, append: bool) -> Result<(Runs, Zeros)> {
        let n = self.node(ino)?;
        let off = if append { n.size } else { offset };
        let runs = self.runs(ino, off, len, true)?;
        let n = self.node(ino)?;
        n.size = n.size.max(off + len);
        n.mtime = now();
        n.ctime = n.mtime;
        Ok(runs)
    }

    /// Takes `name` out of `dir` and drops a link of what it named.
    fn remove(&mut self, dir: u64, name: &[u8], want_dir: bool) -> Result<()> {
        let ino = self.lookup(dir, name)?.ok_or(Errno::ENOENT)?;
        let n = self.node(ino)?;
        match (n.kind, want_dir) {
            (Kind::Dir, false) => return Err(Errno::EISDIR),
            (Kind::File, true) => return Err(Errno::ENOTDIR),
            (Kind::Dir, true) if !n.index.is_empty() => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        self.detach(dir, name, want_dir)?;
        let n = self.node(ino)?;
        n.nlink = if want_dir {
            0
        } else {
            n.nlink.saturating_sub(1)
        };
        n.ctime = now();
        self.drop_if_gone(ino);
        Ok(())
    }

    /// Frees a node no name, no handle and no kernel lookup holds any more.
    fn drop_if_gone(&mut self, ino: u64) {
        let gone = self
            .nodes
            .get(&ino)
            .is_some_and(|n| n.nlink == 0 && n.open == 0 && n.held == 0);
        if gone {
            if let Some(n) = self.nodes.remove(&ino) {
                self.free
                    .extend(n.chunks.into_iter().filter(|c| *c != HOLE).map(|c| c.at));
            }
        }
    }

    fn take_chunk(&mut self) -> Result<u64> {
        if let Some(c) = self.free.pop() {
            return Ok(c);
        }
        if self.next_chunk >= self.capacity {
            return Err(Errno::ENOSPC);
        }
        self.next_chunk += 1;
        Ok(self.next_chunk - 1)
    }

    /// Where `len` bytes at `off` of file `ino` live in the image, as
    /// (image offset, length) runs. A read (`fill` false) gets `None` for
    /// holes and for bytes past a chunk's filled part. A write takes chunks
    /// for its holes, and also gets the image ranges to zero before it: the
    /// gaps between a chunk's filled part and where the write starts.
    fn runs(&mut self, ino: u64, off: u64, len: u64, fill: bool) -> Result<(Runs, Zeros)> {
        let mut out: Runs = Vec::new();
        let mut zeros = Vec::new();
        let mut push = |at: Option<u64>, n: u64| match out.last_mut() {
            Some((Some(prev), l)) if at == Some(*prev + *l) => *l += n,
            Some((None, l)) if at.is_none() => *l += n,
            _ => out.push((at, n)),
        };
        let mut pos = off;
        while pos < off + len {
            let i = (pos / CHUNK) as usize;
            let within = pos % CHUNK;
            let n = (CHUNK - within).min(off + len - pos);
            let mut c = self.node(ino)?.chunks.get(i).copied().unwrap_or(HOLE);
            if fill {
                if c == HOLE {
                    c.at = self.take_chunk()?;
                    c.filled = 0;
                }
                let filled = u64::from(c.filled);
                if within > filled {
                    zeros.push((c.at * CHUNK + filled, within - filled));
                }
                c.filled = c.filled.max((within + n) as u32);
                let chunks = &mut self.node(ino)?.chunks;
                if chunks.len() <= i {
                    chunks.resize(i + 1, HOLE);
                }
                chunks[i] = c;
                push(Some(c.at * CHUNK + within), n);
            } else {
                let have = match c {
                    HOLE => 0,
                    c => u64::from(c.filled).saturating_sub(within).min(n),
                };
                if have > 0 {
                    push(Some(c.at * CHUNK + within), have);
                }
                if n > have {
                    push(None, n - have);
                }
            }
            pos += n;
        }
        Ok((out, zeros))
    }

    /// Cuts file `ino` to `size`: chunks wholly past it are freed, and the
    /// chunk it ends in keeps only what lies before it.
    fn truncate(&mut self, ino: u64, size: u64) -> Result<()> {
        let n = self.node(ino)?;
        if n.kind == Kind::Dir {
            return Err(Errno::EISDIR);
        }
        n.size = size;
        n.mtime = now();
        n.ctime = n.mtime;
        let keep = size.div_ceil(CHUNK) as usize;
        let freed: Vec<u64> = if n.chunks.len() > keep {
            n.chunks
                .drain(keep..)
                .filter(|c| *c != HOLE)
                .map(|c| c.at)
                .collect()
        } else {
            Vec::new()
        };
        if let Some(last) = keep.checked_sub(1).and_then(|k| n.chunks.get_mut(k)) {
            if *last != HOLE {
                let within = size - (keep as u64 - 1) * CHUNK;
                last.filled = last.filled.min(within as u32);
            }
        }
        self.free.extend(freed);
        Ok(())
    }
}

/// Where the namespace is saved: beside the image.
pub fn saved(image: &Path) -> PathBuf {
    let mut name = image.as_os_str().to_owned();
    name.push(".floor");
    PathBuf::from(name)
}

/// The floor server over one image file.
pub struct Floor {
    image: File,
    path: PathBuf,
    state: Mutex<State>,
    /// Spinning on the device during bursts, as stitchfs's mount does.
    spin: std::sync::Arc<stitch_fusekit::spin::Spin>,
    /// `open` and `create` are answered `ENOSYS`, as stitchfs's mount
    /// answers them unless told `--open-requests on`.
    no_open: bool,
}

impl Floor {
    /// Opens `image` (its size bounds the data) and the namespace saved
    /// beside it, if any.
    pub fn open(image: &Path) -> anyhow::Result<Floor> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(image)
            .with_context(|| format!("opening {}", image.display()))?;
        let capacity = file.metadata()?.len() / CHUNK;
        let path = saved(image);
        let state = match std::fs::read(&path) {
            Ok(bytes) => {
                let mut s: State = serde_json::from_slice(&bytes)
                    .with_context(|| format!("reading {}", path.display()))?;
                for n in s.nodes.values_mut() {
                    n.index = std::mem::take(&mut n.entries).into_iter().collect();
                }
                s
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::new(capacity),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        Ok(Floor {
            image: file,
            path,
            state: Mutex::new(state),
            spin: stitch_fusekit::spin::Spin::new(),
            no_open: true,
        })
    }

    /// The namespace, for a request (which the spin switch is told of).
    fn state(&self) -> MutexGuard<'_, State> {
        self.spin.served();
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the namespace beside the image.
    fn save(&self) -> anyhow::Result<()> {
        let mut s = self.state();
        for n in s.nodes.values_mut() {
            n.entries = n.index.iter().map(|(k, v)| (k.clone(), *v)).collect();
        }
        let bytes = serde_json::to_vec(&*s)?;
        std::fs::write(&self.path, bytes).with_context(|| format!("{}", self.path.display()))?;
        self.image.sync_data()?;
        Ok(())
    }

    fn durable(&self) -> Result<()> {
        self.image.sync_data().map_err(|_| Errno::EIO)
    }

    /// Answers with an entry the kernel will hold.
    fn entry(&self, reply: ReplyEntry, ino: u64) {
        match self.state().node(ino) {
            Ok(n) => {
                n.held += 1;
                reply.entry(&TTL, &n.attr(ino), Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    /// Makes the file `name` in `parent` for `req`'s caller.
    fn make_file(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        open: u32,
    ) -> Result<FileAttr> {
        if mode & libc::S_IFMT != libc::S_IFREG && mode & libc::S_IFMT != 0 {
            return Err(Errno::EINVAL);
        }
        let mut node = Node::new(Kind::File, (mode & 0o7777) as u16, req.uid(), req.gid());
        node.open = open;
        node.held = 1;
        let mut s = self.state();
        let ino = s.make(parent.0, name.as_bytes(), node)?;
        Ok(s.nodes[&ino].attr(ino))
    }
}

/// Answers `reply` with `ok` or with the errno.
fn answer<R: ErrorReply, T>(reply: R, r: Result<T>, ok: impl FnOnce(R, T)) {
    match r {
        Ok(v) => ok(reply, v),
        Err(e) => reply.fail(e),
    }
}

fn secs(t: TimeOrNow) -> u64 {
    match t {
        TimeOrNow::Now => now(),
        TimeOrNow::SpecificTime(t) => t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
    }
}

impl fuser::Filesystem for Floor {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // As stitchfs asks (see `fuse::ops`), so the kernel sends the same
        // requests; readdirplus is left out, as no timed workload lists.
        if let Err(max) = config.set_max_write(MAX_WRITE) {
            let _ = config.set_max_write(max);
        }
        let _ = config.set_time_granularity(Duration::from_secs(1));
        let wanted =
            fuser::InitFlags::FUSE_PARALLEL_DIROPS | fuser::InitFlags::FUSE_HANDLE_KILLPRIV_V2;
        let _ = config.add_capabilities(wanted & config.capabilities());
        Ok(())
    }

    fn destroy(&mut self) {
        // The kernel forgets nothing more: what it held unlinked goes.
        {
            let mut s = self.state();
            let held: Vec<u64> = s
                .nodes
                .iter_mut()
                .filter(|(_, n)| n.held > 0)
                .map(|(ino, n)| {
                    n.held = 0;
                    *ino
                })
                .collect();
            for ino in held {
                s.drop_if_gone(ino);
            }
        }
        if let Err(e) = self.save() {
            eprintln!("stitchfs floor-server: saving the namespace: {e:#}");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = self.state().lookup(parent.0, name.as_bytes());
        match found {
            Ok(Some(ino)) => self.entry(reply, ino),
            // A negative entry the kernel caches, as stitchfs answers.
            Ok(None) => {
                let mut a = Node::new(Kind::File, 0, 0, 0).attr(0);
                a.nlink = 0;
                reply.entry(&TTL, &a, Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let mut s = self.state();
        answer(reply, s.node(ino.0).map(|n| n.attr(ino.0)), |reply, a| {
            reply.attr(&TTL, &a)
        });
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let work = || -> Result<FileAttr> {
            let mut s = self.state();
            if let Some(size) = size {
                s.truncate(ino.0, size)?;
            }
            let n = s.node(ino.0)?;
            if let Some(m) = mode {
                n.perm = (m & 0o7777) as u16;
            }
            n.uid = uid.unwrap_or(n.uid);
            n.gid = gid.unwrap_or(n.gid);
            if let Some(t) = atime {
                n.atime = secs(t);
            }
            if let Some(t) = mtime {
                n.mtime = secs(t);
            }
            n.ctime = now();
            Ok(n.attr(ino.0))
        };
        answer(reply, work(), |reply, a| reply.attr(&TTL, &a));
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let node = Node::new(Kind::Dir, (mode & 0o7777) as u16, req.uid(), req.gid());
        let made = self.state().make(parent.0, name.as_bytes(), node);
        answer(reply, made, |reply, ino| self.entry(reply, ino));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.state().remove(parent.0, name.as_bytes(), false);
        answer(reply, r, |reply, ()| reply.ok());
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.state().remove(parent.0, name.as_bytes(), true);
        answer(reply, r, |reply, ()| reply.ok());
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = if (flags & !RenameFlags::RENAME_NOREPLACE).is_empty() {
            self.state().rename(
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                flags.contains(RenameFlags::RENAME_NOREPLACE),
            )
        } else {
            Err(Errno::EINVAL)
        };
        answer(reply, r, |reply, ()| reply.ok());
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.no_open {
            return reply.error(Errno::ENOSYS);
        }
        let r = self.state().node(ino.0).map(|n| n.open += 1);
        answer(reply, r, |reply, ()| {
            reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE)
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if self.no_open {
            return reply.error(Errno::ENOSYS);
        }
        answer(
            reply,
            self.make_file(req, parent, name, mode, 1),
            |reply, a| {
                reply.created(
                    &TTL,
                    &a,
                    Generation(0),
                    FileHandle(0),
                    FopenFlags::FOPEN_KEEP_CACHE,
                )
            },
        );
    }

    /// Regular files only (the kernel makes them so when `create` is
    /// answered `ENOSYS`); the floor keeps no other kind.
    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        answer(
            reply,
            self.make_file(req, parent, name, mode, 0),
            |reply, a| reply.entry(&TTL, &a, Generation(0)),
        );
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut s = self.state();
        if let Ok(n) = s.node(ino.0) {
            n.held = n.held.saturating_sub(nlookup);
        }
        s.drop_if_gone(ino.0);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let runs = {
            let mut s = self.state();
            s.node(ino.0)
                .map(|n| n.size.saturating_sub(offset).min(u64::from(size)))
                .and_then(|len| s.runs(ino.0, offset, len, false).map(|(r, _)| r))
        };
        let runs = match runs {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        let mut buf = Vec::new();
        for (at, len) in runs {
            let start = buf.len();
            buf.resize(start + len as usize, 0);
            if let Some(at) = at {
                if self.image.read_exact_at(&mut buf[start..], at).is_err() {
                    return reply.error(Errno::EIO);
                }
            }
        }
        reply.data(&buf);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let append = flags.0 & libc::O_APPEND != 0;
        let runs = self.state().write(ino.0, offset, data.len() as u64, append);
        let (runs, zeros) = match runs {
            Ok(r) => r,
            Err(e) => return reply.error(e),
        };
        for (at, len) in zeros {
            if self.image.write_all_at(&vec![0; len as usize], at).is_err() {
                return reply.error(Errno::EIO);
            }
        }
        let mut done = 0;
        for (at, len) in runs {
            let at = at.expect("a write's runs have chunks");
            let part = &data[done..done + len as usize];
            if self.image.write_all_at(part, at).is_err() {
                return reply.error(Errno::EIO);
            }
            done += len as usize;
        }
        reply.written(data.len() as u32);
    }

    /// Nothing to do at close (as stitchfs: `ENOSYS` once, then no more).
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut s = self.state();
        if let Ok(n) = s.node(ino.0) {
            n.open = n.open.saturating_sub(1);
        }
        s.drop_if_gone(ino.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        answer(reply, self.durable(), |reply, ()| reply.ok());
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        if cmd != IOC_SYNC {
            return reply.error(Errno::ENOTTY);
        }
        answer(reply, self.durable(), |reply, ()| reply.ioctl(0, &[]));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = self.state().dir(ino.0).map(drop);
        answer(reply, r, |reply, ()| {
            reply.opened(FileHandle(0), FopenFlags::empty())
        });
    }

    /// Entries in name order, so offsets stay put while nothing changes.
    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listing = {
            let mut s = self.state();
            let mut names = match s.dir(ino.0) {
                Ok(d) => d
                    .index
                    .iter()
                    .map(|(n, i)| (n.clone(), *i))
                    .collect::<Vec<_>>(),
                Err(e) => return reply.error(e),
            };
            names.sort();
            names
                .into_iter()
                .map(|(n, i)| {
                    let kind = match s.nodes.get(&i).map(|n| n.kind) {
                        Some(Kind::Dir) => FileType::Directory,
                        _ => FileType::RegularFile,
                    };
                    (n, i, kind)
                })
                .collect::<Vec<_>>()
        };
        let dots = [
            (b".".to_vec(), ino.0, FileType::Directory),
            (b"..".to_vec(), ino.0, FileType::Directory),
        ];
        let all = dots.into_iter().chain(listing);
        for (i, (name, node, kind)) in all.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(node), i as u64 + 1, kind, OsStr::from_bytes(&name)) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    /// As `fsync`: one fdatasync of the image.
    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.fsync(req, ino, fh, datasync, reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.state();
        let used = s.next_chunk - s.free.len() as u64;
        let per = CHUNK / 4096;
        let free = (s.capacity - used) * per;
        let files = s.nodes.len() as u64;
        reply.statfs(
            s.capacity * per,
            free,
            free,
            files + (1 << 20),
            1 << 20,
            4096,
            255,
            4096,
        );
    }

    /// No extended attributes are kept, but they are asked for as stitchfs
    /// is asked (`security.capability` before a file's first write).
    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        self.spin.served();
        reply.error(Errno::ENODATA);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(0)
        } else {
            reply.data(&[])
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        let r = self.state().node(ino.0).map(drop);
        answer(reply, r, |reply, ()| reply.ok());
    }
}

/// Serves `image` at `mountpoint` until unmounted (`fusermount3 -u`),
/// spinning on the device during bursts of requests if `spin` (as
/// stitchfs's mount does unless told `--spin off`), and sent `open` and
/// `release` for every file opened if `open_requests` (as stitchfs's
/// mount is when told `--open-requests on`).
pub fn serve(
    image: &Path,
    mountpoint: &Path,
    options: &[String],
    spin: bool,
    open_requests: bool,
) -> anyhow::Result<()> {
    use fuser::MountOption as M;
    let mut floor = Floor::open(image)?;
    floor.no_open = !open_requests;
    let switch = floor.spin.clone();
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        M::FSName(image.display().to_string()),
        M::CUSTOM("subtype=floor".into()),
        M::DefaultPermissions,
    ];
    for o in options.iter().flat_map(|o| o.split(',')) {
        match o {
            "allow_other" => config.acl = fuser::SessionACL::All,
            "" => {}
            other => config.mount_options.push(M::CUSTOM(other.into())),
        }
    }
    config.n_threads = Some(std::thread::available_parallelism().map_or(1, |n| n.get()));
    config.clone_fd = true;
    let session = fuser::Session::new(floor, mountpoint, &config)
        .with_context(|| format!("mounting on {}", mountpoint.display()))?;
    if spin {
        use std::os::fd::AsFd;
        switch
            .attach(session.as_fd())
            .context("spinning on the device")?;
    }
    session.run().context("serving")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(s: &mut State, name: &[u8]) -> u64 {
        let node = Node::new(Kind::File, 0o644, 0, 0);
        s.make(INodeNo::ROOT.0, name, node).unwrap()
    }

    #[test]
    fn a_write_takes_chunks_in_order_and_merges_contiguous_runs() {
        let mut s = State::new(100);
        let f = file(&mut s, b"f");
        let (runs, zeros) = s.runs(f, 1000, 3 * CHUNK, true).unwrap();
        assert_eq!(runs, vec![(Some(1000), 3 * CHUNK)]);
        // The first chunk's first 1000 bytes were never written.
        assert_eq!(zeros, vec![(0, 1000)]);
        // A second file's chunks follow; a read past what it wrote is a
        // hole, in its chunk and after it.
        let g = file(&mut s, b"g");
        let (runs, zeros) = s.runs(g, 0, 10, true).unwrap();
        assert_eq!((runs, zeros), (vec![(Some(4 * CHUNK), 10)], vec![]));
        assert_eq!(
            s.runs(g, 5, 2 * CHUNK, false).unwrap().0,
            vec![(Some(4 * CHUNK + 5), 5), (None, 2 * CHUNK - 5)]
        );
    }

    #[test]
    fn chunks_of_a_removed_file_are_reused_and_a_full_image_says_enospc() {
        let mut s = State::new(2);
        let f = file(&mut s, b"f");
        s.runs(f, 0, 2 * CHUNK, true).unwrap();
        let g = file(&mut s, b"g");
        assert_eq!(s.runs(g, 0, 1, true), Err(Errno::ENOSPC));
        s.remove(INodeNo::ROOT.0, b"f", false).unwrap();
        assert!(!s.nodes.contains_key(&f));
        // A reused chunk's old bytes are not the new file's: past what it
        // wrote, a read sees a hole, and a write further on zeroes the gap.
        let (runs, _) = s.runs(g, 0, 100, true).unwrap();
        let at = runs[0].0.unwrap();
        assert_eq!(s.runs(g, 0, 200, false).unwrap().0[1], (None, 100));
        let (_, zeros) = s.runs(g, 300, 10, true).unwrap();
        assert_eq!(zeros, vec![(at + 100, 200)]);
    }

    #[test]
    fn an_open_unlinked_file_keeps_its_chunks_until_released() {
        let mut s = State::new(4);
        let f = file(&mut s, b"f");
        s.node(f).unwrap().open = 1;
        s.runs(f, 0, CHUNK, true).unwrap();
        s.remove(INodeNo::ROOT.0, b"f", false).unwrap();
        assert!(s.free.is_empty());
        s.node(f).unwrap().open = 0;
        s.drop_if_gone(f);
        assert_eq!(s.free.len(), 1);
    }

    #[test]
    fn truncate_frees_whole_chunks_and_forgets_the_tail_of_the_last() {
        let mut s = State::new(8);
        let f = file(&mut s, b"f");
        s.runs(f, 0, 3 * CHUNK, true).unwrap();
        s.node(f).unwrap().size = 3 * CHUNK;
        s.truncate(f, CHUNK + 10).unwrap();
        assert_eq!(s.free, vec![2]);
        assert_eq!(s.node(f).unwrap().chunks[1].filled, 10);
        assert_eq!(
            s.runs(f, CHUNK, 20, false).unwrap().0,
            vec![(Some(CHUNK), 10), (None, 10)]
        );
        s.truncate(f, 0).unwrap();
        assert_eq!(s.free.len(), 3);
    }

    #[test]
    fn a_rename_moves_links_and_refuses_a_loop() {
        let mut s = State::new(1);
        let root = INodeNo::ROOT.0;
        let dir = |s: &mut State, at, name: &[u8]| {
            s.make(at, name, Node::new(Kind::Dir, 0o755, 0, 0)).unwrap()
        };
        let a = dir(&mut s, root, b"a");
        let b = dir(&mut s, a, b"b");
        // A directory into itself or below itself would leave the tree.
        assert_eq!(s.rename(root, b"a", b, b"a", false), Err(Errno::EINVAL));
        assert_eq!(s.rename(root, b"a", a, b"x", false), Err(Errno::EINVAL));
        s.rename(a, b"b", root, b"b", false).unwrap();
        assert_eq!(s.node(a).unwrap().nlink, 2);
        assert_eq!(s.node(root).unwrap().nlink, 4);
        assert_eq!(s.lookup(root, b"b"), Ok(Some(b)));
        // A file replaces a file; it does not replace a directory, nor
        // anything with noreplace.
        let f = file(&mut s, b"f");
        let g = file(&mut s, b"g");
        assert_eq!(s.rename(root, b"f", root, b"b", false), Err(Errno::EISDIR));
        assert_eq!(s.rename(root, b"f", root, b"g", true), Err(Errno::EEXIST));
        s.rename(root, b"f", root, b"g", false).unwrap();
        assert_eq!(s.lookup(root, b"g"), Ok(Some(f)));
        assert!(!s.nodes.contains_key(&g));
    }

    #[test]
    fn a_non_empty_directory_is_not_removed() {
        let mut s = State::new(1);
        let d = s
            .make(INodeNo::ROOT.0, b"d", Node::new(Kind::Dir, 0o755, 0, 0))
            .unwrap();
        s.make(d, b"f", Node::new(Kind::File, 0o644, 0, 0)).unwrap();
        assert_eq!(s.remove(INodeNo::ROOT.0, b"d", true), Err(Errno::ENOTEMPTY));
        assert_eq!(s.remove(INodeNo::ROOT.0, b"d", false), Err(Errno::EISDIR));
        assert_eq!(s.node(INodeNo::ROOT.0).unwrap().nlink, 3);
    }
}
