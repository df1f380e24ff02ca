//! Files the kernel gave extended attributes (stitchfs writes none): when
//! stitchfs deletes them it frees an attribute block only its file used,
//! drops the reference count of a shared one, and never lets the count
//! fall below the inodes naming the block, even in a crash; a file it
//! makes in a slot the kernel freed does not inherit the attributes left
//! there. Needs root (the kernel mounts the image to set the attributes).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use stitch_blockdev::record::{crash_states, Enumerate, ImageBuilder};
use stitch_blockdev::{MemDevice, RecordingDevice};
use stitch_diskfs::{Consistency, DataMode, DiskFs};
use stitch_format::xattr::XattrHeader;
use stitch_patch::{CacheConfig, PatchCache};

mod common;
use common::NOW;

/// The attribute block `debugfs` reports for `/name`.
fn acl_block(image: &Path, name: &str) -> u32 {
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(format!("stat /{name}"))
        .arg(image)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let at = text
        .find("File ACL: ")
        .expect("debugfs stat shows File ACL");
    text[at + 10..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn block_in_use(image: &Path, b: u32) -> bool {
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(format!("testb {b}"))
        .arg(image)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("marked in use") || text.contains("not in use"),
        "{text}"
    );
    !text.contains("not in use")
}

fn refcount(image: &[u8], b: u32) -> u32 {
    let at = b as usize * 4096;
    XattrHeader::parse(&image[at..at + 4096]).unwrap().refcount
}

/// `e2fsck -fn`'s exit code and output, and whether our fsck is clean.
fn judges(path: &Path) -> (i32, String, stitch_fsck::Report) {
    let out = Command::new("e2fsck")
        .arg("-fn")
        .arg(path)
        .output()
        .unwrap();
    let report = stitch_fsck::check(path, &Default::default(), &mut |_, _, _| {}).unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        report,
    )
}

/// A scratch directory, or None (and a note) when not root: the kernel
/// must mount the images to give files attributes.
fn root_tmp() -> Option<tempfile::TempDir> {
    if !stitch_testkit::is_root() {
        println!("SKIPPED: needs root for mount -o loop");
        return None;
    }
    Some(tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap())
}

/// Fails unless `e2fsck -fn` and our fsck both find `path` clean.
fn assert_clean(path: &Path, what: &str) {
    let (code, out, ours) = judges(path);
    assert_eq!(code, 0, "{what}: e2fsck:\n{out}");
    assert!(ours.is_clean(), "{what}: our fsck:\n{ours}");
}

fn unlink_all(image: Vec<u8>, mode: Consistency, names: &[&str]) -> Vec<u8> {
    let (dev, mut fs) = common::mount(image, mode);
    let root = fs.root();
    for n in names {
        fs.unlink(root, n.as_bytes(), NOW).unwrap();
    }
    fs.unmount(NOW).unwrap();
    dev.snapshot()
}

#[test]
fn deleting_files_frees_or_releases_their_attribute_blocks() {
    let Some(tmp) = root_tmp() else { return };
    for (ext, mode) in [
        ("ext2", Consistency::SoftUpdates),
        ("ext2", Consistency::Async),
        ("ext3", Consistency::Journal(DataMode::Ordered)),
    ] {
        let image = stitch_testkit::kernel_xattr_image(tmp.path(), ext);
        let path = tmp.path().join("ours.img");
        std::fs::write(&path, &image).unwrap();
        let shared = acl_block(&path, "a");
        let own = acl_block(&path, "c");
        assert!(shared != 0 && own != 0 && shared != own);
        assert_eq!(
            [acl_block(&path, "b"), acl_block(&path, "d")],
            [shared, shared]
        );
        assert_eq!((refcount(&image, shared), refcount(&image, own)), (3, 1));
        let clean = |image: &[u8], when: &str| {
            std::fs::write(&path, image).unwrap();
            assert_clean(&path, &format!("{mode} {when}"));
        };
        clean(&image, "before");

        // One user of the shared block and the only user of the other go.
        let image = unlink_all(image, mode, &["a", "c"]);
        clean(&image, "after unlinking a and c");
        assert_eq!(refcount(&image, shared), 2, "{mode}");
        assert!(!block_in_use(&path, own), "{mode}: c's block still in use");
        assert!(block_in_use(&path, shared), "{mode}");

        // The last users of the shared block go.
        let image = unlink_all(image, mode, &["b", "d"]);
        clean(&image, "after unlinking b and d");
        assert!(
            !block_in_use(&path, shared),
            "{mode}: shared block still in use"
        );
    }
}

/// Soft updates: every crash image of unlinking a sharer and the sole
/// user leaves the shared count at or above its users (a leak at worst).
#[test]
fn a_crash_never_leaves_an_attribute_count_too_low() {
    let Some(tmp) = root_tmp() else { return };
    let base = stitch_testkit::kernel_xattr_image(tmp.path(), "ext2");
    let mem = MemDevice::from_image(4096, base.clone()).unwrap();
    let rec = Arc::new(RecordingDevice::with_base(mem, base).unwrap());
    let cache = PatchCache::new(rec.clone(), CacheConfig::default());
    let mut fs = DiskFs::mount(cache, Consistency::SoftUpdates, NOW).unwrap();
    let root = fs.root();
    for n in ["a", "c", "b"] {
        fs.unlink(root, n.as_bytes(), NOW).unwrap();
        // A little write-back between, so the states interleave.
        fs.modes_mut().cache_mut().write_round(3).unwrap();
        fs.modes_mut().cache_mut().flush().unwrap();
    }
    fs.unmount(NOW).unwrap();
    let (log, start) = (rec.log(), rec.base());
    let mut builder = ImageBuilder::new(&start, &log).unwrap();
    let opts = Enumerate {
        max_states: 64,
        seed: 1,
        torn: None,
    };
    let path = tmp.path().join("crash.img");
    let (mut images, mut leaky) = (0, 0);
    for state in crash_states(&log, &opts).unwrap() {
        let image = builder.build(&state).unwrap();
        std::fs::write(&path, &image).unwrap();
        let (code, out, ours) = judges(&path);
        assert!(
            ours.is_clean() || ours.only_leaks(),
            "{state:?}: corruption:\n{ours}"
        );
        assert!(
            !out.contains("has reference count") || ours.findings.iter().any(|f| matches!(f.kind, stitch_fsck::FindingKind::XattrRefcountWrong { refcount, should_be, .. } if refcount > should_be)),
            "{state:?}: e2fsck sees a count our fsck does not call high:\n{out}\n{ours}"
        );
        assert!(
            matches!(code, 0 | 4),
            "{state:?}: e2fsck exit {code}:\n{out}"
        );
        images += 1;
        leaky += usize::from(!ours.is_clean());
    }
    println!("{images} crash images, {leaky} with leaks only");
    assert!(images > 10, "too few crash images: {images}");
}

/// What `debugfs ea_list` shows for `/name` (empty: no attributes).
fn attributes(image: &Path, name: &str) -> String {
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(format!("ea_list /{name}"))
        .arg(image)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn new_inodes_do_not_inherit_attributes_left_in_their_slots() {
    let Some(tmp) = root_tmp() else { return };
    for (ext, mode) in [
        ("ext2", Consistency::SoftUpdates),
        ("ext3", Consistency::Journal(DataMode::Ordered)),
    ] {
        let (image, freed) = stitch_testkit::kernel_freed_xattr_slots(tmp.path(), ext, 4);
        let (dev, mut fs) = common::mount(image, mode);
        let root = fs.root();
        let made = [
            fs.create(root, b"file", 0o644, 0, 0, NOW).unwrap().0,
            fs.mkdir(root, b"dir", 0o755, 0, 0, NOW).unwrap().0,
            fs.symlink(root, b"link", b"file", 0, 0, NOW).unwrap().0,
            fs.mknod(
                root,
                b"fifo",
                stitch_diskfs::Special::Fifo,
                0o644,
                0,
                0,
                NOW,
            )
            .unwrap()
            .0,
        ];
        fs.unmount(NOW).unwrap();
        let path = tmp.path().join("reused.img");
        std::fs::write(&path, dev.snapshot()).unwrap();
        for ((name, ino), want) in ["file", "dir", "link", "fifo"].iter().zip(made).zip(&freed) {
            // The test means something only if each new inode took a slot
            // the kernel freed.
            assert!(
                freed.contains(&ino.0),
                "{ext}: {name} is inode {}, not one of {freed:?} ({want})",
                ino.0
            );
            assert_eq!(
                attributes(&path, name),
                "",
                "{ext} {mode}: /{name} (inode {})",
                ino.0
            );
        }
        assert_clean(&path, &format!("{ext} {mode}"));
    }
}
