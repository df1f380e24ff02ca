//! diskfs as the layer above uses it ([`Disk`]): one handle shared by
//! threads, with the lock inside, so the layer above never holds diskfs's
//! state, names a patch or drives a device flush.
//!
//! - **Reads** (`getattr`, `lookup`, `read`, ...) take the lock for one
//!   call.
//! - **A batch** ([`Disk::batch`], [`Batch`]) holds the lock while a flush
//!   applies its operations in order as one atomic unit (one journal
//!   transaction), split only at the points the layer above offers
//!   (`split_point`, operation boundaries). Finishing it gives a
//!   [`Durability`]: what must reach the disk for all of it to be durable.
//! - **Durability** ([`Disk::wait_durable`]) writes and flushes until that
//!   goal has committed, dropping the lock around every device flush, so
//!   other threads read and apply their batches while the device works
//!   (in journal mode the next transaction commits and its log blocks go
//!   out meanwhile). A wait told that another thread's flush covers what
//!   it needs sleeps until that flush ends ([`FlushGate`]).
//!
//! Lock order: the layer above may hold its own locks when it calls in;
//! nothing here calls out while holding the lock.

use crate::attr::Attr;
use crate::attr::SetAttr;
use crate::batch::Op;
use crate::data::Pages;
use crate::dir::Entry;
use crate::error::{DiskError, Result};
use crate::fs::DiskFs;
use crate::Refusal;
use parking_lot::{Condvar, Mutex, MutexGuard};
use stitch_format::xattr::Xattr;
use stitch_format::{BlockNo, InodeNo, TimeRange, Timestamp};
use stitch_patch::{PatchId, SyncStep};

/// diskfs shared between threads.
pub struct Disk {
    fs: Mutex<Option<DiskFs>>,
    flushes: FlushGate,
}

/// What a batch needs on disk to be durable. Opaque: the layer above only
/// hands it back to [`Disk::wait_durable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Durability(Option<PatchId>);

impl Durability {
    /// Nothing to wait for.
    pub const NOTHING: Durability = Durability(None);
}

/// Free counts as the disk will hold them once what is applied is
/// durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub free_blocks: u64,
    pub free_inodes: u64,
    /// Inode numbers reserved for creates not applied yet.
    pub reserved_inodes: u64,
}

/// The file system's fixed figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub block_size: u64,
    pub blocks: u64,
    pub inodes: u64,
    /// Blocks kept for root (`r_blocks_count`).
    pub reserved_root_blocks: u64,
    /// The image can hold extended attributes (`ext_attr`).
    pub xattrs: bool,
    /// The times its inodes can hold.
    pub times: TimeRange,
    /// Soft updates: a batch's changes reach the disk one by one, so an
    /// ordered batch keeps each in its place ([`Batch::ordered`]); with a
    /// journal the batch is one transaction.
    pub soft_updates: bool,
}

/// A diskfs call on an unmounted handle.
const UNMOUNTED: DiskError = DiskError::Refused(Refusal::Invalid("unmounted"));

impl Disk {
    pub fn new(fs: DiskFs) -> Disk {
        Disk {
            fs: Mutex::new(Some(fs)),
            flushes: FlushGate::default(),
        }
    }

    /// Runs `f` on diskfs under the lock: for tests and tools (the device,
    /// the journal's figures), not for the layer above.
    pub fn inspect<R>(&self, f: impl FnOnce(&mut DiskFs) -> R) -> Result<R> {
        Ok(f(self.lock()?.fs()))
    }

    fn lock(&self) -> Result<Locked<'_>> {
        let g = self.fs.lock();
        if g.is_none() {
            return Err(UNMOUNTED);
        }
        Ok(Locked(g))
    }

    pub fn shape(&self) -> Result<Shape> {
        self.inspect(|d| {
            let sb = d.superblock();
            Shape {
                block_size: d.block_size() as u64,
                blocks: u64::from(sb.blocks_count()),
                inodes: u64::from(sb.inodes_count),
                reserved_root_blocks: u64::from(sb.r_blocks_count_lo),
                xattrs: d.supports_xattrs(),
                times: d.time_range(),
                soft_updates: d.modes().consistency() == crate::Consistency::SoftUpdates,
            }
        })
    }

    pub fn counts(&self) -> Result<Counts> {
        self.inspect(|d| counts(d))
    }

    pub fn getattr(&self, ino: InodeNo) -> Result<Attr> {
        self.lock()?.fs().getattr(ino)
    }

    pub fn lookup(&self, dir: InodeNo, name: &[u8]) -> Result<Option<Entry>> {
        self.lock()?.fs().lookup(dir, name)
    }

    pub fn readdir(&self, dir: InodeNo) -> Result<Vec<Entry>> {
        self.lock()?.fs().readdir(dir)
    }

    pub fn readlink(&self, ino: InodeNo) -> Result<Vec<u8>> {
        self.lock()?.fs().readlink(ino)
    }

    pub fn read(&self, ino: InodeNo, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.lock()?.fs().read(ino, offset, len)
    }

    pub fn xattrs(&self, ino: InodeNo) -> Result<Vec<Xattr>> {
        self.lock()?.fs().xattrs(ino)
    }

    /// The block a file's `logical` block is stored in, if any.
    pub fn physical_block(&self, ino: InodeNo, logical: u64) -> Result<Option<BlockNo>> {
        self.lock()?.fs().physical_block(ino, logical)
    }

    /// Reserves an inode number for a create not applied yet
    /// ([`DiskFs::reserve_inode`]); returns it with the counts after.
    pub fn reserve_inode(&self, parent: InodeNo, dir: bool) -> Result<(InodeNo, Counts)> {
        let mut l = self.lock()?;
        let ino = l.fs().reserve_inode(parent, dir)?;
        Ok((ino, counts(l.fs())))
    }

    pub fn unreserve_inode(&self, ino: InodeNo) -> Result<()> {
        self.lock()?.fs().unreserve_inode(ino)
    }

    /// Starts a batch: the operations applied through it form one atomic
    /// unit, and it holds the lock until finished or dropped.
    pub fn batch(&self) -> Result<Batch<'_>> {
        let mut l = self.lock()?;
        l.fs().modes_mut().begin_atomic();
        Ok(Batch {
            l,
            patches: Vec::new(),
            open: true,
            ordered: false,
        })
    }

    /// Writes and flushes until `goal` has committed, holding the lock for
    /// each round's writes and commits but not through the device flush,
    /// nor while it waits for another thread's flush (Featherstitch §3's
    /// "write-before" is kept by the cache; this only schedules it).
    pub fn wait_durable(&self, goal: Durability) -> Result<()> {
        let Durability(Some(goal)) = goal else {
            return Ok(());
        };
        loop {
            let ticket = {
                let mut l = self.lock()?;
                match l.fs().sync_step(goal)? {
                    SyncStep::Done => return Ok(()),
                    SyncStep::Flush(t) => t,
                    SyncStep::Wait => {
                        // A ticket is running: its thread counts it ended
                        // only after `flushed`, which needs the lock held
                        // here, so the count read now is before that.
                        let seen = self.flushes.ended();
                        drop(l);
                        self.flushes.wait_past(seen);
                        continue;
                    }
                }
            };
            let ended = Ended(&self.flushes);
            let result = ticket.flush();
            self.lock()?.fs().flushed(ticket, result)?;
            drop(ended);
        }
    }

    /// Lets go of diskfs without unmounting it, after a failure that lost
    /// what the layer above held: the image stays marked in use (for fsck
    /// and the next mount), and later calls fail.
    pub fn close(&self) {
        self.fs.lock().take();
    }

    /// Makes everything durable and marks the file system clean; later
    /// calls fail.
    pub fn unmount(&self, now: Timestamp) -> Result<()> {
        let fs = self.fs.lock().take().ok_or(UNMOUNTED)?;
        fs.unmount(now).map(drop)
    }
}

fn counts(d: &DiskFs) -> Counts {
    Counts {
        free_blocks: u64::from(d.free_blocks()),
        free_inodes: u64::from(d.free_inodes()),
        reserved_inodes: d.reserved_inodes() as u64,
    }
}

/// The lock, known to hold a mounted file system.
struct Locked<'a>(MutexGuard<'a, Option<DiskFs>>);

impl Locked<'_> {
    fn fs(&mut self) -> &mut DiskFs {
        self.0.as_mut().expect("checked when locked")
    }
}

/// Operations applied as one atomic unit, under the lock.
pub struct Batch<'a> {
    l: Locked<'a>,
    /// The patch standing for each change applied, grouped at `finish`.
    patches: Vec<PatchId>,
    /// The atomic section is still open.
    open: bool,
    /// The batch is [`Batch::ordered`].
    ordered: bool,
}

impl Batch<'_> {
    fn keep(&mut self, p: PatchId) {
        self.patches.push(p);
    }

    /// Applies `op`; a create takes the reserved number `ino` if given.
    pub fn apply(&mut self, op: &Op, ino: Option<InodeNo>, now: Timestamp) -> Result<()> {
        let done = self.l.fs().apply_as(op, ino, now)?;
        self.keep(done.patch);
        Ok(())
    }

    /// Tells diskfs `ino` is open before an unlink takes its last name.
    pub fn open(&mut self, ino: InodeNo) -> Result<()> {
        self.l.fs().open(ino)
    }

    /// The last close of an inode diskfs holds open.
    pub fn release(&mut self, ino: InodeNo, now: Timestamp) -> Result<()> {
        if let Some(p) = self.l.fs().release(ino, now)? {
            self.keep(p);
        }
        Ok(())
    }

    /// Before an unlinked file's data or attributes are written
    /// ([`DiskFs::settle_unlink`]).
    pub fn settle_unlink(&mut self, ino: InodeNo) -> Result<()> {
        self.l.fs().settle_unlink(ino)
    }

    pub fn truncate(&mut self, ino: InodeNo, size: u64, now: Timestamp) -> Result<()> {
        let p = self.l.fs().truncate(ino, size, now)?;
        self.keep(p);
        Ok(())
    }

    /// Writes a run of whole pages (see [`DiskFs::write_pages`]); returns
    /// the bytes written (short on a full disk).
    pub fn write_pages(&mut self, ino: InodeNo, run: Pages<'_>, now: Timestamp) -> Result<usize> {
        let (n, p) = self.l.fs().write_pages(ino, run, now)?;
        self.keep(p);
        Ok(n)
    }

    pub fn set_xattrs(&mut self, ino: InodeNo, set: &[Xattr], now: Timestamp) -> Result<()> {
        let p = self.l.fs().set_xattrs(ino, set, now)?;
        self.keep(p);
        Ok(())
    }

    pub fn setattr(&mut self, ino: InodeNo, set: SetAttr, now: Timestamp) -> Result<()> {
        let p = self.l.fs().setattr(ino, set, now)?;
        self.keep(p);
        Ok(())
    }

    /// An inode as the batch has left it so far.
    pub fn getattr(&mut self, ino: InodeNo) -> Result<Attr> {
        self.l.fs().getattr(ino)
    }

    pub fn block_size(&mut self) -> usize {
        self.l.fs().block_size()
    }

    pub fn counts(&mut self) -> Counts {
        counts(self.l.fs())
    }

    /// The batch carries streams' changes, so every crash must leave a
    /// prefix of each ([`stitch_modes::Modes::ordered`]): in a journal
    /// mode its file data goes through the journal whatever the data
    /// mode (data written in place before the commit would show a later
    /// change before an earlier one); in soft updates each operation,
    /// from one [`Batch::split_point`] to the next, reaches the disk only
    /// after every one before it.
    pub fn ordered(&mut self) -> Result<()> {
        self.ordered = true;
        Ok(self.l.fs().modes_mut().ordered()?)
    }

    /// An operation boundary where the unit may be split (a journal
    /// transaction that would outgrow half the log commits here), and
    /// in an ordered batch a link of its chain.
    pub fn split_point(&mut self) -> Result<()> {
        Ok(self.l.fs().modes_mut().split_point()?)
    }

    /// Closes the atomic unit: what everything applied needs on disk.
    pub fn finish(mut self) -> Result<Durability> {
        self.open = false;
        let m = self.l.fs().modes_mut();
        m.end_atomic()?;
        // An ordered batch is durable only with every chained batch
        // before it (in soft updates: the chain's tail), even one whose
        // own changes were nothing new.
        if self.ordered {
            self.patches.extend(m.chain_tail());
        }
        if self.patches.is_empty() {
            return Ok(Durability::NOTHING);
        }
        Ok(Durability(Some(m.group(&self.patches)?)))
    }
}

impl Drop for Batch<'_> {
    /// A batch abandoned on an error still closes its atomic unit, so a
    /// later one can commit; the error itself is the caller's to report.
    fn drop(&mut self) {
        if self.open {
            let _ = self.l.fs().modes_mut().end_atomic();
        }
    }
}

/// How many device flushes run outside the lock have ended. A wait that
/// diskfs tells to wait for another thread's flush ([`SyncStep::Wait`])
/// reads the count under the lock and sleeps until it moves. A flush
/// counts itself ended only after `flushed` took its ticket off the
/// cache's running list (under the lock; on an error path just after it),
/// so a wait that saw the ticket running cannot miss its end.
#[derive(Default)]
struct FlushGate {
    ended: Mutex<u64>,
    cv: Condvar,
}

impl FlushGate {
    fn ended(&self) -> u64 {
        *self.ended.lock()
    }

    fn wait_past(&self, seen: u64) {
        let mut n = self.ended.lock();
        while *n == seen {
            self.cv.wait(&mut n);
        }
    }
}

/// Counts a flush ended when dropped, whatever way it ends.
struct Ended<'a>(&'a FlushGate);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        *self.0.ended.lock() += 1;
        self.0.cv.notify_all();
    }
}
