//! Errors of diskfs: POSIX-style refusals a caller maps to an errno, the
//! world (a full disk, a device failure), and damage found on disk.
//!
//! Damage is kept apart from I/O: [`DiskError::is_damage`] says the bytes
//! on disk are wrong (what e2fsck would repair), [`DiskError::is_io`] that
//! the device failed. A [`Damage`] found by mount's checks is a refusal
//! before anything was written; one found later (a free count that would
//! leave its bounds) has stopped every write.

use stitch_format::FormatError;
use stitch_patch::PatchError;

#[derive(Debug, thiserror::Error)]
pub enum DiskError {
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
    #[error("no space left on device ({0})")]
    NoSpace(&'static str),
    #[error("operation not permitted: {0}")]
    NotPermitted(&'static str),
    #[error("too many links")]
    TooManyLinks,
    #[error("file too large for ext2 block maps")]
    TooLarge,
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

impl DiskError {
    /// The bytes on disk are wrong: a structure that does not decode or
    /// contradicts another (not an unsupported feature, not the device).
    pub fn is_damage(&self) -> bool {
        match self {
            DiskError::Corrupt(_) | DiskError::Damaged(_) => true,
            DiskError::Format(e) => matches!(e, FormatError::Corrupt { .. }),
            _ => false,
        }
    }

    /// The device failed (or failed earlier, and everything stopped).
    pub fn is_io(&self) -> bool {
        matches!(self, DiskError::Patch(PatchError::Device(_)))
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
