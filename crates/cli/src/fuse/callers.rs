//! Who is calling: every request's thread resolved to its process
//! (crate `stitch-callers`) at one entry point, [`StitchFuse::see`].
//!
//! A request the kernel made on its own carries thread id 0 (release,
//! forget, interrupt, the writeback of pages dirtied through a shared
//! mapping; a caller outside the server's pid namespace too): it has no
//! caller and carries no state.

use super::StitchFuse;
use fuser::Request;
use stitch_callers::{Caller, Limits, ProcFs, Registry, Tid};

/// What a process holds on the mount: made at its first call that sets
/// state, copied to a child process when the mount first sees the child,
/// kept across `exec`, shared by its threads, dropped when it exits
/// (`stitch-callers` does all of that and knows nothing of what is here).
///
/// Nothing yet. Patchgroups will keep here the process's open groups and
/// the set it has engaged (copied at fork, kept across exec, closed at
/// exit with the rest); streams the process's stream, which a new thread
/// takes, and the streams its threads chose, keyed by thread id.
#[derive(Clone, Debug, Default)]
pub struct ProcState {}

/// The registry of the processes calling this mount.
pub type Callers = Registry<ProcState>;

/// A registry over `/proc` and pidfds, bounded to `contexts` processes
/// holding state.
pub fn registry(contexts: usize) -> Callers {
    Registry::new(Box::new(ProcFs), Limits::for_processes(contexts))
}

impl StitchFuse {
    /// The caller of a request, resolved at its entry: once per request,
    /// one atomic load while no process holds state. A process first
    /// seen takes its inheritance here, at its first request, as close to
    /// its fork as the mount can see it. `None` for a request with no
    /// caller (thread id 0) or whose process holds no state. Ordering
    /// domains will reach memfs from here.
    pub(super) fn see(&self, req: &Request) -> Option<Caller<ProcState>> {
        self.callers.lookup(Tid(req.pid()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request with no caller (thread id 0) is never resolved: it
    /// carries no state, whatever processes hold.
    #[test]
    fn a_request_without_a_caller_carries_no_context() {
        let r = registry(4);
        let me = Tid(std::process::id());
        r.enter(me).unwrap();
        assert_eq!(r.lookup(me).unwrap().process.pid.0, me.0);
        let before = r.resolved();
        assert!(r.lookup(Tid(0)).is_none());
        assert_eq!(r.resolved(), before, "nothing was asked of /proc");
    }
}
