//! Errors of diskfs: POSIX-style refusals a caller maps to an errno, the
//! world (a full disk, a device failure), and corruption found on disk.

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
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Patch(#[from] PatchError),
    #[error("journal: {0}")]
    Journal(#[from] stitch_modes::JournalError),
}

pub type Result<T> = std::result::Result<T, DiskError>;
