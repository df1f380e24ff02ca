//! Sizing decisions, made the way mke2fs makes them (its `mke2fs.conf` defaults
//! and `ext2fs_initialize`), so our images look like the ones people know:
//! 4 KiB blocks, 32768 blocks per group, 256-byte inodes, one inode per 16 KiB
//! (per 4 KiB below 512 MiB, mke2fs's "small" type), 5% reserved blocks, a
//! trailing group too small to hold its own metadata dropped, and the journal
//! size of `ext2fs_default_journal_size`.
//!
//! Invariant: a [`Params`] describes a file system whose every group has room
//! for its metadata plus at least [`MIN_GROUP_DATA`] data blocks, whose inode
//! count fits 32 bits, and whose journal (if any) fits in group data space.

use crate::MkfsError;
use stitch_format::jbd2::superblock::MIN_JOURNAL_BLOCKS;

pub const BLOCK_SIZE: u32 = 4096;
pub const INODE_SIZE: u16 = 256;
pub const BLOCKS_PER_GROUP: u32 = 8 * BLOCK_SIZE;
/// mke2fs drops a last group with fewer spare blocks than this.
pub const MIN_GROUP_DATA: u32 = 50;
/// Smallest file system we make: root, lost+found and a little room.
pub const MIN_BLOCKS: u64 = 64;
/// ext2 without `64bit` addresses 2^32 blocks.
pub const MAX_BLOCKS: u64 = u32::MAX as u64;
/// Blocks of lost+found (mke2fs grows it to 16 KiB).
pub const LPF_BLOCKS: u32 = 16384 / BLOCK_SIZE;

/// The journal the caller asked for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum JournalSize {
    /// Whatever mke2fs would pick for this file system size.
    Default,
    /// This many bytes (rounded down to whole blocks).
    Bytes(u64),
}

/// The numbers every later step needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    pub blocks_count: u32,
    pub group_count: u32,
    pub inodes_per_group: u32,
    /// Journal blocks; 0 for ext2.
    pub journal_blocks: u32,
}

/// Bytes per inode for a file system of `bytes` (mke2fs.conf types).
fn inode_ratio(bytes: u64) -> u64 {
    if bytes < 512 << 20 {
        4096
    } else {
        16384
    }
}

/// `ext2fs_default_journal_size()`, in blocks, for `blocks` file system blocks.
pub fn default_journal_blocks(blocks: u64) -> Option<u32> {
    const TABLE: [(u64, u32); 8] = [
        (32768, 1024),
        (256 * 1024, 4096),
        (512 * 1024, 8192),
        (4096 * 1024, 16384),
        (8192 * 1024, 32768),
        (16384 * 1024, 65536),
        (32768 * 1024, 131072),
        (u64::MAX, 262144),
    ];
    if blocks < 2048 {
        return None;
    }
    TABLE
        .iter()
        .find(|(limit, _)| blocks < *limit)
        .map(|&(_, j)| j)
}

fn inode_table_blocks(ipg: u32) -> u32 {
    (ipg * u32::from(INODE_SIZE)).div_ceil(BLOCK_SIZE)
}

/// Inodes per group for `blocks` blocks in `groups` groups: a whole number
/// of inode table blocks, at least enough for the reserved inodes.
fn inodes_per_group(bytes: u64, groups: u32) -> u32 {
    let per_block = BLOCK_SIZE / u32::from(INODE_SIZE);
    let want = (bytes / inode_ratio(bytes)).div_ceil(u64::from(groups));
    let ipg = want.clamp(u64::from(per_block), u64::from(BLOCKS_PER_GROUP)) as u32;
    ipg.div_ceil(per_block) * per_block
}

impl Params {
    /// Plans a file system in `device_bytes` bytes.
    pub fn new(device_bytes: u64, journal: Option<JournalSize>) -> Result<Self, MkfsError> {
        let mut blocks = (device_bytes / u64::from(BLOCK_SIZE)).min(MAX_BLOCKS);
        if blocks < MIN_BLOCKS {
            return Err(MkfsError::TooSmall {
                bytes: device_bytes,
            });
        }
        let (groups, ipg) = loop {
            let groups = blocks.div_ceil(u64::from(BLOCKS_PER_GROUP)) as u32;
            let ipg = inodes_per_group(blocks * u64::from(BLOCK_SIZE), groups);
            let rem = (blocks % u64::from(BLOCKS_PER_GROUP)) as u32;
            // Worst-case overhead of the last group: a superblock copy too.
            let gdt = (groups * 32).div_ceil(BLOCK_SIZE);
            let overhead = 1 + gdt + 2 + inode_table_blocks(ipg);
            if rem == 0 || rem >= overhead + MIN_GROUP_DATA {
                break (groups, ipg);
            }
            if groups == 1 {
                return Err(MkfsError::TooSmall {
                    bytes: device_bytes,
                });
            }
            blocks -= u64::from(rem);
        };
        let journal_blocks = match journal {
            None => 0,
            Some(size) => Self::journal_blocks(size, blocks)?,
        };
        let p = Params {
            blocks_count: blocks as u32,
            group_count: groups,
            inodes_per_group: ipg,
            journal_blocks,
        };
        if u64::from(journal_blocks) * 2 > blocks {
            return Err(MkfsError::JournalTooLarge {
                blocks: journal_blocks,
                fs_blocks: p.blocks_count,
            });
        }
        Ok(p)
    }

    fn journal_blocks(size: JournalSize, fs_blocks: u64) -> Result<u32, MkfsError> {
        let j = match size {
            JournalSize::Default => {
                default_journal_blocks(fs_blocks).ok_or(MkfsError::JournalTooLarge {
                    blocks: MIN_JOURNAL_BLOCKS,
                    fs_blocks: fs_blocks as u32,
                })?
            }
            JournalSize::Bytes(b) => u32::try_from(b / u64::from(BLOCK_SIZE)).unwrap_or(u32::MAX),
        };
        if j < MIN_JOURNAL_BLOCKS {
            return Err(MkfsError::JournalTooSmall { blocks: j });
        }
        Ok(j)
    }

    pub fn inode_table_blocks(&self) -> u32 {
        inode_table_blocks(self.inodes_per_group)
    }

    pub fn inodes_count(&self) -> u32 {
        self.inodes_per_group * self.group_count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figures read from `mke2fs -t ext3 -b 4096 -I 256` (1.47) on images of these sizes.
    #[test]
    fn matches_mke2fs_figures() {
        let cases = [
            (64u64 << 20, 16384u32, 16384u32, 1024u32),
            (1 << 30, 262144, 65536, 8192),
            (64 << 30, 16777216, 4194304, 131072),
        ];
        for (bytes, blocks, inodes, journal) in cases {
            let p = Params::new(bytes, Some(JournalSize::Default)).unwrap();
            assert_eq!(
                (p.blocks_count, p.inodes_count(), p.journal_blocks),
                (blocks, inodes, journal),
                "{bytes}"
            );
        }
    }

    #[test]
    fn short_last_group_is_dropped() {
        // One full group plus 100 blocks: too few for a group of its own.
        let p = Params::new((32768 + 100) * 4096, None).unwrap();
        assert_eq!((p.blocks_count, p.group_count), (32768, 1));
        let p = Params::new((32768 + 2000) * 4096, None).unwrap();
        assert_eq!((p.blocks_count, p.group_count), (32768 + 2000, 2));
    }

    #[test]
    fn refuses_tiny_devices_and_journals() {
        assert!(matches!(
            Params::new(100 * 1024, None),
            Err(MkfsError::TooSmall { .. })
        ));
        assert!(matches!(
            Params::new(4 << 20, Some(JournalSize::Default)),
            Err(MkfsError::JournalTooLarge { .. })
        ));
        assert!(matches!(
            Params::new(64 << 20, Some(JournalSize::Bytes(1 << 20))),
            Err(MkfsError::JournalTooSmall { .. })
        ));
        assert!(matches!(
            Params::new(64 << 20, Some(JournalSize::Bytes(40 << 20))),
            Err(MkfsError::JournalTooLarge { .. })
        ));
    }
}
