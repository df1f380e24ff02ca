//! memfs under memory pressure, crash-tested. With its file pages
//! bounded to four, a read or write past the bound flushes everything and
//! then evicts clean pages and unused inodes, so the operations after it
//! load them again from the disk. Each such flush is a persistence point
//! of its own, after the change that took memory past the bound. The named
//! workloads run this way in every mode; of the generated workloads of
//! length 1, soft updates runs every one and each journal data mode a
//! third, the three thirds together covering them all (eviction and reload
//! are memfs's, the same in every journal data mode). Epochs are
//! enumerated up to 4 states (sampled beyond), half the other crash
//! tests' bound: every epoch is still crashed, and the suite stays within
//! its time. No mode may show a violation, and the pressure must really
//! have come.

mod common;
use common::run_in;
use stitch_crashtest::{workload, Consistency, DataMode};

const PAGES: u64 = 4;

/// Crash states per epoch.
const MAX_STATES: u64 = 4;

/// Runs the named workloads and part `k` of `n` of the generated ones of
/// length 1 under pressure in `mode`.
fn clean_under_pressure(mode: Consistency, (k, n): (usize, usize)) {
    let mut w = workload::named();
    w.extend(
        workload::exhaustive(1)
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % n == k)
            .map(|(_, w)| w),
    );
    let s = run_in(mode, w, Some(PAGES), MAX_STATES);
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
    clean_under_pressure(Consistency::SoftUpdates, (0, 1));
}

#[test]
fn journal_writeback_under_memory_pressure() {
    clean_under_pressure(Consistency::Journal(DataMode::Writeback), (0, 3));
}

#[test]
fn journal_ordered_under_memory_pressure() {
    clean_under_pressure(Consistency::Journal(DataMode::Ordered), (1, 3));
}

#[test]
fn journal_journal_under_memory_pressure() {
    clean_under_pressure(Consistency::Journal(DataMode::Journal), (2, 3));
}
