//! Images made by `mkfs` judged by outside programs: `e2fsck -fn` must exit 0,
//! `debugfs` must list lost+found, `dumpe2fs` must report the features we set,
//! and the Linux kernel must mount them (when running as root).

use std::path::{Path, PathBuf};
use std::process::Command;
use stitch_mkfs::{mkfs, JournalSize, MkfsError, MkfsOptions, Preallocate};
use stitch_testkit::{assert_e2fsck_clean, scratch};

fn make(dir: &Path, name: &str, size: u64, journal: bool) -> PathBuf {
    make_with(dir, name, size, journal, Preallocate::default())
}

fn make_with(
    dir: &Path,
    name: &str,
    size: u64,
    journal: bool,
    preallocate: Preallocate,
) -> PathBuf {
    let path = dir.join(name);
    let opts = MkfsOptions {
        size: Some(size),
        journal: journal.then_some(JournalSize::Default),
        force: false,
        preallocate,
    };
    let mut calls = 0;
    let report = mkfs(&path, &opts, &mut |done, total| {
        assert!(done <= total);
        calls += 1;
    })
    .unwrap();
    assert!(calls > 0, "progress was reported");
    assert_eq!(report.kind(), if journal { "ext3" } else { "ext2" });
    path
}

fn run(cmd: &str, args: &[&str], path: &Path) -> (i32, String) {
    let out = Command::new(cmd)
        .args(args)
        .arg(path)
        .output()
        .expect("e2fsprogs installed");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn check_clean(path: &Path, journal: bool) {
    assert_e2fsck_clean(path);
    let (code, text) = run("debugfs", &["-R", "ls -l /"], path);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("lost+found"), "debugfs ls:\n{text}");
    let (_, text) = run("dumpe2fs", &["-h"], path);
    assert_eq!(text.contains("has_journal"), journal, "{text}");
    assert!(text.contains("filetype sparse_super large_file"), "{text}");
}

#[test]
fn e2fsck_clean_64m_ext2_and_ext3() {
    let dir = scratch();
    for journal in [false, true] {
        let path = make(dir.path(), "small.img", 64 << 20, journal);
        check_clean(&path, journal);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn e2fsck_clean_1g_ext2_and_ext3() {
    let dir = scratch();
    for journal in [false, true] {
        let path = make(dir.path(), "mid.img", 1 << 30, journal);
        check_clean(&path, journal);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn e2fsck_clean_64g_sparse_ext2_and_ext3() {
    let dir = scratch();
    for journal in [false, true] {
        let path = make_with(dir.path(), "big.img", 64 << 30, journal, Preallocate::None);
        let allocated = allocated_bytes(&path);
        assert!(
            allocated < 64 << 20,
            "image is sparse: {allocated} bytes allocated"
        );
        check_clean(&path, journal);
        std::fs::remove_file(&path).unwrap();
    }
}

fn allocated_bytes(path: &Path) -> u64 {
    std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(path).unwrap()) * 512
}

/// What `--preallocate` promises of an image file: the journal's body (by
/// default), and the inode tables too (`metadata`), are allocated in the
/// host file system, not holes; with `none` the image holds only the
/// metadata mkfs wrote. Each image checks clean either way.
#[test]
fn preallocation_allocates_the_journal_and_the_inode_tables() {
    let dir = scratch();
    let size = 1u64 << 30;
    // 1 GiB: 8,192-block journal (32 MiB), 65,536 inodes of 256 bytes.
    let journal = 32u64 << 20;
    let tables = 16u64 << 20;
    for p in [
        Preallocate::None,
        Preallocate::Journal,
        Preallocate::Metadata,
    ] {
        let path = make_with(dir.path(), "pre.img", size, true, p);
        check_clean(&path, true);
        let allocated = allocated_bytes(&path);
        let (least, most) = match p {
            Preallocate::None => (0, 4 << 20),
            Preallocate::Journal => (journal, journal + (4 << 20)),
            Preallocate::Metadata => (journal + tables, journal + tables + (4 << 20)),
        };
        assert!(
            (least..most).contains(&allocated),
            "{p:?}: {allocated} bytes allocated, expected {least}..{most}"
        );
        std::fs::remove_file(&path).unwrap();
    }
    assert_eq!(
        MkfsOptions::default().preallocate,
        Preallocate::Journal,
        "the journal is written by default"
    );
}

#[test]
fn odd_sizes_are_clean() {
    let dir = scratch();
    // A short last group, and a size that is not a multiple of the block size.
    for (i, size) in [(32768 + 3000) * 4096u64, 100 * 1024 * 1024 + 1234, 9 << 20]
        .into_iter()
        .enumerate()
    {
        let path = make(dir.path(), &format!("odd{i}.img"), size, i % 2 == 0);
        check_clean(&path, i % 2 == 0);
    }
}

#[test]
fn refuses_to_overwrite_without_force() {
    let dir = scratch();
    let path = make(dir.path(), "x.img", 64 << 20, false);
    let opts = MkfsOptions {
        size: None,
        journal: None,
        force: false,
        ..Default::default()
    };
    let err = mkfs(&path, &opts, &mut |_, _| {}).unwrap_err();
    assert!(matches!(err, MkfsError::ExistingFileSystem { .. }), "{err}");
    assert!(err.to_string().contains("--force"));
    let opts = MkfsOptions {
        force: true,
        journal: Some(JournalSize::Bytes(8 << 20)),
        ..opts
    };
    let report = mkfs(&path, &opts, &mut |_, _| {}).unwrap();
    assert_eq!(report.journal_blocks, 2048);
    check_clean(&path, true);
}

#[test]
fn kernel_mounts_ext3_image() {
    if !nix_is_root() {
        println!("SKIPPED kernel_mounts_ext3_image: needs root for mount -o loop");
        return;
    }
    let dir = scratch();
    let path = make(dir.path(), "m.img", 64 << 20, true);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mount = match stitch_testkit::LoopMount::new(&path, &mnt, "ro") {
        Ok(m) => m,
        // Containers without loop devices cannot run this check at all.
        Err(err)
            if err.contains("failed to setup loop device") || err.contains("permission denied") =>
        {
            println!("SKIPPED kernel_mounts_ext3_image: {err}");
            return;
        }
        Err(err) => panic!("mount failed: {err}"),
    };
    let listed: Vec<String> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    mount.unmount();
    assert_eq!(listed, ["lost+found"]);
}

fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

#[test]
fn missing_size_creates_nothing() {
    let dir = scratch();
    let path = dir.path().join("none.img");
    let err = mkfs(&path, &MkfsOptions::default(), &mut |_, _| {}).unwrap_err();
    assert!(matches!(err, MkfsError::NoSize { .. }), "{err}");
    assert!(!path.exists());
}
