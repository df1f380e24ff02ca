//! Errors of diskfs: POSIX-style refusals a caller maps to an errno, the
//! world (a full disk, a device failure), and damage found on disk.
//!
//! Damage is kept apart from I/O: [`DiskError::is_damage`] says the bytes
//! on disk are wrong (what e2fsck would repair), [`DiskError::is_io`] that
//! the device failed; [`DiskError::kind`] sorts every error so. A
//! [`Damage`] found by mount's checks is a refusal before anything was
//! written; one found later (a free count that would leave its bounds) has
//! stopped every write.

use stitch_format::FormatError;
use stitch_modes::JournalError;
use stitch_patch::{DevError, PatchError, Stop};

/// A POSIX refusal of a request: nothing is wrong, the caller asked for
/// what the file system does not allow. One list for diskfs and memfs
/// (memfs refuses most of these itself, before diskfs sees the request);
/// the errno for each is chosen at the FUSE edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("file name longer than 255 bytes")]
    NameTooLong,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("operation not permitted: {0}")]
    NotPermitted(&'static str),
    #[error("too many links")]
    TooManyLinks,
    #[error("file too large for ext2's block maps")]
    TooLarge,
}

#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("no space left on device ({0})")]
    NoSpace(&'static str),
    #[error("corrupt file system: {0}")]
    Corrupt(String),
    #[error("damaged file system: {0}")]
    Damaged(#[from] Damage),
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Patch(#[from] PatchError),
    #[error("journal: {0}")]
    Journal(#[from] stitch_modes::JournalError),
}

/// What kind of failure a [`DiskError`] is, for a caller that answers
/// each kind its own way (an errno, a line in the log, a read-only latch).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A POSIX refusal of the request; nothing is wrong.
    Refused,
    /// No room left for what was asked.
    NoSpace,
    /// The bytes on disk are wrong (what e2fsck would repair).
    Damage,
    /// The device failed, now or earlier (and every write stopped then).
    Device,
    /// The file system is valid but holds something stitchfs does not
    /// implement (an inode mapped by extents, a feature).
    Unsupported,
    /// stitchfs broke one of its own invariants: a bug.
    Bug,
}

impl DiskError {
    /// What kind of failure this is. A cache that stopped after an earlier
    /// failure reports that failure's kind: a halt comes from diskfs only
    /// for a count out of its bounds ([`Damage::Count`]), so it is damage.
    pub fn kind(&self) -> ErrorKind {
        match self {
            DiskError::Refused(_) => ErrorKind::Refused,
            DiskError::NoSpace(_) => ErrorKind::NoSpace,
            DiskError::Corrupt(_) | DiskError::Damaged(_) => ErrorKind::Damage,
            DiskError::Format(FormatError::Corrupt { .. }) => ErrorKind::Damage,
            DiskError::Format(_) => ErrorKind::Unsupported,
            DiskError::Patch(e) | DiskError::Journal(JournalError::Write(e)) => patch_kind(e),
            // diskfs checked the journal before starting it: a refusal
            // then is ours.
            DiskError::Journal(_) => ErrorKind::Bug,
        }
    }

    /// The bytes on disk are wrong: a structure that does not decode or
    /// contradicts another (not an unsupported feature, not the device).
    pub fn is_damage(&self) -> bool {
        self.kind() == ErrorKind::Damage
    }

    /// The device failed (or failed earlier, and everything stopped).
    pub fn is_io(&self) -> bool {
        self.kind() == ErrorKind::Device
    }

    /// The operating system's error the device failed with, when it
    /// failed with one now (a later call only repeats the first error's
    /// text).
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            DiskError::Patch(PatchError::Device(DevError::Io { source, .. }))
            | DiskError::Journal(JournalError::Write(PatchError::Device(DevError::Io {
                source,
                ..
            }))) => Some(source),
            _ => None,
        }
    }
}

fn patch_kind(e: &PatchError) -> ErrorKind {
    match e {
        PatchError::Device(_)
        | PatchError::Stopped {
            cause: Stop::Device,
            ..
        } => ErrorKind::Device,
        PatchError::Stopped {
            cause: Stop::Halted,
            ..
        } => ErrorKind::Damage,
        _ => ErrorKind::Bug,
    }
}

/// What is wrong with the file system as stored, in the terms e2fsck
/// would use, named by what mount relies on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Damage {
    /// The device ends before the file system does.
    #[error("the image holds {held} blocks but its superblock claims {claimed}")]
    TooSmall { held: u64, claimed: u32 },
    /// The device was opened with another block size than the file
    /// system's.
    #[error("the file system's blocks are {fs} bytes but the device's are {device}")]
    BlockSize { fs: usize, device: usize },
    /// The root directory (inode 2) is not one.
    #[error("the root directory (inode 2) {0}")]
    Root(String),
    /// The list of files open when the system stopped.
    #[error("the orphan list {0}")]
    OrphanList(String),
    /// The journal (inode 8), or what replaying it would leave.
    #[error("the journal {0}")]
    Journal(String),
    /// The resize inode (7) that `resize_inode` promises.
    #[error("the resize inode (7) {0}")]
    ResizeInode(String),
    /// A group summary an allocation or free would take out of its
    /// bounds: the descriptor disagrees with its bitmap.
    #[error("{0}; every write has stopped (check the image with e2fsck -fn)")]
    Count(String),
}

pub type Result<T> = std::result::Result<T, DiskError>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A stopped cache's refusal is of its first failure's kind.
    #[test]
    fn errors_sort_by_kind() {
        let stopped = |cause| {
            DiskError::Patch(PatchError::Stopped {
                cause,
                why: "earlier".into(),
            })
        };
        assert_eq!(stopped(Stop::Device).kind(), ErrorKind::Device);
        assert_eq!(stopped(Stop::Halted).kind(), ErrorKind::Damage);
        assert_eq!(stopped(Stop::Invariant).kind(), ErrorKind::Bug);
        let io = std::io::Error::from_raw_os_error(libc::EIO);
        let dev = DevError::Io {
            what: "flush".into(),
            source: io,
        };
        let e = DiskError::Journal(JournalError::Write(dev.into()));
        assert_eq!(e.kind(), ErrorKind::Device);
        assert_eq!(e.io_error().and_then(|e| e.raw_os_error()), Some(libc::EIO));
        let bug = DiskError::Patch(PatchError::Invariant("in-flight safety".into()));
        assert_eq!(bug.kind(), ErrorKind::Bug);
        assert_eq!(
            DiskError::from(Refusal::NotFound).kind(),
            ErrorKind::Refused
        );
        assert_eq!(DiskError::NoSpace("blocks").kind(), ErrorKind::NoSpace);
        let extents = stitch_format::Structure::Inode;
        let unsupported = DiskError::Format(FormatError::unsupported(extents, "extents"));
        assert_eq!(unsupported.kind(), ErrorKind::Unsupported);
        assert!(DiskError::Corrupt("a loop".into()).is_damage());
    }
}
