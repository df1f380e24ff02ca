//! The block layer: the bottom of the stitchfs stack (docs/design.md, "Layers").
//!
//! A [`BlockDevice`] knows blocks, not patches. It reads one block, writes a
//! batch of blocks, and flushes. A write is *in flight* from the moment
//! `write_batch` accepts it until a later `flush` returns `Ok`; then it is
//! *committed* (durable). Featherstitch §3.1 calls the layers below the cache
//! "the disk controller": they may reorder in-flight writes at will, so a crash
//! may leave any subset of the in-flight writes on disk.
//!
//! Invariants every implementation keeps:
//! - After the first failed write or flush, every later call fails with
//!   [`DevError::Latched`]: a failure is never hidden and never retried.
//! - Block numbers are checked against [`BlockDevice::num_blocks`]; a buffer
//!   whose length is not the block size is a caller bug and an error. A batch
//!   is checked whole before any of it is issued, so a misuse error writes
//!   nothing and does not latch the device.
//!
//! Modules, one concept each:
//! - [`geometry`]: block size and count, and the range/length checks.
//! - [`latch`]: the first-failure latch shared by the devices that can fail.
//! - [`mem`]: [`MemDevice`], a device in memory for tests.
//! - [`file`](mod@file): [`FileDevice`], an image file or a Linux block device.
//! - [`fault`]: [`FaultDevice`], a wrapper that injects failures.
//! - [`nbd`]: [`NbdDevice`], an image on a Network Block Device server.
//! - [`location`]: [`Location`], a path or an NBD URI, and [`ByteImage`],
//!   byte-addressed access for mkfs and fsck.
//! - [`record`]: [`RecordingDevice`] and the crash-image library built on its
//!   log (`crashtest` in docs/design.md, "Tools").
//!
//! Architecture invariant: this crate knows nothing about patches, file
//! systems or the on-disk format. It moves whole blocks.

pub mod fault;
pub mod file;
pub mod geometry;
pub mod latch;
pub mod location;
pub mod mem;
pub mod nbd;
pub mod record;

pub use fault::{FaultDevice, FaultKind};
pub use file::{wait_for_writer, FileDevice, OpenOptions};
pub use geometry::Geometry;
pub use location::{io_error, ByteImage, Location};
pub use mem::MemDevice;
pub use nbd::{NbdDevice, NbdOptions, NbdStats};
pub use record::{
    build_image, crash_states, CrashError, CrashPoint, CrashState, Enumerate, ImageBuilder, Log,
    LogEntry, LogPos, Origin, Persisted, RecordingDevice, SectorMask, TornModel,
};

/// A block number on a device, in units of the device's block size: the
/// one block number of every layer (`stitch-units`).
pub use stitch_units::BlockNo;

/// One block write in a batch.
#[derive(Copy, Clone, Debug)]
pub struct BlockWrite<'a> {
    pub block: BlockNo,
    pub data: &'a [u8],
}

/// Errors of the block layer. They describe the world (I/O, misuse), never a
/// bug inside stitchfs.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("I/O error on {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("device failed earlier ({first}); refusing further I/O")]
    Latched { first: String },
    #[error("{block} is beyond the end of the device ({num_blocks} blocks)")]
    OutOfRange { block: BlockNo, num_blocks: u64 },
    #[error("buffer of {len} bytes does not match the block size {block_size}")]
    BadLength { len: usize, block_size: usize },
    /// Another open of the same image holds a conflicting `flock`: a second
    /// read-write mount, or a read-write open while a reader holds the image.
    #[error("{path} is in use by another stitchfs process (advisory lock held)")]
    Locked { path: String },
    /// The geometry asked for cannot describe a device (zero block size, a
    /// size that is not a whole number of blocks, an overflow, ...).
    #[error("bad device geometry: {reason}")]
    BadGeometry { reason: String },
    /// A device that exists but cannot hold an image as asked: an NBD
    /// server that refuses the connection or the export, exports it
    /// read-only, or cannot flush.
    #[error("{target}: {reason}")]
    Refused { target: String, reason: String },
    /// A write to a device opened read-only.
    #[error("{path} is open read-only")]
    ReadOnly { path: String },
}

/// The interface every block device offers. Methods take `&self` so a device
/// can be shared between the cache and tools (crash recording, statistics).
pub trait BlockDevice: Send + Sync {
    /// Bytes per block (4096 for stitchfs images).
    fn block_size(&self) -> usize;
    /// Number of blocks on the device.
    fn num_blocks(&self) -> u64;
    /// Reads one block into `buf` (`buf.len() == block_size()`).
    fn read(&self, block: BlockNo, buf: &mut [u8]) -> Result<(), DevError>;
    /// Puts a batch of block writes in flight. Order within the batch and
    /// against other in-flight writes is not promised to survive a crash.
    fn write_batch(&self, writes: &[BlockWrite<'_>]) -> Result<(), DevError>;
    /// Returns once every write accepted before the call is durable.
    fn flush(&self) -> Result<(), DevError>;
    /// Tells the device that `count` blocks from `first` hold nothing
    /// anyone needs (NBD's TRIM), so thin or shared storage can reclaim
    /// them; what they read afterwards is the device's choice. Returns the
    /// blocks discarded: 0 where the device has no such notion (the
    /// default). Advisory: a device that refuses it loses nothing, so a
    /// refusal is counted, not an error.
    fn discard(&self, first: BlockNo, count: u64) -> Result<u64, DevError> {
        let _ = (first, count);
        Ok(0)
    }
    /// Whether [`BlockDevice::discard`] may do anything here.
    fn discards(&self) -> bool {
        false
    }
}
