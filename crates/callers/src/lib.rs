//! Who is calling a stitchfs mount. A FUSE request carries the id of the
//! thread that made it (0 when the kernel made it on its own: release,
//! forget, interrupt, writeback of pages dirtied through a shared
//! mapping). Ordering domains (patchgroups, streams, external synchrony)
//! are state of the process behind that thread, so the frontend asks this
//! registry for it.
//!
//! The rules:
//! - A thread is resolved to its process, which is keyed by pid *and*
//!   start time ([`ProcKey`]): a pid reused by a new process is never
//!   taken for the old one. The key survives `exec` (state does too).
//!   The start time counts clock ticks (10 ms), so a pid reused within
//!   one tick gives the same key: state under a key whose process has
//!   exited (its pidfd says) is dropped when a live process with that key
//!   is first seen, before it could be taken for that process's.
//! - A process first seen inherits a copy of the state of its nearest
//!   ancestor that has some (fork semantics; a process orphaned by its
//!   parent is found through the subreaper that adopted it, which is why
//!   wrappers that start programs make themselves subreapers). A process
//!   first seen without such an ancestor has none, and later changes to
//!   other processes never give it any: only its own calls do
//!   ([`Registry::enter`]). One approximation: a process forked before
//!   its parent took state but first seen after inherits it anyway.
//! - A process's state goes when it exits ([`Registry::prune`], which
//!   lookups run every [`Limits::prune_every`] while some process holds
//!   state, and [`Registry::enter`] when the table is full). Each state
//!   has a number never reused ([`Caller::id`]) by which other processes
//!   may name it ([`Registry::by_id`]); it is closed the moment its
//!   process exits, pruned or not.
//! - Everything is bounded ([`Limits`]): at the bound a caller that wants
//!   new state gets [`CallerError::TooMany`], never unbounded memory.
//!
//! The cost for ordinary requests: while no process holds state (the
//! usual case) a lookup is one atomic load. Otherwise a thread seen before
//! costs a hash lookup and one `poll` of its pidfd (is it still the thread
//! we cached?), about 0.6 µs, and only a hash lookup for a request that
//! reads ([`Registry::notice`]); a new thread reads `/proc` once, and a
//! new process walks its ancestors once. The `poll` cannot be skipped for
//! a while on trust: root picks the next pid (`ns_last_pid`, `clone3`
//! with `set_tid`), so a thread id may name another thread a moment after
//! its thread exits.
//!
//! Architecture invariant: knows threads, processes and users, nothing of
//! what the state means; no other stitch crate.

pub mod procs;

pub use procs::{ProcFs, Procs, ThreadInfo, Watch};

use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// A thread id, as the FUSE request header carries it (0: no caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tid(pub u32);

/// A process id (a thread group's id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pid(pub u32);

/// One process for its whole life: its pid and its start time in clock
/// ticks since boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcKey {
    pub pid: Pid,
    pub start: u64,
}

/// Bounds of the registry.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Processes holding state.
    pub processes: usize,
    /// Threads remembered (a thread not remembered is resolved again on
    /// each request).
    pub threads: usize,
    /// Ancestors walked to find one with state.
    pub depth: usize,
    /// How often a lookup that finds processes holding state looks for
    /// exited ones among them ([`Registry::prune`]), so that their state
    /// goes soon after they do, and lookups are one atomic load again once
    /// none is left.
    pub prune_every: Duration,
}

impl Limits {
    /// The default bounds for `processes` processes holding state: four
    /// threads remembered for each.
    pub fn for_processes(processes: usize) -> Self {
        Limits {
            processes,
            threads: processes.saturating_mul(4),
            depth: 64,
            prune_every: Duration::from_secs(1),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::for_processes(4096)
    }
}

/// Why a caller's state could not be had.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CallerError {
    #[error("the request has no calling process (the kernel made it)")]
    NoCaller,
    #[error("thread {0} exited before its request was served")]
    Gone(u32),
    #[error("{0} processes already hold stitchfs state (the limit)")]
    TooMany(usize),
}

/// The process behind a request, with its state.
#[derive(Debug)]
pub struct Caller<S> {
    pub tid: Tid,
    pub process: ProcKey,
    /// The user the process ran as when it was given state (its real uid
    /// then): the owner of that state.
    pub uid: u32,
    /// The number of this process's state, never reused on this registry
    /// (a handle another process can name it by, [`Registry::by_id`]).
    pub id: u64,
    /// The process whose state this one's began as a copy of, if any.
    pub from: Option<ProcKey>,
    pub state: Arc<Mutex<S>>,
}

impl<S> Clone for Caller<S> {
    fn clone(&self) -> Self {
        Caller {
            tid: self.tid,
            process: self.process,
            uid: self.uid,
            id: self.id,
            from: self.from,
            state: self.state.clone(),
        }
    }
}

struct Process<S> {
    state: Arc<Mutex<S>>,
    uid: u32,
    id: u64,
    from: Option<ProcKey>,
    watch: Option<Box<dyn Watch>>,
}

impl<S> Process<S> {
    fn caller(&self, tid: Tid, key: ProcKey) -> Caller<S> {
        Caller {
            tid,
            process: key,
            uid: self.uid,
            id: self.id,
            from: self.from,
            state: self.state.clone(),
        }
    }
}

struct Thread {
    info: ThreadInfo,
    watch: Option<Box<dyn Watch>>,
}

/// Every process holding state, and the threads seen lately.
pub struct Registry<S> {
    procs: Box<dyn Procs>,
    limits: Limits,
    processes: Mutex<FxHashMap<ProcKey, Process<S>>>,
    threads: Mutex<FxHashMap<Tid, Thread>>,
    /// No process holds state: a lookup need not ask anything.
    none: AtomicBool,
    /// Threads resolved through the system (cache misses), for tests and
    /// statistics.
    resolved: AtomicU64,
    /// The last id given to a process's state.
    last_id: AtomicU64,
    /// When the registry was made, and milliseconds from then to the last
    /// prune that lookups ran.
    born: Instant,
    pruned_at: AtomicU64,
    /// States of exited processes, dropped from the table while a request
    /// in flight still held them (an exiting process's last `release`s
    /// arrive after it is gone): [`Registry::lingering`].
    departed: Mutex<Vec<Weak<Mutex<S>>>>,
}

impl<S: Clone + Default> Registry<S> {
    pub fn new(procs: Box<dyn Procs>, limits: Limits) -> Self {
        Registry {
            procs,
            limits,
            processes: Mutex::new(FxHashMap::default()),
            threads: Mutex::new(FxHashMap::default()),
            none: AtomicBool::new(true),
            resolved: AtomicU64::new(0),
            last_id: AtomicU64::new(0),
            born: Instant::now(),
            pruned_at: AtomicU64::new(0),
            departed: Mutex::new(Vec::new()),
        }
    }

    /// The caller of an ordinary request, if its process holds state (its
    /// own, or inherited when first seen); `None` otherwise, for a request
    /// the kernel made itself (`tid` 0), or for a thread already gone.
    pub fn lookup(&self, tid: Tid) -> Option<Caller<S>> {
        if tid.0 == 0 || self.none.load(Ordering::Acquire) {
            return None;
        }
        self.prune_now_and_then();
        self.resolve(tid, false).ok().flatten()
    }

    /// Sees `tid` for a request that reads and needs no caller: a thread
    /// not remembered is resolved as [`Registry::lookup`] resolves it (so
    /// a process first seen inherits at its first request, whatever it
    /// is); a remembered one costs a hash lookup and no system call. The
    /// one difference from a lookup: a thread id reused by a new process
    /// whose first requests only read is taken for the old thread until
    /// its first lookup, which finds the old one exited and only then
    /// gives the new process its inheritance.
    pub fn notice(&self, tid: Tid) {
        if tid.0 == 0 || self.none.load(Ordering::Acquire) {
            return;
        }
        if self.threads.lock().contains_key(&tid) {
            return;
        }
        self.lookup(tid);
    }

    /// The thread `tid`, whether or not its process holds state, and its
    /// caller if it does: for the calls that report who is calling.
    /// Unlike [`Registry::lookup`] it asks the system even while no
    /// process holds state.
    pub fn identify(&self, tid: Tid) -> Result<(ThreadInfo, Option<Caller<S>>), CallerError> {
        if tid.0 == 0 {
            return Err(CallerError::NoCaller);
        }
        let info = match self.cached_thread(tid) {
            Some(info) => info,
            None => self.resolve_thread(tid)?,
        };
        Ok((info, self.caller(tid, info)))
    }

    /// The state numbered `id` ([`Caller::id`]), if its process still
    /// runs: a process that exited has closed it, whether or not
    /// [`Registry::prune`] has run since. Its `tid` is 0. A walk over
    /// the processes holding state (bounded by [`Limits::processes`]).
    pub fn by_id(&self, id: u64) -> Option<Caller<S>> {
        if id == 0 {
            return None;
        }
        let procs = self.processes.lock();
        let (key, p) = procs.iter().find(|(_, p)| p.id == id)?;
        if self.exited(*key, p.watch.as_deref()) {
            return None;
        }
        Some(p.caller(Tid(0), *key))
    }

    /// The caller's state, made now if its process has none (inherited
    /// from the nearest ancestor that has some, else the default): for the
    /// calls that set state.
    pub fn enter(&self, tid: Tid) -> Result<Caller<S>, CallerError> {
        if tid.0 == 0 {
            return Err(CallerError::NoCaller);
        }
        self.resolve(tid, true)?.ok_or(CallerError::Gone(tid.0))
    }

    /// Processes holding state now.
    pub fn len(&self) -> usize {
        self.processes.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Threads resolved through the system so far (each a cache miss).
    pub fn resolved(&self) -> u64 {
        self.resolved.load(Ordering::Relaxed)
    }

    /// Drops the state of processes that exited and forgets threads that
    /// did; returns how many processes went.
    pub fn prune(&self) -> usize {
        let mut procs = self.processes.lock();
        let before = procs.len();
        let mut held = Vec::new();
        procs.retain(|key, p| {
            let exited = self.exited(*key, p.watch.as_deref());
            if exited && Arc::strong_count(&p.state) > 1 {
                held.push(Arc::downgrade(&p.state));
            }
            !exited
        });
        let gone = before - procs.len();
        self.none.store(procs.is_empty(), Ordering::Release);
        drop(procs);
        self.departed(held);
        self.threads
            .lock()
            .retain(|_, t| !t.watch.as_ref().is_some_and(|w| w.exited()));
        gone
    }

    /// Remembers states just dropped from the table that requests in
    /// flight still hold.
    fn departed(&self, held: Vec<Weak<Mutex<S>>>) {
        if !held.is_empty() {
            let mut departed = self.departed.lock();
            departed.retain(|w| w.strong_count() > 0);
            departed.extend(held);
        }
    }

    /// States of exited processes that requests in flight still hold,
    /// dropped from the table by a [`Registry::prune`]: once this is 0,
    /// nothing an exited process held is in use any more (a caller that
    /// needs its holdings gone waits for that).
    pub fn lingering(&self) -> usize {
        let mut departed = self.departed.lock();
        departed.retain(|w| w.strong_count() > 0);
        departed.len()
    }

    /// Runs [`Registry::prune`] if [`Limits::prune_every`] has passed
    /// since the last time a lookup did (one lookup runs it; the others
    /// go on).
    fn prune_now_and_then(&self) {
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let now = millis(self.born.elapsed());
        let last = self.pruned_at.load(Ordering::Relaxed);
        let every = millis(self.limits.prune_every);
        if now.saturating_sub(last) < every {
            return;
        }
        let won = self
            .pruned_at
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed);
        if won.is_ok() {
            self.prune();
        }
    }

    fn exited(&self, key: ProcKey, watch: Option<&dyn Watch>) -> bool {
        match watch {
            Some(w) => w.exited(),
            None => self.procs.process(key.pid).map(|i| i.process) != Some(key),
        }
    }

    /// `Ok(None)`: the thread's process holds no state and `create` is
    /// off.
    fn resolve(&self, tid: Tid, create: bool) -> Result<Option<Caller<S>>, CallerError> {
        let info = match self.cached_thread(tid) {
            Some(info) => info,
            None => self.resolve_thread(tid)?,
        };
        if let Some(c) = self.caller(tid, info) {
            return Ok(Some(c));
        }
        if !create {
            return Ok(None);
        }
        let inherited = self.inherited(info.parent);
        self.adopt(tid, info, inherited.unwrap_or((None, S::default())))
            .map(Some)
    }

    /// The thread as remembered, if it is still the same thread.
    fn cached_thread(&self, tid: Tid) -> Option<ThreadInfo> {
        let mut threads = self.threads.lock();
        let t = threads.get(&tid)?;
        match &t.watch {
            Some(w) if !w.exited() => Some(t.info),
            _ => {
                // Exited (the tid may now be another's), or unwatchable:
                // ask the system again.
                threads.remove(&tid);
                None
            }
        }
    }

    /// Asks the system for the thread, remembers it, and on first sight
    /// of its process gives it the state of its nearest ancestor that has
    /// some.
    fn resolve_thread(&self, tid: Tid) -> Result<ThreadInfo, CallerError> {
        self.resolved.fetch_add(1, Ordering::Relaxed);
        let info = self.procs.thread(tid).ok_or(CallerError::Gone(tid.0))?;
        self.drop_if_exited(info.process);
        let known = self.processes.lock().contains_key(&info.process);
        if !known && !self.none.load(Ordering::Acquire) {
            if let Some(inherited) = self.inherited(info.parent) {
                // At the bound the process goes without; its calls that
                // want state will be refused with the reason.
                let _ = self.adopt(tid, info, inherited);
            }
        }
        self.remember(tid, info);
        Ok(info)
    }

    /// Drops the state held under `key` if its process has exited. The
    /// system just named a live process with that key: another one, on a
    /// pid reused within the clock tick (10 ms) its start time is counted
    /// in. A thread is resolved here before any state is taken for it, so
    /// the lookups of a remembered thread need not ask again.
    fn drop_if_exited(&self, key: ProcKey) {
        let mut procs = self.processes.lock();
        let gone = procs
            .get(&key)
            .and_then(|p| p.watch.as_ref())
            .is_some_and(|w| w.exited());
        if gone {
            let held = procs
                .remove(&key)
                .filter(|p| Arc::strong_count(&p.state) > 1)
                .map(|p| Arc::downgrade(&p.state));
            self.none.store(procs.is_empty(), Ordering::Release);
            drop(procs);
            self.departed(held.into_iter().collect());
        }
    }

    fn remember(&self, tid: Tid, info: ThreadInfo) {
        let mut threads = self.threads.lock();
        if threads.len() >= self.limits.threads {
            threads.retain(|_, t| !t.watch.as_ref().is_some_and(|w| w.exited()));
            if threads.len() >= self.limits.threads {
                return;
            }
        }
        let watch = self.procs.watch_thread(tid);
        threads.insert(tid, Thread { info, watch });
    }

    fn caller(&self, tid: Tid, info: ThreadInfo) -> Option<Caller<S>> {
        let procs = self.processes.lock();
        Some(procs.get(&info.process)?.caller(tid, info.process))
    }

    /// The nearest holder of state among `parent` and its ancestors, with
    /// a copy of its state.
    fn inherited(&self, parent: Pid) -> Option<(Option<ProcKey>, S)> {
        let mut at = parent;
        for _ in 0..self.limits.depth {
            if at.0 == 0 {
                return None;
            }
            let info = self.procs.process(at)?;
            self.drop_if_exited(info.process);
            if let Some(p) = self.processes.lock().get(&info.process) {
                return Some((Some(info.process), p.state.lock().clone()));
            }
            at = info.parent;
        }
        None
    }

    /// Gives the thread's process state (unless it has some by now),
    /// within bounds: `state` as copied from the process `from`.
    fn adopt(
        &self,
        tid: Tid,
        info: ThreadInfo,
        (from, state): (Option<ProcKey>, S),
    ) -> Result<Caller<S>, CallerError> {
        let full = self.processes.lock().len() >= self.limits.processes;
        if full {
            self.prune();
        }
        let watch = self.procs.watch_process(info.process);
        let mut procs = self.processes.lock();
        if !procs.contains_key(&info.process) && procs.len() >= self.limits.processes {
            return Err(CallerError::TooMany(self.limits.processes));
        }
        let p = procs.entry(info.process).or_insert_with(|| Process {
            state: Arc::new(Mutex::new(state)),
            uid: info.uid,
            id: self.last_id.fetch_add(1, Ordering::Relaxed) + 1,
            from,
            watch,
        });
        let caller = p.caller(tid, info.process);
        self.none.store(false, Ordering::Release);
        Ok(caller)
    }
}

#[cfg(test)]
mod tests;
