//! Superblock decoding: any 1024 bytes either decode to a superblock whose
//! layout and group computations stay in range, or give an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stitch_format::{GroupNo, Layout, Superblock};

fuzz_target!(|data: &[u8]| {
    if let Some(raw) = Superblock::decode_raw(data) {
        assert_eq!(raw.to_bytes(), data[..1024]);
    }
    let Ok(sb) = Superblock::decode(data) else { return };
    let layout = Layout::from_superblock(&sb).expect("a decoded superblock has a layout");
    for g in [0, 1, layout.group_count / 2, layout.group_count - 1] {
        let group = layout.standard_group_layout(GroupNo(g));
        assert!(group.blocks.start <= group.blocks.end);
    }
    let _ = layout.inode_location(stitch_format::InodeNo(sb.inodes_count), stitch_format::BlockNo(1));
});
