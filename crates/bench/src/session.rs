//! A mount suite's session (`bench mount`, `bench seeds`): every selected
//! workload on every system that can run here, run after run, with the
//! device probed before each run (on a shared machine its speed moves, so
//! each run is compared with its own probe). A run repeats the whole set,
//! each workload's systems back to back, so that ratios between systems
//! can be taken run by run ([`super::report`]).
//!
//! One workload on one system is [`super::workload`]'s; a suite says only
//! what its workloads and phases are and how each workload runs
//! ([`Suite`]).

use super::systems::{DeviceLimits, Launch, Machine, Place, System};
use super::workload::{Ctx, Outcome, Run};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a run of a suite needs: `S`, the suite's sizes; `I`, what else
/// it takes (inputs from outside, or nothing).
pub struct Config<S, I = ()> {
    pub scale: S,
    pub runs: usize,
    pub systems: Vec<&'static System>,
    /// Indices into the suite's `WORKLOADS`.
    pub workloads: Vec<usize>,
    /// Where images and mount points go (on the disk being measured).
    pub scratch: PathBuf,
    /// A phase taking longer than this counts as hung.
    pub timeout: Duration,
    pub inputs: I,
}

impl<S, I> Config<S, I> {
    /// Progress steps of the whole session.
    pub fn steps(&self) -> usize {
        self.runs * self.workloads.len() * self.systems.len()
    }

    /// Runs of the session: at least one.
    fn run_count(&self) -> usize {
        self.runs.max(1)
    }
}

/// What was run, for the report: `S`, the suite's sizes; `E`, what else
/// the suite records (flattened into the same object, after these).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Settings<S, E = ()> {
    pub runs: usize,
    #[serde(flatten)]
    pub scale: S,
    /// Whether the page, dentry and inode caches could be dropped before
    /// each mount (needs root).
    pub caches_dropped: bool,
    pub scratch: PathBuf,
    #[serde(flatten)]
    pub inputs: E,
}

impl<S: Clone, E> Settings<S, E> {
    pub(crate) fn new<I>(cfg: &Config<S, I>, m: &Measured, inputs: E) -> Self {
        Settings {
            runs: cfg.run_count(),
            scale: cfg.scale.clone(),
            caches_dropped: m.caches_dropped,
            scratch: cfg.scratch.clone(),
            inputs,
        }
    }
}

/// A suite as a session runs it.
pub(crate) trait Suite {
    /// The workloads, in order, with the phases each reports (every
    /// phase of the suite in one of them).
    const WORKLOADS: &'static [(&'static str, &'static [usize])];
    /// Phase `p`'s name, for messages.
    fn phase_name(p: usize) -> &'static str;
    /// The image each system is made on, and the device probe's latency
    /// samples and sequential bytes.
    fn storage(&self) -> (u64, usize, u64);
    /// Why workload `w` cannot run here (a tool or input missing).
    fn missing(&self, _w: usize) -> Option<String> {
        None
    }
    /// Whether workload `w` does its timed work in programs it starts
    /// (which a system may launch in a stream or without fsync), not in
    /// the benchmark process.
    fn runs_programs(&self, _w: usize) -> bool {
        false
    }
    /// Why workload `w` does not apply to `sys` beyond what
    /// [`not_applicable`] finds (it needs what only some systems have),
    /// beginning with [`NOT_APPLICABLE`]; `None` when it applies.
    fn unfit(&self, _w: usize, _sys: &System) -> Option<String> {
        None
    }
    /// Runs workload `w`'s phases on `run`.
    fn workload(&self, w: usize, run: &mut Run) -> anyhow::Result<()>;
}

/// The workloads named by a comma-separated list (`all` for every one),
/// as indices into `workloads`.
pub(crate) fn select_workloads(
    workloads: &[(&str, &[usize])],
    list: &str,
) -> anyhow::Result<Vec<usize>> {
    if list == "all" {
        return Ok((0..workloads.len()).collect());
    }
    list.split(',')
        .map(|name| {
            workloads
                .iter()
                .position(|(w, _)| *w == name.trim())
                .with_context(|| {
                    let names: Vec<&str> = workloads.iter().map(|(w, _)| *w).collect();
                    format!("no workload {name:?} (known: {}, or all)", names.join(", "))
                })
        })
        .collect()
}

/// A directory for the session's images, mount points and inputs, in
/// `cfg.scratch`; removed when dropped.
pub(crate) fn scratch<S, I>(cfg: &Config<S, I>) -> anyhow::Result<tempfile::TempDir> {
    tempfile::tempdir_in(&cfg.scratch)
        .with_context(|| format!("making a directory in {}", cfg.scratch.display()))
}

/// What a session measured.
pub(crate) struct Measured {
    pub machine: Machine,
    /// The device probe of each run.
    pub device: Vec<DeviceLimits>,
    pub systems: Vec<&'static System>,
    /// Per system, why it cannot run here (`None`: it can).
    pub skipped: Vec<Option<String>>,
    /// Per phase, why its workload cannot run here.
    pub not_run: Vec<Option<String>>,
    /// `not_applicable[system][phase]`: why the system does not run the
    /// phase's workload ([`not_applicable`]).
    pub not_applicable: Vec<Vec<Option<String>>>,
    /// `samples[system][phase][run]`: `None` for a skipped system; a phase
    /// not selected has no runs.
    pub samples: Vec<Vec<Vec<Option<Outcome>>>>,
    /// Whether the caches were dropped before every mount.
    pub caches_dropped: bool,
}

impl Measured {
    fn new<S, I>(cfg: &Config<S, I>, phases: usize, scratch: &Path) -> Measured {
        let runs = cfg.run_count();
        Measured {
            machine: Machine::probe(scratch),
            device: Vec::with_capacity(runs),
            systems: cfg.systems.clone(),
            skipped: unavailable(&cfg.systems),
            not_run: vec![None; phases],
            not_applicable: vec![vec![None; phases]; cfg.systems.len()],
            samples: vec![vec![Vec::with_capacity(runs); phases]; cfg.systems.len()],
            caches_dropped: true,
        }
    }
}

#[cfg(test)]
impl Measured {
    /// What a session of `systems` (none skipped, every workload run)
    /// measured as `samples`, each run's device probe
    /// [`DeviceLimits::EXAMPLE`] (for the reports' tests).
    pub fn example(
        systems: &[&'static System],
        samples: Vec<Vec<Vec<Option<Outcome>>>>,
    ) -> Measured {
        let (phases, runs) = (samples[0].len(), samples[0].iter().map(Vec::len).max());
        Measured {
            machine: Machine::probe(Path::new("/")),
            device: vec![DeviceLimits::EXAMPLE; runs.unwrap_or(0)],
            systems: systems.to_vec(),
            skipped: vec![None; systems.len()],
            not_run: vec![None; phases],
            not_applicable: vec![vec![None; phases]; systems.len()],
            samples,
            caches_dropped: true,
        }
    }
}

/// Runs every selected workload of `suite` on every system that can run
/// here, `cfg.runs` times, each on fresh storage at `place`; the device is
/// probed in `scratch` before each run.
pub(crate) fn measure<S, I, T: Suite>(
    cfg: &Config<S, I>,
    suite: &T,
    scratch: &Path,
    place: &Place,
    progress: &mut impl FnMut(&str),
) -> anyhow::Result<Measured> {
    let phases = T::WORKLOADS.iter().flat_map(|(_, p)| p.iter());
    let phases = phases.max().map_or(0, |last| last + 1);
    let mut m = Measured::new(cfg, phases, scratch);
    let missing = missing_workloads(cfg, suite);
    let (image_bytes, samples, bytes) = suite.storage();
    for r in 1..=cfg.run_count() {
        progress(&format!("run {r}: measuring the device"));
        m.device
            .push(DeviceLimits::measure(scratch, samples, bytes)?);
        for &w in &cfg.workloads {
            let phases = T::WORKLOADS[w].1;
            if let Some(why) = &missing[w] {
                for &p in phases {
                    m.not_run[p] = Some(why.clone());
                }
                continue;
            }
            let unfit = |sys: &System| {
                not_applicable(T::WORKLOADS[w].0, suite.runs_programs(w), sys)
                    .or_else(|| suite.unfit(w, sys))
            };
            on_every_system(
                &mut m,
                r,
                T::WORKLOADS[w],
                T::phase_name,
                progress,
                unfit,
                |sys| {
                    let ctx = Ctx {
                        sys,
                        place,
                        image_bytes,
                        timeout: cfg.timeout,
                    };
                    let name = |p| T::phase_name(p).to_string();
                    ctx.workload(phases, name, |run| suite.workload(w, run))
                },
            );
        }
    }
    Ok(m)
}

/// Per workload, why it cannot run here; said on stderr for those selected.
fn missing_workloads<S, I, T: Suite>(cfg: &Config<S, I>, suite: &T) -> Vec<Option<String>> {
    let missing: Vec<Option<String>> = (0..T::WORKLOADS.len()).map(|w| suite.missing(w)).collect();
    for &w in &cfg.workloads {
        if let Some(why) = &missing[w] {
            eprintln!("skipping workload {}: {why}", T::WORKLOADS[w].0);
        }
    }
    missing
}

/// The systems that cannot run here, each with why (`None`: it can); said
/// on stderr.
fn unavailable(systems: &[&'static System]) -> Vec<Option<String>> {
    let skipped: Vec<Option<String>> = systems.iter().map(|sys| sys.missing()).collect();
    for (sys, why) in systems.iter().zip(&skipped) {
        if let Some(why) = why {
            eprintln!("skipping {}: {why}", sys.label);
        }
    }
    skipped
}

/// Why `sys` does not run workload `name`, if it does not: a system that
/// launches programs in a stream or without fsync cannot launch the
/// benchmark process, so it runs only workloads whose work is done in
/// programs (`runs_programs`).
pub(crate) fn not_applicable(name: &str, runs_programs: bool, sys: &System) -> Option<String> {
    (sys.launch() != Launch::Direct && !runs_programs).then(|| {
        format!(
            "{NOT_APPLICABLE}: {name} works in the benchmark process, which {} cannot launch \
             as it launches programs",
            sys.label
        )
    })
}

/// How [`not_applicable`]'s reasons begin.
pub(crate) const NOT_APPLICABLE: &str = "not applicable";

/// Run `r` of one workload on every system: each phase's outcome goes to
/// `m.samples[system][phase]` (`None` for a skipped system, or one the
/// workload does not apply to: `unfit` says why), failures are said on
/// stderr too.
fn on_every_system(
    m: &mut Measured,
    r: usize,
    (wname, phases): (&str, &[usize]),
    phase_name: impl Fn(usize) -> &'static str,
    progress: &mut impl FnMut(&str),
    unfit: impl Fn(&System) -> Option<String>,
    mut run: impl FnMut(&'static System) -> (Vec<(usize, Outcome)>, bool),
) {
    for (i, &sys) in m.systems.iter().enumerate() {
        progress(&format!("run {r}: {wname} / {}", sys.label));
        let unfit = unfit(sys);
        if m.skipped[i].is_some() || unfit.is_some() {
            for &p in phases {
                m.samples[i][p].push(None);
                m.not_applicable[i][p].clone_from(&unfit);
            }
            continue;
        }
        let (out, dropped) = run(sys);
        m.caches_dropped &= dropped;
        for (p, o) in out {
            if let Err(e) = &o {
                if !e.starts_with("not run") {
                    eprintln!("{} on {}, run {r}: {e}", phase_name(p), sys.label);
                }
            }
            m.samples[i][p].push(Some(o));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORKLOADS: [(&str, &[usize]); 3] = [("a", &[0]), ("b", &[1, 2]), ("c", &[3])];

    #[test]
    fn workloads_are_selected_by_name() {
        let check = |list: &str, expect: Result<&[usize], &str>| {
            let got = select_workloads(&WORKLOADS, list).map_err(|e| e.to_string());
            assert_eq!(
                got.as_deref(),
                expect.map_err(String::from).as_deref(),
                "{list}"
            );
        };
        check("all", Ok(&[0, 1, 2]));
        check("c, a", Ok(&[2, 0]));
        check("b", Ok(&[1]));
        check("d", Err("no workload \"d\" (known: a, b, c, or all)"));
    }

    /// Only a workload of programs runs on a system that launches them.
    #[test]
    fn systems_that_launch_programs_run_only_programs() {
        let check = |sys: &str, runs_programs: bool, expect: Option<&str>| {
            let sys = crate::systems::select(sys).unwrap()[0];
            let why = not_applicable("fsync", runs_programs, sys);
            assert_eq!(why.as_deref(), expect, "{} {runs_programs}", sys.id);
        };
        check("stitchfs", false, None);
        check("stitchfs-stream", true, None);
        check("stitchfs-ceiling", true, None);
        check(
            "stitchfs-stream",
            false,
            Some(
                "not applicable: fsync works in the benchmark process, which stitchfs \
                 journal, stream ignoring fsync cannot launch as it launches programs",
            ),
        );
        check("fuse-floor-nofsync", false, Some("not applicable: fsync works in the benchmark process, which FUSE floor, fsyncs dropped cannot launch as it launches programs"));
    }

    #[derive(Clone, Serialize)]
    struct Files {
        files: usize,
    }

    #[derive(Serialize)]
    struct Tools {
        tools: Vec<&'static str>,
    }

    /// A suite's sizes and inputs sit in the settings' own object, the
    /// sizes after `runs` and the inputs last: the order reports have.
    #[test]
    fn settings_hold_the_suite_sizes_and_inputs_in_one_object() {
        fn check(settings: impl Serialize, expect: &str) {
            assert_eq!(serde_json::to_string(&settings).unwrap(), expect);
        }
        fn settings<E>(inputs: E) -> Settings<Files, E> {
            Settings {
                runs: 2,
                scale: Files { files: 7 },
                caches_dropped: true,
                scratch: "/s".into(),
                inputs,
            }
        }
        check(
            settings(()),
            r#"{"runs":2,"files":7,"caches_dropped":true,"scratch":"/s"}"#,
        );
        check(
            settings(Tools { tools: vec!["tar"] }),
            r#"{"runs":2,"files":7,"caches_dropped":true,"scratch":"/s","tools":["tar"]}"#,
        );
    }
}
