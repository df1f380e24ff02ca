//! `stitchfs mount` after an unclean soft-updates shutdown, through the
//! real binary and the kernel's FUSE. Soft updates let a crash leave group
//! summaries behind their bitmaps and resources leaked; the mount that
//! follows must check the image (nothing written), bring the summaries in
//! step and reclaim the leaks before it changes anything, say so in its
//! log, and refuse an image the checker finds damaged. So after a crash, a
//! remount, ordinary use and a clean unmount, `e2fsck -fn` must find the
//! image clean and stitchfs must mount it again.
//!
//! - The user's sequence: files made and synced, the daemon killed, the
//!   directory removed after a remount (on ext2, and on ext3 mounted in
//!   soft updates and remounted in journal mode).
//! - Crash images of a recorded soft-updates workload (the recording
//!   device's crash states that leak), each mounted, emptied, used by
//!   operations from the reference model's generator (results checked
//!   against the model), unmounted. `STITCH_UNCLEAN_IMAGES=N` runs N
//!   images instead of the default few.
//! - Corruption found at such a mount is refused, the image unchanged.
//!
//! Needs root and /dev/fuse (and `fusermount3`, from fuse3).

mod crash_support;
mod mount_support;

use mount_support::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use stitch_blockdev::record::{crash_states, Enumerate, ImageBuilder};

/// What the mount says when it checks an image left unclean.
const CHECKING: &str = "was not unmounted cleanly: checking it before mounting";
const CHECKED: &str = "checked after an unclean shutdown";

/// Kills the daemon outright (SIGKILL: nothing is written after) and
/// takes the dead mount away, as a user would.
fn kill(mut m: Mounted) {
    let mut child = m.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let out = Command::new("fusermount3")
        .args(["-u", "-z"])
        .arg(&m.mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fusermount3 -u -z: {}",
        text(&out.stderr)
    );
}

/// The user's sequence on `img`: mount with `first`, make a directory of
/// files, `stitchfs sync`, kill the daemon; remount with `second` (the
/// check must run and say what it did), remove the directory, unmount with
/// `stitchfs umount` (which judges the image with e2fsck -fn); mount once
/// more, which must not need a check.
fn crash_remount_remove(img: &Path, mnt: &Path, first: &[&str], second: &[&str]) {
    let m = Mounted::start(img, mnt, first);
    fs::create_dir(m.path("dir")).unwrap();
    for i in 0..40 {
        fs::create_dir(m.path(&format!("dir/sub{i}"))).unwrap();
        fs::write(m.path(&format!("dir/sub{i}/f")), vec![i as u8; 5000]).unwrap();
        fs::write(m.path(&format!("dir/f{i}")), b"x").unwrap();
    }
    let out = stitchfs(&["sync", m.mnt.to_str().unwrap()]);
    assert!(out.status.success(), "stitchfs sync: {}", text(&out.stderr));
    kill(m);
    let m = Mounted::start(img, mnt, second);
    let log = m.stderr();
    assert!(log.contains(CHECKING) && log.contains(CHECKED), "{log}");
    fs::remove_dir_all(m.path("dir")).unwrap();
    m.stop(Stop::Umount);
    let m = Mounted::start(img, mnt, second);
    assert!(!m.stderr().contains(CHECKING), "{}", m.stderr());
    m.stop(Stop::Umount);
}

#[test]
fn a_crash_then_a_removal_leaves_an_ext2_image_clean() {
    let (_dir, img, mnt) = fresh(false);
    crash_remount_remove(&img, &mnt, &[], &[]);
}

/// The check follows the image, not the mode: soft updates on an ext3
/// image left it unclean, and a journal-mode mount must check it too.
#[test]
fn a_soft_updates_crash_on_ext3_is_checked_by_a_journal_mount() {
    let (_dir, img, mnt) = fresh(true);
    crash_remount_remove(&img, &mnt, &["--consistency", "softupdates"], &[]);
}

/// Up to `n` crash images of seed `seed`'s workload that our checker finds
/// leaking, spread over the recording.
fn leaking_images(dir: &Path, seed: u64, n: usize) -> Vec<Vec<u8>> {
    let base = crash_support::fresh_ext2();
    let rec = crash_support::workload(base, seed);
    let (log, start) = (rec.log(), rec.base());
    let mut builder = ImageBuilder::new(&start, &log).unwrap();
    let opts = Enumerate {
        max_states: 2,
        seed,
        torn: None,
    };
    let probe = dir.join("probe.img");
    let mut leaking = Vec::new();
    for state in crash_states(&log, &opts).unwrap() {
        let image = builder.build(&state).unwrap();
        fs::write(&probe, &image).unwrap();
        let report = stitch_fsck::check(&probe, &Default::default(), &mut |_, _, _| {}).unwrap();
        assert!(
            report.only_leaks(),
            "{state:?}: not a soft-updates image:\n{report}"
        );
        if !report.is_clean() {
            leaking.push(image);
        }
    }
    let step = leaking.len().div_ceil(n).max(1);
    leaking.into_iter().step_by(step).take(n).collect()
}

/// One crash image through the mount: checked and reclaimed, emptied of
/// what the workload made, used by `ops` generated operations in a fresh
/// directory (each result the model's), unmounted clean, mounted again.
fn use_after_crash(img: &Path, mnt: &Path, seed: u64, ops: usize) {
    use stitch_model::real::RealFs;
    use stitch_model::{GenConfig, Limits, Model, Owner};
    let m = Mounted::start(img, mnt, &[]);
    assert!(m.stderr().contains(CHECKED), "{}", m.stderr());
    for e in fs::read_dir(&m.mnt).unwrap() {
        let e = e.unwrap();
        match e.file_name().to_str() {
            Some("lost+found") => {}
            _ if e.file_type().unwrap().is_dir() => fs::remove_dir_all(e.path()).unwrap(),
            _ => fs::remove_file(e.path()).unwrap(),
        }
    }
    let root = m.path("gen");
    fs::create_dir(&root).unwrap();
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    let mut model = Model::new(0o755, Owner { uid: 0, gid: 0 }, Limits::default());
    let mut real = RealFs::new(&root);
    let cfg = GenConfig {
        max_offset: 256 << 10,
        max_write: 16 << 10,
        ..GenConfig::default()
    };
    for (step, op) in stitch_model::ops(seed, ops, &cfg).iter().enumerate() {
        assert_eq!(real.apply(op), model.apply(op), "step {step}: {op:?}");
    }
    drop(real);
    m.stop(Stop::Umount);
    let m = Mounted::start(img, mnt, &[]);
    assert!(!m.stderr().contains(CHECKING), "{}", m.stderr());
    m.stop(Stop::Umount);
}

#[test]
fn crash_images_are_reclaimed_used_and_left_clean() {
    let n: usize = std::env::var("STITCH_UNCLEAN_IMAGES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let dir = scratch();
    let mnt = mountpoint(dir.path(), "mnt");
    let img = dir.path().join("crash.img");
    let mut used = 0;
    for seed in 0.. {
        for image in leaking_images(dir.path(), seed, n - used) {
            fs::write(&img, image).unwrap();
            use_after_crash(&img, &mnt, seed * 1000 + used as u64, 40);
            used += 1;
        }
        if used >= n {
            break;
        }
    }
    println!("{used} leaking crash images mounted, used and left clean");
}

/// An image left unclean whose check finds corruption (an entry naming a
/// free inode) is refused with the finding named, and left unchanged.
#[test]
fn corruption_found_after_an_unclean_shutdown_is_refused() {
    let (_dir, img, mnt) = fresh(false);
    let dangling = ["ln <20> /dangling", "ssv state 0"];
    stitch_testkit::damaged::debugfs_w(&img, &dangling);
    let before = stitch_testkit::damaged::digest(&img);
    let err = mount_refused(&img, &mnt, &["-f"]);
    for says in [
        "was not unmounted cleanly and is damaged",
        "names unused inode 20",
        "e2fsck -f",
    ] {
        assert!(err.contains(says), "{says:?} not in: {err}");
    }
    assert!(!is_mounted(&mnt));
    assert_eq!(
        stitch_testkit::damaged::digest(&img),
        before,
        "the image changed"
    );
}
