//! What a mount suite's session measured comes to (`bench mount`, `bench
//! seeds`): a cell per phase and system, reduced from its runs. A cell's
//! figure is the median run's (by rate), and its counts are that same
//! run's; a ratio between systems is the median of the per-run ratios,
//! taken run by run because a run's systems run back to back (a slow
//! moment of the machine slows them alike). A suite chooses its cell's
//! fields; this module gives it the runs to take them from.
//!
//! It also writes what every mount suite's report says alike (the testbed
//! paragraphs, the systems skipped, a cell's row, the goals measured), and reads a report's
//! names back as the benchmark's own ([`known_name`]): a report read back
//! names nothing else. It knows no suite.

use super::markdown::{bullets, ratio, section, Table};
use super::session::Measured;
use super::systems::{self, DeviceLimits, Machine, System, Usage};
use super::workload::{Outcome, Sample};
use serde::{Deserialize, Deserializer, Serialize};

/// Everything a run of a mount suite found: `S`, its settings; `C`, its
/// cell.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report<S, C> {
    pub settings: S,
    pub machine: Machine,
    /// The device probe of each run.
    pub device: Vec<DeviceLimits>,
    pub systems: Vec<SystemRow>,
    pub cells: Vec<C>,
    /// The suite's goals, measured from the cells (none in a report
    /// written before the suite had goals).
    #[serde(default)]
    pub goals: Vec<Goal>,
}

impl<S, C> Report<S, C> {
    /// The report of `m`, with a cell from [`Runs`] for each phase that
    /// was selected (measured, or not run for want of a tool or input) on
    /// each system, phase by phase.
    pub(crate) fn new(settings: S, m: Measured, cell: impl Fn(&Runs) -> C) -> Self {
        let selected = (0..m.not_run.len()).filter(|&p| m.selected(p));
        let cells = selected
            .flat_map(|phase| (0..m.systems.len()).map(move |system| (phase, system)))
            .map(|(phase, system)| {
                cell(&Runs {
                    phase,
                    system,
                    m: &m,
                })
            })
            .collect();
        Report {
            settings,
            systems: SystemRow::rows(&m.systems, &m.skipped),
            machine: m.machine,
            device: m.device,
            cells,
            goals: Vec::new(),
        }
    }
}

/// One of a suite's goals, measured: a ratio that should be at least
/// `limit`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Goal {
    #[serde(deserialize_with = "system_name")]
    pub system: Name,
    pub what: String,
    pub measured: Option<f64>,
    /// At least this.
    pub limit: f64,
    /// The same ratio for a FUSE floor, when it ran: a goal it misses
    /// too, where it is faster than stitchfs, is beyond any FUSE server
    /// mounted this way on this machine.
    pub floor: Option<f64>,
}

impl Goal {
    pub(crate) fn verdict(&self) -> String {
        match (self.measured, self.floor) {
            (None, _) => "not measured".into(),
            (Some(m), _) if m >= self.limit => "met".into(),
            (Some(m), Some(f)) if f < self.limit && f >= m => {
                format!("not met; the FUSE floor reaches only {f:.2} here")
            }
            (Some(_), _) => "not met".into(),
        }
    }
}

/// The goals as a report's section: one line each, with the verdict.
pub(crate) fn goals(goals: &[Goal]) -> String {
    section(
        "Goals",
        goals.iter().map(|g| {
            format!(
                "{} {}: {} (goal ≥ {:.1}): {}",
                g.system,
                g.what,
                ratio(g.measured),
                g.limit,
                g.verdict()
            )
        }),
    )
}

impl Measured {
    /// Whether phase `p`'s workload was selected: it ran, or could not.
    fn selected(&self, p: usize) -> bool {
        self.not_run[p].is_some() || self.samples.iter().any(|sys| !sys[p].is_empty())
    }
}

/// The runs of one phase on one system, beside the other systems' runs of
/// that phase.
pub(crate) struct Runs<'a> {
    pub phase: usize,
    system: usize,
    m: &'a Measured,
}

impl<'a> Runs<'a> {
    pub fn system(&self) -> &'static System {
        self.m.systems[self.system]
    }

    fn outcomes(&self) -> &'a [Option<Outcome>] {
        &self.m.samples[self.system][self.phase]
    }

    /// Each run's sample, `None` where it failed or did not run.
    fn samples(&self) -> impl Iterator<Item = Option<&'a Sample>> {
        self.outcomes().iter().map(|o| o.as_ref()?.as_ref().ok())
    }

    /// `figure` of each run (`None`: failed, or did not run).
    pub fn figures(&self, figure: impl Fn(&Sample) -> f64) -> Vec<Option<f64>> {
        self.samples().map(|x| x.map(&figure)).collect()
    }

    pub fn rates(&self) -> Vec<Option<f64>> {
        self.figures(Sample::rate)
    }

    /// The run of median rate among those that succeeded (of an even
    /// count, the upper of the middle two).
    pub fn median(&self) -> Option<&'a Sample> {
        let mut ok: Vec<&Sample> = self.samples().flatten().collect();
        ok.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
        ok.get(ok.len() / 2).copied()
    }

    /// The median of the per-run ratios of this rate to system `base`'s
    /// (`None` without `base` in the session).
    pub fn vs(&self, base: &str) -> Option<f64> {
        let b = self.m.systems.iter().position(|s| s.id == base)?;
        let base = Runs { system: b, ..*self };
        paired_ratio(&self.rates(), &base.rates())
    }

    /// The median over the runs of `f(sample, that run's device probe)`.
    pub fn vs_device(&self, f: impl Fn(&Sample, &DeviceLimits) -> Option<f64>) -> Option<f64> {
        let per_run = self.samples().zip(&self.m.device);
        median(per_run.filter_map(|(x, d)| f(x?, d)).collect())
    }

    pub fn summary(&self) -> Summary {
        let mid = self.median();
        let errors = self
            .outcomes()
            .iter()
            .flatten()
            .filter_map(|o| o.as_ref().err());
        let why_not = &self.m.not_run[self.phase];
        let unfit = &self.m.not_applicable[self.system][self.phase];
        Summary {
            seconds: mid.map(|m| m.seconds),
            amount: mid.map(|m| m.amount),
            usage: mid.map(|m| m.usage.clone()),
            error: failed_runs(errors, self.outcomes().len()),
            skipped: why_not
                .clone()
                .or_else(|| unfit.clone())
                .or_else(|| self.m.skipped[self.system].clone()),
        }
    }
}

/// What a cell says besides its figures, the same in every mount suite
/// (the last fields of its JSON object).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summary {
    /// The median run's wall time and counts.
    pub seconds: Option<f64>,
    /// Its amount of work (operations, or 1 for a timed phase).
    pub amount: Option<f64>,
    pub usage: Option<Usage>,
    /// How many runs failed, and the first one's error.
    pub error: Option<String>,
    /// Why it did not run: its system, or its workload, cannot run here,
    /// or the workload does not apply to the system.
    pub skipped: Option<String>,
}

/// FUSE requests per unit of a cell's work (per phase for a timed one),
/// or a dash where the server did not count them.
pub(crate) fn requests_per_op(s: &Summary) -> String {
    match (s.usage.as_ref().and_then(Usage::requests_total), s.amount) {
        (Some(n), Some(a)) if a > 0.0 => super::markdown::figure(n as f64 / a),
        _ => "–".into(),
    }
}

/// A line per named cell whose server counted its FUSE requests: each
/// opcode's requests per unit of work, the most first.
pub(crate) fn requests_by_opcode<'a>(
    cells: impl IntoIterator<Item = (String, &'a Summary)>,
) -> String {
    let lines = cells.into_iter().filter_map(|(name, s)| {
        let by_op = s.usage.as_ref()?.requests.as_ref()?;
        let amount = s.amount.filter(|a| *a > 0.0)?;
        let mut ops: Vec<(&String, &u64)> = by_op.iter().collect();
        ops.sort_by(|x, y| y.1.cmp(x.1).then(x.0.cmp(y.0)));
        let list: Vec<String> = ops
            .iter()
            .map(|(op, n)| format!("{op} {}", super::markdown::figure(**n as f64 / amount)))
            .collect();
        Some(format!("{name}: {}", list.join(", ")))
    });
    section(
        "FUSE requests by opcode, per operation (per phase for a timed phase), median run",
        lines,
    )
}

/// `n of N runs failed: the first error`, if any run failed.
pub(crate) fn failed_runs<'e>(
    errors: impl IntoIterator<Item = &'e String>,
    runs: usize,
) -> Option<String> {
    let errors: Vec<&String> = errors.into_iter().collect();
    let first = errors.first()?;
    Some(format!("{} of {runs} runs failed: {first}", errors.len()))
}

/// The median (of an even count, the mean of the middle two).
pub(crate) fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The median of the per-run ratios `a[r] / b[r]` over the runs where both
/// have a figure.
pub(crate) fn paired_ratio(a: &[Option<f64>], b: &[Option<f64>]) -> Option<f64> {
    median(
        a.iter()
            .zip(b)
            .filter_map(|(x, y)| Some((*x)? / (*y)?))
            .collect(),
    )
}

/// A system of a report, and why it did not run, if it did not.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SystemRow {
    #[serde(deserialize_with = "system_name")]
    pub id: Name,
    #[serde(deserialize_with = "system_name")]
    pub label: Name,
    pub skipped: Option<String>,
}

/// A name of the benchmark's own. Spelled as an alias so that serde, which
/// would borrow a field typed `&str` from its input, reads it with a
/// function of [`known_name`]'s instead.
pub type Name = &'static str;

/// Reads a name a report holds back as the benchmark's own, as `known`
/// finds it: a report names nothing else.
pub(crate) fn known_name<'de, D: Deserializer<'de>>(
    d: D,
    known: impl Fn(&str) -> Option<&'static str>,
) -> Result<&'static str, D::Error> {
    let name = String::deserialize(d)?;
    known(&name)
        .ok_or_else(|| serde::de::Error::custom(format!("not a name of this benchmark: {name:?}")))
}

/// Reads a system's id or label.
fn system_name<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
    known_name(d, systems::named)
}

impl SystemRow {
    fn rows(systems: &[&'static System], skipped: &[Option<String>]) -> Vec<SystemRow> {
        systems
            .iter()
            .zip(skipped)
            .map(|(s, why)| SystemRow {
                id: s.id,
                label: s.label,
                skipped: why.clone(),
            })
            .collect()
    }
}

/// The end of a report's first sentence: whether the caches could be
/// dropped before each mount.
pub(crate) fn caches(dropped: bool) -> &'static str {
    if dropped {
        ""
    } else {
        " (could not drop caches: not root)"
    }
}

/// A paragraph on the machine, and one on the device under the images
/// (each run's probe); `fsync_rate` adds the fsyncs a second it allows.
pub(crate) fn testbed(m: &Machine, d: &[DeviceLimits], fsync_rate: bool) -> String {
    let runs_of = |f: &dyn Fn(&DeviceLimits) -> String| -> String {
        d.iter().map(f).collect::<Vec<_>>().join(", ")
    };
    let (each, rate) = if fsync_rate {
        let rate = runs_of(&|d| format!("{:.0}", 1.0 / d.fsync_latency_s));
        (
            " each",
            format!(", so at most {rate} fsyncs/s one after another"),
        )
    } else {
        ("", String::new())
    };
    format!(
        "Machine: {} ({} cores), {:.1} GiB RAM, Linux {}; images on `{}` (host {}).\n\n\
         Device limits, on a raw file beside the images, before each run: a 4 KiB write + \
         fdatasync takes {} ms (median of {}{each}; p90 {} ms){rate}; sequential write {} MB/s \
         ({} MiB + fdatasync).\n\n",
        m.cpu,
        m.cores,
        m.ram_bytes as f64 / (1u64 << 30) as f64,
        m.kernel,
        m.disk,
        m.host_fs,
        runs_of(&|d| format!("{:.3}", d.fsync_latency_s * 1e3)),
        d.first().map_or(0, |d| d.latency_samples),
        runs_of(&|d| format!("{:.3}", d.fsync_latency_p90_s * 1e3)),
        runs_of(&|d| format!("{:.0}", d.seq_write_bytes_per_s / 1e6)),
        d.first().map_or(0, |d| d.seq_bytes >> 20),
    )
}

/// `heading:` and a bullet for each system skipped, with why, then a blank
/// line; nothing if none was.
pub(crate) fn skipped_systems(systems: &[SystemRow], heading: &str) -> String {
    let skipped = systems
        .iter()
        .filter_map(|s| Some(format!("{}: {}", s.label, s.skipped.as_deref()?)));
    let bullets = bullets(skipped);
    if bullets.is_empty() {
        return bullets;
    }
    format!("{heading}:\n\n{bullets}\n")
}

/// A cell's row: `names`, then `figures` of its figure, or why it has
/// none (its system or workload skipped, or every run failed).
pub(crate) fn cell_row(
    t: &mut Table,
    names: &[&str],
    s: &Summary,
    figure: Option<f64>,
    figures: impl FnOnce(f64) -> Vec<String>,
) {
    match (&s.skipped, figure) {
        (Some(why), _) => {
            let short = why.split(':').next().unwrap_or(why);
            t.gap(names, &format!("skipped: {short}"));
        }
        (None, None) => t.gap(names, "failed"),
        (None, Some(x)) => t.row(names, &figures(x)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systems::select;

    #[test]
    fn requests_are_shown_per_operation_by_opcode() {
        let mut by_op = systems::Requests::new();
        by_op.insert("lookup".into(), 100);
        by_op.insert("create".into(), 100);
        by_op.insert("getattr".into(), 50);
        let counted = Summary {
            seconds: Some(1.0),
            amount: Some(100.0),
            usage: Some(Usage {
                requests: Some(by_op),
                ..Usage::default()
            }),
            error: None,
            skipped: None,
        };
        assert_eq!(requests_per_op(&counted), "2.50");
        let kernel = Summary {
            usage: Some(Usage::default()),
            ..counted.clone()
        };
        assert_eq!(requests_per_op(&kernel), "–");
        let text = requests_by_opcode([
            ("create on stitchfs".to_string(), &counted),
            ("create on ext4".to_string(), &kernel),
        ]);
        assert!(
            text.contains("- create on stitchfs: create 1.00, lookup 1.00, getattr 0.50\n"),
            "{text}"
        );
        assert!(!text.contains("ext4"), "{text}");
    }

    #[test]
    fn medians_and_ratios_taken_run_by_run() {
        let check = |v: &[f64], expect: Option<f64>| assert_eq!(median(v.to_vec()), expect);
        check(&[], None);
        check(&[3.0], Some(3.0));
        check(&[3.0, 1.0, 2.0], Some(2.0));
        check(&[4.0, 1.0, 2.0, 3.0], Some(2.5));
        let check = |a: &[Option<f64>], b: &[Option<f64>], expect: Option<f64>| {
            assert_eq!(paired_ratio(a, b), expect, "{a:?} / {b:?}");
        };
        // Run 2 is slow for both: the per-run ratios are 2, 2, 3, whatever
        // the medians of the rates say; run 4 has one side only.
        let a = [Some(20.0), Some(2.0), Some(30.0), None];
        let b = [Some(10.0), Some(1.0), Some(10.0), Some(5.0)];
        check(&a, &b, Some(2.0));
        check(&[None], &[Some(1.0)], None);
        check(&[], &[], None);
    }

    /// A run: `Ok(rate)` (that amount of work in 1 s), `Err(why)`, or
    /// `None` (the system was skipped).
    type R = Option<Result<f64, &'static str>>;

    /// What a cell of stitchfs takes from the runs of one phase on
    /// stitchfs and on ext4.
    #[derive(Debug, PartialEq)]
    struct Expect {
        rates: Vec<Option<f64>>,
        median: Option<f64>,
        vs_ext4: Option<f64>,
        error: Option<String>,
    }

    fn check(stitchfs: &[R], ext4: &[R], expect: Expect) {
        let outcome = |r: &R| r.map(|r| r.map(|x| Sample::ran(x, 1.0)).map_err(String::from));
        let phase = |runs: &[R]| vec![runs.iter().map(outcome).collect()];
        let systems = select("stitchfs,ext4").unwrap();
        let m = Measured::example(&systems, vec![phase(stitchfs), phase(ext4)]);
        let runs = Runs {
            phase: 0,
            system: 0,
            m: &m,
        };
        let got = Expect {
            rates: runs.rates(),
            median: runs.median().map(Sample::rate),
            vs_ext4: runs.vs("ext4"),
            error: runs.summary().error,
        };
        assert_eq!(got, expect, "{stitchfs:?} against {ext4:?}");
        assert_eq!(runs.summary().seconds, expect.median.map(|_| 1.0));
    }

    #[test]
    fn a_cell_is_the_median_run_and_ratios_run_by_run() {
        check(
            &[Some(Ok(20.0)), Some(Ok(2.0)), Some(Ok(30.0))],
            &[Some(Ok(10.0)), Some(Ok(1.0)), Some(Ok(10.0))],
            Expect {
                rates: vec![Some(20.0), Some(2.0), Some(30.0)],
                median: Some(20.0),
                vs_ext4: Some(2.0),
                error: None,
            },
        );
        // Of an even count the upper middle run; a failed run has no rate
        // and no ratio, and the first error is kept.
        check(
            &[
                Some(Ok(4.0)),
                Some(Err("boom")),
                Some(Ok(2.0)),
                Some(Err("bang")),
            ],
            &[Some(Ok(1.0)), Some(Ok(1.0)), Some(Ok(4.0)), Some(Ok(1.0))],
            Expect {
                rates: vec![Some(4.0), None, Some(2.0), None],
                median: Some(4.0),
                vs_ext4: Some(2.25),
                error: Some("2 of 4 runs failed: boom".into()),
            },
        );
        // A skipped baseline: no ratio.
        check(
            &[Some(Ok(4.0))],
            &[None],
            Expect {
                rates: vec![Some(4.0)],
                median: Some(4.0),
                vs_ext4: None,
                error: None,
            },
        );
    }

    #[test]
    fn a_miss_is_the_floor_s_only_where_the_floor_misses_too_and_is_faster() {
        let check = |measured: Option<f64>, floor: Option<f64>, expect: &str| {
            let g = Goal {
                system: "stitchfs",
                what: "smallfile rate vs fuse2fs".into(),
                measured,
                limit: 2.0,
                floor,
            };
            assert_eq!(g.verdict(), expect, "{measured:?} beside {floor:?}");
        };
        check(None, Some(1.0), "not measured");
        check(Some(2.0), None, "met");
        check(Some(1.2), None, "not met");
        check(
            Some(1.2),
            Some(1.5),
            "not met; the FUSE floor reaches only 1.50 here",
        );
        // A floor slower than stitchfs, or meeting the goal, bounds nothing.
        check(Some(1.2), Some(1.0), "not met");
        check(Some(1.2), Some(2.5), "not met");
        assert_eq!(
            goals(&[Goal {
                system: "stitchfs",
                what: "smallfile rate vs fuse2fs".into(),
                measured: Some(2.5),
                limit: 2.0,
                floor: None,
            }]),
            "\nGoals:\n\n- stitchfs smallfile rate vs fuse2fs: 2.50 (goal ≥ 2.0): met\n"
        );
    }

    /// A phase not selected has no cells; one whose workload could not run
    /// has a cell per system, saying why.
    #[test]
    fn cells_are_made_for_the_phases_selected() {
        let systems = select("stitchfs,ext4").unwrap();
        let ran = || vec![Some(Ok(Sample::ran(1.0, 1.0)))];
        let samples = vec![vec![ran(), vec![], vec![]], vec![ran(), vec![], vec![]]];
        let mut m = Measured::example(&systems, samples);
        m.not_run[2] = Some("no tool".into());
        m.skipped[1] = Some("needs root".into());
        let r = Report::new((), m, |runs| {
            let why = runs.summary().skipped;
            (runs.phase, runs.system().id, why)
        });
        let why = |s: &str| Some(s.to_string());
        assert_eq!(
            r.cells,
            [
                (0, "stitchfs", None),
                (0, "ext4", why("needs root")),
                (2, "stitchfs", why("no tool")),
                (2, "ext4", why("no tool")),
            ]
        );
        assert_eq!(r.systems[1].skipped, why("needs root"));
    }
}
