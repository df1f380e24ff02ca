//! `stitchfs fsck [-n] [--json] [--recover] IMAGE`: check an image with
//! the independent checker (crate `stitch-fsck`) and exit with e2fsck's
//! codes: 0 clean, 4 problems left uncorrected (leaks too; the class of
//! each finding is printed), 8 the check could not run. An image whose
//! journal needs recovery is checked as if replayed; `--recover` replays it
//! into the image first.

use crate::progress;
use anyhow::Context;
use stitch_blockdev::Location;
use stitch_fsck::CheckOptions;

#[derive(clap::Args)]
pub struct Args {
    /// Open read-only and answer "no" to every question (the default
    /// unless --recover or --repair-leaks is given; accepted for e2fsck
    /// compatibility).
    #[arg(short = 'n')]
    pub no: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Reclaim soft-updates leaks (and nothing else): reconnect unattached
    /// files and directories to lost+found, correct link and block counts,
    /// clear leaked bitmap bits, fix free counts, finish orphans. Refuses
    /// an image with corruption. Repeats until clean (at most 5 passes).
    /// `stitchfs mount` does the same by itself after an unclean shutdown.
    #[arg(long, conflicts_with = "no")]
    pub repair_leaks: bool,
    /// Replay the journal into the image first, as the kernel does at
    /// mount: write the blocks of every committed transaction to their
    /// home locations (revoked copies skipped), flush, empty the journal,
    /// flush, clear the needs_recovery flag, flush; then check. Without
    /// it, an image that needs recovery is checked as if replayed, in
    /// memory, and left unchanged. Do not use on a mounted image.
    #[arg(long, conflicts_with_all = ["no", "repair_leaks"])]
    pub recover: bool,
    /// Image file, block device, or NBD URI (nbd://HOST[:PORT]/EXPORT,
    /// nbd+unix:///EXPORT?socket=PATH).
    pub image: Location,
}

/// Runs the check and returns the exit code for `main` to use.
pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.repair_leaks {
        // What stops the repair is, as for a check, exit code 8.
        return Ok(crate::repair::run(&args.image).unwrap_or_else(|e| {
            eprintln!("stitchfs fsck: {e:#}");
            stitch_fsck::EXIT_ERROR
        }));
    }
    let bar = progress::bar()?;
    let opts = CheckOptions {
        recover: args.recover,
    };
    let result = stitch_fsck::check_at(&args.image, &opts, &mut |phase, done, total| {
        progress::show(&bar, phase, done, total)
    });
    progress::clear(&bar);
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            match e {
                // It names the image itself.
                stitch_fsck::FsckError::Open { .. } => eprintln!("stitchfs fsck: {e}"),
                _ => eprintln!("stitchfs fsck: {}: {e}", args.image),
            }
            return Ok(e.exit_code());
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("encoding the report")?
        );
    } else {
        println!("{}:", args.image);
        print!("{report}");
    }
    Ok(report.exit_code())
}
