//! Where things live: groups, superblock copies, descriptor tables, bitmaps,
//! inode tables, and where inside its table an inode sits.
//!
//! A file system is `blocks_count` blocks split into groups of
//! `blocks_per_group` starting at `first_data_block` (1 for 1 KiB blocks, else
//! 0); the last group may be shorter. A group that carries a superblock copy
//! (every group without `sparse_super`; groups 0, 1 and powers of 3, 5 and 7
//! with it) starts with the superblock, then the descriptor table, then the
//! reserved GDT blocks of `resize_inode`. `meta_bg` and `flex_bg` are refused,
//! so this is the only layout of copies that can occur.
//!
//! Invariant: a [`Layout`] is only built from a validated superblock, so its
//! counts are non-zero and its arithmetic cannot overflow `u64`.

use crate::error::{FormatError, Result, Structure};
use crate::group_desc::GroupDesc;
use crate::superblock::Superblock;
use crate::units::{BlockNo, BlockSize, GroupNo, InodeNo};
use std::ops::Range;

/// The numbers every layout computation needs, taken from a superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub block_size: BlockSize,
    pub blocks_count: u32,
    pub first_data_block: u32,
    pub blocks_per_group: u32,
    pub inodes_per_group: u32,
    pub inode_size: u16,
    pub group_count: u32,
    pub sparse_super: bool,
    pub reserved_gdt_blocks: u16,
}

/// The blocks of one group's superblock copy (present only in some groups).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuperCopy {
    /// Block holding the superblock (primary: byte 1024 of the device).
    pub superblock: BlockNo,
    /// Descriptor table blocks.
    pub gdt: Range<BlockNo>,
    /// Blocks reserved for descriptor growth (`resize_inode`).
    pub reserved_gdt: Range<BlockNo>,
}

/// Every metadata location of one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupLayout {
    pub group: GroupNo,
    /// All blocks of the group.
    pub blocks: Range<BlockNo>,
    pub super_copy: Option<SuperCopy>,
    pub block_bitmap: BlockNo,
    pub inode_bitmap: BlockNo,
    pub inode_table: Range<BlockNo>,
}

/// Where an inode's bytes are.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct InodeLocation {
    pub group: GroupNo,
    /// Index of the inode inside its group's table.
    pub index: u32,
    /// Block of the inode table holding it.
    pub block: BlockNo,
    /// Byte offset inside that block.
    pub offset: usize,
}

/// Is `n` a power of `base` (1 counts)?
fn is_power_of(mut n: u32, base: u32) -> bool {
    while n > 1 && n.is_multiple_of(base) {
        n /= base;
    }
    n == 1
}

impl Layout {
    /// Builds the layout of a superblock, validating it first.
    pub fn from_superblock(sb: &Superblock) -> Result<Self> {
        sb.validate()?;
        let block_size = sb
            .block_size()
            .ok_or_else(|| FormatError::corrupt(Structure::Superblock, "block size"))?;
        Ok(Layout {
            block_size,
            blocks_count: sb.blocks_count(),
            first_data_block: sb.first_data_block,
            blocks_per_group: sb.blocks_per_group,
            inodes_per_group: sb.inodes_per_group,
            inode_size: sb.inode_size(),
            group_count: sb.group_count(),
            sparse_super: sb.sparse_super(),
            reserved_gdt_blocks: sb.reserved_gdt_blocks,
        })
    }

    pub fn inodes_count(&self) -> u32 {
        self.inodes_per_group * self.group_count
    }

    pub fn inodes_per_block(&self) -> u32 {
        self.block_size.bytes() / u32::from(self.inode_size)
    }

    /// Blocks of one group's inode table.
    pub fn inode_table_blocks(&self) -> u32 {
        (self.inodes_per_group * u32::from(self.inode_size)).div_ceil(self.block_size.bytes())
    }

    /// Blocks of the group descriptor table.
    pub fn gdt_blocks(&self) -> u32 {
        (self.group_count * GroupDesc::SIZE as u32).div_ceil(self.block_size.bytes())
    }

    pub fn group_first_block(&self, g: GroupNo) -> BlockNo {
        BlockNo::from(self.first_data_block).plus(u64::from(g.0) * u64::from(self.blocks_per_group))
    }

    /// The end of the file system: the first block past it.
    pub fn end(&self) -> BlockNo {
        BlockNo::from(self.blocks_count)
    }

    /// Is `b` inside the data area (`first_data_block..blocks_count`)?
    pub fn in_data_area(&self, b: BlockNo) -> bool {
        b >= BlockNo::from(self.first_data_block) && b < self.end()
    }

    /// Blocks in group `g` (the last group may be short; 0 past the end).
    pub fn blocks_in_group(&self, g: GroupNo) -> u32 {
        let first = self.group_first_block(g);
        let end = first.plus(u64::from(self.blocks_per_group)).min(self.end());
        // At most `blocks_per_group`, a u32.
        end.0.saturating_sub(first.0) as u32
    }

    /// The group a block belongs to, `None` outside the data area.
    pub fn group_of_block(&self, b: BlockNo) -> Option<GroupNo> {
        self.in_data_area(b).then(|| {
            let index = b.since(BlockNo::from(self.first_data_block));
            // Below `blocks_count` (a u32), so the quotient fits.
            GroupNo((index / u64::from(self.blocks_per_group)) as u32)
        })
    }

    /// The index of block `b` in group `g`'s block bitmap (`b` in `g`).
    pub fn index_in_group(&self, g: GroupNo, b: BlockNo) -> usize {
        b.since(self.group_first_block(g)) as usize
    }

    /// Does group `g` carry a superblock and descriptor table copy?
    pub fn has_super(&self, g: GroupNo) -> bool {
        let g = g.0;
        g <= 1 || !self.sparse_super || is_power_of(g, 3) || is_power_of(g, 5) || is_power_of(g, 7)
    }

    /// The superblock copy of group `g`, if it has one.
    pub fn super_copy(&self, g: GroupNo) -> Option<SuperCopy> {
        if !self.has_super(g) {
            return None;
        }
        let sb = self.group_first_block(g);
        let gdt_end = sb.plus(1 + u64::from(self.gdt_blocks()));
        Some(SuperCopy {
            superblock: sb,
            gdt: sb.plus(1)..gdt_end,
            reserved_gdt: gdt_end..gdt_end.plus(u64::from(self.reserved_gdt_blocks)),
        })
    }

    /// Blocks at the start of group `g` used by its superblock copy.
    pub fn super_copy_blocks(&self, g: GroupNo) -> u32 {
        // At most a group's worth of blocks, a u32.
        self.super_copy(g)
            .map_or(0, |c| c.reserved_gdt.end.since(c.superblock) as u32)
    }

    /// Metadata blocks of group `g` in the layout mkfs writes: copy, block
    /// bitmap, inode bitmap, inode table.
    pub fn overhead_blocks(&self, g: GroupNo) -> u32 {
        self.super_copy_blocks(g) + 2 + self.inode_table_blocks()
    }

    /// The layout mkfs (and mke2fs without `flex_bg`) gives group `g`.
    pub fn standard_group_layout(&self, g: GroupNo) -> GroupLayout {
        let first = self.group_first_block(g);
        let bb = first.plus(u64::from(self.super_copy_blocks(g)));
        let gd = GroupDesc {
            block_bitmap: bb,
            inode_bitmap: bb.plus(1),
            inode_table: bb.plus(2),
            ..Default::default()
        };
        self.group_layout(g, &gd)
    }

    /// The layout of group `g` as its descriptor records it.
    pub fn group_layout(&self, g: GroupNo, gd: &GroupDesc) -> GroupLayout {
        let first = self.group_first_block(g);
        GroupLayout {
            group: g,
            blocks: first..first.plus(u64::from(self.blocks_in_group(g))),
            super_copy: self.super_copy(g),
            block_bitmap: gd.block_bitmap,
            inode_bitmap: gd.inode_bitmap,
            inode_table: gd.inode_table..gd.inode_table.plus(u64::from(self.inode_table_blocks())),
        }
    }

    /// Group and index of inode `ino` (1-based), `None` if out of range.
    pub fn inode_group(&self, ino: InodeNo) -> Option<(GroupNo, u32)> {
        (ino.0 >= 1 && ino.0 <= self.inodes_count()).then(|| {
            (
                GroupNo((ino.0 - 1) / self.inodes_per_group),
                (ino.0 - 1) % self.inodes_per_group,
            )
        })
    }

    /// Where inode `ino` is, given its group's inode table start.
    pub fn inode_location(&self, ino: InodeNo, inode_table: BlockNo) -> Option<InodeLocation> {
        let (group, index) = self.inode_group(ino)?;
        let per_block = self.inodes_per_block();
        let block = inode_table.plus(u64::from(index / per_block));
        // A block past ext2's 32 bits is in no file system.
        block.to_u32()?;
        Some(InodeLocation {
            group,
            index,
            block,
            offset: (index % per_block) as usize * usize::from(self.inode_size),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn layout_4k(blocks: u32) -> Layout {
        let bpg = 32768;
        let groups = blocks.div_ceil(bpg);
        Layout {
            block_size: BlockSize::DEFAULT,
            blocks_count: blocks,
            first_data_block: 0,
            blocks_per_group: bpg,
            inodes_per_group: 8192,
            inode_size: 256,
            group_count: groups,
            sparse_super: true,
            reserved_gdt_blocks: 0,
        }
    }

    #[test]
    fn sparse_super_groups() {
        let g = layout_4k(32768 * 400);
        let with: Vec<u32> = (0..400).filter(|&i| g.has_super(GroupNo(i))).collect();
        assert_eq!(with, [0, 1, 3, 5, 7, 9, 25, 27, 49, 81, 125, 243, 343]);
    }

    #[test]
    fn standard_layout_of_group_with_and_without_copy() {
        let g = layout_4k(32768 * 512);
        assert_eq!(g.gdt_blocks(), 4);
        let l1 = g.standard_group_layout(GroupNo(1));
        assert_eq!(
            l1.super_copy.as_ref().unwrap().gdt,
            BlockNo(32769)..BlockNo(32773)
        );
        assert_eq!(l1.block_bitmap, BlockNo(32773));
        assert_eq!(l1.inode_table, BlockNo(32775)..BlockNo(32775 + 512));
        let l2 = g.standard_group_layout(GroupNo(2));
        assert!(l2.super_copy.is_none());
        assert_eq!(l2.block_bitmap, BlockNo(65536));
    }

    #[test]
    fn inode_location_and_bounds() {
        let g = layout_4k(32768 * 2);
        let loc = g.inode_location(InodeNo(8194), BlockNo(100)).unwrap();
        assert_eq!(
            (loc.group, loc.index, loc.block, loc.offset),
            (GroupNo(1), 1, BlockNo(100), 256)
        );
        assert!(g.inode_location(InodeNo(0), BlockNo(1)).is_none());
        assert!(g.inode_location(InodeNo(16385), BlockNo(1)).is_none());
        assert_eq!(g.blocks_in_group(GroupNo(1)), 32768);
        assert_eq!(g.group_of_block(BlockNo(65536)), None);
    }
}
