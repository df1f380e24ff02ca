//! A group summary never wraps: a descriptor whose count disagrees with its
//! bitmap (set so by debugfs on a clean image, as a soft-updates crash
//! once left them when nothing recounted) makes the free that would take
//! it out of bounds fail with the count named, and stops every write, so
//! nothing more reaches the device.

use stitch_diskfs::{Consistency, Damage, DiskError, DiskFs};
use stitch_patch::PatchError;

mod common;
use common::NOW;

/// A fresh image holding `/d` and `/f`, with `set_bg 0 FIELD VALUE`
/// applied by debugfs after a clean unmount.
fn image_with(dir: &std::path::Path, field: &str, value: u32) -> Vec<u8> {
    let (dev, mut fs) = common::mount(
        stitch_testkit::fresh_image(16 << 20, None),
        Consistency::SoftUpdates,
    );
    let root = fs.root();
    fs.mkdir(root, b"d", 0o755, 0, 0, NOW).unwrap();
    fs.create(root, b"f", 0o644, 0, 0, NOW).unwrap();
    fs.unmount(NOW).unwrap();
    let path = dir.join("counts.img");
    std::fs::write(&path, dev.snapshot()).unwrap();
    let set = format!("set_bg 0 {field} {value}");
    stitch_testkit::damaged::debugfs_w(&path, &[&set]);
    std::fs::read(&path).unwrap()
}

/// Runs `op` on the mounted image: it must fail with a count error naming
/// `says`, and the device must hold what it held after mount, even after
/// a sync is asked for.
fn fails_and_stops(
    image: Vec<u8>,
    says: &str,
    op: impl FnOnce(&mut DiskFs) -> stitch_diskfs::Result<()>,
) {
    let (dev, mut fs) = common::mount(image, Consistency::SoftUpdates);
    let mounted = dev.snapshot();
    let err = op(&mut fs).expect_err("the count went out of bounds");
    assert!(
        matches!(&err, DiskError::Damaged(Damage::Count(why)) if why.contains(says)),
        "{err}"
    );
    assert!(err.is_damage());
    assert!(matches!(
        fs.sync(),
        Err(DiskError::Patch(PatchError::Stopped { .. }))
    ));
    assert!(
        dev.snapshot() == mounted,
        "the device was written after the error"
    );
}

#[test]
fn a_directory_count_never_goes_below_zero() {
    let tmp = stitch_testkit::scratch();
    let image = image_with(tmp.path(), "used_dirs_count", 0);
    fails_and_stops(
        image,
        "group 0's directory count 0 cannot move by -1",
        |fs| fs.rmdir(fs.root(), b"d", NOW).map(drop),
    );
}

#[test]
fn a_free_count_never_passes_what_the_group_holds() {
    let tmp = stitch_testkit::scratch();
    let ipg = {
        let image = stitch_testkit::fresh_image(16 << 20, None);
        stitch_format::Superblock::decode(&image[1024..2048])
            .unwrap()
            .inodes_per_group
    };
    let image = image_with(tmp.path(), "free_inodes_count", ipg);
    let says = format!("group 0's free inode count {ipg} cannot move by 1");
    fails_and_stops(image, &says, |fs| fs.unlink(fs.root(), b"f", NOW).map(drop));
}
