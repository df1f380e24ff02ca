//! Fault injection (feature `fault-injection` of stitch-diskfs, enabled
//! for these tests only): with a switch on, crashtest must report
//! violations in the matching mode; with it off, none. The switches are
//! process-wide, so one test turns them on and off in sequence.

mod common;
use stitch_crashtest::{workload, Consistency, DataMode, Kind, Workload};
use stitch_diskfs::fault;

fn creates() -> Vec<Workload> {
    let mut w: Vec<Workload> = ["gen:creat:E+sync", "gen:creat:D/A+fsync:D", "maildelivery"]
        .iter()
        .map(|s| workload::parse(s).unwrap())
        .collect();
    w.extend(workload::sampled(2, 6, common::SEED));
    w
}

#[test]
fn crashtest_notices_a_broken_ordering_rule() {
    // Soft updates: a new entry that does not wait for its inode.
    let su = Consistency::SoftUpdates;
    fault::set_entry_before_inode(true);
    let on = common::run(su, creates());
    fault::set_entry_before_inode(false);
    let off = common::run(su, creates());
    let corrupt = on.total().violations.get(&Kind::Corruption).copied();
    println!("soft updates, entry before inode: {corrupt:?} corrupt images");
    assert!(
        corrupt.unwrap_or(0) > 0,
        "the dropped dependency went unnoticed"
    );
    assert_eq!(
        off.total().total_violations(),
        0,
        "violations with the switch off"
    );

    // Journal: home blocks written before their commit record.
    let j = Consistency::Journal(DataMode::Ordered);
    fault::set_home_before_commit(true);
    let on = common::run(j, creates());
    fault::set_home_before_commit(false);
    let off = common::run(j, creates());
    println!("journal, home before commit: {:?}", on.total().violations);
    assert!(
        on.total().total_violations() > 0,
        "home writes before the commit went unnoticed"
    );
    assert_eq!(
        off.total().total_violations(),
        0,
        "violations with the switch off"
    );
}
