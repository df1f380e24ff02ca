//! Errors that stop a check: the image cannot be read (or, replaying the
//! journal, written), or it is not a file system this checker understands. Problems *inside* a readable file system
//! are never errors; they are [`crate::Finding`]s.

use std::path::PathBuf;
use stitch_format::FormatError;

#[derive(Debug, thiserror::Error)]
pub enum FsckError {
    #[error("{path}: cannot open: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("read of block {block} ({len} bytes) failed: {source}")]
    Read {
        block: u64,
        len: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("write of block {block} ({len} bytes) failed: {source}")]
    Write {
        block: u64,
        len: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("fdatasync failed: {0}")]
    Sync(#[source] std::io::Error),
    /// `--recover` cannot be done safely; nothing was written.
    #[error("journal recovery refused: {0}")]
    RecoverRefused(String),
    /// Neither the primary superblock nor a backup describes a file system.
    #[error("no valid superblock: {primary}")]
    NoSuperblock { primary: FormatError },
    /// A valid file system using something this checker does not implement.
    #[error("unsupported file system: {0}")]
    Unsupported(FormatError),
}

impl FsckError {
    /// The e2fsck exit code for a check that could not run.
    pub fn exit_code(&self) -> i32 {
        crate::report::EXIT_ERROR
    }
}
