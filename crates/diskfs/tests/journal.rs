//! Crash tests of the journal mode (docs/design.md "Consistency modes:
//! what a crash leaves"), in each data mode, on the recording device.
//!
//! A workload of creates, writes, overwrites, truncates, links, renames,
//! unlinks, mkdir/rmdir, symlinks and open-unlinked files runs with fsyncs,
//! explicit commits, write-back rounds and flushes interleaved, on an ext3
//! image with a small journal and small transactions (so the log wraps).
//! After every operation the test keeps a snapshot of the tree. Then every
//! crash image the recording allows (exhaustive per epoch up to a bound,
//! sampled with a printed seed beyond) is recovered by stitchfs and judged:
//!
//! - `e2fsck -fn` exits 0 and `stitchfs fsck` is clean: no leaks either;
//! - the tree equals the snapshot after some operation `k`, with `k` at
//!   least the last operation an fsync covered before the crash and at most
//!   the last one begun (whole operations, in order, nothing synced lost);
//! - contents: in `journal` data mode they are part of that snapshot (each
//!   transaction's data all or nothing); in `ordered` every byte of a file
//!   is its own or zero (no file shows data it never wrote); in `writeback`
//!   only the metadata is judged.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use stitch_blockdev::record::{crash_states, Enumerate, ImageBuilder, TornModel};
use stitch_blockdev::{MemDevice, RecordingDevice};
use stitch_diskfs::{
    Consistency, DataMode, DiskFs, FileType, InodeNo, JournalConfig, StackOptions,
};
use stitch_patch::PatchId;
use stitch_testkit::{e2fsck, E2fsck, JournalSize};

mod common;
use common::{byte_of, NOW};

/// A 16 MiB ext3 image with the smallest journal e2fsck accepts (4 MiB).
fn journaled_image() -> Vec<u8> {
    stitch_testkit::fresh_image(16 << 20, Some(JournalSize::Bytes(4 << 20)))
}

/// One name in the tree, as the judge compares it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    ino: u32,
    kind: Option<FileType>,
    size: u64,
    links: u16,
    /// Contents (files) or target (symlinks).
    bytes: Vec<u8>,
}

type Tree = BTreeMap<String, Node>;

fn snapshot(fs: &mut DiskFs) -> Result<Tree, String> {
    let mut tree = Tree::new();
    let mut stack = vec![(fs.root(), String::new())];
    while let Some((d, path)) = stack.pop() {
        for e in fs.readdir(d).map_err(|e| e.to_string())? {
            if e.name == b"." || e.name == b".." || e.name == b"lost+found" {
                continue;
            }
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let a = fs.getattr(e.ino).map_err(|e| format!("{p}: {e}"))?;
            let bytes = match a.kind {
                Some(FileType::Regular) => fs
                    .read(e.ino, 0, a.size as usize)
                    .map_err(|e| format!("{p}: {e}"))?,
                Some(FileType::Symlink) => fs.readlink(e.ino).map_err(|e| e.to_string())?,
                Some(FileType::Directory) => {
                    stack.push((e.ino, p.clone()));
                    Vec::new()
                }
                _ => Vec::new(),
            };
            tree.insert(
                p,
                Node {
                    ino: e.ino.0,
                    kind: a.kind,
                    size: a.size,
                    links: a.nlink,
                    bytes,
                },
            );
        }
    }
    Ok(tree)
}

/// What the workload did: the recording, a snapshot after each operation,
/// and log positions.
struct Run {
    rec: Arc<RecordingDevice<MemDevice>>,
    /// `states[k]`: the tree after `k` operations.
    states: Vec<Tree>,
    /// `begun[i]`: log length when operation `i` (1-based: `states[i]`) began.
    begun: Vec<usize>,
    /// `(log length when an fsync returned, operations it covers)`.
    synced: Vec<(usize, usize)>,
    /// Inode → the file number its bytes follow.
    pattern: BTreeMap<u32, u32>,
}

fn journal_config() -> JournalConfig {
    JournalConfig {
        max_blocks: Some(12),
        ..Default::default()
    }
}

fn record(image: Vec<u8>, data: DataMode, seed: u64, steps: u32) -> Run {
    let mem = MemDevice::from_image(4096, image.clone()).unwrap();
    let rec = Arc::new(RecordingDevice::with_base(mem, image).unwrap());
    let mut fs = DiskFs::mount(
        rec.clone(),
        StackOptions::new(Consistency::Journal(data)).journal(journal_config()),
        NOW,
    )
    .unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let root = fs.root();
    let mut run = Run {
        rec: rec.clone(),
        states: vec![snapshot(&mut fs).unwrap()],
        begun: vec![0],
        synced: Vec::new(),
        pattern: BTreeMap::new(),
    };
    // (parent, inode, name, size)
    let mut files: Vec<(InodeNo, InodeNo, String, u64)> = Vec::new();
    let mut dirs = vec![root];
    for step in 0..steps {
        let before = rec.log().len();
        let choice = rng.gen_range(0..14);
        let op: Option<PatchId> = match choice {
            0 => {
                let parent = dirs[rng.gen_range(0..dirs.len())];
                let (d, p) = fs
                    .mkdir(parent, format!("d{step}").as_bytes(), 0o755, 0, 0, NOW)
                    .unwrap();
                dirs.push(d);
                Some(p)
            }
            1 | 2 => {
                let parent = dirs[rng.gen_range(0..dirs.len())];
                let name = format!("f{step}");
                let (ino, p) = fs
                    .create(parent, name.as_bytes(), 0o644, 0, 0, NOW)
                    .unwrap();
                run.pattern.insert(ino.0, ino.0);
                files.push((parent, ino, name, 0));
                Some(p)
            }
            3..=5 if !files.is_empty() => {
                // Append, or overwrite somewhere inside.
                let k = rng.gen_range(0..files.len());
                let (_, ino, _, size) = files[k];
                let at = if rng.gen_bool(0.3) && size > 0 {
                    rng.gen_range(0..size)
                } else {
                    size
                };
                let len = rng.gen_range(1..14_000u64);
                let f = run.pattern[&ino.0];
                let bytes: Vec<u8> = (at..at + len).map(|i| byte_of(f, i)).collect();
                let (_, p) = fs.write(ino, at, &bytes, NOW).unwrap();
                for e in files.iter_mut().filter(|e| e.1 == ino) {
                    e.3 = e.3.max(at + len);
                }
                Some(p)
            }
            6 if !files.is_empty() => {
                let (parent, ino, name, _) = files.swap_remove(rng.gen_range(0..files.len()));
                let _ = ino;
                Some(fs.unlink(parent, name.as_bytes(), NOW).unwrap())
            }
            7 if !files.is_empty() => {
                let k = rng.gen_range(0..files.len());
                let (_, ino, _, size) = files[k];
                let new = rng.gen_range(0..=size + 6_000);
                let p = fs.truncate(ino, new, NOW).unwrap();
                for e in files.iter_mut().filter(|e| e.1 == ino) {
                    e.3 = new;
                }
                Some(p)
            }
            8 if !files.is_empty() => {
                let (_, ino, _, size) = files[rng.gen_range(0..files.len())];
                let parent = dirs[rng.gen_range(0..dirs.len())];
                let name = format!("l{step}");
                let p = fs.link(ino, parent, name.as_bytes(), NOW).unwrap();
                files.push((parent, ino, name, size));
                Some(p)
            }
            9 if !files.is_empty() => {
                let k = rng.gen_range(0..files.len());
                let (sp, ino, sn, size) = files[k].clone();
                let dp = dirs[rng.gen_range(0..dirs.len())];
                let dn = format!("r{step}");
                let p = fs
                    .rename(
                        sp,
                        sn.as_bytes(),
                        dp,
                        dn.as_bytes(),
                        Default::default(),
                        NOW,
                    )
                    .unwrap();
                files[k] = (dp, ino, dn, size);
                Some(p)
            }
            10 => {
                let parent = dirs[rng.gen_range(0..dirs.len())];
                let target = "t".repeat(if rng.gen_bool(0.5) { 20 } else { 300 });
                let (_, p) = fs
                    .symlink(
                        parent,
                        format!("s{step}").as_bytes(),
                        target.as_bytes(),
                        0,
                        0,
                        NOW,
                    )
                    .unwrap();
                Some(p)
            }
            11 if dirs.len() > 1 => {
                let d = *dirs.last().unwrap();
                let empty = fs.readdir(d).unwrap().len() == 2;
                let named = dirs.iter().copied().find_map(|p| {
                    fs.readdir(p)
                        .unwrap()
                        .into_iter()
                        .find(|e| e.ino == d && e.name != b"." && e.name != b"..")
                        .map(|e| (p, e.name))
                });
                match (empty, named) {
                    (true, Some((p, name))) => {
                        dirs.pop();
                        Some(fs.rmdir(p, &name, NOW).unwrap())
                    }
                    _ => None,
                }
            }
            12 => {
                // A file unlinked while open, never closed before the crash.
                let name = format!("o{step}");
                let (ino, _) = fs.create(root, name.as_bytes(), 0o600, 0, 0, NOW).unwrap();
                run.pattern.insert(ino.0, ino.0);
                run.begun.push(before);
                run.states.push(snapshot(&mut fs).unwrap());
                let bytes: Vec<u8> = (0..9_000).map(|i| byte_of(ino.0, i)).collect();
                let written = rec.log().len();
                fs.write(ino, 0, &bytes, NOW).unwrap();
                run.begun.push(written);
                run.states.push(snapshot(&mut fs).unwrap());
                fs.open(ino).unwrap();
                let before = rec.log().len();
                let p = fs.unlink(root, name.as_bytes(), NOW).unwrap();
                run.begun.push(before);
                run.states.push(snapshot(&mut fs).unwrap());
                let done = run.states.len() - 1;
                if rng.gen_bool(0.2) {
                    fs.sync_patch(p).unwrap();
                    run.synced.push((rec.log().len(), done));
                }
                continue;
            }
            _ => {
                common::write_back_some(&mut fs, &mut rng);
                None
            }
        };
        let Some(op) = op else { continue };
        run.begun.push(before);
        run.states.push(snapshot(&mut fs).unwrap());
        let done = run.states.len() - 1;
        match rng.gen_range(0..10) {
            0..=1 => {
                // fsync: durable when it returns, with its transaction and
                // every one before it. An operation that changed nothing
                // (a truncate to the same size at the same time) has no
                // transaction, and its sync makes nothing durable.
                let changed = !fs.modes().cache().is_committed(op);
                let log0 = rec.log().len();
                fs.sync_patch(op).unwrap();
                if std::env::var_os("STITCH_TRACE").is_some() {
                    eprintln!(
                        "op {done} choice {choice}: sync {changed} log {log0}..{} {:?} state {:?}",
                        rec.log().len(),
                        fs.modes().journal().map(|j| j.stats()),
                        fs.modes().cache().state(op)
                    );
                }
                if changed {
                    run.synced.push((rec.log().len(), done));
                }
            }
            2 => fs.modes_mut().commit().unwrap(),
            _ => {}
        }
    }
    run
}

/// The operations the image must reflect at least and at most, for a crash
/// that may have happened at any log position up to `end`.
fn bounds(run: &Run, end: usize) -> (usize, usize) {
    let lo = run
        .synced
        .iter()
        .filter(|&&(at, _)| at <= end)
        .map(|&(_, k)| k)
        .max()
        .unwrap_or(0);
    let hi = (1..run.begun.len())
        .filter(|&i| run.begun[i] < end)
        .max()
        .unwrap_or(0);
    (lo, hi.max(lo))
}

type Meta<'a> = (
    &'a String,
    u32,
    Option<FileType>,
    u64,
    u16,
    Option<&'a Vec<u8>>,
);

fn without_data(t: &Tree) -> Vec<Meta<'_>> {
    t.iter()
        .map(|(p, n)| {
            let target = (n.kind == Some(FileType::Symlink)).then_some(&n.bytes);
            (p, n.ino, n.kind, n.size, n.links, target)
        })
        .collect()
}

/// Recovers one crash image with stitchfs and judges it. Returns the
/// recovered image (after a clean unmount) for further checks.
fn judge(
    run: &Run,
    data: DataMode,
    image: Vec<u8>,
    end: usize,
    dir: &Path,
) -> Result<(Vec<u8>, u32), String> {
    let dev = Arc::new(MemDevice::from_image(4096, image).unwrap());
    let mut fs = DiskFs::mount(dev.clone(), Consistency::SoftUpdates, NOW)
        .map_err(|e| format!("mount: {e}"))?;
    let replayed = fs.replayed().map_or(0, |r| r.transactions);
    let tree = snapshot(&mut fs)?;
    fs.unmount(NOW).map_err(|e| format!("unmount: {e}"))?;
    let recovered = dev.snapshot();
    let (lo, hi) = bounds(run, end);
    let matches = |k: usize| match data {
        DataMode::Journal => run.states[k] == tree,
        _ => without_data(&run.states[k]) == without_data(&tree),
    };
    if !(lo..=hi).any(matches) {
        let near = (lo..=hi).min_by_key(|&k| {
            let s = &run.states[k];
            s.keys().filter(|p| !tree.contains_key(*p)).count()
                + tree.keys().filter(|p| !s.contains_key(*p)).count()
        });
        if std::env::var_os("STITCH_TRACE").is_some() {
            eprintln!("synced: {:?}\nbegun: {:?}", run.synced, run.begun);
            let m = (0..run.states.len())
                .find(|&k| without_data(&run.states[k]) == without_data(&tree));
            eprintln!("matches state {m:?}");
        }
        return Err(format!(
            "the recovered tree is no state after operations {lo}..={hi}\nrecovered: {:?}\nnearest ({near:?}): {:?}",
            without_data(&tree),
            near.map(|k| without_data(&run.states[k]))
        ));
    }
    if data == DataMode::Ordered {
        for (p, n) in &tree {
            if n.kind != Some(FileType::Regular) {
                continue;
            }
            let f = run.pattern.get(&n.ino).copied().unwrap_or(n.ino);
            if let Some(i) =
                (0..n.bytes.len()).find(|&i| n.bytes[i] != 0 && n.bytes[i] != byte_of(f, i as u64))
            {
                return Err(format!(
                    "{p} (inode {}) byte {i} is {}, which it never wrote",
                    n.ino, n.bytes[i]
                ));
            }
        }
    }
    let path = dir.join("recovered.img");
    std::fs::write(&path, &recovered).unwrap();
    let report = stitch_fsck::check(&path, &Default::default(), &mut |_, _, _| {})
        .map_err(|e| e.to_string())?;
    if !report.is_clean() {
        return Err(format!("stitchfs fsck:\n{report}"));
    }
    let e2 = e2fsck(&path, &["-fn"]);
    if !e2.clean() {
        return Err(format!("e2fsck -fn exit {}:\n{}", e2.code, e2.stdout));
    }
    Ok((recovered, replayed))
}

struct Tally {
    images: usize,
    torn: usize,
    replayed: usize,
}

fn crash_all(data: DataMode, seeds: std::ops::Range<u64>, torn: Option<TornModel>) -> Tally {
    let tmp = stitch_testkit::scratch();
    let base = journaled_image();
    let mut t = Tally {
        images: 0,
        torn: 0,
        replayed: 0,
    };
    for seed in seeds {
        let run = record(base.clone(), data, seed, 50);
        let (log, start) = (run.rec.log(), run.rec.base());
        let mut builder = ImageBuilder::new(&start, &log).unwrap();
        let opts = Enumerate {
            max_states: 8,
            seed,
            torn,
        };
        let states = crash_states(&log, &opts).unwrap();
        println!("data={data} seed {seed}: {} epochs", states.epochs());
        for state in states {
            let image = builder.build(&state).unwrap();
            let end = state.points.end().0;
            let (_, replays) = judge(&run, data, image, end, tmp.path())
                .unwrap_or_else(|e| panic!("data={data} seed {seed} state {state:?}: {e}"));
            t.images += 1;
            t.torn += usize::from(state.persisted.iter().any(|p| p.torn.is_some()));
            t.replayed += usize::from(replays > 0);
        }
    }
    t
}

/// Workload seeds: 2 by default; `STITCH_CRASH_SEEDS=N` for a long run,
/// `STITCH_CRASH_SEED=S` for one.
fn seeds() -> std::ops::Range<u64> {
    let var = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    match var("STITCH_CRASH_SEED") {
        Some(s) => s..s + 1,
        None => 0..var("STITCH_CRASH_SEEDS").unwrap_or(2),
    }
}

fn check_mode(data: DataMode) {
    let t = crash_all(data, seeds(), None);
    println!(
        "journal data={data}: {} crash images checked ({} replayed transactions), none inconsistent",
        t.images, t.replayed
    );
    assert!(t.images > 100, "too few crash images: {}", t.images);
    assert!(
        t.replayed > 20,
        "too few images needed replay: {}",
        t.replayed
    );
}

#[test]
fn journal_ordered_crash_images_are_consistent() {
    check_mode(DataMode::Ordered);
}

#[test]
fn journal_writeback_crash_images_are_consistent() {
    check_mode(DataMode::Writeback);
}

#[test]
fn journal_data_crash_images_are_atomic() {
    check_mode(DataMode::Journal);
}

#[test]
fn torn_writes_never_replay_an_inconsistency() {
    let t = crash_all(DataMode::Ordered, 0..1, Some(TornModel::Prefix));
    println!(
        "torn: {} crash images, {} with a torn block, none inconsistent",
        t.images, t.torn
    );
    assert!(t.torn > 20, "too few torn images: {}", t.torn);
}

/// The tree of an image mounted by stitchfs (replaying if needed).
fn tree_of(image: Vec<u8>) -> Tree {
    let dev = Arc::new(MemDevice::from_image(4096, image).unwrap());
    let mut fs = DiskFs::mount(dev, Consistency::SoftUpdates, NOW).unwrap();
    snapshot(&mut fs).unwrap()
}

/// Crash images of a journaled run that hold transactions to replay (one
/// in `every`), each with the tree stitchfs recovers from it.
fn replayable(data: DataMode, seed: u64, every: usize) -> Vec<(Vec<u8>, Tree)> {
    let base = journaled_image();
    let run = record(base, data, seed, 40);
    let (log, start) = (run.rec.log(), run.rec.base());
    let mut builder = ImageBuilder::new(&start, &log).unwrap();
    let opts = Enumerate {
        max_states: 4,
        seed,
        torn: None,
    };
    let mut out = Vec::new();
    let mut n = 0;
    for state in crash_states(&log, &opts).unwrap() {
        let image = builder.build(&state).unwrap();
        let dev = Arc::new(MemDevice::from_image(4096, image.clone()).unwrap());
        let mut fs = DiskFs::mount(dev, Consistency::SoftUpdates, NOW).unwrap();
        if fs.replayed().is_some_and(|r| r.transactions > 0) {
            n += 1;
            if n % every == 0 {
                out.push((image, snapshot(&mut fs).unwrap()));
            }
        }
    }
    out
}

/// Compatibility one way: `e2fsck -fy` replays a log stitchfs wrote to the
/// same tree, contents and inode numbers as stitchfs's own replay.
#[test]
fn e2fsck_replays_our_journal_as_we_do() {
    let tmp = stitch_testkit::scratch();
    let path = tmp.path().join("e2.img");
    let mut checked = 0;
    for data in [DataMode::Ordered, DataMode::Journal] {
        for (image, ours) in replayable(data, 7, 4) {
            std::fs::write(&path, &image).unwrap();
            let E2fsck {
                code, stdout: out, ..
            } = e2fsck(&path, &["-fy"]);
            assert!(code <= 1, "e2fsck -fy exit {code}:\n{out}");
            assert!(
                out.contains("recovering journal"),
                "e2fsck did not replay:\n{out}"
            );
            let E2fsck {
                code, stdout: out, ..
            } = e2fsck(&path, &["-fn"]);
            assert_eq!(code, 0, "not clean after e2fsck's replay:\n{out}");
            assert_eq!(tree_of(std::fs::read(&path).unwrap()), ours, "data={data}");
            checked += 1;
        }
    }
    println!("e2fsck replayed {checked} crash images as stitchfs does");
    assert!(checked >= 10, "too few images: {checked}");
}

/// Compatibility the other way round and with the kernel: the ext4 driver
/// mounts a crash image stitchfs wrote (replaying its log), and stitchfs
/// reads the same tree it would have recovered itself.
#[test]
fn the_kernel_replays_our_journal_as_we_do() {
    if !stitch_testkit::is_root() {
        println!("SKIPPED: needs root for mount -o loop");
        return;
    }
    let tmp = stitch_testkit::scratch();
    let path = tmp.path().join("k.img");
    let mnt = tmp.path().join("mnt");
    let mut checked = 0;
    for (image, ours) in replayable(DataMode::Ordered, 3, 8) {
        std::fs::write(&path, &image).unwrap();
        let m = stitch_testkit::LoopMount::new(&path, &mnt, "")
            .unwrap_or_else(|e| panic!("kernel mount of a crash image: {e}"));
        m.unmount();
        let E2fsck {
            code, stdout: out, ..
        } = e2fsck(&path, &["-fn"]);
        assert_eq!(code, 0, "not clean after the kernel's replay:\n{out}");
        assert_eq!(tree_of(std::fs::read(&path).unwrap()), ours);
        checked += 1;
    }
    println!("the kernel replayed {checked} crash images as stitchfs does");
    assert!(checked >= 3, "too few images: {checked}");
}

/// stitchfs replays what the kernel left: a copy of an ext3 image taken
/// while the kernel has it mounted (after `sync`, before unmount) is a
/// crash image whose log holds committed, unchecked-pointed transactions.
/// stitchfs and `e2fsck -fy` must both recover the files written.
#[test]
fn we_replay_what_the_kernel_left() {
    if !stitch_testkit::is_root() {
        println!("SKIPPED: needs root for mount -o loop");
        return;
    }
    let tmp = stitch_testkit::scratch();
    let path = tmp.path().join("kernel.img");
    std::fs::write(&path, journaled_image()).unwrap();
    let mnt = tmp.path().join("mnt");
    let m =
        stitch_testkit::LoopMount::new(&path, &mnt, "commit=60").unwrap_or_else(|e| panic!("{e}"));
    let mut want = BTreeMap::new();
    for i in 0..40u32 {
        let dir = mnt.join(format!("d{}", i % 5));
        std::fs::create_dir_all(&dir).unwrap();
        let bytes: Vec<u8> = (0..(i as u64 * 997 % 20_000))
            .map(|k| byte_of(i, k))
            .collect();
        std::fs::write(dir.join(format!("f{i}")), &bytes).unwrap();
        want.insert(format!("/d{}/f{i}", i % 5), bytes);
    }
    Command::new("sync").status().unwrap();
    let copy = std::fs::read(&path).unwrap();
    m.unmount();
    let sb = stitch_format::Superblock::decode(&copy[1024..2048]).unwrap();
    assert!(sb.needs_recovery(), "the copy should need recovery");
    let dev = Arc::new(MemDevice::from_image(4096, copy.clone()).unwrap());
    let mut fs = DiskFs::mount(dev.clone(), Consistency::SoftUpdates, NOW).unwrap();
    let replayed = fs.replayed().cloned().unwrap_or_default();
    println!("replayed the kernel's log: {replayed:?}");
    assert!(replayed.transactions > 0, "the kernel left no transaction");
    let ours = snapshot(&mut fs).unwrap();
    for (p, bytes) in &want {
        assert_eq!(ours.get(p).map(|n| &n.bytes), Some(bytes), "{p}");
    }
    fs.unmount(NOW).unwrap();
    let recovered = tmp.path().join("recovered.img");
    std::fs::write(&recovered, dev.snapshot()).unwrap();
    let E2fsck {
        code, stdout: out, ..
    } = e2fsck(&recovered, &["-fn"]);
    assert_eq!(code, 0, "not clean after our replay:\n{out}");
    // e2fsck's replay of the same copy gives the same tree.
    let theirs = tmp.path().join("theirs.img");
    std::fs::write(&theirs, &copy).unwrap();
    let E2fsck {
        code, stdout: out, ..
    } = e2fsck(&theirs, &["-fy"]);
    assert!(code <= 1, "e2fsck -fy exit {code}:\n{out}");
    assert_eq!(tree_of(std::fs::read(&theirs).unwrap()), ours);
}

/// A commit block on disk while one block of its transaction's log is not:
/// the commit goes out with its log blocks (one flush per transaction), so
/// a crash may leave exactly this. Made by hand here for every commit of a
/// run. The checksum in the commit block must keep the transaction from
/// replay (with `ASYNC_COMMIT`, replay just ends there; without it, it
/// also reports the failed commit): the recovered image must be the state
/// before that commit, which `judge` checks.
#[test]
fn a_commit_without_its_log_blocks_is_not_replayed() {
    use stitch_blockdev::record::{CrashPoint, CrashState, LogEntry};
    use stitch_format::jbd2::{BlockHeader, BlockType};
    let tmp = stitch_testkit::scratch();
    let base = journaled_image();
    let run = record(base, DataMode::Journal, 11, 50);
    let (log, start) = (run.rec.log(), run.rec.base());
    let mut builder = ImageBuilder::new(&start, &log).unwrap();
    let entries = log.entries();
    let mut checked = 0;
    for (c, e) in entries.iter().enumerate() {
        let LogEntry::Write { block, data } = e else {
            continue;
        };
        if !matches!(BlockHeader::parse(data), Some((BlockType::Commit, _))) {
            continue;
        }
        // The log block just before the commit block: the transaction's
        // last copy (or descriptor).
        let Some(prev) = entries[..c]
            .iter()
            .rposition(|e| matches!(e, LogEntry::Write { block: b, .. } if b.0 + 1 == block.0))
        else {
            continue;
        };
        let state = CrashState::in_order(&log, CrashPoint(c + 1)).unwrap();
        let mut image = builder.build(&state).unwrap();
        let at = match &entries[prev] {
            LogEntry::Write { block, .. } => block.0 as usize * 4096,
            _ => unreachable!(),
        };
        // That block as it was before this transaction wrote it.
        image[at..at + 4096].copy_from_slice(&start[at..at + 4096]);
        let dev = Arc::new(MemDevice::from_image(4096, image.clone()).unwrap());
        let fs = DiskFs::mount(dev, Consistency::SoftUpdates, NOW).unwrap();
        drop(fs);
        // The crash "happened" just before the commit block was written.
        judge(&run, DataMode::Journal, image, c, tmp.path())
            .unwrap_or_else(|e| panic!("commit at log {c}: {e}"));
        checked += 1;
    }
    println!("{checked} transactions with a missing log block, none replayed");
    assert!(checked >= 5, "too few commits: {checked}");
}

/// A long run on the smallest journal: the log wraps many times, the tail
/// keeps up, and sampled crash images late in the run still recover.
#[test]
fn a_long_run_wraps_the_log() {
    let tmp = stitch_testkit::scratch();
    let base = journaled_image();
    let run = record(base, DataMode::Journal, 5, 400);
    let (log, start) = (run.rec.log(), run.rec.base());
    let mut builder = ImageBuilder::new(&start, &log).unwrap();
    let opts = Enumerate {
        max_states: 2,
        seed: 5,
        torn: None,
    };
    let states: Vec<_> = crash_states(&log, &opts).unwrap().collect();
    let mut checked = 0;
    for state in states.iter().step_by(9) {
        let image = builder.build(state).unwrap();
        judge(
            &run,
            DataMode::Journal,
            image,
            state.points.end().0,
            tmp.path(),
        )
        .unwrap_or_else(|e| panic!("state {state:?}: {e}"));
        checked += 1;
    }
    // Log writes: every write to the journal's blocks.
    let jsb_block = {
        let sb = stitch_format::Superblock::decode(&start[1024..2048]).unwrap();
        sb.jnl_blocks[0] as u64
    };
    let log_writes = log
        .entries()
        .iter()
        .filter(|e| matches!(e, stitch_blockdev::record::LogEntry::Write { block, .. } if block.0 > jsb_block && block.0 <= jsb_block + 1100))
        .count();
    println!(
        "long run: {} log writes, {checked} crash images checked",
        log_writes
    );
    assert!(
        log_writes > 1024 + 256,
        "the 1024-block log did not wrap: {log_writes}"
    );
}

/// A full disk in journal mode: blocks freed but not yet durable are not
/// reused at once (ext3's rule), yet a writer that needs them gets them
/// after the journal commits, instead of ENOSPC.
#[test]
fn freed_blocks_come_back_after_a_commit_on_a_full_disk() {
    let tmp = stitch_testkit::scratch();
    let dev = Arc::new(MemDevice::from_image(4096, journaled_image()).unwrap());
    let mut fs = DiskFs::mount(dev.clone(), Consistency::Journal(DataMode::Ordered), NOW).unwrap();
    let root = fs.root();
    let chunk = vec![5u8; 256 << 10];
    // One file takes every free block.
    let (big, _) = fs.create(root, b"big", 0o644, 0, 0, NOW).unwrap();
    let mut off = 0;
    loop {
        match fs.write(big, off, &chunk, NOW) {
            Ok((n, _)) if n == chunk.len() => off += n as u64,
            Ok(_) | Err(stitch_diskfs::DiskError::NoSpace(_)) => break,
            Err(e) => panic!("{e}"),
        }
    }
    fs.unlink(root, b"big", NOW).unwrap();
    let (ino, _) = fs.create(root, b"again", 0o644, 0, 0, NOW).unwrap();
    let mut off = 0u64;
    for _ in 0..16 {
        let (n, _) = fs.write(ino, off, &chunk, NOW).unwrap();
        assert_eq!(n, chunk.len(), "short write with freed space");
        off += n as u64;
    }
    fs.unmount(NOW).unwrap();
    let path = tmp.path().join("full.img");
    std::fs::write(&path, dev.snapshot()).unwrap();
    let E2fsck {
        code, stdout: out, ..
    } = e2fsck(&path, &["-fn"]);
    assert_eq!(code, 0, "{out}");
}

/// A device that fails a write or a flush in the middle of journaled work:
/// the error reaches the caller, every later write refuses, and what the
/// device holds recovers to a clean file system.
#[test]
fn a_failing_device_loses_nothing_silently() {
    use stitch_blockdev::{FaultDevice, FaultKind};
    let tmp = stitch_testkit::scratch();
    let base = journaled_image();
    for (n, flush) in [(5, false), (40, false), (3, true), (12, true)] {
        let mem = MemDevice::from_image(4096, base.clone()).unwrap();
        let dev = Arc::new(FaultDevice::new(mem).unwrap());
        let mut fs =
            DiskFs::mount(dev.clone(), Consistency::Journal(DataMode::Ordered), NOW).unwrap();
        let (w, f, _) = dev.counts();
        if flush {
            dev.fail_nth_flush(f + n, FaultKind::Io);
        } else {
            dev.fail_nth_write(w + n, FaultKind::Io);
        }
        let root = fs.root();
        let mut failed = None;
        let mut synced = Vec::new();
        for i in 0..200u32 {
            let step = (|| -> Result<bool, stitch_diskfs::DiskError> {
                let (ino, _) = fs.create(root, format!("f{i}").as_bytes(), 0o644, 0, 0, NOW)?;
                let (_, p) = fs.write(ino, 0, &vec![i as u8 + 1; 5000], NOW)?;
                if i % 3 == 0 {
                    fs.sync_patch(p)?;
                    return Ok(true);
                }
                Ok(false)
            })();
            match step {
                Ok(true) => synced.push(i),
                Ok(false) => {}
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let e = failed.unwrap_or_else(|| panic!("fault {n} (flush {flush}) never surfaced"));
        assert!(
            e.to_string().contains("I/O")
                || e.to_string().contains("stopped")
                || e.to_string().contains("device"),
            "{e}"
        );
        assert!(fs.sync().is_err(), "a write after the failure was accepted");
        let image = dev.inner().snapshot();
        let (recovered, _) = {
            let d = Arc::new(MemDevice::from_image(4096, image).unwrap());
            let mut fs = DiskFs::mount(d.clone(), Consistency::SoftUpdates, NOW).unwrap();
            let tree = snapshot(&mut fs).unwrap();
            for i in &synced {
                let n = tree.get(&format!("/f{i}"));
                assert_eq!(
                    n.map(|n| n.bytes.clone()),
                    Some(vec![*i as u8 + 1; 5000]),
                    "fsynced file f{i} lost after fault {n:?}"
                );
            }
            fs.unmount(NOW).unwrap();
            (d.snapshot(), ())
        };
        let path = tmp.path().join("failed.img");
        std::fs::write(&path, recovered).unwrap();
        let E2fsck {
            code, stdout: out, ..
        } = e2fsck(&path, &["-fn"]);
        assert_eq!(code, 0, "fault {n} (flush {flush}):\n{out}");
    }
}

/// A directory growing a block in ordered mode (found by `bench modes`):
/// the new directory block is metadata, journaled with its entries, not
/// data that the commit would wait on while it waits on the commit.
#[test]
fn a_growing_directory_commits_in_every_data_mode() {
    let tmp = stitch_testkit::scratch();
    let base = journaled_image();
    for data in [DataMode::Writeback, DataMode::Ordered, DataMode::Journal] {
        let dev = Arc::new(MemDevice::from_image(4096, base.clone()).unwrap());
        let mut fs = DiskFs::mount(dev.clone(), Consistency::Journal(data), NOW).unwrap();
        let (d, _) = fs.mkdir(fs.root(), b"d", 0o755, 0, 0, NOW).unwrap();
        for i in 0..200 {
            let name = format!("{i:054}");
            fs.create(d, name.as_bytes(), 0o644, 0, 0, NOW).unwrap();
        }
        fs.sync().unwrap_or_else(|e| panic!("data={data}: {e}"));
        assert_eq!(fs.readdir(d).unwrap().len(), 202);
        fs.unmount(NOW).unwrap();
        let path = tmp.path().join("dir.img");
        std::fs::write(&path, dev.snapshot()).unwrap();
        let E2fsck {
            code, stdout: out, ..
        } = e2fsck(&path, &["-fn"]);
        assert_eq!(code, 0, "data={data}: {out}");
    }
}

/// Allocation patches the group descriptors, not the superblock (as in ext3
/// and ext4): a small commit leaves the superblock out of the log, so a
/// crash leaves its free totals behind. e2fsck -fn then names them and
/// exits 0, our fsck calls them notes, mount sums the descriptors again,
/// and unmount writes the totals exact.
#[test]
fn the_superblock_totals_stay_out_of_small_commits() {
    let tmp = stitch_testkit::scratch();
    let dev = Arc::new(MemDevice::from_image(4096, journaled_image()).unwrap());
    let mode = Consistency::Journal(DataMode::Ordered);
    let mut fs = DiskFs::mount(dev.clone(), mode, NOW).unwrap();
    let root = fs.root();
    let (ino, _) = fs.create(root, b"f", 0o644, 0, 0, NOW).unwrap();
    let (_, p) = fs.write(ino, 0, &[7u8; 1000], NOW).unwrap();
    fs.sync_patch(p).unwrap();
    let crashed = tmp.path().join("crashed.img");
    std::fs::write(&crashed, dev.snapshot()).unwrap();
    drop(fs);

    // What the log holds, in e2fsprogs' words.
    let out = Command::new("debugfs")
        .args(["-R", "logdump -a"])
        .arg(&crashed)
        .output()
        .expect("debugfs (e2fsprogs)");
    let dump = String::from_utf8_lossy(&out.stdout);
    let logged: Vec<u64> = dump
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("FS block ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(
        logged.contains(&1),
        "the group descriptors are logged:\n{dump}"
    );
    assert!(!logged.contains(&0), "the superblock is not:\n{dump}");

    let E2fsck {
        code, stdout: out, ..
    } = e2fsck(&crashed, &["-E", "journal_only", "-y"]);
    assert!(matches!(code, 0 | 1), "replay exit {code}:\n{out}");
    let E2fsck {
        code, stdout: out, ..
    } = e2fsck(&crashed, &["-fn"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("Free inodes count wrong ("), "{out}");
    let ours = stitch_fsck::check(&crashed, &Default::default(), &mut |_, _, _| {}).unwrap();
    assert!(ours.is_clean(), "{ours}");
    assert!(
        ours.findings
            .iter()
            .any(|f| f.class == stitch_fsck::Class::Note),
        "{ours}"
    );

    let dev = Arc::new(MemDevice::from_image(4096, std::fs::read(&crashed).unwrap()).unwrap());
    let fs = DiskFs::mount(dev.clone(), mode, NOW).unwrap();
    let (sb, counted) = (fs.superblock(), &ours.summary);
    assert_eq!(
        (sb.free_blocks_count_lo, sb.free_inodes_count),
        (
            counted.blocks - counted.blocks_used,
            counted.inodes - counted.inodes_used
        ),
        "mount takes the totals from the descriptors"
    );
    fs.unmount(NOW).unwrap();
    let clean = tmp.path().join("clean.img");
    std::fs::write(&clean, dev.snapshot()).unwrap();
    let E2fsck {
        code, stdout: out, ..
    } = e2fsck(&clean, &["-fn"]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("count wrong"), "{out}");
    let ours = stitch_fsck::check(&clean, &Default::default(), &mut |_, _, _| {}).unwrap();
    assert!(ours.findings.is_empty(), "{ours}");
}
