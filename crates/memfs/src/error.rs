//! memfs errors: each maps to the errno a POSIX caller expects.

use stitch_diskfs::DiskError;

#[derive(Debug, thiserror::Error)]
pub enum MemError {
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
    #[error("no space left on device")]
    NoSpace,
    #[error("operation not permitted: {0}")]
    NotPermitted(&'static str),
    #[error("too many links")]
    TooManyLinks,
    #[error("file too large")]
    TooLarge,
    #[error("read-only file system (an earlier device error is latched)")]
    ReadOnly,
    #[error("operation not supported: {0}")]
    Unsupported(&'static str),
    #[error("input/output error: {0}")]
    Io(String),
    #[error("stale handle: inode {0} no longer exists")]
    Stale(u64),
    #[error("no such extended attribute")]
    NoAttribute,
}

pub type Result<T> = std::result::Result<T, MemError>;

impl MemError {
    /// The errno a system call returns for this error.
    pub fn errno(&self) -> i32 {
        match self {
            MemError::NotFound => libc::ENOENT,
            MemError::Exists => libc::EEXIST,
            MemError::NotDir => libc::ENOTDIR,
            MemError::IsDir => libc::EISDIR,
            MemError::NotEmpty => libc::ENOTEMPTY,
            MemError::NameTooLong => libc::ENAMETOOLONG,
            MemError::Invalid(_) => libc::EINVAL,
            MemError::NoSpace => libc::ENOSPC,
            MemError::NotPermitted(_) => libc::EPERM,
            MemError::TooManyLinks => libc::EMLINK,
            MemError::TooLarge => libc::EFBIG,
            MemError::ReadOnly => libc::EROFS,
            MemError::Unsupported(_) => libc::EOPNOTSUPP,
            MemError::Io(_) => libc::EIO,
            MemError::Stale(_) => libc::ESTALE,
            MemError::NoAttribute => libc::ENODATA,
        }
    }
}

impl From<DiskError> for MemError {
    fn from(e: DiskError) -> Self {
        match e {
            DiskError::NotFound => MemError::NotFound,
            DiskError::Exists => MemError::Exists,
            DiskError::NotDir => MemError::NotDir,
            DiskError::IsDir => MemError::IsDir,
            DiskError::NotEmpty => MemError::NotEmpty,
            DiskError::NameTooLong => MemError::NameTooLong,
            DiskError::Invalid(w) => MemError::Invalid(w),
            DiskError::NoSpace(_) => MemError::NoSpace,
            DiskError::NotPermitted(w) => MemError::NotPermitted(w),
            DiskError::TooManyLinks => MemError::TooManyLinks,
            DiskError::TooLarge => MemError::TooLarge,
            other => MemError::Io(other.to_string()),
        }
    }
}
