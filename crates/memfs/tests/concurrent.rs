//! memfs under concurrency: threads changing overlapping directories
//! while another syncs in a loop, then the image after unmount and the
//! tree after a remount; and lookups racing renames.
//!
//! Each worker owns its names (files `t{t}f{k}`, directories `t{t}d{j}`)
//! in directories every worker uses, so it knows what each of its
//! operations must do and what the tree must hold at the end: every file
//! where its last rename put it, with the bytes of the last version its
//! owner finished writing. `STITCH_MEMFS_SECS=N` runs each mode N seconds
//! (2 by default).

mod common;
use common::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use stitch_diskfs::{Consistency, DataMode};
use stitch_memfs::Refusal;
use stitch_memfs::{InodeNo, Kind, MemError, MemFs, Options, RenameFlags, SetAttrs};
use stitch_model::tree::Content;

/// Directories every worker uses: their paths, parents first.
const SHARED: [&str; 4] = ["s0", "s1", "s2", "s0/s3"];
const WORKERS: usize = 3;
const FILES: usize = 6;
const DIRS: usize = 2;

/// A test still running this long after its workers should have stopped
/// is taken for a deadlock.
const STUCK: Duration = Duration::from_secs(60);

fn secs() -> u64 {
    std::env::var("STITCH_MEMFS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2)
}

/// Version `v` of file `k` of worker `t`: a length and bytes of its own.
fn content(t: usize, k: usize, v: u64) -> Vec<u8> {
    let seed = (t as u64 * 1_000_003) ^ (k as u64 * 7919) ^ v.wrapping_mul(104_729);
    let len = (seed % 37) as usize * 1103 + (seed % 3) as usize * 4096 + 1;
    (0..len as u64)
        .map(|i| (seed.wrapping_add(i * 31 + i / 4096) % 251) as u8 + 1)
        .collect()
}

/// Where a worker's file or directory is: in a shared directory, or in
/// one of the worker's own directories.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loc {
    Shared(usize),
    Own(usize),
}

/// What one worker has made, and the inodes it needs.
struct Worker {
    t: usize,
    fs: MemFs,
    shared: Vec<InodeNo>,
    rng: ChaCha8Rng,
    /// File k: where it is, its inode and the last version written.
    files: Vec<Option<(Loc, InodeNo, u64)>>,
    /// Own directory j: the shared directory it is in, its inode, and how
    /// many of the worker's files are in it.
    dirs: Vec<Option<(usize, InodeNo, usize)>>,
    next_version: u64,
}

fn ok<T>(what: &str, r: Result<T, MemError>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

impl Worker {
    fn file_name(&self, k: usize) -> Vec<u8> {
        format!("t{}f{k}", self.t).into_bytes()
    }

    fn dir_name(&self, j: usize) -> Vec<u8> {
        format!("t{}d{j}", self.t).into_bytes()
    }

    fn dir_ino(&self, loc: Loc) -> InodeNo {
        match loc {
            Loc::Shared(i) => self.shared[i],
            Loc::Own(j) => self.dirs[j].expect("own directory exists").1,
        }
    }

    /// A place for a file: a shared directory, or an own one that exists.
    fn some_loc(&mut self) -> Loc {
        let own: Vec<usize> = (0..DIRS).filter(|j| self.dirs[*j].is_some()).collect();
        if !own.is_empty() && self.rng.gen_bool(0.3) {
            return Loc::Own(own[self.rng.gen_range(0..own.len())]);
        }
        Loc::Shared(self.rng.gen_range(0..SHARED.len()))
    }

    fn count(&mut self, loc: Loc, delta: isize) {
        if let Loc::Own(j) = loc {
            let d = self.dirs[j].as_mut().expect("own directory exists");
            d.2 = d.2.checked_add_signed(delta).expect("count");
        }
    }

    /// Writes a new version of file `k` (any length: the file is cut to
    /// it after).
    fn write_version(&mut self, k: usize) {
        let (loc, ino, _) = self.files[k].expect("file exists");
        let v = self.next_version;
        self.next_version += 1;
        let data = content(self.t, k, v);
        let n = ok("write", self.fs.write(ino, 0, &data, false));
        assert_eq!(n as usize, data.len(), "short write");
        let cut = SetAttrs {
            size: Some(data.len() as u64),
            ..SetAttrs::default()
        };
        ok("truncate", self.fs.setattr(ino, cut));
        self.files[k] = Some((loc, ino, v));
    }

    fn step(&mut self) {
        let k = self.rng.gen_range(0..FILES);
        let name = self.file_name(k);
        match (self.rng.gen_range(0..10), self.files[k]) {
            (0..=1, None) => {
                let loc = self.some_loc();
                let dir = self.dir_ino(loc);
                let a = ok(
                    "create",
                    self.fs.mknod(dir, &name, Kind::File, 0o644, (0, 0), 0, 0),
                );
                self.files[k] = Some((loc, a.ino, 0));
                self.count(loc, 1);
                self.write_version(k);
            }
            (0..=3, Some(_)) => self.write_version(k),
            (4..=5, Some((loc, ino, v))) => {
                let to = self.some_loc();
                let (from_dir, to_dir) = (self.dir_ino(loc), self.dir_ino(to));
                // NOREPLACE where the name is free (a rename onto itself
                // is the plain no-op).
                let flags = RenameFlags {
                    noreplace: to != loc && self.rng.gen(),
                    exchange: false,
                };
                ok(
                    "rename",
                    self.fs.rename(from_dir, &name, to_dir, &name, flags),
                );
                self.count(loc, -1);
                self.count(to, 1);
                self.files[k] = Some((to, ino, v));
            }
            (6, Some((loc, ino, _))) => {
                // Unlinked while open: the handle still writes and fsyncs.
                let dir = self.dir_ino(loc);
                let open = self.rng.gen_bool(0.5);
                if open {
                    ok("open", self.fs.open(ino));
                }
                ok("unlink", self.fs.unlink(dir, &name));
                if open {
                    // What the handle wrote, it reads back, across a flush
                    // (and whatever eviction the others' writes cause).
                    let data = content(self.t, k, u64::MAX);
                    ok("write unlinked", self.fs.write(ino, 0, &data, false));
                    if self.rng.gen_bool(0.5) {
                        ok("fsync unlinked", self.fs.fsync(ino, false));
                    } else {
                        ok("sync", self.fs.sync());
                    }
                    let back = ok("read unlinked", self.fs.read(ino, 0, data.len() as u32));
                    assert!(back == data, "an open unlinked file lost what it wrote");
                    ok("release", self.fs.release(ino));
                }
                self.count(loc, -1);
                self.files[k] = None;
            }
            (7, Some((_, ino, _))) => ok("fsync file", self.fs.fsync(ino, self.rng.gen())),
            (7, None) => {
                let dir = self.shared[self.rng.gen_range(0..SHARED.len())];
                ok("fsync directory", self.fs.fsync(dir, false));
            }
            _ => self.dir_step(),
        }
    }

    /// mkdir, rmdir (when empty), or a move to another shared directory
    /// of one of the worker's own directories.
    fn dir_step(&mut self) {
        let j = self.rng.gen_range(0..DIRS);
        let name = self.dir_name(j);
        match self.dirs[j] {
            None => {
                let i = self.rng.gen_range(0..SHARED.len());
                let a = ok("mkdir", self.fs.mkdir(self.shared[i], &name, 0o755, 0, 0));
                self.dirs[j] = Some((i, a.ino, 0));
            }
            Some((i, _, 0)) if self.rng.gen_bool(0.3) => {
                ok("rmdir", self.fs.rmdir(self.shared[i], &name));
                self.dirs[j] = None;
            }
            Some((i, ino, n)) => {
                let to = self.rng.gen_range(0..SHARED.len());
                ok(
                    "rename directory",
                    self.fs.rename(
                        self.shared[i],
                        &name,
                        self.shared[to],
                        &name,
                        RenameFlags::default(),
                    ),
                );
                self.dirs[j] = Some((to, ino, n));
            }
        }
    }

    /// The paths and contents the worker's files and directories must
    /// have.
    fn expected(&self, out: &mut BTreeMap<Vec<u8>, Option<Vec<u8>>>) {
        let dir_path = |w: &Worker, loc: Loc| -> String {
            match loc {
                Loc::Shared(i) => SHARED[i].to_string(),
                Loc::Own(j) => {
                    let (i, _, _) = w.dirs[j].expect("own directory exists");
                    format!("{}/t{}d{j}", SHARED[i], w.t)
                }
            }
        };
        for (j, d) in self.dirs.iter().enumerate() {
            if let Some((i, _, _)) = d {
                out.insert(format!("{}/t{}d{j}", SHARED[*i], self.t).into_bytes(), None);
            }
        }
        for (k, f) in self.files.iter().enumerate() {
            if let Some((loc, _, v)) = f {
                let p = format!("{}/t{}f{k}", dir_path(self, *loc), self.t);
                out.insert(p.into_bytes(), Some(content(self.t, k, *v)));
            }
        }
    }
}

/// The whole of `f`, or a failure if memfs gets stuck (a deadlock).
fn watched(what: &str, f: impl FnOnce() + Send + 'static) {
    let limit = Duration::from_secs(secs()) + STUCK;
    bounded(limit, f).unwrap_or_else(|| panic!("{what}: stuck for {limit:?} (deadlock?)"));
}

fn changes_and_syncs(mode: Consistency) {
    watched(&format!("{mode:?}"), move || changes_and_syncs_now(mode));
}

fn changes_and_syncs_now(mode: Consistency) {
    let dev = device(image_for(mode));
    let opts = Options {
        // 8 pages: nearly every write flushes and evicts, racing the
        // workers' own fsyncs and the syncer.
        memory_limit: 8 << 12,
        ..opts()
    };
    let fs = mount_on(dev.clone(), mode, opts.clone());
    let mut shared = Vec::new();
    for p in SHARED {
        let (parent, name) = match p.rsplit_once('/') {
            Some((dir, name)) => (shared[SHARED.iter().position(|s| *s == dir).unwrap()], name),
            None => (fs.root(), p),
        };
        shared.push(fs.mkdir(parent, name.as_bytes(), 0o755, 0, 0).unwrap().ino);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let syncs = Arc::new(AtomicU64::new(0));
    let syncer = {
        let (fs, stop, syncs) = (fs.clone(), stop.clone(), syncs.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                ok("sync", fs.sync());
                syncs.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(secs());
    let workers: Vec<_> = (0..WORKERS)
        .map(|t| {
            let mut w = Worker {
                t,
                fs: fs.clone(),
                shared: shared.clone(),
                rng: ChaCha8Rng::seed_from_u64(t as u64),
                files: vec![None; FILES],
                dirs: vec![None; DIRS],
                next_version: 1,
            };
            std::thread::spawn(move || {
                let mut steps = 0u64;
                while Instant::now() < deadline {
                    w.step();
                    steps += 1;
                }
                (w, steps)
            })
        })
        .collect();
    let mut expected = BTreeMap::new();
    for p in SHARED {
        expected.insert(p.as_bytes().to_vec(), None);
    }
    let mut steps = 0;
    for h in workers {
        match h.join() {
            Ok((w, n)) => {
                w.expected(&mut expected);
                steps += n;
            }
            Err(p) => std::panic::resume_unwind(p),
        }
    }
    stop.store(true, Ordering::Relaxed);
    syncer.join().unwrap();
    let syncs = syncs.load(Ordering::Relaxed);
    println!("{mode:?}: {steps} steps, {syncs} syncs, {:?}", fs.stats());
    assert!(steps > 100 && syncs > 5, "{mode:?}: too little ran");

    let check = |fs: &MemFs, when: &str| {
        let t = tree(fs);
        let got: BTreeMap<Vec<u8>, Option<Vec<u8>>> = t
            .nodes
            .iter()
            .filter(|(k, _)| !k.is_empty())
            .map(|(k, n)| {
                let c = match &n.content {
                    Content::Bytes(b) => Some(b.clone()),
                    _ => None,
                };
                (k.clone(), c)
            })
            .collect();
        let show = |m: &BTreeMap<Vec<u8>, Option<Vec<u8>>>| -> Vec<String> {
            m.iter()
                .map(|(k, c)| {
                    format!(
                        "{} {:?}",
                        String::from_utf8_lossy(k),
                        c.as_ref().map(Vec::len)
                    )
                })
                .collect()
        };
        if got != expected {
            let wrong: Vec<String> = got
                .iter()
                .filter(|(k, c)| expected.get(*k) != Some(c))
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                .collect();
            panic!(
                "{mode:?} {when}: the tree differs at {wrong:?}\ngot:\n{}\nexpected:\n{}",
                show(&got).join("\n"),
                show(&expected).join("\n")
            );
        }
    };
    check(&fs, "before unmount");
    fs.unmount().unwrap();
    if let Err(report) = check_image(&dev.snapshot(), false) {
        panic!("{mode:?}: after unmount: {report}");
    }
    let fs = MemFs::mount_device(dev.clone(), mode, opts).unwrap();
    check(&fs, "after remount");
    fs.unmount().unwrap();
}

#[test]
fn concurrent_changes_keep_every_last_write_soft_updates() {
    changes_and_syncs(Consistency::SoftUpdates);
}

#[test]
fn concurrent_changes_keep_every_last_write_journal_ordered() {
    changes_and_syncs(Consistency::Journal(DataMode::Ordered));
}

#[test]
fn concurrent_changes_keep_every_last_write_journal_journal() {
    changes_and_syncs(Consistency::Journal(DataMode::Journal));
}

/// Readers look up names a renamer keeps moving (files and a directory,
/// within and between two directories, exchanges too), while a syncer
/// flushes and a writer's memory pressure evicts: a lookup finds the name
/// or not (ENOENT), and what it finds answers getattr.
#[test]
fn lookups_racing_renames_see_only_enoent() {
    watched("lookups and renames", lookups_and_renames);
}

fn lookups_and_renames() {
    let mode = Consistency::Journal(DataMode::Ordered);
    let dev = device(image_for(mode));
    let opts = Options {
        memory_limit: 64 << 12,
        ..opts()
    };
    let fs = mount_on(dev.clone(), mode, opts);
    let r = fs.root();
    let dirs = [
        fs.mkdir(r, b"A", 0o755, 0, 0).unwrap().ino,
        fs.mkdir(r, b"B", 0o755, 0, 0).unwrap().ino,
    ];
    const NAMES: [&[u8]; 6] = [b"n0", b"n1", b"n2", b"n3", b"n4", b"n5"];
    // (directory index, name index) of each moving inode; the last one is
    // a directory with a file in it.
    let mut at: Vec<(usize, usize)> = vec![(0, 0), (0, 1), (1, 2), (0, 3)];
    let mut inos = Vec::new();
    for (i, (d, n)) in at.iter().enumerate() {
        let a = if i == 3 {
            let a = fs.mkdir(dirs[*d], NAMES[*n], 0o755, 0, 0).unwrap();
            fs.mknod(a.ino, b"inner", Kind::File, 0o644, (0, 0), 0, 0)
                .unwrap();
            a
        } else {
            fs.mknod(dirs[*d], NAMES[*n], Kind::File, 0o644, (0, 0), 0, 0)
                .unwrap()
        };
        inos.push(a.ino);
    }
    let big = fs
        .mknod(r, b"big", Kind::File, 0o644, (0, 0), 0, 0)
        .unwrap()
        .ino;
    fs.sync().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let mut helpers = Vec::new();
    for reader in 0..3u64 {
        let (fs, stop, lookups) = (fs.clone(), stop.clone(), lookups.clone());
        let inos = inos.clone();
        helpers.push(std::thread::spawn(move || {
            let mut rng = ChaCha8Rng::seed_from_u64(100 + reader);
            while !stop.load(Ordering::Relaxed) {
                let d = dirs[rng.gen_range(0..2)];
                let name = NAMES[rng.gen_range(0..NAMES.len())];
                match fs.lookup(d, name) {
                    Ok(a) => {
                        assert!(inos.contains(&a.ino), "lookup found inode {}", a.ino);
                        let g = fs
                            .getattr(a.ino)
                            .unwrap_or_else(|e| panic!("getattr of {}: {e}", a.ino));
                        assert_eq!(g.kind, a.kind);
                        if a.kind == Kind::Dir {
                            match fs.lookup(a.ino, b"inner") {
                                Ok(_) => {}
                                Err(e) => panic!("inner of a moving directory: {e}"),
                            }
                            let p = fs.parent(a.ino).unwrap();
                            assert!(dirs.contains(&p), "parent {p}");
                        }
                    }
                    Err(MemError::Refused(Refusal::NotFound)) => {}
                    Err(e) => panic!("lookup: {e}"),
                }
                lookups.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    {
        let (fs, stop) = (fs.clone(), stop.clone());
        helpers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                ok("sync", fs.sync());
            }
        }));
    }
    {
        let (fs, stop) = (fs.clone(), stop.clone());
        helpers.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let data = vec![(i % 251) as u8; 64 << 10];
                ok("write", fs.write(big, (i % 16) * (64 << 10), &data, false));
                i += 1;
            }
        }));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let deadline = Instant::now() + Duration::from_secs(secs());
    let mut renames = 0u64;
    while Instant::now() < deadline {
        let i = rng.gen_range(0..at.len());
        let (d, n) = at[i];
        let to_d = rng.gen_range(0..2);
        let to_n = rng.gen_range(0..NAMES.len());
        let taken = at.iter().position(|x| *x == (to_d, to_n));
        let exchange = taken.is_some();
        if taken == Some(i) {
            continue;
        }
        let flags = RenameFlags {
            noreplace: !exchange,
            exchange,
        };
        ok(
            "rename",
            fs.rename(dirs[d], NAMES[n], dirs[to_d], NAMES[to_n], flags),
        );
        if let Some(j) = taken {
            at[j] = (d, n);
        }
        at[i] = (to_d, to_n);
        renames += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for h in helpers {
        if let Err(p) = h.join() {
            std::panic::resume_unwind(p);
        }
    }
    let lookups = lookups.load(Ordering::Relaxed);
    println!("{renames} renames, {lookups} lookups, {:?}", fs.stats());
    assert!(renames > 100 && lookups > 1000, "too little ran");
    for (i, (d, n)) in at.iter().enumerate() {
        assert_eq!(fs.lookup(dirs[*d], NAMES[*n]).unwrap().ino, inos[i]);
    }
    fs.unmount().unwrap();
    if let Err(report) = check_image(&dev.snapshot(), false) {
        panic!("after unmount: {report}");
    }
}

/// Creates in one directory racing flushes: a create holds its directory's
/// state while it takes the node table to insert the new node, so a flush
/// must never hold the table while it waits for a node's state (it did,
/// reading which of its objects were directories, and hung `tar`).
#[test]
fn creates_racing_flushes_do_not_deadlock() {
    watched("creates and flushes", || {
        let fs = mount_on(
            device(image_for(Consistency::SoftUpdates)),
            Consistency::SoftUpdates,
            opts(),
        );
        let d = fs.mkdir(fs.root(), b"d", 0o755, 0, 0).unwrap().ino;
        let stop = Arc::new(AtomicBool::new(false));
        let syncer = {
            let (fs, stop) = (fs.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    ok("sync", fs.sync());
                }
            })
        };
        let deadline = Instant::now() + Duration::from_secs(3);
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let fs = fs.clone();
                std::thread::spawn(move || {
                    let mut i = 0;
                    while Instant::now() < deadline {
                        let name = format!("t{t}-{i}");
                        let made = fs.mknod(d, name.as_bytes(), Kind::File, 0o644, (0, 0), 0, 0);
                        // Inodes freed by the unlinks below come back only
                        // as flushes apply them; a full table is no failure.
                        let f = match made {
                            Err(MemError::NoSpace) => continue,
                            other => ok("mknod", other),
                        };
                        ok(
                            "setattr",
                            fs.setattr(
                                f.ino,
                                SetAttrs {
                                    perm: Some(0o600),
                                    ..Default::default()
                                },
                            ),
                        );
                        ok("unlink", fs.unlink(d, name.as_bytes()));
                        i += 1;
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        syncer.join().unwrap();
    });
}
