//! memfs errors. Each keeps the kind of what went wrong up to the caller
//! (the FUSE edge): a refusal of the request, no room, a latched mount,
//! damage found on disk, a failed device, a bug. [`MemError::errno`] is
//! the one mapping from kind to errno; the kinds that mean trouble carry
//! diskfs's error whole, so the edge can log what the errno alone loses
//! ([`MemError::trouble`]).

use stitch_diskfs::{DiskError, ErrorKind, InodeNo, Refusal};

#[derive(Debug, thiserror::Error)]
pub enum MemError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("no space left on device")]
    NoSpace,
    /// A change refused because an earlier failure latched the mount
    /// read-only.
    #[error("read-only file system (an earlier failure is latched)")]
    ReadOnly,
    /// A flush (an fsync, a sync) after an earlier failure latched the
    /// mount: what that failure held may be lost.
    #[error("input/output error: an earlier failure is latched, and what it held may be lost")]
    Latched,
    #[error("operation not supported: {0}")]
    Unsupported(&'static str),
    #[error("stale handle: {0} no longer exists")]
    Stale(InodeNo),
    #[error("no such extended attribute")]
    NoAttribute,
    /// The bytes on disk are wrong (what e2fsck would repair).
    #[error("corrupt file system: {0}")]
    Corrupt(DiskError),
    /// The device failed, now or earlier (see [`MemError::io_error`]).
    #[error("device error: {0}")]
    Device(DiskError),
    /// The disk holds something valid that stitchfs does not implement.
    #[error("not implemented by stitchfs: {0}")]
    Unimplemented(DiskError),
    /// stitchfs broke one of its own invariants, or a flush met a refusal
    /// memfs should have prevented.
    #[error("bug in stitchfs: {0}")]
    Bug(DiskError),
    /// The flush thread could not be started.
    #[error("starting the flush thread: {0}")]
    Thread(std::io::Error),
}

pub type Result<T> = std::result::Result<T, MemError>;

/// What a [`MemError`] that means trouble is, for the log.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Trouble {
    /// Damage on disk.
    Corruption,
    /// The device failed.
    Device,
    /// A bug in stitchfs.
    Bug,
}

impl MemError {
    /// The errno a system call returns for this error.
    pub fn errno(&self) -> i32 {
        match self {
            MemError::Refused(r) => match r {
                Refusal::NotFound => libc::ENOENT,
                Refusal::Exists => libc::EEXIST,
                Refusal::NotDir => libc::ENOTDIR,
                Refusal::IsDir => libc::EISDIR,
                Refusal::NotEmpty => libc::ENOTEMPTY,
                Refusal::NameTooLong => libc::ENAMETOOLONG,
                Refusal::Invalid(_) => libc::EINVAL,
                Refusal::NotPermitted(_) => libc::EPERM,
                Refusal::TooManyLinks => libc::EMLINK,
                Refusal::TooLarge => libc::EFBIG,
            },
            MemError::NoSpace => libc::ENOSPC,
            MemError::ReadOnly => libc::EROFS,
            MemError::Unsupported(_) => libc::EOPNOTSUPP,
            MemError::Stale(_) => libc::ESTALE,
            MemError::NoAttribute => libc::ENODATA,
            MemError::Latched
            | MemError::Corrupt(_)
            | MemError::Device(_)
            | MemError::Unimplemented(_)
            | MemError::Bug(_)
            | MemError::Thread(_) => libc::EIO,
        }
    }

    /// Whether this error is trouble with the mount (not a refusal of the
    /// request), and which: the edge logs these with their detail.
    pub fn trouble(&self) -> Option<Trouble> {
        match self {
            MemError::Corrupt(_) => Some(Trouble::Corruption),
            MemError::Device(_) => Some(Trouble::Device),
            MemError::Bug(_) => Some(Trouble::Bug),
            _ => None,
        }
    }

    /// The operating system's error behind this one: a failed device's,
    /// when this error is that failure (later calls only repeat its
    /// text), or the one that kept the flush thread from starting.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            MemError::Device(e) => e.io_error(),
            MemError::Thread(e) => Some(e),
            _ => None,
        }
    }

    /// A failed flush, which has lost the state it cut: a refusal there is
    /// a bug (writes and creates hold room for what they need, so even a
    /// full disk should not get this far, but is kept as `NoSpace`).
    pub(crate) fn of_flush(e: DiskError) -> MemError {
        match e.kind() {
            ErrorKind::Refused => MemError::Bug(e),
            _ => e.into(),
        }
    }
}

impl From<DiskError> for MemError {
    fn from(e: DiskError) -> Self {
        match e {
            DiskError::Refused(r) => MemError::Refused(r),
            DiskError::NoSpace(_) => MemError::NoSpace,
            e => match e.kind() {
                ErrorKind::Damage => MemError::Corrupt(e),
                ErrorKind::Device => MemError::Device(e),
                ErrorKind::Unsupported => MemError::Unimplemented(e),
                ErrorKind::Refused | ErrorKind::NoSpace | ErrorKind::Bug => MemError::Bug(e),
            },
        }
    }
}
