//! External synchrony, served (after "Rethink the Sync", xsyncfs): the
//! mount's side of `stitchfs xsync`. A group of processes whose fsyncs
//! return at once; their output is held by whoever relays it (the `xsync`
//! command) until a commit (`IOC_XSYNC`, `XS_COMMIT`) has made durable
//! every change the group made before that output was read. This module
//! keeps what that needs:
//!
//! - **Which changes.** After each request of a member that changes
//!   something, the group's `last` becomes memfs's stamp then
//!   ([`MemFs::stamp_now`]): every change the group made so far is
//!   stamped below it. A commit makes that point durable
//!   ([`MemFs::sync_through`], or the group's stream when it has one), and
//!   does nothing when it is durable already (an interactive program
//!   printing without changing files costs no flush).
//! - **Outside observers.** Each inode a member changed is *marked* with
//!   that stamp. A request from a process outside the group on a marked
//!   inode whose mark is not yet durable waits for a commit first, so no
//!   other process learns through the file system of what a crash could
//!   still undo. Replies about a marked inode carry no cache time, so the
//!   kernel asks again (an outside `stat` reaches us) rather than answer
//!   from what it was told for a member. What the kernel holds beyond
//!   that (the page cache of a file already open elsewhere, a rename it
//!   applied to its name cache) is listed in the README's limits.
//! - **Who.** A process's group is in its context (`ProcState::xsync`),
//!   which a child takes at fork. A group lives while some process holds
//!   it ([`Member`]); marks outlive it (an outside reader's wait is a
//!   whole flush through the mark's stamp, whatever the group).
//!
//! Requests with no caller (thread id 0: release, forget, writeback of a
//! shared mapping) are neither members nor observers: they never wait.

use super::{OpResult, StitchFuse};
use fuser::{Errno, Request};
use rustc_hash::FxHashMap;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use stitch_callers::{Caller, Tid};
use stitch_control::{Wire, Xsync as Call, API_VERSION, XS_COMMIT, XS_JOIN, XS_LEAVE};
use stitch_memfs::{InodeNo, MemError, MemFs};

use super::callers::ProcState;

/// Groups a mount holds at once (a group goes when its last process
/// exits).
pub const MAX_GROUPS: usize = 4096;

/// A process's place in a group: copied to a child with its context,
/// dropped at exit; the group lives while one is held.
#[derive(Clone, Debug)]
pub struct Member {
    pub group: u64,
    /// Held while the process lives: the group's `live` counts these.
    _live: Arc<()>,
}

/// The groups of a mount and the inodes they changed.
#[derive(Default)]
pub struct Groups {
    /// Some inode is marked (one atomic load for every request while none
    /// is).
    marked: AtomicBool,
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    groups: FxHashMap<u64, Group>,
    marks: FxHashMap<InodeNo, Mark>,
    last_id: u64,
    figures: Figures,
}

struct Group {
    uid: u32,
    live: Weak<()>,
    /// Every change of the group is stamped below this.
    last: u64,
    /// Every change below this is durable (the last commit's `last`).
    done: u64,
    /// The group's stream, if it joined with one: commits take it.
    stream: Option<u64>,
    held_bytes: u64,
    held_chunks: u64,
}

#[derive(Clone, Copy)]
struct Mark {
    stamp: u64,
    /// The group that made the latest change, 0 if changes of several
    /// groups are not yet durable.
    group: u64,
}

/// What the mount's figures show of external synchrony.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Figures {
    /// Groups made on the mount.
    pub groups_made: u64,
    /// Commits asked for, and those that had to flush.
    pub commits: u64,
    pub commits_flushed: u64,
    /// fsyncs, fdatasyncs and syncs of members that returned at once.
    pub syncs_returned: u64,
    /// Requests of outside processes that waited for a commit, and how
    /// long they waited in all (microseconds).
    pub observers_held: u64,
    pub observer_wait_us: u64,
    /// The most output a relay reported holding for one group.
    pub max_held_bytes: u64,
}

thread_local! {
    /// The group of the request this thread serves, if a member's.
    static CURRENT: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Runs `f` as a request of `group`'s (`None`: no member's).
pub fn in_group<R>(group: Option<u64>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<u64>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.replace(group)));
    f()
}

/// The group of the request this thread serves.
pub fn current() -> Option<u64> {
    CURRENT.with(|c| c.get())
}

/// The group of a request's caller.
pub fn group_of(caller: Option<&Caller<ProcState>>) -> Option<u64> {
    caller.and_then(|c| c.state.lock().xsync.as_ref().map(|m| m.group))
}

/// Requests that change what an observer could see, by name.
pub fn changes(op: &str) -> bool {
    matches!(
        op,
        "setattr"
            | "write"
            | "fallocate"
            | "setxattr"
            | "removexattr"
            | "mknod"
            | "mkdir"
            | "unlink"
            | "rmdir"
            | "symlink"
            | "rename"
            | "link"
            | "create"
    )
}

impl Groups {
    /// Whether `ino` holds a change of some group not yet durable: replies
    /// about it are not to be cached by the kernel.
    pub fn marked(&self, fs: &MemFs, ino: InodeNo) -> bool {
        if !self.marked.load(Ordering::Acquire) {
            return false;
        }
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.marks
            .get(&ino)
            .is_some_and(|m| !t.durable(fs, m.stamp, m.group))
    }

    /// After a member of `group` changed `inos`: the group's point moves
    /// on, and each inode is marked with it.
    pub fn touch(&self, fs: &MemFs, group: u64, inos: &[InodeNo]) {
        let stamp = fs.stamp_now();
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(g) = t.groups.get_mut(&group) {
            g.last = g.last.max(stamp);
        }
        for &ino in inos {
            let earlier = t.marks.get(&ino).copied();
            let shared = match earlier {
                Some(m) if m.group != group && !t.durable(fs, m.stamp, m.group) => 0,
                _ => group,
            };
            t.marks.insert(
                ino,
                Mark {
                    stamp,
                    group: shared,
                },
            );
        }
        if !inos.is_empty() {
            self.marked.store(true, Ordering::Release);
        }
    }

    /// Before a request of a process outside the marking groups (`group`:
    /// the caller's own, if any) on `inos`: waits until what any other
    /// group changed in them is durable. `Err` if the flush failed (the
    /// request fails with it: it cannot be answered truthfully).
    pub fn observe(
        &self,
        fs: &MemFs,
        group: Option<u64>,
        inos: &[InodeNo],
    ) -> Result<(), MemError> {
        let through = {
            let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
            inos.iter()
                .filter_map(|ino| t.marks.get(ino))
                .filter(|m| Some(m.group) != group && !t.durable(fs, m.stamp, m.group))
                .map(|m| m.stamp)
                .max()
        };
        let Some(stamp) = through else {
            return Ok(());
        };
        let began = Instant::now();
        fs.sync_through(stamp)?;
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.figures.observers_held += 1;
        t.figures.observer_wait_us += began.elapsed().as_micros() as u64;
        self.forget_durable(&mut t, fs);
        Ok(())
    }

    /// Drops marks that are durable now.
    fn forget_durable(&self, t: &mut Table, fs: &MemFs) {
        let below = fs.durable_below();
        let done: FxHashMap<u64, u64> = t.groups.iter().map(|(&id, g)| (id, g.done)).collect();
        t.marks
            .retain(|_, m| m.stamp > below && done.get(&m.group).is_none_or(|&d| m.stamp > d));
        if t.marks.is_empty() {
            self.marked.store(false, Ordering::Release);
        }
    }

    /// A new group for `uid`, or `id` joined (its owner only); the
    /// caller's stream, if it has one, is the group's.
    fn join(&self, id: u64, uid: u32, stream: Option<u64>) -> Result<Member, Errno> {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if id != 0 {
            let g = t.groups.get_mut(&id).ok_or(Errno::EBADF)?;
            if g.uid != uid {
                return Err(Errno::EPERM);
            }
            let live = g.live.upgrade().ok_or(Errno::EBADF)?;
            return Ok(Member {
                group: id,
                _live: live,
            });
        }
        if t.groups.len() >= MAX_GROUPS {
            t.groups.retain(|_, g| g.live.strong_count() > 0);
        }
        if t.groups.len() >= MAX_GROUPS {
            return Err(Errno::EAGAIN);
        }
        t.last_id += 1;
        let id = t.last_id;
        let live = Arc::new(());
        t.groups.insert(
            id,
            Group {
                uid,
                live: Arc::downgrade(&live),
                last: 0,
                done: 0,
                stream,
                held_bytes: 0,
                held_chunks: 0,
            },
        );
        t.figures.groups_made += 1;
        Ok(Member {
            group: id,
            _live: live,
        })
    }

    /// Makes `group`'s changes so far durable: whether that took a flush.
    fn commit(&self, fs: &MemFs, group: u64, held: (u64, u64)) -> Result<bool, Failure> {
        let (target, stream) = {
            let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
            t.figures.commits += 1;
            t.figures.max_held_bytes = t.figures.max_held_bytes.max(held.0);
            let g = t
                .groups
                .get_mut(&group)
                .ok_or(Failure::Errno(Errno::EBADF))?;
            (g.held_bytes, g.held_chunks) = held;
            (g.last, g.stream)
        };
        let durable = {
            let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
            t.durable(fs, target, group)
        };
        if durable {
            return Ok(false);
        }
        match stream {
            Some(s) => fs.sync_stream(s)?,
            None => {
                fs.sync_through(target)?;
            }
        }
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.figures.commits_flushed += 1;
        if let Some(g) = t.groups.get_mut(&group) {
            g.done = g.done.max(target);
        }
        self.forget_durable(&mut t, fs);
        Ok(true)
    }

    /// A member's fsync (or sync) returned at once.
    pub fn sync_returned(&self) {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .figures
            .syncs_returned += 1;
    }

    /// The figures, with the live groups and the output they hold.
    pub fn figures(&self) -> (Figures, u64, u64, u64, usize) {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let live: Vec<&Group> = t
            .groups
            .values()
            .filter(|g| g.live.strong_count() > 0)
            .collect();
        let bytes = live.iter().map(|g| g.held_bytes).sum();
        let chunks = live.iter().map(|g| g.held_chunks).sum();
        (t.figures, live.len() as u64, bytes, chunks, t.marks.len())
    }
}

type Failure = super::Failure;

impl Table {
    /// Whether a change stamped below `stamp` by `group` is durable.
    fn durable(&self, fs: &MemFs, stamp: u64, group: u64) -> bool {
        fs.durable_below() >= stamp || self.groups.get(&group).is_some_and(|g| g.done >= stamp)
    }
}

impl StitchFuse {
    /// Before serving `op` on `inos` for `req`: a caller outside the
    /// groups that changed them waits until those changes are durable.
    /// `group` is the caller's, when its context was looked up (`looked`).
    pub(super) fn xsync_observe(
        &self,
        req: &Request,
        op: &str,
        group: Option<u64>,
        looked: bool,
        inos: &[InodeNo],
    ) -> Result<(), Failure> {
        if !self.xsync.marked.load(Ordering::Acquire) || req.pid() == 0 || op == "ioctl" {
            return Ok(());
        }
        let group = if looked {
            group
        } else {
            group_of(self.callers.lookup(Tid(req.pid())).as_ref())
        };
        Ok(self.xsync.observe(&self.fs, group, inos)?)
    }

    /// Whether some inode holds a change not known durable (one atomic
    /// load).
    pub(super) fn xsync_watching(&self) -> bool {
        self.xsync.marked.load(Ordering::Acquire)
    }

    /// After a member's request changed `inos` (no-op for others).
    pub(super) fn xsync_touch(&self, inos: &[InodeNo]) {
        if let Some(g) = current() {
            self.xsync.touch(&self.fs, g, inos);
        }
    }

    /// How long the kernel may cache a reply about `ino`.
    pub(super) fn ttl(&self, ino: InodeNo) -> Duration {
        if self.xsync.marked(&self.fs, ino) {
            Duration::ZERO
        } else {
            super::TTL
        }
    }

    /// `IOC_XSYNC`.
    pub(super) fn xsync_call(&self, req: &Request, input: &[u8]) -> OpResult<Vec<u8>> {
        let mut x = Call::from_bytes(input).ok_or(Errno::EINVAL)?;
        super::callers::check_version(x.version)?;
        let tid = Tid(req.pid());
        match x.op {
            XS_JOIN => {
                let c = self.callers.enter(tid).map_err(super::callers::refusal)?;
                let mut st = c.state.lock();
                let stream = super::streams::member(&st, c.tid).map(|m| m.id);
                let member = self.xsync.join(x.group, req.uid(), stream)?;
                x.group = member.group;
                st.xsync = Some(member);
            }
            XS_COMMIT => {
                let (_, caller) = self
                    .callers
                    .identify(tid)
                    .map_err(super::callers::refusal)?;
                let group = group_of(caller.as_ref()).ok_or(Errno::EINVAL)?;
                let flushed = self
                    .xsync
                    .commit(&self.fs, group, (x.held_bytes, x.held_chunks))?;
                x.group = group;
                x.result = flushed as u64;
            }
            XS_LEAVE => {
                let c = self.callers.enter(tid).map_err(super::callers::refusal)?;
                let left = c.state.lock().xsync.take();
                x.group = left.ok_or(Errno::EINVAL)?.group;
            }
            _ => return Err(Errno::EINVAL.into()),
        }
        x.version = API_VERSION;
        Ok(x.to_bytes())
    }
}
