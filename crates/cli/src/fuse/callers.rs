//! Who is calling: every request's thread resolved to its process
//! (crate `stitch-callers`) at one entry point, [`StitchFuse::see`], and
//! the control calls that read and set a process's context
//! (`IOC_CONTEXT`, `IOC_SET_TAG`).
//!
//! A request the kernel made on its own carries thread id 0 (release,
//! forget, interrupt, the writeback of pages dirtied through a shared
//! mapping; a caller outside the server's pid namespace too): it has no
//! caller and carries no context (ARCHITECTURE.md says what that means
//! for each feature).

use super::streams::Member;
use super::{Failure, OpResult, StitchFuse};
use fuser::{Errno, Request};
use rustc_hash::FxHashMap;
use stitch_callers::{Caller, CallerError, Limits, ProcFs, Registry, Tid};
use stitch_control::{Context, Tag, Wire, API_VERSION, CONTEXT_HELD, CONTEXT_INHERITED};

/// What a process holds on the mount: made at its first call that sets
/// state, copied to a child process when the mount first sees the child,
/// kept across `exec`, shared by its threads, dropped when it exits
/// (`stitch-callers` does all of that and knows nothing of what is here).
///
/// A tag, which shows what a process inherited, and its streams (module
/// `streams`): the process's stream, which a new thread and a child
/// process take, and the streams its threads joined, by thread id (not
/// copied to a child: its threads are others); and the patchgroups it
/// holds with the set it has engaged (module `groups`: copied at fork,
/// kept across exec, let go at exit when the context is dropped).
#[derive(Debug, Default)]
pub struct ProcState {
    /// The number the process last set (`IOC_SET_TAG`).
    pub tag: u64,
    /// The process's stream.
    pub stream: Option<Member>,
    /// The streams of threads that joined one, by thread id.
    pub threads: FxHashMap<u32, Member>,
    /// The patchgroups held, once the process made or inherited one.
    pub groups: Option<stitch_memfs::Held>,
    /// The external-synchrony group it is in (module `xsync`).
    pub xsync: Option<super::xsync::Member>,
}

impl Clone for ProcState {
    /// A child's copy (fork semantics): the tag, the process's stream,
    /// the patchgroups held, engaged as in the parent, and the
    /// external-synchrony group.
    fn clone(&self) -> Self {
        ProcState {
            tag: self.tag,
            stream: self.stream,
            threads: FxHashMap::default(),
            groups: self.groups.clone(),
            xsync: self.xsync.clone(),
        }
    }
}

/// The registry of the processes calling this mount.
pub type Callers = Registry<ProcState>;

/// A registry over `/proc` and pidfds, bounded to `contexts` processes
/// holding a context.
pub fn registry(contexts: usize) -> Callers {
    Registry::new(Box::new(ProcFs), Limits::for_processes(contexts))
}

impl StitchFuse {
    /// The caller of a request, resolved at its entry: once per request,
    /// one atomic load while no process holds a context. A process first
    /// seen takes its inheritance here, at its first request, as close to
    /// its fork as the mount can see it. `None` for a request with no
    /// caller (thread id 0) or whose process holds no context. The
    /// request's ordering domains (its thread's stream, its process's
    /// engaged patchgroups) reach memfs from here.
    ///
    /// A request that only reads (named in [`reads`]) needs no caller
    /// today: its thread is noticed, so a new process still inherits at
    /// its first request, without the `poll` a remembered thread costs a
    /// lookup. Every other request is looked up in full.
    pub(super) fn see(&self, req: &Request, op: &str) -> Option<Caller<ProcState>> {
        let tid = Tid(req.pid());
        if reads(op) {
            self.callers.notice(tid);
            return None;
        }
        self.callers.lookup(tid)
    }

    /// `IOC_CONTEXT`: the caller's own context (`id` 0), or the one
    /// numbered `id` if the caller's user owns it.
    pub(super) fn context_call(&self, req: &Request, input: &[u8]) -> OpResult<Vec<u8>> {
        let asked = Context::from_bytes(input).ok_or(Errno::EINVAL)?;
        check_version(asked.version)?;
        let mut out = Context {
            version: API_VERSION,
            ..Context::default()
        };
        let caller = if asked.id == 0 {
            let tid = Tid(req.pid());
            let (info, caller) = self.callers.identify(tid).map_err(refusal)?;
            (out.pid, out.tid, out.start) = (info.process.pid.0, tid.0, info.process.start);
            out.uid = info.uid;
            caller
        } else {
            let c = self.callers.by_id(asked.id).ok_or(Errno::EBADF)?;
            if c.uid != req.uid() {
                return Err(Errno::EPERM.into());
            }
            (out.pid, out.start) = (c.process.pid.0, c.process.start);
            Some(c)
        };
        if let Some(c) = caller {
            out.flags = CONTEXT_HELD;
            (out.id, out.uid, out.tag) = (c.id, c.uid, c.state.lock().tag);
            if let Some(from) = c.from {
                out.flags |= CONTEXT_INHERITED;
                (out.from_pid, out.from_start) = (from.pid.0, from.start);
            }
        }
        Ok(out.to_bytes())
    }

    /// `IOC_SET_TAG`: gives the caller's process a context (inherited
    /// first, if it has none) and sets its tag.
    pub(super) fn set_tag(&self, req: &Request, input: &[u8]) -> OpResult<Vec<u8>> {
        let t = Tag::from_bytes(input).ok_or(Errno::EINVAL)?;
        check_version(t.version)?;
        if t.flags != 0 {
            return Err(Errno::EINVAL.into());
        }
        let c = self.callers.enter(Tid(req.pid())).map_err(refusal)?;
        c.state.lock().tag = t.tag;
        Ok(Vec::new())
    }
}

/// The requests that change nothing and whose answer no ordering domain
/// shapes (external synchrony will hold reads of what a group has not yet
/// made durable, and look those readers up itself). A request not named
/// here is looked up in full: the safe side.
fn reads(op: &str) -> bool {
    matches!(
        op,
        "lookup"
            | "getattr"
            | "readlink"
            | "read"
            | "opendir"
            | "readdir"
            | "readdirplus"
            | "statfs"
            | "access"
            | "getxattr"
            | "listxattr"
    )
}

/// A structure's version: 1 up to this server's.
pub(super) fn check_version(v: u32) -> OpResult<()> {
    if v == 0 || v > API_VERSION {
        return Err(Errno::EINVAL.into());
    }
    Ok(())
}

/// The errno a caller that could not be had is answered with.
pub(super) fn refusal(e: CallerError) -> Failure {
    Failure::Errno(match e {
        CallerError::NoCaller | CallerError::Gone(_) => Errno::ESRCH,
        CallerError::TooMany(_) => Errno::EAGAIN,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_past_the_servers_and_bounds_are_refused_with_their_errno() {
        assert!(check_version(1).is_ok() && check_version(API_VERSION).is_ok());
        for v in [0, API_VERSION + 1] {
            assert_eq!(check_version(v).unwrap_err().errno(), Errno::EINVAL);
        }
        assert_eq!(refusal(CallerError::TooMany(2)).errno(), Errno::EAGAIN);
        assert_eq!(refusal(CallerError::Gone(7)).errno(), Errno::ESRCH);
        assert_eq!(refusal(CallerError::NoCaller).errno(), Errno::ESRCH);
    }

    /// Only requests that change nothing skip the full lookup.
    #[test]
    fn requests_that_change_something_are_looked_up_in_full() {
        assert!(reads("getattr") && reads("lookup") && reads("readdirplus"));
        for op in [
            "write", "setattr", "create", "unlink", "rename", "fsync", "ioctl", "open",
        ] {
            assert!(!reads(op), "{op}");
        }
    }

    /// A request with no caller (thread id 0) is never resolved: it
    /// carries no context, whatever processes hold.
    #[test]
    fn a_request_without_a_caller_carries_no_context() {
        let r = registry(4);
        let me = Tid(std::process::id());
        r.enter(me).unwrap().state.lock().tag = 7;
        assert_eq!(r.lookup(me).unwrap().state.lock().tag, 7);
        let before = r.resolved();
        assert!(r.lookup(Tid(0)).is_none());
        assert_eq!(r.resolved(), before, "nothing was asked of /proc");
    }
}
