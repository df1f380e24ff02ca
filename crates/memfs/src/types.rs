//! The values memfs hands to the frontend.

use std::time::Duration;
use stitch_diskfs::{InodeNo, Timestamp};

/// What kind of file an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

/// The attributes `stat` shows. Times are as the file system holds them
/// (its [`crate::TimeRange`]: nanoseconds on images with 256-byte inodes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// The ext2 inode number, the same across remounts.
    pub ino: InodeNo,
    pub kind: Kind,
    /// Permission bits with setuid, setgid and sticky.
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte sectors allocated (an estimate while data is in memory).
    pub blocks: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    /// A device node's (major, minor); (0, 0) otherwise.
    pub rdev: (u32, u32),
}

/// What a `setattr` changes; `None` leaves a field alone. The change time
/// is always set to now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttrs {
    pub perm: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    /// Drop the file's set-ID bits first (a truncate or a change of owner
    /// by this caller), as [`DropSetId`] says.
    pub drop_setid: Option<DropSetId>,
}

/// A time a `setattr` sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    /// The clock, the same reading as the change time (`UTIME_NOW`).
    Now,
    /// This time, as the file system holds it: clamped to its range and
    /// cut to its granularity, as the kernel would store it.
    At(Timestamp),
}

/// A caller whose write, truncate or change of owner takes a file's
/// set-user-ID bit away, and its set-group-ID bit when the group may
/// execute the file or the caller is neither in the file's group nor
/// privileged: the kernel's rule for local file systems, which FUSE leaves
/// to the file system once it takes `HANDLE_KILLPRIV_V2`. A write or
/// truncate reaches only regular files (`setattr_should_drop_suidgid`); a
/// change of owner applies it to every type but a directory, whose
/// set-group-ID bit only says what its new entries inherit (`chown_common`
/// asks for both bits to go unless the inode is a directory, and
/// `setattr_should_drop_sgid` decides the set-group-ID one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropSetId {
    /// The caller's group.
    pub gid: u32,
    /// The caller may keep the set-group-ID bit of a file whose group it
    /// is not in (it has `CAP_FSETID`).
    pub privileged: bool,
}

impl DropSetId {
    /// `perm` (a file's permission bits) once this caller changed it.
    pub fn apply(self, perm: u16, file_gid: u32) -> u16 {
        let mut perm = perm & !0o4000;
        let group_exec = perm & 0o010 != 0;
        if group_exec || (!self.privileged && self.gid != file_gid) {
            perm &= !0o2000;
        }
        perm
    }
}

/// One directory entry (never `.` or `..`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: InodeNo,
    pub kind: Kind,
}

/// `statfs`'s figures. Free blocks are counted as the disk will have them
/// once memory reaches it (a removed file's room at once), never more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
}

/// How memfs runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Bytes of file pages kept in memory before a flush and eviction.
    pub memory_limit: u64,
    /// How often everything is flushed in the background; `None` never
    /// (tests drive flushes themselves), and no write-behind either.
    pub flush_interval: Option<Duration>,
    /// Write-behind: once a file holds this many bytes of dirty pages, the
    /// background flusher flushes what an fsync of it would (but nobody
    /// waits),
    /// so a large file reaches the disk while it is still being written
    /// rather than all at its fsync or close. 0: never. Needs the
    /// background flusher (`flush_interval`).
    pub write_behind: u64,
    /// Stamp every change with this time instead of the clock (tests that
    /// compare with a model).
    pub fixed_time: Option<Timestamp>,
    /// What an fsync makes durable ([`Order`]).
    pub order: Order,
}

/// What an `fsync` or `fdatasync` makes durable, and so which crash states
/// a mount may leave.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Order {
    /// Every change made on the mount before it, in the order made: what a
    /// journal committing in sequence gives (ext3 and ext4 commit all
    /// earlier metadata with any fsync), and what Git, mail stores and the
    /// programs studied in "All File Systems Are Not Created Equal" rely
    /// on. Every flush takes everything logged, write-behind's too, so no
    /// flush writes a change without the ones made before it; in journal
    /// mode the disk always holds a prefix of the history at flush
    /// boundaries.
    #[default]
    Sequential,
    /// McoreFS's closure (§4.3): the inode's changes and what they depend on,
    /// nothing else. Faster when unrelated work is pending, but a crash may
    /// keep a later change (a renamed reference) and lose an earlier one
    /// it was meant to follow (the object it names) unless that one was
    /// fsynced itself.
    Precise,
    /// Every thread that chose no stream is in one stream
    /// (`domains::GLOBAL`): an fsync takes what that stream did before
    /// it, and every flush that takes any of it takes all of it up to its
    /// cut, so the disk holds a prefix of that history at every flush, in
    /// soft updates too ("Consistency Without Ordering"'s init stream:
    /// what the applications "All File Systems Are Not Created Equal"
    /// studied assume). A thread in a stream of its own keeps its
    /// stream's order.
    Global,
}

impl Order {
    pub fn name(self) -> &'static str {
        match self {
            Order::Sequential => "sequential",
            Order::Precise => "precise",
            Order::Global => "global",
        }
    }
}

impl std::fmt::Display for Order {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Order {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Order, String> {
        match s {
            "sequential" => Ok(Order::Sequential),
            "precise" => Ok(Order::Precise),
            "global" => Ok(Order::Global),
            other => Err(format!(
                "unknown order {other:?} (sequential, precise or global)"
            )),
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memory_limit: 1 << 30,
            flush_interval: Some(Duration::from_secs(5)),
            write_behind: 16 << 20,
            fixed_time: None,
            order: Order::default(),
        }
    }
}

/// What memory holds now ([`crate::MemFs::memory`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Pages of file data in memory, clean or dirty.
    pub pages: u64,
    /// Of those, pages changed since the last flush that took them.
    pub dirty_pages: u64,
    /// Files and directories with changes not yet flushed.
    pub dirty_inodes: u64,
    /// Inodes in the table.
    pub inodes: u64,
}

/// Logged changes not yet flushed ([`crate::MemFs::pending`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pending {
    /// Every entry.
    pub changes: u64,
    /// Entries by ordering domain (a stream's number, or a patchgroup's
    /// with `GROUP_DOMAIN` set; an entry may be in more than one).
    pub by_domain: std::collections::BTreeMap<u64, u64>,
}

impl Pending {
    pub(crate) fn count(&mut self, domains: &[u64]) {
        self.changes += 1;
        for d in domains {
            *self.by_domain.entry(*d).or_default() += 1;
        }
    }
}

/// Logged operations flushed, by kind: each applied to diskfs, or
/// absorbed (cancelled by a later one, never written).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpKinds {
    pub applied: [u64; 7],
    pub absorbed: [u64; 7],
}

impl OpKinds {
    /// The kinds' names, in the arrays' order: a file, directory, link or
    /// node made; a hard link; a name removed; a rename; a file's data or
    /// attributes changed (its state written); a last close of a file
    /// already removed; a patchgroup dependency recorded (it writes
    /// nothing).
    pub const NAMES: [&'static str; 7] = [
        "create", "link", "unlink", "rename", "change", "release", "depend",
    ];

    pub(crate) fn add(&mut self, o: &OpKinds) {
        for k in 0..Self::NAMES.len() {
            self.applied[k] += o.applied[k];
            self.absorbed[k] += o.absorbed[k];
        }
    }
}

/// Counters since mount.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Flushes that reached diskfs (fsync, sync, background, pressure).
    pub flushes: u64,
    /// Logged operations applied to diskfs.
    pub ops_applied: u64,
    /// Logged operations that cancelled out and never reached diskfs.
    pub ops_absorbed: u64,
    /// Page writes handed to diskfs (each page at most once per flush).
    pub pages_written: u64,
    /// fsyncs that found nothing to write.
    pub fsync_noops: u64,
    /// fsyncs in a stream that ignores them (ordering only).
    pub fsyncs_ignored: u64,
    /// Pages dropped from memory by eviction.
    pub pages_evicted: u64,
    /// Files handed to the background flusher by write-behind.
    pub write_behinds: u64,
    /// Write-behind flushes that finished: what they wrote, and every
    /// flush before them, is durable.
    pub written_behind: u64,
    /// New pages given the buffer of a page written behind and let go,
    /// rather than memory never touched before.
    pub pages_reused: u64,
    /// Flushes memfs began on its own, by cause.
    pub own_flushes: OwnFlushes,
    /// The operations flushed, by kind.
    pub op_kinds: OpKinds,
}

/// Flushes memfs began on its own ([`FlushCause`]), counted as they begin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnFlushes {
    pub room: u64,
    pub pressure: u64,
    pub periodic: u64,
    pub write_behind: u64,
    pub settle: u64,
}

impl OwnFlushes {
    pub(crate) fn count(&mut self, cause: FlushCause) {
        *match cause {
            FlushCause::Room => &mut self.room,
            FlushCause::Pressure => &mut self.pressure,
            FlushCause::Periodic => &mut self.periodic,
            FlushCause::WriteBehind(_) => &mut self.write_behind,
            FlushCause::Settle(_) => &mut self.settle,
        } += 1;
    }
}

/// Why memfs began a flush that no caller asked for
/// ([`crate::MemFs::on_own_flush`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushCause {
    /// Everything, because a change found too little room on disk while
    /// frees or reservations waited in memory; before the change is made.
    Room,
    /// Everything, then clean pages and inodes leave memory: the pages in
    /// memory passed `memory_limit`. After the read or write that passed it.
    Pressure,
    /// Everything, every `flush_interval`.
    Periodic,
    /// What an fsync of this file would take ([`Order`]): it holds
    /// `write_behind` bytes of dirty pages.
    WriteBehind(InodeNo),
    /// The state of this file and what it depends on, in soft updates,
    /// before a change to it in a stream when other changes came since
    /// it last changed (a flush writes a file's state in one place of the
    /// stream's order). Before the change is made.
    Settle(InodeNo),
}

/// How `set_xattr` treats an attribute that is (not) there already:
/// `setxattr(2)`'s flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XattrSet {
    /// Create or replace.
    Either,
    /// `XATTR_CREATE`: fail with EEXIST if it exists.
    Create,
    /// `XATTR_REPLACE`: fail with ENODATA if it does not.
    Replace,
}
