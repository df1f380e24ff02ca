//! The modes benchmark's results: a cell per load and mode (medians over
//! the runs, ratios to async), the goals measured against them, and the
//! Markdown report.

use super::{Outcome, Sample, Settings, LOADS, MODES};
use crate::markdown::{or_dash, section, Table};
use crate::report::failed_runs;
use serde::Serialize;

/// One load under one mode.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub load: &'static str,
    pub mode: &'static str,
    /// Median wall time of the runs, and each run's.
    pub seconds: f64,
    pub run_seconds: Vec<f64>,
    pub vs_async: f64,
    pub writes_vs_async: f64,
    /// The median run's counts.
    #[serde(flatten)]
    pub counts: Counts,
    /// Why runs failed, if any did (the figures are the other runs').
    pub error: Option<String>,
}

/// What one run did, from just after mount to the end of unmount.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counts {
    /// File data the load wrote.
    pub data_bytes: u64,
    /// Patch cache counts.
    pub blocks_written: u64,
    pub flushes: u64,
    pub undo_bytes: u64,
    pub patches: u64,
    pub journal: Option<JournalCounts>,
}

/// The journal's counters, taken after the load's final commit.
#[derive(Clone, Debug, Serialize)]
pub struct JournalCounts {
    pub commits: u64,
    pub log_blocks: u64,
    pub copies: u64,
    pub revokes: u64,
    pub space_waits: u64,
}

/// Everything a run of the benchmark found.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub settings: Settings,
    pub cells: Vec<Cell>,
}

/// Medians per cell (over the runs that succeeded), and ratios to async's
/// cell of the same load.
pub(super) fn cells(samples: Vec<Vec<Vec<Outcome>>>) -> Vec<Cell> {
    let mut out: Vec<Cell> = Vec::new();
    for (l, &load) in LOADS.iter().enumerate() {
        for (m, &(mode, _)) in MODES.iter().enumerate() {
            out.push(cell(load, mode, &samples[m][l]));
        }
        let base = out.len() - MODES.len();
        let (t, w) = (out[base].seconds, out[base].counts.blocks_written);
        for c in &mut out[base..] {
            c.vs_async = c.seconds / t;
            c.writes_vs_async = c.counts.blocks_written as f64 / w as f64;
        }
    }
    out
}

fn cell(load: &'static str, mode: &'static str, runs: &[Outcome]) -> Cell {
    let mut ok: Vec<&Sample> = runs.iter().filter_map(|r| r.as_ref().ok()).collect();
    ok.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let error = failed_runs(runs.iter().filter_map(|r| r.as_ref().err()), runs.len());
    let median = ok.get(ok.len() / 2);
    Cell {
        load,
        mode,
        seconds: median.map_or(f64::NAN, |s| s.seconds),
        run_seconds: ok.iter().map(|s| s.seconds).collect(),
        vs_async: f64::NAN,
        writes_vs_async: f64::NAN,
        counts: median.map_or_else(Counts::default, |s| s.counts.clone()),
        error,
    }
}

/// One of the suite's goals, measured.
struct Goal {
    what: String,
    measured: f64,
    limit: f64,
}

impl Goal {
    fn met(&self) -> bool {
        self.measured <= self.limit
    }
}

/// The goals: soft updates and data=writeback within 1.3× of async's time
/// on untar and PostMark; data=journal writing at most about twice what
/// async writes (each block once to the log and once home; we allow 5%
/// for descriptor and commit blocks).
fn goals(r: &Report) -> Vec<Goal> {
    let cell = |load: &str, mode: &str| {
        r.cells
            .iter()
            .find(|c| c.load == load && c.mode == mode)
            .expect("every load runs under every mode")
    };
    let mut out = Vec::new();
    for load in ["untar", "postmark"] {
        for mode in ["soft updates", "data=writeback"] {
            out.push(Goal {
                what: format!("{mode} time on {load}, relative to async"),
                measured: cell(load, mode).vs_async,
                limit: 1.3,
            });
        }
    }
    for load in LOADS {
        out.push(Goal {
            what: format!("data=journal blocks written on {load}, relative to async"),
            measured: cell(load, "data=journal").writes_vs_async,
            limit: 2.1,
        });
    }
    out
}

/// The report as Markdown: times relative to async, the counts behind
/// them, and the goals.
pub fn table(r: &Report) -> String {
    let failures = r.cells.iter().filter_map(|c| {
        let e = c.error.as_deref()?;
        Some(format!("{} under {}: {e}", c.load, c.mode))
    });
    let goals = goals(r).into_iter().map(|g| {
        let verdict = match (g.measured.is_nan(), g.met()) {
            (true, _) => "not measured (a run failed)",
            (false, true) => "met",
            (false, false) => "not met",
        };
        let (what, measured, limit) = (g.what, g.measured, g.limit);
        format!("{what}: {measured:.2} (goal ≤ {limit:.1}): {verdict}")
    });
    intro(&r.settings)
        + "Time relative to async (async's seconds in brackets):\n\n"
        + &relative(&r.cells)
        + "\n"
        + &counts(&r.cells)
        + &section("Failures", failures)
        + &section("Goals", goals)
}

fn intro(s: &Settings) -> String {
    format!(
        "Consistency modes (Featherstitch Figure 10, Seltzer Tables 4–5): median wall time of {} run(s), \
         mount to the end of unmount, on a fresh {} MiB ext3 image (journal {} blocks) per load, \
         through FileDevice (fdatasync). untar/delete: {} files, {:.1} MB from {}; \
         PostMark: {} files of 500 B–{} KiB, {} transactions; fsync: {} × (create, write 4 KiB, fsync).\n\n",
        s.runs,
        s.image_bytes >> 20,
        s.journal_blocks,
        s.tree_files,
        s.tree_bytes as f64 / 1e6,
        s.tree.display(),
        s.postmark_files,
        s.postmark_max_size >> 10,
        s.postmark_transactions,
        s.fsync_files,
    )
}

/// A row per load, a column per mode: each time over async's.
fn relative(cells: &[Cell]) -> String {
    let modes: Vec<&str> = MODES.iter().map(|(m, _)| *m).collect();
    let mut t = Table::new(&format!("load | {}", modes.join(" | ")), 1);
    for row in cells.chunks(MODES.len()) {
        let figures: Vec<String> = row
            .iter()
            .map(|c| match c.mode {
                _ if c.seconds.is_nan() => "failed".into(),
                "async" => format!("1.00 ({:.2} s)", c.seconds),
                _ => format!("{:.2}", c.vs_async),
            })
            .collect();
        t.row(&[row[0].load], &figures);
    }
    t.text()
}

/// A row per load and mode: its time and the counts behind it.
fn counts(cells: &[Cell]) -> String {
    let mut t = Table::new(
        "load | mode | time s | vs async | data MB | blocks written | writes vs async \
         | flushes | undo MB | patches | commits | log blocks | log copies",
        2,
    );
    for c in cells {
        if c.seconds.is_nan() {
            t.gap(&[c.load, c.mode], "failed");
        } else {
            t.row(&[c.load, c.mode], &figures(c));
        }
    }
    t.text()
}

/// A measured cell's figures, after its load and mode.
fn figures(c: &Cell) -> Vec<String> {
    let n = &c.counts;
    let j = |f: fn(&JournalCounts) -> u64| or_dash(n.journal.as_ref(), |j| f(j).to_string());
    vec![
        format!("{:.2}", c.seconds),
        format!("{:.2}", c.vs_async),
        format!("{:.1}", n.data_bytes as f64 / 1e6),
        n.blocks_written.to_string(),
        format!("{:.2}", c.writes_vs_async),
        n.flushes.to_string(),
        format!("{:.2}", n.undo_bytes as f64 / 1e6),
        n.patches.to_string(),
        j(|j| j.commits),
        j(|j| j.log_blocks),
        j(|j| j.copies),
    ]
}
