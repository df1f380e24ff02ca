//! `stitchfs fsck --repair-leaks` on real soft-updates crash images: a diskfs
//! workload (creates, writes, unlinks, directory moves, files unlinked while
//! open) runs on the recording device; every crash image that our checker
//! finds leaking is repaired by the binary, after which `e2fsck -fn` must
//! find it clean. Corruption would be refused; there is none to find.

mod crash_support;

use crash_support::{fresh_ext2, workload, NOW};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::process::Command;
use std::sync::Arc;
use stitch_blockdev::record::{crash_states, Enumerate, ImageBuilder};
use stitch_blockdev::{MemDevice, RecordingDevice};
use stitch_diskfs::{Consistency, DiskFs};

/// `stitchfs fsck --repair-leaks` on `img` must succeed and leave it clean
/// to `e2fsck -fn`.
fn repair_to_clean(img: &std::path::Path, what: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_stitchfs"))
        .args(["fsck", "--repair-leaks"])
        .arg(img)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let e2 = stitch_testkit::e2fsck(img, &["-fn"]);
    assert!(e2.clean(), "{what}: after repair:\n{}", e2.stdout);
    let ours = stitch_fsck::check(img, &Default::default(), &mut |_, _, _| {}).unwrap();
    assert!(ours.findings.is_empty(), "{what}: after repair:\n{ours}");
}

#[test]
fn every_leaking_crash_image_is_repaired_until_e2fsck_is_clean() {
    let tmp = stitch_testkit::scratch();
    let base = fresh_ext2();
    let img = tmp.path().join("crash.img");
    let (mut images, mut repaired) = (0, 0);
    for seed in 0..3 {
        let rec = workload(base.clone(), seed);
        let (log, start) = (rec.log(), rec.base());
        let mut builder = ImageBuilder::new(&start, &log).unwrap();
        for (n, state) in crash_states(
            &log,
            &Enumerate {
                max_states: 4,
                seed,
                torn: None,
            },
        )
        .unwrap()
        .enumerate()
        {
            if n % 3 != 0 {
                continue;
            }
            std::fs::write(&img, builder.build(&state).unwrap()).unwrap();
            images += 1;
            let report = stitch_fsck::check(&img, &Default::default(), &mut |_, _, _| {}).unwrap();
            if report.is_clean() {
                continue;
            }
            assert!(
                report.only_leaks(),
                "seed {seed} {state:?}: not a soft-updates image:\n{report}"
            );
            repair_to_clean(&img, &format!("seed {seed} {state:?}"));
            repaired += 1;
        }
    }
    println!("{images} crash images checked, {repaired} repaired to clean");
    assert!(
        repaired >= 10,
        "too few leaking images to show the repair: {repaired}"
    );
}

#[test]
fn repair_refuses_corruption_and_changes_nothing() {
    let tmp = stitch_testkit::scratch();
    let img = tmp.path().join("bad.img");
    stitch_testkit::mkfs(&img, 16 << 20, None);
    // A directory entry naming a free inode: corruption, not a leak.
    let dbg = Command::new("debugfs")
        .args(["-w", "-R", "ln <20> /dangling"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(dbg.status.success());
    let before = std::fs::read(&img).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stitchfs"))
        .args(["fsck", "--repair-leaks"])
        .arg(&img)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("leaks only"));
    assert!(
        std::fs::read(&img).unwrap() == before,
        "the image was changed"
    );
}

/// A soft-updates crash while deleting files that share a kernel-written
/// extended-attribute block can leave its reference count too high; the
/// repair brings it down to the inodes naming it.
#[test]
fn an_attribute_count_left_too_high_is_repaired() {
    if !stitch_testkit::is_root() {
        println!("SKIPPED: needs root for mount -o loop");
        return;
    }
    let tmp = stitch_testkit::scratch();
    let base = stitch_testkit::kernel_xattr_image(tmp.path(), "ext2");
    let mem = MemDevice::from_image(4096, base.clone()).unwrap();
    let rec = Arc::new(RecordingDevice::with_base(mem, base).unwrap());
    let mut fs = DiskFs::mount(rec.clone(), Consistency::SoftUpdates, NOW).unwrap();
    let root = fs.root();
    for n in ["a", "b"] {
        fs.unlink(root, n.as_bytes(), NOW).unwrap();
        fs.modes_mut().cache_mut().write_round(2).unwrap();
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
    let img = tmp.path().join("crash.img");
    let mut repaired = 0;
    for state in crash_states(&log, &opts).unwrap() {
        std::fs::write(&img, builder.build(&state).unwrap()).unwrap();
        let report = stitch_fsck::check(&img, &Default::default(), &mut |_, _, _| {}).unwrap();
        let high = report.findings.iter().any(|f| {
            matches!(f.kind, stitch_fsck::FindingKind::XattrRefcountWrong { refcount, should_be, .. } if refcount > should_be)
        });
        if !high {
            continue;
        }
        repair_to_clean(&img, &format!("{state:?}"));
        repaired += 1;
    }
    println!("{repaired} crash images with an attribute count too high, repaired");
    assert!(repaired > 0, "no crash image left a count too high");
}

/// A directory growing past its twelve direct blocks in soft updates: the
/// pointer to a new block sits in an indirect block and the size in the
/// inode, so a crash between their writes leaves the block past the size.
/// Every crash image must show only leaks, and those must repair to clean
/// (the size extended over the block, as e2fsck would).
#[test]
fn a_directory_grown_through_its_indirect_block_is_repaired() {
    let tmp = stitch_testkit::scratch();
    let base = fresh_ext2();
    let mem = MemDevice::from_image(4096, base.clone()).unwrap();
    let rec = Arc::new(RecordingDevice::with_base(mem, base).unwrap());
    let mut fs = DiskFs::mount(rec.clone(), Consistency::SoftUpdates, NOW).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let (d, _) = fs.mkdir(fs.root(), b"d", 0o755, 0, 0, NOW).unwrap();
    // 36-byte names, 44 bytes an entry: the twelfth block fills at about
    // 1,100 entries.
    for i in 0..1450 {
        let name = format!("a-rather-long-file-name-number-{i:05}");
        fs.create(d, name.as_bytes(), 0o644, 0, 0, NOW).unwrap();
        if i >= 1100 {
            let cache = fs.modes_mut().cache_mut();
            cache.write_round(rng.gen_range(1..6)).unwrap();
            if rng.gen_bool(0.5) {
                cache.flush().unwrap();
            }
        }
    }
    fs.sync().unwrap();
    assert!(fs.getattr(d).unwrap().size > 12 * 4096);
    let (log, start) = (rec.log(), rec.base());
    let mut builder = ImageBuilder::new(&start, &log).unwrap();
    let img = tmp.path().join("crash.img");
    let (mut images, mut short) = (0, 0);
    let enumerate = Enumerate {
        max_states: 4,
        seed: 0,
        torn: None,
    };
    for state in crash_states(&log, &enumerate).unwrap() {
        std::fs::write(&img, builder.build(&state).unwrap()).unwrap();
        images += 1;
        let report = stitch_fsck::check(&img, &Default::default(), &mut |_, _, _| {}).unwrap();
        assert!(
            report.is_clean() || report.only_leaks(),
            "{state:?}:\n{report}"
        );
        let past = report.findings.iter().any(|f| {
            matches!(
                f.kind,
                stitch_fsck::FindingKind::BadSize {
                    dir_blocks_past_size: true,
                    ..
                }
            )
        });
        if past && short < 5 {
            repair_to_clean(&img, &format!("{state:?}"));
            short += 1;
        }
    }
    println!("{images} crash images, {short} with the directory short repaired");
    assert!(short > 0, "no crash left the directory short of its block");
}
