//! A file given a second name and then losing its first, crashed in soft
//! updates: every crash image must show only leaks to our fsck and e2fsck,
//! and each file must still have a name on disk, the old or the new (the way maildir delivers, `link` then `unlink`). The
//! unlink's removal must wait for the link's entry; without that, a crash
//! between the two writes left the inode with no name at all (a leak fsck
//! reconnects to lost+found, the file gone from where it was).

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use stitch_diskfs::{Consistency, DiskFs};

mod common;
use common::NOW;

const FILES: usize = 40;

#[test]
fn a_file_linked_then_unlinked_keeps_a_name_at_every_crash() {
    let tmp = stitch_testkit::scratch();
    let image = stitch_testkit::fresh_image(16 << 20, None);
    let path = tmp.path().join("crash.img");
    let mut judged = 0;
    for seed in 0..3u64 {
        let (rec, mut fs) = common::mount_recorded(image.clone(), Consistency::SoftUpdates);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let root = fs.root();
        let (tmpdir, _) = fs.mkdir(root, b"tmp", 0o755, 0, 0, NOW).unwrap();
        let (new, _) = fs.mkdir(root, b"new", 0o755, 0, 0, NOW).unwrap();
        let mut inos = Vec::new();
        for i in 0..FILES {
            let name = format!("m{i}");
            let (ino, _) = fs
                .create(tmpdir, name.as_bytes(), 0o644, 0, 0, NOW)
                .unwrap();
            inos.push(ino);
        }
        fs.sync().unwrap();
        // Every crash from here on has the files and their first names.
        let setup = rec.log().end();
        for (i, &ino) in inos.iter().enumerate() {
            let name = format!("m{i}");
            fs.link(ino, new, name.as_bytes(), NOW).unwrap();
            common::write_back_some(&mut fs, &mut rng);
            fs.unlink(tmpdir, name.as_bytes(), NOW).unwrap();
            common::write_back_some(&mut fs, &mut rng);
        }
        fs.sync().unwrap();
        common::each_crash_image(&rec, setup, 6, seed, |state, image| {
            std::fs::write(&path, &image).unwrap();
            common::soft_updates_verdict(&path)
                .unwrap_or_else(|e| panic!("seed {seed}, state {state:?}: {e}"));
            let (_, mut crashed) = common::mount(image, Consistency::SoftUpdates);
            let named = |fs: &mut DiskFs, dir| -> Vec<u32> {
                fs.readdir(dir).unwrap().iter().map(|e| e.ino.0).collect()
            };
            let mut names = named(&mut crashed, tmpdir);
            names.extend(named(&mut crashed, new));
            for (i, ino) in inos.iter().enumerate() {
                assert!(
                    names.contains(&ino.0),
                    "seed {seed}, state {state:?}: m{i} (inode {}) has no name",
                    ino.0
                );
            }
            judged += 1;
        });
    }
    assert!(judged > 100, "only {judged} crash images");
}

/// A number reserved for a new file may be one whose file was deleted
/// moments before, its cleared inode not yet on disk. Given back unused
/// (as memfs gives back its pool at unmount), its bit must stay set on disk
/// until that inode is cleared there: a crash between the two showed the
/// old file's inode, links and all, marked free (corruption, not a leak).
#[test]
fn a_reserved_number_given_back_frees_its_bit_only_after_the_old_inode() {
    let tmp = stitch_testkit::scratch();
    let image = stitch_testkit::fresh_image(16 << 20, None);
    let path = tmp.path().join("crash.img");
    let (rec, mut fs) = common::mount_recorded(image, Consistency::SoftUpdates);
    let root = fs.root();
    let (old, _) = fs.create(root, b"old", 0o644, 0, 0, NOW).unwrap();
    fs.write(old, 0, &[7u8; 5000], NOW).unwrap();
    fs.sync().unwrap();
    let setup = rec.log().end();
    fs.unlink(root, b"old", NOW).unwrap();
    let again = fs.reserve_inode(root, false).unwrap();
    // The lowest free number is the one just freed: the case under test.
    assert_eq!(again, old, "placement no longer reuses the freed number");
    fs.unreserve_inode(again).unwrap();
    fs.sync().unwrap();
    let mut judged = 0;
    common::each_crash_image(&rec, setup, 64, 0, |state, image| {
        std::fs::write(&path, &image).unwrap();
        common::soft_updates_verdict(&path).unwrap_or_else(|e| panic!("state {state:?}: {e}"));
        judged += 1;
    });
    assert!(judged >= 2, "only {judged} crash images");
}
