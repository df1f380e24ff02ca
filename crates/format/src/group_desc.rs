//! Block group descriptors (32 bytes each, no `64bit`) and the descriptor table.
//!
//! Invariant: a descriptor accepted by [`GroupDesc::validate`] points its
//! bitmaps and inode table inside the file system, past the group's
//! superblock/GDT copy, and its free counts fit the group; so callers may
//! index the device with these numbers without further range checks.

use crate::codec::{ondisk, Le};
use crate::error::{ensure, FormatError, Result, Structure};
use crate::geometry::Geometry;
use crate::units::{BlockNo, GroupNo};

ondisk! {
    /// One group descriptor (`struct ext2_group_desc`).
    pub struct GroupDesc: Le, size = 32;
    {
        0x00 block_bitmap: u32,
        0x04 inode_bitmap: u32,
        0x08 inode_table: u32,
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
    /// Checks this descriptor of group `g` against the geometry.
    pub fn validate(&self, geo: &Geometry, g: GroupNo) -> Result<()> {
        let s = Structure::GroupDescriptor;
        let ctx =
            |what: &str, v: u32| format!("{g}: {what} {v} outside the file system's data area");
        let lo = geo.first_data_block;
        let in_fs = |b: u32| b >= lo && b < geo.blocks_count;
        ensure(in_fs(self.block_bitmap), s, || {
            ctx("block bitmap", self.block_bitmap)
        })?;
        ensure(in_fs(self.inode_bitmap), s, || {
            ctx("inode bitmap", self.inode_bitmap)
        })?;
        let itable_end = u64::from(self.inode_table) + u64::from(geo.inode_table_blocks());
        ensure(
            in_fs(self.inode_table) && itable_end <= u64::from(geo.blocks_count),
            s,
            || ctx("inode table", self.inode_table),
        )?;
        ensure(
            u32::from(self.free_blocks_count) <= geo.blocks_in_group(g),
            s,
            || {
                format!(
                    "{g}: free_blocks_count {} too large",
                    self.free_blocks_count
                )
            },
        )?;
        ensure(
            u32::from(self.free_inodes_count) <= geo.inodes_per_group,
            s,
            || {
                format!(
                    "{g}: free_inodes_count {} too large",
                    self.free_inodes_count
                )
            },
        )?;
        ensure(
            u32::from(self.used_dirs_count) <= geo.inodes_per_group,
            s,
            || format!("{g}: used_dirs_count {} too large", self.used_dirs_count),
        )
    }

    pub fn inode_table_block(&self) -> BlockNo {
        BlockNo(self.inode_table)
    }
}

/// Decodes and validates the whole descriptor table from the concatenated GDT
/// blocks (`buf.len() >= group_count * 32`).
pub fn decode_table(buf: &[u8], geo: &Geometry) -> Result<Vec<GroupDesc>> {
    let n = geo.group_count as usize;
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
            gd.validate(geo, GroupNo(i as u32))?;
            Ok(gd)
        })
        .collect()
}

/// Encodes the table into whole GDT blocks (`geo.gdt_blocks()` of them),
/// zero past the last descriptor as mke2fs leaves it.
pub fn encode_table(descs: &[GroupDesc], geo: &Geometry) -> Vec<u8> {
    let mut out = vec![0u8; geo.gdt_blocks() as usize * geo.block_size.usize()];
    for (i, gd) in descs.iter().enumerate() {
        gd.encode_into(&mut out[i * GroupDesc::SIZE..]);
    }
    out
}
