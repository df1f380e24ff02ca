//! Real programs under crash (`stitchfs crashtest --program`): the method
//! of ALICE ("All File Systems Are Not Created Equal") on a stitchfs mount.
//!
//! For each program and mode: the workload runs on a mount whose device
//! records every write and flush ([`record`]); every crash state the log
//! allows (exhaustive within an epoch up to `--max-states`, sampled with
//! the printed seed beyond) becomes an image, which is mounted as a user
//! mounts it and handed to the program's checker with the lines the
//! workload printed before the crash: its promises ([`judge`]). Identical
//! images owing the same promises are judged once. The report counts
//! states, distinct images and verdicts by kind; each inconsistent state
//! is saved with its image, what it owed, why it failed and the command
//! that judges it again.

pub mod builtin;
mod judge;
mod record;
pub mod report;

pub use builtin::Program;
pub use judge::Verdict;
pub use report::Row;

use anyhow::Context;
use std::collections::HashMap;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use stitch_blockdev::record::{crash_states, CrashState, Enumerate, ImageBuilder};
use stitch_diskfs::Consistency;
use stitch_memfs::Order;

/// What to run and how hard to look.
pub struct Options {
    pub programs: Vec<Program>,
    pub modes: Vec<Consistency>,
    pub order: Order,
    /// Largest epoch enumerated exhaustively; beyond, this many sampled.
    pub max_states: u64,
    pub seed: u64,
    /// Where inconsistent states are saved, one directory each.
    pub out: PathBuf,
    /// Save at most this many.
    pub keep: usize,
    /// Judge at most this many crash states per program and mode, drawn
    /// with `seed` (`None`: all).
    pub sample: Option<usize>,
    /// Crash states judged at once.
    pub jobs: usize,
    /// Recover each crash image through an NBD server (`judge::Bench`).
    pub over_nbd: bool,
}

/// One crash state judged, as the progress callback sees it.
pub struct Judged<'a> {
    pub program: &'a str,
    pub mode: Consistency,
    pub done: usize,
    pub total: usize,
}

/// Runs every program in every mode; one row each.
pub fn run(opts: &Options, progress: &mut dyn FnMut(Judged<'_>)) -> anyhow::Result<Vec<Row>> {
    let scratch = tempfile::Builder::new()
        .prefix("stitchfs-programs")
        .tempdir()
        .context("a scratch directory")?;
    let mut rows = Vec::new();
    let mut saved = 0;
    for program in &opts.programs {
        for &mode in &opts.modes {
            let row = run_one(opts, program, mode, scratch.path(), &mut saved, progress)
                .with_context(|| format!("{} in {mode}", program.name))?;
            rows.push(row);
        }
    }
    Ok(rows)
}

fn run_one(
    opts: &Options,
    program: &Program,
    mode: Consistency,
    scratch: &Path,
    saved: &mut usize,
    progress: &mut dyn FnMut(Judged<'_>),
) -> anyhow::Result<Row> {
    let started = Instant::now();
    let rec = record::record(program, mode, opts.order, scratch)?;
    let enumerate = Enumerate {
        max_states: opts.max_states,
        seed: opts.seed,
        torn: None,
    };
    let all: Vec<CrashState> = crash_states(&rec.log, &enumerate)?.collect();
    let chosen = sample(all.len(), opts.sample, opts.seed);
    let mut row = Row::new(&program.name, mode, opts.order);
    let run = Run {
        program,
        mode,
        rec: &rec,
        states: &all,
        chosen: &chosen,
        seen: Mutex::new(HashMap::new()),
        done: AtomicUsize::new(0),
        over_nbd: opts.over_nbd,
    };
    let verdicts = run.judge_all(opts.jobs, scratch, &mut |done| {
        progress(Judged {
            program: &program.name,
            mode,
            done,
            total: chosen.len(),
        })
    })?;
    for (&index, (verdict, owed, image)) in chosen.iter().zip(verdicts) {
        row.count(&verdict);
        if let (false, Some(image)) = (verdict == Verdict::Consistent, image) {
            if *saved < opts.keep {
                let s = Saved {
                    program,
                    mode,
                    seed: opts.seed,
                    index,
                    state: &all[index],
                    owed: &owed,
                    verdict: &verdict,
                };
                s.save(&opts.out, &image)?;
                *saved += 1;
            }
        }
    }
    row.all_states = all.len();
    row.images = run.seen.lock().unwrap_or_else(|e| e.into_inner()).len();
    row.promises = rec.promises.len();
    row.seconds = started.elapsed().as_secs_f64();
    Ok(row)
}

/// The indices of the states judged: all of them, or `n` drawn with
/// `seed` (in order, so each keeps its index in the full enumeration).
fn sample(len: usize, n: Option<usize>, seed: u64) -> Vec<usize> {
    use rand::seq::index;
    use rand::SeedableRng;
    match n {
        Some(n) if n < len => {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut v = index::sample(&mut rng, len, n).into_vec();
            v.sort_unstable();
            v
        }
        _ => (0..len).collect(),
    }
}

/// What one state's judging leaves: the verdict, the promises it owed and,
/// if inconsistent, the image (to save).
type Judgement = (Verdict, Vec<String>, Option<Vec<u8>>);

/// The states of one program in one mode, judged by several workers.
struct Run<'a> {
    program: &'a Program,
    mode: Consistency,
    rec: &'a record::Recording,
    states: &'a [CrashState],
    chosen: &'a [usize],
    /// Verdicts by image digest and promises owed: identical ones once.
    seen: Mutex<HashMap<(u64, usize), Verdict>>,
    done: AtomicUsize,
    over_nbd: bool,
}

impl Run<'_> {
    /// Worker `w` of `jobs` takes every `jobs`-th chosen state, in order
    /// (so its image builder reuses each committed prefix); the verdicts
    /// come back in the order of `chosen`.
    fn judge_all(
        &self,
        jobs: usize,
        scratch: &Path,
        progress: &mut dyn FnMut(usize),
    ) -> anyhow::Result<Vec<Judgement>> {
        let jobs = jobs.clamp(1, self.chosen.len().max(1));
        let parts: Vec<anyhow::Result<Vec<Judgement>>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..jobs)
                .map(|w| s.spawn(move || self.worker(w, jobs, scratch)))
                .collect();
            while workers.iter().any(|h| !h.is_finished()) {
                progress(self.done.load(Ordering::Relaxed));
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            workers
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a judge panicked")))
                })
                .collect()
        });
        let mut parts: Vec<std::vec::IntoIter<Judgement>> = parts
            .into_iter()
            .map(|p| p.map(Vec::into_iter))
            .collect::<anyhow::Result<_>>()?;
        let mut out = Vec::with_capacity(self.chosen.len());
        for i in 0..self.chosen.len() {
            out.extend(parts[i % jobs].next());
        }
        Ok(out)
    }

    fn worker(&self, w: usize, jobs: usize, scratch: &Path) -> anyhow::Result<Vec<Judgement>> {
        let dir = scratch.join(format!("judge{w}"));
        let bench = judge::Bench::new(&dir, self.over_nbd)?;
        let mut images = ImageBuilder::new(&self.rec.base, &self.rec.log)?;
        let mut out = Vec::new();
        for &index in self.chosen.iter().skip(w).step_by(jobs) {
            let state = &self.states[index];
            let image = images.build(state)?;
            let owed = self.rec.owed(*state.points.end());
            let key = (digest(&image), owed.len());
            let known = self
                .seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&key)
                .cloned();
            let verdict = match known {
                Some(v) => v,
                None => {
                    let v = judge::judge(&bench, self.program, self.mode, &image, &owed)?;
                    self.seen
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(key, v.clone());
                    v
                }
            };
            let keep = (verdict != Verdict::Consistent).then_some(image);
            out.push((verdict, owed, keep));
            self.done.fetch_add(1, Ordering::Relaxed);
        }
        Ok(out)
    }
}

/// A fast digest of an image, to judge identical ones once.
fn digest(image: &[u8]) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    h.write(image);
    h.finish()
}

/// The name of a mode on the command line and in file names.
pub fn mode_name(mode: Consistency) -> String {
    match mode {
        Consistency::Journal(d) => format!("journal-{d}"),
        other => other.to_string(),
    }
}

/// An inconsistent state, as saved for a person to look at and replay.
struct Saved<'a> {
    program: &'a Program,
    mode: Consistency,
    seed: u64,
    index: usize,
    state: &'a CrashState,
    owed: &'a [String],
    verdict: &'a Verdict,
}

impl Saved<'_> {
    fn save(&self, out: &Path, image: &[u8]) -> anyhow::Result<()> {
        let dir = out.join(format!(
            "{}-{}-{}",
            self.program.name,
            mode_name(self.mode),
            self.index
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("crash.img"), image)?;
        let mut owed = self.owed.join("\n");
        owed.push('\n');
        std::fs::write(dir.join("promises"), owed)?;
        let (kind, why) = match self.verdict {
            Verdict::Inconsistent { kind, why } => (kind.as_str(), why.as_str()),
            Verdict::CheckerFailed(why) => ("checker failed", why.as_str()),
            Verdict::Consistent => ("consistent", ""),
        };
        let info = serde_json::json!({
            "program": self.program.name,
            "check": self.program.check,
            "mode": mode_name(self.mode),
            "seed": self.seed,
            "state": self.index,
            "committed": self.state.committed.0,
            "points": [self.state.points.start().0, self.state.points.end().0],
            "persisted": self.state.persisted.len(),
            "kind": kind,
            "why": why,
        });
        std::fs::write(dir.join("state.json"), serde_json::to_string_pretty(&info)?)?;
        let replay = format!(
            "stitchfs crashtest --replay {}\n",
            dir.canonicalize()?.display()
        );
        std::fs::write(dir.join("reproduce"), replay)?;
        Ok(())
    }
}

/// Judges a saved state again: its image, its promises, its checker.
pub fn replay(dir: &Path) -> anyhow::Result<Verdict> {
    let info: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("state.json"))
            .with_context(|| format!("{}/state.json", dir.display()))?,
    )?;
    let field = |k: &str| info[k].as_str().map(String::from);
    let mode: Consistency = field("mode")
        .context("state.json without a mode")?
        .parse()
        .map_err(anyhow::Error::msg)?;
    let name = field("program").context("state.json without a program")?;
    let scratch = tempfile::tempdir()?;
    let program = match builtin::builtins(&name, scratch.path()) {
        Ok(mut p) => p.remove(0),
        Err(_) => Program {
            name,
            workload: Vec::new(),
            check: serde_json::from_value(info["check"].clone())?,
        },
    };
    let image = std::fs::read(dir.join("crash.img"))?;
    let owed: Vec<String> = std::fs::read_to_string(dir.join("promises"))?
        .lines()
        .map(String::from)
        .collect();
    let bench = judge::Bench::new(scratch.path(), false)?;
    judge::judge(&bench, &program, mode, &image, &owed)
}
