//! Running a workload on the whole stack, in process and deterministic:
//! memfs (no background flushes, a fixed clock) over diskfs over the patch
//! cache over a [`RecordingDevice`]. Each operation goes to memfs, to the
//! reference model (`stitch-model`, which must agree on success and errno)
//! and to the [`Oracle`]; each persistence point records where its device
//! writes begin and end in the log and what the oracle says it makes
//! durable. The setup runs the same way on a fresh image, once per setup
//! and image kind, and is unmounted: recording starts from a clean image.

use crate::oracle::{fsync_scope, Flush, LOp, Oracle, Scope};
use crate::state::{read_tree, FileKind, Inode, State, ROOT};
use crate::workload::{Action, Persist, Workload};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use stitch_blockdev::record::{CrashState, Log, LogPos};
use stitch_blockdev::{MemDevice, RecordingDevice};
use stitch_diskfs::{Consistency, DataMode, DiskFs, FileType, InodeNo, Timestamp};
use stitch_memfs::{
    FlushCause, Kind, MemError, MemFs, Options, Order, RenameFlags, SetAttrs, XattrSet,
};
use stitch_model::{Errno, Fd, Limits, Model, Op, Outcome, Owner, Path};

/// The clock every change is stamped with.
pub const NOW: Timestamp = Timestamp::from_secs(1_700_000_000);
/// [`NOW`] as the model keeps time.
fn model_now() -> stitch_model::Time {
    stitch_model::Time::from_secs(NOW.secs())
}

/// Block size of every image.
pub const BS: usize = 4096;
/// ext2 images (soft updates, async).
const EXT2_BYTES: u64 = 4 << 20;
/// ext3 images, with the smallest journal e2fsck accepts.
const EXT3_BYTES: u64 = 8 << 20;
const JOURNAL_BYTES: u64 = 4 << 20;

/// Byte `i` of the `n`th write of a workload: never zero, and different
/// for different writes at the same offset, so a file's bytes tell which
/// write made them.
pub fn pattern(n: u64, offset: u64) -> u8 {
    (1 + (n.wrapping_mul(97).wrapping_add(offset.wrapping_mul(13))) % 251) as u8
}

fn data(n: u64, offset: u64, len: u64) -> Vec<u8> {
    (offset..offset + len).map(|i| pattern(n, i)).collect()
}

/// Whether `mode` runs on ext3.
pub fn journaled(mode: Consistency) -> bool {
    matches!(mode, Consistency::Journal(_))
}

/// The image a setup leaves, and the tree on it.
pub struct Base {
    pub image: Arc<[u8]>,
    pub state: State,
    /// Writes the setup made (the workload's continue the count).
    pub writes: u64,
    /// Tells bases apart in the image-facts cache.
    pub id: u64,
    /// ext3: the journal superblock's block, and the blocks of the log
    /// after it (journal blocks 1..), in order.
    pub journal: Option<(usize, Arc<[usize]>)>,
}

type BaseKey = (bool, Vec<Action>);

/// The base for `setup` on ext2 or ext3, made once per process.
pub fn base(journal: bool, setup: &[Action]) -> Result<Arc<Base>, String> {
    static BASES: OnceLock<Mutex<HashMap<BaseKey, Arc<Base>>>> = OnceLock::new();
    let bases = BASES.get_or_init(Default::default);
    let key = (journal, setup.to_vec());
    if let Some(b) = bases.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(b.clone());
    }
    let made = Arc::new(make_base(journal, setup)?);
    let mut map = bases.lock().unwrap_or_else(|p| p.into_inner());
    let n = map.len() as u64;
    let b = map.entry(key).or_insert_with(|| {
        let mut b = made;
        Arc::get_mut(&mut b).expect("fresh").id = n + 1;
        b
    });
    Ok(b.clone())
}

fn fresh_image(journal: bool) -> Result<Vec<u8>, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("fresh.img");
    let opts = stitch_mkfs::MkfsOptions {
        size: Some(if journal { EXT3_BYTES } else { EXT2_BYTES }),
        journal: journal.then_some(stitch_mkfs::JournalSize::Bytes(JOURNAL_BYTES)),
        force: true,
        ..Default::default()
    };
    stitch_mkfs::mkfs(&path, &opts, &mut |_, _| {}).map_err(|e| format!("mkfs: {e}"))?;
    std::fs::read(&path).map_err(|e| e.to_string())
}

/// What a crash test may set of memfs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memfs {
    /// Pages of file data memfs keeps (`None`: the default, which no
    /// workload reaches).
    pub memory_pages: Option<u64>,
    /// What an fsync covers.
    pub order: Order,
}

/// memfs as the crash tests run it: no background flusher, a fixed
/// clock, and the memory bound and order of `m`.
fn opts(m: Memfs) -> Options {
    let d = Options::default();
    Options {
        flush_interval: None,
        fixed_time: Some(NOW),
        memory_limit: m
            .memory_pages
            .map_or(d.memory_limit, |p| p.saturating_mul(BS as u64)),
        order: m.order,
        ..d
    }
}

fn make_base(journal: bool, setup: &[Action]) -> Result<Base, String> {
    if setup.iter().any(|a| matches!(a, Action::Fill(_))) {
        return Err(
            "fill is a step, not part of a setup: its length is known only as it runs".into(),
        );
    }
    let image = fresh_image(journal)?;
    let mode = if journal {
        Consistency::Journal(DataMode::Ordered)
    } else {
        Consistency::SoftUpdates
    };
    let dev = Arc::new(MemDevice::from_image(BS, image).map_err(|e| e.to_string())?);
    let mut disk = DiskFs::mount(dev.clone(), mode, NOW).map_err(|e| format!("mount: {e}"))?;
    let empty = read_tree(&mut disk)?.state;
    let fs = MemFs::mount(disk, opts(Memfs::default())).map_err(|e| e.to_string())?;
    let mut d = Driver::new(&fs, Order::default(), empty, 0, None);
    for a in setup {
        d.act(a).map_err(|e| format!("setup: {a}: {e}"))?;
    }
    fs.sync().map_err(|e| format!("setup sync: {e}"))?;
    d.oracle.flush(Scope::All);
    fs.unmount().map_err(|e| format!("setup unmount: {e}"))?;
    let image = dev.snapshot();
    // The setup must be on the image as the oracle says.
    let dev2 = Arc::new(MemDevice::from_image(BS, image.clone()).map_err(|e| e.to_string())?);
    let mut check = DiskFs::mount(dev2, mode, NOW).map_err(|e| e.to_string())?;
    let on_disk = read_tree(&mut check)?.state;
    let journal = if journal {
        let mut at = Vec::new();
        for l in 0..JOURNAL_BYTES / BS as u64 {
            match check.physical_block(InodeNo(8), l) {
                Ok(Some(b)) => at.push(b as usize),
                other => return Err(format!("journal block {l}: {other:?}")),
            }
        }
        Some((at[0], at[1..].into()))
    } else {
        None
    };
    if on_disk != *d.oracle.disk() {
        return Err(format!(
            "the setup image differs from the oracle:\n{}\nexpected:\n{}",
            on_disk.show(None),
            d.oracle.disk().show(None)
        ));
    }
    Ok(Base {
        image: image.into(),
        state: on_disk,
        writes: d.writes,
        id: 0,
        journal,
    })
}

/// A fresh model with `setup` applied.
pub fn setup_model(setup: &[Action]) -> Model {
    let mut m = Model::new(0o755, Owner { uid: 0, gid: 0 }, Limits::default());
    m.set_now(model_now());
    let mut writes = 0;
    for a in setup {
        model_apply(&mut m, a, &mut writes).expect("setup valid on the model");
    }
    m
}

/// Applies `a` to the model; `writes` counts writes for their patterns.
pub fn model_apply(m: &mut Model, a: &Action, writes: &mut u64) -> Result<Outcome, Errno> {
    let p = |s: &str| Path::parse(s);
    let op = match a {
        // The model keeps no extended attributes: setting one succeeds
        // wherever the path names something (the oracle keeps the values).
        Action::Setxattr { path, .. } => {
            return m.resolve(&p(path)).map(|_| Outcome::Done);
        }
        Action::Creat(path) => Op::Create {
            path: p(path),
            perm: 0o644,
        },
        Action::Mkdir(path) => Op::Mkdir {
            path: p(path),
            perm: 0o755,
        },
        Action::Write { path, offset, len } => {
            *writes += 1;
            Op::Write {
                path: p(path),
                offset: *offset,
                data: data(*writes, *offset, *len),
            }
        }
        Action::Append { path, len } => {
            *writes += 1;
            let size = match m.apply(&Op::Stat { path: p(path) }) {
                Ok(Outcome::Stat(meta)) => meta.size.unwrap_or(0),
                _ => 0,
            };
            Op::Write {
                path: p(path),
                offset: size,
                data: data(*writes, size, *len),
            }
        }
        // What a fill takes is known only once memfs has taken it:
        // `Driver::act` applies it to the model as that append.
        Action::Fill(_) => return Err(Errno::Einval),
        Action::Truncate { path, size } => Op::Truncate {
            path: p(path),
            size: *size,
        },
        Action::Chmod { path, perm } => Op::Chmod {
            path: p(path),
            perm: u32::from(*perm),
        },
        Action::Link { from, to } => Op::Link {
            from: p(from),
            to: p(to),
        },
        Action::Unlink(path) => Op::Unlink { path: p(path) },
        Action::Rmdir(path) => Op::Rmdir { path: p(path) },
        Action::Rename { from, to } => Op::Rename {
            from: p(from),
            to: p(to),
            flags: Default::default(),
        },
        Action::Symlink { path, target } => Op::Symlink {
            path: p(path),
            target: target.as_bytes().to_vec(),
        },
        Action::Mknod { path, kind } => Op::Mknod {
            path: p(path),
            kind: *kind,
            perm: 0o644,
        },
        Action::Open(path) => Op::Open { path: p(path) },
        Action::WriteFd { fd, offset, len } => {
            *writes += 1;
            Op::WriteFd {
                fd: Fd(*fd),
                offset: *offset,
                data: data(*writes, *offset, *len),
            }
        }
        Action::Close(fd) => Op::Close { fd: Fd(*fd) },
    };
    m.apply(&op)
}

/// Splits `a/b/c` into its directory part and last name.
fn split(path: &str) -> (&str, &str) {
    match path.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => ("", path),
    }
}

/// The inode `path` names in memfs (`/` or empty: the root).
fn resolve(fs: &MemFs, path: &str) -> Result<u64, MemError> {
    let mut at = ROOT;
    for name in path.split('/').filter(|c| !c.is_empty()) {
        at = fs.lookup(at, name.as_bytes())?.ino;
    }
    Ok(at)
}

/// Drives memfs, the model and the oracle together.
struct Driver<'a> {
    fs: &'a MemFs,
    model: Model,
    oracle: Oracle,
    /// Writes so far (patterns).
    writes: u64,
    /// The model's count, to check both sides count alike.
    model_writes: u64,
    /// memfs's open handles by slot (the model numbers them alike).
    handles: Vec<Option<u64>>,
    /// The device, when recording.
    rec: Option<Arc<RecordingDevice<MemDevice>>>,
    /// The flushes memfs began on its own (`MemFs::on_own_flush`) and the
    /// log's length as each began, not yet taken into the oracle.
    own: Arc<Mutex<Vec<(FlushCause, usize)>>>,
    /// The journal's commits before the operation in progress.
    mark: u64,
    /// Flushes memfs made on its own so far, recorded.
    own_flushes: usize,
    /// Flushes memfs made on its own inside the last operation, as
    /// persistence points: to find room (before the change), or under
    /// memory pressure (after it).
    inside: Vec<Inside>,
    /// memfs's order, which says what its fsyncs cover.
    order: Order,
}

/// A flush memfs made on its own inside an operation.
struct Inside {
    cause: FlushCause,
    /// Where it began and ended in the log.
    start: usize,
    end: usize,
    /// Journal commits the operation's flushes wrote: all of them, as the
    /// hook tells where a flush begins but not its commits (counting too
    /// many only judges the flush fact by fact, which is weaker, never
    /// wrong).
    commits: u64,
    flush: Flush,
}

impl Inside {
    fn label(&self) -> &'static str {
        match self.cause {
            FlushCause::Room => "a sync to find room",
            FlushCause::Pressure => "a flush under memory pressure",
            FlushCause::Periodic => "a periodic flush",
            FlushCause::WriteBehind(_) => "a write-behind flush",
        }
    }
}

impl<'a> Driver<'a> {
    fn new(
        fs: &'a MemFs,
        order: Order,
        state: State,
        writes: u64,
        rec: Option<Arc<RecordingDevice<MemDevice>>>,
    ) -> Driver<'a> {
        let own: Arc<Mutex<Vec<(FlushCause, usize)>>> = Arc::default();
        let (seen, dev) = (own.clone(), rec.clone());
        fs.on_own_flush(move |cause| {
            let at = dev.as_ref().map_or(0, |d| d.log_len());
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((cause, at));
        });
        let root_perm = state.inodes.get(&ROOT).map_or(0o755, |r| r.perm);
        let mut model = Model::new(
            u32::from(root_perm),
            Owner { uid: 0, gid: 0 },
            Limits::default(),
        );
        model.set_now(model_now());
        Driver {
            fs,
            model,
            oracle: Oracle::new(state),
            writes,
            model_writes: writes,
            handles: Vec::new(),
            rec,
            own,
            mark: 0,
            own_flushes: 0,
            inside: Vec::new(),
            order,
        }
    }

    /// Closes every handle still open, as a program's are when it exits.
    fn close_all(&mut self) -> Result<(), String> {
        for slot in 0..self.handles.len() {
            if self.handles[slot].is_some() {
                let close = Action::Close(slot as u32);
                if !self.act(&close)? {
                    return Err(format!("{close} failed"));
                }
            }
        }
        Ok(())
    }

    /// One operation on all three; `Err` if memfs and the model disagree.
    /// Returns whether it succeeded.
    fn act(&mut self, a: &Action) -> Result<bool, String> {
        if let Action::Fill(path) = a {
            // memfs first: the model then appends what it took.
            let got = self.fill(path);
            let len = *got.as_ref().unwrap_or(&0);
            let append = Action::Append {
                path: path.clone(),
                len,
            };
            let expected = model_apply(&mut self.model, &append, &mut self.model_writes);
            return match (&expected, got) {
                (Ok(_), Ok(_)) => Ok(true),
                (Err(e), Err(g)) if e.raw() == g.errno() => Ok(false),
                (_, got) => Err(format!(
                    "{a}: the model says {:?} to {append}, memfs {got:?}",
                    expected.map(|_| ())
                )),
            };
        }
        let expected = model_apply(&mut self.model, a, &mut self.model_writes);
        let got = match a {
            // No handle in that slot: what `close` on a bad descriptor
            // says, without reaching memfs.
            Action::Close(fd) | Action::WriteFd { fd, .. }
                if self.handles.get(*fd as usize).copied().flatten().is_none() =>
            {
                if matches!(a, Action::WriteFd { .. }) {
                    self.writes += 1; // as the model counts a failed write
                }
                Err((Errno::Ebadf.raw(), "no handle in that slot".to_string()))
            }
            _ => {
                let r = self.memfs(a);
                self.caught_up(); // a flush before a change that then failed
                self.settled(); // one after the change
                r.map_err(|e| (e.errno(), e.to_string()))
            }
        };
        match (&expected, &got) {
            (Ok(_), Ok(())) => Ok(true),
            (Err(e), Err((g, _))) if e.raw() == *g => Ok(false),
            _ => Err(format!(
                "{a}: the model says {:?}, memfs {:?}",
                expected.map(|_| ()),
                got
            )),
        }
    }

    /// The operation on memfs, logged in the oracle if it succeeded.
    fn memfs(&mut self, a: &Action) -> Result<(), MemError> {
        self.mark();
        let fs = self.fs;
        let parent_of = |path: &str| -> Result<(u64, Vec<u8>), MemError> {
            let (d, n) = split(path);
            Ok((resolve(fs, d)?, n.as_bytes().to_vec()))
        };
        match a {
            Action::Creat(path)
            | Action::Mkdir(path)
            | Action::Symlink { path, .. }
            | Action::Mknod { path, .. } => {
                let (parent, name) = parent_of(path)?;
                let (attr, init) = match a {
                    Action::Creat(_) => (
                        fs.mknod(parent, &name, Kind::File, 0o644, (0, 0), 0, 0)?,
                        Inode::new(FileKind::File, 0o644, 0, 0),
                    ),
                    Action::Mkdir(_) => (
                        fs.mkdir(parent, &name, 0o755, 0, 0)?,
                        Inode::new(FileKind::Dir, 0o755, 0, 0),
                    ),
                    Action::Symlink { target, .. } => {
                        let mut i = Inode::new(FileKind::Symlink, 0o777, 0, 0);
                        i.bytes = target.as_bytes().to_vec();
                        (fs.symlink(parent, &name, target.as_bytes(), 0, 0)?, i)
                    }
                    Action::Mknod { kind, .. } => {
                        use stitch_model::Special as S;
                        let (k, rdev) = match *kind {
                            S::Fifo => (Kind::Fifo, (0, 0)),
                            S::Socket => (Kind::Socket, (0, 0)),
                            S::Char(r) => (Kind::CharDev, (r.major, r.minor)),
                            S::Block(r) => (Kind::BlockDev, (r.major, r.minor)),
                        };
                        (
                            fs.mknod(parent, &name, k, 0o644, rdev, 0, 0)?,
                            Inode::new(FileKind::Special(*kind), 0o644, 0, 0),
                        )
                    }
                    _ => unreachable!(),
                };
                self.caught_up().log(LOp::Create {
                    parent,
                    name,
                    ino: attr.ino,
                    init,
                });
            }
            Action::Write { path, offset, len } => {
                self.writes += 1;
                let ino = resolve(fs, path)?;
                let bytes = data(self.writes, *offset, *len);
                fs.write(ino, *offset, &bytes, false)?;
                self.caught_up()
                    .change(ino, |i| put(&mut i.bytes, *offset, &bytes));
            }
            Action::Append { path, len } => {
                self.writes += 1;
                let ino = resolve(fs, path)?;
                let size = fs.getattr(ino)?.size;
                let bytes = data(self.writes, size, *len);
                fs.write(ino, 0, &bytes, true)?;
                self.caught_up()
                    .change(ino, |i| put(&mut i.bytes, size, &bytes));
            }
            Action::Fill(path) => {
                self.fill(path)?;
            }
            Action::Truncate { path, size } => {
                let ino = resolve(fs, path)?;
                fs.setattr(
                    ino,
                    SetAttrs {
                        size: Some(*size),
                        ..Default::default()
                    },
                )?;
                self.caught_up()
                    .change(ino, |i| i.bytes.resize(*size as usize, 0));
            }
            Action::Setxattr { path, name, value } => {
                let ino = resolve(fs, path)?;
                fs.set_xattr(
                    ino,
                    name.as_bytes(),
                    Some(value.as_bytes()),
                    XattrSet::Either,
                )?;
                self.caught_up().change(ino, |i| {
                    i.xattrs
                        .insert(name.as_bytes().to_vec(), value.as_bytes().to_vec());
                });
            }
            Action::Chmod { path, perm } => {
                let ino = resolve(fs, path)?;
                fs.setattr(
                    ino,
                    SetAttrs {
                        perm: Some(*perm),
                        ..Default::default()
                    },
                )?;
                self.caught_up().change(ino, |i| i.perm = *perm & 0o7777);
            }
            Action::Link { from, to } => {
                let ino = resolve(fs, from)?;
                let (parent, name) = parent_of(to)?;
                fs.link(ino, parent, &name)?;
                self.caught_up().log(LOp::Link { ino, parent, name });
            }
            Action::Unlink(path) | Action::Rmdir(path) => {
                let (parent, name) = parent_of(path)?;
                let ino = self
                    .oracle
                    .mem()
                    .inodes
                    .get(&parent)
                    .and_then(|d| d.entries.get(&name).copied());
                if matches!(a, Action::Rmdir(_)) {
                    fs.rmdir(parent, &name)?;
                } else {
                    fs.unlink(parent, &name)?;
                }
                let ino = ino.expect("memfs removed a name the oracle lacks");
                self.caught_up().log(LOp::Unlink { parent, name, ino });
            }
            // Handles change nothing the disk shows: an orphan is freed at
            // mount after a crash and at its last close otherwise, so the
            // oracle drops an inode with its last name either way.
            Action::Open(path) => {
                let ino = resolve(fs, path)?;
                match fs.getattr(ino)?.kind {
                    Kind::File => {}
                    Kind::Dir => return Err(MemError::IsDir),
                    // O_NOFOLLOW and special files: not generated.
                    _ => return Err(MemError::Invalid("open of a symlink or special file")),
                }
                fs.open(ino)?;
                let slot = stitch_model::op::free_slot(&self.handles)
                    .map_err(|_| MemError::Invalid("too many handles"))?;
                if slot == self.handles.len() {
                    self.handles.push(None);
                }
                self.handles[slot] = Some(ino);
            }
            Action::WriteFd { fd, offset, len } => {
                self.writes += 1;
                let ino = self.handles[*fd as usize].expect("act checked the slot");
                let bytes = data(self.writes, *offset, *len);
                fs.write(ino, *offset, &bytes, false)?;
                // An orphan's bytes are on no name: nothing to expect.
                if self.oracle.mem().inodes.contains_key(&ino) {
                    self.caught_up()
                        .change(ino, |i| put(&mut i.bytes, *offset, &bytes));
                }
            }
            Action::Close(fd) => {
                let slot = self.handles.get_mut(*fd as usize);
                let ino = slot.and_then(Option::take).expect("act checked the slot");
                fs.release(ino)?;
            }
            Action::Rename { from, to } => {
                let (fd, fname) = parent_of(from)?;
                let (td, tname) = parent_of(to)?;
                let mem = self.oracle.mem();
                let entry =
                    |d: u64, n: &[u8]| mem.inodes.get(&d).and_then(|i| i.entries.get(n).copied());
                let moved = entry(fd, &fname);
                let other = entry(td, &tname);
                let is_dir = |i: Option<u64>| {
                    i.and_then(|i| mem.inodes.get(&i))
                        .is_some_and(|i| i.kind == FileKind::Dir)
                };
                // McoreFS §4.3: a directory changing parent records the
                // ancestors of where it goes (and, if it replaces a
                // directory, of where that one was).
                let mut ancestors = Vec::new();
                if fd != td {
                    if is_dir(moved) {
                        ancestors.extend(self.oracle.ancestors(td));
                    }
                    if is_dir(other) {
                        ancestors.extend(self.oracle.ancestors(fd));
                    }
                }
                ancestors.sort_unstable();
                ancestors.dedup();
                fs.rename(fd, &fname, td, &tname, RenameFlags::default())?;
                let moved = moved.expect("memfs renamed a name the oracle lacks");
                if other == Some(moved) {
                    return Ok(()); // two names of one file: nothing happens
                }
                self.caught_up().log(LOp::Rename {
                    from_dir: fd,
                    from: fname,
                    to_dir: td,
                    to: tname,
                    moved,
                    other,
                    ancestors,
                });
            }
        }
        Ok(())
    }

    /// Appends to `path` in 64 KiB writes until memfs refuses one
    /// (`ENOSPC`, or nothing taken); returns the bytes taken. A write that
    /// flushed to find room flushed everything logged before it: the
    /// oracle syncs there too, and the log span is kept as a persistence
    /// point (`inside`).
    fn fill(&mut self, path: &str) -> Result<u64, MemError> {
        const CHUNK: u64 = 64 << 10;
        const LIMIT: u64 = 1 << 30;
        let fs = self.fs;
        self.writes += 1;
        let ino = resolve(fs, path)?;
        let size = fs.getattr(ino)?.size;
        let mut taken = 0;
        while taken < LIMIT {
            let at = size + taken;
            let bytes = data(self.writes, at, CHUNK);
            self.mark();
            let r = fs.write(ino, at, &bytes, false);
            self.caught_up();
            match r {
                Ok(0) | Err(MemError::NoSpace) => break,
                Ok(n) => {
                    let n = u64::from(n);
                    self.oracle
                        .change(ino, |i| put(&mut i.bytes, at, &bytes[..n as usize]));
                    self.settled();
                    taken += n;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(taken)
    }

    /// Notes where memfs stands before an operation.
    fn mark(&mut self) {
        self.mark = self.commits();
    }

    /// The device log's length (0 when not recording).
    fn len(&self) -> usize {
        self.rec.as_ref().map_or(0, |r| r.log_len())
    }

    /// The oracle, once every flush memfs began on its own before the
    /// change is recorded: memfs flushes everything to find room for a
    /// change before making it (`claim_or_flush`, a new inode number), so
    /// the oracle syncs there too, and the span of the log it wrote is a
    /// persistence point of its own (`inside`).
    fn caught_up(&mut self) -> &mut Oracle {
        self.take_own(false);
        &mut self.oracle
    }

    /// Records the flushes memfs began after the change the oracle now
    /// holds: a read or write that took memory past its bound flushes
    /// everything, this change included.
    fn settled(&mut self) {
        self.take_own(true);
    }

    /// Takes memfs's own flushes into the oracle, in order: those that
    /// come before an operation's change, or (`after_change`) all.
    fn take_own(&mut self, after_change: bool) {
        let events = std::mem::take(&mut *self.own.lock().unwrap_or_else(|p| p.into_inner()));
        let now = self.len();
        let commits = self.commits() - self.mark;
        let mut rest = Vec::new();
        for (i, &(cause, start)) in events.iter().enumerate() {
            if !after_change && (cause == FlushCause::Pressure || !rest.is_empty()) {
                rest.push((cause, start));
                continue;
            }
            let end = events.get(i + 1).map_or(now, |e| e.1);
            let flush = self.oracle.flush(match cause {
                FlushCause::WriteBehind(ino) => fsync_scope(self.order, ino),
                _ => Scope::All,
            });
            self.inside.push(Inside {
                cause,
                start,
                end,
                commits,
                flush,
            });
        }
        *self.own.lock().unwrap_or_else(|p| p.into_inner()) = rest;
    }

    /// Journal commits so far (none without a journal).
    fn commits(&self) -> u64 {
        self.fs
            .with_disk(|d| d.modes().journal().map_or(0, |j| j.stats().commits))
            .unwrap_or(0)
    }

    /// A persistence point on memfs and in the oracle.
    fn persist(&mut self, p: &Persist) -> Result<Option<Flush>, String> {
        let scope = match p {
            Persist::None => return Ok(None),
            Persist::Sync => {
                self.fs.sync().map_err(|e| format!("sync: {e}"))?;
                Scope::All
            }
            Persist::FsyncFd(fd) => {
                let ino = self.handles.get(*fd as usize).copied().flatten();
                let ino = ino.ok_or_else(|| format!("fsync(fd{fd}): no handle"))?;
                self.fs
                    .fsync(ino, false)
                    .map_err(|e| format!("fsync(fd{fd}): {e}"))?;
                fsync_scope(self.order, ino)
            }
            Persist::Fsync(path) => {
                let ino = resolve(self.fs, path).map_err(|e| format!("fsync({path}): {e}"))?;
                self.fs
                    .fsync(ino, false)
                    .map_err(|e| format!("fsync({path}): {e}"))?;
                fsync_scope(self.order, ino)
            }
        };
        Ok(Some(self.oracle.flush(scope)))
    }

    /// memfs's view, the oracle's memory and the model must be one tree.
    fn compare_with_model(&self) -> Result<(), String> {
        let want = self.model.snapshot();
        let mine = self.oracle.mem().to_tree(None);
        let diff = want.diff(&mine);
        if !diff.is_empty() {
            return Err(format!(
                "the oracle's memory differs from the model: {diff:?}"
            ));
        }
        let (seen, links) = memfs_tree(self.fs).map_err(|e| format!("reading memfs: {e}"))?;
        let diff = want.diff(&seen.to_tree(Some(&links)));
        if !diff.is_empty() {
            return Err(format!("memfs shows another tree than the model: {diff:?}"));
        }
        Ok(())
    }
}

/// Writes `src` at `at`, extending with zeros.
fn put(bytes: &mut Vec<u8>, at: u64, src: &[u8]) {
    let end = at as usize + src.len();
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    bytes[at as usize..end].copy_from_slice(src);
}

/// The tree memfs shows, with its link counts.
fn memfs_tree(fs: &MemFs) -> Result<(State, BTreeMap<u64, u32>), MemError> {
    let mut st = State::default();
    let mut links = BTreeMap::new();
    let mut stack = vec![ROOT];
    let mut lost_found = 0;
    while let Some(ino) = stack.pop() {
        if st.inodes.contains_key(&ino) {
            continue;
        }
        let a = fs.getattr(ino)?;
        let kind = match a.kind {
            Kind::File => FileKind::File,
            Kind::Dir => FileKind::Dir,
            Kind::Symlink => FileKind::Symlink,
            Kind::Fifo => FileKind::Special(crate::state::special(FileType::Fifo, a.rdev)),
            Kind::Socket => FileKind::Special(crate::state::special(FileType::Socket, a.rdev)),
            Kind::CharDev => FileKind::Special(crate::state::special(FileType::CharDevice, a.rdev)),
            Kind::BlockDev => {
                FileKind::Special(crate::state::special(FileType::BlockDevice, a.rdev))
            }
        };
        let mut i = Inode::new(kind, a.perm, a.uid, a.gid);
        match kind {
            FileKind::File => i.bytes = fs.read(ino, 0, a.size as u32)?,
            FileKind::Symlink => i.bytes = fs.readlink(ino)?,
            FileKind::Dir => {
                for e in fs.readdir(ino)? {
                    if ino == ROOT && e.name == b"lost+found" {
                        lost_found = 1;
                        continue;
                    }
                    stack.push(e.ino);
                    i.entries.insert(e.name, e.ino);
                }
            }
            FileKind::Special(_) => {}
        }
        links.insert(ino, a.nlink);
        st.inodes.insert(ino, i);
    }
    if let Some(l) = links.get_mut(&ROOT) {
        *l -= lost_found;
    }
    Ok((st, links))
}

/// Moves the flushes memfs made on its own during `what` from the driver
/// to `flushes`, checking each begins where the last ended (`before`).
fn inside_flushes(
    d: &mut Driver<'_>,
    what: &str,
    before: &mut usize,
    flushes: &mut Vec<FlushRec>,
    problems: &mut Vec<(crate::report::Kind, String)>,
) {
    for f in std::mem::take(&mut d.inside) {
        d.own_flushes += 1;
        if f.start != *before {
            problems.push((
                crate::report::Kind::Harness,
                format!("{what}: a write outside a flush"),
            ));
        }
        flushes.push(FlushRec {
            label: format!("{what}: {}", f.label()),
            start: f.start,
            end: f.end,
            flush: f.flush,
            commits: f.commits,
        });
        *before = f.end;
    }
}

/// One persistence point in the log.
#[derive(Clone, Debug)]
pub struct FlushRec {
    pub label: String,
    /// Log length when it began and when it returned.
    pub start: usize,
    pub end: usize,
    pub flush: Flush,
    /// Journal commits written in between: more than one, and the flush
    /// was split across transactions (a batch outgrowing half the log,
    /// ARCHITECTURE.md "One unit"), so the disk passes through its
    /// intermediate states.
    pub commits: u64,
}

/// A workload as it ran.
pub struct Recording {
    pub mode: Consistency,
    pub base: Arc<Base>,
    pub log: Log,
    /// Every block the log writes (where a crash image may differ from
    /// the base), with the log positions of its writes.
    pub writes: BTreeMap<usize, Vec<usize>>,
    /// Mount, each persistence point, the final sync, unmount; in order.
    pub flushes: Vec<FlushRec>,
    /// What went wrong outside crash states: (kind, message).
    pub problems: Vec<(crate::report::Kind, String)>,
    /// Flushes memfs made on its own (among `flushes`).
    pub own_flushes: usize,
}

impl Recording {
    /// The contents of every block the log writes, in the image of
    /// `state` (the other blocks are the base's), without building it.
    pub fn blocks(&self, state: &CrashState) -> Vec<(usize, &[u8])> {
        let chosen: BTreeMap<usize, usize> = state
            .persisted
            .iter()
            .filter(|p| p.torn.is_none())
            .filter_map(|p| {
                self.log
                    .write_at(p.write)
                    .map(|(b, _)| (b.0 as usize, p.write.0))
            })
            .collect();
        self.writes
            .iter()
            .map(|(&block, positions)| {
                let pos = chosen.get(&block).copied().or_else(|| {
                    positions
                        .iter()
                        .rev()
                        .find(|&&p| p < state.committed.0)
                        .copied()
                });
                let data: &[u8] = match pos.and_then(|p| self.log.write_at(LogPos(p))) {
                    Some((_, d)) => d,
                    None => &self.base.image[block * BS..(block + 1) * BS],
                };
                (block, data)
            })
            .collect()
    }
}

/// Runs `w` in `mode` on the recording device, memfs set as `memfs` says.
pub fn record(mode: Consistency, w: &Workload, memfs: Memfs) -> Result<Recording, String> {
    use crate::report::Kind as K;
    let base = base(journaled(mode), &w.setup)?;
    let image = base.image.to_vec();
    let mem = MemDevice::from_image(BS, image.clone()).map_err(|e| e.to_string())?;
    let rec = Arc::new(RecordingDevice::with_base(mem, image).map_err(|e| e.to_string())?);
    let len = || rec.log_len();
    let still = |label: &str, start: usize, end: usize, s: &State| FlushRec {
        label: label.to_string(),
        start,
        end,
        commits: 0,
        flush: Flush {
            states: vec![s.clone(), s.clone()],
            min_sizes: BTreeMap::new(),
            ops: Vec::new(),
        },
    };
    let disk = DiskFs::mount(rec.clone(), mode, NOW).map_err(|e| format!("mount: {e}"))?;
    let mut flushes = vec![still("mount", 0, len(), &base.state)];
    let mut problems = Vec::new();
    let fs = MemFs::mount(disk, opts(memfs)).map_err(|e| e.to_string())?;
    let mut d = Driver::new(
        &fs,
        memfs.order,
        base.state.clone(),
        base.writes,
        Some(rec.clone()),
    );
    let mut setup_writes = 0;
    for a in &w.setup {
        // The model replays the setup (the image already holds it).
        model_apply(&mut d.model, a, &mut setup_writes).map_err(|e| format!("setup {a}: {e}"))?;
    }
    for (i, step) in w.steps.iter().enumerate() {
        let mut before = len();
        let acted = d.act(&step.action);
        // Flushes memfs made on its own inside the operation (to find
        // room, under memory pressure), in order and back to back with
        // nothing written between them.
        let what = format!("step {}: {}", i + 1, step.action);
        inside_flushes(&mut d, &what, &mut before, &mut flushes, &mut problems);
        if let Err(e) = acted {
            problems.push((K::Semantics, format!("step {}: {e}", i + 1)));
            break;
        }
        if len() != before {
            problems.push((
                K::Harness,
                format!(
                    "step {}: {} wrote to the device outside a persistence point",
                    i + 1,
                    step.action
                ),
            ));
        }
        let start = len();
        let commits = d.commits();
        match d.persist(&step.persist) {
            Ok(Some(flush)) => flushes.push(FlushRec {
                label: format!("step {}: {step}", i + 1),
                start,
                end: len(),
                flush,
                commits: d.commits() - commits,
            }),
            Ok(None) => {}
            Err(e) => {
                problems.push((K::Harness, format!("step {}: {e}", i + 1)));
                break;
            }
        }
    }
    if problems.is_empty() {
        // Reading every file back may take memory past its bound, and
        // memfs flushes then too.
        let mut before = len();
        d.mark();
        let compared = d.compare_with_model();
        d.settled();
        let what = "reading the tree back";
        inside_flushes(&mut d, what, &mut before, &mut flushes, &mut problems);
        if let Err(e) = compared {
            problems.push((K::Semantics, e));
        } else if len() != before {
            problems.push((K::Harness, format!("{what} wrote outside a flush")));
        }
    }
    let mut before = len();
    if let Err(e) = d.close_all() {
        problems.push((K::Semantics, format!("closing handles at exit: {e}")));
    }
    let what = "closing handles at exit";
    inside_flushes(&mut d, what, &mut before, &mut flushes, &mut problems);
    if len() != before {
        problems.push((K::Harness, format!("{what} wrote outside a flush")));
    }
    let start = len();
    let commits = d.commits();
    match d.persist(&Persist::Sync) {
        Ok(Some(flush)) => flushes.push(FlushRec {
            label: "final sync".into(),
            start,
            end: len(),
            flush,
            commits: d.commits() - commits,
        }),
        Ok(None) => {}
        Err(e) => problems.push((K::Harness, format!("final {e}"))),
    }
    let start = len();
    if let Err(e) = fs.unmount() {
        problems.push((K::Harness, format!("unmount: {e}")));
    }
    flushes.push(still("unmount", start, len(), d.oracle.disk()));
    let log = rec.log();
    let mut writes: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (pos, e) in log.entries().iter().enumerate() {
        if let stitch_blockdev::record::LogEntry::Write { block, .. } = e {
            writes.entry(block.0 as usize).or_default().push(pos);
        }
    }
    Ok(Recording {
        mode,
        base,
        writes,
        log,
        flushes,
        problems,
        own_flushes: d.own_flushes,
    })
}
