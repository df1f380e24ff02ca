//! `stitchfs bench modes`: Featherstitch Figure 10 and Seltzer Tables 4–5
//! in shape. The same loads run under the five consistency modes, each on a
//! fresh ext3 image file through `FileDevice`, so every flush is a real
//! `fdatasync`. A load's time runs from just after mount to the end of
//! unmount, which makes everything durable, as the papers measured:
//!
//! - untar: a real source tree created as untar does ([`super::tree`]);
//! - delete: that tree removed after a remount (the papers' delete);
//! - PostMark: `postmark`'s mix through diskfs, in one directory
//!   (PostMark's default), data in 4 KiB application writes;
//! - fsync: small files each created, written and made durable at once
//!   (journaling's case in Seltzer: one log write instead of ordered ones).
//!
//! Every mode formats the same ext3 image, so layouts agree and only the
//! consistency mechanism differs. A cell reports the median time of its runs
//! with the counts of that median run (journal commits depend on a 5-second
//! clock, so counts can move a little between runs).

use super::optimizations::{self, WRITEBACK_EVERY};
use super::postmark;
use super::tree::{self, Tree, NOW};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use stitch_blockdev::{FileDevice, OpenOptions};
use stitch_diskfs::{Consistency, DataMode, DiskFs, InodeNo, StackOptions};
use stitch_mkfs::{JournalSize, MkfsOptions};
use stitch_patch::Optimizations;

mod report;

pub use report::{table, Counts, JournalCounts, Report};

/// The modes, in column order.
pub const MODES: [(&str, Consistency); 5] = [
    ("async", Consistency::Async),
    ("soft updates", Consistency::SoftUpdates),
    ("data=writeback", Consistency::Journal(DataMode::Writeback)),
    ("data=ordered", Consistency::Journal(DataMode::Ordered)),
    ("data=journal", Consistency::Journal(DataMode::Journal)),
];

/// The loads, in row order.
pub const LOADS: [&str; 4] = ["untar", "delete", "postmark", "fsync"];

/// What a run needs.
pub struct Config {
    pub quick: bool,
    pub runs: usize,
    /// The source tree for untar and delete.
    pub tree: PathBuf,
    /// Files of the tree to use (default: the scale's).
    pub tree_files: Option<usize>,
    pub journal: JournalSize,
    /// Where the images go (on the disk being measured).
    pub scratch: PathBuf,
}

/// What the run was, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    pub runs: usize,
    pub tree: PathBuf,
    pub tree_files: usize,
    pub tree_bytes: u64,
    pub image_bytes: u64,
    pub journal_blocks: u32,
    pub postmark_files: usize,
    pub postmark_transactions: usize,
    pub postmark_max_size: u64,
    pub fsync_files: usize,
}

/// One run of one load under one mode.
pub(super) struct Sample {
    seconds: f64,
    counts: Counts,
}

/// Sizes: the papers' (PostMark as Featherstitch ran it; 2,000 fsyncs), or
/// a smoke run's.
struct Scale {
    image_bytes: u64,
    tree_files: usize,
    postmark: postmark::Shape,
    fsync_files: usize,
}

const FULL: Scale = Scale {
    image_bytes: 4 << 30,
    tree_files: usize::MAX,
    postmark: postmark::Shape {
        files: optimizations::Scale::FULL.postmark_files,
        transactions: optimizations::Scale::FULL.postmark_transactions,
        max_size: optimizations::Scale::FULL.postmark_max_size,
    },
    fsync_files: 2_000,
};

const QUICK: Scale = Scale {
    image_bytes: 256 << 20,
    tree_files: 300,
    postmark: postmark::Shape {
        files: optimizations::Scale::QUICK.postmark_files,
        transactions: optimizations::Scale::QUICK.postmark_transactions,
        max_size: optimizations::Scale::QUICK.postmark_max_size,
    },
    fsync_files: 100,
};

/// Runs every load under every mode `cfg.runs` times. A load's five modes
/// run one after another, so a burst of other work on the machine hits one
/// load's modes alike rather than one mode's loads.
pub fn run(cfg: &Config, mut progress: impl FnMut(&str)) -> anyhow::Result<Report> {
    let scale = if cfg.quick { &QUICK } else { &FULL };
    let t = Tree::read(&cfg.tree, cfg.tree_files.unwrap_or(scale.tree_files))?;
    let scratch = tempfile::tempdir_in(&cfg.scratch)?;
    let img = scratch.path().join("fs.img");
    let bench = Bench {
        cfg,
        scale,
        tree: &t,
        img: &img,
    };
    let journal_blocks = bench.format()?;
    // samples[mode][load] holds one outcome per run.
    let mut samples: Vec<Vec<Vec<Outcome>>> = (0..MODES.len())
        .map(|_| (0..LOADS.len()).map(|_| Vec::new()).collect())
        .collect();
    for r in 0..cfg.runs.max(1) {
        for phase in PHASES {
            for (m, &(name, mode)) in MODES.iter().enumerate() {
                progress(&format!("run {}: {phase:?} / {name}", r + 1));
                for (l, s) in bench.phase(phase, mode)? {
                    if let Err(e) = &s {
                        eprintln!("{} under {name}, run {}: {e}", LOADS[l], r + 1);
                    }
                    samples[m][l].push(s);
                }
            }
        }
    }
    let settings = Settings {
        runs: cfg.runs.max(1),
        tree: cfg.tree.clone(),
        tree_files: t.files,
        tree_bytes: t.bytes,
        image_bytes: scale.image_bytes,
        journal_blocks,
        postmark_files: scale.postmark.files,
        postmark_transactions: scale.postmark.transactions,
        postmark_max_size: scale.postmark.max_size,
        fsync_files: scale.fsync_files,
    };
    Ok(Report {
        settings,
        cells: report::cells(samples),
    })
}

/// One run of one load: its sample, or why it failed.
pub(super) type Outcome = Result<Sample, String>;

/// What runs on one fresh image: untar then delete share theirs, as in the
/// papers (delete after a remount).
#[derive(Clone, Copy, Debug)]
enum Phase {
    UntarDelete,
    Postmark,
    Fsync,
}

const PHASES: [Phase; 3] = [Phase::UntarDelete, Phase::Postmark, Phase::Fsync];

/// Progress steps of one run.
pub const STEPS: usize = PHASES.len() * MODES.len();

struct Bench<'a> {
    cfg: &'a Config,
    scale: &'a Scale,
    tree: &'a Tree,
    img: &'a Path,
}

impl Bench<'_> {
    /// Runs `phase` under `mode` on a fresh image: each load's index in
    /// [`LOADS`] with its outcome. A failed load is reported as failed and
    /// the benchmark goes on (delete needs untar's tree).
    fn phase(&self, phase: Phase, mode: Consistency) -> anyhow::Result<Vec<(usize, Outcome)>> {
        self.format()?;
        let (img, t) = (self.img, self.tree);
        let out = match phase {
            Phase::UntarDelete => {
                let untar = attempt(img, mode, |fs| {
                    tree::untar(fs, &self.cfg.tree, t)?;
                    Ok(t.bytes)
                });
                let delete = match untar {
                    Ok(_) => attempt(img, mode, |fs| {
                        tree::delete(fs, t)?;
                        Ok(0)
                    }),
                    Err(_) => Err("not run: untar failed".into()),
                };
                vec![(0, untar), (1, delete)]
            }
            Phase::Postmark => vec![(
                2,
                attempt(img, mode, |fs| {
                    let mut d = Disk::new(fs)?;
                    let mut rng = ChaCha8Rng::seed_from_u64(2007);
                    postmark::run(&mut d, &self.scale.postmark, &mut rng)?;
                    Ok(d.bytes)
                }),
            )],
            Phase::Fsync => vec![(
                3,
                attempt(img, mode, |fs| fsync_load(fs, self.scale.fsync_files)),
            )],
        };
        std::fs::remove_file(img)?;
        Ok(out)
    }

    /// A fresh ext3 image (replacing any); returns its journal blocks.
    fn format(&self) -> anyhow::Result<u32> {
        if self.img.exists() {
            std::fs::remove_file(self.img)?;
        }
        let opts = MkfsOptions {
            size: Some(self.scale.image_bytes),
            journal: Some(self.cfg.journal),
            force: true,
            ..Default::default()
        };
        Ok(stitch_mkfs::mkfs(self.img, &opts, &mut |_, _| {})?.journal_blocks)
    }
}

/// Mounts `img` under `mode` and measures `load` on it.
fn attempt(
    img: &Path,
    mode: Consistency,
    load: impl FnOnce(&mut DiskFs) -> anyhow::Result<u64>,
) -> Outcome {
    mount(img, mode)
        .and_then(|fs| measure(fs, load))
        .map_err(|e| format!("{e:#}"))
}

fn mount(img: &Path, mode: Consistency) -> anyhow::Result<DiskFs> {
    let dev = FileDevice::open(img, OpenOptions::default())?;
    let stack = StackOptions::new(mode).cache(tree::cache_config(Optimizations::default()));
    Ok(DiskFs::mount(Arc::new(dev), stack, NOW)?)
}

/// Runs `load` (which returns the file bytes it wrote) and unmounts, timing
/// both; counts are from mount to the end of unmount.
fn measure(
    mut fs: DiskFs,
    load: impl FnOnce(&mut DiskFs) -> anyhow::Result<u64>,
) -> anyhow::Result<Sample> {
    let before = fs.modes().cache().stats();
    let t0 = Instant::now();
    let data_bytes = load(&mut fs)?;
    // Unmount syncs first anyway; syncing here lets us read the journal's
    // counters before unmount closes it.
    fs.sync()?;
    let journal = fs.modes().journal().map(|j| {
        let s = j.stats();
        JournalCounts {
            commits: s.commits,
            log_blocks: s.log_blocks,
            copies: s.copies,
            revokes: s.revokes,
            space_waits: s.space_waits,
        }
    });
    let after = fs.unmount(NOW)?.stats();
    Ok(Sample {
        seconds: t0.elapsed().as_secs_f64(),
        counts: Counts {
            data_bytes,
            blocks_written: after.blocks_written - before.blocks_written,
            flushes: after.flushes - before.flushes,
            undo_bytes: after.undo_bytes_allocated - before.undo_bytes_allocated,
            patches: after.patches_created() - before.patches_created(),
            journal,
        },
    })
}

static BYTES: [u8; 4096] = [0x5a; 4096];

/// `files` × (create a 4 KiB file, write it, make both durable).
fn fsync_load(fs: &mut DiskFs, files: usize) -> anyhow::Result<u64> {
    let root = fs.root();
    let (dir, _) = fs.mkdir(root, b"fsync", 0o755, 0, 0, NOW)?;
    for i in 0..files {
        let name = format!("f{i}");
        let (ino, created) = fs.create(dir, name.as_bytes(), 0o644, 0, 0, NOW)?;
        let (_, written) = fs.write(ino, 0, &BYTES, NOW)?;
        // fsync of a new file: its data, its inode and the entry naming it.
        let both = fs.modes_mut().group(&[created, written])?;
        fs.sync_patch(both)?;
    }
    Ok((files * BYTES.len()) as u64)
}

/// PostMark on diskfs: files `pm<n>` in one directory.
struct Disk<'a> {
    fs: &'a mut DiskFs,
    dir: InodeNo,
    next: u64,
    ops: u64,
    bytes: u64,
}

struct PmFile {
    name: String,
    ino: InodeNo,
    size: u64,
}

impl<'a> Disk<'a> {
    fn new(fs: &'a mut DiskFs) -> anyhow::Result<Self> {
        let root = fs.root();
        let (dir, _) = fs.mkdir(root, b"postmark", 0o755, 0, 0, NOW)?;
        Ok(Disk {
            fs,
            dir,
            next: 0,
            ops: 0,
            bytes: 0,
        })
    }

    /// Writes `len` bytes at `at` in PostMark's 4 KiB application writes.
    fn fill(&mut self, ino: InodeNo, at: u64, len: u64) -> anyhow::Result<()> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(BYTES.len() as u64) as usize;
            self.fs.write(ino, at + done, &BYTES[..n], NOW)?;
            done += n as u64;
        }
        self.bytes += len;
        self.ops += 1;
        Ok(())
    }
}

impl postmark::Target for Disk<'_> {
    type File = PmFile;
    type Error = anyhow::Error;

    fn create(&mut self, size: u64) -> anyhow::Result<PmFile> {
        self.next += 1;
        let name = format!("pm{}", self.next);
        let (ino, _) = self
            .fs
            .create(self.dir, name.as_bytes(), 0o644, 0, 0, NOW)?;
        self.fill(ino, 0, size)?;
        Ok(PmFile { name, ino, size })
    }

    fn delete(&mut self, f: PmFile) -> anyhow::Result<()> {
        self.fs.unlink(self.dir, f.name.as_bytes(), NOW)?;
        self.ops += 1;
        Ok(())
    }

    fn append(&mut self, f: &mut PmFile, len: usize) -> anyhow::Result<()> {
        self.fill(f.ino, f.size, len as u64)?;
        f.size += len as u64;
        Ok(())
    }

    fn tick(&mut self) -> anyhow::Result<()> {
        if self.ops >= WRITEBACK_EVERY {
            self.ops = 0;
            tree::writeback(self.fs)?;
        }
        Ok(())
    }
}
