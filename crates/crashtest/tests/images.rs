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
        let rec = record(mode, &w).unwrap();
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
