//! Superblock decoding: any 1024 bytes either decode to a superblock whose
//! geometry and layout computations stay in range, or give an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stitch_format::{Geometry, GroupNo, Superblock};

fuzz_target!(|data: &[u8]| {
    if let Some(raw) = Superblock::decode_raw(data) {
        assert_eq!(raw.to_bytes(), data[..1024]);
    }
    let Ok(sb) = Superblock::decode(data) else { return };
    let geo = Geometry::from_superblock(&sb).expect("a decoded superblock has a geometry");
    for g in [0, 1, geo.group_count / 2, geo.group_count - 1] {
        let layout = geo.standard_layout(GroupNo(g));
        assert!(layout.blocks.start <= layout.blocks.end);
    }
    let _ = geo.inode_location(stitch_format::InodeNo(sb.inodes_count), stitch_format::BlockNo(1));
});
