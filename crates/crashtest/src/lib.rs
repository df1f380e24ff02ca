//! `stitchfs crashtest` as a library (docs/design.md "Tools"): run a
//! workload on the whole stack over a recording device, build every crash
//! image the recording allows (exhaustive per epoch up to a bound, sampled
//! with a seed beyond), recover each with stitchfs, and judge it with
//! `e2fsck -fn`, with our fsck, and against what the workload made durable.
//!
//! Modules, in the order data flows:
//! - [`workload`]: workloads by path (named ones from the seeds, and
//!   ACE-style generated ones), with specs the CLI takes back;
//! - [`oracle`]: the independent statement of what each persistence point
//!   makes durable (McoreFS §4.3's closure) and the states a flush passes
//!   through;
//! - [`mod@run`]: the stack (memfs over diskfs over the patch cache over the
//!   recording device), driven together with the reference model and the
//!   oracle;
//! - [`check`]: recovery and the two checkers on one image, cached by
//!   image contents;
//! - [`judge`]: the rules, per consistency mode;
//! - [`report`]: violations, the summary table, saved violation
//!   directories.
//!
//! Invariants: everything is deterministic given the workload, the mode,
//! `max_states` and the seed (no background flushes, a fixed clock, seeded
//! sampling), so a violation's printed command reproduces it. The harness
//! never repairs or retries: any difference is reported.
//!
//! Limits, by design for now: no torn writes (whole blocks reach the disk
//! or not); a journal flush is judged as one transaction (true while a
//! flush needs less than half the log, as every workload here does);
//! workloads hold no open handles (unlinked-open files are diskfs's own
//! crash tests' business).

pub mod check;
pub mod error;
pub mod judge;
pub mod oracle;
pub mod patchgroups;
pub mod report;
pub mod run;
pub mod state;
pub mod streams;
pub mod workload;
pub mod xsync;

pub use error::{RunError, SpecError};
pub use report::{Finding, Kind, ModeSummary, Summary, Violation};
pub use stitch_diskfs::{Consistency, DataMode};
pub use stitch_memfs::Order;
pub use workload::Workload;

use check::{Cache, Checker};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use stitch_blockdev::record::{build_image, crash_states, CrashState, Enumerate};

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub modes: Vec<Consistency>,
    pub workloads: Vec<Workload>,
    /// Largest epoch enumerated exhaustively; the sample size beyond.
    pub max_states: u64,
    /// Seed of crash-state sampling (and of generated workloads, chosen by
    /// the caller).
    pub seed: u64,
    /// Worker threads; each workload runs on one.
    pub jobs: usize,
    /// Where violations are saved (`None`: not saved).
    pub out: Option<PathBuf>,
    /// At most this many violations are saved.
    pub keep: usize,
    /// Judge only this crash state of each workload (its index in the
    /// enumeration), to replay one violation.
    pub only_state: Option<usize>,
    /// How the reproduction commands start (`stitchfs crashtest`).
    pub command: String,
    /// memfs keeps at most this many pages of file data in memory, so
    /// reads and writes past the bound flush and evict (`None`: the
    /// default bound, which no workload reaches).
    pub memory_pages: Option<u64>,
    /// What memfs's fsyncs cover (`--order`).
    pub order: Order,
}

impl Config {
    pub fn new(modes: Vec<Consistency>, workloads: Vec<Workload>) -> Config {
        Config {
            modes,
            workloads,
            max_states: 32,
            seed: 0,
            jobs: 1,
            out: None,
            keep: 100,
            only_state: None,
            command: "stitchfs crashtest".into(),
            memory_pages: None,
            order: Order::default(),
        }
    }
}

/// The name of a mode in tables and directory names.
pub fn mode_name(mode: Consistency) -> String {
    match mode {
        Consistency::Async => "async".into(),
        Consistency::SoftUpdates => "softupdates".into(),
        Consistency::Journal(d) => format!("journal-{d}"),
    }
}

/// The CLI arguments selecting `mode`.
pub fn mode_args(mode: Consistency) -> String {
    match mode {
        Consistency::Journal(d) => format!("--mode journal --data {d}"),
        m => format!("--mode {}", mode_name(m)),
    }
}

/// Progress of a run.
#[derive(Clone, Debug)]
pub enum Event {
    /// The run has this many (mode, workload) jobs.
    Start { jobs: usize },
    /// One job is done.
    Done {
        mode: String,
        workload: String,
        states: usize,
        violations: usize,
    },
}

/// Runs every workload in every mode and judges every crash image.
pub fn run(cfg: &Config, progress: &(dyn Fn(&Event) + Sync)) -> Result<Summary, RunError> {
    if !check::have_e2fsck() {
        return Err(RunError::NoE2fsck);
    }
    let jobs: Vec<(Consistency, &Workload)> = cfg
        .modes
        .iter()
        .flat_map(|&m| cfg.workloads.iter().map(move |w| (m, w)))
        .collect();
    progress(&Event::Start { jobs: jobs.len() });
    let cache = Cache::default();
    let next = AtomicUsize::new(0);
    let saved = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, ModeSummary, Vec<Violation>)>> = Mutex::new(Vec::new());
    let errors: Mutex<Vec<RunError>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..cfg.jobs.max(1) {
            s.spawn(|| {
                let mut checker = match Checker::new() {
                    Ok(c) => c,
                    Err(e) => {
                        errors.lock().unwrap().push(RunError::Scratch(e));
                        return;
                    }
                };
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&(mode, w)) = jobs.get(i) else { break };
                    let (ms, vs) = one(cfg, &cache, &mut checker, &saved, mode, w);
                    progress(&Event::Done {
                        mode: mode_name(mode),
                        workload: w.name.clone(),
                        states: ms.states,
                        violations: vs.len(),
                    });
                    results.lock().unwrap().push((i, ms, vs));
                }
            });
        }
    });
    if let Some(e) = errors.into_inner().unwrap().into_iter().next() {
        return Err(e);
    }
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.0);
    let mut summary = Summary::default();
    for (i, ms, vs) in results {
        let name = mode_name(jobs[i].0);
        match summary.modes.iter_mut().find(|(n, _)| *n == name) {
            Some((_, m)) => m.add(&ms),
            None => summary.modes.push((name, ms)),
        }
        summary.violations.extend(vs);
    }
    Ok(summary)
}

/// One (mode, workload) job's results as they accumulate.
struct Job<'a> {
    cfg: &'a Config,
    saved: &'a AtomicUsize,
    mode: Consistency,
    w: &'a Workload,
    ms: ModeSummary,
    vs: Vec<Violation>,
}

impl Job<'_> {
    /// The command that replays this job (one crash state of it).
    fn reproduce(&self, state: Option<usize>) -> String {
        let mut c = format!(
            "{} {} --workload '{}' --max-states {} --seed {}",
            self.cfg.command,
            mode_args(self.mode),
            self.w.name,
            self.cfg.max_states,
            self.cfg.seed
        );
        if let Some(p) = self.cfg.memory_pages {
            c.push_str(&format!(" --memory-pages {p}"));
        }
        if self.cfg.order != Order::default() {
            c.push_str(&format!(" --order {}", self.cfg.order));
        }
        if let Some(s) = state {
            c.push_str(&format!(" --state {s}"));
        }
        c
    }

    /// Counts a violation, and saves it if `files` are given and the
    /// run keeps more.
    fn add(
        &mut self,
        findings: Vec<Finding>,
        state: Option<(usize, String)>,
        files: Option<report::Saved<'_>>,
    ) {
        let mut v = Violation {
            mode: mode_name(self.mode),
            workload: self.w.name.clone(),
            reproduce: self.reproduce(state.as_ref().map(|s| s.0)),
            state: state.map(|s| format!("{}: {}", s.0, s.1)),
            findings,
            dir: None,
        };
        self.ms.violating += 1;
        for k in v.kinds() {
            *self.ms.violations.entry(k).or_default() += 1;
        }
        if let (Some(out), Some(files)) = (&self.cfg.out, files) {
            let n = self.saved.fetch_add(1, Ordering::SeqCst);
            if n < self.cfg.keep {
                let kind = v.kinds().first().map_or("violation", |k| k.name());
                let dir = out.join(format!(
                    "{n:04}-{}-{kind}-{}",
                    mode_name(self.mode),
                    short(&self.w.name)
                ));
                let files = report::Saved {
                    reproduce: &v.reproduce,
                    ..files
                };
                match report::save(&dir, &files) {
                    Ok(()) => v.dir = Some(dir),
                    Err(e) => eprintln!("crashtest: saving {}: {e}", dir.display()),
                }
            }
        }
        self.vs.push(v);
    }

    /// A problem of the harness or of the run, not of one image.
    fn problem(&mut self, kind: Kind, message: String, state: Option<(usize, String)>) {
        let findings = vec![Finding { kind, message }];
        let shown = findings.clone();
        let desc = self.w.describe();
        let files = report::Saved {
            image: None,
            workload: &desc,
            state: "",
            findings: &shown,
            expected: "",
            found: "",
            diff: "",
            checkers: "",
            reproduce: "",
        };
        self.add(findings, state, Some(files));
    }
}

/// Records one workload in one mode and judges its crash images.
fn one(
    cfg: &Config,
    cache: &Cache,
    checker: &mut Checker,
    saved: &AtomicUsize,
    mode: Consistency,
    w: &Workload,
) -> (ModeSummary, Vec<Violation>) {
    let mut job = Job {
        cfg,
        saved,
        mode,
        w,
        ms: ModeSummary {
            workloads: 1,
            ..Default::default()
        },
        vs: Vec::new(),
    };
    judge_workload(&mut job, cache, checker);
    (job.ms, job.vs)
}

fn judge_workload(job: &mut Job<'_>, cache: &Cache, checker: &mut Checker) {
    let (cfg, mode, w) = (job.cfg, job.mode, job.w);
    let memfs = run::Memfs {
        memory_pages: cfg.memory_pages,
        order: cfg.order,
    };
    let rec = match run::record(mode, w, memfs) {
        Ok(r) => r,
        Err(e) => return job.problem(Kind::Harness, e.to_string(), None),
    };
    job.ms.own_flushes += rec.own_flushes;
    for (kind, message) in &rec.problems {
        job.problem(*kind, message.clone(), None);
    }
    let opts = Enumerate {
        max_states: cfg.max_states,
        seed: cfg.seed,
        torn: None,
    };
    let states = match crash_states(&rec.log, &opts) {
        Ok(s) => s,
        Err(e) => return job.problem(Kind::Harness, format!("crash states: {e}"), None),
    };
    // Under the global order a workload in no stream is in one: judged by
    // the stream rules as one stream, where the model can replay it.
    let one = (cfg.order == Order::Global && !w.streams() && !w.patchgroups())
        .then(|| streams::as_one_stream(w))
        .flatten();
    let ruled = w.streams() || w.patchgroups();
    let judged = if ruled { Some(w) } else { one.as_ref() };
    let streams = match judged.map(streams::Expected::of).transpose() {
        Ok(s) => s,
        Err(e) => return job.problem(Kind::Harness, e, None),
    };
    for (idx, state) in states.enumerate() {
        if cfg.only_state.is_none_or(|o| o == idx) {
            judge_state(job, cache, checker, &rec, streams.as_ref(), idx, &state);
        }
    }
}

/// Judges crash state `idx` of a recording, and adds a violation if it
/// shows one (with the files that tell it, while the run saves more).
fn judge_state(
    job: &mut Job<'_>,
    cache: &Cache,
    checker: &mut Checker,
    rec: &run::Recording,
    streams: Option<&streams::Expected>,
    idx: usize,
    state: &CrashState,
) {
    let (cfg, mode) = (job.cfg, job.mode);
    let sits = judge::situations(rec, *state.points.start(), *state.points.end());
    // The blocks that may differ from the base (tests/images.rs holds
    // them to the built image), laid over it: no image is copied.
    let blocks = rec.blocks(state);
    let (facts, fresh) = checker.facts(cache, mode, &rec.base, &blocks);
    let points = format!("points {:?}", state.points);
    job.ms.states += 1;
    job.ms.images += usize::from(fresh);
    job.ms.checked += usize::from(fresh && facts.checked);
    job.ms.replayed += usize::from(facts.replayed > 0);
    let mut findings = match streams {
        None => judge::judge(mode, &facts, &sits),
        Some(exp) => {
            let points = (state.points.start().0, state.points.end().0);
            let mut out = judge::checkers(mode, &facts);
            match &facts.tree {
                Ok(found) => out.extend(streams::judge(exp, rec, points, mode, found)),
                Err(e) => out.push(Finding {
                    kind: Kind::Recovery,
                    message: format!("stitchfs could not recover the image: {e}"),
                }),
            }
            out
        }
    };
    if findings.is_empty() {
        return;
    }
    findings.truncate(30);
    if cfg.out.is_none() || job.saved.load(Ordering::SeqCst) >= cfg.keep {
        return job.add(findings, Some((idx, points)), None);
    }
    let state_text = format!(
        "crash state {idx} of the enumeration (max_states {}, seed {}):\n{state:#?}\n\nsituations: {}\n",
        cfg.max_states,
        cfg.seed,
        sits.iter()
            .map(|s| match s {
                judge::Situation::Quiet { after, .. } => format!("after \"{after}\""),
                judge::Situation::Busy(f) => format!("during \"{}\"", f.label),
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    let image = build_image(&rec.base.image, &rec.log, state).ok();
    let expected: Vec<String> = sits.iter().map(|s| s.expected()).collect();
    let found = match &facts.tree {
        Ok(f) => {
            let mut s = f.state.show(Some(&f.links));
            for p in &f.problems {
                s.push_str(&format!("problem: {p}\n"));
            }
            s
        }
        Err(e) => format!("not recovered: {e}\n"),
    };
    let mut desc = job.w.describe();
    desc.push_str("\npersistence points in the log:\n");
    for f in &rec.flushes {
        desc.push_str(&format!("  entries {}..{}: {}\n", f.start, f.end, f.label));
    }
    let checkers = facts.checkers();
    let diff: String = match &facts.tree {
        Ok(f) => sits.iter().map(|s| s.diffs(f)).collect(),
        Err(_) => String::new(),
    };
    let shown = findings.clone();
    let files = report::Saved {
        image: image.as_deref(),
        workload: &desc,
        state: &state_text,
        findings: &shown,
        expected: &expected.join("\n"),
        found: &found,
        diff: &diff,
        checkers: &checkers,
        reproduce: "",
    };
    job.add(findings, Some((idx, points)), Some(files));
}

/// A workload name fit for a directory name.
fn short(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    s.chars().take(48).collect()
}
