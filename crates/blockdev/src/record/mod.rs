//! Crash simulation: [`RecordingDevice`] logs every write and flush, and the
//! rest of this module builds the images a crash could leave (docs/design.md,
//! "Tools", `crashtest`).
//!
//! # The crash model
//!
//! The log is a sequence of entries: block writes (in the order the wrapped
//! device accepted them) and completed flushes. A flush *covers* the writes
//! logged before it was called. A crash at point `k` ([`CrashPoint`]) means
//! the first `k` entries happened.
//!
//! - **Committed** at `k`: the writes before `C(k)`, the largest prefix
//!   covered by a flush among the first `k` entries. They are all on disk,
//!   applied in log order over the base image (the device's contents when
//!   recording began).
//! - **In flight** at `k`: the writes with index in `[C(k), k)`. The disk may
//!   have applied them in any order, or not at all (Featherstitch §3.1). So
//!   for every block written in flight, the crash image holds either the
//!   block's committed contents or *one* of its in-flight versions: the disk
//!   may persist the versions in any order, so any of them can be the last.
//!   Blocks are independent, so the number of states at `k` is
//!   `Π over in-flight blocks b of (1 + versions_b)`.
//! - **Torn** (opt-in): one in-flight write reached the disk only in part,
//!   at 512-byte sector granularity; its other sectors hold the block's
//!   committed contents.
//!
//! States are grouped by **epoch**: a maximal run of crash points with the
//! same `C(k)`. Within an epoch the in-flight set only grows, so the states
//! at the epoch's last point include those of every earlier point; each
//! distinct state is yielded once, with the range of points where it can
//! arise ([`CrashState::points`]). A checker should hold the image to the
//! durability promised at the range's end and to the ordering allowed at its
//! start. Images of different epochs may coincide; they are not merged,
//! because their durability obligations differ.
//!
//! Memory: each write's data is stored once (`Arc<[u8]>`); the base image
//! once; building an image copies the base (or, with [`ImageBuilder`], the
//! epoch's committed image) once.

mod device;
mod enumerate;
mod log;
mod state;

#[cfg(test)]
mod tests;

pub use device::RecordingDevice;
pub use enumerate::{crash_states, CrashStates, Enumerate, TornModel};
pub use log::{CrashPoint, Log, LogEntry, LogPos};
pub use state::{build_image, CrashState, ImageBuilder, Origin, Persisted, SectorMask, SECTOR};

use crate::{BlockNo, DevError};

/// Errors of crash-image construction: a log, state or base that does not
/// fit together (misuse or a corrupted replay file), never a device failure.
#[derive(Debug, thiserror::Error)]
pub enum CrashError {
    #[error("base image is {len} bytes, the device has {want}")]
    BaseSize { len: usize, want: u64 },
    #[error("crash point {} is beyond the log ({len} entries)", point.0)]
    PointOutOfRange { point: CrashPoint, len: usize },
    #[error("log entry {} is not a write", .0 .0)]
    NotAWrite(LogPos),
    #[error("write {} is not in flight before point {}", write.0, last.0)]
    NotInFlight { write: LogPos, last: CrashPoint },
    #[error("{0} is chosen twice in one crash state")]
    BlockTwice(BlockNo),
    #[error("torn mask {:#x} does not fit a {block_size}-byte block", mask.0)]
    BadTear { mask: SectorMask, block_size: usize },
    #[error("torn model {model:?} is not supported for {block_size}-byte blocks")]
    TornUnsupported { block_size: usize, model: TornModel },
    #[error("bad write for the log: {0}")]
    BadWrite(#[source] DevError),
}
