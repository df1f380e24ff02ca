//! Helpers of the crashtest tests: the short run every mode gets.
#![allow(dead_code)]

use stitch_crashtest::{workload, Config, Consistency, Order, Summary, Workload};

/// Seed of the sampled length-2 workloads and of crash-state sampling.
pub const SEED: u64 = 7;

/// The named workloads, every generated workload of length 1, and a
/// sample of length 2.
pub fn short_workloads(samples: usize) -> Vec<Workload> {
    let mut w = workload::named();
    w.extend(workload::regressions());
    w.extend(workload::exhaustive(1));
    w.extend(workload::sampled(2, samples, SEED));
    w
}

/// Runs `workloads` in `mode` (small epochs sampled), prints the table
/// and the first violations.
pub fn run(mode: Consistency, workloads: Vec<Workload>) -> Summary {
    run_with(mode, workloads, None, Order::default())
}

/// Crash states enumerated per epoch (sampled beyond) unless a test says.
pub const MAX_STATES: u64 = 8;

/// [`run`] with memfs's file pages bounded to `memory_pages`, and
/// `max_states` crash states per epoch.
pub fn run_in(
    mode: Consistency,
    workloads: Vec<Workload>,
    memory_pages: Option<u64>,
    max_states: u64,
) -> Summary {
    run_full(mode, workloads, memory_pages, Order::default(), max_states)
}

/// [`run`] with memfs's file pages bounded to `memory_pages` and its
/// fsyncs covering what `order` says.
pub fn run_with(
    mode: Consistency,
    workloads: Vec<Workload>,
    memory_pages: Option<u64>,
    order: Order,
) -> Summary {
    run_full(mode, workloads, memory_pages, order, MAX_STATES)
}

fn run_full(
    mode: Consistency,
    workloads: Vec<Workload>,
    memory_pages: Option<u64>,
    order: Order,
    max_states: u64,
) -> Summary {
    let cfg = Config {
        max_states,
        seed: SEED,
        jobs: 1,
        command: "cargo run -p stitchfs -- crashtest".into(),
        memory_pages,
        order,
        ..Config::new(vec![mode], workloads)
    };
    let s = stitch_crashtest::run(&cfg, &|_| {}).expect("crashtest runs");
    print!("{}", s.table());
    for v in s.violations.iter().take(10) {
        println!(
            "{} {} {}: {:?}\n  {}",
            v.mode,
            v.workload,
            v.state.as_deref().unwrap_or("(run)"),
            v.findings.first().map(|f| &f.message),
            v.reproduce
        );
    }
    s
}

/// Soft updates and the three journal modes: the modes that order.
pub const ORDERING_MODES: [Consistency; 4] = [
    Consistency::SoftUpdates,
    Consistency::Journal(stitch_crashtest::DataMode::Writeback),
    Consistency::Journal(stitch_crashtest::DataMode::Ordered),
    Consistency::Journal(stitch_crashtest::DataMode::Journal),
];

/// Runs the workloads `w` makes in every mode that orders, each of which
/// must show no violation over enough crash images, then in async, the
/// control, which must show some.
pub fn clean_but_async(w: impl Fn() -> Vec<Workload>) {
    for mode in ORDERING_MODES {
        let s = run(mode, w());
        let t = s.total();
        assert!(t.states > 300, "too few crash images: {}", t.states);
        assert_eq!(t.total_violations(), 0, "{mode}: violations (see above)");
    }
    let s = run(Consistency::Async, w());
    assert!(
        s.total().total_violations() > 0,
        "async showed no violation"
    );
}
