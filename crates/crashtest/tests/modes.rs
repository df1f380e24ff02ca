//! Whole-stack crash tests in every mode, in the default (sequential) order. Each mode runs the
//! named workloads of the seeds, the longer generated ones that once
//! failed (`workload::regressions`), every generated workload of length 1
//! and a sample of length 2; every crash image is recovered and judged. No
//! mode but async may show a violation; async, the control, must.

mod common;
use common::{run, short_workloads};
use stitch_crashtest::{Consistency, DataMode, Kind};

/// Length-2 workloads sampled per mode.
const SAMPLES: usize = 16;

fn clean(mode: Consistency) {
    let s = run(mode, short_workloads(SAMPLES));
    let t = s.total();
    println!(
        "{mode}: {} workloads, {} crash images judged ({} distinct, {} through the checkers), {} violations",
        t.workloads,
        t.states,
        t.images,
        t.checked,
        t.total_violations()
    );
    assert!(t.states > 500, "too few crash images: {}", t.states);
    assert_eq!(t.total_violations(), 0, "{mode}: violations (see above)");
}

#[test]
fn softupdates_crash_images_are_consistent_and_durable() {
    clean(Consistency::SoftUpdates);
}

#[test]
fn journal_writeback_crash_images_are_consistent_and_durable() {
    clean(Consistency::Journal(DataMode::Writeback));
}

#[test]
fn journal_ordered_crash_images_are_consistent_and_durable() {
    clean(Consistency::Journal(DataMode::Ordered));
}

#[test]
fn journal_journal_crash_images_are_atomic() {
    clean(Consistency::Journal(DataMode::Journal));
}

#[test]
fn async_crash_images_show_violations() {
    let s = run(Consistency::Async, short_workloads(SAMPLES));
    let t = s.total();
    println!(
        "async: {} crash images checked, {} violations: {:?}",
        t.states,
        t.total_violations(),
        t.violations
    );
    assert!(
        t.violations.get(&Kind::Corruption).copied().unwrap_or(0) > 0,
        "async never produced a corrupt image: the checkers may be blind"
    );
}
