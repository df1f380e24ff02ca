//! [`RecordingDevice`]: passes all I/O to a wrapped device and logs every
//! accepted write and completed flush, with the base image captured when
//! recording began.
//!
//! Invariants: log order equals the order the wrapped device applied the
//! writes (the log lock is held across `write_batch`), so replaying the whole
//! log over the base gives the wrapped device's contents. A flush is logged
//! only once it returned `Ok`, covering the log length at its call; the lock
//! is not held across the flush so writers are not stalled by it.

use std::sync::{Arc, Mutex, MutexGuard};

use super::{CrashPoint, Log};
use crate::{BlockDevice, BlockNo, BlockWrite, DevError, Geometry};

/// A pass-through device that records.
#[derive(Debug)]
pub struct RecordingDevice<D> {
    inner: D,
    geometry: Geometry,
    base: Arc<[u8]>,
    log: Mutex<Log>,
}

impl<D: BlockDevice> RecordingDevice<D> {
    /// Starts recording, capturing the base image by reading every block of
    /// `inner` (about 16k reads for a 64 MiB image). If the caller already
    /// has the contents (e.g. [`crate::MemDevice::snapshot`]), use
    /// [`RecordingDevice::with_base`] instead.
    pub fn new(inner: D) -> Result<Self, DevError> {
        let geometry = Geometry::new(inner.block_size(), inner.num_blocks())?;
        let len = usize::try_from(geometry.total_bytes()).map_err(|_| DevError::BadGeometry {
            reason: format!("{} bytes do not fit in memory", geometry.total_bytes()),
        })?;
        let mut base = vec![0; len];
        for (n, chunk) in base.chunks_exact_mut(geometry.block_size()).enumerate() {
            inner.read(BlockNo(n as u64), chunk)?;
        }
        RecordingDevice::with_base(inner, base)
    }

    /// Starts recording with `base` as the device's current contents.
    pub fn with_base(inner: D, base: Vec<u8>) -> Result<Self, DevError> {
        let geometry = Geometry::new(inner.block_size(), inner.num_blocks())?;
        if base.len() as u64 != geometry.total_bytes() {
            return Err(DevError::BadGeometry {
                reason: format!(
                    "base image of {} bytes for a {}-byte device",
                    base.len(),
                    geometry.total_bytes()
                ),
            });
        }
        Ok(RecordingDevice {
            inner,
            geometry,
            base: base.into(),
            log: Mutex::new(Log::new(geometry)),
        })
    }

    /// The contents when recording began.
    pub fn base(&self) -> Arc<[u8]> {
        Arc::clone(&self.base)
    }

    /// A copy of the log so far (block contents are shared, not copied).
    pub fn log(&self) -> Log {
        self.lock().clone()
    }

    /// The log's length so far, without copying it.
    pub fn log_len(&self) -> usize {
        self.lock().len()
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped device, the base image and the log.
    pub fn into_parts(self) -> (D, Arc<[u8]>, Log) {
        let log = self.log.into_inner().unwrap_or_else(|p| p.into_inner());
        (self.inner, self.base, log)
    }

    // A panic inside the lock leaves at most a log missing the writes of the
    // panicking batch; still a valid log, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<D: BlockDevice> BlockDevice for RecordingDevice<D> {
    fn block_size(&self) -> usize {
        self.geometry.block_size()
    }

    fn num_blocks(&self) -> u64 {
        self.geometry.num_blocks()
    }

    fn read(&self, block: BlockNo, buf: &mut [u8]) -> Result<(), DevError> {
        self.inner.read(block, buf)
    }

    fn write_batch(&self, writes: &[BlockWrite<'_>]) -> Result<(), DevError> {
        self.geometry.check_batch(writes)?;
        let mut log = self.lock();
        let result = self.inner.write_batch(writes);
        // A batch that failed may have partly reached the disk, so it is
        // logged too: as in-flight writes, any subset of it may persist.
        // Misuse was rejected above, so nothing here can fail the check.
        for w in writes {
            log.push_write(w.block, w.data)
                .map_err(|e| DevError::BadGeometry {
                    reason: e.to_string(),
                })?;
        }
        result
    }

    fn flush(&self) -> Result<(), DevError> {
        let covers: CrashPoint = self.lock().end();
        self.inner.flush()?;
        self.lock()
            .push_flush_covering(covers)
            .map_err(|e| DevError::BadGeometry {
                reason: e.to_string(),
            })?;
        Ok(())
    }
}
