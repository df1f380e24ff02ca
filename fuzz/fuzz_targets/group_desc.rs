//! Group descriptor tables: the first 8 bytes pick a layout, the rest is
//! the table; decoding must give valid descriptors or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stitch_format::group_desc::{decode_table, encode_table};
use stitch_format::{BlockSize, GroupNo, Layout};

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (head, table) = data.split_at(8);
    let blocks = u32::from_le_bytes([head[0], head[1], head[2], head[3]]).max(2);
    let bpg = 8 * (u32::from(head[4]) + 1);
    let layout = Layout {
        block_size: BlockSize::from_log(u32::from(head[5] % 3)).expect("1, 2 or 4 KiB"),
        blocks_count: blocks,
        first_data_block: u32::from(head[5] % 3 == 0),
        blocks_per_group: bpg,
        inodes_per_group: 8 * (u32::from(head[6]) + 1),
        inode_size: 128 << (head[7] % 2),
        group_count: blocks.div_ceil(bpg).min(64),
        sparse_super: head[7] & 2 != 0,
        reserved_gdt_blocks: u16::from(head[7] >> 4),
    };
    if let Ok(gds) = decode_table(table, &layout) {
        let again = encode_table(&gds, &layout);
        assert_eq!(again[..gds.len() * 32], table[..gds.len() * 32]);
        for (i, gd) in gds.iter().enumerate() {
            let group = layout.group_layout(GroupNo(i as u32), gd);
            assert!(group.inode_table.end <= layout.end());
        }
    }
});
