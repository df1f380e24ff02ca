//! `statfs` counts what memfs knows the disk will free as soon as it knows
//! it: a removed file's blocks (data, indirect and its own attribute
//! block) and the blocks a truncate cuts off, before any flush; and the
//! flush that frees them does not move the figure. Exact for files without
//! holes; for a file with holes below a cut the figure may rise at the
//! flush, never fall (it never shows room the disk will not have).

mod common;
use common::*;
use stitch_memfs::{InodeNo, Kind, MemFs, SetAttrs, XattrSet};

fn bfree(fs: &MemFs) -> u64 {
    fs.statfs().unwrap().bfree
}

/// The blocks `i_blocks` counts for `ino`, once flushed.
fn blocks(fs: &MemFs, ino: InodeNo) -> u64 {
    fs.getattr(ino).unwrap().blocks / 8
}

/// A file of `len` bytes written without holes, with an attribute (its
/// own attribute block) when `xattr`, flushed.
fn dense(fs: &MemFs, name: &[u8], len: usize, xattr: bool) -> InodeNo {
    let f = fs
        .mknod(fs.root(), name, Kind::File, 0o644, (0, 0), 0, 0)
        .unwrap()
        .ino;
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    assert_eq!(fs.write(f, 0, &data, false).unwrap() as usize, len);
    if xattr {
        fs.set_xattr(f, b"user.k", Some(b"v"), XattrSet::Either)
            .unwrap();
    }
    fs.sync().unwrap();
    f
}

/// Runs `change` on a synced mount and checks the figure it shows at once
/// against `want` more free blocks, and that a sync leaves it be.
fn check(fs: &MemFs, what: &str, want: u64, change: impl FnOnce()) {
    let before = bfree(fs);
    change();
    let now = bfree(fs);
    assert_eq!(now - before, want, "{what}: at once");
    fs.sync().unwrap();
    assert_eq!(bfree(fs), now, "{what}: after the flush");
}

#[test]
fn removed_and_cut_files_free_their_blocks_at_once() {
    // 6 MiB: 1536 data blocks, the single indirect block, the double one
    // and one below it; then its attribute block.
    const LEN: usize = 6 << 20;
    for mode in [MODES[0], MODES[1]] {
        let (_dev, fs) = mount_fresh(mode);
        let r = fs.root();
        let f = dense(&fs, b"f", LEN, true);
        assert_eq!(blocks(&fs, f), 1540, "{mode:?}");
        check(&fs, "unlink", 1540, || fs.unlink(r, b"f").unwrap());

        // Open while unlinked: nothing until the last close.
        let f = dense(&fs, b"g", LEN, false);
        fs.open(f).unwrap();
        check(&fs, "unlink of an open file", 0, || {
            fs.unlink(r, b"g").unwrap()
        });
        check(&fs, "its last close", 1539, || fs.release(f).unwrap());

        // A cut keeps 25 data blocks, the single indirect block and the
        // attribute block. (At a block boundary: a cut inside a block
        // dirties its last page, which holds room until the flush as a
        // write there would.)
        let f = dense(&fs, b"h", LEN, true);
        let cut = SetAttrs {
            size: Some(100 * 1024),
            ..Default::default()
        };
        check(&fs, "truncate", 1540 - 27, || {
            fs.setattr(f, cut).unwrap();
        });
        let zero = SetAttrs {
            size: Some(0),
            ..Default::default()
        };
        check(&fs, "truncate to 0", 26, || {
            fs.setattr(f, zero).unwrap();
        });
        assert_eq!(blocks(&fs, f), 1, "the attribute block stays");

        // Renamed over, and a directory that grew to several blocks.
        dense(&fs, b"old", LEN, false);
        dense(&fs, b"new", 4096, false);
        check(&fs, "rename over", 1539, || {
            fs.rename(r, b"new", r, b"old", Default::default()).unwrap()
        });
        let d = fs.mkdir(r, b"d", 0o755, 0, 0).unwrap().ino;
        for i in 0..300 {
            let name = format!("{i:0>60}");
            fs.mknod(d, name.as_bytes(), Kind::File, 0o644, (0, 0), 0, 0)
                .unwrap();
        }
        fs.sync().unwrap();
        for i in 0..300 {
            fs.unlink(d, format!("{i:0>60}").as_bytes()).unwrap();
        }
        fs.sync().unwrap();
        let dir_blocks = blocks(&fs, d);
        assert!(dir_blocks > 4, "{dir_blocks}");
        check(&fs, "rmdir", dir_blocks, || fs.rmdir(r, b"d").unwrap());
        fs.unmount().unwrap();
    }
}

/// A cut through a file with holes is counted as if the kept part had
/// none: no more than it frees, and the flush adds the rest.
#[test]
fn a_cut_through_holes_is_never_counted_above_what_it_frees() {
    let (_dev, fs) = mount_fresh(MODES[0]);
    let f = fs
        .mknod(fs.root(), b"sparse", Kind::File, 0o644, (0, 0), 0, 0)
        .unwrap()
        .ino;
    for at in [0u64, 3 << 20, 5 << 20, 7 << 20] {
        fs.write(f, at, &[1u8; 8192], false).unwrap();
    }
    fs.sync().unwrap();
    let before = bfree(&fs);
    let cut = SetAttrs {
        size: Some(4 << 20),
        ..Default::default()
    };
    fs.setattr(f, cut).unwrap();
    let counted = bfree(&fs);
    fs.sync().unwrap();
    let freed = bfree(&fs);
    // 4 data blocks past the cut and the double indirect tree mapping
    // them (2 blocks): the figure said no more, and no less than nothing.
    assert_eq!(freed - before, 6);
    assert!(
        (before..=freed).contains(&counted),
        "{before} {counted} {freed}"
    );
    fs.unmount().unwrap();
}
