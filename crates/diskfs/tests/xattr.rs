//! Extended attributes, on images the kernel gave some: the sets diskfs
//! writes are clean and the kernel's to read, a crash shows a file's old
//! set or its new one; when stitchfs deletes files it frees an attribute
//! block only its file used,
//! drops the reference count of a shared one, and never lets the count
//! fall below the inodes naming the block, even in a crash; a file it
//! makes in a slot the kernel freed does not inherit the attributes left
//! there. Needs root (the kernel mounts the image to set the attributes).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use stitch_blockdev::record::{crash_states, CrashState, Enumerate, ImageBuilder};
use stitch_blockdev::{MemDevice, RecordingDevice};
use stitch_diskfs::{Consistency, DataMode, DiskFs};
use stitch_format::xattr::{Xattr, XattrHeader};

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
    let e2 = stitch_testkit::e2fsck(path, &["-fn"]);
    let report = stitch_fsck::check(path, &Default::default(), &mut |_, _, _| {}).unwrap();
    (e2.code, e2.stdout, report)
}

/// A scratch directory, or None (and a note) when not root: the kernel
/// must mount the images to give files attributes.
fn root_tmp() -> Option<tempfile::TempDir> {
    if !stitch_testkit::is_root() {
        println!("SKIPPED: needs root for mount -o loop");
        return None;
    }
    Some(stitch_testkit::scratch())
}

/// Fails unless `e2fsck -fn` and our fsck both find `path` clean.
fn assert_clean(path: &Path, what: &str) {
    let (code, out, ours) = judges(path);
    assert_eq!(code, 0, "{what}: e2fsck:\n{out}");
    assert!(ours.is_clean(), "{what}: our fsck:\n{ours}");
}

/// The kernel's attribute image (ext2 for soft updates, ext3 for the
/// journal) mounted in `mode` over a recording device.
fn recorded(dir: &Path, mode: Consistency) -> (Arc<RecordingDevice<MemDevice>>, DiskFs) {
    let ext = if matches!(mode, Consistency::Journal(_)) {
        "ext3"
    } else {
        "ext2"
    };
    let base = stitch_testkit::kernel_xattr_image(dir, ext);
    let mem = MemDevice::from_image(4096, base.clone()).unwrap();
    let rec = Arc::new(RecordingDevice::with_base(mem, base).unwrap());
    (rec.clone(), DiskFs::mount(rec.clone(), mode, NOW).unwrap())
}

/// Builds up to 64 crash images of what `rec` recorded in `mode`
/// (enumeration `seed`) and judges each: in soft updates as it stands,
/// leaks at worst (our fsck) and e2fsck exiting 0 or 4; in journal mode
/// after stitchfs recovers it, clean for both. Hands `check` the judged
/// image with e2fsck's output and our report, and returns how many there
/// were (failing under 11).
fn each_crash_image(
    rec: &RecordingDevice<MemDevice>,
    mode: Consistency,
    seed: u64,
    dir: &Path,
    mut check: impl FnMut(&CrashState, Vec<u8>, &str, &stitch_fsck::Report),
) -> usize {
    let (log, start) = (rec.log(), rec.base());
    let mut builder = ImageBuilder::new(&start, &log).unwrap();
    let opts = Enumerate {
        max_states: 64,
        seed,
        torn: None,
    };
    let path = dir.join("crash.img");
    let journal = matches!(mode, Consistency::Journal(_));
    let mut images = 0;
    for state in crash_states(&log, &opts).unwrap() {
        let mut image = builder.build(&state).unwrap();
        if journal {
            let (dev, fs) = common::mount(image, mode);
            fs.unmount(NOW).unwrap();
            image = dev.snapshot();
        }
        std::fs::write(&path, &image).unwrap();
        let (code, out, ours) = judges(&path);
        assert!(
            ours.is_clean() || (!journal && ours.only_leaks()),
            "{state:?}: {mode}:\n{ours}"
        );
        assert!(
            code == 0 || (!journal && code == 4),
            "{state:?}: {mode}: e2fsck exit {code}:\n{out}"
        );
        check(&state, image, &out, &ours);
        images += 1;
    }
    assert!(images > 10, "too few crash images: {images}");
    images
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
    let (rec, mut fs) = recorded(tmp.path(), Consistency::SoftUpdates);
    let root = fs.root();
    for n in ["a", "c", "b"] {
        fs.unlink(root, n.as_bytes(), NOW).unwrap();
        // A little write-back between, so the states interleave.
        fs.modes_mut().cache_mut().write_round(3).unwrap();
        fs.modes_mut().cache_mut().flush().unwrap();
    }
    fs.unmount(NOW).unwrap();
    let mut leaky = 0;
    let images = each_crash_image(
        &rec,
        Consistency::SoftUpdates,
        1,
        tmp.path(),
        |state, _, out, ours| {
            assert!(
            !out.contains("has reference count") || ours.findings.iter().any(|f| matches!(f.kind, stitch_fsck::FindingKind::XattrRefcountWrong { refcount, should_be, .. } if refcount > should_be)),
            "{state:?}: e2fsck sees a count our fsck does not call high:\n{out}\n{ours}"
        );
            leaky += usize::from(!ours.is_clean());
        },
    );
    println!("{images} crash images, {leaky} with leaks only");
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
                stitch_diskfs::Owner::default(),
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

fn set(full: &str, value: &[u8]) -> Xattr {
    Xattr::named(full.as_bytes(), value.to_vec()).unwrap()
}

/// The attributes of `/name` as the kernel reads them (`getfattr`-like,
/// through a loop mount), sorted.
fn kernel_attributes(image: &Path, dir: &Path, names: &[&str]) -> Vec<Vec<(String, Vec<u8>)>> {
    let m = stitch_testkit::LoopMount::new(image, &dir.join("check-mnt"), "ro")
        .unwrap_or_else(|e| panic!("{e}"));
    let out = names
        .iter()
        .map(|n| stitch_testkit::all_xattrs(&m.path().join(n)))
        .collect();
    m.unmount();
    out
}

/// Sets, replaces, shares and removes attribute sets in every mode: the
/// images are clean for e2fsck and our fsck, and the kernel reads back
/// exactly the sets diskfs wrote (so blocks, entries and hashes are ext2's).
#[test]
fn attribute_sets_written_are_the_kernels_to_read() {
    let Some(tmp) = root_tmp() else { return };
    for (ext, mode) in [
        ("ext2", Consistency::SoftUpdates),
        ("ext2", Consistency::Async),
        ("ext3", Consistency::Journal(DataMode::Ordered)),
        ("ext3", Consistency::Journal(DataMode::Journal)),
    ] {
        // a, b, d share a kernel-made block; c has its own.
        let image = stitch_testkit::kernel_xattr_image(tmp.path(), ext);
        let (dev, mut fs) = common::mount(image, mode);
        let root = fs.root();
        let ino = |fs: &mut DiskFs, n: &str| fs.lookup(root, n.as_bytes()).unwrap().unwrap().ino;
        let (a, c) = (ino(&mut fs, "a"), ino(&mut fs, "c"));
        let (e, _) = fs.create(root, b"e", 0o644, 0, 0, NOW).unwrap();
        // A new file gets a set; a sharer of the kernel's block gets its
        // own; the sole user of a block replaces it; removing all.
        let big = vec![b'v'; 1500];
        fs.set_xattrs(
            e,
            &[
                set("user.one", b"1"),
                set("security.s", &big),
                set("trusted.t", b""),
            ],
            NOW,
        )
        .unwrap();
        fs.set_xattrs(a, &[set("user.k", b"mine")], NOW).unwrap();
        fs.set_xattrs(c, &[set("user.k", b"own"), set("user.more", b"m")], NOW)
            .unwrap();
        assert!(fs
            .set_xattrs(c, &[set("user.huge", &vec![0; 4096])], NOW)
            .is_err());
        let d = ino(&mut fs, "d");
        fs.set_xattrs(d, &[], NOW).unwrap();
        assert_eq!(fs.xattrs(e).unwrap().len(), 3);
        fs.unmount(NOW).unwrap();
        let path = tmp.path().join("set.img");
        std::fs::write(&path, dev.snapshot()).unwrap();
        assert_clean(&path, &format!("{ext} {mode}"));
        let got = kernel_attributes(&path, tmp.path(), &["a", "b", "c", "d", "e"]);
        let kv = |pairs: &[(&str, &[u8])]| -> Vec<(String, Vec<u8>)> {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_vec()))
                .collect()
        };
        assert_eq!(got[0], kv(&[("user.k", b"mine")]), "{mode} a");
        assert_eq!(got[1], kv(&[("user.k", b"shared")]), "{mode} b");
        assert_eq!(
            got[2],
            kv(&[("user.k", b"own"), ("user.more", b"m")]),
            "{mode} c"
        );
        assert_eq!(got[3], kv(&[]), "{mode} d");
        assert_eq!(
            got[4],
            kv(&[("security.s", &big), ("trusted.t", b""), ("user.one", b"1")]),
            "{mode} e"
        );
    }
}

/// In every crash image of replacing attribute sets (soft updates, and
/// the journal after recovery), each file has its old set or its new one,
/// and nothing worse than leaks (none at all with the journal).
#[test]
fn a_crash_leaves_the_old_attribute_set_or_the_new_one() {
    let Some(tmp) = root_tmp() else { return };
    for mode in [
        Consistency::SoftUpdates,
        Consistency::Journal(DataMode::Ordered),
    ] {
        let (rec, mut fs) = recorded(tmp.path(), mode);
        let root = fs.root();
        let a = fs.lookup(root, b"a").unwrap().unwrap().ino;
        let c = fs.lookup(root, b"c").unwrap().unwrap().ino;
        let steps: [(stitch_diskfs::InodeNo, Vec<Xattr>); 4] = [
            (a, vec![set("user.k", b"first")]),
            (c, vec![set("user.k", b"second"), set("user.x", b"x")]),
            (a, vec![set("user.k", b"third")]),
            (c, vec![]),
        ];
        for (ino, attrs) in &steps {
            fs.set_xattrs(*ino, attrs, NOW).unwrap();
            // One transaction per step with the journal; some write-back
            // between steps in soft updates.
            if matches!(mode, Consistency::Journal(_)) {
                fs.modes_mut().commit().unwrap();
            } else {
                fs.modes_mut().cache_mut().write_round(2).unwrap();
            }
        }
        fs.unmount(NOW).unwrap();
        // What each file may show: any set it had, in order.
        let history = |ino| {
            let mut h = vec![vec![set(
                "user.k",
                if ino == a { b"shared" } else { b"own" },
            )]];
            h.extend(
                steps
                    .iter()
                    .filter(|(i, _)| *i == ino)
                    .map(|(_, s)| s.clone()),
            );
            h
        };
        let images = each_crash_image(&rec, mode, 2, tmp.path(), |state, image, _, _| {
            let (_, mut fs) = common::mount(image, mode);
            for ino in [a, c] {
                let now = fs.xattrs(ino).unwrap();
                assert!(
                    history(ino).contains(&now),
                    "{state:?}: {mode}: inode {ino} has {now:?}"
                );
            }
        });
        println!("{mode}: {images} crash images");
    }
}
