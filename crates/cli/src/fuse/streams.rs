//! Streams, served ("Consistency Without Ordering"): the mount's table of
//! named streams, which thread is in which, and the control calls
//! `IOC_SET_STREAM`, `IOC_GET_STREAM` and `IOC_STREAM_SYNC`. memfs keeps
//! the order (`stitch_memfs::Domains`); this module only says, for each
//! request, which stream its thread is in.
//!
//! Who is in a stream: a thread that joined one by name, and every thread
//! of its process that never joined one itself when the joining thread was
//! the process's first (or the process had none yet): the process's
//! stream, which new threads take. A child process takes its parent's
//! process stream when the mount first sees it (the context's fork
//! semantics), not the streams of its parent's other threads. A request
//! with no caller (thread id 0) is in no stream.

use super::callers::ProcState;
use super::{Failure, OpResult, StitchFuse};
use fuser::{Errno, Request};
use rustc_hash::FxHashMap;
use std::sync::Mutex;
use stitch_callers::{Caller, Tid};
use stitch_control::{Call, Stream, Wire, API_VERSION, STREAM_IGNORE_FSYNC};
use stitch_memfs::Domains;

/// Streams a mount holds at most (a stream lives until unmount).
pub const MAX_STREAMS: usize = 4096;

/// Threads of one process with a stream of their own, at most.
pub const MAX_THREADS: usize = 256;

/// A thread's (or a process's) place in a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// The stream's number (memfs's domain).
    pub id: u64,
    /// Its fsyncs only order.
    pub ignore_fsync: bool,
}

/// The named streams of a mount.
#[derive(Default)]
pub struct Streams {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    by_name: FxHashMap<Vec<u8>, Named>,
    names: FxHashMap<u64, Vec<u8>>,
    last: u64,
}

#[derive(Clone, Copy)]
struct Named {
    id: u64,
    /// The user who made it: no other user may join it.
    uid: u32,
}

impl Streams {
    /// Streams made on the mount (each lives until unmount).
    pub fn len(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_name
            .len()
    }

    /// Every stream made, by number, with its name.
    pub fn names(&self) -> Vec<(u64, Vec<u8>)> {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<(u64, Vec<u8>)> = t.names.iter().map(|(&i, n)| (i, n.clone())).collect();
        v.sort_unstable();
        v
    }

    /// The stream `name`, made for `uid` if new.
    fn open(&self, name: &[u8], uid: u32) -> Result<u64, Errno> {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = t.by_name.get(name) {
            if n.uid != uid {
                return Err(Errno::EPERM);
            }
            return Ok(n.id);
        }
        if t.by_name.len() >= MAX_STREAMS {
            return Err(Errno::EAGAIN);
        }
        t.last += 1;
        let id = t.last;
        t.by_name.insert(name.to_vec(), Named { id, uid });
        t.names.insert(id, name.to_vec());
        Ok(id)
    }

    fn name(&self, id: u64) -> Vec<u8> {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .names
            .get(&id)
            .cloned()
            .unwrap_or_default()
    }
}

/// The stream of thread `tid` of a process holding `s`.
pub fn member(s: &ProcState, tid: Tid) -> Option<Member> {
    s.threads.get(&tid.0).copied().or(s.stream)
}

impl StitchFuse {
    /// The domains a request's changes carry: its thread's stream and
    /// the patchgroups its process has engaged.
    pub(super) fn domains(&self, caller: Option<&Caller<ProcState>>) -> Domains {
        let Some(c) = caller else {
            return Domains::default();
        };
        let st = c.state.lock();
        let groups = st.groups.as_ref().map(|h| h.engaged()).unwrap_or_default();
        match member(&st, c.tid) {
            Some(m) => Domains {
                stream: Some(m.id),
                ignore_fsync: m.ignore_fsync,
                groups,
            },
            None => Domains {
                groups,
                ..Domains::default()
            },
        }
    }

    /// `IOC_SET_STREAM`: puts the calling thread in the stream named, or
    /// in none.
    pub(super) fn set_stream(&self, req: &Request, input: &[u8]) -> OpResult<Vec<u8>> {
        let s = Stream::from_bytes(input).ok_or(Errno::EINVAL)?;
        super::callers::check_version(s.version)?;
        if s.flags & !STREAM_IGNORE_FSYNC != 0 {
            return Err(Errno::EINVAL.into());
        }
        let name = s.name().ok_or(Errno::ENAMETOOLONG)?;
        let member = match name {
            [] => None,
            name => Some(Member {
                id: self.streams.open(name, req.uid())?,
                ignore_fsync: s.flags & STREAM_IGNORE_FSYNC != 0,
            }),
        };
        let tid = Tid(req.pid());
        let c = self.callers.enter(tid).map_err(super::callers::refusal)?;
        let mut state = c.state.lock();
        let first = tid.0 == c.process.pid.0 || state.stream.is_none();
        if member.is_some() && !state.threads.contains_key(&tid.0) {
            if state.threads.len() >= MAX_THREADS {
                prune_threads(&mut state, c.process.pid.0);
            }
            if state.threads.len() >= MAX_THREADS {
                return Err(Errno::EAGAIN.into());
            }
        }
        match member {
            Some(m) => state.threads.insert(tid.0, m),
            None => state.threads.remove(&tid.0),
        };
        if first {
            state.stream = member;
        }
        Ok(Vec::new())
    }

    /// `IOC_GET_STREAM`: the calling thread's stream (an empty name and
    /// number 0 for none).
    pub(super) fn get_stream(&self, req: &Request, input: &[u8]) -> OpResult<Vec<u8>> {
        let asked = Stream::from_bytes(input).ok_or(Errno::EINVAL)?;
        super::callers::check_version(asked.version)?;
        let mut out = Stream {
            version: API_VERSION,
            ..Stream::default()
        };
        let tid = Tid(req.pid());
        let (_, caller) = self
            .callers
            .identify(tid)
            .map_err(super::callers::refusal)?;
        if let Some(m) = caller.and_then(|c| member(&c.state.lock(), tid)) {
            let name = self.streams.name(m.id);
            out.id = m.id;
            out.flags = if m.ignore_fsync {
                STREAM_IGNORE_FSYNC
            } else {
                0
            };
            out.name[..name.len()].copy_from_slice(&name);
        }
        Ok(out.to_bytes())
    }

    /// `IOC_STREAM_SYNC`: the calling thread's stream, durable.
    pub(super) fn stream_sync(&self, req: &Request, input: &[u8]) -> OpResult<Vec<u8>> {
        let c = Call::from_bytes(input).ok_or(Errno::EINVAL)?;
        super::callers::check_version(c.version)?;
        if c.flags != 0 {
            return Err(Errno::EINVAL.into());
        }
        let caller = self.see(req, "stream_sync");
        let stream = match self.domains(caller.as_ref()).stream {
            Some(id) => id,
            None if self.fs.order() == stitch_memfs::Order::Global => stitch_memfs::GLOBAL,
            None => return Err(Errno::EINVAL.into()),
        };
        self.fs.sync_stream(stream).map_err(Failure::from)?;
        Ok(Vec::new())
    }
}

/// Forgets the streams of threads of `pid` that exited.
fn prune_threads(s: &mut ProcState, pid: u32) {
    s.threads
        .retain(|tid, _| std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists());
}
