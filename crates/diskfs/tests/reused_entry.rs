//! A name removed and made again in the same flush lands in its old slot,
//! over the removed entry's leftovers (the same name and length, perhaps
//! the same inode number): its add changes few bytes, the entry before it
//! shrinking back and at most the inode number. The entry after it is then
//! removed (by a rename of a directory over an empty one, or by rmdir),
//! which lengthens the re-made entry. That change must wait for the add:
//! written while the add was rolled back, the entry before skipped the
//! re-made one on disk, and the removed entry showed again, naming a
//! directory that also had its new name, or a deleted one (the crash
//! tester found the first with `gen:mkdir:E+sync,unlink:B,creat:B,rename:D:E`).
//! Every crash image must show only leaks.

use std::sync::Arc;
use stitch_blockdev::record::CrashPoint;
use stitch_blockdev::{MemDevice, RecordingDevice};
use stitch_diskfs::{Consistency, DiskFs, Op, RenameFlags};

mod common;
use common::NOW;

/// The crash tester's tree (`A`, `B`, `D` holding `D/C`, then `E`, an
/// empty directory), durable; the device and the log's end.
fn setup(image: Vec<u8>) -> (Arc<RecordingDevice<MemDevice>>, DiskFs, CrashPoint) {
    let (rec, mut fs) = common::mount_recorded(image, Consistency::SoftUpdates);
    let root = fs.root();
    let (a, _) = fs.create(root, b"A", 0o644, 0, 0, NOW).unwrap();
    fs.write(a, 0, &[1u8; 8192], NOW).unwrap();
    fs.create(root, b"B", 0o644, 0, 0, NOW).unwrap();
    let (d, _) = fs.mkdir(root, b"D", 0o755, 0, 0, NOW).unwrap();
    let (c, _) = fs.create(d, b"C", 0o644, 0, 0, NOW).unwrap();
    fs.write(c, 0, &[2u8; 3000], NOW).unwrap();
    fs.mkdir(root, b"E", 0o755, 0, 0, NOW).unwrap();
    fs.sync().unwrap();
    let end = rec.log().end();
    (rec, fs, end)
}

/// `B` unlinked and made again, as memfs's flush applies it: with a number
/// reserved before the unlink (a new one), or after it (the number just
/// freed, so the new entry's bytes equal the old one's).
fn remake_b(fs: &mut DiskFs, same_number: bool) {
    let root = fs.root();
    let old = fs.lookup(root, b"B").unwrap().unwrap().ino;
    let early = (!same_number).then(|| fs.reserve_inode(root, false).unwrap());
    fs.apply(
        &Op::Unlink {
            parent: root,
            name: b"B".to_vec(),
        },
        NOW,
    )
    .unwrap();
    let ino = match early {
        Some(ino) => ino,
        None => fs.reserve_inode(root, false).unwrap(),
    };
    let create = Op::Create {
        parent: root,
        name: b"B".to_vec(),
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    let made = fs.apply_as(&create, Some(ino), NOW).unwrap();
    assert_eq!(made.ino, Some(ino));
    // The case each variant is for: placement reuses the number just freed.
    assert_eq!(ino == old, same_number, "B's new number is {}", ino.0);
}

/// Runs `then` after `B` is made again, syncs, and judges every crash
/// image from the end of the setup.
fn judge(same_number: bool, then: impl FnOnce(&mut DiskFs)) -> usize {
    let tmp = stitch_testkit::scratch();
    let path = tmp.path().join("crash.img");
    let (rec, mut fs, from) = setup(stitch_testkit::fresh_image(4 << 20, None));
    remake_b(&mut fs, same_number);
    then(&mut fs);
    fs.sync().unwrap();
    let mut judged = 0;
    common::each_crash_image(&rec, from, 256, 1, |state, image| {
        std::fs::write(&path, &image).unwrap();
        common::soft_updates_verdict(&path)
            .unwrap_or_else(|e| panic!("same number {same_number}, state {state:?}: {e}"));
        judged += 1;
    });
    judged
}

#[test]
fn a_directory_renamed_over_another_after_a_remade_name_is_never_named_twice() {
    for same_number in [false, true] {
        let judged = judge(same_number, |fs| {
            let root = fs.root();
            fs.rename(root, b"D", root, b"E", RenameFlags::default(), NOW)
                .unwrap();
        });
        assert!(judged >= 8, "only {judged} crash images");
    }
}

#[test]
fn a_directory_removed_after_a_remade_name_never_shows_again() {
    for same_number in [false, true] {
        let judged = judge(same_number, |fs| {
            let root = fs.root();
            let d = fs.lookup(root, b"D").unwrap().unwrap().ino;
            fs.unlink(d, b"C", NOW).unwrap();
            fs.rmdir(root, b"D", NOW).unwrap();
        });
        assert!(judged >= 8, "only {judged} crash images");
    }
}
