//! The facts cache keys an image by the blocks the log writes, computed
//! without building the image (`Recording::blocks`): they must be the
//! image's, and every other block the base's.

use std::collections::BTreeSet;
use stitch_blockdev::record::{crash_states, Enumerate, ImageBuilder};
use stitch_crashtest::run::{record, BS};
use stitch_crashtest::{workload, Consistency, DataMode};

#[test]
fn the_blocks_of_a_crash_state_are_its_image() {
    let w = workload::parse("featherstitch").unwrap();
    for mode in [
        Consistency::SoftUpdates,
        Consistency::Journal(DataMode::Ordered),
    ] {
        let rec = record(mode, &w, Default::default()).unwrap();
        let mut builder = ImageBuilder::new(&rec.base.image, &rec.log).unwrap();
        let opts = Enumerate {
            max_states: 8,
            seed: 1,
            torn: None,
        };
        let mut n = 0;
        for st in crash_states(&rec.log, &opts).unwrap() {
            let image = builder.build(&st).unwrap();
            let blocks = rec.blocks(&st);
            for (i, data) in &blocks {
                assert_eq!(
                    &image[i * BS..(i + 1) * BS],
                    *data,
                    "{mode}: block {i} of {st:?}"
                );
            }
            let touched: BTreeSet<usize> = blocks.iter().map(|b| b.0).collect();
            for (i, (a, b)) in image.chunks(BS).zip(rec.base.image.chunks(BS)).enumerate() {
                assert!(
                    touched.contains(&i) || a == b,
                    "{mode}: block {i} changed unseen"
                );
            }
            n += 1;
        }
        assert!(n > 20, "{mode}: only {n} crash states");
    }
}

/// In journal modes the checkers' verdicts are reused across crash images
/// that recover to the same file system (leaving out the log blocks of an
/// emptied journal). Every reused verdict must be what the checkers say
/// of that image when run afresh, and the reuse must happen. The journal
/// writes home blocks before their commit record here (fault injection),
/// so that some recovered images are damaged and the verdicts differ.
#[test]
fn reused_verdicts_are_the_checkers_own() {
    use stitch_crashtest::check::{Cache, Checker, Facts};
    let mode = Consistency::Journal(DataMode::Ordered);
    let w = workload::parse("maildelivery").unwrap();
    stitch_diskfs::fault::set_home_before_commit(true);
    let rec = record(mode, &w, Default::default());
    stitch_diskfs::fault::set_home_before_commit(false);
    let rec = rec.unwrap();
    let opts = Enumerate {
        max_states: 16,
        seed: 1,
        torn: None,
    };
    let shared = Cache::default();
    let mut checker = Checker::new().unwrap();
    let said = |f: &Facts| {
        let fsck = f.fsck.clone().map(|v| (v.corruptions, v.leaks, v.text));
        let fsck = fsck.map_err(|e| e.to_string());
        (
            fsck,
            f.e2fsck.clone().map_err(|e| e.to_string()),
            f.replayed,
        )
    };
    let (mut images, mut checked, mut damaged) = (0, 0, 0);
    for st in crash_states(&rec.log, &opts).unwrap() {
        let blocks = rec.blocks(&st);
        let (f, fresh) = checker.facts(&shared, mode, &rec.base, &blocks);
        if !fresh {
            continue;
        }
        images += 1;
        checked += usize::from(f.checked);
        damaged += usize::from(!matches!(f.e2fsck, Ok((0, _))));
        let (alone, _) = checker.facts(&Cache::default(), mode, &rec.base, &blocks);
        assert!(alone.checked);
        assert_eq!(said(&f), said(&alone), "{st:?}");
    }
    println!("{images} images, {checked} checked, {damaged} damaged");
    assert!(
        damaged > 0,
        "no damaged image: the comparison proves little"
    );
    assert!(
        checked < images / 2,
        "verdicts were not reused: {checked} of {images} images checked"
    );
}
