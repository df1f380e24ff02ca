//! Patchgroups ("Generalized File System Dependencies", §5): sets of
//! changes a process marks by engaging a group, and write-before
//! dependencies between the sets.
//!
//! The guarantee (every mode but async): if any change made under a group
//! Q is on disk, so is every change made under each group Q depends on,
//! directly or through others. `sync` of a group makes it and what it
//! depends on durable, and nothing else.
//!
//! How memfs keeps it: a group is an ordering domain like a stream
//! (`Object::Domain`, numbered apart from streams by [`GROUP_DOMAIN`]), so
//! every entry logged while a group is engaged carries it, and a flush
//! that takes any entry of a group takes the group whole up to the cut
//! (`Merged::closure`). `depend(Q, P)` logs one entry in Q's domain that
//! changes nothing on disk (`LogOp::Depend`) and whose closure takes P
//! whole: any flush holding a change of Q holds all of P, or P reached
//! the disk before. In journal modes a flush is one transaction, and one
//! carrying group changes journals its data too, so a crash shows it
//! whole or not at all; in soft updates a batch with group changes is
//! chained in log order, and every change of P was logged before any of
//! Q's (below), so the disk passes through P before Q.
//!
//! The rules of a group's life (the paper's Figure 5), which make a cycle
//! impossible and keep a group from holding changes in memory forever:
//! - a group gains dependencies only before it is first engaged, and
//!   only while no group depends on it;
//! - a group another depends on is *sealed*: never engaged again;
//! - a dependency on a group some process has engaged now is refused
//!   (`Busy`): the system must have seen all of a group's changes before
//!   another may depend on it.
//!
//! So every edge Q → P goes from a group that has made no change yet to a
//! sealed one that will make none again: P's changes all precede Q's in
//! the log, and edges run from later-sealed to earlier-sealed groups (no
//! cycle).
//!
//! Groups are held per process like file descriptors ([`Held`]): shared
//! by its threads, copied to a child with what the parent engaged
//! (`Clone`), let go at `close` or when the process's state is dropped at
//! its exit (`Drop`). A group lives in the table while some process holds
//! it; the changes made under it keep their order after it is gone (their
//! log entries carry its domain).

use crate::fs::MemFs;
use crate::log::LogOp;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// The domain numbers of groups: group `n` is `GROUP_DOMAIN | n`, apart
/// from every stream's number (streams count up from 1).
pub const GROUP_DOMAIN: u64 = 1 << 62;

/// Live groups a mount holds at most.
pub const MAX_GROUPS: usize = 65_536;

/// Groups one process holds at most.
pub const MAX_HELD: usize = 1024;

/// Why a patchgroup call is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupError {
    /// The process holds no such group (never made, closed, or made by
    /// a process it did not inherit from).
    Unknown,
    /// The group belongs to another user.
    NotOwner,
    /// The rules forbid the call (what it was).
    Forbidden(&'static str),
    /// A dependency on a group some process has engaged now.
    Busy,
    /// A bound is reached ([`MAX_GROUPS`], [`MAX_HELD`]).
    TooMany,
}

impl GroupError {
    /// The errno the control table answers with.
    pub fn errno(self) -> i32 {
        match self {
            GroupError::Unknown => libc_errno::EBADF,
            GroupError::NotOwner => libc_errno::EPERM,
            GroupError::Forbidden(_) => libc_errno::EINVAL,
            GroupError::Busy => libc_errno::EBUSY,
            GroupError::TooMany => libc_errno::EAGAIN,
        }
    }
}

/// The errnos, as Linux numbers them (memfs has no libc dependency).
mod libc_errno {
    pub const EPERM: i32 = 1;
    pub const EBADF: i32 = 9;
    pub const EAGAIN: i32 = 11;
    pub const EBUSY: i32 = 16;
    pub const EINVAL: i32 = 22;
}

impl std::fmt::Display for GroupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupError::Unknown => write!(f, "no such patchgroup held by this process"),
            GroupError::NotOwner => write!(f, "the patchgroup belongs to another user"),
            GroupError::Forbidden(what) => write!(f, "{what}"),
            GroupError::Busy => write!(f, "the patchgroup depended on is engaged"),
            GroupError::TooMany => write!(f, "too many patchgroups"),
        }
    }
}

impl std::error::Error for GroupError {}

#[derive(Debug)]
struct Group {
    owner: u32,
    /// Processes holding it.
    holders: u32,
    /// Processes that have it engaged now.
    engaged: u32,
    ever_engaged: bool,
    sealed: bool,
    deps: Vec<u64>,
}

#[derive(Debug, Default)]
struct Table {
    groups: FxHashMap<u64, Group>,
    last: u64,
    made: u64,
}

/// The mount's groups (one per memfs).
#[derive(Debug, Default)]
pub struct GroupTable {
    t: Mutex<Table>,
}

/// What the table says of one group (for reports and tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    pub id: u64,
    pub owner: u32,
    pub holders: u32,
    pub engaged: u32,
    pub sealed: bool,
    pub deps: Vec<u64>,
}

impl GroupTable {
    /// Live groups, by number.
    pub fn list(&self) -> Vec<GroupInfo> {
        let t = self.t.lock();
        let mut v: Vec<GroupInfo> = t
            .groups
            .iter()
            .map(|(&id, g)| GroupInfo {
                id,
                owner: g.owner,
                holders: g.holders,
                engaged: g.engaged,
                sealed: g.sealed,
                deps: g.deps.clone(),
            })
            .collect();
        v.sort_unstable_by_key(|g| g.id);
        v
    }

    /// Groups made since mount.
    pub fn made(&self) -> u64 {
        self.t.lock().made
    }

    fn release(&self, id: u64, engaged: bool) {
        let mut t = self.t.lock();
        let gone = match t.groups.get_mut(&id) {
            Some(g) => {
                g.holders -= 1;
                g.engaged -= u32::from(engaged);
                g.holders == 0
            }
            None => false,
        };
        if gone {
            t.groups.remove(&id);
        }
    }
}

/// The groups one process holds, and which of them it has engaged.
#[derive(Debug)]
pub struct Held {
    table: Arc<GroupTable>,
    /// (group, engaged by this process), in the order taken.
    held: Vec<(u64, bool)>,
}

impl Clone for Held {
    /// A child's copy (fork): every group held, engaged as in the parent.
    fn clone(&self) -> Held {
        let mut t = self.table.t.lock();
        for &(id, engaged) in &self.held {
            if let Some(g) = t.groups.get_mut(&id) {
                g.holders += 1;
                g.engaged += u32::from(engaged);
            }
        }
        Held {
            table: self.table.clone(),
            held: self.held.clone(),
        }
    }
}

impl Drop for Held {
    /// The process exited (or its state was dropped): it lets go of all.
    fn drop(&mut self) {
        for (id, engaged) in std::mem::take(&mut self.held) {
            self.table.release(id, engaged);
        }
    }
}

impl Held {
    /// Whether the process holds no group.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// The domains of the groups engaged, for [`crate::Domains::groups`].
    pub fn engaged(&self) -> Vec<u64> {
        self.held
            .iter()
            .filter(|(_, e)| *e)
            .map(|&(id, _)| GROUP_DOMAIN | id)
            .collect()
    }

    /// The groups held, each with whether this process engaged it.
    pub fn groups(&self) -> &[(u64, bool)] {
        &self.held
    }

    /// A new group owned by `uid`, held by this process.
    pub fn create(&mut self, uid: u32) -> Result<u64, GroupError> {
        if self.held.len() >= MAX_HELD {
            return Err(GroupError::TooMany);
        }
        let mut t = self.table.t.lock();
        if t.groups.len() >= MAX_GROUPS {
            return Err(GroupError::TooMany);
        }
        t.last += 1;
        t.made += 1;
        let id = t.last;
        t.groups.insert(
            id,
            Group {
                owner: uid,
                holders: 1,
                engaged: 0,
                ever_engaged: false,
                sealed: false,
                deps: Vec::new(),
            },
        );
        self.held.push((id, false));
        Ok(id)
    }

    /// Where `id` is among the groups held, if `uid` may use it.
    fn find(&self, t: &Table, id: u64, uid: u32) -> Result<usize, GroupError> {
        let g = t.groups.get(&id).ok_or(GroupError::Unknown)?;
        if g.owner != uid {
            return Err(GroupError::NotOwner);
        }
        self.held
            .iter()
            .position(|&(h, _)| h == id)
            .ok_or(GroupError::Unknown)
    }

    /// Checks `uid` may use held group `id`.
    pub fn check(&self, id: u64, uid: u32) -> Result<(), GroupError> {
        let t = self.table.t.lock();
        self.find(&t, id, uid).map(|_| ())
    }

    /// The process's later changes belong to `id` too.
    pub fn engage(&mut self, id: u64, uid: u32) -> Result<(), GroupError> {
        let mut t = self.table.t.lock();
        let at = self.find(&t, id, uid)?;
        let g = t.groups.get_mut(&id).expect("found");
        if g.sealed {
            return Err(GroupError::Forbidden(
                "the patchgroup is sealed: another depends on it, so it can never be engaged again",
            ));
        }
        if !self.held[at].1 {
            g.engaged += 1;
            g.ever_engaged = true;
            self.held[at].1 = true;
        }
        Ok(())
    }

    /// The process's later changes no longer belong to `id`.
    pub fn disengage(&mut self, id: u64, uid: u32) -> Result<(), GroupError> {
        let mut t = self.table.t.lock();
        let at = self.find(&t, id, uid)?;
        if !self.held[at].1 {
            return Err(GroupError::Forbidden(
                "the patchgroup is not engaged by this process",
            ));
        }
        t.groups.get_mut(&id).expect("found").engaged -= 1;
        self.held[at].1 = false;
        Ok(())
    }

    /// The process lets go of `id` (disengaging it first).
    pub fn close(&mut self, id: u64, uid: u32) -> Result<(), GroupError> {
        let at = {
            let t = self.table.t.lock();
            self.find(&t, id, uid)?
        };
        let (_, engaged) = self.held.remove(at);
        self.table.release(id, engaged);
        Ok(())
    }

    /// Checks that `q` may gain a dependency on `p` and records it (`p`
    /// is sealed then): `Ok(false)` if `q` depended on `p` already.
    fn add_dependency(&self, q: u64, p: u64, uid: u32) -> Result<bool, GroupError> {
        let mut t = self.table.t.lock();
        self.find(&t, q, uid)?;
        self.find(&t, p, uid)?;
        if q == p {
            return Err(GroupError::Forbidden(
                "a patchgroup cannot depend on itself",
            ));
        }
        let gq = &t.groups[&q];
        if gq.deps.contains(&p) {
            return Ok(false);
        }
        if gq.ever_engaged {
            return Err(GroupError::Forbidden(
                "a patchgroup gains dependencies only before it is first engaged",
            ));
        }
        if gq.sealed {
            return Err(GroupError::Forbidden(
                "a sealed patchgroup (another depends on it) gains no dependencies",
            ));
        }
        let gp = t.groups.get_mut(&p).expect("found");
        if gp.engaged > 0 {
            return Err(GroupError::Busy);
        }
        gp.sealed = true;
        t.groups.get_mut(&q).expect("found").deps.push(p);
        Ok(true)
    }
}

impl MemFs {
    /// The mount's patchgroup table.
    pub fn group_table(&self) -> &Arc<GroupTable> {
        &self.inner.groups
    }

    /// A process's holdings, empty (a process that has made no group).
    pub fn new_held(&self) -> Held {
        Held {
            table: self.inner.groups.clone(),
            held: Vec::new(),
        }
    }

    /// `depend(q, p)` for the process holding `held`: no change of `q`
    /// reaches the disk before every change of `p` has.
    pub fn pg_depend(&self, held: &Held, q: u64, p: u64, uid: u32) -> Result<(), GroupError> {
        if held.add_dependency(q, p, uid)? {
            self.log_in_domain(
                LogOp::Depend {
                    on: GROUP_DOMAIN | p,
                },
                GROUP_DOMAIN | q,
            );
        }
        Ok(())
    }

    /// Makes group `g` durable, with what it depends on.
    pub fn pg_sync(&self, held: &Held, g: u64, uid: u32) -> Result<(), PgSyncError> {
        held.check(g, uid).map_err(PgSyncError::Group)?;
        self.sync_stream(GROUP_DOMAIN | g)
            .map_err(PgSyncError::Flush)
    }
}

/// Why [`MemFs::pg_sync`] failed: the call, or the flush.
#[derive(Debug)]
pub enum PgSyncError {
    Group(GroupError),
    Flush(crate::MemError),
}
