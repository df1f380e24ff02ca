//! A directory growing a block, crashed in soft updates. Creates fill a
//! directory's first block and spill into a second while the cache writes
//! a few blocks at a time; every crash image must then show nothing but
//! soft-updates leaks, to our fsck and to `e2fsck -fn`. Two orders went
//! wrong here: the directory's size was written before the pointer to its
//! new block (a hole, which no directory may have), and the new block, holding the entry of the
//! create that needed it, was pointed to without waiting for the inode
//! that entry names (an entry naming an unused inode). Both showed in
//! about one crash image in twenty. (A directory growing past its twelve
//! direct blocks, whose new pointer sits in an indirect block apart from
//! the size, can be left with a block past its size, a leak: the CLI's
//! `tests/repair.rs` crashes and repairs that.)

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use stitch_diskfs::Consistency;

mod common;
use common::NOW;

/// Files created: names of 36 bytes take 44 bytes of a 4 KiB block, so
/// about 93 fill the first block and the rest go to a second and third.
const FILES: usize = 260;
/// Creates before the cache starts writing between them.
const QUIET: usize = 80;

#[test]
fn a_directory_growing_a_block_shows_only_leaks_after_any_crash() {
    let tmp = stitch_testkit::scratch();
    let image = stitch_testkit::fresh_image(16 << 20, None);
    let path = tmp.path().join("crash.img");
    let mut judged = 0;
    for seed in 0..2u64 {
        let (rec, mut fs) = common::mount_recorded(image.clone(), Consistency::SoftUpdates);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (d, _) = fs.mkdir(fs.root(), b"d", 0o755, 0, 0, NOW).unwrap();
        fs.sync().unwrap();
        for i in 0..FILES {
            let name = format!("a-rather-long-file-name-number-{i:05}");
            fs.create(d, name.as_bytes(), 0o644, 0, 0, NOW).unwrap();
            if i >= QUIET {
                common::write_back_some(&mut fs, &mut rng);
            }
        }
        fs.sync().unwrap();
        assert!(
            fs.getattr(d).unwrap().size >= 3 * 4096,
            "the directory did not grow"
        );
        let from = stitch_blockdev::record::CrashPoint(0);
        common::each_crash_image(&rec, from, 6, seed, |state, image| {
            std::fs::write(&path, image).unwrap();
            common::soft_updates_verdict(&path)
                .unwrap_or_else(|e| panic!("seed {seed}, state {state:?}: {e}"));
            judged += 1;
        });
    }
    assert!(judged > 1000, "only {judged} crash images");
}
