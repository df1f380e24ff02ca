//! Model-based tests of memfs: seeded random operation sequences
//! (`stitch_model::gen`, open files too) applied to memfs over diskfs and
//! to the reference model. After every operation both must agree on
//! success or errno and on what reads, readdir and stat return.
//!
//! Between operations, at random: `fsync` of a random file or directory
//! (or of an open handle, unlinked or not), `sync`, and unmount and
//! remount. After some fsyncs the device is copied as a crash would leave
//! it and mounted: the fsynced file's attributes, times and data, or the
//! fsynced directory's names, must be there as the model has them. After a
//! sync the whole tree (modification times too) must equal the model's,
//! and after some syncs the crash image's tree too. Crash images must be
//! consistent but for leaks, and clean once recovered (journal modes).
//! After every unmount the image must be clean (e2fsck -fn and our fsck),
//! and after the remount, with nothing in memory, the tree must equal the
//! model's again.
//!
//! Every mode runs its own test; odd seeds run with a small memory bound,
//! so pressure flushes and eviction happen. `STITCH_MEMFS_SEEDS=N` runs N
//! seeds per mode (4 by default) from `STITCH_MEMFS_FIRST_SEED` (0),
//! `STITCH_MEMFS_OPS=N` N operations each. A failure names the command
//! that shrinks it to a short sequence (`minimize`); sequences found so
//! are pinned in `known_sequences_pass`.

mod common;
use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stitch_blockdev::MemDevice;
use stitch_diskfs::{Consistency, DataMode, DiskFs};
use stitch_memfs::{
    InodeNo, Kind as MemKind, MemError, MemFs, Options, RenameFlags, SetAttrs, SetTime,
};
use stitch_model::gen::{ops, GenConfig};
use stitch_model::op::{free_slot, Op, Outcome};
use stitch_model::tree::key_to_path;
use stitch_model::types::{Kind, Name, Owner, Special};
use stitch_model::view::{self, InodeView};
use stitch_model::{Errno, Limits, Model};

fn done<T>(r: Result<T, MemError>) -> Result<Outcome, Errno> {
    r.map(|_| Outcome::Done).map_err(errno)
}

/// A write through memfs must take every byte (the disk is far from full).
fn write_all(fs: &MemFs, ino: InodeNo, offset: u64, data: &[u8]) -> Result<Outcome, Errno> {
    let n = fs.write(ino, offset, data, false).map_err(errno)?;
    assert_eq!(n as usize, data.len(), "short write");
    Ok(Outcome::Done)
}

/// Applies one op to memfs; `fds` are the runner's open slots (inodes).
fn apply(fs: &MemFs, fds: &mut Vec<Option<InodeNo>>, op: &Op) -> Result<Outcome, Errno> {
    let v = &mut View(fs);
    match op {
        Op::Create { path, perm } => {
            let (dir, name) = view::resolve_parent(v, path)?;
            done(fs.mknod(dir, name, MemKind::File, *perm as u16, (0, 0), 0, 0))
        }
        Op::Mkdir { path, perm } => {
            let (dir, name) = view::resolve_parent(v, path)?;
            done(fs.mkdir(dir, name, *perm as u16, 0, 0))
        }
        Op::Mknod { path, kind, perm } => {
            let (dir, name) = view::resolve_parent(v, path)?;
            let (kind, rdev) = match kind {
                Special::Fifo => (MemKind::Fifo, (0, 0)),
                Special::Socket => (MemKind::Socket, (0, 0)),
                Special::Char(r) => (MemKind::CharDev, (r.major, r.minor)),
                Special::Block(r) => (MemKind::BlockDev, (r.major, r.minor)),
            };
            done(fs.mknod(dir, name, kind, *perm as u16, rdev, 0, 0))
        }
        Op::Symlink { path, target } => {
            // symlinkat checks the target before it walks the path; where
            // the path resolves, memfs's own check answers.
            let (dir, name) = view::resolve_parent(v, path).map_err(|e| {
                if target.is_empty() {
                    Errno::Enoent
                } else if target.len() > 4095 {
                    Errno::Enametoolong
                } else {
                    e
                }
            })?;
            done(fs.symlink(dir, name, target, 0, 0))
        }
        Op::Link { from, to } => {
            let ino = view::resolve(v, from)?;
            let (dir, name) = view::resolve_parent(v, to)?;
            done(fs.link(ino, dir, name))
        }
        Op::Unlink { path } => {
            let (dir, name) = view::resolve_parent(v, path)?;
            done(fs.unlink(dir, name))
        }
        Op::Rmdir { path } => {
            let (dir, name) = view::resolve_parent(v, path)?;
            done(fs.rmdir(dir, name))
        }
        Op::Rename { from, to, flags } => {
            if flags.noreplace && flags.exchange {
                return Err(Errno::Einval);
            }
            let (sp, sn) = view::resolve_parent(v, from)?;
            let (dp, dn) = view::resolve_parent(v, to)?;
            let f = RenameFlags {
                noreplace: flags.noreplace,
                exchange: flags.exchange,
            };
            done(fs.rename(sp, sn, dp, dn, f))
        }
        Op::Write { path, offset, data } => {
            let ino = view::resolve_data(v, path)?;
            write_all(fs, ino, *offset, data)
        }
        Op::Truncate { path, size } => {
            let ino = view::resolve_data(v, path)?;
            let set = SetAttrs {
                size: Some(*size),
                ..SetAttrs::default()
            };
            done(fs.setattr(ino, set))
        }
        Op::Chmod { path, perm } => {
            let ino = view::resolve_follow(v, path)?;
            let set = SetAttrs {
                perm: Some(*perm as u16),
                ..SetAttrs::default()
            };
            done(fs.setattr(ino, set))
        }
        Op::Chown { path, uid, gid } => {
            let ino = view::resolve(v, path)?;
            let a = fs.getattr(ino).map_err(errno)?;
            let perm = view::perm_after_chown(u32::from(a.perm), a.kind == MemKind::Dir);
            let set = SetAttrs {
                perm: Some(perm as u16),
                uid: Some(*uid),
                gid: Some(*gid),
                ..SetAttrs::default()
            };
            done(fs.setattr(ino, set))
        }
        Op::SetTimes { path, atime, mtime } => {
            let ino = view::resolve(v, path)?;
            let set = SetAttrs {
                atime: Some(SetTime::At(mem_time(*atime))),
                mtime: Some(SetTime::At(mem_time(*mtime))),
                ..SetAttrs::default()
            };
            done(fs.setattr(ino, set))
        }
        Op::Read { path, offset, len } => {
            let ino = view::resolve_data(v, path)?;
            let len = u32::try_from(*len).expect("generated reads are short");
            fs.read(ino, *offset, len).map(Outcome::Data).map_err(errno)
        }
        Op::Readdir { path } => view::readdir(v, path),
        Op::Stat { path } => view::stat(v, path),
        Op::Open { path } => {
            let ino = view::resolve_data(v, path)?;
            let slot = free_slot(fds)?;
            fs.open(ino).map_err(errno)?;
            if slot == fds.len() {
                fds.push(None);
            }
            fds[slot] = Some(ino);
            Ok(Outcome::Opened(stitch_model::Fd(slot as u32)))
        }
        Op::WriteFd { fd, offset, data } => {
            let ino = fds
                .get(fd.0 as usize)
                .copied()
                .flatten()
                .ok_or(Errno::Ebadf)?;
            write_all(fs, ino, *offset, data)
        }
        Op::Close { fd } => {
            let slot = fds.get_mut(fd.0 as usize).ok_or(Errno::Ebadf)?;
            let ino = slot.take().ok_or(Errno::Ebadf)?;
            done(fs.release(ino))
        }
    }
}

/// Trees are compared with modification times (memfs stamps the same
/// fixed time as the model).
const MTIME: stitch_model::TreeOptions = stitch_model::TreeOptions { mtime: true };

/// One step of a run: an op for both sides, or something only memfs
/// does between ops. Fsync targets are picked when the step runs (the
/// `pick`-th candidate, modulo their number), so a sequence with steps
/// removed still runs: failures can be minimized.
#[derive(Clone, Debug)]
enum Step {
    Op(Op),
    /// fsync (or fdatasync) of an open handle's inode, unlinked or not.
    FsyncFd {
        pick: usize,
        datasync: bool,
    },
    /// fsync of a file or directory the model names; with `crash`, then a
    /// look at what a crash right after would leave.
    Fsync {
        pick: usize,
        crash: bool,
    },
    /// sync; with `crash`, then a look at what a crash right after would
    /// leave.
    Sync {
        crash: bool,
    },
    /// Close every handle, unmount, check the image, mount again.
    Remount,
}

/// The steps of one seed: `n` generated ops with memfs's own steps
/// between them, from a generator of their own.
fn steps(seed: u64, n: usize) -> Vec<Step> {
    let cfg = GenConfig {
        max_offset: 1 << 20,
        max_write: 40 << 10,
        ..GenConfig::default()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x006d_656d_6673);
    let mut out = Vec::new();
    for op in ops(seed, n, &cfg) {
        out.push(Step::Op(op));
        match rng.gen_range(0..100) {
            0..=1 => out.push(Step::FsyncFd {
                pick: rng.gen(),
                datasync: rng.gen(),
            }),
            2..=7 => out.push(Step::Fsync {
                pick: rng.gen(),
                crash: rng.gen(),
            }),
            8..=10 => out.push(Step::Sync {
                crash: rng.gen_ratio(1, 3),
            }),
            11 => out.push(Step::Remount),
            _ => {}
        }
    }
    out
}

/// How a run went wrong: `what` without the step's label, so a smaller
/// sequence failing the same way can be recognized.
#[derive(Debug)]
struct Failure {
    what: String,
    trace: Vec<String>,
}

impl Failure {
    /// The kind of failure: the first line without numbers.
    fn kind(&self) -> String {
        let line = self.what.lines().next().unwrap_or("");
        line.chars().filter(|c| !c.is_ascii_digit()).collect()
    }
}

type Checked = Result<(), Failure>;

/// One run: memfs on a device, the model, the handles memfs holds, and
/// every step taken so far (named in a failure).
struct Run {
    mode: Consistency,
    opts: Options,
    dev: Arc<MemDevice>,
    fs: MemFs,
    model: Model,
    fds: Vec<Option<InodeNo>>,
    /// Shared with the caller, which reports it if the run gets stuck.
    trace: Arc<Mutex<Vec<String>>>,
}

impl Run {
    /// `small_memory`: 64 pages, so writes of tens of KiB soon flush and
    /// evict.
    fn new(
        mode: Consistency,
        image: Vec<u8>,
        small_memory: bool,
        trace: Arc<Mutex<Vec<String>>>,
    ) -> Run {
        let dev = device(image);
        let opts = Options {
            memory_limit: if small_memory { 64 << 12 } else { 1 << 30 },
            ..opts()
        };
        let fs = mount_on(dev.clone(), mode, opts.clone());
        let mut model = Model::new(0o755, Owner { uid: 0, gid: 0 }, Limits::default());
        model.set_now(model_time(NOW));
        Run {
            mode,
            opts,
            dev,
            fs,
            model,
            fds: Vec::new(),
            trace,
        }
    }

    fn note(&self, step: String) {
        self.trace.lock().unwrap().push(step);
    }

    fn fail(&self, what: String) -> Checked {
        Err(Failure {
            what,
            trace: self.trace.lock().unwrap().clone(),
        })
    }

    fn run(&mut self, i: usize, step: &Step) -> Checked {
        match step {
            Step::Op(op) => self.op(&i.to_string(), op),
            Step::FsyncFd { pick, datasync } => {
                let open: Vec<InodeNo> = self.fds.iter().flatten().copied().collect();
                if open.is_empty() {
                    return Ok(());
                }
                let ino = open[pick % open.len()];
                self.note(format!("fsync open inode {ino}"));
                match self.fs.fsync(ino, *datasync) {
                    Ok(()) => Ok(()),
                    Err(e) => self.fail(format!("fsync of an open inode: {e}")),
                }
            }
            Step::Fsync { pick, crash } => self.fsync(*pick, *crash),
            Step::Sync { crash } => {
                self.note(format!("sync{}", if *crash { ", crash check" } else { "" }));
                if let Err(e) = self.fs.sync() {
                    return self.fail(format!("sync: {e}"));
                }
                self.same_tree("after sync")?;
                if *crash {
                    return self.crash_tree();
                }
                Ok(())
            }
            Step::Remount => self.remount(),
        }
    }

    /// Applies `op` (step `label`) to both sides; they must agree.
    fn op(&mut self, label: &str, op: &Op) -> Checked {
        self.note(format!("{label}: {}", show(op)));
        let want = self.model.apply(op);
        let got = apply(&self.fs, &mut self.fds, op);
        if got != want {
            return self.fail(format!(
                "memfs {}, model {}: {}",
                short(&got),
                short(&want),
                show(op)
            ));
        }
        Ok(())
    }

    /// fsync of a file or directory the model names; with `crash`, a
    /// check of what it promised on a crash image.
    fn fsync(&mut self, pick: usize, crash: bool) -> Checked {
        let snap = self.model.snapshot();
        let paths: Vec<&Vec<u8>> = snap
            .nodes
            .iter()
            .filter(|(_, n)| matches!(n.meta.kind, Kind::File | Kind::Dir))
            .map(|(k, _)| k)
            .collect();
        let key = paths[pick % paths.len()].clone();
        let path = key_to_path(&key);
        let ino = match view::resolve(&mut View(&self.fs), &path) {
            Ok(ino) => ino,
            Err(e) => return self.fail(format!("resolve {path} for fsync: {e}")),
        };
        self.note(format!(
            "fsync {path} (inode {ino}){}",
            if crash { ", crash check" } else { "" }
        ));
        if let Err(e) = self.fs.fsync(ino, false) {
            return self.fail(format!("fsync: {e}"));
        }
        if crash {
            return self.crash_check(&key, ino);
        }
        Ok(())
    }

    /// The device as a crash now would leave it, mounted (journal replay,
    /// orphans freed): the fsynced inode must be there as the model has it
    /// (a file's attributes and bytes, a directory's names). The image must
    /// be consistent but for leaks (files open and unlinked are orphans,
    /// soft updates may leak more), and after the recovering mount and an
    /// unmount clean (soft updates: but for leaks).
    fn crash_check(&mut self, key: &[u8], ino: InodeNo) -> Checked {
        let want = self.model.snapshot_with(MTIME).nodes[key].clone();
        let want_names = match self.model.apply(&Op::Readdir {
            path: key_to_path(key),
        }) {
            Ok(Outcome::Names(n)) => n,
            _ => Vec::new(),
        };
        self.on_crash_image("the fsync", |crashed| {
            let mut problems = Vec::new();
            let a = match crashed.getattr(ino) {
                Ok(a) => a,
                Err(e) => return vec![format!("inode {ino}: {e}")],
            };
            let mut m = meta_of(crashed, &a);
            m.nlink = want.meta.nlink; // links need not be durable yet
            if m != want.meta {
                problems.push(format!("attributes {m:?}, model {:?}", want.meta));
            }
            if !key.is_empty() && Some(model_time(a.mtime)) != want.mtime {
                problems.push(format!("mtime {:?}, model {:?}", a.mtime, want.mtime));
            }
            if want.meta.kind == Kind::File {
                let data = crashed.read(ino, 0, a.size as u32).unwrap();
                if stitch_model::Content::Bytes(data) != want.content {
                    problems.push("bytes differ from the model's".into());
                }
            } else {
                let mut got: Vec<Name> = View(crashed)
                    .entries(ino)
                    .unwrap()
                    .into_iter()
                    .map(|(n, _)| n)
                    .collect();
                got.sort();
                if got != want_names {
                    problems.push(format!("names {got:?}, model {want_names:?}"));
                }
            }
            problems
        })
    }

    /// After a sync a crash loses nothing: the crash image's tree is the
    /// model's. In soft updates a link count may be too high (a rename's
    /// count comes down after its sync; fsck calls that a leak).
    fn crash_tree(&mut self) -> Checked {
        let want = self.model.snapshot_with(MTIME);
        let counts_may_lag = self.mode == Consistency::SoftUpdates;
        self.on_crash_image("the sync", |crashed| {
            let mut got = tree(crashed);
            if counts_may_lag {
                for (key, node) in &mut got.nodes {
                    if let Some(w) = want.nodes.get(key) {
                        if node.meta.nlink > w.meta.nlink {
                            node.meta.nlink = w.meta.nlink;
                        }
                    }
                }
            }
            let diff = same(got, want.clone());
            if diff.is_empty() {
                Vec::new()
            } else {
                vec![format!(
                    "crash image (left) and model differ:\n{}",
                    diff.join("\n")
                )]
            }
        })
    }

    /// The device as a crash now would leave it: consistent but for leaks
    /// (files open and unlinked are orphans, soft updates may leak more);
    /// mounted (journal replay, orphans freed), `look` finds no problem;
    /// unmounted again, clean (soft updates: but for leaks).
    fn on_crash_image(&self, after: &str, look: impl FnOnce(&MemFs) -> Vec<String>) -> Checked {
        let image = self.dev.snapshot();
        if let Err(report) = check_image(&image, true) {
            return self.fail(format!("crash image after {after}: {report}"));
        }
        let crashed_dev = device(image);
        let crashed = mount_on(crashed_dev.clone(), self.mode, opts());
        let mut problems = look(&crashed);
        if let Err(e) = crashed.unmount() {
            problems.push(format!("unmount of the crash image: {e}"));
        } else if let Err(report) = check_image(
            &crashed_dev.snapshot(),
            self.mode == Consistency::SoftUpdates,
        ) {
            problems.push(format!("recovered crash image: {report}"));
        }
        if !problems.is_empty() {
            return self.fail(format!(
                "a crash right after {after} shows: {}",
                problems.join("; ")
            ));
        }
        Ok(())
    }

    fn same_tree(&self, when: &str) -> Checked {
        let diff = same(tree(&self.fs), self.model.snapshot_with(MTIME));
        if !diff.is_empty() {
            return self.fail(format!(
                "{when}: memfs (left) and model differ:\n{}",
                diff.join("\n")
            ));
        }
        Ok(())
    }

    /// Unmounts (memfs flushes everything) and checks the image.
    fn unmount(&mut self) -> Result<(), Failure> {
        self.close_all()?;
        self.note("unmount".into());
        if let Err(e) = self.fs.unmount() {
            return Err(self.fail(format!("unmount: {e}")).unwrap_err());
        }
        if let Err(report) = check_image(&self.dev.snapshot(), false) {
            return Err(self
                .fail(format!("image after unmount: {report}"))
                .unwrap_err());
        }
        Ok(())
    }

    /// Unmounts and mounts again on the same device: with nothing in
    /// memory, memfs must show the model's tree.
    fn remount(&mut self) -> Checked {
        self.unmount()?;
        self.note("mount".into());
        let disk = match DiskFs::mount(self.dev.clone(), self.mode, NOW) {
            Ok(d) => d,
            Err(e) => return self.fail(format!("remount: {e}")),
        };
        self.fs = MemFs::mount(disk, self.opts.clone()).unwrap();
        self.same_tree("after remount")
    }

    fn close_all(&mut self) -> Checked {
        for slot in 0..self.fds.len() {
            if self.fds[slot].is_some() {
                let op = Op::Close {
                    fd: stitch_model::Fd(slot as u32),
                };
                self.op("before unmount", &op)?;
            }
        }
        Ok(())
    }
}

/// A random run not done after this is taken for a deadlock.
const STUCK: Duration = Duration::from_secs(120);

/// Runs `steps` on a fresh memfs, then compares the trees, remounts and
/// unmounts for good. A panic (in memfs, say) or a run stuck for
/// [`STUCK`] is a failure too.
fn execute(mode: Consistency, image: Vec<u8>, small_memory: bool, steps: &[Step]) -> Checked {
    execute_within(STUCK, mode, image, small_memory, steps)
}

fn execute_within(
    limit: Duration,
    mode: Consistency,
    image: Vec<u8>,
    small_memory: bool,
    steps: &[Step],
) -> Checked {
    let trace = Arc::new(Mutex::new(Vec::new()));
    let (t, steps) = (trace.clone(), steps.to_vec());
    let done = bounded(limit, move || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let mut r = Run::new(mode, image, small_memory, t);
            for (i, step) in steps.iter().enumerate() {
                r.run(i, step)?;
            }
            r.same_tree("at the end")?;
            r.remount()?;
            r.unmount().map(|_| ())
        }))
    });
    let what = match done {
        Some(Ok(checked)) => return checked,
        Some(Err(p)) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("panic: {msg}")
        }
        None => format!("stuck for {limit:?} (deadlock?)"),
    };
    let trace = trace.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Err(Failure { what, trace })
}

/// An op in a line: paths as paths, data as its length.
fn show(op: &Op) -> String {
    let flags = |f: &stitch_model::RenameFlags| match (f.noreplace, f.exchange) {
        (false, false) => "",
        (true, false) => " NOREPLACE",
        (false, true) => " EXCHANGE",
        (true, true) => " NOREPLACE|EXCHANGE",
    };
    match op {
        Op::Create { path, perm } => format!("create {path} {perm:o}"),
        Op::Mkdir { path, perm } => format!("mkdir {path} {perm:o}"),
        Op::Mknod { path, kind, perm } => format!("mknod {path} {kind:?} {perm:o}"),
        Op::Symlink { path, target } => {
            format!("symlink {path} -> {:?}", String::from_utf8_lossy(target))
        }
        Op::Link { from, to } => format!("link {from} {to}"),
        Op::Unlink { path } => format!("unlink {path}"),
        Op::Rmdir { path } => format!("rmdir {path}"),
        Op::Rename { from, to, flags: f } => format!("rename {from} {to}{}", flags(f)),
        Op::Write { path, offset, data } => {
            format!("write {path} @{offset} {} bytes", data.len())
        }
        Op::Truncate { path, size } => format!("truncate {path} {size}"),
        Op::Chmod { path, perm } => format!("chmod {path} {perm:o}"),
        Op::Chown { path, uid, gid } => format!("chown {path} {uid}:{gid}"),
        Op::SetTimes { path, atime, mtime } => format!("utimes {path} {atime:?} {mtime:?}"),
        Op::Read { path, offset, len } => format!("read {path} @{offset} {len}"),
        Op::Readdir { path } => format!("readdir {path}"),
        Op::Stat { path } => format!("stat {path}"),
        Op::Open { path } => format!("open {path}"),
        Op::WriteFd { fd, offset, data } => {
            format!("write fd{} @{offset} {} bytes", fd.0, data.len())
        }
        Op::Close { fd } => format!("close fd{}", fd.0),
    }
}

/// The differences of two trees, but for the root's times (mkfs's on
/// disk, the model's start at 0).
fn same(mut got: stitch_model::Tree, mut want: stitch_model::Tree) -> Vec<String> {
    for t in [&mut got, &mut want] {
        t.nodes.get_mut(&Vec::new()).expect("root").mtime = None;
    }
    got.diff(&want)
}

/// A result without megabytes of data in it.
fn short(r: &Result<Outcome, Errno>) -> String {
    match r {
        Ok(Outcome::Data(d)) if d.len() > 64 => format!("Ok(Data({} bytes))", d.len()),
        other => format!("{other:?}"),
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn run_seeds(mode: Consistency) {
    let first = env("STITCH_MEMFS_FIRST_SEED", 0);
    let seeds = env("STITCH_MEMFS_SEEDS", 4);
    let n = env("STITCH_MEMFS_OPS", 300) as usize;
    let image = image_for(mode);
    for seed in first..first + seeds {
        let small = seed % 2 == 1;
        if let Err(f) = execute(mode, image.clone(), small, &steps(seed, n)) {
            panic!(
                "{mode:?}, seed {seed}: {}\nsteps:\n{}\n(STITCH_MEMFS_MINIMIZE={}:{seed}:{n} \
                 cargo test -p stitch-memfs --test model minimize -- --ignored --nocapture \
                 finds a shorter sequence)",
                f.what,
                f.trace.join("\n"),
                mode_name(mode)
            );
        }
    }
}

fn mode_name(mode: Consistency) -> &'static str {
    match mode {
        Consistency::SoftUpdates => "su",
        Consistency::Journal(DataMode::Ordered) => "ordered",
        Consistency::Journal(DataMode::Journal) => "journal",
        _ => "other",
    }
}

#[test]
fn random_operations_agree_with_the_model_soft_updates() {
    run_seeds(Consistency::SoftUpdates);
}

#[test]
fn random_operations_agree_with_the_model_journal_ordered() {
    run_seeds(Consistency::Journal(DataMode::Ordered));
}

#[test]
fn random_operations_agree_with_the_model_journal_journal() {
    run_seeds(Consistency::Journal(DataMode::Journal));
}

/// Shrinks a failing seed to a short sequence failing the same way
/// (delta debugging over the steps): `STITCH_MEMFS_MINIMIZE=mode:seed:ops`
/// with mode `su`, `ordered` or `journal`.
#[test]
#[ignore]
fn minimize() {
    let Ok(spec) = std::env::var("STITCH_MEMFS_MINIMIZE") else {
        println!("set STITCH_MEMFS_MINIMIZE=mode:seed:ops");
        return;
    };
    let parts: Vec<&str> = spec.split(':').collect();
    let mode = [
        Consistency::SoftUpdates,
        Consistency::Journal(DataMode::Ordered),
        Consistency::Journal(DataMode::Journal),
    ]
    .into_iter()
    .find(|m| mode_name(*m) == parts[0])
    .expect("mode su, ordered or journal");
    let seed: u64 = parts[1].parse().unwrap();
    let n: usize = parts[2].parse().unwrap();
    let small = seed % 2 == 1;
    let image = image_for(mode);
    let mut cur = steps(seed, n);
    let first = execute(mode, image.clone(), small, &cur).expect_err("the seed passes");
    let kind = first.kind();
    println!("failure: {}", first.what);
    let fails = |s: &[Step]| {
        execute(mode, image.clone(), small, s)
            .err()
            .is_some_and(|f| f.kind() == kind)
    };
    let mut chunks = 2;
    while cur.len() >= 2 {
        let size = cur.len().div_ceil(chunks);
        let mut reduced = false;
        let mut at = 0;
        while at < cur.len() {
            let mut trial = cur.clone();
            trial.drain(at..(at + size).min(cur.len()));
            if fails(&trial) {
                cur = trial;
                reduced = true;
            } else {
                at += size;
            }
        }
        if reduced {
            chunks = (chunks - 1).max(2);
        } else if size == 1 {
            break;
        } else {
            chunks = (chunks * 2).min(cur.len());
        }
    }
    let last = execute(mode, image, small, &cur).expect_err("still fails");
    println!(
        "{} steps fail in {mode:?} (small memory: {small}):\n{}\n{}",
        cur.len(),
        last.trace.join("\n"),
        last.what
    );
}

/// Sequences the seeds found, shrunk by `minimize`: each caught a memfs
/// bug. (name, small memory, steps); every mode runs each.
fn known() -> Vec<(&'static str, bool, Vec<Step>)> {
    use stitch_model::{Path, RenameFlags as Flags};
    let p = Path::parse;
    let op = Step::Op;
    let bytes = |n: usize, seed: u8| -> Vec<u8> {
        (0..n).map(|i| seed.wrapping_add((i % 251) as u8)).collect()
    };
    let (noreplace, exchange) = (
        Flags {
            noreplace: true,
            exchange: false,
        },
        Flags {
            noreplace: false,
            exchange: true,
        },
    );
    let mkdir = |s: &str| {
        op(Op::Mkdir {
            path: p(s),
            perm: 0o755,
        })
    };
    let create = |s: &str| {
        op(Op::Create {
            path: p(s),
            perm: 0o644,
        })
    };
    let write = |s: &str, n: usize, seed: u8| {
        op(Op::Write {
            path: p(s),
            offset: 0,
            data: bytes(n, seed),
        })
    };
    vec![
        (
            "link of a directory onto a taken name: EEXIST before EPERM",
            false,
            vec![
                mkdir("a"),
                mkdir("d"),
                op(Op::Link {
                    from: p("a"),
                    to: p("d"),
                }),
            ],
        ),
        (
            "rename EXCHANGE below itself onto no name: ENOENT before EINVAL",
            false,
            vec![
                mkdir("b"),
                op(Op::Rename {
                    from: p("b"),
                    to: p("b/a"),
                    flags: exchange,
                }),
            ],
        ),
        (
            "rename NOREPLACE below itself onto a name: EEXIST before EINVAL",
            false,
            vec![
                mkdir("b"),
                mkdir("b/a"),
                op(Op::Rename {
                    from: p("b"),
                    to: p("b/a"),
                    flags: noreplace,
                }),
            ],
        ),
        (
            "rename NOREPLACE of a name onto itself: EEXIST",
            false,
            vec![
                create("c"),
                op(Op::Rename {
                    from: p("c"),
                    to: p("c"),
                    flags: noreplace,
                }),
            ],
        ),
        (
            "rename of a directory onto its own parent: ENOTEMPTY",
            false,
            vec![
                mkdir("d"),
                mkdir("d/c"),
                op(Op::Rename {
                    from: p("d/c"),
                    to: p("d"),
                    flags: Flags::default(),
                }),
            ],
        ),
        (
            "rename of a missing name to a long one: ENOENT before ENAMETOOLONG",
            false,
            vec![
                mkdir("b"),
                op(Op::Rename {
                    from: p("b/b"),
                    to: Path(vec![p("b").0[0].clone(), Name(vec![b'x'; 256])]),
                    flags: Flags::default(),
                }),
            ],
        ),
        (
            "a file written, cut and unlinked between two syncs",
            false,
            vec![
                create("f"),
                write("f", 50_000, 1),
                Step::Sync { crash: true },
                write("f", 70_000, 2),
                op(Op::Truncate {
                    path: p("f"),
                    size: 10,
                }),
                op(Op::Unlink { path: p("f") }),
                Step::Sync { crash: true },
            ],
        ),
        (
            "a file written and unlinked between two syncs",
            false,
            vec![
                create("f"),
                write("f", 50_000, 1),
                Step::Sync { crash: true },
                write("f", 70_000, 2),
                op(Op::Unlink { path: p("f") }),
                Step::Sync { crash: true },
            ],
        ),
        (
            "a chown of a symlink not yet flushed",
            false,
            vec![
                op(Op::Symlink {
                    path: p("d"),
                    target: b"~a".to_vec(),
                }),
                op(Op::Chown {
                    path: p("d"),
                    uid: 1000,
                    gid: 65534,
                }),
                Step::Sync { crash: true },
            ],
        ),
        (
            "a read that passes the memory bound",
            true,
            vec![
                create("f"),
                write("f", 400_000, 3),
                Step::Sync { crash: true },
            ],
        ),
    ]
}

/// Every known sequence in every mode, all at once (a deadlock costs one
/// wait, not one per run); the failures are reported together.
#[test]
fn known_sequences_pass() {
    let modes = [
        Consistency::SoftUpdates,
        Consistency::Journal(DataMode::Ordered),
        Consistency::Journal(DataMode::Journal),
    ];
    let runs: Vec<_> = known()
        .into_iter()
        .flat_map(|(name, small, steps)| {
            modes.into_iter().map(move |mode| {
                let steps = steps.clone();
                let h = std::thread::spawn(move || {
                    execute_within(
                        Duration::from_secs(30),
                        mode,
                        image_for(mode),
                        small,
                        &steps,
                    )
                });
                (name, mode, h)
            })
        })
        .collect();
    let mut failed = Vec::new();
    for (name, mode, h) in runs {
        if let Err(f) = h.join().unwrap() {
            failed.push(format!(
                "{name} ({mode:?}): {}\n  {}",
                f.what,
                f.trace.join("\n  ")
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// A file unlinked while open keeps what its handle writes after the
/// unlink, through a sync and the eviction of its pages (which then come
/// back from the orphan on disk). The model has no read by handle, so
/// this is written out. A one-page memory bound evicts every clean page
/// after each write.
#[test]
fn an_open_unlinked_file_reads_back_its_writes_after_eviction() {
    for mode in MODES {
        bounded(Duration::from_secs(60), move || {
            open_unlinked_reads_back(mode)
        })
        .unwrap_or_else(|| panic!("{mode:?}: stuck for 60 s (deadlock?)"));
    }
}

fn open_unlinked_reads_back(mode: Consistency) {
    let dev = device(image_for(mode));
    let one_page = Options {
        memory_limit: 1 << 12,
        ..opts()
    };
    let fs = mount_on(dev.clone(), mode, one_page);
    let r = fs.root();
    let f = fs
        .mknod(r, b"f", MemKind::File, 0o644, (0, 0), 0, 0)
        .unwrap();
    fs.write(f.ino, 0, &[1; 8192], false).unwrap();
    fs.open(f.ino).unwrap();
    fs.unlink(r, b"f").unwrap();
    fs.write(f.ino, 0, &[2; 8192], false).unwrap();
    assert!(fs.stats().pages_evicted >= 4, "{mode:?}: {:?}", fs.stats());
    let back = fs.read(f.ino, 0, 8192).unwrap();
    assert!(
        back.iter().all(|b| *b == 2),
        "{mode:?}: the open unlinked file reads {:?}... after eviction",
        &back[..8]
    );
    fs.release(f.ino).unwrap();
    fs.unmount().unwrap();
    if let Err(report) = check_image(&dev.snapshot(), false) {
        panic!("{mode:?}: {report}");
    }
}
