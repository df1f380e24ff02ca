//! Flushing (McoreFS §4.3): the cut, the dependency closure, absorption,
//! and one batch applied to diskfs as one atomic unit.
//!
//! The closure: an operation may reach the disk only with every earlier
//! operation on any object it touches (`LogOp::objects`). That one rule
//! gives McoreFS's: a cross-directory rename touches both directories (the
//! partner is flushed up to the rename); a create or link touches the
//! inode (inodes linked into a flushed directory go first); an rmdir
//! touches the removed directory (deletions inside it go first); a
//! directory moved to another parent touches that parent's ancestors as
//! they were (their changes up to the move go first: no loop reaches the
//! disk, Appendix A). It also keeps what diskfs needs to apply the subset:
//! a directory exists before entries go into it, a name is free before it
//! is reused.
//!
//! Absorption: an inode created and removed within the flushed operations,
//! whose every operation can vanish with it, never reaches the disk; its
//! number goes back to the pool (once nothing holds it open).
//!
//! File data and attributes are state, not operations: a `Dirty` entry
//! says the inode changed, and the flush writes what memory holds at the
//! cut (pages are snapshotted by pointer, copy-on-write for later writers):
//! truncate to the smallest size seen since the last flush, write the
//! dirty pages in runs, set the final size and attributes. A page
//! rewritten many times is written once.
//!
//! Every flush ends with what it applied durable (the journal's commit, or
//! the patches written), so "flushed" always means "durable".

use crate::error::{MemError, Result};
use crate::fs::{MemFs, ROOT};
use crate::log::{Entry, LogOp, Made, Object};
use crate::node::{Node, NodeState, Page};
use crate::types::{FlushCause, Kind, OpKinds, Order};
use parking_lot::{Condvar, Mutex, MutexGuard};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stitch_diskfs::Refusal;
use stitch_diskfs::{Batch, InodeNo, Op, Pages, SetAttr, Timestamp, Xattr, XattrBlock};

/// Pages per diskfs write (a bound on one operation's journal space).
const RUN_PAGES: usize = 256;

/// Entries cut from the logs but not yet applied, indexed by object.
#[derive(Default)]
pub(crate) struct Merged {
    ops: BTreeMap<u64, Entry>,
    by_obj: FxHashMap<Object, BTreeSet<u64>>,
}

impl Merged {
    /// Counts the entries merged and not yet flushed.
    pub(crate) fn pending(&self, into: &mut crate::types::Pending) {
        for e in self.ops.values() {
            into.count(&e.domains);
        }
    }

    fn add(&mut self, entries: Vec<Entry>) {
        for e in entries {
            for o in e.objects() {
                self.by_obj.entry(o).or_default().insert(e.stamp);
            }
            self.ops.insert(e.stamp, e);
        }
    }

    /// Every entry that must go with the entries on `targets` (each an
    /// object and the last stamp wanted of it). Two more rules keep
    /// streams whole up to the cut: an entry in a stream takes the
    /// stream's every entry (the flush then holds a prefix of it however
    /// it was reached), and a stream's `Dirty` entry takes every entry on
    /// its inode (the flush writes the inode's state at the cut, which
    /// holds the later writes of other streams too, so their `Dirty`
    /// entries and so their prefixes come along). A patchgroup's
    /// dependency entry (`LogOp::Depend`, in the dependent group's
    /// domain) takes the group depended on whole: one way only, so a
    /// flush of that group does not take its dependents.
    fn closure(&self, targets: &[(Object, u64)]) -> BTreeSet<u64> {
        let mut selected = BTreeSet::new();
        let mut reached: FxHashMap<Object, u64> = FxHashMap::default();
        let mut work: Vec<(Object, u64)> = targets.to_vec();
        while let Some((obj, limit)) = work.pop() {
            let from = match reached.get(&obj) {
                Some(&r) if r >= limit => continue,
                Some(&r) => r + 1,
                None => 0,
            };
            reached.insert(obj, limit);
            let Some(stamps) = self.by_obj.get(&obj) else {
                continue;
            };
            for &st in stamps.range(from..=limit) {
                if selected.insert(st) {
                    let e = &self.ops[&st];
                    if let LogOp::Depend { on } = e.op {
                        work.push((Object::Domain(on), u64::MAX));
                    }
                    let whole = !e.domains.is_empty();
                    for o in e.objects() {
                        let state =
                            matches!(o, Object::Inode(_)) && matches!(e.op, LogOp::Dirty { .. });
                        let to_cut = whole && (matches!(o, Object::Domain(_)) || state);
                        work.push((o, if to_cut { u64::MAX } else { st }));
                    }
                }
            }
        }
        selected
    }

    fn take(&mut self, stamp: u64) -> Entry {
        let e = self.ops.remove(&stamp).expect("selected entry");
        for o in e.objects() {
            if let Some(s) = self.by_obj.get_mut(&o) {
                s.remove(&stamp);
                if s.is_empty() {
                    self.by_obj.remove(&o);
                }
            }
        }
        e
    }

    /// The stamps of the entries on inode `ino`.
    fn pending_on(&self, ino: InodeNo) -> impl Iterator<Item = u64> + '_ {
        let obj = Object::Inode(ino);
        self.by_obj.get(&obj).into_iter().flatten().copied()
    }
}

/// What a flush writes of one file: its state at the cut.
struct FileState {
    ino: InodeNo,
    pages: Vec<(u64, Page)>,
    size: u64,
    min_size: u64,
    disk_size: u64,
    attr: SetAttr,
    /// The whole set of extended attributes, when it changed.
    xattrs: Option<std::sync::Arc<crate::node::Xattrs>>,
    /// Whether the inode still exists on disk after the operations.
    write: bool,
    /// A regular file (only files have pages and sizes to set).
    file: bool,
}

/// What a flush reads back of an inode it wrote: its number, its size if
/// it is a directory, its sectors and its attribute block.
type ReadBack = (InodeNo, Option<u64>, u64, XattrBlock);

/// One flush's work, decided at the cut.
struct Plan {
    ops: Vec<Entry>,
    files: Vec<FileState>,
    /// Inodes to tell diskfs are open before an unlink reaches them.
    open: Vec<InodeNo>,
    absorbed: usize,
    /// The operations taken, by kind ([`OpKinds`]): applied, absorbed.
    kinds: OpKinds,
    /// Blocks the flushed operations and pages had reserved.
    reserved: i64,
    /// Blocks `statfs` counted as freed by this plan (`frees`).
    frees: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    All,
    Inode(InodeNo),
    /// A stream's changes up to the cut, with an inode's (an fsync in
    /// the stream) if given.
    Stream(u64, Option<InodeNo>),
}

/// Which applied plans are durable. Plans are numbered as they are
/// applied (under the apply lock, so in cut order); each is marked done
/// once durable, or once it failed (the device is latched then). A flush
/// returns only when every plan numbered before its own is done too: a
/// later plan may depend on what an earlier one holds.
#[derive(Default)]
pub(crate) struct Durable {
    state: Mutex<DurableState>,
    cv: Condvar,
}

#[derive(Default)]
struct DurableState {
    /// The number the next plan gets.
    next: u64,
    /// Every plan numbered below this is done.
    done_below: u64,
    /// Plans done out of order, above `done_below`.
    done: BTreeSet<u64>,
}

impl Durable {
    /// Numbers a plan being applied (call under the apply lock).
    fn begin(&self) -> u64 {
        let mut s = self.state.lock();
        s.next += 1;
        s.next - 1
    }

    /// The number the next plan will get: waiting below it covers every
    /// plan applied so far.
    fn next(&self) -> u64 {
        self.state.lock().next
    }

    fn finish(&self, n: u64) {
        let mut s = self.state.lock();
        s.done.insert(n);
        loop {
            let below = s.done_below;
            if !s.done.remove(&below) {
                break;
            }
            s.done_below += 1;
        }
        self.cv.notify_all();
    }

    /// Waits until every plan numbered below `n` is done.
    fn wait_below(&self, n: u64) {
        let mut s = self.state.lock();
        while s.done_below < n {
            self.cv.wait(&mut s);
        }
    }
}

/// Marks a plan done when dropped, whatever way its flush ends.
struct Finish<'a>(&'a Durable, u64);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.finish(self.1);
    }
}

/// What the background flusher is asked to do.
#[derive(Default)]
pub(crate) struct Orders {
    /// Unmounting: stop.
    pub stop: bool,
    /// Files to flush now (write-behind); a file stays here until its
    /// flush is done, so a writer does not ask twice.
    pub behind: BTreeSet<InodeNo>,
}

impl MemFs {
    /// Makes everything durable (`sync`, `syncfs`).
    pub fn sync(&self) -> Result<()> {
        self.flush(Scope::All)
    }

    /// Makes `ino` durable, with what the mount's [`Order`] says an fsync
    /// covers: every change made before it (`Sequential`), or McoreFS's
    /// closure (`Precise`, §4.3): a file's data, attributes and the
    /// creation of its inode (its name too, as diskfs creates both at
    /// once); a directory's entries and whatever they depend on.
    /// `datasync` (fdatasync) is served the same way.
    ///
    /// In a stream (`domains`) an fsync takes the stream's changes up to
    /// it and the inode's, whatever the mount's order; with
    /// `ignore_fsync` it takes nothing and returns at once (the stream's
    /// order keeps what it would have ordered).
    pub fn fsync(&self, ino: InodeNo, _datasync: bool) -> Result<()> {
        let d = self.stream_now();
        match d.stream {
            Some(_) if d.ignore_fsync => {
                self.inner.stats.lock().fsyncs_ignored += 1;
                Ok(())
            }
            Some(stream) => self.flush(Scope::Stream(stream, Some(ino))),
            None => self.flush(self.fsync_scope(ino)),
        }
    }

    /// Makes every change of `stream` durable (and what they depend on).
    pub fn sync_stream(&self, stream: u64) -> Result<()> {
        self.flush(Scope::Stream(stream, None))
    }

    /// What an fsync of `ino` by a thread in no stream takes under the
    /// mount's order (under `Global` every such thread is in one).
    fn fsync_scope(&self, ino: InodeNo) -> Scope {
        match self.inner.opts.order {
            Order::Sequential => Scope::All,
            Order::Precise => Scope::Inode(ino),
            Order::Global => Scope::Stream(crate::domains::GLOBAL, Some(ino)),
        }
    }

    /// A flush memfs makes on its own: counted, and told to the
    /// [`MemFs::on_own_flush`] hook first. Everything, or for write-behind
    /// what an fsync of the file would take.
    pub(crate) fn flush_own(&self, cause: FlushCause) -> Result<()> {
        let scope = match cause {
            FlushCause::WriteBehind(ino) => self.fsync_scope(ino),
            FlushCause::Settle(ino) => Scope::Inode(ino),
            FlushCause::Room | FlushCause::Pressure | FlushCause::Periodic => Scope::All,
        };
        let wait = !matches!(cause, FlushCause::Settle(_));
        // A latched mount writes nothing more: nothing to tell (the flush
        // says why).
        if !self.inner.read_only.load(Ordering::SeqCst) {
            self.inner.stats.lock().own_flushes.count(cause);
            let hook = self.inner.own_flush.read().clone();
            if let Some(hook) = hook {
                hook(cause);
            }
        }
        self.flush_waiting(scope, wait)
    }

    fn flush(&self, scope: Scope) -> Result<()> {
        self.flush_waiting(scope, true)
    }

    /// A flush, which returns once what it applied is durable unless
    /// `wait` is false and the plan is chained in soft updates
    /// ([`MemFs::apply`]).
    fn flush_waiting(&self, scope: Scope, wait: bool) -> Result<()> {
        if self.inner.read_only.load(Ordering::SeqCst) {
            return Err(MemError::Latched);
        }
        let whole = matches!(scope, Scope::All) && wait;
        let mut merged = self.inner.merged.lock();
        let (plan, below) = self.cut(&mut merged, scope)?;
        // Plans are applied in the order they were cut: take the apply
        // lock before another flush may cut. Even with nothing to write,
        // wait for the plans cut before (they may hold what this fsync
        // covers) to be durable.
        let order = self.inner.apply_lock.lock();
        drop(merged);
        let Some(plan) = plan else {
            let before = self.inner.durable.next();
            drop(order);
            self.inner.stats.lock().fsync_noops += 1;
            self.inner.durable.wait_below(before);
            self.durable_so_far()?;
            self.mark_durable(whole, below);
            return Ok(());
        };
        self.apply(plan, order, wait)?;
        self.mark_durable(whole, below);
        Ok(())
    }

    /// After a whole flush returned: every change stamped below `below`
    /// (the stamp at its cut) is durable.
    fn mark_durable(&self, whole: bool, below: u64) {
        if whole {
            self.inner.durable_below.fetch_max(below, Ordering::SeqCst);
        }
    }

    /// The stamp the next change will get (every change logged so far has
    /// a smaller one): a point in the mount's history that
    /// [`MemFs::sync_through`] can be asked to make durable.
    pub fn stamp_now(&self) -> u64 {
        self.inner.logs.next_stamp()
    }

    /// Every change stamped below this is known durable (a whole flush,
    /// `sync` or a periodic one, returned after cutting past it).
    pub fn durable_below(&self) -> u64 {
        self.inner.durable_below.load(Ordering::SeqCst)
    }

    /// Makes every change stamped below `stamp` durable (external
    /// synchrony's commit): nothing to do if that is known already, else
    /// a whole flush, which concurrent callers share as far as the flush
    /// order lets them. Whether it flushed.
    pub fn sync_through(&self, stamp: u64) -> Result<bool> {
        if self.durable_below() >= stamp {
            return Ok(false);
        }
        self.sync()?;
        Ok(true)
    }

    /// After waiting for earlier plans: an error if one of them failed
    /// (the device is latched then, and what they held may be lost), and
    /// the wait for the last plan applied without one (`unawaited`).
    fn durable_so_far(&self) -> Result<()> {
        if self.inner.read_only.load(Ordering::SeqCst) {
            return Err(MemError::Latched);
        }
        let unawaited = *self.inner.unawaited.lock();
        if let Some(goal) = unawaited {
            if let Err(e) = self.inner.disk.wait_durable(goal) {
                return Err(self.failed_flush(e));
            }
        }
        Ok(())
    }

    /// The cut: every operation in progress finishes, the logs are merged,
    /// and the plan is taken while nothing changes.
    /// With the plan, the stamp at the cut: every change stamped below it
    /// was logged and merged.
    fn cut(&self, merged: &mut Merged, scope: Scope) -> Result<(Option<Plan>, u64)> {
        let _w = self.inner.gate.write();
        let below = self.inner.logs.next_stamp();
        merged.add(self.inner.logs.drain());
        let selected: BTreeSet<u64> = match scope {
            Scope::All => merged.ops.keys().copied().collect(),
            Scope::Inode(ino) => {
                let n = self.cached_node(ino);
                if n.is_some_and(|n| n.s.read().never_disk) {
                    return Ok((None, below));
                }
                merged.closure(&[(Object::Inode(ino), u64::MAX)])
            }
            Scope::Stream(stream, ino) => {
                let mut targets = vec![(Object::Domain(stream), u64::MAX)];
                targets.extend(ino.map(|i| (Object::Inode(i), u64::MAX)));
                merged.closure(&targets)
            }
        };
        if selected.is_empty() {
            return Ok((None, below));
        }
        // Only the nodes these operations name: the table holds every
        // inode in memory (a mail directory's 100,000), and a copy of it
        // cost each fsync milliseconds.
        let nodes = self.nodes_of(selected.iter().flat_map(|st| merged.ops[st].op.objects()));
        // Soft updates with streams' changes: the batch is chained, and
        // every change in it reaches the disk in its place (`apply_plan`).
        // Nothing is absorbed then: a crash between two changes must show
        // every change before it, even the creation of a file the stream
        // removed later. (A file's state is settled before its last name
        // goes, `MemFs::settle_name`.)
        let ordered =
            self.inner.soft_updates && selected.iter().any(|st| !merged.ops[st].domains.is_empty());
        let dead = if ordered {
            FxHashSet::default()
        } else {
            self.absorbable(merged, &selected, &nodes)
        };
        let mut plan = Plan {
            ops: Vec::new(),
            files: Vec::new(),
            open: Vec::new(),
            absorbed: 0,
            kinds: OpKinds::default(),
            reserved: 0,
            frees: 0,
        };
        for st in &selected {
            let e = merged.take(*st);
            for o in e.op.objects() {
                if let Some(n) = nodes.get(&o) {
                    n.pending.fetch_sub(1, Ordering::AcqRel);
                }
            }
            plan.reserved += e.op.reserves();
            if e.op.subjects().iter().any(|s| dead.contains(s)) {
                plan.absorbed += 1;
                plan.kinds.absorbed[e.op.kind()] += 1;
                continue;
            }
            plan.kinds.applied[e.op.kind()] += 1;
            match &e.op {
                LogOp::Dirty { ino } => {
                    let taken = (&mut plan.reserved, &mut plan.frees);
                    if let Some(f) = self.take_state(*ino, merged, &selected, &nodes, taken) {
                        plan.files.push(f);
                    }
                }
                LogOp::Unlink { ino, .. }
                | LogOp::Rename {
                    other: Some(ino), ..
                } => {
                    // Only an inode with no name left in memory loses its
                    // last name on disk in this plan (a name, once gone to
                    // zero, never comes back): keep it open on disk until
                    // its last release. One that still has a name is
                    // released in memory without a disk release to follow.
                    if let Some(n) = nodes.get(ino) {
                        let mut s = n.s.write();
                        if s.nlink == 0 && s.open > 0 && !s.disk_open && s.kind != Kind::Dir {
                            s.disk_open = true;
                            plan.open.push(*ino);
                        }
                    }
                }
                _ => {}
            }
            plan.ops.push(e);
        }
        plan.reserved += self.absorb(&dead, &nodes);
        let done = |(ino, _): &(&InodeNo, &Arc<Node>)| merged.pending_on(**ino).next().is_none();
        plan.frees += self.take_leaving_frees(nodes.iter().filter(done).map(|(_, n)| n));
        Ok((Some(plan), below))
    }

    /// The nodes in memory with these numbers, looked up together.
    fn nodes_of(&self, inos: impl IntoIterator<Item = InodeNo>) -> FxHashMap<InodeNo, Arc<Node>> {
        let table = self.inner.nodes.read();
        inos.into_iter()
            .filter_map(|ino| Some((ino, table.get(&ino)?.clone())))
            .collect()
    }

    /// Lets go of the inodes a cut absorbed whole (`dead`: made and
    /// removed within it, so the disk never sees them): marked never to
    /// reach the disk, their frees recounted, and those no one holds open
    /// dropped and their numbers recycled. Returns the blocks they had
    /// reserved.
    fn absorb(&self, dead: &FxHashSet<InodeNo>, nodes: &FxHashMap<InodeNo, Arc<Node>>) -> i64 {
        let mut reserved = 0;
        for ino in dead {
            let Some(n) = nodes.get(ino) else { continue };
            let mut s = n.s.write();
            s.never_disk = true;
            s.dirty = false;
            s.dirty_domains.clear();
            s.xattrs_dirty = false;
            reserved += s.take_reserved();
            self.recount_frees(&mut s);
            if s.open == 0 {
                let dir = s.kind == Kind::Dir;
                drop(s);
                self.inner.nodes.write().remove(ino);
                self.recycle_ino(*ino, dir);
            }
        }
        reserved
    }

    /// Inodes created and removed within `selected` whose every operation
    /// can vanish with them.
    fn absorbable(
        &self,
        merged: &Merged,
        selected: &BTreeSet<u64>,
        nodes: &FxHashMap<InodeNo, Arc<Node>>,
    ) -> FxHashSet<InodeNo> {
        let mut dead: FxHashSet<InodeNo> = selected
            .iter()
            .filter_map(|st| match &merged.ops[st].op {
                LogOp::Create { ino, .. } => Some(*ino),
                _ => None,
            })
            .filter(|ino| {
                nodes.get(ino).is_some_and(|n| n.s.read().nlink == 0)
                    && merged.pending_on(*ino).all(|st| selected.contains(&st))
            })
            .collect();
        loop {
            let before = dead.len();
            let mut out = Vec::new();
            for &ino in &dead {
                let ok = merged.pending_on(ino).all(|st| {
                    let op = &merged.ops[&st].op;
                    op.absorbable() && op.subjects().iter().all(|s| dead.contains(s))
                });
                if !ok {
                    out.push(ino);
                }
            }
            for ino in out {
                dead.remove(&ino);
            }
            if dead.len() == before {
                return dead;
            }
        }
    }

    /// Takes a file's state for writing and marks it clean.
    fn take_state(
        &self,
        ino: InodeNo,
        merged: &Merged,
        selected: &BTreeSet<u64>,
        nodes: &FxHashMap<InodeNo, Arc<Node>>,
        (reserved, frees): (&mut i64, &mut u64),
    ) -> Option<FileState> {
        let n = nodes.get(&ino)?;
        let mut s = n.s.write();
        if !s.dirty || s.never_disk {
            return None;
        }
        s.dirty = false;
        s.dirty_domains.clear();
        // Gone from the disk once this plan's operations are applied (no
        // name, nobody holding it open): its data has no reader, and
        // writing it would give blocks to a freed inode.
        let leaves = s.gone() && merged.pending_on(ino).all(|st| selected.contains(&st));
        let pages: Vec<(u64, Page)> = s
            .dirty_pages
            .iter()
            .map(|i| (*i, s.pages[i].clone()))
            .collect();
        *reserved += s.take_reserved();
        s.dirty_pages.clear();
        let xattrs = if s.xattrs_dirty {
            s.xattrs_dirty = false;
            s.xattrs.clone()
        } else {
            None
        };
        let f = FileState {
            ino,
            pages: if s.kind == Kind::File {
                pages
            } else {
                Vec::new()
            },
            size: s.size,
            min_size: s.min_size,
            disk_size: s.disk_size,
            attr: SetAttr {
                perm: Some(s.perm),
                uid: Some(s.uid),
                gid: Some(s.gid),
                atime: Some(s.atime),
                mtime: Some(s.mtime),
                ctime: Some(s.ctime),
            },
            xattrs,
            write: !leaves,
            file: s.kind == Kind::File,
        };
        if !leaves {
            *frees += self.take_cut_frees(&mut s, f.xattrs.is_some());
        }
        if s.kind == Kind::File {
            s.disk_size = s.size;
            s.min_size = s.size;
        }
        Some(f)
    }

    /// Applies a plan to diskfs as one atomic unit and waits until it is
    /// durable. `order` (the apply lock) is released once the plan is in
    /// diskfs: the next plan may be applied, and its blocks written, while
    /// this one's device flush runs.
    ///
    /// Unless `wait` is false and the plan is chained (soft updates, a
    /// plan with streams' changes: [`Batch::ordered`]): then it returns
    /// once applied, and its goal becomes `unawaited`. The chain puts
    /// every later chained patch after this plan's, and every later flush
    /// waits for the goal too ([`MemFs::durable_so_far`]), so no flush
    /// returns with it not durable.
    fn apply(&self, plan: Plan, order: MutexGuard<'_, ()>, wait: bool) -> Result<()> {
        let number = self.inner.durable.begin();
        let finish = Finish(&self.inner.durable, number);
        let t = self.now();
        let n_ops = plan.ops.len();
        let n_pages: usize = plan.files.iter().map(|f| f.pages.len()).sum();
        let result = self.apply_batch(&plan, t);
        drop(order);
        self.inner
            .reserved_blocks
            .fetch_sub(plan.reserved, Ordering::AcqRel);
        let chained = self.inner.soft_updates && plan.ops.iter().any(|e| !e.domains.is_empty());
        let wait = wait || !chained;
        let result = result.and_then(|(goal, sectors)| {
            if wait {
                self.inner.disk.wait_durable(goal)?;
            } else if goal != stitch_diskfs::Durability::NOTHING {
                // An ordered batch's goal covers every earlier one.
                *self.inner.unawaited.lock() = Some(goal);
            }
            Ok(sectors)
        });
        drop(finish);
        if wait {
            self.inner.durable.wait_below(number);
        }
        let sectors = match result {
            Ok(s) => s,
            Err(e) => return Err(self.failed_flush(e)),
        };
        if wait {
            self.durable_so_far()?;
        } else if self.inner.read_only.load(Ordering::SeqCst) {
            return Err(MemError::Latched);
        }
        let nodes = self.nodes_of(
            sectors
                .iter()
                .map(|&(ino, ..)| ino)
                .chain(plan.ops.iter().flat_map(|e| e.op.subjects())),
        );
        self.read_back_all(sectors, &nodes);
        self.drop_removed(&plan, &nodes);
        let mut st = self.inner.stats.lock();
        st.flushes += 1;
        st.ops_applied += n_ops as u64;
        st.ops_absorbed += plan.absorbed as u64;
        st.op_kinds.add(&plan.kinds);
        st.pages_written += n_pages as u64;
        Ok(())
    }

    /// The first phase of [`MemFs::apply`]: the plan as one diskfs batch,
    /// under diskfs's lock. Returns what must be durable for it, and what
    /// to read back of the files it wrote and the directories it edited
    /// (diskfs decides how their blocks grow). The free counts are
    /// published here, while the batch still holds them.
    fn apply_batch(
        &self,
        plan: &Plan,
        t: Timestamp,
    ) -> stitch_diskfs::Result<(stitch_diskfs::Durability, Vec<ReadBack>)> {
        let dirs: Vec<InodeNo> = {
            let mut v: Vec<InodeNo> = plan.ops.iter().flat_map(|e| e.op.dirs_edited()).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let streams = plan.ops.iter().any(|e| !e.domains.is_empty());
        self.inner.disk.batch().and_then(|mut b| {
            if streams {
                b.ordered()?;
            }
            let r = apply_plan(&mut b, plan, t, streams);
            let written = plan
                .files
                .iter()
                .filter(|f| f.write)
                .map(|f| (f.ino, false));
            let sectors: Vec<ReadBack> = written
                .chain(dirs.iter().map(|&ino| (ino, true)))
                .filter_map(|(ino, dir)| {
                    let a = b.getattr(ino).ok()?;
                    let sectors = u64::from(a.sectors);
                    Some((ino, dir.then_some(a.size), sectors, a.xattr_block))
                })
                .collect();
            let counts = b.counts();
            self.publish_disk_free(counts.free_blocks, plan.frees);
            self.inner
                .disk_free_inodes
                .store(counts.free_inodes, Ordering::Release);
            self.note_reserved(counts);
            let goal = r.and_then(|()| b.finish())?;
            Ok((goal, sectors))
        })
    }

    /// A flush that failed after its cut: the plan's state left memory with
    /// its cut, and part of it may be in diskfs: nothing after it may be
    /// written, or what was lost would be lost silently. Any failure here
    /// latches, a device's or not (a full disk should not get this far:
    /// writes and creates hold room for what they need), and later changes
    /// fail with EROFS. Returns the error to report.
    fn failed_flush(&self, e: stitch_diskfs::DiskError) -> MemError {
        self.inner.read_only.store(true, Ordering::SeqCst);
        MemError::of_flush(e)
    }

    /// Takes in what diskfs says of the written files and edited
    /// directories (`nodes` holds their nodes still loaded), and tells the
    /// kernel of the attributes that changed.
    fn read_back_all(&self, sectors: Vec<ReadBack>, nodes: &FxHashMap<InodeNo, Arc<Node>>) {
        let mut changed = Vec::new();
        for (ino, dir_size, sec, xattr_block) in sectors {
            if let Some(n) = nodes.get(&ino) {
                let mut s = n.s.write();
                match dir_size {
                    // A written file's blocks may have shown a guess, or
                    // (between the cut and now) only the old blocks: always
                    // tell.
                    None => changed.push(ino),
                    // A directory's size and blocks move only here.
                    Some(size) => {
                        if (s.size, s.disk_sectors) != (size, sec) {
                            changed.push(ino);
                        }
                        s.size = size;
                    }
                }
                self.read_back(&mut s, sec, xattr_block);
            }
        }
        self.attrs_changed(changed);
    }

    /// Inodes whose removal reached the disk leave memory. Their numbers
    /// are free on disk now, and a create may already have taken one for a
    /// new inode: remove only the node looked at (in `nodes`), never
    /// whatever holds its number by now.
    fn drop_removed(&self, plan: &Plan, nodes: &FxHashMap<InodeNo, Arc<Node>>) {
        for e in &plan.ops {
            for ino in e.op.subjects() {
                let Some(n) = nodes.get(&ino) else { continue };
                let s = n.s.read();
                if s.nlink == 0
                    && s.open == 0
                    && n.pending.load(Ordering::Acquire) == 0
                    && ino != ROOT
                {
                    drop(s);
                    let mut table = self.inner.nodes.write();
                    if table.get(&ino).is_some_and(|m| Arc::ptr_eq(m, n)) {
                        table.remove(&ino);
                    }
                }
            }
        }
    }

    // ---- background work ----------------------------------------------

    /// The background flusher: everything every `every`, and in between
    /// the files write-behind names. The periodic flush comes first when
    /// due, so a file written without pause cannot hold it off.
    pub(crate) fn background(&self, every: Duration) {
        let (lock, cv) = &self.inner.bg;
        let mut orders = lock.lock();
        let mut due = Instant::now() + every;
        while !orders.stop {
            if Instant::now() >= due {
                drop(orders);
                if let Err(e) = self.flush_own(FlushCause::Periodic) {
                    eprintln!("stitchfs: background flush failed: {e}");
                }
                self.inner.page_pool.trim_idle();
                due = Instant::now() + every;
                orders = lock.lock();
            } else if let Some(&ino) = orders.behind.first() {
                drop(orders);
                // As an fsync of the file would (under `Precise`, only its
                // closure goes).
                let flushed = self.flush_own(FlushCause::WriteBehind(ino));
                if flushed.is_ok() {
                    self.shed_clean_pages(ino);
                    self.inner.stats.lock().written_behind += 1;
                }
                orders = lock.lock();
                if let Err(e) = flushed {
                    eprintln!("stitchfs: write-behind flush failed: {e}");
                    orders.behind.remove(&ino);
                } else if !self.over_write_behind(ino) {
                    // Writes that came during the flush found the file
                    // still ordered and did not ask again: it stays
                    // ordered while they left the bound's worth. Checked
                    // under the orders' lock, so no later write is missed.
                    orders.behind.remove(&ino);
                }
            } else {
                cv.wait_until(&mut orders, due);
            }
        }
    }

    /// After a write: a file holding `write_behind` bytes of dirty pages
    /// is handed to the background flusher, once until it has flushed it.
    pub(crate) fn behind(&self, ino: InodeNo, dirty_pages: usize) {
        if self.inner.opts.flush_interval.is_none() || !self.write_behind_due(dirty_pages) {
            return;
        }
        self.hand_behind(ino);
    }

    /// After a settle (`MemFs::settle_before_change`) put `pages` of
    /// `ino`'s dirty pages in diskfs without waiting for the device: a
    /// stream rewriting one file settles at every write, so its pages
    /// never pile up in memory to reach the bound, yet they are not
    /// durable either. Once the settled pages reach the write-behind
    /// bound, the file goes to the background flusher as if its own
    /// pages had, and its flush waits for all the settles before it.
    pub(crate) fn settled(&self, ino: InodeNo, pages: usize) {
        if self.inner.opts.flush_interval.is_none() {
            return;
        }
        let before = self
            .inner
            .settled_pages
            .fetch_add(pages as u64, Ordering::AcqRel);
        let total = before + pages as u64;
        if !self.write_behind_due(total as usize) {
            return;
        }
        // Whoever crosses the bound hands the file on, once.
        if self
            .inner
            .settled_pages
            .compare_exchange(total, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.hand_behind(ino);
        }
    }

    fn hand_behind(&self, ino: InodeNo) {
        let (lock, cv) = &self.inner.bg;
        let mut orders = lock.lock();
        if orders.behind.insert(ino) {
            self.inner.stats.lock().write_behinds += 1;
            cv.notify_all();
        }
    }

    fn write_behind_due(&self, dirty_pages: usize) -> bool {
        let limit = self.inner.opts.write_behind;
        limit > 0 && (dirty_pages as u64) * self.inner.block_size >= limit
    }

    /// `ino` holds the write-behind bound's worth of dirty pages.
    fn over_write_behind(&self, ino: InodeNo) -> bool {
        let node = self.cached_node(ino);
        node.is_some_and(|n| self.write_behind_due(n.s.read().dirty_pages.len()))
    }

    /// After write-behind put a file's pages on disk, its clean pages leave
    /// memory and their buffers go to the page pool for the pages still
    /// coming: a file written behind is being streamed, its readers have
    /// the kernel's page cache (files are opened `KEEP_CACHE`) and then the
    /// disk, and without this every page of a large write was memory never
    /// touched before. The locks are eviction's: no cut or apply in progress,
    /// so a clean page is one diskfs holds.
    fn shed_clean_pages(&self, ino: InodeNo) {
        let _m = self.inner.merged.lock();
        let _a = self.inner.apply_lock.lock();
        let _w = self.inner.gate.write();
        let Some(n) = self.cached_node(ino) else {
            return;
        };
        let shed = self.drop_clean_pages(&mut n.s.write(), true);
        self.inner.stats.lock().pages_evicted += shed;
    }

    /// Drops a file's clean pages (the caller holds eviction's locks);
    /// their buffers go to the page pool if `recycle`, else are freed.
    /// Returns how many went.
    fn drop_clean_pages(&self, s: &mut NodeState, recycle: bool) -> u64 {
        let clean: Vec<u64> = s
            .pages
            .keys()
            .filter(|k| !s.dirty_pages.contains(k))
            .copied()
            .collect();
        for k in &clean {
            if let Some(p) = s.pages.remove(k) {
                if recycle {
                    self.inner.page_pool.give(p);
                }
            }
            self.inner.pages.fetch_sub(1, Ordering::AcqRel);
        }
        clean.len() as u64
    }

    /// Over the memory bound: flush, then drop clean pages (and clean,
    /// unused inodes) until a quarter of the bound is free.
    pub(crate) fn relieve_pressure(&self) {
        let bs = self.inner.block_size;
        let limit = self.inner.opts.memory_limit / bs;
        if self.inner.pages.load(Ordering::Acquire) <= limit {
            return;
        }
        if let Err(e) = self.flush_own(FlushCause::Pressure) {
            eprintln!("stitchfs: flush under memory pressure failed: {e}");
            return;
        }
        let target = limit - limit / 4;
        let _m = self.inner.merged.lock();
        let _a = self.inner.apply_lock.lock();
        let _w = self.inner.gate.write();
        let nodes: Vec<_> = self.inner.nodes.read().values().cloned().collect();
        let mut evicted = 0u64;
        for n in &nodes {
            if self.inner.pages.load(Ordering::Acquire) <= target {
                break;
            }
            evicted += self.drop_clean_pages(&mut n.s.write(), false);
        }
        // Inodes nobody uses and memory agrees with the disk about.
        let mut table = self.inner.nodes.write();
        table.retain(|ino, n| {
            if *ino == ROOT || n.pending.load(Ordering::Acquire) > 0 {
                return true;
            }
            let s = n.s.read();
            s.open > 0 || s.dirty || !s.pages.is_empty() || s.never_disk
        });
        self.inner.stats.lock().pages_evicted += evicted;
    }

    /// Flushes everything, stops the flusher and unmounts diskfs (the
    /// image is marked clean). Later calls fail.
    pub fn unmount(&self) -> Result<()> {
        {
            let (lock, cv) = &self.inner.bg;
            lock.lock().stop = true;
            cv.notify_all();
        }
        if let Some(h) = self.inner.flusher.lock().take() {
            let _ = h.join();
        }
        let flushed = self.sync();
        let _order = self.inner.apply_lock.lock();
        if let Err(e) = flushed {
            // What memory held is lost: leave the image marked in use
            // (for fsck), and later calls fail.
            self.inner.disk.close();
            return Err(e);
        }
        self.debug_assert_frees_settled();
        let pool: Vec<InodeNo> = {
            let mut p = self.inner.pool.lock();
            p.iter_mut().flat_map(std::mem::take).collect()
        };
        for ino in pool {
            let r = self.inner.disk.unreserve_inode(ino);
            self.on_disk(r)?;
        }
        let r = self.inner.disk.unmount(self.now());
        self.on_disk(r)
    }
}

/// Applies the plan's operations in stamp order, then the files' states.
/// A plan that carries streams (`ordered`: the batch is
/// [`Batch::ordered`]) writes each file's state where its first `Dirty`
/// entry stands instead, so in soft updates the state comes after the
/// stream's earlier operations and before its later ones (memfs never
/// lets a state span another change: `MemFs::settle_before_change`).
fn apply_plan(
    disk: &mut Batch<'_>,
    plan: &Plan,
    t: Timestamp,
    ordered: bool,
) -> stitch_diskfs::Result<()> {
    for ino in &plan.open {
        disk.open(*ino)?;
    }
    let mut written: FxHashSet<InodeNo> = FxHashSet::default();
    let files: FxHashMap<InodeNo, &FileState> = plan
        .files
        .iter()
        .filter(|f| ordered && f.write)
        .map(|f| (f.ino, f))
        .collect();
    for e in &plan.ops {
        apply_entry(disk, e)?;
        if let LogOp::Dirty { ino } = &e.op {
            if let Some(f) = files.get(ino).filter(|_| written.insert(*ino)) {
                disk.settle_unlink(f.ino)?;
                write_file(disk, f, t)?;
            }
        }
        disk.split_point()?;
    }
    for f in plan
        .files
        .iter()
        .filter(|f| f.write && !written.contains(&f.ino))
    {
        disk.settle_unlink(f.ino)?;
        write_file(disk, f, t)?;
    }
    Ok(())
}

/// One logged namespace operation, as diskfs applies it (a file's data
/// and attributes are written from its state, not its entries).
fn apply_entry(disk: &mut Batch<'_>, e: &Entry) -> stitch_diskfs::Result<()> {
    match &e.op {
        LogOp::Release { ino: i } => disk.release(*i, e.time),
        LogOp::Dirty { .. } | LogOp::Depend { .. } => Ok(()),
        LogOp::Create { ino: i, .. } => disk.apply(&disk_op(&e.op), Some(*i), e.time),
        op => disk.apply(&disk_op(op), None, e.time),
    }
}

/// diskfs's operation for a logged namespace change.
fn disk_op(op: &LogOp) -> Op {
    match op {
        LogOp::Create {
            parent,
            name,
            made,
            uid,
            gid,
            ..
        } => created(*parent, name.clone(), made, *uid, *gid),
        LogOp::Link {
            ino: i,
            parent,
            name,
        } => Op::Link {
            ino: *i,
            parent: *parent,
            name: name.clone(),
        },
        LogOp::Unlink {
            parent,
            name,
            dir: true,
            ..
        } => Op::Rmdir {
            parent: *parent,
            name: name.clone(),
        },
        LogOp::Unlink { parent, name, .. } => Op::Unlink {
            parent: *parent,
            name: name.clone(),
        },
        LogOp::Rename {
            from_dir,
            from,
            to_dir,
            to,
            flags,
            ..
        } => Op::Rename {
            from_dir: *from_dir,
            from: from.clone(),
            to_dir: *to_dir,
            to: to.clone(),
            flags: *flags,
        },
        LogOp::Dirty { .. } | LogOp::Release { .. } | LogOp::Depend { .. } => {
            unreachable!("state, not a namespace operation")
        }
    }
}

/// diskfs's operation for a create of `made`.
fn created(parent: InodeNo, name: Vec<u8>, made: &Made, uid: u32, gid: u32) -> Op {
    match made {
        Made::File { perm } => Op::Create {
            parent,
            name,
            perm: *perm,
            uid,
            gid,
        },
        Made::Dir { perm } => Op::Mkdir {
            parent,
            name,
            perm: *perm,
            uid,
            gid,
        },
        Made::Special { kind, perm } => Op::Mknod {
            parent,
            name,
            kind: *kind,
            perm: *perm,
            uid,
            gid,
        },
        Made::Symlink { target } => Op::Symlink {
            parent,
            name,
            target: target.clone(),
            uid,
            gid,
        },
    }
}

/// One file's state: cut to the smallest size seen, the dirty pages in
/// runs, the final size, the attributes.
fn write_file(disk: &mut Batch<'_>, f: &FileState, t: Timestamp) -> stitch_diskfs::Result<()> {
    let ino = f.ino;
    if !f.file {
        return write_attributes(disk, f, t);
    }
    let mut on_disk = f.disk_size;
    if f.min_size < on_disk {
        disk.truncate(ino, f.min_size, t)?;
        on_disk = f.min_size;
    }
    let bs = disk.block_size() as u64;
    for run in f.pages.chunk_by(|a, b| b.0 == a.0 + 1) {
        for run in run.chunks(RUN_PAGES) {
            let start = run[0].0 * bs;
            let end = ((run[run.len() - 1].0 + 1) * bs).min(f.size);
            if end > start {
                write_run(disk, ino, run, start, end, t)?;
                on_disk = on_disk.max(end);
            }
        }
    }
    if on_disk != f.size {
        disk.truncate(ino, f.size, t)?;
    }
    write_attributes(disk, f, t)
}

/// Pages of one run of consecutive pages, bytes `start..end` of the file.
fn write_run(
    disk: &mut Batch<'_>,
    ino: InodeNo,
    run: &[(u64, Page)],
    start: u64,
    end: u64,
    t: Timestamp,
) -> stitch_diskfs::Result<()> {
    // The snapshot's pages themselves: diskfs keeps each page that fills a
    // block rather than a copy, and a writer that changes one later copies
    // it first (`page_for_write`).
    let pages: Vec<Page> = run.iter().map(|(_, p)| Arc::clone(p)).collect();
    let len = (end - start) as usize;
    if disk.write_pages(
        ino,
        Pages {
            offset: start,
            pages: &pages,
            len,
        },
        t,
    )? < len
    {
        return Err(stitch_diskfs::DiskError::NoSpace("short write at flush"));
    }
    disk.split_point()
}

/// The extended attributes if they changed, then the inode's attributes
/// (last, so the change time is memory's).
fn write_attributes(
    disk: &mut Batch<'_>,
    f: &FileState,
    t: Timestamp,
) -> stitch_diskfs::Result<()> {
    let ino = f.ino;
    if let Some(x) = &f.xattrs {
        let set: Vec<Xattr> = x
            .iter()
            .map(|(n, v)| {
                Xattr::named(n, v.clone()).ok_or(stitch_diskfs::DiskError::Refused(
                    Refusal::Invalid("extended attribute name ext2 cannot store"),
                ))
            })
            .collect::<stitch_diskfs::Result<_>>()?;
        disk.set_xattrs(ino, &set, t)?;
    }
    disk.setattr(ino, f.attr, t)
}
