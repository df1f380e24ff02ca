//! `stitchfs sync [PATH]`: makes everything a stitchfs mount holds durable.
//!
//! `sync(1)` cannot: the kernel sends no `syncfs` to a FUSE server. This
//! asks the server directly, by an ioctl on PATH (any file or directory of
//! the mount), and returns once the flush is on the disk.

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// A file or directory on the stitchfs mount
    #[arg(default_value = ".")]
    pub path: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    sync_mount(&args.path)
}

/// Sends the sync ioctl through `path`; a path on another file system is
/// an error that says so.
pub fn sync_mount(path: &Path) -> anyhow::Result<()> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    match stitch_control::request_sync(&f) {
        Ok(true) => Ok(()),
        Ok(false) => bail!("{} is not on a stitchfs mount", path.display()),
        Err(e) => Err(e).with_context(|| format!("syncing the mount of {}", path.display())),
    }
}
