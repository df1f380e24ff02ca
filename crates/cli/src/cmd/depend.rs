//! `stitchfs depend "CMD1" "CMD2"`: runs CMD1, then CMD2, with every
//! change CMD2 makes reaching the disk only after every change CMD1 made
//! ("Generalized File System Dependencies", §5's `depend "sort <in >out"
//! "rm in"`), for programs that know nothing of stitchfs and without an
//! fsync: a crash leaves CMD1's work whole wherever it shows any of
//! CMD2's.
//!
//! How: `depend` makes a patchgroup P and engages it, then runs CMD1
//! (with `sh -c`); the mount gives every process CMD1 starts its
//! parent's groups, engaged as they were. When CMD1 exits, `depend`
//! disengages P, makes a group Q that depends on P (sealing P), engages
//! Q and runs CMD2 the same way. It is a child subreaper, so an orphaned
//! grandchild is still found in the family. Nothing is made durable
//! unless `--sync` asks (then Q, and so P, before `depend` exits).
//!
//! Exit status: CMD2's, or CMD1's if CMD1 fails (CMD2 does not run
//! then); 128 + N for a command killed by signal N.

use super::run::{become_subreaper, exit_code, ignore_terminal_signals, open_mount};
use anyhow::{bail, Context};
use std::path::PathBuf;
use std::process::Command;
use stitch_control::{
    request_patchgroup, PG_CLOSE, PG_CREATE, PG_DEPEND, PG_DISENGAGE, PG_ENGAGE, PG_SYNC,
};

#[derive(clap::Args)]
pub struct Args {
    /// A file or directory on the mount (default: $STITCHFS_MOUNT, else
    /// the working directory).
    #[arg(long, value_name = "PATH")]
    pub at: Option<PathBuf>,
    /// Make CMD2's changes, and so CMD1's, durable before exiting.
    #[arg(long)]
    pub sync: bool,
    /// The first command (a shell command line).
    #[arg(value_name = "CMD1")]
    pub first: String,
    /// The second command, whose changes wait for the first's.
    #[arg(value_name = "CMD2")]
    pub second: String,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let (at, mount) = open_mount(args.at.clone())?;
    let call = |what: &str, op: u32, g: u64, on: u64| {
        request_patchgroup(&mount, op, g, on).map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::ENOTTY) => format!(" ({} is not on a stitchfs mount)", at.display()),
                Some(libc::EBUSY) => {
                    " (a process CMD1 started still runs with its group engaged)".into()
                }
                _ => String::new(),
            };
            anyhow::Error::new(e).context(format!("{what}{hint}"))
        })
    };
    become_subreaper()?;
    let p = call("making a patchgroup", PG_CREATE, 0, 0)?;
    call("engaging the first group", PG_ENGAGE, p, 0)?;
    let first = shell(&args.first)?;
    call("disengaging the first group", PG_DISENGAGE, p, 0)?;
    if first != 0 {
        call("closing the first group", PG_CLOSE, p, 0)?;
        return Ok(first);
    }
    let q = call("making a patchgroup", PG_CREATE, 0, 0)?;
    call("ordering the second group after the first", PG_DEPEND, q, p)?;
    call("closing the first group", PG_CLOSE, p, 0)?;
    call("engaging the second group", PG_ENGAGE, q, 0)?;
    let second = shell(&args.second)?;
    call("disengaging the second group", PG_DISENGAGE, q, 0)?;
    if args.sync {
        call("making the groups durable", PG_SYNC, q, 0)?;
    }
    call("closing the second group", PG_CLOSE, q, 0)?;
    Ok(second)
}

/// Runs `line` with `sh -c` and waits for it: its exit status.
fn shell(line: &str) -> anyhow::Result<i32> {
    if line.is_empty() {
        bail!("an empty command");
    }
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(line)
        .spawn()
        .with_context(|| format!("starting {line:?}"))?;
    ignore_terminal_signals();
    let status = child.wait().context("waiting for the command")?;
    Ok(exit_code(status))
}
