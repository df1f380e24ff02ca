//! Running a program's workload on a mount whose device records every
//! write and flush, with its output as the witness.
//!
//! The mount is the real one (memfs behind this binary's FUSE frontend,
//! default options but for the mode), over a memory device wrapped in a
//! [`RecordingDevice`], which only observes: each write and flush goes to
//! the device as it would, and is logged.
//!
//! Each line the workload prints is taken with the log's length when the
//! harness reads it. The line was printed after every write the workload
//! had made durable by then, so those are in the log by that point: a
//! crash at or after it owes the line's promise. The harness reads a line
//! a moment after it was written, so the position may be later than the
//! printing (more writes may have come from other threads); that only
//! holds fewer crash states to the promise, never one wrongly.

use super::builtin::Program;
use anyhow::{bail, Context};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use stitch_blockdev::record::{CrashPoint, Log};
use stitch_blockdev::{MemDevice, RecordingDevice};
use stitch_diskfs::{Consistency, DiskFs};
use stitch_memfs::{MemFs, Order};

/// Size of the image a workload runs on, and of the journal in it.
const IMAGE_BYTES: u64 = 16 << 20;
const JOURNAL_BYTES: u64 = 4 << 20;

/// A line of the workload's output and where the write log stood.
#[derive(Clone, Debug)]
pub struct Promise {
    pub line: String,
    pub at: CrashPoint,
}

/// What a recorded run leaves to judge.
pub struct Recording {
    /// The image before the run.
    pub base: Arc<[u8]>,
    pub log: Log,
    pub promises: Vec<Promise>,
}

impl Recording {
    /// The lines a crash at `point` owes.
    pub fn owed(&self, point: CrashPoint) -> Vec<String> {
        self.promises
            .iter()
            .filter(|p| p.at <= point)
            .map(|p| p.line.clone())
            .collect()
    }
}

/// Runs `program`'s workload on a fresh image in `mode`, recorded.
pub fn record(
    program: &Program,
    mode: Consistency,
    order: Order,
    scratch: &Path,
) -> anyhow::Result<Recording> {
    let base = fresh_image(matches!(mode, Consistency::Journal(_)), scratch)?;
    let mem = MemDevice::from_image(4096, base.clone()).context("the image in memory")?;
    let dev = Arc::new(RecordingDevice::with_base(mem, base).context("the recording device")?);
    let now = stitch_diskfs::Timestamp::now();
    let disk = DiskFs::mount(dev.clone(), mode, now).context("mounting the fresh image")?;
    let opts = stitch_memfs::Options {
        order,
        ..Default::default()
    };
    let fs = MemFs::mount(disk, opts).context("starting memfs")?;
    let mnt = scratch.join("recording");
    std::fs::create_dir_all(&mnt)?;
    let session = serve(&fs, &mnt)?;
    let ran = run_workload(program, &mnt, &dev);
    let unmounted = session.umount_and_join();
    fs.unmount().context("unmounting the recording mount")?;
    unmounted.context("ending the recording mount's FUSE session")?;
    Ok(Recording {
        base: dev.base(),
        log: dev.log(),
        promises: ran?,
    })
}

/// The workload, run to its end in the mount's root: its lines, with the
/// log's length as each was read.
fn run_workload(
    program: &Program,
    root: &Path,
    dev: &RecordingDevice<MemDevice>,
) -> anyhow::Result<Vec<Promise>> {
    let (cmd, args) = program
        .workload
        .split_first()
        .context("an empty workload command")?;
    let mut child = Command::new(cmd)
        .args(args)
        .current_dir(root)
        .env("STITCHFS_EXE", std::env::current_exe()?)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", program.workload.join(" ")))?;
    let stderr = child.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let mut promises = Vec::new();
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let at = CrashPoint(dev.log_len());
        promises.push(Promise { line: line?, at });
    }
    let status = child.wait()?;
    let stderr = errors.join().unwrap_or_default();
    if !status.success() {
        bail!(
            "the workload {} failed ({status}):\n{}",
            program.workload.join(" "),
            stderr.trim_end()
        );
    }
    Ok(promises)
}

/// Serves `fs` at `mnt` from background threads.
fn serve(fs: &MemFs, mnt: &Path) -> anyhow::Result<fuser::BackgroundSession> {
    use fuser::MountOption as M;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        M::FSName("stitchfs-recording".into()),
        M::CUSTOM("subtype=stitchfs".into()),
        M::DefaultPermissions,
    ];
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(2);
    let session = fuser::Session::new(crate::fuse::StitchFuse::new(fs.clone()), mnt, &config)
        .with_context(|| format!("mounting the recording on {}", mnt.display()))?;
    crate::fuse::tell_kernel_of_attr_changes(fs, session.notifier());
    session.spawn().context("serving the recording mount")
}

/// A new image: ext3 for journal modes, ext2 otherwise.
fn fresh_image(journal: bool, scratch: &Path) -> anyhow::Result<Vec<u8>> {
    let path = scratch.join("fresh.img");
    let opts = stitch_mkfs::MkfsOptions {
        size: Some(IMAGE_BYTES),
        journal: journal.then_some(stitch_mkfs::JournalSize::Bytes(JOURNAL_BYTES)),
        force: true,
        ..Default::default()
    };
    stitch_mkfs::mkfs(&path, &opts, &mut |_, _| {}).context("making the image")?;
    let bytes = std::fs::read(&path)?;
    std::fs::remove_file(&path)?;
    Ok(bytes)
}
