//! External synchrony under crash ("Rethink the Sync"): the named cases
//! and a seeded sample of workloads in which a group's fsyncs return at
//! once and its outputs commit (`MemFs::sync_through` on the group's
//! point), interleaved with an outside process's changes and fsyncs.
//! Every crash image after an output must hold every change the group
//! made before it: judged by the oracle (an output is a whole flush), and
//! with the group in a stream too by the streams judge with the group's
//! promise. Neither soft updates nor any journal mode may show a
//! violation. (`stitchfs crashtest` was seen to report over a thousand
//! violating states when the run's commit took a point before the
//! group's changes.)

mod common;
use common::{run, ORDERING_MODES, SEED};
use stitch_crashtest::xsync;

/// Workloads of six steps drawn per mode.
const SAMPLES: usize = 8;

#[test]
fn every_change_before_an_output_survives_every_crash() {
    for mode in ORDERING_MODES {
        let mut w = xsync::named();
        w.extend(xsync::generated(6, SAMPLES, SEED));
        let s = run(mode, w);
        let t = s.total();
        assert!(t.states > 300, "too few crash images: {}", t.states);
        assert_eq!(t.total_violations(), 0, "{mode}: violations (see above)");
    }
}

/// With `--stream`, a crash also leaves a prefix of the group's history;
/// async keeps no order, and the judge sees it.
#[test]
fn a_group_in_a_stream_keeps_its_prefix_and_its_outputs() {
    common::clean_but_async(|| xsync::with_streams(6, SAMPLES, SEED));
}
