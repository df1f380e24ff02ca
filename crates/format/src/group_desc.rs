//! Block group descriptors (32 bytes each, no `64bit`) and the descriptor table.
//!
//! Invariant: a descriptor accepted by [`GroupDesc::validate`] points its
//! bitmaps and inode table inside its own group, clear of the group's
//! superblock/GDT copy and of each other, and its counts fit the group;
//! so callers may index the device with these numbers without further
//! range checks, and no write to one of them lands on another.

use crate::codec::{ondisk, Le};
use crate::error::{ensure, FormatError, Result, Structure};
use crate::layout::Layout;
use crate::units::{BlockNo, GroupNo};
use std::ops::Range;

ondisk! {
    /// One group descriptor (`struct ext2_group_desc`).
    pub struct GroupDesc: Le, size = 32;
    {
        0x00 block_bitmap: BlockNo,
        0x04 inode_bitmap: BlockNo,
        0x08 inode_table: BlockNo,
        0x0C free_blocks_count: u16,
        0x0E free_inodes_count: u16,
        0x10 used_dirs_count: u16,
        0x12 flags: u16,
        0x14 exclude_bitmap_lo: u32,
        0x18 block_bitmap_csum_lo: u16,
        0x1A inode_bitmap_csum_lo: u16,
        0x1C itable_unused: u16,
        0x1E checksum: u16,
    }
}

impl GroupDesc {
    /// Checks this descriptor of group `g` against the layout, as the
    /// kernel's `ext4_check_descriptors` and e2fsck's `ext2fs_check_desc`
    /// do without `flex_bg` (which is refused): the block bitmap, inode
    /// bitmap and inode table lie inside the file system and inside their
    /// own group, off the group's superblock copy and descriptor table and
    /// off each other; the free and directory counts fit the group. The
    /// message names the group, the structure and the block, as e2fsck
    /// would ("group 3's inode table at block 70000 lies outside the file
    /// system").
    pub fn validate(&self, layout: &Layout, g: GroupNo) -> Result<()> {
        let s = Structure::GroupDescriptor;
        let l = layout.group_layout(g, self);
        let copy = l
            .super_copy
            .as_ref()
            .map_or(l.blocks.start..l.blocks.start, |c| {
                c.superblock..c.reserved_gdt.end
            });
        ensure(copy.end <= l.blocks.end, s, || {
            format!(
                "{g}'s superblock copy and descriptor tables ({}) run past the group's end \
                 (block {})",
                span(&copy),
                l.blocks.end.0.saturating_sub(1)
            )
        })?;
        let itb = layout.inode_table_blocks();
        let parts = [
            ("block bitmap", self.block_bitmap, 1),
            ("inode bitmap", self.inode_bitmap, 1),
            ("inode table", self.inode_table, itb),
        ];
        for (i, &(what, start, len)) in parts.iter().enumerate() {
            let at = start..start.plus(u64::from(len));
            let place = |problem: String| format!("{g}'s {what} at {start} {problem}");
            let fs = BlockNo::from(layout.first_data_block)..layout.end();
            ensure(within(&at, &fs), s, || {
                place(format!("lies outside the file system ({})", span(&fs)))
            })?;
            let group = &l.blocks;
            ensure(within(&at, group), s, || {
                place(format!("lies outside its group ({})", span(group)))
            })?;
            ensure(!overlaps(&at, &copy), s, || {
                place(format!(
                    "lies on the group's superblock copy or descriptor tables ({})",
                    span(&copy)
                ))
            })?;
            for &(other, o_start, o_len) in &parts[..i] {
                let o = o_start..o_start.plus(u64::from(o_len));
                ensure(!overlaps(&at, &o), s, || {
                    place(format!("lies on its {other} ({})", span(&o)))
                })?;
            }
        }
        self.validate_counts(layout, g)
    }

    /// Free and directory counts within the group's size.
    fn validate_counts(&self, layout: &Layout, g: GroupNo) -> Result<()> {
        let s = Structure::GroupDescriptor;
        let too_many = |what: &str, count: u16, total: u32| {
            format!("{g}'s free {what} count {count} is above the {total} it has")
        };
        let (blocks, inodes) = (layout.blocks_in_group(g), layout.inodes_per_group);
        ensure(u32::from(self.free_blocks_count) <= blocks, s, || {
            too_many("block", self.free_blocks_count, blocks)
        })?;
        ensure(u32::from(self.free_inodes_count) <= inodes, s, || {
            too_many("inode", self.free_inodes_count, inodes)
        })?;
        ensure(u32::from(self.used_dirs_count) <= inodes, s, || {
            format!(
                "{g}'s directory count {} is above the {inodes} inodes it has",
                self.used_dirs_count
            )
        })
    }
}

/// A block range as `blocks a-b` (inclusive), or `block a`.
fn span(r: &Range<BlockNo>) -> String {
    let (a, b) = (r.start.0, r.end.0);
    match b.saturating_sub(a) {
        0 => format!("no blocks, at {a}"),
        1 => format!("block {a}"),
        _ => format!("blocks {a}-{}", b - 1),
    }
}

fn within(inner: &Range<BlockNo>, outer: &Range<BlockNo>) -> bool {
    inner.start >= outer.start && inner.end <= outer.end
}

fn overlaps(a: &Range<BlockNo>, b: &Range<BlockNo>) -> bool {
    a.start < b.end && b.start < a.end
}

/// The file system's free blocks and inodes by its descriptors: the
/// superblock's totals as mkfs writes them and as mount sets them (the
/// descriptors decide; the kernel sums them at mount too).
pub fn free_totals(descs: &[GroupDesc]) -> (u32, u32) {
    let blocks = descs.iter().map(|g| u32::from(g.free_blocks_count)).sum();
    let inodes = descs.iter().map(|g| u32::from(g.free_inodes_count)).sum();
    (blocks, inodes)
}

/// Decodes and validates the whole descriptor table from the concatenated GDT
/// blocks (`buf.len() >= group_count * 32`).
pub fn decode_table(buf: &[u8], layout: &Layout) -> Result<Vec<GroupDesc>> {
    let n = layout.group_count as usize;
    ensure(
        buf.len() / GroupDesc::SIZE >= n,
        Structure::GroupDescriptor,
        || {
            format!(
                "table of {} bytes holds fewer than {n} descriptors",
                buf.len()
            )
        },
    )?;
    (0..n)
        .map(|i| {
            let off = i * GroupDesc::SIZE;
            let gd = GroupDesc::decode_raw(&buf[off..]).ok_or_else(|| {
                FormatError::corrupt_at(Structure::GroupDescriptor, off, "truncated")
            })?;
            gd.validate(layout, GroupNo(i as u32))?;
            Ok(gd)
        })
        .collect()
}

/// Encodes the table into whole GDT blocks (`layout.gdt_blocks()` of them),
/// zero past the last descriptor as mke2fs leaves it.
pub fn encode_table(descs: &[GroupDesc], layout: &Layout) -> Vec<u8> {
    let mut out = vec![0u8; layout.gdt_blocks() as usize * layout.block_size.usize()];
    for (i, gd) in descs.iter().enumerate() {
        gd.encode_into(&mut out[i * GroupDesc::SIZE..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::BlockSize;

    /// Four full groups of 4 KiB blocks, 16 inode-table blocks each.
    fn layout() -> Layout {
        Layout {
            block_size: BlockSize::DEFAULT,
            blocks_count: 4 * 32768,
            first_data_block: 0,
            blocks_per_group: 32768,
            inodes_per_group: 256,
            inode_size: 256,
            group_count: 4,
            sparse_super: true,
            reserved_gdt_blocks: 0,
        }
    }

    fn standard(g: u32) -> GroupDesc {
        let l = layout().standard_group_layout(GroupNo(g));
        GroupDesc {
            block_bitmap: l.block_bitmap,
            inode_bitmap: l.inode_bitmap,
            inode_table: l.inode_table.start,
            ..GroupDesc::default()
        }
    }

    fn why(gd: &GroupDesc, g: u32) -> String {
        gd.validate(&layout(), GroupNo(g)).unwrap_err().to_string()
    }

    #[test]
    fn the_standard_layout_passes() {
        for g in 0..4 {
            standard(g).validate(&layout(), GroupNo(g)).unwrap();
        }
    }

    /// Each way a descriptor can misplace its blocks is named with the
    /// group, the structure and the block.
    #[test]
    fn misplaced_blocks_are_named() {
        let zero = GroupDesc::default();
        assert!(
            why(&zero, 0)
                .contains("group 0's block bitmap at block 0 lies on the group's superblock copy"),
            "{}",
            why(&zero, 0)
        );
        assert!(why(&zero, 2).contains("group 2's block bitmap at block 0 lies outside its group"));
        let far = GroupDesc {
            inode_table: BlockNo(200_000),
            ..standard(3)
        };
        assert!(
            why(&far, 3).contains("group 3's inode table at block 200000 lies outside the file system (blocks 0-131071)"),
            "{}",
            why(&far, 3)
        );
        let tail = GroupDesc {
            inode_table: BlockNo(4 * 32768 - 8),
            ..standard(3)
        };
        assert!(why(&tail, 3).contains("inode table at block 131064 lies outside the file system"));
        let on_table = GroupDesc {
            inode_bitmap: standard(2).inode_table.plus(3),
            ..standard(2)
        };
        assert!(
            why(&on_table, 2).contains("inode table at block 65538 lies on its inode bitmap"),
            "{}",
            why(&on_table, 2)
        );
        let same = GroupDesc {
            inode_bitmap: standard(2).block_bitmap,
            ..standard(2)
        };
        assert!(why(&same, 2).contains("inode bitmap at block 65536 lies on its block bitmap"));
    }

    #[test]
    fn counts_above_the_group_are_named() {
        let gd = GroupDesc {
            free_inodes_count: 300,
            ..standard(1)
        };
        assert!(why(&gd, 1).contains("group 1's free inode count 300 is above the 256 it has"));
        let gd = GroupDesc {
            used_dirs_count: 65_502,
            ..standard(1)
        };
        assert!(why(&gd, 1).contains("directory count 65502"));
    }
}
