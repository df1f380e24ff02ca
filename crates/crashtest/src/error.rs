//! What can keep crashtest from looking, by what failed: the run itself
//! ([`RunError`]), a workload spec ([`SpecError`]), the setup of a base
//! image ([`SetupError`]), a workload as it runs ([`StepError`]), the
//! recovery of a crash image ([`RecoverError`]) and the checkers
//! ([`CheckError`]).
//!
//! A violation is not an error: it is a finding ([`crate::report::Finding`]),
//! what crashtest is for. An error that stops one workload or one image
//! becomes a finding too (of kind harness, semantics or recovery), with
//! the error's text as its message; one that stops the run is returned.
//!
//! A variant's text names the error it carries, which is not also its
//! `source`: the CLI prints an error with its chain, and would say it
//! twice.

use crate::workload::Action;
use std::sync::Arc;
use stitch_blockdev::DevError;
use stitch_diskfs::{DiskError, InodeNo};
use stitch_memfs::MemError;
use stitch_model::Errno;

/// What stopped the whole run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("e2fsck is not installed (apt-get install e2fsprogs)")]
    NoE2fsck,
    /// A checker's scratch file could not be made.
    #[error("scratch file: {0}")]
    Scratch(std::io::Error),
}

/// A workload spec that names no workload.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{step}: missing field {index}")]
    MissingField { step: String, index: usize },
    #[error("{step}: missing path")]
    MissingPath { step: String },
    #[error("{step}: {error}")]
    Number {
        step: String,
        error: std::num::ParseIntError,
    },
    #[error("{step}: mknod:PATH:p|s|c:MAJ:MIN|b:MAJ:MIN")]
    Mknod { step: String },
    #[error("unknown operation {op:?} in {step:?}")]
    UnknownOperation { op: String, step: String },
    #[error("unknown persistence point {0:?}")]
    UnknownPoint(String),
    #[error("unknown workload {spec:?} (named: {}; or gen:STEPS)", named.join(", "))]
    UnknownWorkload { spec: String, named: Vec<String> },
}

/// What kept a setup from leaving its base image, or a workload from
/// starting on it.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("scratch directory: {0}")]
    Scratch(std::io::Error),
    #[error("mkfs: {0}")]
    Mkfs(#[from] stitch_mkfs::MkfsError),
    #[error("reading the fresh image: {0}")]
    ReadImage(std::io::Error),
    #[error("fill is a step, not part of a setup: its length is known only as it runs")]
    FillInSetup,
    #[error("device: {0}")]
    Device(#[from] DevError),
    #[error("mount: {0}")]
    Mount(DiskError),
    #[error("memfs mount: {0}")]
    Memfs(MemError),
    /// A setup operation on memfs and the model.
    #[error("setup: {action}: {error}")]
    Step {
        action: Action,
        error: Box<StepError>,
    },
    /// The model refuses a setup operation it replays.
    #[error("setup {action}: {errno}")]
    Model { action: Action, errno: Errno },
    #[error("setup sync: {0}")]
    Sync(MemError),
    #[error("setup unmount: {0}")]
    Unmount(MemError),
    /// The tree of the setup image could not be read back.
    #[error("{0}")]
    Read(ReadError),
    /// A block of the journal that diskfs does not map (`None`), or could
    /// not look up.
    #[error("journal block {logical}: {}", error.as_ref().map_or("not mapped".into(), |e| e.to_string()))]
    JournalBlock {
        logical: u64,
        error: Option<DiskError>,
    },
    #[error("the setup image differs from the oracle:\n{found}\nexpected:\n{expected}")]
    Differs { found: String, expected: String },
}

/// What memfs answered to one operation.
#[derive(Debug)]
pub enum Answer {
    Done,
    /// A fill took this many bytes.
    Took(u64),
    Failed(MemError),
    /// No handle in the slot named: what `close` on a bad descriptor says,
    /// without reaching memfs.
    NoHandle,
}

impl Answer {
    /// The errno of a failed answer.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Answer::Done | Answer::Took(_) => None,
            Answer::Failed(e) => Some(e.errno()),
            Answer::NoHandle => Some(Errno::Ebadf.raw()),
        }
    }
}

/// What went wrong as a workload ran on memfs, the model and the oracle.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// memfs and the model disagree on an operation's outcome.
    #[error("{action}: the model says {model:?}, memfs {memfs:?}")]
    Disagree {
        action: String,
        model: Result<(), Errno>,
        memfs: Answer,
    },
    /// An operation both refused that had to succeed (closing a handle).
    #[error("{0} failed")]
    Refused(Action),
    /// The tree memfs shows could not be read.
    #[error("reading memfs: {0}")]
    ReadBack(MemError),
    /// Two views of the tree differ.
    #[error("{what} differs from the model: {diff:?}")]
    Differs {
        what: &'static str,
        diff: Vec<String>,
    },
    /// A persistence point failed on memfs.
    #[error("{point}: {error}")]
    Persist { point: String, error: MemError },
    /// An fsync of a descriptor slot that holds no handle.
    #[error("fsync(fd{0}): no handle")]
    NoHandle(u32),
    #[error("unmount: {0}")]
    Unmount(MemError),
    /// memfs's patchgroup table answered a call other than the rules say
    /// (`patchgroups::Rules`).
    #[error("patchgroup call {call} by process {proc}: {what}")]
    Patchgroup {
        call: String,
        proc: u8,
        what: String,
    },
}

impl StepError {
    /// The kind of finding this error is: memfs answering other than the
    /// model is semantics; a persistence point or unmount that fails is
    /// the harness (the workload could not run as written).
    pub fn kind(&self) -> crate::report::Kind {
        use crate::report::Kind;
        match self {
            StepError::Disagree { .. }
            | StepError::Refused(_)
            | StepError::ReadBack(_)
            | StepError::Differs { .. }
            | StepError::Patchgroup { .. } => Kind::Semantics,
            StepError::Persist { .. } | StepError::NoHandle(_) | StepError::Unmount(_) => {
                Kind::Harness
            }
        }
    }
}

/// A call that failed while a tree was read back through diskfs.
#[derive(Debug, thiserror::Error)]
#[error("{call} {}: {error}", .ino.0)]
pub struct ReadError {
    /// `inode`, `read inode`, `readlink`, `readdir`, `extended attributes of`.
    pub call: &'static str,
    pub ino: InodeNo,
    pub error: DiskError,
}

/// Why stitchfs did not recover a crash image (a recovery finding).
#[derive(Clone, Debug, thiserror::Error)]
pub enum RecoverError {
    #[error("mount: {0}")]
    Mount(Arc<DiskError>),
    #[error("{0}")]
    Read(Arc<ReadError>),
    #[error("unmount: {0}")]
    Unmount(Arc<DiskError>),
    #[error("stitchfs panicked: {0}")]
    Panicked(String),
}

/// Why a checker gave no verdict.
#[derive(Clone, Debug, thiserror::Error)]
pub enum CheckError {
    /// The image could not be written where the checkers read it.
    #[error("{0}")]
    Scratch(Arc<std::io::Error>),
    #[error("stitchfs fsck panicked")]
    FsckPanicked,
    #[error("{0}")]
    Fsck(Arc<stitch_fsck::FsckError>),
    #[error("e2fsck: {0} (install e2fsprogs)")]
    E2fsck(Arc<std::io::Error>),
}
