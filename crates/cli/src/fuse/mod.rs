//! The FUSE frontend (docs/design.md "Layers": the frontend translates; it holds
//! no file-system logic). Kernel requests arrive through `fuser` on one
//! worker thread per core and become memfs calls; memfs errors become the
//! errno each carries.
//!
//! Mapping rules:
//! - FUSE's root node id 1 is ext2 inode 2; every other node id is the ext2
//!   inode number itself, so `st_ino` is the same across remounts (and the
//!   root reports 2). [`ids`] is the one place the two meet.
//! - Attributes and entries are cached by the kernel for [`TTL`]: every
//!   change goes through this mount, so the kernel sees each one itself.
//!   No writeback cache: each `write` reaches memfs before it returns.
//! - Permissions are checked by the kernel (`default_permissions`); memfs
//!   applies ext2 semantics (setgid directories, link counts).
//! - Node ids the kernel holds are counted (lookups less forgets); a number
//!   ext2 reuses for a new inode while the kernel still holds the old one
//!   gets a new generation, so the kernel does not take one for the other
//!   ([`nodes`]).
//! - Directory listings are snapshotted at `opendir`, so offsets stay
//!   stable however the directory changes while it is read ([`dirs`]).
//! - A panic in a handler is caught, logged, and answered with `EIO`; the
//!   mount stays up.
//!
//! - Every request's caller is resolved at one entry point
//!   ([`StitchFuse::see`], module `callers`): one atomic load while no
//!   process holds a context. The request runs in its thread's stream
//!   (`streams`; `stitch_memfs::in_domains`), so memfs orders what it
//!   changes.
//!
//! Modules: `ops` (the `fuser::Filesystem` methods), `ids` (node ids and
//! inode numbers), `control` (the control table's ioctls), `callers` (who
//! is calling, and contexts), `streams` (named streams and who is in
//! which), `requests` and `stats` (what was served, and the mount's
//! figures for `stitchfs stats`), `dirs` (directory
//! handles), `nodes` (lookup counts and generations), `diag` (where messages go: stderr, or syslog once daemonized),
//! `daemon` (daemonizing, signals, unmounting).

mod callers;
mod control;
pub mod daemon;
pub mod diag;
mod dirs;
mod groups;
mod ids;
pub mod metrics;
mod nodes;
mod ops;
mod requests;
pub mod stats;
mod streams;
mod xsync;

use fuser::{Errno, FileAttr, FileType};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::SystemTime;
pub use stitch_fusekit::{ErrorReply, MAX_WRITE, NAME_MAX, TTL};
use stitch_memfs::{Attr, InodeNo, Kind, MemError, MemFs, Timestamp, Trouble};

/// The `fuser::Filesystem` over one memfs.
pub struct StitchFuse {
    fs: MemFs,
    dirs: dirs::DirHandles,
    nodes: nodes::Nodes,
    /// The kernel took `HANDLE_KILLPRIV_V2`: dropping set-ID bits on write,
    /// truncate and change of owner is ours (see `ops::WANTED`).
    drops_setid: bool,
    /// The processes calling, and their contexts.
    callers: Arc<callers::Callers>,
    /// The named streams.
    streams: Arc<streams::Streams>,
    /// The requests served, by opcode.
    requests: Arc<requests::Requests>,
    /// External-synchrony groups and what they changed.
    xsync: Arc<xsync::Groups>,
    /// Spinning on the device during bursts of requests (attached by the
    /// mount command to its session; idle otherwise).
    spin: Arc<stitch_fusekit::spin::Spin>,
    /// Files are opened and closed in the kernel alone (its no-open
    /// support): `open` is answered `ENOSYS` once, and memfs holds a file
    /// open while the kernel holds its node (`nodes.rs`).
    no_open: bool,
}

/// Processes that may hold a context at once, unless the mount says.
pub const DEFAULT_CONTEXTS: usize = 4096;

impl StitchFuse {
    pub fn new(fs: MemFs) -> Self {
        StitchFuse {
            fs,
            dirs: dirs::DirHandles::default(),
            nodes: nodes::Nodes::default(),
            drops_setid: false,
            callers: Arc::new(callers::registry(DEFAULT_CONTEXTS)),
            streams: Arc::default(),
            requests: Arc::default(),
            xsync: Arc::default(),
            spin: stitch_fusekit::spin::Spin::new(),
            no_open: true,
        }
    }

    /// `true`: the kernel sends `open` and `release` for every file
    /// opened, and memfs counts those (the mount's `--open-requests on`,
    /// for comparison); `false`, the default: it sends neither.
    pub fn with_open_requests(mut self, on: bool) -> Self {
        self.no_open = !on;
        self
    }

    /// The switch that spins on the session's device during bursts of
    /// requests, for the mount to attach once the session exists.
    pub fn spin(&self) -> Arc<stitch_fusekit::spin::Spin> {
        self.spin.clone()
    }

    /// At most `n` processes hold a context at once; one more asking for
    /// one is refused `EAGAIN` until others exit.
    pub fn with_contexts(mut self, n: usize) -> Self {
        self.callers = Arc::new(callers::registry(n));
        self
    }

    /// What the mount's figures are read from, for a reader outside the
    /// request loop (`--metrics`).
    pub fn figure_source(&self) -> stats::Source {
        stats::Source {
            fs: self.fs.clone(),
            callers: self.callers.clone(),
            streams: self.streams.clone(),
            requests: self.requests.clone(),
            xsync: self.xsync.clone(),
        }
    }
}

/// Has memfs tell the kernel, through `notifier`, of attributes a flush
/// changed on its own, so that its cached attributes are dropped. The
/// notification only marks attributes stale (no page cache is touched),
/// so it never waits and may be sent from a request's own thread. An
/// inode the kernel does not hold answers ENOENT, which is fine.
pub fn tell_kernel_of_attr_changes(fs: &MemFs, notifier: fuser::Notifier) {
    fs.on_attr_change(move |ino| {
        let _ = notifier.inval_inode(ids::node_of(ino), -1, 0);
    });
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDev => FileType::CharDevice,
        Kind::BlockDev => FileType::BlockDevice,
    }
}

fn time(t: Timestamp) -> SystemTime {
    t.to_system_time()
}

/// What `stat` shows: `st_ino` is the ext2 inode number (2 for the root).
fn stat_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: ids::shown_ino(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.ctime),
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: libc::makedev(a.rdev.0, a.rdev.1) as u32,
        blksize: 4096,
        flags: 0,
    }
}

/// The attributes of an entry reply, whose `ino` is the node id.
fn entry_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: ids::node_of(a.ino),
        ..stat_attr(a)
    }
}

/// Why a request failed: a memfs error (its kind kept, logged with its
/// detail when it means trouble) or an errno the adapter decided on.
#[derive(Debug)]
enum Failure {
    Mem(MemError),
    Errno(Errno),
}

impl From<MemError> for Failure {
    fn from(e: MemError) -> Self {
        Failure::Mem(e)
    }
}

impl From<Errno> for Failure {
    fn from(e: Errno) -> Self {
        Failure::Errno(e)
    }
}

impl Failure {
    /// The errno the kernel is answered with: memfs's one mapping from
    /// kind to errno ([`MemError::errno`]), or the adapter's own.
    fn errno(&self) -> Errno {
        match self {
            Failure::Mem(e) => Errno::from_i32(e.errno()),
            Failure::Errno(e) => *e,
        }
    }

    /// What the log says of a failure that means something is wrong with
    /// the mount rather than with the request (damage on disk, a device
    /// error, a bug, a latched read-only state, a vanished inode, a full
    /// disk); `None` for an ordinary refusal. The errno alone loses what
    /// went wrong, so corruption, device errors and bugs are named with
    /// their detail.
    fn log_line(&self, op: &str, ino: InodeNo) -> Option<String> {
        let at = format!("{op} ({ino})");
        let Failure::Mem(e) = self else {
            return self
                .troubling_errno()
                .then(|| format!("{at}: {:?}", self.errno()));
        };
        Some(match e.trouble() {
            Some(Trouble::Corruption) => {
                format!("{at}: {e}; check the image with e2fsck -fn")
            }
            Some(Trouble::Device) => format!("{at}: {e}"),
            Some(Trouble::Bug) => format!("BUG: {at}: {e}"),
            None if self.troubling_errno() => format!("{at}: {e}"),
            None => return None,
        })
    }

    fn troubling_errno(&self) -> bool {
        matches!(
            self.errno(),
            Errno::EIO | Errno::EROFS | Errno::ESTALE | Errno::ENOSPC
        )
    }
}

type OpResult<T> = Result<T, Failure>;

/// Refuses names ext2 cannot hold.
fn check_name(name: &[u8]) -> OpResult<()> {
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG.into());
    }
    Ok(())
}

/// Runs one request: `work` computes the answer, `answer` sends it. A
/// failure is answered with its errno (and logged when it means trouble).
/// A panic is logged and answered with `EIO` (by us in `work`, by fuser
/// dropping the unsent reply in `answer`), and the mount stays up.
fn serve<R: ErrorReply, T, E: Into<Failure>>(
    op: &'static str,
    ino: InodeNo,
    reply: R,
    work: impl FnOnce() -> Result<T, E>,
    answer: impl FnOnce(R, T),
) -> bool {
    match catch_unwind(AssertUnwindSafe(|| work().map_err(Into::into))) {
        Ok(Ok(v)) => {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| answer(reply, v))) {
                log_panic(op, ino, &*panic);
                return false;
            }
            true
        }
        Ok(Err(f)) => {
            if let Some(line) = f.log_line(op, ino) {
                diag::request_error(&line);
            }
            reply.fail(f.errno());
            false
        }
        Err(panic) => {
            log_panic(op, ino, &*panic);
            reply.fail(Errno::EIO);
            false
        }
    }
}

fn log_panic(op: &str, ino: InodeNo, panic: &(dyn std::any::Any + Send)) {
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into());
    diag::error(&format!(
        "BUG: {op} ({ino}) panicked: {msg}; answered EIO, the mount stays up"
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuser::INodeNo;
    use stitch_memfs::Refusal;

    #[test]
    fn stat_shows_ext2_inode_and_entry_the_node_id() {
        let a = Attr {
            ino: InodeNo::ROOT,
            kind: Kind::Dir,
            perm: 0o755,
            nlink: 3,
            uid: 0,
            gid: 0,
            size: 4096,
            blocks: 8,
            atime: Timestamp::new(1, 5),
            mtime: Timestamp::new(-2, 500_000_000),
            ctime: Timestamp::from_secs(1 << 33),
            rdev: (0, 0),
        };
        assert_eq!(stat_attr(&a).ino, INodeNo(2));
        // Nanoseconds reach the kernel, before the epoch and after 2106 too.
        let back = |t| Timestamp::from_system_time(t);
        assert_eq!(back(stat_attr(&a).atime), a.atime);
        assert_eq!(back(stat_attr(&a).mtime), a.mtime);
        assert_eq!(back(stat_attr(&a).ctime), a.ctime);
        assert_eq!(entry_attr(&a).ino, INodeNo::ROOT);
        let dev = Attr {
            ino: InodeNo(12),
            kind: Kind::CharDev,
            rdev: (4, 65),
            ..a
        };
        let r = u64::from(stat_attr(&dev).rdev);
        assert_eq!((libc::major(r), libc::minor(r)), (4, 65));
    }

    #[test]
    fn names_longer_than_255_bytes_are_refused() {
        assert!(check_name(&[b'x'; 255]).is_ok());
        assert_eq!(
            check_name(&[b'x'; 256]).unwrap_err().errno(),
            Errno::ENAMETOOLONG
        );
    }

    /// A reply that records what it was sent.
    struct Fake(std::sync::Arc<std::sync::Mutex<Option<Result<u32, Errno>>>>);

    impl ErrorReply for Fake {
        fn fail(self, e: Errno) {
            *self.0.lock().unwrap() = Some(Err(e));
        }
    }

    fn run(work: impl FnOnce() -> OpResult<u32>) -> Option<Result<u32, Errno>> {
        let got = std::sync::Arc::new(std::sync::Mutex::new(None));
        let answer = |r: Fake, v| *r.0.lock().unwrap() = Some(Ok(v));
        serve("test", InodeNo(12), Fake(got.clone()), work, answer);
        let out = got.lock().unwrap().take();
        out
    }

    #[test]
    fn serve_answers_values_errors_and_panics() {
        assert_eq!(run(|| Ok(7)), Some(Ok(7)));
        assert_eq!(
            run(|| Err(MemError::Refused(Refusal::NotFound).into())),
            Some(Err(Errno::ENOENT))
        );
        assert_eq!(run(|| Err(Errno::EBADF.into())), Some(Err(Errno::EBADF)));
        assert_eq!(run(|| panic!("boom")), Some(Err(Errno::EIO)));
    }

    #[test]
    fn memfs_errors_keep_their_errno() {
        let f: Failure = MemError::Refused(Refusal::NotEmpty).into();
        assert_eq!(f.errno(), Errno::ENOTEMPTY);
        assert_eq!(f.log_line("rmdir", InodeNo(12)), None);
        let f: Failure = MemError::ReadOnly.into();
        assert_eq!(f.errno(), Errno::EROFS);
        assert!(f.log_line("write", InodeNo(12)).is_some());
    }

    /// Corruption, device errors and bugs all answer `EIO`; the log tells
    /// them apart and keeps their detail.
    #[test]
    fn troubles_answer_eio_and_are_logged_by_kind() {
        use stitch_diskfs::{Damage, DiskError};
        let damage = Damage::Root("is not a directory".into());
        let corrupt: Failure = MemError::Corrupt(DiskError::Damaged(damage)).into();
        let line = corrupt.log_line("lookup", InodeNo(2)).unwrap();
        assert!(line.contains("the root directory (inode 2) is not a directory"));
        assert!(line.contains("e2fsck"), "{line}");
        let io = std::io::Error::from_raw_os_error(libc::EIO);
        let dev = stitch_blockdev::DevError::Io {
            what: "write of block 7".into(),
            source: io,
        };
        let device: Failure = MemError::Device(DiskError::Patch(dev.into())).into();
        let line = device.log_line("fsync", InodeNo(12)).unwrap();
        assert!(line.contains("write of block 7"), "{line}");
        let bug: Failure = MemError::Bug(DiskError::Refused(Refusal::NotFound)).into();
        assert!(bug
            .log_line("fsync", InodeNo(12))
            .unwrap()
            .starts_with("BUG: "));
        for f in [corrupt, device, bug] {
            assert_eq!(f.errno(), Errno::EIO);
        }
    }
}
