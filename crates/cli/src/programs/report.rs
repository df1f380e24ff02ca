//! The report of a program crash run: one row per program and mode, as a
//! terminal table, Markdown and JSON.

use super::judge::Verdict;
use std::collections::BTreeMap;
use stitch_diskfs::Consistency;
use stitch_memfs::Order;

/// One program in one mode.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    pub program: String,
    pub mode: String,
    pub order: String,
    /// Lines the workload printed (its promises).
    pub promises: usize,
    /// Crash states the log allows (as enumerated: exhaustive per epoch up
    /// to the bound, sampled beyond).
    pub all_states: usize,
    /// Crash states judged (all, or a sample of them).
    pub states: usize,
    /// Distinct images (with the promises they owe) run through the checker.
    pub images: usize,
    pub consistent: usize,
    /// Inconsistent states by kind.
    pub inconsistent: BTreeMap<String, usize>,
    pub checker_failed: usize,
    pub seconds: f64,
}

impl Row {
    pub fn new(program: &str, mode: Consistency, order: Order) -> Self {
        Row {
            program: program.to_string(),
            mode: super::mode_name(mode),
            order: order.to_string(),
            promises: 0,
            all_states: 0,
            states: 0,
            images: 0,
            consistent: 0,
            inconsistent: BTreeMap::new(),
            checker_failed: 0,
            seconds: 0.0,
        }
    }

    pub fn count(&mut self, v: &Verdict) {
        self.states += 1;
        match v {
            Verdict::Consistent => self.consistent += 1,
            Verdict::Inconsistent { kind, .. } => {
                *self.inconsistent.entry(kind.clone()).or_default() += 1
            }
            Verdict::CheckerFailed(_) => self.checker_failed += 1,
        }
    }

    pub fn inconsistent_total(&self) -> usize {
        self.inconsistent.values().sum()
    }

    fn kinds(&self) -> String {
        if self.inconsistent.is_empty() {
            return "-".into();
        }
        let parts: Vec<String> = self
            .inconsistent
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        parts.join(", ")
    }

    /// Distinct images checked per second.
    fn rate(&self) -> f64 {
        self.images as f64 / self.seconds.max(1e-9)
    }
}

const HEADER: [&str; 8] = [
    "program",
    "mode",
    "states",
    "images",
    "consistent",
    "inconsistent (by kind)",
    "checker failed",
    "images/s",
];

fn cells(r: &Row) -> [String; 8] {
    [
        r.program.clone(),
        r.mode.clone(),
        if r.states == r.all_states {
            r.states.to_string()
        } else {
            format!("{} of {}", r.states, r.all_states)
        },
        r.images.to_string(),
        r.consistent.to_string(),
        r.kinds(),
        r.checker_failed.to_string(),
        format!("{:.1}", r.rate()),
    ]
}

/// A table for the terminal.
pub fn table(rows: &[Row]) -> String {
    let body: Vec<[String; 8]> = rows.iter().map(cells).collect();
    let width = |i: usize| {
        body.iter()
            .map(|c| c[i].len())
            .chain([HEADER[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..8).map(width).collect();
    let line = |c: &[String]| {
        let padded: Vec<String> = c
            .iter()
            .zip(&widths)
            .map(|(s, w)| format!("{s:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    let header: Vec<String> = HEADER.iter().map(|s| s.to_string()).collect();
    let mut out = line(&header);
    for c in &body {
        out.push_str(&line(c));
    }
    out
}

/// The same table in Markdown, with how it was made.
pub fn markdown(rows: &[Row], command: &str) -> String {
    let mut out = format!("Made by `{command}`.\n\n| {} |\n", HEADER.join(" | "));
    out.push_str(&format!("|{}\n", "---|".repeat(HEADER.len())));
    for r in rows {
        out.push_str(&format!("| {} |\n", cells(r).join(" | ")));
    }
    out
}
