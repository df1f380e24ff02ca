//! The seeds benchmark's results: a cell per phase and system (medians over
//! the runs, ratios to ext4 data=ordered taken run by run), the goals of
//! ccfs's applications measured against them, and the Markdown report.

use super::{Figure, Phase, Scale, Settings, PHASES};
use crate::markdown::{self, mb, or_dash, ratio, section, Table};
use crate::report::{self, paired_ratio, Goal, Name, Runs, Summary};
use crate::session::{Measured, NOT_APPLICABLE};
use crate::systems;
use crate::workload::Sample;
use anyhow::{bail, Context};
use serde::{Deserialize, Deserializer, Serialize};
use std::path::Path;

/// Everything a run of the benchmark found.
pub type Report = report::Report<Settings, Cell>;

/// One phase on one system.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cell {
    #[serde(deserialize_with = "known_name")]
    pub seed: Name,
    #[serde(deserialize_with = "known_name")]
    pub phase: Name,
    /// The figure's unit: a rate's, or "s" for a time.
    #[serde(deserialize_with = "known_name")]
    pub unit: Name,
    #[serde(deserialize_with = "known_name")]
    pub system: Name,
    #[serde(deserialize_with = "known_name")]
    pub label: Name,
    /// The median over the runs that succeeded (a rate, or seconds), and
    /// each run's (null: failed).
    pub figure: Option<f64>,
    pub run_figures: Vec<Option<f64>>,
    /// Speed relative to ext4 data=ordered (its time over this one's, or
    /// this rate over its rate), the median of the per-run ratios: above 1
    /// is faster.
    pub vs_ext4: Option<f64>,
    /// fsync-bound phases: the device floor (fsyncs of the phase × the
    /// device's 4 KiB write + fdatasync latency of the same run) over the
    /// phase's time; 1 would be at the device's limit. Median over runs.
    pub vs_device: Option<f64>,
    /// Phases of requests and answers (kv): the median run's median and
    /// 99th-percentile time from a request's send to its answer, in
    /// seconds. Absent from every other phase's cell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_median_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_p99_s: Option<f64>,
    #[serde(flatten)]
    pub summary: Summary,
}

/// Reads a name a cell holds (a seed, phase, unit, system id or label)
/// back as the benchmark's own.
pub fn known_name<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    report::known_name(d, |name| {
        let mut phases = PHASES.iter().flat_map(|p| [p.seed, p.name, unit(p)]);
        phases
            .find(|&known| known == name)
            .or_else(|| systems::named(name))
    })
}

fn unit(p: &Phase) -> &'static str {
    match p.figure {
        Figure::Rate(u) => u,
        Figure::Time => "s",
    }
}

/// One report from the reports of runs of different workloads, as if one
/// run had measured them all: for a suite too long to run in one sitting.
/// They must come from the same machine, sizes and number of runs, and
/// measure no phase twice. The device probes of all runs are kept.
pub fn merge(files: &[impl AsRef<Path>]) -> anyhow::Result<Report> {
    let mut merged: Option<Report> = None;
    for file in files {
        let file = file.as_ref();
        let r = read(file)?;
        let Some(m) = merged.as_mut() else {
            merged = Some(r);
            continue;
        };
        if let Some(why) = refusal(m, &r) {
            bail!("cannot merge {}: {why}", file.display());
        }
        absorb(m, r);
    }
    let Some(mut m) = merged else {
        bail!("no reports to merge");
    };
    in_order(&mut m);
    m.goals = goals(&m.cells);
    Ok(m)
}

fn read(file: &Path) -> anyhow::Result<Report> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a seeds report", file.display()))
}

/// Why `r` cannot join `m` in one report, if it cannot.
fn refusal(m: &Report, r: &Report) -> Option<String> {
    // Phases are named within their seed (Featherstitch's and xsyncfs's
    // are both "PostMark").
    let again = r.cells.iter().find(|c| {
        m.cells
            .iter()
            .any(|d| (d.seed, d.phase, d.system) == (c.seed, c.phase, c.system))
    });
    if r.machine != m.machine {
        Some(format!(
            "another machine ({:?}, not {:?})",
            r.machine, m.machine
        ))
    } else if r.settings.runs != m.settings.runs {
        Some(format!("{} runs, not {}", r.settings.runs, m.settings.runs))
    } else if !same_sizes(&r.settings.scale, &m.settings.scale) {
        Some("other sizes".to_string())
    } else {
        again.map(|c| format!("{} on {} measured again", c.phase, c.label))
    }
}

/// `r`'s settings, probes, systems and cells added to `m`'s.
fn absorb(m: &mut Report, r: Report) {
    let s = &mut m.settings;
    let (i, more) = (&mut s.inputs, r.settings.inputs);
    i.tree = i.tree.take().or(more.tree);
    s.scale.tree_files = s.scale.tree_files.or(r.settings.scale.tree_files);
    i.project = i.project.take().or(more.project);
    s.caches_dropped &= r.settings.caches_dropped;
    for t in more.tools {
        if !i.tools.contains(&t) {
            i.tools.push(t);
        }
    }
    m.device.extend(r.device);
    for sys in r.systems {
        if !m.systems.iter().any(|x| x.id == sys.id) {
            m.systems.push(sys);
        }
    }
    m.cells.extend(r.cells);
}

/// Cells with phases in the benchmark's order, systems in the order first
/// met.
fn in_order(m: &mut Report) {
    let systems: Vec<&str> = m.systems.iter().map(|s| s.id).collect();
    m.cells.sort_by_key(|c| {
        let p = PHASES
            .iter()
            .position(|p| (p.seed, p.name) == (c.seed, c.phase));
        (p, systems.iter().position(|&s| s == c.system))
    });
}

/// Equal but for the tree's size, which only untar and git use.
fn same_sizes(a: &Scale, b: &Scale) -> bool {
    let all_trees = |s: &Scale| Scale {
        tree_files: None,
        ..s.clone()
    };
    all_trees(a) == all_trees(b)
}

pub(super) fn build(settings: Settings, m: Measured) -> Report {
    let mut r = Report::new(settings, m, |runs| cell(&PHASES[runs.phase], runs));
    r.goals = goals(&r.cells);
    r
}

/// ccfs's applications (§4.4) and how many times ext4 data=ordered's
/// speed the stream configuration should reach on each.
const APPS: [(&str, f64); 4] = [
    ("SQLite insert (rollback)", 10.0),
    ("SQLite insert (WAL)", 10.0),
    ("git add + commit", 10.0),
    ("LevelDB put", 5.0),
];

/// The goals: the stream configuration's ([`stream_goals`]) and the
/// patchgroups' ([`patchgroup_goals`]).
fn goals(cells: &[Cell]) -> Vec<Goal> {
    let mut out = stream_goals(cells);
    out.extend(patchgroup_goals(cells));
    out
}

/// The IMAP move through the mbox server in each regime.
const IMAP_FSYNC: &str = "IMAP move (mbox, fsync)";
const IMAP_PG: &str = "IMAP move (mbox, patchgroups)";
const IMAP_NOSYNC: &str = "IMAP move (mbox, no sync)";

/// Featherstitch's claims for patchgroups (§8.5, Figure 11), on each
/// stitchfs system that ran the move with them: faster than the same
/// system with the server syncing at every operation, in every mode (the
/// paper: 37× in full journal, 2.3× in soft updates); and, in journal
/// modes, 11× ext4 data=ordered with the fsync server (the paper: full
/// journaling with patchgroups 11–13× ext3 with the unmodified server).
fn patchgroup_goals(cells: &[Cell]) -> Vec<Goal> {
    let cell = |sys: &str, phase: &str| {
        let key = ("Featherstitch", phase, sys);
        cells.iter().find(|c| (c.seed, c.phase, c.system) == key)
    };
    let ratio = |pg: &Cell, sys: &str| {
        cell(sys, IMAP_FSYNC).and_then(|f| paired_ratio(&speeds(pg), &speeds(f)))
    };
    let mut out = Vec::new();
    for pg in cells.iter().filter(|c| c.phase == IMAP_PG) {
        let consistency = systems::select(pg.system)
            .ok()
            .and_then(|s| s[0].stitchfs_consistency());
        if pg.summary.skipped.is_some() || consistency.is_none() {
            continue;
        }
        out.push(Goal {
            system: pg.system,
            what: "IMAP move (mbox): patchgroups vs the same system syncing at every \
                   operation (Featherstitch: faster in every mode)"
                .into(),
            measured: ratio(pg, pg.system),
            limit: 1.0,
            floor: None,
        });
        if consistency == Some("journal") {
            out.push(Goal {
                system: pg.system,
                what: "IMAP move (mbox): patchgroups vs ext4 data=ordered syncing at every \
                       operation (Featherstitch: full journal with patchgroups 11–13× ext3)"
                    .into(),
                measured: ratio(pg, "ext4"),
                limit: 11.0,
                floor: None,
            });
        }
    }
    // The bound on that last claim here: the same server syncing nothing
    // at all on ext4, against it syncing at every operation. No regime
    // that makes anything durable moves the messages faster than one that
    // makes nothing durable on the same kernel file system, so where this
    // is below 11, so is every patchgroup figure above.
    let bound = cell("ext4", IMAP_NOSYNC).zip(cell("ext4", IMAP_FSYNC));
    if let Some((none, fsync)) = bound.filter(|(n, _)| n.summary.skipped.is_none()) {
        if !out.is_empty() {
            out.push(Goal {
                system: none.system,
                what: "IMAP move (mbox): the server syncing nothing vs syncing at every \
                       operation, the most any regime can gain over ext4's fsync server \
                       on this machine (Featherstitch's 11–13× needs 11)"
                    .into(),
                measured: paired_ratio(&speeds(none), &speeds(fsync)),
                limit: 11.0,
                floor: None,
            });
        }
    }
    out
}

/// The goals of `stitchfs-stream` on each application it ran: at least
/// 0.8 of the ceiling's speed (`stitchfs-ceiling`: every fsync dropped, no
/// order), and [`APPS`]'s multiple of ext4's, beside what the FUSE floor
/// with every fsync dropped reaches against ext4 (where it misses too,
/// FUSE's cost a request, not the disk, bounds the result).
fn stream_goals(cells: &[Cell]) -> Vec<Goal> {
    let cell = |sys: &str, phase: &str| {
        let key = ("ccfs", phase, sys);
        cells.iter().find(|c| (c.seed, c.phase, c.system) == key)
    };
    let mut out = Vec::new();
    for (phase, times) in APPS {
        let Some(stream) = cell("stitchfs-stream", phase) else {
            continue;
        };
        let ceiling = cell("stitchfs-ceiling", phase);
        out.push(Goal {
            system: stream.system,
            what: format!("{phase}: speed vs the ceiling (stitchfs async, fsyncs dropped)"),
            measured: ceiling.and_then(|c| paired_ratio(&speeds(stream), &speeds(c))),
            limit: 0.8,
            floor: None,
        });
        out.push(Goal {
            system: stream.system,
            what: format!("{phase}: speed vs ext4 data=ordered"),
            measured: stream.vs_ext4,
            limit: times,
            floor: cell("fuse-floor-nofsync", phase).and_then(|c| c.vs_ext4),
        });
    }
    out
}

/// A cell's speed in each run: its rate, or one over its time.
fn speeds(c: &Cell) -> Vec<Option<f64>> {
    let time = c.unit == "s";
    let speed = |x: f64| if time { 1.0 / x } else { x };
    c.run_figures.iter().map(|f| f.map(speed)).collect()
}

fn cell(phase: &Phase, runs: &Runs) -> Cell {
    let figure = |x: &Sample| match phase.figure {
        Figure::Rate(_) => x.rate(),
        Figure::Time => x.seconds,
    };
    let sys = runs.system();
    // The floor over the phase's time: its fsyncs at the device's latency.
    let vs_device = runs.vs_device(|x, d| {
        let fsyncs = Some(phase.fsyncs).filter(|&f| f > 0.0)?;
        Some(x.amount * fsyncs * d.fsync_latency_s / x.seconds)
    });
    let latency = runs.median().and_then(|x| x.latency);
    Cell {
        seed: phase.seed,
        phase: phase.name,
        unit: unit(phase),
        system: sys.id,
        label: sys.label,
        figure: runs.median().map(figure),
        run_figures: runs.figures(figure),
        vs_ext4: runs.vs("ext4"),
        vs_device,
        latency_median_s: latency.map(|l| l.median_s),
        latency_p99_s: latency.map(|l| l.p99_s),
        summary: runs.summary(),
    }
}

/// The report as Markdown.
pub fn table(r: &Report) -> String {
    let s = &r.settings;
    let failures = r.cells.iter().filter_map(|c| {
        let e = c
            .summary
            .error
            .as_deref()
            .filter(|_| c.summary.skipped.is_none())?;
        let e = e.lines().take(6).collect::<Vec<_>>().join(" / ");
        Some(format!("{} on {}: {e}", c.phase, c.label))
    });
    let first = format!(
        "The seeds' experiments through a mount: median of {} run(s), each workload on \
         storage made fresh (a {} MiB image on the same disk) with caches dropped{}.\n\n",
        s.runs,
        s.scale.image_bytes >> 20,
        report::caches(s.caches_dropped),
    );
    first
        + &report::testbed(&r.machine, &r.device, false)
        + &sizes(s)
        + &report::skipped_systems(&r.systems, "Systems skipped")
        + &cells(&r.cells)
        + &requests(&r.cells)
        + &report::requests_by_opcode(
            r.cells
                .iter()
                .map(|c| (format!("{} {} on {}", c.seed, c.phase, c.label), &c.summary)),
        )
        + NOTES
        + &external_synchrony(&r.cells)
        + &section("Failures", failures)
        + &not_run(r)
        + &report::goals(&r.goals)
}

/// The sizes, inputs and tools of the run.
fn sizes(s: &Settings) -> String {
    let (sc, i) = (&s.scale, &s.inputs);
    let pm = |p: &super::PostMark| {
        format!(
            "{} files of {}–{} B, {} transactions",
            p.files, p.min_size, p.max_size, p.transactions
        )
    };
    let tools = if i.tools.is_empty() {
        "–".to_string()
    } else {
        i.tools.join("; ")
    };
    format!(
        "Sizes: Seltzer micro up to {} files a size, at most {} MiB a size; 0-length \
         create+delete ×{}; PostMark small {}; large {}; Featherstitch {}; xsyncfs {}; \
         source tree {}; C project {}; SQLite {} inserts of {} B; LevelDB {} puts of {} B; \
         fsync tests {} operations each; IMAP {} messages of {} B; KV {} PUTs a phase of \
         {}–{} B.\n\nTools: {tools}.\n\n",
        sc.micro_files,
        sc.micro_bytes >> 20,
        sc.zero_files,
        pm(&sc.postmark_small),
        pm(&sc.postmark_large),
        pm(&sc.postmark_fst),
        pm(&sc.postmark_xsyncfs),
        i.tree.as_deref().unwrap_or("none"),
        i.project.as_deref().unwrap_or("none"),
        sc.sqlite_inserts,
        sc.sqlite_bytes,
        sc.leveldb_puts,
        sc.leveldb_bytes,
        sc.fsync_ops,
        sc.imap_messages,
        sc.imap_bytes,
        sc.kv_requests,
        sc.kv_min_bytes,
        sc.kv_max_bytes,
    )
}

/// The phases of requests (kv) that have latencies: their rate and the
/// time a request waited for its answer; nothing if none ran.
fn requests(cells: &[Cell]) -> String {
    let timed: Vec<&Cell> = cells
        .iter()
        .filter(|c| c.figure.is_some() && c.latency_median_s.is_some())
        .collect();
    if timed.is_empty() {
        return String::new();
    }
    let mut t = Table::new(
        "workload | system | result | vs ext4 ordered | median latency ms | p99 latency ms",
        2,
    );
    let ms = |x: Option<f64>| or_dash(x, |x| markdown::figure(x * 1e3));
    for c in timed {
        t.row(
            &[c.phase, c.label],
            &[
                format!(
                    "{} {}",
                    markdown::figure(c.figure.unwrap_or(f64::NAN)),
                    c.unit
                ),
                ratio(c.vs_ext4),
                ms(c.latency_median_s),
                ms(c.latency_p99_s),
            ],
        );
    }
    format!(
        "\nRequests: a PUT's time from its send to its answer, over every request of the \
         median run.\n\n{}",
        t.text()
    )
}

/// The systems xsyncfs compares stitchfs under `stitchfs xsync` with: the
/// same mount with the programs' own fsyncs, ext4 synchronous (`-o sync`)
/// and ext4 journaling data (asynchronous, as it is).
const XSYNC_BASES: [&str; 3] = ["stitchfs", "ext4-sync", "ext4-journal"];

/// For each phase stitchfs ran under xsync: its speed over each of
/// [`XSYNC_BASES`]' (median of the per-run ratios); nothing if it ran
/// none.
fn external_synchrony(cells: &[Cell]) -> String {
    let cell = |sys: &str, c: &Cell| {
        cells
            .iter()
            .find(|d| (d.seed, d.phase, d.system) == (c.seed, c.phase, sys))
    };
    let lines = cells
        .iter()
        .filter(|c| c.system == "stitchfs-xsync" && c.figure.is_some())
        .map(|x| {
            let vs: Vec<String> = XSYNC_BASES
                .iter()
                .filter_map(|&sys| {
                    let base = cell(sys, x)?;
                    let r = paired_ratio(&speeds(x), &speeds(base))?;
                    Some(format!("{r:.2}× {}", base.label))
                })
                .collect();
            let vs = if vs.is_empty() {
                "none of stitchfs, ext4 -o sync, ext4 data=journal ran beside it".to_string()
            } else {
                vs.join(", ")
            };
            format!("{} {}: {vs}", x.seed, x.phase)
        });
    section(
        "External synchrony (stitchfs under xsync, speed against each system; above 1 is faster)",
        lines.collect::<Vec<_>>(),
    )
}

/// The table: a row per cell.
fn cells(cells: &[Cell]) -> String {
    let mut t = Table::new(
        "seed | workload | system | result | vs ext4 ordered | vs device floor | time s | \
         CPU s (client + server) | FS blocks written | FS flushes | disk MB written | disk flushes | \
         FUSE requests per op",
        3,
    );
    for c in cells {
        let names = [c.seed, c.phase, c.label];
        report::cell_row(&mut t, &names, &c.summary, c.figure, |x| figures(c, x));
    }
    t.text()
}

/// A measured cell's figures, after its names.
fn figures(c: &Cell, figure: f64) -> Vec<String> {
    let u = c.summary.usage.clone().unwrap_or_default();
    let cpu = match u.server_cpu {
        Some(sv) => format!("{:.2} + {sv:.2}", u.client_cpu),
        None => format!("{:.2}", u.client_cpu),
    };
    vec![
        format!("{} {}", markdown::figure(figure), c.unit),
        ratio(c.vs_ext4),
        ratio(c.vs_device),
        format!("{:.2}", c.summary.seconds.unwrap_or(f64::NAN)),
        cpu,
        or_dash(u.fs_bytes_written, |b| format!("{}", b / 4096)),
        or_dash(u.fs_flushes, |x| x.to_string()),
        mb(u.disk_bytes_written),
        or_dash(u.disk_flushes, |x| x.to_string()),
        report::requests_per_op(&c.summary),
    ]
}

/// What the columns mean.
const NOTES: &str =
    "\nResult: a rate, or the phase's time in seconds; every phase ends with a syncfs \
     of the mount, inside the timing. vs ext4 ordered: speed relative to ext4 \
     data=ordered, the median of per-run ratios (above 1 is faster). vs device floor: \
     for fsync-bound phases, the time the phase's fsyncs alone would take at the \
     device's 4 KiB write + fdatasync latency (same run's probe) over the phase's time \
     (1.0 = at the device's limit; above 1, fewer device flushes than the \
     program's fsyncs; SQLite's rollback journal counted at 2 fsyncs an insert, WAL \
     and a LevelDB put at 1, lower bounds). CPU: the benchmark process and the tools it ran (the kernel's file system \
     work happens in their calls) + the FUSE server. FS blocks (4 KiB) written and FS \
     flushes: the loop device's counts for the kernel's file systems; for FUSE \
     servers, the server's write_bytes (flushes are not seen per file system: see the \
     disk's). Disk: the host device, device-wide (other activity on the machine shows \
     there too). Counts run from a phase's start to the next phase's, or to the end \
     of the unmount after it. FUSE requests per op: the requests a stitchfs server \
     served (its own count, `stitchfs stats`; up to the unmount, the three that read \
     the count included) per unit of the result (per phase for a timed one); by \
     opcode in the list above.\n\n\
     Systems that launch the programs: stitchfs journal, stream ignoring fsync \
     (`stitchfs-stream`) runs them in stream `bench` with IGNORE_FSYNC, their fsyncs \
     ordering only; the SQLite and LevelDB drivers call setstream themselves and \
     streamsync once after their last transaction (the commit point: the end of the \
     batch, to which every system is timed), other programs run under `stitchfs run \
     --stream bench --ignore-fsync`, which makes the stream durable when each exits; \
     stitchfs softupdates, stream ignoring fsync (`stitchfs-softupdates-stream`, not \
     in the default set) does the same in soft updates. stitchfs journal, under xsync \
     (`stitchfs-xsync`) runs each program under `stitchfs xsync`: its fsyncs return at \
     once, and what it prints (and, for the KV server, each answer, through xsync's \
     proxy) is held until what it changed before is durable; the wrapper exits once \
     all of it is. stitchfs async, fsyncs dropped (`stitchfs-ceiling`), and the FUSE floor, fsyncs \
     dropped, run them under eatmydata: no fsync and no order, the phase's final sync \
     (inside the timing, as on every system) making it all durable; the ceiling of \
     what ignoring fsync can give. A workload done in the benchmark process (the \
     Seltzer microbenchmarks, the fsync tests, IMAP, whose servers start before the \
     phase) cannot be launched so: \"skipped: not applicable\" on those systems. \
     IMAP move (mbox): Featherstitch's IMAP test (§8.5) through an mbox IMAP server of \
     the benchmark's own, one COPY and one STORE +FLAGS (\\Deleted) a message, then \
     EXPUNGE, CHECK and the STATUS that checks the move, timed from the client's \
     connection to its logout; fsync: the server syncs after each COPY, a rewritten \
     mailbox before and after its rename (EXPUNGE), and at CHECK; patchgroups: each \
     command's changes in a patchgroup depending on the previous command's, pg_sync at \
     EXPUNGE and CHECK, no fsync; stitchfs systems only (\"not applicable\" \
     elsewhere); no sync: the same server syncing nothing (unsafe; the floor of the \
     move on each system). KV PUT: xsyncfs's server experiment, a key-value server of \
     the benchmark's own (kvd) that stores each value as a file and fsyncs it and its \
     directory before it answers a PUT, under 1, 4 and 16 clients of the benchmark \
     process sending PUTs one after another on their own connections; timed from the \
     first connection to the last answer, then every key read back from the mount; the \
     systems without fsync or in a stream answer before the value is durable (unsafe). \
     Goals: the stream configuration within 20% of the ceiling, and at \
     least 10× ext4 data=ordered on SQLite and Git, 5× on LevelDB; where the FUSE \
     floor, fsyncs dropped, misses one too and is faster, FUSE's cost a request bounds \
     it, not the disk, and its verdict says so. Patchgroups, Featherstitch's claims: \
     faster than the same system with the fsync server, and in journal modes 11× ext4 \
     data=ordered with the fsync server (the paper: 11–13× ext3), bounded by what \
     ext4 gains syncing nothing.\n";

/// The phases whose workload could not run here, once each, with why (a
/// system's own reason is in the systems skipped, and a workload a system
/// does not apply to is said in the notes).
fn not_run(r: &Report) -> String {
    let mut seen = Vec::new();
    let not_run = r.cells.iter().filter_map(|c| {
        let why = c.summary.skipped.as_deref()?;
        let a_system = r.systems.iter().any(|s| s.skipped.as_deref() == Some(why));
        let unfit = why.starts_with(NOT_APPLICABLE);
        (!a_system && !unfit && !seen.contains(&c.phase)).then(|| {
            seen.push(c.phase);
            format!("{}: {why}", c.phase)
        })
    });
    section("Not run", not_run.collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seeds::Scale;
    use crate::systems::select;
    use crate::workload::{Latency, Outcome};

    fn quick_settings(runs: usize, tools: Vec<String>) -> Settings {
        Settings {
            runs,
            scale: Scale::QUICK,
            caches_dropped: true,
            scratch: "/tmp".into(),
            inputs: crate::seeds::Sources {
                tree: None,
                project: None,
                tools,
            },
        }
    }

    /// A report of `systems` where only `phase` ran, `runs` times, each
    /// doing 10 units of work in 1 s.
    fn one_phase(systems: &str, phase: usize, runs: usize) -> Report {
        let systems = select(systems).unwrap();
        let samples = systems
            .iter()
            .map(|_| {
                (0..PHASES.len())
                    .map(|p| match p == phase {
                        true => (0..runs)
                            .map(|_| Some(Ok(Sample::ran(10.0, 1.0))))
                            .collect(),
                        false => Vec::new(),
                    })
                    .collect()
            })
            .collect();
        let settings = quick_settings(runs, vec![format!("tool of phase {phase}")]);
        build(settings, Measured::example(&systems, samples))
    }

    /// The index of the phase named `name`.
    fn index(name: &str) -> usize {
        PHASES.iter().position(|p| p.name == name).unwrap()
    }

    /// `text` holds `part`.
    fn has(text: &str, part: &str) {
        assert!(text.contains(part), "{part:?} not in:\n{text}");
    }

    /// Files of reports, in a directory removed at the end of the test.
    struct Files(tempfile::TempDir);

    impl Files {
        fn new() -> Files {
            Files(tempfile::tempdir().unwrap())
        }

        /// `json` written to the file `name`.
        fn write(&self, name: &str, json: &str) -> std::path::PathBuf {
            let p = self.0.path().join(name);
            std::fs::write(&p, json).unwrap();
            p
        }

        fn report(&self, name: &str, r: &Report) -> std::path::PathBuf {
            self.write(name, &serde_json::to_string(r).unwrap())
        }
    }

    #[test]
    fn reports_of_separate_workloads_merge_into_one() {
        let files = Files::new();
        // Given in the benchmark's reverse order, with ext4-sync in one only.
        let rollback = index("SQLite insert (rollback)");
        let sqlite = files.report(
            "sqlite.json",
            &one_phase("stitchfs,ext4,ext4-sync", rollback, 3),
        );
        let micro = files.report("micro.json", &one_phase("stitchfs,ext4", 0, 3));
        let m = merge(&[&sqlite, &micro]).unwrap();
        let order: Vec<(&str, &str)> = m.cells.iter().map(|c| (c.phase, c.system)).collect();
        assert_eq!(
            order,
            [
                (PHASES[0].name, "stitchfs"),
                (PHASES[0].name, "ext4"),
                (PHASES[rollback].name, "stitchfs"),
                (PHASES[rollback].name, "ext4"),
                (PHASES[rollback].name, "ext4-sync"),
            ]
        );
        assert_eq!(m.device.len(), 6);
        assert_eq!(m.settings.inputs.tools.len(), 2);
        let text = table(&m);
        has(&text, "| Seltzer | create 4 KB | stitchfs journal | 10.0");
        has(&text, "| ccfs | SQLite insert (rollback) | ext4 -o sync |");
        // Two seeds' phases of one name are two phases.
        let postmark = |seed: &str| {
            let p = PHASES
                .iter()
                .position(|p| (p.seed, p.name) == (seed, "PostMark"));
            files.report(seed, &one_phase("ext4", p.unwrap(), 3))
        };
        let both = merge(&[postmark("xsyncfs"), postmark("Featherstitch")]).unwrap();
        let seeds: Vec<&str> = both.cells.iter().map(|c| c.seed).collect();
        assert_eq!(seeds, ["Featherstitch", "xsyncfs"]);
    }

    /// What cannot be one run's report is refused, saying why.
    #[test]
    fn reports_that_cannot_be_one_are_refused() {
        let files = Files::new();
        let micro = files.report("micro.json", &one_phase("stitchfs,ext4", 0, 3));
        let check = |json: String, expect: &str| {
            let second = files.write("second.json", &json);
            has(
                &format!("{:#}", merge(&[&micro, &second]).unwrap_err()),
                expect,
            );
        };
        let json = |r: Report| serde_json::to_string(&r).unwrap();
        check(
            json(one_phase("ext4", 0, 3)),
            "create 4 KB on ext4 data=ordered measured again",
        );
        check(json(one_phase("ext4", 1, 2)), "2 runs, not 3");
        let mut other = one_phase("ext4", 1, 3);
        other.machine.cores += 1;
        check(json(other), "another machine");
        let mut bigger = one_phase("ext4", 1, 3);
        bigger.settings.scale.zero_files += 1;
        check(json(bigger), "other sizes");
        check(
            r#"{ "settings": {} }"#.into(),
            "second.json: not a seeds report",
        );
        let mut renamed = serde_json::to_value(one_phase("ext4", 1, 3)).unwrap();
        renamed["cells"][0]["system"] = "ext5".into();
        check(
            renamed.to_string(),
            "not a name of this benchmark: \"ext5\"",
        );
    }

    #[test]
    fn figures_ratios_and_floor() {
        let systems = select("stitchfs,ext4").unwrap();
        let n = PHASES.len();
        // append+fsync: 100 ops; stitchfs takes 2 s, ext4 1 s in run 1; 4 s
        // and 1 s in run 2. git: a time.
        let (append, git) = (index("append+fsync"), index("git add + commit"));
        let mk = |s: usize| -> Vec<Vec<Option<Outcome>>> {
            (0..n)
                .map(|p| match p {
                    _ if p == append => [[2.0, 4.0], [1.0, 1.0]][s]
                        .iter()
                        .map(|&t| Some(Ok(Sample::ran(100.0, t))))
                        .collect(),
                    _ if p == git => vec![
                        Some(Ok(Sample::ran(1.0, [10.0, 5.0][s]))),
                        Some(Err("boom".into())),
                    ],
                    _ => Vec::new(),
                })
                .collect()
        };
        let mut m = Measured::example(&systems, vec![mk(0), mk(1)]);
        m.not_run[index("LevelDB put")] =
            Some("python3 cannot import plyvel: apt-get install python3-plyvel".to_string());
        let r = build(quick_settings(2, Vec::new()), m);
        let cell = |p: &str, s: &str| {
            r.cells
                .iter()
                .find(|c| c.phase == p && c.system == s)
                .unwrap()
        };
        let a = cell("append+fsync", "stitchfs");
        // Rates 50 and 25 against 100 and 100: ratios 0.5 and 0.25.
        assert_eq!(a.vs_ext4, Some(0.375));
        // 100 fsyncs × 1 ms = 0.1 s floor, over 2 s and 4 s.
        assert!((a.vs_device.unwrap() - 0.0375).abs() < 1e-12);
        let g = cell("git add + commit", "stitchfs");
        assert_eq!((g.figure, g.unit), (Some(10.0), "s"));
        assert_eq!(g.vs_ext4, Some(0.5));
        assert!(g
            .summary
            .error
            .as_deref()
            .unwrap()
            .starts_with("1 of 2 runs failed"));
        assert!(cell("LevelDB put", "ext4").summary.skipped.is_some());
        let text = table(&r);
        has(
            &text,
            "| ccfs | git add + commit | stitchfs journal | 10.0 s | 0.50 |",
        );
        has(&text, "- LevelDB put: python3 cannot import plyvel");
        // No stream configuration ran: no goals.
        assert!(r.goals.is_empty() && !text.contains("\nGoals:\n"));
    }

    /// The systems of the stream goals, on the WAL and git phases as
    /// `phases` selects: WAL at these rates and git in these seconds, in
    /// two runs each (the second run slow for every system but ext4).
    fn apps(phases: &[&str]) -> Report {
        let systems = select("stitchfs-stream,stitchfs-ceiling,ext4,fuse-floor-nofsync").unwrap();
        let rates = [
            [900.0, 450.0],
            [1000.0, 500.0],
            [100.0, 100.0],
            [1200.0, 600.0],
        ];
        let seconds = [[2.0, 2.0], [1.0, 1.0], [10.0, 10.0], [1.0, 1.0]];
        let (wal, git) = (index("SQLite insert (WAL)"), index("git add + commit"));
        let selected = |p: usize| phases.contains(&PHASES[p].name);
        let samples = (0..systems.len())
            .map(|s| {
                (0..PHASES.len())
                    .map(|p| match p {
                        _ if !selected(p) => Vec::new(),
                        _ if p == wal => rates[s]
                            .iter()
                            .map(|&r| Some(Ok(Sample::ran(r, 1.0))))
                            .collect(),
                        _ if p == git => seconds[s]
                            .iter()
                            .map(|&t| Some(Ok(Sample::ran(1.0, t))))
                            .collect(),
                        _ => vec![None, None],
                    })
                    .collect()
            })
            .collect();
        let mut m = Measured::example(&systems, samples);
        if selected(index("append+fsync")) {
            // Not applicable to the systems that launch programs.
            for s in [0, 1, 3] {
                m.not_applicable[s][index("append+fsync")] = Some(format!(
                    "{NOT_APPLICABLE}: fsync works in the benchmark process"
                ));
            }
        }
        build(quick_settings(2, Vec::new()), m)
    }

    #[test]
    fn the_stream_configuration_is_held_to_its_goals() {
        let r = apps(&["SQLite insert (WAL)", "git add + commit"]);
        let goal = |what: &str| {
            let g = r.goals.iter().find(|g| g.what.starts_with(what)).unwrap();
            (g.measured, g.verdict())
        };
        // 0.9 of the ceiling in both runs.
        assert_eq!(
            goal("SQLite insert (WAL): speed vs the ceiling"),
            (Some(0.9), "met".to_string())
        );
        // 9× and 4.5× ext4; the floor, fsyncs dropped, 12× and 6×: short
        // of 10× too and faster, so FUSE bounds it.
        assert_eq!(
            goal("SQLite insert (WAL): speed vs ext4"),
            (
                Some(6.75),
                "not met; the FUSE floor reaches only 9.00 here".to_string()
            )
        );
        // Git, a time: half the ceiling's speed; 5× ext4, where the floor
        // reaches 10×: stitchfs's own miss.
        assert_eq!(
            goal("git add + commit: speed vs the ceiling"),
            (Some(0.5), "not met".to_string())
        );
        assert_eq!(
            goal("git add + commit: speed vs ext4"),
            (Some(5.0), "not met".to_string())
        );
        assert_eq!(r.goals.len(), 4, "{:?}", r.goals);
        has(
            &table(&r),
            "- stitchfs-stream SQLite insert (WAL): speed vs ext4 data=ordered: 6.75 \
             (goal ≥ 10.0): not met; the FUSE floor reaches only 9.00 here\n",
        );
        // Reports of one application each merge into the goals of both.
        let files = Files::new();
        let wal = files.report("wal.json", &apps(&["SQLite insert (WAL)"]));
        let git = files.report("git.json", &apps(&["git add + commit"]));
        let merged = merge(&[&wal, &git]).unwrap();
        let whats = |r: &Report| r.goals.iter().map(|g| g.what.clone()).collect::<Vec<_>>();
        assert_eq!(whats(&merged), whats(&r));
    }

    /// Patchgroups are held to Featherstitch's claims on each stitchfs
    /// system that ran them, run by run: faster than the same system's
    /// fsync server, and in a journal mode 11× ext4's, beside the bound
    /// on that: what ext4 gains syncing nothing at all.
    #[test]
    fn patchgroups_are_held_to_the_papers_claims() {
        let systems = select("stitchfs,stitchfs-softupdates,ext4").unwrap();
        let (fsync, pg, none) = (index(IMAP_FSYNC), index(IMAP_PG), index(IMAP_NOSYNC));
        // Messages a second in two runs: the fsync server, then patchgroups
        // (not applicable to ext4), then the server syncing nothing (run on
        // ext4 alone here).
        let rates = [
            ([100.0, 50.0], Some([1500.0, 500.0]), None),
            ([40.0, 40.0], Some([60.0, 60.0]), None),
            ([100.0, 100.0], None, Some([300.0, 250.0])),
        ];
        let runs = |r: &[f64; 2]| -> Vec<Option<Outcome>> {
            r.iter().map(|&r| Some(Ok(Sample::ran(r, 1.0)))).collect()
        };
        let samples = rates
            .iter()
            .map(|(f, p, n)| {
                (0..PHASES.len())
                    .map(|phase| match (phase, p, n) {
                        _ if phase == fsync => runs(f),
                        (_, Some(p), _) if phase == pg => runs(p),
                        _ if phase == pg => vec![None, None],
                        (_, _, Some(n)) if phase == none => runs(n),
                        _ => Vec::new(),
                    })
                    .collect()
            })
            .collect();
        let mut m = Measured::example(&systems, samples);
        m.not_applicable[2][pg] = Some(format!(
            "{NOT_APPLICABLE}: imap-pg uses patchgroups, which ext4 data=ordered does not have"
        ));
        let r = build(quick_settings(2, Vec::new()), m);
        let goals: Vec<(&str, Option<f64>, f64, String)> = r
            .goals
            .iter()
            .map(|g| (g.system, g.measured, g.limit, g.verdict()))
            .collect();
        assert_eq!(
            goals,
            [
                // 15× and 10× itself; 15× and 5× ext4.
                ("stitchfs", Some(12.5), 1.0, "met".to_string()),
                ("stitchfs", Some(10.0), 11.0, "not met".to_string()),
                // Soft updates: held to its own fsync server only.
                ("stitchfs-softupdates", Some(1.5), 1.0, "met".to_string()),
                // The bound: ext4 syncing nothing, 3× and 2.5× itself.
                ("ext4", Some(2.75), 11.0, "not met".to_string()),
            ]
        );
        let text = table(&r);
        has(
            &text,
            "| Featherstitch | IMAP move (mbox, patchgroups) | ext4 data=ordered | skipped: not applicable |",
        );
        has(
            &text,
            "- stitchfs IMAP move (mbox): patchgroups vs ext4 data=ordered syncing at every \
             operation (Featherstitch: full journal with patchgroups 11–13× ext3): 10.00 \
             (goal ≥ 11.0): not met\n",
        );
        assert!(!text.contains("Not run:"), "{text}");
    }

    /// A workload a system does not apply to is skipped in its row, and
    /// said once in the notes, not under "Not run".
    #[test]
    fn a_workload_not_applicable_is_skipped_in_its_row_only() {
        let r = apps(&["append+fsync"]);
        let text = table(&r);
        has(
            &text,
            "| ccfs | append+fsync | stitchfs async, fsyncs dropped | skipped: not applicable |",
        );
        assert!(!text.contains("Not run:"), "{text}");
        has(&text, "\"skipped: not applicable\" on those systems");
    }
    /// A phase of requests shows its latencies in its own table; stitchfs
    /// under xsync is set beside the systems xsyncfs compares it with, run
    /// by run, on each phase it ran.
    #[test]
    fn requests_show_latencies_and_xsync_its_comparison() {
        let systems = select("stitchfs-xsync,stitchfs,ext4-sync,ext4").unwrap();
        let kv = index("KV PUT, 4 clients");
        let postmark = PHASES
            .iter()
            .position(|p| (p.seed, p.name) == ("xsyncfs", "PostMark"))
            .unwrap();
        // Requests a second in two runs, each with its latencies.
        let rates = [[800.0, 400.0], [100.0, 100.0], [20.0, 10.0], [200.0, 200.0]];
        let samples = rates
            .iter()
            .enumerate()
            .map(|(s, r)| {
                (0..PHASES.len())
                    .map(|p| match p {
                        _ if p == kv => r
                            .iter()
                            .map(|&r| {
                                let mut x = Sample::ran(r, 1.0);
                                x.latency = Latency::of(vec![0.001 * (s + 1) as f64, 0.004]);
                                Some(Ok(x))
                            })
                            .collect(),
                        // PostMark: xsync fails once; ext4-sync fails both.
                        _ if p == postmark => match s {
                            0 => vec![Some(Ok(Sample::ran(1.0, 2.0))), Some(Err("boom".into()))],
                            2 => vec![Some(Err("bang".into())), Some(Err("bang".into()))],
                            _ => vec![Some(Ok(Sample::ran(1.0, 4.0))); 2],
                        },
                        _ => Vec::new(),
                    })
                    .collect()
            })
            .collect();
        let r = build(
            quick_settings(2, Vec::new()),
            Measured::example(&systems, samples),
        );
        let cell = r
            .cells
            .iter()
            .find(|c| c.phase == "KV PUT, 4 clients" && c.system == "stitchfs-xsync")
            .unwrap();
        // The median run by rate is the faster: latencies 1 ms and 4 ms.
        assert_eq!(cell.latency_median_s, Some(0.0025));
        assert_eq!(cell.latency_p99_s, Some(0.004));
        let text = table(&r);
        has(
            &text,
            "| KV PUT, 4 clients | stitchfs journal, under xsync | 800 requests/s | 3.00 | \
             2.50 | 4.00 |\n",
        );
        has(
            &text,
            "| KV PUT, 4 clients | ext4 -o sync | 20.0 requests/s | 0.08 | 3.50 | 4.00 |\n",
        );
        // Runs 8× and 4× stitchfs, 40× and 40× ext4 -o sync; ext4-journal
        // did not run.
        has(
            &text,
            "- xsyncfs KV PUT, 4 clients: 6.00× stitchfs journal, 40.00× ext4 -o sync\n",
        );
        // PostMark: one run each, twice as fast as stitchfs; ext4 -o sync
        // has no run to pair.
        has(&text, "- xsyncfs PostMark: 2.00× stitchfs journal\n");
        // Only phases of requests carry latencies, in JSON too.
        let json = serde_json::to_value(&r).unwrap();
        let cells = json["cells"].as_array().unwrap();
        assert!(cells
            .iter()
            .all(|c| (c["phase"].as_str().unwrap().starts_with("KV"))
                == c.get("latency_median_s").is_some()));
    }
}
