//! [`MemDevice`]: a block device in memory, for tests and simulation.
//!
//! Writes land in the image at once and `flush` does nothing but count: the
//! device models no volatile cache. Crash behaviour is modelled one level up
//! by [`crate::RecordingDevice`], which keeps the one image format (a flat
//! `Vec<u8>`) that both share. A `MemDevice` never fails I/O; wrap it in a
//! [`crate::FaultDevice`] to test failures.
//!
//! Invariant: the image is exactly `block_size * num_blocks` bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::{BlockDevice, BlockNo, BlockWrite, DevError, Geometry};

/// Operation counters of a [`MemDevice`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MemStats {
    /// Blocks read.
    pub reads: u64,
    /// `write_batch` calls that succeeded.
    pub write_batches: u64,
    /// Blocks written (the sum of the batch lengths).
    pub blocks_written: u64,
    /// `flush` calls.
    pub flushes: u64,
}

/// A device whose blocks live in a `Vec<u8>`.
#[derive(Debug)]
pub struct MemDevice {
    geometry: Geometry,
    image: RwLock<Vec<u8>>,
    reads: AtomicU64,
    write_batches: AtomicU64,
    blocks_written: AtomicU64,
    flushes: AtomicU64,
}

impl MemDevice {
    /// A zero-filled device of `num_blocks` blocks.
    pub fn new(block_size: usize, num_blocks: u64) -> Result<Self, DevError> {
        let geometry = Geometry::new(block_size, num_blocks)?;
        let len = usize::try_from(geometry.total_bytes()).map_err(|_| DevError::BadGeometry {
            reason: format!("{} bytes do not fit in memory", geometry.total_bytes()),
        })?;
        Ok(MemDevice::with_image(geometry, vec![0; len]))
    }

    /// A device holding `image`, which must be a whole number of blocks.
    pub fn from_image(block_size: usize, image: Vec<u8>) -> Result<Self, DevError> {
        let geometry = Geometry::from_len(block_size, image.len() as u64)?;
        Ok(MemDevice::with_image(geometry, image))
    }

    fn with_image(geometry: Geometry, image: Vec<u8>) -> Self {
        MemDevice {
            geometry,
            image: RwLock::new(image),
            reads: AtomicU64::new(0),
            write_batches: AtomicU64::new(0),
            blocks_written: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        }
    }

    /// A copy of the current contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.image_read().clone()
    }

    /// The counters so far.
    pub fn stats(&self) -> MemStats {
        MemStats {
            reads: self.reads.load(Ordering::Relaxed),
            write_batches: self.write_batches.load(Ordering::Relaxed),
            blocks_written: self.blocks_written.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
        }
    }

    fn range(&self, block: BlockNo) -> std::ops::Range<usize> {
        // In range by the geometry check and the image-length invariant.
        let start = self.geometry.offset(block) as usize;
        start..start + self.geometry.block_size()
    }

    // Lock poisoning cannot tear a block copy (copies finish before any
    // panic could unwind), so a poisoned image is still a valid image.
    fn image_read(&self) -> RwLockReadGuard<'_, Vec<u8>> {
        self.image.read().unwrap_or_else(|p| p.into_inner())
    }

    fn image_write(&self) -> RwLockWriteGuard<'_, Vec<u8>> {
        self.image.write().unwrap_or_else(|p| p.into_inner())
    }
}

impl BlockDevice for MemDevice {
    fn block_size(&self) -> usize {
        self.geometry.block_size()
    }

    fn num_blocks(&self) -> u64 {
        self.geometry.num_blocks()
    }

    fn read(&self, block: BlockNo, buf: &mut [u8]) -> Result<(), DevError> {
        self.geometry.check(block, buf.len())?;
        buf.copy_from_slice(&self.image_read()[self.range(block)]);
        self.reads.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn write_batch(&self, writes: &[BlockWrite<'_>]) -> Result<(), DevError> {
        self.geometry.check_batch(writes)?;
        let mut image = self.image_write();
        for w in writes {
            image[self.range(w.block)].copy_from_slice(w.data);
        }
        self.write_batches.fetch_add(1, Ordering::Relaxed);
        self.blocks_written
            .fetch_add(writes.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn flush(&self) -> Result<(), DevError> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_snapshot_and_counters() {
        let dev = MemDevice::new(512, 4).unwrap();
        let a = vec![0xaa; 512];
        let b = vec![0xbb; 512];
        let batch = [
            BlockWrite {
                block: BlockNo(1),
                data: &a,
            },
            BlockWrite {
                block: BlockNo(3),
                data: &b,
            },
        ];
        dev.write_batch(&batch).unwrap();
        dev.flush().unwrap();
        let mut buf = vec![0; 512];
        dev.read(BlockNo(3), &mut buf).unwrap();
        assert_eq!(buf, b);
        let snap = dev.snapshot();
        assert_eq!(&snap[512..1024], &a[..]);
        assert!(snap[..512].iter().all(|&x| x == 0));
        let stats = dev.stats();
        assert_eq!(
            (
                stats.reads,
                stats.write_batches,
                stats.blocks_written,
                stats.flushes
            ),
            (1, 1, 2, 1)
        );
    }

    #[test]
    fn a_bad_batch_writes_nothing() {
        let dev = MemDevice::new(512, 2).unwrap();
        let a = vec![1; 512];
        let batch = [
            BlockWrite {
                block: BlockNo(0),
                data: &a,
            },
            BlockWrite {
                block: BlockNo(2),
                data: &a,
            },
        ];
        assert!(matches!(
            dev.write_batch(&batch),
            Err(DevError::OutOfRange { .. })
        ));
        assert!(dev.snapshot().iter().all(|&x| x == 0));
        let short = [BlockWrite {
            block: BlockNo(0),
            data: &a[..100],
        }];
        assert!(matches!(
            dev.write_batch(&short),
            Err(DevError::BadLength { .. })
        ));
        assert_eq!(dev.stats().write_batches, 0);
    }

    #[test]
    fn from_image_keeps_contents_and_checks_length() {
        let image: Vec<u8> = (0..1024).map(|i| i as u8).collect();
        let dev = MemDevice::from_image(512, image.clone()).unwrap();
        assert_eq!(dev.num_blocks(), 2);
        assert_eq!(dev.snapshot(), image);
        assert!(MemDevice::from_image(512, vec![0; 1000]).is_err());
        assert!(MemDevice::new(0, 1).is_err());
    }
}
