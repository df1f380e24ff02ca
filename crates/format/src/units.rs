//! Newtypes for the identifiers and units of an ext2 file system.
//!
//! Block and inode numbers come from `stitch-units`, the one definition
//! every layer shares. A block number is 64 bits there (a device's) and 32
//! in ext2's structures (the `64bit` feature is refused), converted as
//! they are decoded and encoded: in [`codec`](crate::codec) for ext2's
//! fields, in [`jbd2`](crate::jbd2) for tags and revoke records, which may
//! hold 64. An inode number is 32 bits in both.

use std::fmt;

pub use stitch_units::{BlockNo, InodeNo};

/// What a block pointer that points nowhere holds: a hole in a block map,
/// no attribute block. Block 0 holds the boot sector (and, with blocks
/// over 1 KiB, the superblock), so no pointer names it.
pub const NO_BLOCK: BlockNo = BlockNo(0);

/// A block group number.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct GroupNo(pub u32);

/// A block number inside the journal (a logical block of inode 8).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct JournalBlockNo(pub u32);

/// A block size in bytes: a power of two from 1 KiB to 64 KiB.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlockSize(u32);

impl BlockSize {
    pub const MIN_LOG: u32 = 10;
    pub const MAX_LOG: u32 = 16;
    /// The block size stitchfs creates.
    pub const DEFAULT: BlockSize = BlockSize(4096);

    /// From the superblock's `s_log_block_size` (size = 1024 << log).
    pub fn from_log(log: u32) -> Option<Self> {
        (log <= Self::MAX_LOG - Self::MIN_LOG).then(|| BlockSize(1024 << log))
    }

    /// From a byte count, if it is a valid block size.
    pub fn from_bytes(bytes: u32) -> Option<Self> {
        (bytes.is_power_of_two() && (1024..=65536).contains(&bytes)).then_some(BlockSize(bytes))
    }

    pub fn bytes(self) -> u32 {
        self.0
    }

    pub fn usize(self) -> usize {
        self.0 as usize
    }

    /// The `s_log_block_size` value for this size.
    pub fn log(self) -> u32 {
        self.0.trailing_zeros() - Self::MIN_LOG
    }
}

impl fmt::Display for GroupNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "group {}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_size_log_round_trip() {
        for log in 0..=6 {
            let bs = BlockSize::from_log(log).unwrap();
            assert_eq!(bs.log(), log);
            assert_eq!(BlockSize::from_bytes(bs.bytes()), Some(bs));
        }
        assert_eq!(BlockSize::from_log(7), None);
        assert_eq!(BlockSize::from_log(u32::MAX), None);
        assert_eq!(BlockSize::from_bytes(3000), None);
        assert_eq!(BlockSize::from_bytes(512), None);
    }
}
