//! Decodes images made by mke2fs and compares what we decode with what
//! mke2fs wrote: structure for structure, and byte for byte after re-encoding.

mod common;

use common::{block, read_at};
use std::path::Path;
use stitch_format::dir;
use stitch_format::error::FormatError;
use stitch_format::group_desc::{decode_table, encode_table};
use stitch_format::indirect::{map_path, pointer};
use stitch_format::inode::{JOURNAL_INO, ROOT_INO};
use stitch_format::{BlockNo, FileType, GroupNo, Inode, InodeNo, Layout, Superblock, NO_BLOCK};
use stitch_testkit::{mke2fs, scratch};

struct Image {
    sb: Superblock,
    layout: Layout,
    gds: Vec<stitch_format::GroupDesc>,
}

fn open(path: &Path) -> Image {
    let raw = read_at(path, 1024, 1024);
    let sb = Superblock::decode(&raw).unwrap();
    assert_eq!(sb.to_bytes(), raw, "superblock re-encodes byte for byte");
    let layout = Layout::from_superblock(&sb).unwrap();
    let bs = layout.block_size.usize();
    let gdt_start = layout.super_copy(GroupNo(0)).unwrap().gdt.start;
    let table = read_at(
        path,
        gdt_start.0 * bs as u64,
        layout.gdt_blocks() as usize * bs,
    );
    let gds = decode_table(&table, &layout).unwrap();
    assert_eq!(
        encode_table(&gds, &layout),
        table,
        "GDT re-encodes byte for byte"
    );
    Image { sb, layout, gds }
}

fn read_inode(path: &Path, img: &Image, ino: InodeNo) -> Inode {
    let (g, _) = img.layout.inode_group(ino).unwrap();
    let loc = img
        .layout
        .inode_location(ino, img.gds[g.0 as usize].inode_table)
        .unwrap();
    let bs = img.layout.block_size.usize();
    let blk = block(path, bs, loc.block);
    let slot = &blk[loc.offset..loc.offset + usize::from(img.layout.inode_size)];
    let inode = Inode::decode(slot).unwrap();
    let mut again = slot.to_vec();
    inode.encode_into(&mut again);
    assert_eq!(again, slot, "{ino} re-encodes byte for byte");
    inode
}

/// Physical block of logical block `n` of an inode (`NO_BLOCK` for a hole).
fn bmap(path: &Path, bs: usize, inode: &Inode, n: u64) -> BlockNo {
    let p = map_path(n, bs).unwrap();
    let mut b = inode.block_ptr(p.slot);
    for &i in p.levels() {
        if b == NO_BLOCK {
            return NO_BLOCK;
        }
        b = pointer(&block(path, bs, b), i).unwrap();
    }
    b
}

fn root_names(path: &Path, img: &Image) -> Vec<(String, u32, Option<FileType>)> {
    let root = read_inode(path, img, ROOT_INO);
    assert!(root.is_dir());
    let bs = img.layout.block_size.usize();
    let blk = block(path, bs, bmap(path, bs, &root, 0));
    dir::entries(&blk)
        .map(|e| e.unwrap())
        .filter(|e| e.inode.0 != 0)
        .map(|e| {
            (
                String::from_utf8_lossy(e.name).into_owned(),
                e.inode.0,
                e.file_type(),
            )
        })
        .collect()
}

fn check_layouts(img: &Image) {
    for g in 0..img.layout.group_count {
        let group = img.layout.group_layout(GroupNo(g), &img.gds[g as usize]);
        // Without flex_bg mke2fs puts the bitmaps right after the copy.
        assert_eq!(
            group,
            img.layout.standard_group_layout(GroupNo(g)),
            "group {g}"
        );
    }
}

#[test]
fn ext2_4k_with_resize_inode_and_dir_index() {
    let dir = scratch();
    let path = dir.path().join("a.img");
    mke2fs(&path, 300 << 20, &["-t", "ext2", "-b", "4096", "-I", "256"]);
    let img = open(&path);
    assert_eq!(img.layout.group_count, 3);
    assert!(img.sb.reserved_gdt_blocks > 0);
    check_layouts(&img);
    let names = root_names(&path, &img);
    assert!(
        names.contains(&("lost+found".into(), 11, Some(FileType::Directory))),
        "{names:?}"
    );
    assert!(names.contains(&("..".into(), 2, Some(FileType::Directory))));
    let used: u32 = img.gds.iter().map(|g| u32::from(g.free_blocks_count)).sum();
    assert_eq!(used, img.sb.free_blocks_count_lo);
}

#[test]
fn ext3_journal_inode_maps_its_blocks() {
    let dir = scratch();
    let path = dir.path().join("j.img");
    mke2fs(
        &path,
        200 << 20,
        &[
            "-t",
            "ext3",
            "-b",
            "4096",
            "-I",
            "256",
            "-O",
            "^resize_inode",
        ],
    );
    let img = open(&path);
    assert!(img.sb.has_journal());
    assert_eq!(img.sb.journal_inum, JOURNAL_INO.0);
    let j = read_inode(&path, &img, JOURNAL_INO);
    assert_eq!(j.size(), 4096 * 4096, "mke2fs picks 16 MiB for 200 MiB");
    // The superblock keeps a backup of the journal inode's map.
    assert_eq!(&img.sb.jnl_blocks[..15], &j.core.block[..]);
    assert_eq!(img.sb.jnl_blocks[16], j.core.size_lo);
    let last = bmap(&path, 4096, &j, 4095);
    assert!(last != NO_BLOCK && last < img.layout.end());
    check_layouts(&img);
}

#[test]
fn small_block_sizes_are_read() {
    let dir = scratch();
    for bs in ["1024", "2048"] {
        let path = dir.path().join(format!("b{bs}.img"));
        mke2fs(&path, 40 << 20, &["-t", "ext3", "-b", bs, "-I", "128"]);
        let img = open(&path);
        assert_eq!(img.layout.block_size.bytes().to_string(), bs);
        assert_eq!(img.sb.first_data_block, u32::from(bs == "1024"));
        check_layouts(&img);
        let names = root_names(&path, &img);
        assert!(
            names.iter().any(|(n, i, _)| n == "lost+found" && *i == 11),
            "{bs}: {names:?}"
        );
    }
}

#[test]
fn ext4_features_are_refused_by_name() {
    let dir = scratch();
    let cases: [(&[&str], &str); 3] = [
        (&["-t", "ext2", "-O", "extents"], "extent"),
        (&["-t", "ext4"], "unsupported incompat feature"),
        (&["-t", "ext2", "-O", "metadata_csum"], "metadata_csum"),
    ];
    for (i, (args, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("f{i}.img"));
        mke2fs(&path, 64 << 20, args);
        let err = Superblock::decode(&read_at(&path, 1024, 1024)).unwrap_err();
        assert!(
            matches!(err, FormatError::UnsupportedFeature { .. }),
            "{err}"
        );
        assert!(err.to_string().contains(want), "{args:?}: {err}");
    }
}
