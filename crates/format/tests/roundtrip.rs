//! Property tests: raw structures round-trip byte for byte, decoders never
//! panic on arbitrary bytes, and directory edits keep blocks valid and agree
//! with a simple model.

use proptest::prelude::*;
use std::collections::BTreeMap;
use stitch_format::dir;
use stitch_format::group_desc::decode_table;
use stitch_format::inode::InodeExtra;
use stitch_format::{FileType, GroupDesc, Inode, InodeCore, InodeNo, Layout, Superblock};

fn layout() -> Layout {
    Layout {
        block_size: stitch_format::BlockSize::DEFAULT,
        blocks_count: 100_000,
        first_data_block: 0,
        blocks_per_group: 32768,
        inodes_per_group: 8192,
        inode_size: 256,
        group_count: 4,
        sparse_super: true,
        reserved_gdt_blocks: 0,
    }
}

proptest! {
    #[test]
    fn superblock_raw_round_trip(bytes in prop::collection::vec(any::<u8>(), 1024)) {
        let sb = Superblock::decode_raw(&bytes).unwrap();
        prop_assert_eq!(sb.to_bytes(), bytes.clone());
        // Validation may refuse, but must not panic.
        let _ = Superblock::decode(&bytes);
        let _ = Layout::from_superblock(&sb);
    }

    #[test]
    fn group_desc_and_inode_round_trip(bytes in prop::collection::vec(any::<u8>(), 256)) {
        let gd = GroupDesc::decode_raw(&bytes).unwrap();
        prop_assert_eq!(gd.to_bytes(), bytes[..32].to_vec());
        let core = InodeCore::decode_raw(&bytes).unwrap();
        prop_assert_eq!(core.to_bytes(), bytes[..128].to_vec());
        let extra = InodeExtra::decode_raw(&bytes[128..]).unwrap();
        prop_assert_eq!(extra.to_bytes(), bytes[128..160].to_vec());
        if let Ok(inode) = Inode::decode(&bytes) {
            let mut again = bytes.clone();
            inode.encode_into(&mut again);
            prop_assert_eq!(again, bytes.clone());
        }
    }

    #[test]
    fn decoders_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4200)) {
        let _ = Superblock::decode(&bytes);
        let _ = Inode::decode(&bytes);
        let _ = decode_table(&bytes, &layout());
        let _ = dir::check_block(&bytes);
        let _ = dir::entries(&bytes).count();
        let _ = stitch_format::indirect::check_pointers(&bytes, &layout());
    }

    #[test]
    fn directory_edits_match_model(ops in prop::collection::vec((any::<bool>(), 0u8..40, 1usize..60), 1..200)) {
        let mut block = dir::new_dir_block(4096, InodeNo(2), InodeNo(2));
        let mut model = BTreeMap::new();
        for (i, (add, key, len)) in ops.into_iter().enumerate() {
            let name = format!("{key}{}", "n".repeat(len)).into_bytes();
            if add && !model.contains_key(&name) {
                let ino = InodeNo(100 + i as u32);
                if dir::insert(&mut block, &name, ino, FileType::Regular).unwrap() {
                    model.insert(name, ino);
                }
            } else if !add {
                prop_assert_eq!(dir::remove(&mut block, &name).unwrap(), model.remove(&name));
            }
            dir::check_block(&block).unwrap();
        }
        let mut seen = BTreeMap::new();
        for e in dir::entries(&block) {
            let e = e.unwrap();
            if e.inode.0 != 0 && e.name != b"." && e.name != b".." {
                seen.insert(e.name.to_vec(), e.inode);
            }
        }
        prop_assert_eq!(seen, model);
    }
}
