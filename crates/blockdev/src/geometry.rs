//! Device geometry: block size and block count, and the checks every device
//! runs on its inputs.
//!
//! Invariants: `block_size > 0`, and `block_size * num_blocks` fits in a
//! `u64` (so every byte offset computed by [`Geometry::offset`] is exact).
//! Every device validates requests here, before any I/O, so that misuse is
//! an error and never a panic or a partial write.

use crate::{BlockNo, BlockWrite, DevError};

/// The shape of a device.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    block_size: usize,
    num_blocks: u64,
}

impl Geometry {
    /// A geometry of `num_blocks` blocks of `block_size` bytes.
    pub fn new(block_size: usize, num_blocks: u64) -> Result<Self, DevError> {
        if block_size == 0 {
            return Err(bad("block size is zero"));
        }
        let bytes = (block_size as u64).checked_mul(num_blocks);
        if bytes.is_none() {
            return Err(bad(format!(
                "{num_blocks} blocks of {block_size} bytes overflow u64"
            )));
        }
        Ok(Geometry {
            block_size,
            num_blocks,
        })
    }

    /// The geometry of `len` bytes, which must be a whole number of blocks.
    pub fn from_len(block_size: usize, len: u64) -> Result<Self, DevError> {
        if block_size == 0 {
            return Err(bad("block size is zero"));
        }
        if !len.is_multiple_of(block_size as u64) {
            return Err(bad(format!(
                "{len} bytes is not a whole number of {block_size}-byte blocks"
            )));
        }
        Geometry::new(block_size, len / block_size as u64)
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    /// Total size in bytes (exact by the type's invariant).
    pub fn total_bytes(&self) -> u64 {
        self.block_size as u64 * self.num_blocks
    }

    /// Byte offset of `block`; only meaningful once `block` was checked.
    pub fn offset(&self, block: BlockNo) -> u64 {
        block.0 * self.block_size as u64
    }

    /// Checks that `block` exists and `len` is one block.
    pub fn check(&self, block: BlockNo, len: usize) -> Result<(), DevError> {
        if block.0 >= self.num_blocks {
            return Err(DevError::OutOfRange {
                block,
                num_blocks: self.num_blocks,
            });
        }
        if len != self.block_size {
            return Err(DevError::BadLength {
                len,
                block_size: self.block_size,
            });
        }
        Ok(())
    }

    /// Checks a whole batch before any of it is issued.
    pub fn check_batch(&self, writes: &[BlockWrite<'_>]) -> Result<(), DevError> {
        writes
            .iter()
            .try_for_each(|w| self.check(w.block, w.data.len()))
    }
}

fn bad(reason: impl Into<String>) -> DevError {
    DevError::BadGeometry {
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_zero_block_size_and_ragged_length() {
        assert!(matches!(
            Geometry::new(0, 1),
            Err(DevError::BadGeometry { .. })
        ));
        assert!(matches!(
            Geometry::from_len(4096, 4097),
            Err(DevError::BadGeometry { .. })
        ));
        assert!(matches!(
            Geometry::new(4096, u64::MAX),
            Err(DevError::BadGeometry { .. })
        ));
        assert_eq!(Geometry::from_len(512, 2048).unwrap().num_blocks(), 4);
    }

    #[test]
    fn check_names_the_problem() {
        let g = Geometry::new(512, 4).unwrap();
        assert!(g.check(BlockNo(3), 512).is_ok());
        assert!(matches!(
            g.check(BlockNo(4), 512),
            Err(DevError::OutOfRange { .. })
        ));
        assert!(matches!(
            g.check(BlockNo(0), 511),
            Err(DevError::BadLength { .. })
        ));
    }
}
