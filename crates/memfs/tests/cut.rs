//! A flush's cut under concurrent changes (McoreFS §4.2), judged against a
//! model of what each thread did. Three threads pass files along a chain of
//! shared directories, each step waiting for the step before it on another
//! thread:
//!
//! - the producer creates `in/k` and writes it;
//! - the mover renames `in/k` to `mid/k` once the producer has written it;
//! - the linker, once the mover has moved it, links `mid/k` as `out/k`,
//!   unlinks `mid/k` and appends `!`.
//!
//! Meanwhile a fourth thread syncs in a loop, as the background flusher
//! does (every eighth file, the producer waits for a whole sync, so cuts
//! fall among the changes however the threads are scheduled); in the
//! `own` runs memfs also flushes on its own every 2 ms and under a memory
//! bound of 8 pages. A cut takes every operation that began before it (the
//! gate) and none that began after, so the image at a flush's end must be
//! the state after a prefix of each thread's operations, and those
//! prefixes must respect the waits (a file is never moved on disk before
//! it was written there).
//!
//! - The image durable when a sync returned (up to 40 a run, among the
//!   syncs that began after some operation the one before had not) must
//!   be such a state, holding at least what each thread had finished when
//!   the sync began and at most one operation a thread more than they had
//!   finished once the log's end was read. Soft updates may leave a
//!   renamed file's link count one too high there (diskfs's `rename` does
//!   not wait for it to come down).
//! - Crash states (40 sampled a run, after the directories' sync): e2fsck
//!   and our fsck must find them consistent, soft updates' leaks allowed.
//!   In journal mode a flush is one transaction, so each must also be
//!   such a state, holding at least what was done when the last sync the
//!   crash follows began.
//! - In soft updates a crash inside a flush may show any consistent part
//!   of it: the crash states, and the sync images when memfs's own flushes
//!   run beside the syncer (they may hold part of one), need only keep
//!   every file written before the last sync began under some name, with
//!   its bytes (an unlink once lost a linked file's last name there).

mod common;

use common::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use stitch_blockdev::record::{crash_states, CrashPoint, CrashState, Enumerate, ImageBuilder};
use stitch_diskfs::{Consistency, DataMode};
use stitch_memfs::{FlushCause, Kind, MemFs, RenameFlags};

/// Files passed along the chain.
const FILES: usize = 48;
/// Crash states sampled from the whole run.
const CRASHES: usize = 40;
/// Images after a sync that are looked at (evenly spaced over the run).
const SYNC_IMAGES: usize = 40;
/// Operations per file of each thread.
const PRODUCER_OPS: usize = 2;
const MOVER_OPS: usize = 1;
const LINKER_OPS: usize = 3;
/// Each thread's pause after each operation: several operations a sync
/// (a sync takes a millisecond or more on the slow device), so cuts fall
/// among them.
const PAUSE: Duration = Duration::from_micros(200);
/// The producer waits for a whole sync after every this many files.
const SYNC_EVERY: usize = 8;
/// A run still going after this long is taken for a deadlock.
const LIMIT: Duration = Duration::from_secs(300);

/// The bytes the producer writes into file `k`: about one page, more for
/// some, so files take pages of their own (and a bound of 8 bites).
fn content(k: usize) -> Vec<u8> {
    let mut v = format!("file {k}:").into_bytes();
    v.resize(3000 + (k % 5) * 700, b'a' + (k % 26) as u8);
    v
}

/// How many operations each thread has finished, in its own order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Done {
    producer: usize,
    mover: usize,
    linker: usize,
}

impl Done {
    /// Whether the threads could have been at these counts together: the
    /// mover moves file k only after the producer wrote it, the linker links
    /// k only after the mover moved it.
    fn reachable(&self) -> bool {
        self.mover <= self.producer / PRODUCER_OPS && self.linker.div_ceil(LINKER_OPS) <= self.mover
    }

    fn within(&self, lo: &Done, hi: &Done) -> bool {
        let each = |f: fn(&Done) -> usize| f(lo) <= f(self) && f(self) <= f(hi);
        each(|d| d.producer) && each(|d| d.mover) && each(|d| d.linker)
    }
}

/// A state as the test sees it: `dir/name` to (link count, bytes).
type Shape = BTreeMap<String, (u32, Vec<u8>)>;

/// The state after `d`.
fn expected(d: Done) -> Shape {
    let mut shape = Shape::new();
    for k in 0..FILES {
        let (p, m, l) = (k * PRODUCER_OPS, k * MOVER_OPS, k * LINKER_OPS);
        if d.producer <= p {
            continue;
        }
        let mut bytes = if d.producer > p + 1 {
            content(k)
        } else {
            Vec::new()
        };
        if d.linker > l + 2 {
            bytes.push(b'!');
        }
        let linked = d.linker > l;
        let nlink = if linked && d.linker <= l + 1 { 2 } else { 1 };
        if d.mover <= m {
            shape.insert(format!("in/{k}"), (nlink, bytes));
            continue;
        }
        if d.linker <= l + 1 {
            shape.insert(format!("mid/{k}"), (nlink, bytes.clone()));
        }
        if linked {
            shape.insert(format!("out/{k}"), (nlink, bytes));
        }
    }
    shape
}

/// The state memfs shows in the three directories.
fn observe(fs: &MemFs) -> Shape {
    let mut shape = Shape::new();
    for dir in ["in", "mid", "out"] {
        let d = fs.lookup(fs.root(), dir.as_bytes()).unwrap().ino;
        for e in fs.readdir(d).unwrap() {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let a = fs.getattr(e.ino).unwrap();
            let bytes = fs.read(e.ino, 0, a.size as u32).unwrap();
            let name = String::from_utf8(e.name).unwrap();
            shape.insert(format!("{dir}/{name}"), (a.nlink, bytes));
        }
    }
    shape
}

/// Whether `seen` is the state `want`: the same names and bytes, the same
/// link counts or, where `leaks_ok`, one too high (soft updates lowers a
/// renamed file's count with a write after the rename's, and a sync does
/// not wait for it: diskfs's `rename`).
fn fits(seen: &Shape, want: &Shape, leaks_ok: bool) -> bool {
    seen.len() == want.len()
        && seen.iter().zip(want).all(|((p, (n, b)), (q, (m, c)))| {
            p == q && b == c && (n == m || (leaks_ok && *n == m + 1))
        })
}

/// The counts `shape` is the state after, if it is the state after any
/// reachable counts. The files present, moved and linked fix the counts
/// but for each thread's last file, whose state names which of its
/// operations were done.
fn explain(shape: &Shape, leaks_ok: bool) -> Option<Done> {
    let names = |dir: &str| {
        shape
            .keys()
            .filter_map(|p| p.strip_prefix(dir))
            .collect::<std::collections::BTreeSet<_>>()
    };
    let (ins, mids, outs) = (names("in/"), names("mid/"), names("out/"));
    let present = ins.len() + mids.union(&outs).count();
    let moved = present - ins.len();
    let around = |n: usize, ops: usize| (n.max(1) - 1) * ops..=n * ops;
    for producer in around(present, PRODUCER_OPS) {
        for linker in around(outs.len(), LINKER_OPS) {
            let d = Done {
                producer,
                mover: moved,
                linker,
            };
            if d.reachable() && fits(shape, &expected(d), leaks_ok) {
                return Some(d);
            }
        }
    }
    None
}

/// Every name in `shape` with its link count and length, for a failure
/// message.
fn listing(shape: &Shape) -> String {
    let mut out = Vec::new();
    for (path, (nlink, bytes)) in shape {
        out.push(format!("{path} nlink {nlink} {} bytes", bytes.len()));
    }
    out.join(", ")
}

/// Mounts `image` and explains what it holds.
fn judge(image: Vec<u8>, mode: Consistency, what: &str) -> Done {
    let fs = mount_on(device(image), mode, opts());
    let shape = observe(&fs);
    explain(&shape, mode == Consistency::SoftUpdates).unwrap_or_else(|| {
        panic!(
            "{what}: the tree is no prefix of the threads' operations: {}",
            listing(&shape)
        )
    })
}

/// What soft updates promise a crash inside a flush: every file written
/// before `before` (what a sync made durable) still has a name, in any
/// directory, holding what the producer wrote (and maybe the `!`).
fn keeps_names(image: Vec<u8>, mode: Consistency, before: Done, what: &str) {
    let fs = mount_on(device(image), mode, opts());
    let shape = observe(&fs);
    for k in 0..before.producer / PRODUCER_OPS {
        let mut full = content(k);
        full.push(b'!');
        let found = ["in", "mid", "out"].iter().any(|dir| {
            shape
                .get(&format!("{dir}/{k}"))
                .is_some_and(|(_, b)| *b == content(k) || *b == full)
        });
        assert!(
            found,
            "{what}: file {k}, written before a sync that began at {before:?}, \
             is gone: {}",
            listing(&shape)
        );
    }
}

/// Each thread's count of finished operations, published as it goes.
#[derive(Default)]
struct Progress {
    producer: AtomicUsize,
    mover: AtomicUsize,
    linker: AtomicUsize,
    /// Syncs the syncer has finished.
    syncs: AtomicUsize,
    /// A thread panicked: the others stop waiting for it.
    failed: AtomicBool,
}

/// Marks `Progress::failed` if its thread panics while it is held.
struct FailsOthers<'a>(&'a Progress);

impl Drop for FailsOthers<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.failed.store(true, Ordering::Release);
        }
    }
}

impl Progress {
    fn now(&self) -> Done {
        Done {
            producer: self.producer.load(Ordering::Acquire),
            mover: self.mover.load(Ordering::Acquire),
            linker: self.linker.load(Ordering::Acquire),
        }
    }

    /// Counts an operation done and pauses.
    fn did(count: &AtomicUsize) {
        count.fetch_add(1, Ordering::AcqRel);
        std::thread::sleep(PAUSE);
    }

    /// Waits for `count` to reach `at_least`; a panic if another thread
    /// failed, so that one failure does not leave the test hanging.
    fn wait(&self, count: &AtomicUsize, at_least: usize) {
        while count.load(Ordering::Acquire) < at_least {
            assert!(
                !self.failed.load(Ordering::Acquire),
                "another thread failed"
            );
            // A sleep, not a spin: two cores run four threads here.
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

/// A sync the syncer made: the counts finished before it began and after
/// it returned, and where the device log stood then.
struct Synced {
    before: Done,
    after: Done,
    point: CrashPoint,
}

fn run(mode: Consistency, own: bool) {
    let (dev, fs, causes) = recorded_mount(mode, Duration::from_millis(1), own.then_some(8));
    let dir = |name: &str| {
        fs.mkdir(fs.root(), name.as_bytes(), 0o755, 0, 0)
            .unwrap()
            .ino
    };
    let (din, dmid, dout) = (dir("in"), dir("mid"), dir("out"));
    fs.sync().unwrap();
    // Crash states from before this point lack the directories.
    let setup = dev.log().end();
    let progress = Progress::default();
    let stop = AtomicBool::new(false);
    let none = RenameFlags::default();
    let syncs: Vec<Synced> = std::thread::scope(|s| {
        let (fs, p, dev, stop) = (&fs, &progress, &dev, &stop);
        let producer = s.spawn(move || {
            let _f = FailsOthers(p);
            for k in 0..FILES {
                let name = k.to_string();
                let f = fs
                    .mknod(din, name.as_bytes(), Kind::File, 0o644, (0, 0), 0, 0)
                    .unwrap();
                Progress::did(&p.producer);
                fs.write(f.ino, 0, &content(k), false).unwrap();
                Progress::did(&p.producer);
                if (k + 1) % SYNC_EVERY == 0 {
                    // The next sync may have begun already: wait for the
                    // one after it.
                    p.wait(&p.syncs, p.syncs.load(Ordering::Acquire) + 2);
                }
            }
        });
        let mover = s.spawn(move || {
            let _f = FailsOthers(p);
            for k in 0..FILES {
                p.wait(&p.producer, (k + 1) * PRODUCER_OPS);
                let name = k.to_string();
                fs.rename(din, name.as_bytes(), dmid, name.as_bytes(), none)
                    .unwrap();
                Progress::did(&p.mover);
            }
        });
        let linker = s.spawn(move || {
            let _f = FailsOthers(p);
            for k in 0..FILES {
                p.wait(&p.mover, (k + 1) * MOVER_OPS);
                let name = k.to_string();
                let f = fs.lookup(dmid, name.as_bytes()).unwrap();
                fs.link(f.ino, dout, name.as_bytes()).unwrap();
                Progress::did(&p.linker);
                fs.unlink(dmid, name.as_bytes()).unwrap();
                Progress::did(&p.linker);
                fs.write(f.ino, f.size, b"!", true).unwrap();
                Progress::did(&p.linker);
            }
        });
        let syncer = s.spawn(move || {
            let _f = FailsOthers(p);
            let mut syncs = Vec::new();
            p.wait(&p.producer, 1);
            while !stop.load(Ordering::Acquire) {
                let before = p.now();
                fs.sync().unwrap();
                let point = dev.log().end();
                let after = p.now();
                syncs.push(Synced {
                    before,
                    after,
                    point,
                });
                p.syncs.fetch_add(1, Ordering::AcqRel);
            }
            syncs
        });
        let joined = [producer.join(), mover.join(), linker.join()];
        stop.store(true, Ordering::Release);
        let syncs = syncer.join().unwrap();
        for j in joined {
            j.unwrap();
        }
        syncs
    });
    let last = progress.now();
    fs.unmount().unwrap();
    let all = Done {
        producer: FILES * PRODUCER_OPS,
        mover: FILES * MOVER_OPS,
        linker: FILES * LINKER_OPS,
    };
    assert_eq!(last, all);
    let causes = causes.lock().unwrap();
    let count = |want: FlushCause| causes.iter().filter(|c| **c == want).count();
    let (periodic, pressure) = (count(FlushCause::Periodic), count(FlushCause::Pressure));
    println!(
        "{mode:?}, own flushes {own}: {} syncs, {periodic} periodic, {pressure} under pressure",
        syncs.len()
    );
    if own {
        assert!(
            periodic > 0 && pressure > 0,
            "{periodic} periodic, {pressure} under pressure"
        );
    } else {
        assert!(causes.is_empty(), "{causes:?}");
    }
    let log = dev.log();
    let base = dev.base();
    // What each sync left durable: a reachable prefix holding at least
    // what was done before the sync began, and nothing past what was done
    // once the log's end was read (every flush on the disk by then was cut
    // before, and each thread may have finished one more operation than it
    // had counted). But in soft updates a flush memfs makes on its own may have begun
    // after the sync and be part way there when the log's end is read: a
    // crash inside a soft-updates flush may show any part of it, so those
    // images are judged consistent only.
    let precise = !own || mode != Consistency::SoftUpdates;
    let mut explained = Vec::new();
    // A sync that began where the one before it did shows nothing new
    // (thousands of empty syncs may pass while one operation waits for
    // its flush): only the first of each run is looked at.
    let firsts: Vec<(usize, &Synced)> = syncs
        .iter()
        .enumerate()
        .filter(|(n, y)| *n == 0 || syncs[n - 1].before != y.before)
        .collect();
    let step = (firsts.len() / SYNC_IMAGES).max(1);
    for (i, &(n, sync)) in firsts.iter().step_by(step).enumerate() {
        let durable = CrashState::in_order(&log, log.committed_at(sync.point)).unwrap();
        let image = stitch_blockdev::record::build_image(&base, &log, &durable).unwrap();
        let what = format!(
            "{mode:?}, own flushes {own}, sync {n} (begun after {:?}, returned before {:?})",
            sync.before, sync.after
        );
        if !precise || i % 10 == 0 {
            check_image(&image, true).unwrap_or_else(|r| panic!("{what}: {r}"));
        }
        if !precise {
            keeps_names(image, mode, sync.before, &what);
            continue;
        }
        let d = judge(image, mode, &what);
        let hi = Done {
            producer: sync.after.producer + 1,
            mover: sync.after.mover + 1,
            linker: sync.after.linker + 1,
        };
        assert!(
            d.within(&sync.before, &hi),
            "{what}: the image holds {d:?}; the threads had done {:?} when the sync began \
             and {:?} after it returned",
            sync.before,
            sync.after
        );
        explained.push(d);
    }
    explained.dedup();
    assert!(
        !precise || explained.len() >= 3,
        "{mode:?}: the syncs found only {explained:?}: no cut fell among the changes"
    );
    // Any crash, with any writes in flight lost: consistent (soft updates'
    // leaks allowed), and in journal mode a reachable prefix too, holding
    // what was done when the last sync before the crash began.
    let enumerate = Enumerate {
        max_states: 4,
        ..Default::default()
    };
    let states: Vec<CrashState> = crash_states(&log, &enumerate)
        .unwrap()
        .filter(|s| s.committed >= setup)
        .collect();
    let step = (states.len() / CRASHES).max(1);
    let mut images = ImageBuilder::new(&base, &log).unwrap();
    for (n, state) in states.iter().enumerate().step_by(step) {
        let image = images.build(state).unwrap();
        let what = format!("{mode:?}, own flushes {own}, crash state {n}");
        check_image(&image, true).unwrap_or_else(|r| panic!("{what}: {r}"));
        let synced = syncs
            .iter()
            .rev()
            .find(|y| y.point <= *state.points.start());
        if mode == Consistency::SoftUpdates {
            if let Some(y) = synced {
                keeps_names(image, mode, y.before, &what);
            }
        } else {
            let d = judge(image, mode, &what);
            if let Some(y) = synced {
                assert!(
                    d.within(&y.before, &all),
                    "{what}: the image holds {d:?}, after a sync begun at {:?}",
                    y.before
                );
            }
        }
    }
}

/// Both runs of `mode`, each failing rather than hanging on a deadlock.
fn both(mode: Consistency) {
    for own in [false, true] {
        bounded(LIMIT, move || run(mode, own))
            .unwrap_or_else(|| panic!("{mode:?}, own flushes {own}: stuck for {LIMIT:?}"));
    }
}

#[test]
fn sync_cuts_among_concurrent_changes_in_soft_updates() {
    both(Consistency::SoftUpdates);
}

#[test]
fn sync_cuts_among_concurrent_changes_in_journal_mode() {
    both(Consistency::Journal(DataMode::Ordered));
}

#[test]
fn sync_cuts_among_concurrent_changes_with_journaled_data() {
    both(Consistency::Journal(DataMode::Journal));
}
