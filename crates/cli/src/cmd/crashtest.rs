//! `stitchfs crashtest`: run workloads on the recording device, build every
//! crash image, recover each with stitchfs and judge it with e2fsck, our
//! fsck and the reference model (crate `stitch-crashtest`). Prints a
//! summary table; saves each violation (crash image, operations, expected
//! and found states, the command reproducing it) under `--out`; exits 1 if
//! anything was violated.

use anyhow::bail;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use stitch_crashtest::{workload, Config, Consistency, DataMode, Event, Order};

#[derive(clap::Args)]
pub struct Args {
    /// Consistency mode: async, softupdates, journal, or all (softupdates
    /// and journal in every data mode; async is the control, which must
    /// show violations).
    #[arg(long, default_value = "all")]
    pub mode: String,
    /// Data mode with --mode journal: writeback, ordered, journal, or all.
    #[arg(long, default_value = "ordered")]
    pub data: String,
    /// Workloads: all (named, past regressions and generated), named,
    /// generated, streams (steps in three streams, judged for prefixes and
    /// related steps: the named stream cases and --samples drawn of
    /// --length + 4 steps), patchgroups (simulated processes making,
    /// engaging, depending on, syncing and closing patchgroups, forking
    /// and exiting, judged for the groups' dependencies and pg_sync: the
    /// named cases and --samples drawn of --length + 4 steps),
    /// patchgroups-streams (the same with each step in one of two streams
    /// too: both orders at once), xsync (steps of an external-synchrony
    /// group, whose fsyncs return at once and whose outputs commit,
    /// interleaved with an outside process's, judged for every change
    /// before a released output: the named cases and --samples drawn of
    /// --length + 4 steps), xsync-streams (the group in a stream too), one named
    /// workload (featherstitch, mcorefs-rename, mcorefs-loop,
    /// mcorefs-rmrf, ccfs-journal-update, maildelivery, large-write,
    /// orphans, full, git-objects), or a spec `gen:STEPS` as printed in a
    /// violation (`sN/` before a step runs it in stream N; `+streamsync`
    /// syncs its stream; `pN.CALL.CALL/` runs it in process N after
    /// patchgroup calls cG create, dQ>P depend, eG engage, xG disengage,
    /// kG close, fN fork, qN exit; `+pgsync:G` syncs group G; `x/` runs
    /// it in the external-synchrony group, `+output` releases its output).
    #[arg(long, default_value = "all")]
    pub workload: String,
    /// Longest generated sequence: lengths 1 and 2 are exhaustive, longer
    /// ones sampled [default: 1; 3 with --long].
    #[arg(long)]
    pub length: Option<usize>,
    /// Generated workloads drawn per sampled length [default: 100; 1000
    /// with --long].
    #[arg(long)]
    pub samples: Option<usize>,
    /// Largest epoch whose crash states are all enumerated; beyond, this
    /// many are sampled [default: 32; 256 with --long].
    #[arg(long)]
    pub max_states: Option<u64>,
    /// Seed of the sampling (crash states, longer workloads); printed, and
    /// random if not given.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Worker threads [default: the number of CPUs].
    #[arg(long)]
    pub jobs: Option<usize>,
    /// A long run: longer sequences, more samples, more crash states.
    #[arg(long)]
    pub long: bool,
    /// Where violations are saved, one directory each.
    #[arg(long, default_value = "crashtest-violations")]
    pub out: PathBuf,
    /// Save at most this many violations.
    #[arg(long, default_value_t = 100)]
    pub keep: usize,
    /// Judge only this crash state of each workload (as a violation's
    /// reproduction command gives it).
    #[arg(long)]
    pub state: Option<usize>,
    /// Bound memfs's file pages in memory to N (4 KiB each; default: 1
    /// GiB's worth, which no workload reaches). Past the bound a read or
    /// write flushes everything and evicts clean pages and inodes, so
    /// later operations reload them from the disk: the memory-pressure
    /// path, crash-tested.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub memory_pages: Option<u64>,
    /// What memfs's fsyncs cover, as `mount --order` says: sequential
    /// (default; every change before the fsync) or precise (the fsynced
    /// inode's closure). The oracle holds each crash image to the same.
    #[arg(long, value_name = "ORDER", default_value_t = Order::Sequential)]
    pub order: Order,
    /// Run only part K of N of the selected workloads (`K/N`: those whose
    /// index i in the selection has i % N == K), to split a long run or
    /// take a deterministic sample of it.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,
    /// List the selected workloads (or with --program, the programs) and
    /// exit.
    #[arg(long)]
    pub list: bool,
    /// Crash-test real programs instead: NAME[,NAME...] or all (see
    /// --program all --list). Each runs on a recording stitchfs mount;
    /// every crash state is mounted as a user would and judged by the
    /// program's own checker, held to what the program printed before the
    /// crash. --mode defaults to softupdates and every journal data mode;
    /// --max-states to 8.
    #[arg(long, value_name = "NAMES", conflicts_with = "workload_script")]
    pub program: Option<String>,
    /// With --program or --workload-script: how each crash image is
    /// recovered for judging. file: `stitchfs mount` on the image file.
    /// nbd: the image served by nbdkit's file plugin on a Unix socket and
    /// mounted by its nbd+unix URI, so recovery runs through the NBD
    /// device as it would for an image kept on an NBD server.
    #[arg(long, value_name = "HOW", default_value = "file", value_parser = ["file", "nbd"])]
    pub recover_over: String,
    /// A program of one's own: the workload, run in the mount's root; each
    /// line it prints is a promise that crashes after it are held to.
    #[arg(long, value_name = "FILE", requires = "checker_script")]
    pub workload_script: Option<PathBuf>,
    /// The checker of --workload-script, run in a recovered crash image's
    /// root with STITCH_PROMISES naming a file of the lines owed: exit 0
    /// consistent, 1 inconsistent (printing `KIND: why`), else it failed.
    #[arg(long, value_name = "FILE", requires = "workload_script")]
    pub checker_script: Option<PathBuf>,
    /// With --program: judge at most N crash states per program and mode,
    /// drawn with the seed (0: every one) [default: 100].
    #[arg(long, value_name = "N")]
    pub sample: Option<usize>,
    /// Judge a saved inconsistent program state again (the directory a
    /// --program run saved under --out).
    #[arg(long, value_name = "DIR")]
    pub replay: Option<PathBuf>,
}

pub(super) fn modes(mode: &str, data: &str) -> anyhow::Result<Vec<Consistency>> {
    let datas = |d: &str| -> anyhow::Result<Vec<DataMode>> {
        Ok(match d {
            "all" => vec![DataMode::Writeback, DataMode::Ordered, DataMode::Journal],
            d => vec![d.parse().map_err(anyhow::Error::msg)?],
        })
    };
    Ok(match mode {
        "all" => {
            let mut v = vec![Consistency::SoftUpdates];
            v.extend(datas("all")?.into_iter().map(Consistency::Journal));
            v
        }
        "async" => vec![Consistency::Async],
        "softupdates" | "soft-updates" => vec![Consistency::SoftUpdates],
        "journal" => datas(data)?.into_iter().map(Consistency::Journal).collect(),
        other => bail!("unknown mode {other:?} (async, softupdates, journal, all)"),
    })
}

/// A seed when none is given (printed with the run).
pub(super) fn random_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64 % 1_000_000)
}

/// `K/N` with K < N.
fn shard(s: &str) -> anyhow::Result<(usize, usize)> {
    let parsed = s
        .split_once('/')
        .and_then(|(k, n)| Some((k.parse::<usize>().ok()?, n.parse::<usize>().ok()?)));
    match parsed {
        Some((k, n)) if k < n => Ok((k, n)),
        _ => bail!("--shard wants K/N with K < N, not {s:?}"),
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.program.is_some() || args.workload_script.is_some() || args.replay.is_some() {
        return super::programs::run(args);
    }
    let length = args.length.unwrap_or(if args.long { 3 } else { 1 });
    let samples = args.samples.unwrap_or(if args.long { 1000 } else { 100 });
    let max_states = args.max_states.unwrap_or(if args.long { 256 } else { 32 });
    let seed = args.seed.unwrap_or_else(random_seed);
    let workloads = chosen_workloads(&args, length, samples, seed)?;
    if args.list {
        for w in &workloads {
            println!("{}", w.name);
        }
        return Ok(0);
    }
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let cfg = Config {
        max_states,
        seed,
        jobs,
        out: Some(args.out.clone()),
        keep: args.keep,
        only_state: args.state,
        memory_pages: args.memory_pages,
        order: args.order,
        ..Config::new(modes(&args.mode, &args.data)?, workloads)
    };
    println!(
        "crashtest: {} workload(s) x {} mode(s), {} order, max {} crash states per epoch, seed {}, {} job(s)",
        cfg.workloads.len(),
        cfg.modes.len(),
        cfg.order,
        max_states,
        seed,
        jobs
    );
    let summary = run_with_progress(&cfg)?;
    println!("{}", summary.table());
    if summary.violations.is_empty() {
        println!("no violations");
        return Ok(0);
    }
    print_violations(&summary.violations);
    println!(
        "{} violating crash state(s); up to {} saved under {}",
        summary.violations.len(),
        args.keep,
        args.out.display()
    );
    Ok(1)
}

/// The workloads `--workload` names, cut to `--shard`.
fn chosen_workloads(
    args: &Args,
    length: usize,
    samples: usize,
    seed: u64,
) -> anyhow::Result<Vec<workload::Workload>> {
    let workloads = match args.workload.as_str() {
        "all" => {
            let mut w = workload::named();
            w.extend(workload::regressions());
            w.extend(workload::generated(length, samples, seed));
            w
        }
        "named" => workload::named(),
        // Stream workloads run four steps longer than --length says:
        // two streams need a few steps each to meet.
        "streams" => {
            let mut w = stitch_crashtest::streams::named();
            w.extend(stitch_crashtest::streams::generated(
                length + 4,
                samples,
                seed,
            ));
            w
        }
        // Patchgroup workloads run four steps longer, as stream ones do:
        // a dependency needs a few steps before and after it.
        "patchgroups" => {
            let mut w = stitch_crashtest::patchgroups::named();
            w.extend(stitch_crashtest::patchgroups::generated(
                length + 4,
                samples,
                seed,
            ));
            w
        }
        "patchgroups-streams" => {
            stitch_crashtest::patchgroups::with_streams(length + 4, samples, seed)
        }
        // External synchrony: four steps longer too (changes, outputs
        // and outside fsyncs need room to interleave).
        "xsync" => {
            let mut w = stitch_crashtest::xsync::named();
            w.extend(stitch_crashtest::xsync::generated(
                length + 4,
                samples,
                seed,
            ));
            w
        }
        "xsync-streams" => stitch_crashtest::xsync::with_streams(length + 4, samples, seed),
        "generated" => workload::generated(length, samples, seed),
        spec => vec![workload::parse(spec)?],
    };
    Ok(match &args.shard {
        None => workloads,
        Some(s) => {
            let (k, n) = shard(s)?;
            workloads
                .into_iter()
                .enumerate()
                .filter(|(i, _)| i % n == k)
                .map(|(_, w)| w)
                .collect()
        }
    })
}

/// Runs the crash test with a progress bar (a line at every tenth of the
/// way when stderr is no terminal).
fn run_with_progress(cfg: &Config) -> anyhow::Result<stitch_crashtest::Summary> {
    let bar = crate::progress::bar_with(
        "{bar:40} {pos}/{len} workloads, {msg} [{elapsed_precise} eta {eta}]",
    )?;
    let tty = std::io::stderr().is_terminal();
    let states = AtomicUsize::new(0);
    let violations = AtomicUsize::new(0);
    let summary = stitch_crashtest::run(cfg, &|e| match e {
        Event::Start { jobs } => bar.set_length(*jobs as u64),
        Event::Done {
            states: s,
            violations: v,
            ..
        } => {
            let s = states.fetch_add(*s, Ordering::Relaxed) + s;
            let v = violations.fetch_add(*v, Ordering::Relaxed) + v;
            bar.set_message(format!("{s} crash states, {v} violations"));
            bar.inc(1);
            let (done, all) = (bar.position(), bar.length().unwrap_or(0));
            if !tty && all >= 10 && done % (all / 10) == 0 {
                eprintln!("crashtest: {done}/{all} workloads, {s} crash states, {v} violations");
            }
        }
    })?;
    bar.finish_and_clear();
    Ok(summary)
}

/// The violations by workload: one line each, with the kinds found and
/// a first message, for the first 40 workloads.
fn print_violations(violations: &[stitch_crashtest::Violation]) {
    let mut by: Vec<(String, String, Vec<&stitch_crashtest::Violation>)> = Vec::new();
    for v in violations {
        match by
            .iter_mut()
            .find(|(m, w, _)| *m == v.mode && *w == v.workload)
        {
            Some((_, _, vs)) => vs.push(v),
            None => by.push((v.mode.clone(), v.workload.clone(), vec![v])),
        }
    }
    println!("violations by workload:");
    for (mode, w, vs) in by.iter().take(40) {
        let mut kinds: Vec<&str> = vs
            .iter()
            .flat_map(|v| v.kinds())
            .map(|k| k.name())
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        let first = vs[0];
        println!(
            "  {mode} {w}: {} crash state(s) [{}]\n    {}\n    {}",
            vs.len(),
            kinds.join(","),
            first.findings.first().map_or("", |f| f.message.as_str()),
            match &first.dir {
                Some(d) => format!("saved in {}", d.display()),
                None => format!("reproduce: {}", first.reproduce),
            }
        );
    }
    if by.len() > 40 {
        println!("  ... {} more workloads", by.len() - 40);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// Runs crashtest with `extra` arguments, saving under a fresh
    /// directory; returns the exit status and each saved violation's
    /// reproduce.sh (`None` without e2fsck).
    fn run_with(extra: &[&str]) -> Option<(i32, Vec<String>)> {
        if !stitch_crashtest::check::have_e2fsck() {
            eprintln!("e2fsck missing: skipped");
            return None;
        }
        let out = tempfile::tempdir().unwrap();
        let mut argv = vec![
            "crashtest",
            "--max-states",
            "4",
            "--seed",
            "1",
            "--jobs",
            "1",
        ];
        argv.extend(extra);
        argv.extend(["--out", out.path().to_str().unwrap()]);
        let code = run(Cli::try_parse_from(argv).unwrap().args).unwrap();
        // Each saved violation: its files, and the command in reproduce.sh.
        let mut repros = Vec::new();
        for d in std::fs::read_dir(out.path()).into_iter().flatten() {
            let d = d.unwrap().path();
            for f in [
                "crash.img",
                "operations.txt",
                "expected.txt",
                "found.txt",
                "reproduce.sh",
            ] {
                assert!(d.join(f).is_file(), "{f} missing in {}", d.display());
            }
            repros.push(std::fs::read_to_string(d.join("reproduce.sh")).unwrap());
        }
        Some((code, repros))
    }

    #[test]
    fn async_violations_exit_1_and_are_saved_with_a_reproduction() {
        let Some((code, saved)) = run_with(&["--mode", "async", "--workload", "featherstitch"])
        else {
            return;
        };
        assert_eq!(code, 1);
        assert!(!saved.is_empty(), "no violation saved");
        let repro = &saved[0];
        assert!(
            repro.contains(
                "--mode async --workload 'featherstitch' --max-states 4 --seed 1 --state "
            ),
            "{repro}"
        );
    }

    #[test]
    fn shards_split_the_selection() {
        assert_eq!(shard("0/20").unwrap(), (0, 20));
        assert!(shard("3/3").is_err());
        assert!(shard("x").is_err());
    }

    #[test]
    fn a_clean_run_exits_0_and_saves_nothing() {
        let Some((code, saved)) = run_with(&[
            "--mode",
            "journal",
            "--data",
            "all",
            "--workload",
            "maildelivery",
        ]) else {
            return;
        };
        assert_eq!(code, 0);
        assert!(saved.is_empty());
    }
}
