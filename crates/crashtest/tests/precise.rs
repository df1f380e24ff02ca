//! Precise order (`--order precise`): an fsync covers McoreFS's closure of
//! the inode and nothing else. The default order covers more, so the
//! closure's own cases (a rename's partner directory, a moved
//! subdirectory's ancestors, a removed tree, a file's create with its
//! directory's earlier entries) are crash-tested here under the option
//! that keeps them: the named workloads whose fsyncs name one object
//! among others, and a sample of generated ones of length 2 (one operation alone is all its fsync's closure), in soft
//! updates and in journal mode with ordered data. The oracle holds each
//! crash image to the closure alone.

mod common;
use common::run_with;
use stitch_crashtest::{workload, Consistency, DataMode, Order};

fn clean(mode: Consistency) {
    // The named workloads whose fsyncs name one file or directory among
    // others (large-write, orphans and full are about other things, and
    // cost most of the time).
    let closures = [
        "featherstitch",
        "mcorefs-rename",
        "mcorefs-loop",
        "mcorefs-rmrf",
        "ccfs-journal-update",
        "maildelivery",
        "git-objects",
    ];
    let mut w: Vec<_> = workload::named()
        .into_iter()
        .filter(|w| closures.contains(&w.name.as_str()))
        .collect();
    assert_eq!(w.len(), closures.len(), "a named workload was renamed");
    w.extend(workload::sampled(2, 24, common::SEED));
    let s = run_with(mode, w, None, Order::Precise);
    let t = s.total();
    println!(
        "{mode}, precise: {} workloads, {} crash images judged, {} violations",
        t.workloads,
        t.states,
        t.total_violations()
    );
    assert!(t.states > 300, "too few crash images: {}", t.states);
    assert_eq!(t.total_violations(), 0, "{mode}: violations (see above)");
}

#[test]
fn softupdates_in_precise_order() {
    clean(Consistency::SoftUpdates);
}

#[test]
fn journal_ordered_in_precise_order() {
    clean(Consistency::Journal(DataMode::Ordered));
}
