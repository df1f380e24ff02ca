//! Errors of diskfs: POSIX-style refusals a caller maps to an errno, the
//! world (a full disk, a device failure), and damage found on disk.
//!
//! Damage is kept apart from I/O: [`DiskError::is_damage`] says the bytes
//! on disk are wrong (what e2fsck would repair), [`DiskError::is_io`] that
//! the device failed. A [`Damage`] found while the file system is in use
//! (a free count that would leave its bounds) has stopped every write.

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
    /// A group summary an allocation or free would take out of its
    /// bounds: the descriptor disagrees with its bitmap.
    #[error("{0}; every write has stopped (check the image with e2fsck -fn)")]
    Count(String),
}

pub type Result<T> = std::result::Result<T, DiskError>;
