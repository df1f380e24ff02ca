//! JBD2, the journal of ext3/ext4, as e2fsck and the kernel read it.
//!
//! The journal is the data of inode 8 seen as an array of blocks. Block 0 is
//! the journal superblock; the log runs from `s_first` to `s_maxlen - 1` and
//! wraps. A transaction is one or more descriptor blocks (each followed by the
//! data blocks its tags name), optional revoke blocks, and a commit block, all
//! with the transaction's sequence number in their header. Every JBD2 field is
//! big-endian.
//!
//! Checksums: `COMPAT_CHECKSUM` (v1) puts a CRC32 (big-endian polynomial) of the
//! transaction's descriptor and data blocks in the commit block; `CSUM_V2` and
//! `CSUM_V3` put a CRC32C in the superblock, in a tail of every descriptor and
//! revoke block, in the commit block, and per data block in its tag (16 bits in
//! v2, 32 in v3). See [`checksum`].
//!
//! Invariant: decoders here check magic, block type and every count against the
//! block size, so a caller iterating tags or revoke records never indexes past
//! the block; checksums are verified only by the explicit `verify_*` functions,
//! because replay must decide what a bad checksum means (end of log, or damage).

pub mod blocks;
pub mod checksum;
pub mod recovery;
pub mod superblock;

pub use blocks::{BlockHeader, BlockType, CommitBlock, DescriptorTag, RevokeBlock, TagFormat};
pub use recovery::{recover, RecoverError, Recovery};
pub use superblock::JournalSuperblock;

/// `h_magic` of every journal block.
pub const JBD2_MAGIC: u32 = 0xC03B_3998;
