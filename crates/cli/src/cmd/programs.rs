//! `stitchfs crashtest --program`: real programs crash-tested through the
//! mount (the instrument is `crate::programs`). Prints the table; writes
//! `report.md` and `report.json` beside the saved states under `--out`;
//! exits 1 if any mode but async (the control) left an inconsistent state
//! or a checker failed.

use super::crashtest::{modes, random_seed, Args};
use crate::programs::{self, builtin, Judged, Options, Verdict};
use anyhow::Context;
use stitch_diskfs::Consistency;

/// Crash states judged per program and mode unless told otherwise: a
/// full run of every program stays within a quarter of an hour here.
const DEFAULT_SAMPLE: usize = 100;

pub fn run(args: Args) -> anyhow::Result<i32> {
    if let Some(dir) = &args.replay {
        return replay(dir);
    }
    if args.list {
        for (name, about) in builtin::list() {
            println!("{name:<16} {about}");
        }
        return Ok(0);
    }
    let scripts = tempfile::tempdir().context("a directory for the program scripts")?;
    let opts = options(&args, scripts.path())?;
    println!(
        "crashtest: {} program(s) x {} mode(s), {} order, max {} crash states per epoch, seed {}",
        opts.programs.len(),
        opts.modes.len(),
        opts.order,
        opts.max_states,
        opts.seed
    );
    let bar =
        crate::progress::bar_with("{bar:40} {pos}/{len} crash states, {msg} [{elapsed_precise}]")?;
    let rows = programs::run(&opts, &mut |j: Judged<'_>| {
        bar.set_length(j.total as u64);
        bar.set_position(j.done as u64);
        bar.set_message(format!("{} in {}", j.program, programs::mode_name(j.mode)));
    })?;
    bar.finish_and_clear();
    print!("{}", programs::report::table(&rows));
    write_report(&args.out, &rows)?;
    let failing: Vec<&programs::Row> = rows
        .iter()
        .filter(|r| r.mode != programs::mode_name(Consistency::Async))
        .filter(|r| r.inconsistent_total() + r.checker_failed > 0)
        .collect();
    println!("report: {}/report.md", args.out.display());
    if failing.is_empty() {
        return Ok(0);
    }
    println!(
        "{} program/mode pair(s) left inconsistent states; saved under {}",
        failing.len(),
        args.out.display()
    );
    Ok(1)
}

/// What the arguments ask for: the programs (built-ins written into
/// `scripts`, or the user's pair), the modes (soft updates and every
/// journal data mode by default) and the bounds.
fn options(args: &Args, scripts: &std::path::Path) -> anyhow::Result<Options> {
    let programs = match (&args.program, &args.workload_script, &args.checker_script) {
        (Some(spec), _, _) => builtin::builtins(spec, scripts)?,
        (None, Some(w), Some(c)) => vec![builtin::custom(w, c)?],
        _ => anyhow::bail!("--program NAMES, or --workload-script with --checker-script"),
    };
    // Soft updates and every journal data mode unless told otherwise.
    let mode_spec = if args.mode == "all" && args.data == "ordered" {
        ("all", "all")
    } else {
        (args.mode.as_str(), args.data.as_str())
    };
    Ok(Options {
        programs,
        modes: modes(mode_spec.0, mode_spec.1)?,
        order: args.order,
        max_states: args.max_states.unwrap_or(8),
        seed: args.seed.unwrap_or_else(random_seed),
        out: args.out.clone(),
        keep: args.keep,
        over_nbd: args.recover_over == "nbd",
        sample: match args.sample {
            Some(0) => None,
            Some(n) => Some(n),
            None => Some(DEFAULT_SAMPLE),
        },
        jobs: args.jobs.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        }),
    })
}

/// `report.md`, `report.json` and `report.png` under `out`.
fn write_report(out: &std::path::Path, rows: &[programs::Row]) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    std::fs::write(
        out.join("report.md"),
        programs::report::markdown(rows, &command),
    )?;
    std::fs::write(out.join("report.json"), serde_json::to_string_pretty(rows)?)?;
    stitch_bench::plot::plot(
        &out.join("report.json"),
        &out.join("report.png"),
        "programs",
    )
}

fn replay(dir: &std::path::Path) -> anyhow::Result<i32> {
    let verdict = programs::replay(dir)?;
    match &verdict {
        Verdict::Consistent => println!("consistent"),
        Verdict::Inconsistent { kind, why } => println!("inconsistent: {kind}: {why}"),
        Verdict::CheckerFailed(why) => println!("the checker failed: {why}"),
    }
    Ok(i32::from(verdict != Verdict::Consistent))
}
