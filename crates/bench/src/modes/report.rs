//! The modes benchmark's results: a cell per load and mode (medians over
//! the runs, ratios to async), the goals measured against them, and
//! the Markdown report.

use super::{Outcome, Sample, Settings, LOADS, MODES};
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
    let failed: Vec<&String> = runs.iter().filter_map(|r| r.as_ref().err()).collect();
    let error = failed
        .first()
        .map(|e| format!("{} of {} runs failed: {e}", failed.len(), runs.len()));
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

/// One of the goals, measured.
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
    let s = &r.settings;
    let mut out = format!(
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
    );
    out.push_str("Time relative to async (async's seconds in brackets):\n\n| load |");
    for (m, _) in MODES {
        out.push_str(&format!(" {m} |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(MODES.len()));
    for row in r.cells.chunks(MODES.len()) {
        out.push_str(&format!("\n| {} |", row[0].load));
        for c in row {
            if c.seconds.is_nan() {
                out.push_str(" failed |");
            } else if c.mode == "async" {
                out.push_str(&format!(" 1.00 ({:.2} s) |", c.seconds));
            } else {
                out.push_str(&format!(" {:.2} |", c.vs_async));
            }
        }
    }
    out.push_str(
        "\n\n| load | mode | time s | vs async | data MB | blocks written | writes vs async \
         | flushes | undo MB | patches | commits | log blocks | log copies |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for c in &r.cells {
        if c.seconds.is_nan() {
            out.push_str(&format!(
                "| {} | {} | failed |{}\n",
                c.load,
                c.mode,
                " – |".repeat(10)
            ));
            continue;
        }
        let j = |f: fn(&JournalCounts) -> u64| {
            c.counts
                .journal
                .as_ref()
                .map_or("–".into(), |j| f(j).to_string())
        };
        out.push_str(&format!(
            "| {} | {} | {:.2} | {:.2} | {:.1} | {} | {:.2} | {} | {:.2} | {} | {} | {} | {} |\n",
            c.load,
            c.mode,
            c.seconds,
            c.vs_async,
            c.counts.data_bytes as f64 / 1e6,
            c.counts.blocks_written,
            c.writes_vs_async,
            c.counts.flushes,
            c.counts.undo_bytes as f64 / 1e6,
            c.counts.patches,
            j(|j| j.commits),
            j(|j| j.log_blocks),
            j(|j| j.copies),
        ));
    }
    let failures: Vec<&Cell> = r.cells.iter().filter(|c| c.error.is_some()).collect();
    if !failures.is_empty() {
        out.push_str("\nFailures:\n\n");
        for c in failures {
            let e = c.error.as_deref().unwrap_or_default();
            out.push_str(&format!("- {} under {}: {e}\n", c.load, c.mode));
        }
    }
    out.push_str("\nGoals:\n\n");
    for g in goals(r) {
        let verdict = match (g.measured.is_nan(), g.met()) {
            (true, _) => "not measured (a run failed)",
            (false, true) => "met",
            (false, false) => "not met",
        };
        out.push_str(&format!(
            "- {}: {:.2} (goal ≤ {:.1}): {verdict}\n",
            g.what, g.measured, g.limit
        ));
    }
    out
}
