//! Patchgroups, served ("Generalized File System Dependencies", §5): the
//! control call `IOC_PATCHGROUP`, whose `op` creates, depends, engages,
//! disengages, syncs or closes. memfs keeps the table, the rules and the
//! order (`stitch_memfs::Held`); this module finds the calling process's
//! holdings in its context (`ProcState::groups`), which the context's
//! fork semantics copy to a child and its exit drops.

use super::callers::{check_version, refusal, ProcState};
use super::{OpResult, StitchFuse};
use fuser::{Errno, Request};
use stitch_callers::{Caller, Tid};
use stitch_control::{
    Group, Wire, API_VERSION, PG_CLOSE, PG_CREATE, PG_DEPEND, PG_DISENGAGE, PG_ENGAGE, PG_SYNC,
};
use stitch_memfs::{GroupError, GROUP_DOMAIN};

/// How long a patchgroup call waits for requests of exited processes
/// still in flight before it answers as things stand.
const LINGER: std::time::Duration = std::time::Duration::from_secs(5);

fn errno(e: GroupError) -> Errno {
    Errno::from_i32(e.errno())
}

impl StitchFuse {
    /// `IOC_PATCHGROUP`.
    pub(super) fn patchgroup_call(&self, req: &Request, input: &[u8]) -> OpResult<Vec<u8>> {
        let g = Group::from_bytes(input).ok_or(Errno::EINVAL)?;
        check_version(g.version)?;
        let uid = req.uid();
        let tid = Tid(req.pid());
        let mut out = Group {
            version: API_VERSION,
            op: g.op,
            group: g.group,
            on: g.on,
        };
        match g.op {
            PG_CREATE => {
                let c = self.callers.enter(tid).map_err(refusal)?;
                let mut st = c.state.lock();
                let fs = &self.fs;
                let held = st.groups.get_or_insert_with(|| fs.new_held());
                out.group = held.create(uid).map_err(errno)?;
            }
            PG_DEPEND => {
                let c = self.holder(tid)?;
                let depend =
                    || self.with_held(c.as_ref(), |h| self.fs.pg_depend(h, g.group, g.on, uid));
                match depend() {
                    // A process that exited with the group engaged holds
                    // it until its state is dropped, and a request of its
                    // in flight (the kernel sends an exiting process's
                    // last releases after it is gone) until that request
                    // is served: drop the exited now, wait for those
                    // requests, and look again, once.
                    Err(GroupError::Busy) => {
                        self.callers.prune();
                        self.callers_let_go();
                        depend().map_err(errno)?;
                    }
                    r => r.map_err(errno)?,
                }
            }
            PG_ENGAGE | PG_DISENGAGE | PG_CLOSE => {
                let c = self.holder(tid)?;
                let Some(c) = c else {
                    // Nothing held: the call names a group the process
                    // cannot hold (another user's is EPERM).
                    return Err(errno(
                        self.fs
                            .new_held()
                            .check(g.group, uid)
                            .err()
                            .unwrap_or(GroupError::Unknown),
                    )
                    .into());
                };
                let mut st = c.state.lock();
                let fs = &self.fs;
                let held = st.groups.get_or_insert_with(|| fs.new_held());
                match g.op {
                    PG_ENGAGE => held.engage(g.group, uid),
                    PG_DISENGAGE => held.disengage(g.group, uid),
                    _ => held.close(g.group, uid),
                }
                .map_err(errno)?;
            }
            PG_SYNC => {
                let c = self.holder(tid)?;
                self.with_held(c.as_ref(), |h| h.check(g.group, uid))
                    .map_err(errno)?;
                // Not under the context's lock: the flush may take long,
                // and the process's other threads go on.
                self.fs.sync_stream(GROUP_DOMAIN | g.group)?;
            }
            _ => return Err(Errno::EINVAL.into()),
        }
        Ok(out.to_bytes())
    }

    /// Waits (a bounded while) until no request of an exited process
    /// holds that process's context: each is being served and soon done.
    fn callers_let_go(&self) {
        let deadline = std::time::Instant::now() + LINGER;
        while self.callers.lingering() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// The calling process's context, if it holds one.
    fn holder(&self, tid: Tid) -> OpResult<Option<Caller<ProcState>>> {
        let (_, caller) = self.callers.identify(tid).map_err(refusal)?;
        Ok(caller)
    }

    /// Runs `f` on the holdings of `c` (empty ones for a process holding
    /// none: every group is then unknown to it, or another user's).
    fn with_held<R>(
        &self,
        c: Option<&Caller<ProcState>>,
        f: impl FnOnce(&stitch_memfs::Held) -> R,
    ) -> R {
        match c {
            Some(c) => {
                let st = c.state.lock();
                match &st.groups {
                    Some(h) => f(h),
                    None => f(&self.fs.new_held()),
                }
            }
            None => f(&self.fs.new_held()),
        }
    }
}
