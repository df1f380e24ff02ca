//! The registry over a process table the test controls: forks, threads,
//! exits, orphans adopted by a subreaper, and pids reused.

use super::*;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// A process table: threads by tid, each alive until it exits.
#[derive(Default)]
struct Table {
    threads: HashMap<u32, (ThreadInfo, Arc<AtomicBool>)>,
    next_start: u64,
    /// Watches asked whether their thread or process exited.
    polls: Arc<AtomicU64>,
}

#[derive(Clone, Default)]
struct Fake(Arc<parking_lot::Mutex<Table>>);

struct Flag(Arc<AtomicBool>, Arc<AtomicU64>);

impl Watch for Flag {
    fn exited(&self) -> bool {
        self.1.fetch_add(1, Ordering::SeqCst);
        !self.0.load(Ordering::SeqCst)
    }
}

impl Fake {
    /// A new process `pid` whose parent is `parent`, run by `uid`.
    fn spawn(&self, pid: u32, parent: u32, uid: u32) -> ProcKey {
        let start = {
            let mut t = self.0.lock();
            t.next_start += 1;
            t.next_start
        };
        self.spawn_at(pid, parent, uid, start)
    }

    /// A new process `pid` started in the clock tick `start`, as another
    /// that had that pid may have been.
    fn spawn_at(&self, pid: u32, parent: u32, uid: u32, start: u64) -> ProcKey {
        let key = ProcKey {
            pid: Pid(pid),
            start,
        };
        let info = ThreadInfo {
            process: key,
            parent: Pid(parent),
            uid,
        };
        let alive = Arc::new(AtomicBool::new(true));
        let old = self.0.lock().threads.insert(pid, (info, alive));
        assert!(old.is_none(), "pid {pid} is in use");
        key
    }

    /// A new thread `tid` in the process of `pid`.
    fn thread(&self, pid: u32, tid: u32) {
        let mut t = self.0.lock();
        let info = t.threads[&pid].0;
        t.threads
            .insert(tid, (info, Arc::new(AtomicBool::new(true))));
    }

    /// Thread or process `tid` exits (a process's children are adopted by
    /// `reaper`).
    fn exit(&self, tid: u32, reaper: u32) {
        let mut t = self.0.lock();
        let (info, alive) = t.threads.remove(&tid).unwrap();
        alive.store(false, Ordering::SeqCst);
        if info.process.pid.0 == tid {
            for (i, _) in t.threads.values_mut() {
                if i.parent.0 == tid {
                    i.parent = Pid(reaper);
                }
            }
        }
    }
}

impl Procs for Fake {
    fn thread(&self, tid: Tid) -> Option<ThreadInfo> {
        Some(self.0.lock().threads.get(&tid.0)?.0)
    }

    fn watch_thread(&self, tid: Tid) -> Option<Box<dyn Watch>> {
        let t = self.0.lock();
        let alive = t.threads.get(&tid.0)?.1.clone();
        Some(Box::new(Flag(alive, t.polls.clone())))
    }

    fn watch_process(&self, key: ProcKey) -> Option<Box<dyn Watch>> {
        let t = self.0.lock();
        let (info, alive) = t.threads.get(&key.pid.0)?;
        let flag = Flag(alive.clone(), t.polls.clone());
        (info.process == key).then(|| Box::new(flag) as Box<dyn Watch>)
    }
}

/// A registry over `fake`; lookups prune only when a test says so
/// (`prune_every` of zero), so what a test asserts of `prune` holds
/// however slowly it runs.
fn registry(fake: &Fake, limits: Limits) -> Registry<Vec<u32>> {
    let limits = Limits {
        prune_every: match limits.prune_every {
            Duration::ZERO => Duration::ZERO,
            _ => Duration::MAX,
        },
        ..limits
    };
    Registry::new(Box::new(fake.clone()), limits)
}

/// The state `tid` sees on an ordinary request.
fn seen(r: &Registry<Vec<u32>>, tid: u32) -> Option<Vec<u32>> {
    r.lookup(Tid(tid)).map(|c| c.state.lock().clone())
}

fn set(r: &Registry<Vec<u32>>, tid: u32, v: u32) {
    r.enter(Tid(tid)).unwrap().state.lock().push(v);
}

#[test]
fn with_no_state_anywhere_nothing_is_asked_of_the_system() {
    let fake = Fake::default();
    fake.spawn(100, 1, 0);
    let r = registry(&fake, Limits::default());
    assert_eq!(seen(&r, 100), None);
    assert_eq!(r.resolved(), 0);
    assert_eq!(r.lookup(Tid(0)).map(|_| ()), None);
    assert_eq!(r.enter(Tid(0)).unwrap_err(), CallerError::NoCaller);
}

#[test]
fn children_grandchildren_and_threads_inherit_and_exec_keeps() {
    let fake = Fake::default();
    fake.spawn(100, 1, 0);
    let r = registry(&fake, Limits::default());
    set(&r, 100, 7);
    fake.spawn(200, 100, 0);
    fake.spawn(300, 200, 0);
    fake.thread(100, 101);
    assert_eq!(seen(&r, 200), Some(vec![7]), "a child");
    assert_eq!(seen(&r, 300), Some(vec![7]), "a grandchild");
    assert_eq!(seen(&r, 101), Some(vec![7]), "a thread shares");
    // A child's copy is its own (fork semantics).
    set(&r, 200, 8);
    assert_eq!(seen(&r, 200), Some(vec![7, 8]));
    assert_eq!(seen(&r, 100), Some(vec![7]));
    // exec changes neither pid nor start time: the state stays.
    assert_eq!(seen(&r, 300), Some(vec![7]));
}

#[test]
fn an_orphan_is_found_through_the_subreaper_that_adopted_it() {
    let fake = Fake::default();
    fake.spawn(10, 1, 0); // the wrapper, a subreaper
    let r = registry(&fake, Limits::default());
    set(&r, 10, 1);
    fake.spawn(20, 10, 0);
    fake.spawn(30, 20, 0);
    // The parent exits before the grandchild is ever seen.
    fake.exit(20, 10);
    assert_eq!(seen(&r, 30), Some(vec![1]));
}

#[test]
fn a_process_first_seen_without_state_never_inherits_later_state() {
    let fake = Fake::default();
    fake.spawn(100, 1, 0);
    fake.spawn(200, 100, 0);
    fake.spawn(999, 1, 0);
    let r = registry(&fake, Limits::default());
    set(&r, 999, 5); // someone holds state: lookups now ask
    assert_eq!(seen(&r, 200), None);
    set(&r, 100, 7);
    assert_eq!(seen(&r, 200), None, "forked before: no inheritance");
    assert_eq!(seen(&r, 100), Some(vec![7]));
}

#[test]
fn a_reused_pid_is_a_new_process() {
    let fake = Fake::default();
    fake.spawn(100, 1, 0);
    let r = registry(&fake, Limits::default());
    set(&r, 100, 7);
    let first = r.lookup(Tid(100)).unwrap().process;
    fake.exit(100, 1);
    fake.spawn(500, 1, 0);
    set(&r, 500, 1);
    // pid 100 again, a stranger to the old 100.
    let again = fake.spawn(100, 1, 0);
    assert_ne!(again, first);
    assert_eq!(seen(&r, 100), None);
    assert_eq!(r.prune(), 1, "the old 100's state goes");
    assert_eq!(r.len(), 1);
}

#[test]
fn a_pid_reused_within_the_tick_of_its_start_is_a_new_process() {
    let fake = Fake::default();
    fake.spawn(10, 1, 0);
    let r = registry(&fake, Limits::default());
    set(&r, 10, 1);
    let old = fake.spawn(100, 10, 0);
    set(&r, 100, 7);
    assert_eq!(seen(&r, 100), Some(vec![1, 7]));
    let old_id = r.lookup(Tid(100)).unwrap().id;
    fake.exit(100, 10);
    // The same pid, started in the same clock tick: the same key.
    assert_eq!(fake.spawn_at(100, 10, 0, old.start), old);
    assert_eq!(seen(&r, 100), Some(vec![1]), "the old 100's state");
    assert_ne!(r.lookup(Tid(100)).unwrap().id, old_id);
    set(&r, 100, 8);
    // Found as an ancestor too: a child of a third 100, on the same key,
    // skips the second's state for its grandparent's.
    fake.exit(100, 10);
    fake.spawn_at(100, 10, 0, old.start);
    fake.spawn(200, 100, 0);
    assert_eq!(seen(&r, 200), Some(vec![1]));
}

#[test]
fn a_reused_thread_id_is_resolved_again() {
    let fake = Fake::default();
    fake.spawn(100, 1, 0);
    fake.spawn(200, 1, 0);
    let r = registry(&fake, Limits::default());
    set(&r, 100, 7);
    fake.thread(100, 150);
    assert_eq!(seen(&r, 150), Some(vec![7]));
    fake.exit(150, 1);
    // tid 150 now a thread of 200, which holds no state.
    fake.thread(200, 150);
    assert_eq!(seen(&r, 150), None);
}

#[test]
fn state_goes_with_its_process_and_the_table_is_bounded() {
    let fake = Fake::default();
    let limits = Limits {
        processes: 2,
        threads: 2,
        ..Limits::default()
    };
    let r = registry(&fake, limits);
    for pid in [10, 20, 30] {
        fake.spawn(pid, 1, 0);
    }
    set(&r, 10, 1);
    set(&r, 20, 2);
    assert_eq!(r.enter(Tid(30)).unwrap_err(), CallerError::TooMany(2));
    // A child that would inherit goes without at the bound.
    fake.spawn(11, 10, 0);
    assert_eq!(seen(&r, 11), None);
    fake.exit(10, 1);
    set(&r, 30, 3);
    assert_eq!(r.len(), 2);
    assert_eq!(seen(&r, 30), Some(vec![3]));
    fake.exit(20, 1);
    fake.exit(30, 1);
    assert_eq!(r.prune(), 2);
    assert!(r.is_empty());
    // Nobody holds state again: back to asking nothing.
    let before = r.resolved();
    fake.spawn(40, 1, 0);
    assert_eq!(seen(&r, 40), None);
    assert_eq!(r.resolved(), before);
}

#[test]
fn the_caller_carries_its_user() {
    let fake = Fake::default();
    fake.spawn(100, 1, 1000);
    let r = registry(&fake, Limits::default());
    let c = r.enter(Tid(100)).unwrap();
    assert_eq!(c.uid, 1000);
    assert_eq!(c.process.pid, Pid(100));
    assert_eq!(r.enter(Tid(4242)).unwrap_err(), CallerError::Gone(4242));
}

#[test]
fn each_state_has_a_number_of_its_own_closed_when_its_process_exits() {
    let fake = Fake::default();
    let top = fake.spawn(100, 1, 0);
    let r = registry(&fake, Limits::default());
    set(&r, 100, 7);
    fake.spawn(200, 100, 1000);
    let child = r.lookup(Tid(200)).unwrap();
    let parent = r.lookup(Tid(100)).unwrap();
    assert_eq!((parent.id, parent.from), (1, None));
    assert_eq!((child.id, child.from, child.uid), (2, Some(top), 1000));
    let found = r.by_id(child.id).unwrap();
    assert_eq!((found.process, found.tid), (child.process, Tid(0)));
    assert!(r.by_id(0).is_none() && r.by_id(3).is_none());
    // Closed at exit, before any prune; a new process gets a new number.
    fake.exit(200, 1);
    assert!(r.by_id(child.id).is_none());
    fake.spawn(200, 100, 0);
    assert_eq!(r.lookup(Tid(200)).unwrap().id, 3);
}

#[test]
fn identify_sees_a_process_without_state() {
    let fake = Fake::default();
    let key = fake.spawn(100, 1, 1000);
    let r = registry(&fake, Limits::default());
    let (info, caller) = r.identify(Tid(100)).unwrap();
    assert_eq!((info.process, info.uid), (key, 1000));
    assert!(caller.is_none() && r.is_empty());
    set(&r, 100, 1);
    assert_eq!(r.identify(Tid(100)).unwrap().1.unwrap().id, 1);
    assert_eq!(r.identify(Tid(0)).unwrap_err(), CallerError::NoCaller);
    assert_eq!(r.identify(Tid(4242)).unwrap_err(), CallerError::Gone(4242));
}

#[test]
fn lookups_drop_the_state_of_exited_processes() {
    let fake = Fake::default();
    fake.spawn(100, 1, 0);
    fake.spawn(200, 1, 0);
    let limits = Limits {
        prune_every: Duration::ZERO,
        ..Limits::default()
    };
    let r = registry(&fake, limits);
    set(&r, 100, 7);
    fake.exit(100, 1);
    assert_eq!(seen(&r, 200), None);
    assert!(r.is_empty(), "the lookup pruned");
    // Nobody holds state: lookups ask nothing again.
    let before = r.resolved();
    fake.spawn(300, 1, 0);
    assert_eq!(seen(&r, 300), None);
    assert_eq!(r.resolved(), before);
}

/// A request that reads sees a remembered thread without asking its
/// watch, and a new process at its first such request just as a lookup
/// would: it inherits there.
#[test]
fn a_reading_request_asks_no_watch_and_still_gives_inheritance() {
    let fake = Fake::default();
    fake.spawn(100, 1, 0);
    let polls = fake.0.lock().polls.clone();
    let asked = || polls.load(Ordering::SeqCst);
    let r = registry(&fake, Limits::default());
    set(&r, 100, 7);
    let before = asked();
    for _ in 0..10 {
        r.notice(Tid(100));
    }
    assert_eq!(asked(), before, "no watch asked for reads");
    assert_eq!(seen(&r, 100), Some(vec![7]));
    assert_eq!(asked(), before + 1, "a lookup asks");
    // A child first seen at a read inherits then: a change its parent
    // makes afterwards does not reach it.
    fake.spawn(101, 100, 0);
    r.notice(Tid(101));
    set(&r, 100, 8);
    assert_eq!(seen(&r, 101), Some(vec![7]));
    // Nobody holding state: a notice resolves nothing.
    let quiet = registry(&fake, Limits::default());
    quiet.notice(Tid(100));
    assert_eq!(quiet.resolved(), 0);
}

#[test]
fn a_state_in_use_when_its_process_is_pruned_lingers_until_let_go() {
    let fake = Fake::default();
    let r = registry(&fake, Limits::default());
    fake.spawn(10, 1, 0);
    fake.spawn(20, 1, 0);
    set(&r, 10, 1);
    set(&r, 20, 2);
    // A request of 10's, in flight when 10 exits (its last release).
    let in_flight = r.lookup(Tid(10)).unwrap();
    fake.exit(10, 1);
    fake.exit(20, 1);
    assert_eq!(r.prune(), 2);
    assert_eq!(r.lingering(), 1, "10's state is still in use");
    drop(in_flight);
    assert_eq!(r.lingering(), 0);
    // A pid reused while the old state is in use: dropped on sight, and
    // lingering too.
    fake.spawn(30, 1, 0);
    set(&r, 30, 3);
    let held = r.lookup(Tid(30)).unwrap();
    fake.exit(30, 1);
    fake.spawn_at(30, 1, 0, held.process.start);
    r.enter(Tid(30)).unwrap();
    assert_eq!(r.lingering(), 1);
    drop(held);
    assert_eq!(r.lingering(), 0);
}
