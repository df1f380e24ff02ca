//! The mount benchmark's results: a cell per phase and system (medians over
//! the runs, ratios taken run by run), the goals measured against them, and
//! the Markdown report.

use super::{Phase, Scale, Settings, PHASES};
use crate::markdown::{figure, mb, or_dash, ratio, section, Table};
use crate::report::{self, Goal, Runs, Summary};
use crate::session::Measured;
use crate::systems::{DeviceLimits, Launch, System};
use crate::workload::Sample;
use serde::Serialize;

/// Everything a run of the benchmark found, and the goals measured.
pub type Report = report::Report<Settings, Cell>;

/// One phase on one system.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub phase: &'static str,
    pub unit: &'static str,
    pub system: &'static str,
    pub label: &'static str,
    /// Median rate of the runs that succeeded, and each run's (null: failed).
    pub rate: Option<f64>,
    pub run_rates: Vec<Option<f64>>,
    /// Medians of the per-run ratios of this rate to the baseline's.
    pub vs_ext4: Option<f64>,
    pub vs_fuse2fs: Option<f64>,
    pub vs_bindfs: Option<f64>,
    /// Against the FUSE floor (`fuse-floor`): the share of what any FUSE
    /// server mounted this way reaches here.
    pub vs_floor: Option<f64>,
    /// fsync-bound phases: fsyncs per second over the device's 4 KiB
    /// write + fdatasync rate; largefile: MB/s over the device's sequential
    /// bandwidth (each run against its own probe; the median).
    pub vs_device: Option<f64>,
    pub fsyncs_per_s: Option<f64>,
    #[serde(flatten)]
    pub summary: Summary,
}

const BASELINES: [&str; 4] = ["ext4", "fuse2fs", "bindfs", "fuse-floor"];

pub(super) fn build(settings: Settings, m: Measured) -> Report {
    let systems = m.systems.clone();
    let mut r = Report::new(settings, m, |runs| cell(&PHASES[runs.phase], runs));
    r.goals = goals(&r.cells, &systems);
    r
}

fn cell(phase: &Phase, runs: &Runs) -> Cell {
    let rate = runs.median().map(Sample::rate);
    let [vs_ext4, vs_fuse2fs, vs_bindfs, vs_floor] = BASELINES.map(|b| runs.vs(b));
    let sys = runs.system();
    Cell {
        phase: phase.name,
        unit: phase.unit,
        system: sys.id,
        label: sys.label,
        rate,
        run_rates: runs.rates(),
        vs_ext4,
        vs_fuse2fs,
        vs_bindfs,
        vs_floor,
        vs_device: runs.vs_device(|x, d| Some(x.rate() * device_floor(phase, d)?)),
        fsyncs_per_s: rate
            .filter(|_| phase.fsyncs > 0.0)
            .map(|r| r * phase.fsyncs),
        summary: runs.summary(),
    }
}

/// Seconds the device needs for one unit of `phase`'s work at best: its
/// fsyncs, one after another, or (largefile) its MB written in sequence.
fn device_floor(phase: &Phase, d: &DeviceLimits) -> Option<f64> {
    match phase.name {
        _ if phase.fsyncs > 0.0 => Some(phase.fsyncs * d.fsync_latency_s),
        "largefile" => Some(1e6 / d.seq_write_bytes_per_s),
        _ => None,
    }
}

/// The goals, for every stitchfs configuration that ran: smallfile ≥ 1.3×
/// ext4, largefile ≥ 0.9× ext4, every phase ≥ 2× fuse2fs, stat ≥ 80% of
/// bindfs; each beside what the FUSE floor measured on it.
fn goals(cells: &[Cell], systems: &[&'static System]) -> Vec<Goal> {
    let mut out = Vec::new();
    let cell = |sys: &str, phase: &str| cells.iter().find(|c| c.system == sys && c.phase == phase);
    // A system that launches programs runs none of these workloads.
    let stitchfs = |s: &&&System| s.id.starts_with("stitchfs") && s.launch() == Launch::Direct;
    for sys in systems.iter().filter(stitchfs) {
        // Only for the phases that ran.
        let mut goal = |phase: &str, base: &str, measured: fn(&Cell) -> Option<f64>, limit| {
            if let Some(c) = cell(sys.id, phase) {
                out.push(Goal {
                    system: sys.id,
                    what: format!("{phase} rate vs {base}"),
                    measured: measured(c),
                    limit,
                    floor: cell("fuse-floor", phase).and_then(measured),
                });
            }
        };
        goal("smallfile", "ext4 data=ordered", |c| c.vs_ext4, 1.3);
        goal("largefile", "ext4 data=ordered", |c| c.vs_ext4, 0.9);
        for p in &PHASES {
            goal(p.name, "fuse2fs", |c| c.vs_fuse2fs, 2.0);
        }
        for p in ["stat (cold)", "stat (warm)"] {
            goal(p, "bindfs", |c| c.vs_bindfs, 0.8);
        }
    }
    out
}

/// The report as Markdown: the machine and device, the table, failures and
/// goals.
pub fn table(r: &Report) -> String {
    let failures = r.cells.iter().filter_map(|c| {
        let e = c.summary.error.as_deref()?;
        Some(format!("{} on {}: {e}", c.phase, c.label))
    });
    let first = format!(
        "McoreFS §6 workloads through a mount: median of {} run(s), each on storage made fresh \
         with caches dropped{}.\n\n",
        r.settings.runs,
        report::caches(r.settings.caches_dropped),
    );
    first
        + &report::testbed(&r.machine, &r.device, true)
        + &workloads(&r.settings.scale)
        + &report::skipped_systems(&r.systems, "Skipped")
        + &cells(&r.cells)
        + &report::requests_by_opcode(
            r.cells
                .iter()
                .map(|c| (format!("{} on {}", c.phase, c.label), &c.summary)),
        )
        + NOTES
        + &section("Failures", failures)
        + &report::goals(&r.goals)
}

/// What the workloads do, at these sizes.
fn workloads(s: &Scale) -> String {
    format!(
        "Workloads, run in the benchmark process on the mount: smallfile, {} files in {} \
         directories, each created, written 1 KB, fsynced, closed and unlinked; largefile, \
         {:.0} MB in 1 MiB writes, then fsync; mailbench, {} threads × {} messages of {} B, \
         each thread with its own spool and mailbox, per message: write spool/tmp/M + fsync, \
         rename to spool/mess/M + fsync spool/mess, write envelope spool/tmp/eM + fsync, \
         rename to spool/todo/M + fsync spool/todo, read both, write mail/tmp/M + fsync, \
         rename to mail/new/M + fsync mail/new (6 fsyncs), unlink the queue files; \
         mailbench (full mailbox), the same after {} messages were put in each thread's \
         mail/cur (untimed, synced); create/stat/unlink, {} empty files in one directory, unmounted, caches dropped and \
         mounted again before the cold stat. Images {} MiB.\n\n",
        s.smallfile_files,
        s.smallfile_dirs,
        s.largefile_bytes as f64 / 1e6,
        s.mail_threads,
        s.mail_messages,
        s.message_bytes,
        s.mailbox_messages,
        s.meta_files,
        s.image_bytes >> 20,
    )
}

/// The table: a row per cell.
fn cells(cells: &[Cell]) -> String {
    let mut t = Table::new(
        "workload | system | rate | vs ext4 | vs fuse2fs | vs bindfs | vs floor | vs device | \
         time s | client CPU s | server CPU s | FS MB written | disk MB written | disk flushes | \
         FUSE requests per op",
        2,
    );
    for c in cells {
        let names = [c.phase, c.label];
        report::cell_row(&mut t, &names, &c.summary, c.rate, |rate| figures(c, rate));
    }
    t.text()
}

/// A measured cell's figures, after its names.
fn figures(c: &Cell, rate: f64) -> Vec<String> {
    let u = c.summary.usage.clone().unwrap_or_default();
    let device = match (c.vs_device, c.fsyncs_per_s) {
        (Some(v), Some(f)) => format!("{v:.2} ({f:.0} fsyncs/s)"),
        (Some(v), None) => format!("{v:.2}"),
        _ => "–".into(),
    };
    vec![
        format!("{} {}", figure(rate), c.unit),
        ratio(c.vs_ext4),
        ratio(c.vs_fuse2fs),
        ratio(c.vs_bindfs),
        ratio(c.vs_floor),
        device,
        format!("{:.2}", c.summary.seconds.unwrap_or(f64::NAN)),
        format!("{:.2}", u.client_cpu),
        or_dash(u.server_cpu, |x| format!("{x:.2}")),
        mb(u.fs_bytes_written),
        mb(u.disk_bytes_written),
        or_dash(u.disk_flushes, |x| x.to_string()),
        report::requests_per_op(&c.summary),
    ]
}

/// What the columns mean.
const NOTES: &str = "\nRatios are medians of per-run ratios (a run's systems run back to back). \
     vs floor: against the FUSE floor (`stitchfs bench floor-server`), a server mounted \
     as stitchfs is that keeps its namespace in memory, writes file data straight into \
     its image and makes every fsync one fdatasync: what any durable FUSE file system \
     over an image could reach here. \
     vs device: fsyncs/s over the device's fsyncs/s (smallfile, mailbench), or MB/s over \
     its sequential MB/s (largefile), each run against its own probe. Counts run from a phase's start to the next phase's, \
     or to the end of the unmount after it. Client CPU: the benchmark process (the \
     kernel's file system work happens in its calls); server CPU: the FUSE server. \
     FS MB written: the loop device's writes, or the server's write_bytes. Disk: the host \
     device, device-wide. FUSE requests per op: the requests a stitchfs server served \
     (its own count; up to the unmount, the three that read the count included) per \
     unit of the rate; by opcode in the list above.\n";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systems::select;

    /// stitchfs, ext4, fuse2fs and the floor, every phase run three times
    /// at the same rates; run 2 is slow for everyone, and fuse2fs failed
    /// smallfile's run 2.
    fn example() -> Report {
        let systems = select("stitchfs,ext4,fuse2fs,fuse-floor").unwrap();
        let rates = [
            [20.0, 2.0, 30.0],
            [10.0, 1.0, 15.0],
            [5.0, 5.0, 5.0],
            [25.0, 2.5, 36.0],
        ];
        let phase = |s: usize, p: usize| {
            let run = |r: usize| match (s, p, r) {
                (2, 0, 1) => Err("boom".to_string()),
                _ => Ok(Sample::ran(rates[s][r], 1.0)),
            };
            (0..3).map(|r| Some(run(r))).collect()
        };
        let samples = (0..4)
            .map(|s| (0..PHASES.len()).map(|p| phase(s, p)).collect())
            .collect();
        let settings = Settings {
            runs: 3,
            scale: Scale::QUICK,
            caches_dropped: true,
            scratch: "/tmp".into(),
            inputs: (),
        };
        build(settings, Measured::example(&systems, samples))
    }

    fn cell<'r>(r: &'r Report, phase: &str, system: &str) -> &'r Cell {
        let is = |c: &&Cell| c.phase == phase && c.system == system;
        r.cells.iter().find(is).unwrap()
    }

    fn goal<'r>(r: &'r Report, what: &str) -> &'r Goal {
        r.goals.iter().find(|g| g.what.starts_with(what)).unwrap()
    }

    #[test]
    fn ratios_are_taken_run_by_run() {
        let r = example();
        let c = cell(&r, "smallfile", "stitchfs");
        assert_eq!(c.rate, Some(20.0));
        // Per-run ratios stay 2.0 over ext4, whatever the medians say.
        assert_eq!(c.vs_ext4, Some(2.0));
        // fuse2fs failed run 2: ratios from runs 1 and 3 only (4 and 6).
        assert_eq!(c.vs_fuse2fs, Some(5.0));
        let error = cell(&r, "smallfile", "fuse2fs").summary.error.clone();
        assert_eq!(error.as_deref(), Some("1 of 3 runs failed: boom"));
        // 20 against the floor's 25 in run 1 (and 2.0 against 2.5 in run 2).
        assert_eq!(c.vs_floor, Some(0.8));
        // 20 fsyncs/s at 1 ms each: 0.02 of the device.
        assert!((c.vs_device.unwrap() - 0.02).abs() < 1e-9);
        assert_eq!(
            cell(&r, "largefile", "stitchfs").vs_device,
            Some(20e6 / 1e8)
        );
        let text = table(&r);
        let row = "| smallfile | stitchfs journal | 20.0 files/s | 2.00 |";
        assert!(text.contains(row), "{text}");
    }

    #[test]
    fn goals_are_measured_beside_the_floor() {
        let r = example();
        assert_eq!(goal(&r, "smallfile rate vs ext4").verdict(), "met");
        assert_eq!(
            goal(&r, "stat (cold) rate vs bindfs").verdict(),
            "not measured"
        );
        // The floor reaches 6.1 of fuse2fs (5.0 and 7.2; fuse2fs failed run
        // 2), above the goal of 2: a miss would be stitchfs's own.
        assert_eq!(goal(&r, "smallfile rate vs fuse2fs").floor, Some(6.1));
    }
}
