//! The units every layer shares, defined once: block numbers and inode
//! numbers. From the block device up through the patch cache, the file
//! system, memfs, the crash tester and the reference model, a block number
//! is a [`BlockNo`] and an inode number an [`InodeNo`]; no layer keeps its
//! own.
//!
//! Widths: a [`BlockNo`] is 64 bits, as a device's block count is; ext2
//! keeps 32 on disk, and the format crate converts at decode (lossless)
//! and encode (checked). An [`InodeNo`] is 32 bits, as ext2's are on disk
//! and everywhere above: no layer has more inodes than ext2 can number.
//! A FUSE node id is not an inode number (the root's is 1, ext2's root is
//! inode 2); the frontend maps between the two in one place.
//!
//! Architecture invariant: no dependencies and no knowledge of any layer;
//! plain numbers with their names, nothing more.

use std::fmt;

/// A block number: on a device, in units of its block size, and in a file
/// system on it the same number (stitchfs's block size is the device's).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct BlockNo(pub u64);

impl BlockNo {
    /// The block `n` blocks after this one.
    pub const fn plus(self, n: u64) -> BlockNo {
        BlockNo(self.0 + n)
    }

    /// How many blocks `self` lies past `base` (`base <= self`).
    pub const fn since(self, base: BlockNo) -> u64 {
        self.0 - base.0
    }

    /// The number as 32 bits (what ext2 keeps on disk), `None` past them.
    pub fn to_u32(self) -> Option<u32> {
        u32::try_from(self.0).ok()
    }
}

impl From<u32> for BlockNo {
    fn from(b: u32) -> BlockNo {
        BlockNo(u64::from(b))
    }
}

impl fmt::Display for BlockNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "block {}", self.0)
    }
}

/// An inode number, as ext2 numbers inodes: 0 means none, the first inode
/// is 1, the root directory 2.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct InodeNo(pub u32);

impl InodeNo {
    /// The root directory.
    pub const ROOT: InodeNo = InodeNo(2);
}

impl fmt::Display for InodeNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "inode {}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_numbers_convert_without_loss_or_truncation() {
        assert_eq!(BlockNo::from(u32::MAX), BlockNo(u64::from(u32::MAX)));
        assert_eq!(BlockNo(u64::from(u32::MAX)).to_u32(), Some(u32::MAX));
        assert_eq!(BlockNo(1 << 32).to_u32(), None);
        assert_eq!(BlockNo(10).plus(5).since(BlockNo(10)), 5);
    }

    #[test]
    fn numbers_name_their_unit() {
        assert_eq!(BlockNo(7).to_string(), "block 7");
        assert_eq!(InodeNo::ROOT.to_string(), "inode 2");
    }
}
