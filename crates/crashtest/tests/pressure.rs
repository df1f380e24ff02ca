//! memfs under memory pressure, crash-tested. With its file pages
//! bounded to four, a read or write past the bound flushes everything and
//! then evicts clean pages and unused inodes, so the operations after it
//! load them again from the disk. Each such flush is a persistence point
//! of its own, after the change that took memory past the bound. The named
//! workloads and every generated workload of length 1 run this way; no
//! mode may show a violation, and the pressure must really have come.

mod common;
use common::run_in;
use stitch_crashtest::{workload, Consistency, DataMode};

const PAGES: u64 = 4;

fn clean_under_pressure(mode: Consistency) {
    let mut w = workload::named();
    w.extend(workload::exhaustive(1));
    let s = run_in(mode, w, Some(PAGES));
    let t = s.total();
    println!(
        "{mode}, {PAGES} pages: {} workloads, {} crash images judged, {} flushes under pressure or for room, {} violations",
        t.workloads,
        t.states,
        t.own_flushes,
        t.total_violations()
    );
    // Without a bound the named workloads make 8 flushes of their own (the
    // full disk's); with it, over a hundred.
    assert!(
        t.own_flushes > 100,
        "memory pressure never came: {} flushes of memfs's own",
        t.own_flushes
    );
    assert_eq!(t.total_violations(), 0, "{mode}: violations (see above)");
}

#[test]
fn softupdates_under_memory_pressure() {
    clean_under_pressure(Consistency::SoftUpdates);
}

#[test]
fn journal_writeback_under_memory_pressure() {
    clean_under_pressure(Consistency::Journal(DataMode::Writeback));
}

#[test]
fn journal_ordered_under_memory_pressure() {
    clean_under_pressure(Consistency::Journal(DataMode::Ordered));
}

#[test]
fn journal_journal_under_memory_pressure() {
    clean_under_pressure(Consistency::Journal(DataMode::Journal));
}
