//! The `stitchfs` binary end to end: each subcommand a user runs today,
//! through the real executable, checking exit codes and output.

mod mount_support;

use mount_support::stitchfs;
use std::process::Command;
use stitch_testkit::{assert_e2fsck_clean, scratch};

#[test]
fn mkfs_then_fsck_is_clean_and_e2fsck_agrees() {
    let dir = scratch();
    for (name, journal) in [("ext2.img", false), ("ext3.img", true)] {
        let img = dir.path().join(name);
        let img_s = img.to_str().unwrap();
        let mut args = vec!["mkfs", "--size", "64M"];
        if journal {
            args.push("--journal");
        }
        args.push(img_s);
        let out = stitchfs(&args);
        assert!(
            out.status.success(),
            "mkfs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = stitchfs(&["fsck", img_s]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "fsck: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_e2fsck_clean(&img);
    }
}

#[test]
fn mkfs_refuses_to_overwrite_a_file_system_without_force() {
    let dir = scratch();
    let img = dir.path().join("fs.img");
    let img_s = img.to_str().unwrap();
    assert!(stitchfs(&["mkfs", "--size", "64M", img_s]).status.success());
    let again = stitchfs(&["mkfs", "--size", "64M", img_s]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert!(stitchfs(&["mkfs", "--size", "64M", "--force", img_s])
        .status
        .success());
}

/// `--preallocate` reaches mkfs: by default the journal's 16 MiB body (a
/// 256 MiB image's journal) is written into the image file, `none` leaves it
/// as holes, and a value mkfs does not know is refused.
#[test]
fn mkfs_preallocates_the_journal_unless_told_not_to() {
    use std::os::unix::fs::MetadataExt;
    let dir = scratch();
    let img = dir.path().join("fs.img");
    let img_s = img.to_str().unwrap();
    let allocated = |args: &[&str]| {
        let out = stitchfs(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bytes = std::fs::metadata(&img).unwrap().blocks() * 512;
        std::fs::remove_file(&img).unwrap();
        bytes
    };
    let journal = 16u64 << 20;
    let by_default = allocated(&["mkfs", "--size", "256M", "--journal", img_s]);
    assert!(by_default >= journal, "{by_default} bytes allocated");
    let none = allocated(&[
        "mkfs",
        "--size",
        "256M",
        "--journal",
        "--preallocate",
        "none",
        img_s,
    ]);
    assert!(none < journal / 2, "{none} bytes allocated with none");
    let bad = stitchfs(&["mkfs", "--size", "256M", "--preallocate", "all", img_s]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("metadata"));
}

#[test]
fn fsck_reports_damage_with_a_nonzero_exit_and_json() {
    let dir = scratch();
    let img = dir.path().join("fs.img");
    let img_s = img.to_str().unwrap();
    assert!(stitchfs(&["mkfs", "--size", "64M", img_s]).status.success());
    // Mark inode 20 used in the bitmap though nothing references it: a leak.
    let dbg = Command::new("debugfs")
        .args(["-w", "-R", "seti <20>", img_s])
        .output()
        .unwrap();
    assert!(dbg.status.success());
    let out = stitchfs(&["fsck", "--json", img_s]);
    assert_eq!(out.status.code(), Some(4));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = report.to_string();
    assert!(text.contains("leak"), "{text}");
}

#[test]
fn fsck_of_a_missing_or_garbage_image_is_an_error_not_a_panic() {
    let dir = scratch();
    let junk = dir.path().join("junk.img");
    std::fs::write(&junk, vec![0xa5u8; 1 << 20]).unwrap();
    for path in [junk.to_str().unwrap(), "/nonexistent/image"] {
        let out = stitchfs(&["fsck", path]);
        assert_eq!(
            out.status.code(),
            Some(8),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
    // A missing image is named once, by every way of checking it, and
    // exits 8 (the check could not run).
    let missing = "/nonexistent/image";
    for args in [
        &["fsck", missing][..],
        &["fsck", "--recover", missing],
        &["fsck", "--repair-leaks", missing],
    ] {
        let out = stitchfs(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(8), "{args:?}: {err}");
        assert_eq!(err.matches(missing).count(), 1, "{args:?}: {err}");
        assert!(err.contains("No such file or directory"), "{args:?}: {err}");
    }
}

#[test]
fn bench_optimizations_quick_prints_its_table() {
    let out = stitchfs(&[
        "bench",
        "optimizations",
        "--quick",
        "--workload",
        "delete",
        "--setting",
        "both",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("| delete | both |"), "{text}");
}

#[test]
fn bench_modes_quick_prints_every_mode_and_the_goals() {
    // The crate's own sources: a small tree that is always there.
    let tree = env!("CARGO_MANIFEST_DIR");
    let out = stitchfs(&["bench", "modes", "--quick", "--tree", tree]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for row in [
        "| untar | async |",
        "| delete | soft updates |",
        "| postmark | data=ordered |",
        "| fsync | data=journal |",
    ] {
        assert!(text.contains(row), "{row} missing:\n{text}");
    }
    assert!(text.contains("Goals:"), "{text}");
}
