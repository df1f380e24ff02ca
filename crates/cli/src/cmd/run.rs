//! `stitchfs run --stream NAME [--ignore-fsync] -- CMD ARGS...`: runs an
//! unmodified program, and every process it starts, in a stream of a
//! stitchfs mount ("Consistency Without Ordering"): the disk holds a
//! prefix of what they change, in the order they changed it, whatever
//! else runs on the mount. With `--ignore-fsync` their `fsync`s only
//! order and return at once. When CMD exits, `run` makes the stream
//! durable and only then exits with CMD's status, so a script that prints
//! "done" after it has not lied.
//!
//! `run` joins the stream itself, then starts CMD: the mount gives a
//! process it first sees the stream of its parent. It is a child
//! subreaper, so an orphaned grandchild is still found in the family.

use anyhow::{bail, Context};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Command;

#[derive(clap::Args)]
pub struct Args {
    /// The stream's name (at most 63 bytes); made if new, joined if this
    /// user made it before.
    #[arg(long, value_name = "NAME")]
    pub stream: String,
    /// fsync, fdatasync and O_SYNC writes in the stream only order: they
    /// return at once, and the stream is made durable when CMD exits.
    #[arg(long)]
    pub ignore_fsync: bool,
    /// A file or directory on the mount (default: $STITCHFS_MOUNT, else
    /// the working directory).
    #[arg(long, value_name = "PATH")]
    pub at: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

/// The mount a wrapper acts on: `at`, else `$STITCHFS_MOUNT`, else the
/// working directory; its path and an open descriptor.
pub(crate) fn open_mount(at: Option<PathBuf>) -> anyhow::Result<(PathBuf, std::fs::File)> {
    let at = at
        .or_else(|| std::env::var_os("STITCHFS_MOUNT").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("."));
    let mount = std::fs::File::open(&at).with_context(|| format!("opening {}", at.display()))?;
    Ok((at, mount))
}

/// Makes this process a child subreaper: an orphaned descendant of the
/// programs it starts is adopted here, and so still inherits from it.
pub(crate) fn become_subreaper() -> anyhow::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error()).context("becoming a child subreaper");
    }
    Ok(())
}

/// A program's exit status as a shell reports it (128 + signal).
pub(crate) fn exit_code(status: std::process::ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

/// From the terminal, ^C and ^\ reach the whole foreground group: the
/// program decides; the wrapper stays to finish what it promised. Call
/// after the child started (so it keeps the defaults across its exec).
pub(crate) fn ignore_terminal_signals() {
    // SAFETY: setting dispositions to SIG_IGN.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let (at, mount) = open_mount(args.at.clone())?;
    let flags = if args.ignore_fsync {
        stitch_control::STREAM_IGNORE_FSYNC
    } else {
        0
    };
    become_subreaper()?;
    match stitch_control::request_set_stream(&mount, args.stream.as_bytes(), flags) {
        Ok(true) => {}
        Ok(false) => bail!("{} is not on a stitchfs mount", at.display()),
        Err(e) => {
            return Err(e).with_context(|| format!("joining stream {:?}", args.stream));
        }
    }
    let mut child = Command::new(&args.command[0])
        .args(&args.command[1..])
        .spawn()
        .with_context(|| format!("starting {:?}", args.command[0]))?;
    ignore_terminal_signals();
    let status = child.wait().context("waiting for the program")?;
    stitch_control::request_stream_sync(&mount)
        .with_context(|| format!("making stream {:?} durable", args.stream))?;
    Ok(exit_code(status))
}
