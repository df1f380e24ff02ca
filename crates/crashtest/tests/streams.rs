//! Streams under crash ("Application Crash Consistency and Performance
//! with CCFS"): the named related-step cases and a seeded sample of
//! workloads over three streams, every crash image judged by the stream
//! rules (a prefix of each stream, related steps in order, what stream
//! syncs and fsyncs promised). Neither soft updates nor any journal mode
//! may show a violation; async, the control, must. Under `--order global`
//! a workload in no stream is judged as one stream.

mod common;
use common::{run, run_with, SEED};
use stitch_crashtest::{streams, workload, Consistency, DataMode, Order, Workload};

/// Stream workloads of five steps drawn per mode.
const SAMPLES: usize = 8;

fn stream_workloads() -> Vec<Workload> {
    let mut w = streams::named();
    w.extend(streams::generated(5, SAMPLES, SEED));
    w
}

fn clean(mode: Consistency) {
    let s = run(mode, stream_workloads());
    let t = s.total();
    assert!(t.states > 300, "too few crash images: {}", t.states);
    assert_eq!(t.total_violations(), 0, "{mode}: violations (see above)");
}

/// Soft updates chain a stream's changes inside each flush; a file's
/// state is settled before a second change to it, and before its last
/// name goes.
#[test]
fn soft_updates_keep_every_streams_prefix() {
    clean(Consistency::SoftUpdates);
}

#[test]
fn journal_writeback_keeps_every_streams_prefix() {
    clean(Consistency::Journal(DataMode::Writeback));
}

#[test]
fn journal_ordered_keeps_every_streams_prefix() {
    clean(Consistency::Journal(DataMode::Ordered));
}

#[test]
fn journal_data_keeps_every_streams_prefix() {
    clean(Consistency::Journal(DataMode::Journal));
}

/// The control: async keeps no order, and the judge sees it.
#[test]
fn async_breaks_streams_and_the_judge_sees_it() {
    let s = run(Consistency::Async, stream_workloads());
    assert!(
        s.total().total_violations() > 0,
        "async showed no violation"
    );
}

/// The global order: a workload in no stream leaves a prefix of its
/// history at every crash, in a journal mode and in soft updates.
#[test]
fn global_order_leaves_a_prefix_of_the_history() {
    let mut w = workload::sampled(3, SAMPLES, SEED);
    w.extend(workload::sampled(4, SAMPLES, SEED));
    let judged = w
        .iter()
        .filter(|w| streams::as_one_stream(w).is_some())
        .count();
    assert!(
        judged >= SAMPLES,
        "only {judged} workloads judged as one stream"
    );
    for mode in [
        Consistency::Journal(DataMode::Ordered),
        Consistency::SoftUpdates,
    ] {
        let s = run_with(mode, w.clone(), None, Order::Global);
        assert_eq!(
            s.total().total_violations(),
            0,
            "{mode}: violations (see above)"
        );
    }
}
