//! Violations, their kinds, the run's summary, and the directory each
//! saved violation gets: the crash image, the operations, the expected and
//! found states, the checkers' output and the command that reproduces it.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What a violation is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A checker found corruption (or, in a journal mode, any problem
    /// e2fsck reports), or the tree is malformed (a directory reachable
    /// twice).
    Corruption,
    /// Our fsck found soft-updates leaks where the mode promises none.
    Leak,
    /// e2fsck and our fsck disagree.
    CheckersDisagree,
    /// Something a completed persistence point made durable is missing or
    /// different.
    Durability,
    /// The image shows a state the mode does not allow at that point: a
    /// change beyond what the running flush writes, or a journal flush
    /// that is neither before nor after.
    Ordering,
    /// A file shows bytes it never wrote.
    Data,
    /// stitchfs could not mount or read the crash image (or panicked).
    Recovery,
    /// memfs answered an operation differently from the reference model.
    Semantics,
    /// The workload could not run as written (a failing flush, writes
    /// outside persistence points).
    Harness,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Corruption,
        Kind::Leak,
        Kind::CheckersDisagree,
        Kind::Durability,
        Kind::Ordering,
        Kind::Data,
        Kind::Recovery,
        Kind::Semantics,
        Kind::Harness,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Corruption => "corruption",
            Kind::Leak => "leak",
            Kind::CheckersDisagree => "checkers-disagree",
            Kind::Durability => "durability",
            Kind::Ordering => "ordering",
            Kind::Data => "data",
            Kind::Recovery => "recovery",
            Kind::Semantics => "semantics",
            Kind::Harness => "harness",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One problem found in one crash image (or in the run itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub kind: Kind,
    pub message: String,
}

/// One violating crash image (or workload run), as kept in the summary.
#[derive(Clone, Debug)]
pub struct Violation {
    pub mode: String,
    pub workload: String,
    /// The crash state, if the violation is about one.
    pub state: Option<String>,
    pub findings: Vec<Finding>,
    pub reproduce: String,
    /// Where it was saved, if it was.
    pub dir: Option<PathBuf>,
}

impl Violation {
    pub fn kinds(&self) -> Vec<Kind> {
        let mut k: Vec<Kind> = self.findings.iter().map(|f| f.kind).collect();
        k.sort();
        k.dedup();
        k
    }
}

/// Figures of one mode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModeSummary {
    pub workloads: usize,
    /// Crash states judged.
    pub states: usize,
    /// Distinct crash images recovered.
    pub images: usize,
    /// Images the checkers ran on (in journal modes, images recovering to
    /// a file system already checked reuse its verdict).
    pub checked: usize,
    /// Crash states whose recovery replayed journal transactions.
    pub replayed: usize,
    /// Flushes memfs made on its own (to find room, under memory
    /// pressure), each a persistence point of the workload.
    pub own_flushes: usize,
    /// Violating crash states (or runs).
    pub violating: usize,
    /// Violating crash states (or runs) per kind (one may have several).
    pub violations: BTreeMap<Kind, usize>,
}

impl ModeSummary {
    pub fn total_violations(&self) -> usize {
        self.violating
    }

    pub fn add(&mut self, o: &ModeSummary) {
        self.workloads += o.workloads;
        self.states += o.states;
        self.images += o.images;
        self.checked += o.checked;
        self.replayed += o.replayed;
        self.own_flushes += o.own_flushes;
        self.violating += o.violating;
        for (k, n) in &o.violations {
            *self.violations.entry(*k).or_default() += n;
        }
    }
}

/// What a whole run found.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// By mode name, in the order run.
    pub modes: Vec<(String, ModeSummary)>,
    /// The violations (all of them; the first `keep` saved to disk).
    pub violations: Vec<Violation>,
}

impl Summary {
    pub fn mode(&self, name: &str) -> Option<&ModeSummary> {
        self.modes.iter().find(|(n, _)| n == name).map(|(_, m)| m)
    }

    pub fn total(&self) -> ModeSummary {
        let mut t = ModeSummary::default();
        for (_, m) in &self.modes {
            t.add(m);
        }
        t
    }

    /// The summary table.
    pub fn table(&self) -> String {
        let kinds: Vec<Kind> = Kind::ALL
            .into_iter()
            .filter(|k| self.modes.iter().any(|(_, m)| m.violations.contains_key(k)))
            .collect();
        let mut s = format!(
            "{:<18} {:>9} {:>12} {:>8} {:>8} {:>9} {:>11} {:>10}",
            "mode",
            "workloads",
            "crash states",
            "images",
            "checked",
            "replayed",
            "own flushes",
            "violations"
        );
        for k in &kinds {
            s.push_str(&format!(" {:>w$}", k.name(), w = k.name().len().max(4)));
        }
        s.push('\n');
        let mut rows: Vec<(String, ModeSummary)> = self.modes.clone();
        if rows.len() > 1 {
            rows.push(("total".into(), self.total()));
        }
        for (name, m) in rows {
            s.push_str(&format!(
                "{:<18} {:>9} {:>12} {:>8} {:>8} {:>9} {:>11} {:>10}",
                name,
                m.workloads,
                m.states,
                m.images,
                m.checked,
                m.replayed,
                m.own_flushes,
                m.total_violations()
            ));
            for k in &kinds {
                let n = m.violations.get(k).copied().unwrap_or(0);
                s.push_str(&format!(" {:>w$}", n, w = k.name().len().max(4)));
            }
            s.push('\n');
        }
        s
    }
}

/// The files of one saved violation.
pub struct Saved<'a> {
    pub image: Option<&'a [u8]>,
    pub workload: &'a str,
    pub state: &'a str,
    pub findings: &'a [Finding],
    pub expected: &'a str,
    pub found: &'a str,
    /// `Tree::diff` of the found tree against the expected one(s).
    pub diff: &'a str,
    pub checkers: &'a str,
    pub reproduce: &'a str,
}

/// Writes a violation's directory `dir`.
pub fn save(dir: &Path, v: &Saved<'_>) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if let Some(image) = v.image {
        write_sparse(&dir.join("crash.img"), image)?;
    }
    let mut text = String::new();
    for f in v.findings {
        text.push_str(&format!("[{}] {}\n", f.kind, f.message));
    }
    std::fs::write(dir.join("violation.txt"), text)?;
    std::fs::write(dir.join("operations.txt"), v.workload)?;
    std::fs::write(dir.join("crash-state.txt"), v.state)?;
    std::fs::write(dir.join("expected.txt"), v.expected)?;
    std::fs::write(dir.join("found.txt"), v.found)?;
    std::fs::write(dir.join("diff.txt"), v.diff)?;
    std::fs::write(dir.join("checkers.txt"), v.checkers)?;
    std::fs::write(
        dir.join("reproduce.sh"),
        format!("#!/bin/sh\n{}\n", v.reproduce),
    )?;
    Ok(())
}

/// Writes `image` leaving holes where whole blocks are zero.
fn write_sparse(path: &Path, image: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::create(path)?;
    f.set_len(image.len() as u64)?;
    let zero = [0u8; 4096];
    for (i, block) in image.chunks(4096).enumerate() {
        if block != &zero[..block.len()] {
            f.write_all_at(block, (i * 4096) as u64)?;
        }
    }
    let mut f = f;
    f.flush()
}
