//! `stitchfs mount` refuses a damaged image before writing a byte, through
//! the real binary: every image of the damaged corpus
//! (`stitch_testkit::damaged`) is mounted in the foreground, and a few as
//! a daemon too (the parent must fail with the child's message, the image
//! still untouched: the daemon checks before it writes, and its parent
//! writes nothing). The refusal must name the problem, say nothing was
//! written, point a damaged image to e2fsck and stitchfs fsck, leave no
//! mount behind, and leave the image's digest as it was.
//!
//! Needs root and /dev/fuse (and `fusermount3`, from fuse3).

mod mount_support;

use mount_support::*;
use stitch_testkit::damaged::{self, Damage};

/// Mounts the damaged image of `d` (foreground, or as a daemon), which
/// must be refused as the module says.
fn refused(d: &Damage, daemon: bool) {
    let dir = scratch();
    let mnt = mountpoint(dir.path(), "mnt");
    let img = dir.path().join("damaged.img");
    damaged::base_image(&img, d.journal);
    (d.apply)(&img);
    let before = damaged::digest(&img);
    let extra: &[&str] = if daemon { &[] } else { &["-f"] };
    let err = mount_refused(&img, &mnt, extra);
    let how = if daemon { "daemon" } else { "foreground" };
    assert!(
        err.contains(d.says),
        "{} ({how}): the refusal does not name the problem\n  want: {}\n  got:  {err}",
        d.name,
        d.says
    );
    assert!(
        err.contains("nothing was written"),
        "{} ({how}): {err}",
        d.name
    );
    if err.contains("is damaged") {
        assert!(
            err.contains("e2fsck -fn") && err.contains("stitchfs fsck"),
            "{} ({how}): no pointer to the repair tools: {err}",
            d.name
        );
    }
    assert_eq!(
        damaged::digest(&img),
        before,
        "{} ({how}): the refused image was changed",
        d.name
    );
}

#[test]
fn every_damaged_image_is_refused_in_the_foreground() {
    for d in &damaged::corpus() {
        refused(d, false);
    }
}

/// The daemon path: the parent forks before the image is opened; the
/// child's refusal must reach the parent's stderr and exit code.
#[test]
fn a_daemon_refuses_before_it_writes() {
    let picked = [
        "root is a regular file",
        "image shorter than its block count",
        "descriptor block zeroed",
        "journal replaying zeros over the descriptors",
    ];
    let corpus = damaged::corpus();
    for name in picked {
        let d = corpus.iter().find(|d| d.name == name).unwrap();
        refused(d, true);
    }
}
