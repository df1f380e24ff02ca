//! Running a workload on the whole stack, in process and deterministic:
//! memfs (no background flushes, a fixed clock) over diskfs over the patch
//! cache over a [`RecordingDevice`]. Each operation goes to memfs, to the
//! reference model (`stitch-model`, which must agree on success and errno)
//! and to the [`Oracle`]; each persistence point records where its device
//! writes begin and end in the log and what the oracle says it makes
//! durable. The setup runs the same way on a fresh image, once per setup
//! and image kind, and is unmounted: recording starts from a clean image.

use crate::error::{Answer, SetupError, StepError};
use crate::oracle::{fsync_scope, Flush, LOp, Oracle, Scope};
use crate::state::{read_tree, FileKind, Inode, State, ROOT};
use crate::workload::{Action, Persist, PgCall, Workload};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use stitch_blockdev::record::{CrashState, Log, LogPos};
use stitch_blockdev::{MemDevice, RecordingDevice};
use stitch_diskfs::{Consistency, DataMode, DiskFs, FileType, InodeNo, Timestamp};
use stitch_memfs::Refusal;
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
pub fn base(journal: bool, setup: &[Action]) -> Result<Arc<Base>, SetupError> {
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

fn fresh_image(journal: bool) -> Result<Vec<u8>, SetupError> {
    let dir = tempfile::tempdir().map_err(SetupError::Scratch)?;
    let path = dir.path().join("fresh.img");
    let opts = stitch_mkfs::MkfsOptions {
        size: Some(if journal { EXT3_BYTES } else { EXT2_BYTES }),
        journal: journal.then_some(stitch_mkfs::JournalSize::Bytes(JOURNAL_BYTES)),
        force: true,
        ..Default::default()
    };
    stitch_mkfs::mkfs(&path, &opts, &mut |_, _| {})?;
    std::fs::read(&path).map_err(SetupError::ReadImage)
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

fn make_base(journal: bool, setup: &[Action]) -> Result<Base, SetupError> {
    if setup.iter().any(|a| matches!(a, Action::Fill(_))) {
        return Err(SetupError::FillInSetup);
    }
    let image = fresh_image(journal)?;
    let mode = if journal {
        Consistency::Journal(DataMode::Ordered)
    } else {
        Consistency::SoftUpdates
    };
    let dev = Arc::new(MemDevice::from_image(BS, image)?);
    let mut disk = DiskFs::mount(dev.clone(), mode, NOW).map_err(SetupError::Mount)?;
    let empty = read_tree(&mut disk).map_err(SetupError::Read)?.state;
    let fs = MemFs::mount(disk, opts(Memfs::default())).map_err(SetupError::Memfs)?;
    let mut d = Driver::new(&fs, Order::default(), empty, 0, None);
    for a in setup {
        d.act(a).map_err(|error| SetupError::Step {
            action: a.clone(),
            error: Box::new(error),
        })?;
    }
    fs.sync().map_err(SetupError::Sync)?;
    d.oracle.flush(Scope::All);
    fs.unmount().map_err(SetupError::Unmount)?;
    let image = dev.snapshot();
    // The setup must be on the image as the oracle says.
    let dev2 = Arc::new(MemDevice::from_image(BS, image.clone())?);
    let mut check = DiskFs::mount(dev2, mode, NOW).map_err(SetupError::Mount)?;
    let on_disk = read_tree(&mut check).map_err(SetupError::Read)?.state;
    let journal = if journal {
        let mut at = Vec::new();
        for l in 0..JOURNAL_BYTES / BS as u64 {
            match check.physical_block(InodeNo(8), l) {
                Ok(Some(b)) => at.push(b.0 as usize),
                found => {
                    return Err(SetupError::JournalBlock {
                        logical: l,
                        error: found.err(),
                    })
                }
            }
        }
        Some((at[0], at[1..].into()))
    } else {
        None
    };
    if on_disk != *d.oracle.disk() {
        return Err(SetupError::Differs {
            found: on_disk.show(None),
            expected: d.oracle.disk().show(None),
        });
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
    setup_model_counting(setup).0
}

/// [`setup_model`], and the writes the setup counted (the next write's
/// pattern follows them).
pub fn setup_model_counting(setup: &[Action]) -> (Model, u64) {
    let mut m = Model::new(0o755, Owner { uid: 0, gid: 0 }, Limits::default());
    m.set_now(model_now());
    let mut writes = 0;
    for a in setup {
        model_apply(&mut m, a, &mut writes).expect("setup valid on the model");
    }
    (m, writes)
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

/// The directory of `path` in memfs, and its last name.
fn parent_of(fs: &MemFs, path: &str) -> Result<(InodeNo, Vec<u8>), MemError> {
    let (d, n) = split(path);
    Ok((resolve(fs, d)?, n.as_bytes().to_vec()))
}

/// The inode `path` names in memfs (`/` or empty: the root).
fn resolve(fs: &MemFs, path: &str) -> Result<InodeNo, MemError> {
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
    handles: Vec<Option<InodeNo>>,
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
    /// The stream of the step in progress (its operation and persistence
    /// point run in it).
    stream: Option<u8>,
    /// The simulated process of the step in progress, and each live
    /// process's patchgroups (process 0 always lives).
    proc: u8,
    procs: BTreeMap<u8, stitch_memfs::Held>,
    /// The group each slot of the workload names.
    slots: BTreeMap<u8, u64>,
    /// The step in progress is the external-synchrony group's, and the
    /// group's point: memfs's stamp after its latest change (what a
    /// commit makes durable).
    member: bool,
    xsync_last: u64,
}

/// The user the simulated processes run as.
const PG_UID: u32 = 0;

/// How a write names its file: by path at an offset, by path at its end,
/// or by an open handle.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Name,
    Append,
    Handle,
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
            FlushCause::Settle(_) => "a flush settling a file's state",
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
            stream: None,
            member: false,
            xsync_last: 0,
            proc: 0,
            procs: BTreeMap::from([(0, fs.new_held())]),
            slots: BTreeMap::new(),
        }
    }

    /// The patchgroup calls of a step, made by process `proc`; each must
    /// succeed (the workload's generator follows the rules).
    fn pg_calls(&mut self, proc: u8, calls: &[PgCall]) -> Result<(), StepError> {
        for &c in calls {
            let fail = |what: String| StepError::Patchgroup {
                call: c.to_string(),
                proc,
                what,
            };
            let id = |slot: u8| {
                self.slots
                    .get(&slot)
                    .copied()
                    .ok_or_else(|| fail(format!("no group in slot {slot}")))
            };
            let held = self
                .procs
                .get_mut(&proc)
                .ok_or_else(|| fail("no such process".into()))?;
            let r = match c {
                PgCall::Create(slot) => held.create(PG_UID).map(|g| {
                    self.slots.insert(slot, g);
                }),
                PgCall::Depend(q, p) => {
                    let (q, p) = (id(q)?, id(p)?);
                    let held = &self.procs[&proc];
                    self.fs.pg_depend(held, q, p, PG_UID)
                }
                PgCall::Engage(g) => {
                    let g = id(g)?;
                    self.procs.get_mut(&proc).expect("live").engage(g, PG_UID)
                }
                PgCall::Disengage(g) => {
                    let g = id(g)?;
                    self.procs
                        .get_mut(&proc)
                        .expect("live")
                        .disengage(g, PG_UID)
                }
                PgCall::Close(g) => {
                    let g = id(g)?;
                    self.procs.get_mut(&proc).expect("live").close(g, PG_UID)
                }
                PgCall::Fork(child) => {
                    let copy = held.clone();
                    self.procs.insert(child, copy);
                    Ok(())
                }
                PgCall::Exit(p) => {
                    self.procs.remove(&p);
                    Ok(())
                }
            };
            r.map_err(|e| fail(e.to_string()))?;
        }
        Ok(())
    }

    /// The domains the step in progress runs in: its stream, the groups
    /// its process has engaged.
    fn domains(&self) -> stitch_memfs::Domains {
        stitch_memfs::Domains {
            stream: self.stream.map(u64::from),
            groups: self
                .procs
                .get(&self.proc)
                .map(|h| h.engaged())
                .unwrap_or_default(),
            ..Default::default()
        }
    }

    /// Closes every handle still open, as a program's are when it exits.
    fn close_all(&mut self) -> Result<(), StepError> {
        for slot in 0..self.handles.len() {
            if self.handles[slot].is_some() {
                let close = Action::Close(slot as u32);
                if !self.act(&close)? {
                    return Err(StepError::Refused(close));
                }
            }
        }
        Ok(())
    }

    /// One operation on all three; `Err` if memfs and the model disagree.
    /// Returns whether it succeeded.
    fn act(&mut self, a: &Action) -> Result<bool, StepError> {
        if let Action::Fill(path) = a {
            return self.act_fill(a, path);
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
                Answer::NoHandle
            }
            _ => {
                let r = self.memfs(a);
                self.caught_up(); // a flush before a change that then failed
                self.settled(); // one after the change
                r.map_or_else(Answer::Failed, |()| Answer::Done)
            }
        };
        agree(a.to_string(), expected, got)
    }

    /// A fill: memfs first, then the model appends what it took.
    fn act_fill(&mut self, a: &Action, path: &str) -> Result<bool, StepError> {
        let got = self.fill(path);
        let len = *got.as_ref().unwrap_or(&0);
        let append = Action::Append {
            path: path.to_string(),
            len,
        };
        let expected = model_apply(&mut self.model, &append, &mut self.model_writes);
        let got = got.map_or_else(Answer::Failed, Answer::Took);
        agree(format!("{a} (on the model: {append})"), expected, got)
    }

    /// The operation on memfs, logged in the oracle if it succeeded.
    fn memfs(&mut self, a: &Action) -> Result<(), MemError> {
        self.mark();
        match a {
            Action::Creat(path)
            | Action::Mkdir(path)
            | Action::Symlink { path, .. }
            | Action::Mknod { path, .. } => self.create(a, path),
            // Each write takes the next pattern, as the model counts them,
            // whether or not it gets as far as memfs.
            Action::Write { path, offset, len } => {
                self.writes += 1;
                let ino = resolve(self.fs, path)?;
                self.write(ino, *offset, *len, Via::Name)
            }
            Action::Append { path, len } => {
                self.writes += 1;
                let ino = resolve(self.fs, path)?;
                let size = self.fs.getattr(ino)?.size;
                self.write(ino, size, *len, Via::Append)
            }
            Action::WriteFd { fd, offset, len } => {
                self.writes += 1;
                let ino = self.handles[*fd as usize].expect("act checked the slot");
                self.write(ino, *offset, *len, Via::Handle)
            }
            Action::Fill(path) => self.fill(path).map(drop),
            Action::Truncate { path, .. }
            | Action::Chmod { path, .. }
            | Action::Setxattr { path, .. } => self.set(a, path),
            Action::Link { from, to } => {
                let ino = resolve(self.fs, from)?;
                let (parent, name) = parent_of(self.fs, to)?;
                self.fs.link(ino, parent, &name)?;
                self.caught_up().log(LOp::Link { ino, parent, name });
                Ok(())
            }
            Action::Unlink(path) | Action::Rmdir(path) => self.remove(a, path),
            Action::Open(path) => self.open(path),
            Action::Close(fd) => {
                let slot = self.handles.get_mut(*fd as usize);
                let ino = slot.and_then(Option::take).expect("act checked the slot");
                self.fs.release(ino)
            }
            Action::Rename { from, to } => self.rename(from, to),
        }
    }

    /// A new file, directory, symlink or special file at `path`.
    fn create(&mut self, a: &Action, path: &str) -> Result<(), MemError> {
        let fs = self.fs;
        let (parent, name) = parent_of(fs, path)?;
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
            _ => unreachable!("memfs sends only creations here"),
        };
        self.caught_up().log(LOp::Create {
            parent,
            name,
            ino: attr.ino,
            init,
        });
        Ok(())
    }

    /// The current write's pattern, `len` bytes at `offset` of `ino` (its
    /// size, when appending). Bytes written through a handle to an orphan
    /// are on no name: the oracle expects nothing of them.
    fn write(&mut self, ino: InodeNo, offset: u64, len: u64, via: Via) -> Result<(), MemError> {
        let bytes = data(self.writes, offset, len);
        let append = via == Via::Append;
        self.fs
            .write(ino, if append { 0 } else { offset }, &bytes, append)?;
        if via != Via::Handle || self.oracle.mem().inodes.contains_key(&ino) {
            self.caught_up()
                .change(ino, |i| put(&mut i.bytes, offset, &bytes));
        }
        Ok(())
    }

    /// A change of attributes: size, permissions, an extended attribute.
    fn set(&mut self, a: &Action, path: &str) -> Result<(), MemError> {
        let ino = resolve(self.fs, path)?;
        match a {
            Action::Truncate { size, .. } => {
                let size = *size;
                let attrs = SetAttrs {
                    size: Some(size),
                    ..Default::default()
                };
                self.setattr(ino, attrs, |i| i.bytes.resize(size as usize, 0))
            }
            Action::Chmod { perm, .. } => {
                let perm = *perm;
                let attrs = SetAttrs {
                    perm: Some(perm),
                    ..Default::default()
                };
                self.setattr(ino, attrs, |i| i.perm = perm & 0o7777)
            }
            Action::Setxattr { name, value, .. } => {
                let (name, value) = (name.as_bytes(), value.as_bytes());
                self.fs
                    .set_xattr(ino, name, Some(value), XattrSet::Either)?;
                self.caught_up().change(ino, |i| {
                    i.xattrs.insert(name.to_vec(), value.to_vec());
                });
                Ok(())
            }
            _ => unreachable!("memfs sends only attribute changes here"),
        }
    }

    /// `attrs` set on memfs, and `change` on the oracle's inode.
    fn setattr(
        &mut self,
        ino: InodeNo,
        attrs: SetAttrs,
        change: impl FnOnce(&mut Inode),
    ) -> Result<(), MemError> {
        self.fs.setattr(ino, attrs)?;
        self.caught_up().change(ino, change);
        Ok(())
    }

    /// An unlink or rmdir of `path`.
    fn remove(&mut self, a: &Action, path: &str) -> Result<(), MemError> {
        let (parent, name) = parent_of(self.fs, path)?;
        let ino = self
            .oracle
            .mem()
            .inodes
            .get(&parent)
            .and_then(|d| d.entries.get(&name).copied());
        if matches!(a, Action::Rmdir(_)) {
            self.fs.rmdir(parent, &name)?;
        } else {
            self.fs.unlink(parent, &name)?;
        }
        let ino = ino.expect("memfs removed a name the oracle lacks");
        self.caught_up().log(LOp::Unlink { parent, name, ino });
        Ok(())
    }

    /// A handle on the file at `path`, in the lowest free slot. Handles
    /// change nothing the disk shows: an orphan is freed at mount after a
    /// crash and at its last close otherwise, so the oracle drops an inode
    /// with its last name either way.
    fn open(&mut self, path: &str) -> Result<(), MemError> {
        let ino = resolve(self.fs, path)?;
        match self.fs.getattr(ino)?.kind {
            Kind::File => {}
            Kind::Dir => return Err(MemError::Refused(Refusal::IsDir)),
            // O_NOFOLLOW and special files: not generated.
            _ => {
                return Err(MemError::Refused(Refusal::Invalid(
                    "open of a symlink or special file",
                )))
            }
        }
        self.fs.open(ino)?;
        let slot = stitch_model::op::free_slot(&self.handles)
            .map_err(|_| MemError::Refused(Refusal::Invalid("too many handles")))?;
        if slot == self.handles.len() {
            self.handles.push(None);
        }
        self.handles[slot] = Some(ino);
        Ok(())
    }

    /// A rename, with what McoreFS §4.3 records of it: a directory
    /// changing parent records the ancestors of where it goes (and, if it
    /// replaces a directory, of where that one was).
    fn rename(&mut self, from: &str, to: &str) -> Result<(), MemError> {
        let (fd, fname) = parent_of(self.fs, from)?;
        let (td, tname) = parent_of(self.fs, to)?;
        let mem = self.oracle.mem();
        let entry =
            |d: InodeNo, n: &[u8]| mem.inodes.get(&d).and_then(|i| i.entries.get(n).copied());
        let moved = entry(fd, &fname);
        let other = entry(td, &tname);
        let is_dir = |i: Option<InodeNo>| {
            i.and_then(|i| mem.inodes.get(&i))
                .is_some_and(|i| i.kind == FileKind::Dir)
        };
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
        self.fs
            .rename(fd, &fname, td, &tname, RenameFlags::default())?;
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
                FlushCause::Settle(ino) => Scope::Inode(ino),
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
    fn persist(&mut self, p: &Persist) -> Result<Option<Flush>, StepError> {
        let failed = |point: String| move |error| StepError::Persist { point, error };
        let scope = match p {
            Persist::None => return Ok(None),
            // A member's fsync or sync returns at once (its output waits
            // instead): nothing is flushed, nothing promised.
            Persist::Fsync(_) | Persist::FsyncFd(_) | Persist::Sync if self.member => {
                return Ok(None)
            }
            Persist::Output => {
                if !self.member {
                    return Err(StepError::Persist {
                        point: "output".into(),
                        error: stitch_memfs::MemError::Refused(stitch_memfs::Refusal::Invalid(
                            "output outside the external-synchrony group",
                        )),
                    });
                }
                self.fs
                    .sync_through(self.xsync_last)
                    .map_err(failed("output".into()))?;
                // The oracle states no group rules; `streams` judges.
                Scope::All
            }
            Persist::PgSync(slot) => {
                let point = format!("pg_sync(g{slot})");
                let (Some(held), Some(&g)) = (self.procs.get(&self.proc), self.slots.get(slot))
                else {
                    return Err(StepError::Patchgroup {
                        call: point,
                        proc: self.proc,
                        what: "no such process or group".into(),
                    });
                };
                self.fs.pg_sync(held, g, PG_UID).map_err(|e| match e {
                    stitch_memfs::PgSyncError::Flush(error) => StepError::Persist { point, error },
                    stitch_memfs::PgSyncError::Group(g) => StepError::Patchgroup {
                        call: point,
                        proc: self.proc,
                        what: g.to_string(),
                    },
                })?;
                // The oracle states no group rules; `streams` judges.
                Scope::All
            }
            Persist::StreamSync => {
                let n = self.stream.ok_or_else(|| StepError::Persist {
                    point: "streamsync".into(),
                    error: stitch_memfs::MemError::Refused(stitch_memfs::Refusal::Invalid(
                        "a stream sync outside any stream",
                    )),
                })?;
                self.fs
                    .sync_stream(u64::from(n))
                    .map_err(failed("streamsync".into()))?;
                // The oracle states no stream rules; `streams` judges.
                Scope::All
            }
            Persist::Sync => {
                self.fs.sync().map_err(failed("sync".into()))?;
                Scope::All
            }
            Persist::FsyncFd(fd) => {
                let ino = self.handles.get(*fd as usize).copied().flatten();
                let ino = ino.ok_or(StepError::NoHandle(*fd))?;
                self.fs
                    .fsync(ino, false)
                    .map_err(failed(format!("fsync(fd{fd})")))?;
                fsync_scope(self.order, ino)
            }
            Persist::Fsync(path) => {
                let ino = resolve(self.fs, path).map_err(failed(format!("fsync({path})")))?;
                self.fs
                    .fsync(ino, false)
                    .map_err(failed(format!("fsync({path})")))?;
                fsync_scope(self.order, ino)
            }
        };
        Ok(Some(self.oracle.flush(scope)))
    }

    /// memfs's view, the oracle's memory and the model must be one tree.
    fn compare_with_model(&self) -> Result<(), StepError> {
        let want = self.model.snapshot();
        let mine = self.oracle.mem().to_tree(None);
        let diff = want.diff(&mine);
        if !diff.is_empty() {
            let what = "the oracle's memory";
            return Err(StepError::Differs { what, diff });
        }
        let (seen, links) = memfs_tree(self.fs).map_err(StepError::ReadBack)?;
        let diff = want.diff(&seen.to_tree(Some(&links)));
        if !diff.is_empty() {
            let what = "the tree memfs shows";
            return Err(StepError::Differs { what, diff });
        }
        Ok(())
    }
}

/// Whether memfs answered as the model did: `Ok(true)` both succeeded,
/// `Ok(false)` both refused with one errno.
fn agree(action: String, model: Result<Outcome, Errno>, memfs: Answer) -> Result<bool, StepError> {
    match (&model, memfs.errno()) {
        (Ok(_), None) => Ok(true),
        (Err(e), Some(g)) if e.raw() == g => Ok(false),
        _ => Err(StepError::Disagree {
            action,
            model: model.map(drop),
            memfs,
        }),
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
fn memfs_tree(fs: &MemFs) -> Result<(State, BTreeMap<InodeNo, u32>), MemError> {
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
    /// Where each step's operation ended in the log, and where its
    /// persistence point returned (if it has one), in step order.
    pub marks: Vec<StepMarks>,
}

/// Log positions of one step.
#[derive(Clone, Copy, Debug)]
pub struct StepMarks {
    pub acted: usize,
    pub persisted: Option<usize>,
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
pub fn record(mode: Consistency, w: &Workload, memfs: Memfs) -> Result<Recording, SetupError> {
    let base = base(journaled(mode), &w.setup)?;
    let image = base.image.to_vec();
    let mem = MemDevice::from_image(BS, image.clone())?;
    let rec = Arc::new(RecordingDevice::with_base(mem, image)?);
    let disk = DiskFs::mount(rec.clone(), mode, NOW).map_err(SetupError::Mount)?;
    let mount = still("mount", 0, rec.log_len(), &base.state);
    let fs = MemFs::mount(disk, opts(memfs)).map_err(SetupError::Memfs)?;
    let d = Driver::new(
        &fs,
        memfs.order,
        base.state.clone(),
        base.writes,
        Some(rec.clone()),
    );
    let mut r = Recorder {
        d,
        rec,
        flushes: vec![mount],
        problems: Vec::new(),
        marks: Vec::new(),
    };
    let mut setup_writes = 0;
    for a in &w.setup {
        // The model replays the setup (the image already holds it).
        model_apply(&mut r.d.model, a, &mut setup_writes).map_err(|errno| SetupError::Model {
            action: a.clone(),
            errno,
        })?;
    }
    r.steps(w);
    if r.problems.is_empty() {
        r.read_back();
    }
    r.exit();
    let start = r.len();
    if let Err(e) = fs.unmount() {
        let e = StepError::Unmount(e);
        r.problems.push((e.kind(), e.to_string()));
    }
    let unmount = still("unmount", start, r.len(), r.d.oracle.disk());
    r.flushes.push(unmount);
    let log = r.rec.log();
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
        flushes: r.flushes,
        problems: r.problems,
        own_flushes: r.d.own_flushes,
        marks: r.marks,
    })
}

/// A persistence point that writes nothing the tree shows (mount,
/// unmount): the state `s` before and after.
fn still(label: &str, start: usize, end: usize, s: &State) -> FlushRec {
    FlushRec {
        label: label.to_string(),
        start,
        end,
        commits: 0,
        flush: Flush {
            states: vec![s.clone(), s.clone()],
            min_sizes: BTreeMap::new(),
            ops: Vec::new(),
        },
    }
}

/// A workload being recorded: the driver, and the persistence points and
/// problems found so far.
struct Recorder<'a> {
    d: Driver<'a>,
    rec: Arc<RecordingDevice<MemDevice>>,
    flushes: Vec<FlushRec>,
    problems: Vec<(crate::report::Kind, String)>,
    marks: Vec<StepMarks>,
}

impl Recorder<'_> {
    /// The device log's length.
    fn len(&self) -> usize {
        self.rec.log_len()
    }

    /// The flushes memfs made on its own inside `what` (to find room,
    /// under memory pressure), in order and back to back with nothing
    /// written between them.
    fn inside(&mut self, what: &str, before: &mut usize) {
        let (d, flushes, problems) = (&mut self.d, &mut self.flushes, &mut self.problems);
        inside_flushes(d, what, before, flushes, problems);
    }

    /// Says so if something was written since `before` outside a flush.
    fn nothing_written_since(&mut self, before: usize, what: &str) {
        if self.len() != before {
            let message = format!("{what} wrote to the device outside a persistence point");
            self.problems.push((crate::report::Kind::Harness, message));
        }
    }

    /// Each step's operation, the flushes inside it and its persistence
    /// point; the first step that fails ends the workload.
    fn steps(&mut self, w: &Workload) {
        for (i, step) in w.steps.iter().enumerate() {
            let mut before = self.len();
            self.d.stream = step.stream;
            self.d.proc = step.proc;
            if let Err(e) = self.d.pg_calls(step.proc, &step.pg) {
                self.problems
                    .push((e.kind(), format!("step {}: {e}", i + 1)));
                break;
            }
            let domains = self.d.domains();
            let acted = stitch_memfs::in_domains(domains.clone(), || self.d.act(&step.action));
            self.d.member = step.xsync;
            if step.xsync {
                self.d.xsync_last = self.d.fs.stamp_now();
            }
            let what = format!("step {}: {}", i + 1, step.action);
            self.inside(&what, &mut before);
            let acted_at = self.len();
            let done = acted.and_then(|_| {
                self.nothing_written_since(before, &what);
                let label = format!("step {}: {step}", i + 1);
                stitch_memfs::in_domains(domains, || self.persist(label, &step.persist))
            });
            self.marks.push(StepMarks {
                acted: acted_at,
                persisted: (done.is_ok() && step.persist != Persist::None).then(|| self.len()),
            });
            self.d.stream = None;
            self.d.member = false;
            if let Err(e) = done {
                self.problems
                    .push((e.kind(), format!("step {}: {e}", i + 1)));
                break;
            }
        }
    }

    /// A persistence point on memfs and in the oracle, recorded as
    /// `label` with the span of the log it wrote.
    fn persist(&mut self, label: String, p: &Persist) -> Result<(), StepError> {
        let start = self.len();
        let commits = self.d.commits();
        if let Some(flush) = self.d.persist(p)? {
            self.flushes.push(FlushRec {
                label,
                start,
                end: self.len(),
                flush,
                commits: self.d.commits() - commits,
            });
        }
        Ok(())
    }

    /// Reads the whole tree back and holds it to the model and the
    /// oracle. Reading every file may take memory past its bound, and
    /// memfs flushes then too.
    fn read_back(&mut self) {
        let mut before = self.len();
        self.d.mark();
        let compared = self.d.compare_with_model();
        self.d.settled();
        let what = "reading the tree back";
        self.inside(what, &mut before);
        match compared {
            Err(e) => self.problems.push((e.kind(), e.to_string())),
            Ok(()) => self.nothing_written_since(before, what),
        }
    }

    /// The program exits: its handles close, and a final sync.
    fn exit(&mut self) {
        let what = "closing handles at exit";
        let mut before = self.len();
        if let Err(e) = self.d.close_all() {
            self.problems.push((e.kind(), format!("{what}: {e}")));
        }
        self.inside(what, &mut before);
        self.nothing_written_since(before, what);
        if let Err(e) = self.persist("final sync".into(), &Persist::Sync) {
            self.problems.push((e.kind(), format!("final {e}")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Kind;

    #[test]
    fn a_fill_in_a_setup_is_a_setup_error() {
        let e = make_base(false, &[Action::Fill("f".into())]).err();
        assert!(matches!(e, Some(SetupError::FillInSetup)), "{e:?}");
    }

    /// memfs answering other than the model is a semantics finding; the
    /// same refusal on both sides is agreement.
    #[test]
    fn answers_agree_by_errno() {
        let done = || Ok(Outcome::Done);
        assert!(matches!(agree("a".into(), done(), Answer::Done), Ok(true)));
        let refused = agree(
            "a".into(),
            Err(Errno::Enoent),
            Answer::Failed(MemError::Refused(Refusal::NotFound)),
        );
        assert!(matches!(refused, Ok(false)));
        let no_handle = agree("a".into(), Err(Errno::Ebadf), Answer::NoHandle);
        assert!(matches!(no_handle, Ok(false)));
        let e = agree("a".into(), done(), Answer::Failed(MemError::NoSpace)).unwrap_err();
        assert!(matches!(e, StepError::Disagree { .. }), "{e:?}");
        assert_eq!(e.kind(), Kind::Semantics);
    }

    /// A persistence point that cannot run is the harness's problem, named
    /// with its step, and ends the workload.
    #[test]
    fn a_failing_persistence_point_is_a_harness_problem() {
        let w = crate::workload::parse("gen:creat:a+fsyncfd:3,creat:b+sync").unwrap();
        let r = record(Consistency::SoftUpdates, &w, Memfs::default()).unwrap();
        let said: Vec<(Kind, &str)> = r.problems.iter().map(|(k, m)| (*k, m.as_str())).collect();
        assert_eq!(said, [(Kind::Harness, "step 1: fsync(fd3): no handle")]);
    }
}
