//! `stitchfs bench optimizations`: Featherstitch Figure 9. Runs untar-,
//! delete- and PostMark-shaped loads (see `synth`) straight on the
//! patch cache over a memory device, under the four combinations of hard
//! patches and overlap merging, and reports patches created, undo bytes,
//! CPU seconds, patch operations per CPU second and peak patch memory as a
//! share of dirty block bytes.

use super::postmark;
use super::synth::{File, SynthFs};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use stitch_blockdev::{BlockDevice, BlockNo, BlockWrite, DevError};
use stitch_patch::{CacheConfig, Optimizations, PatchCache, Result, Stats};

/// A device that accepts every write and forgets it, and reads zeros: the
/// benchmark measures the patch engine, not copies into a RAM disk (a 3 GiB
/// memory device spent most of its time in the kernel zeroing pages). The
/// engine reads back zeros for an evicted block, which only changes bytes
/// nobody checks here.
struct Sink {
    blocks: u64,
    written: AtomicU64,
}

impl BlockDevice for Sink {
    fn block_size(&self) -> usize {
        4096
    }
    fn num_blocks(&self) -> u64 {
        self.blocks
    }
    fn read(&self, _: BlockNo, buf: &mut [u8]) -> std::result::Result<(), DevError> {
        buf.fill(0);
        Ok(())
    }
    fn write_batch(&self, writes: &[BlockWrite<'_>]) -> std::result::Result<(), DevError> {
        self.written
            .fetch_add(writes.len() as u64, Ordering::Relaxed);
        Ok(())
    }
    fn flush(&self) -> std::result::Result<(), DevError> {
        Ok(())
    }
}

/// Sizes of the three loads.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Scale {
    pub untar_files: usize,
    pub postmark_files: usize,
    pub postmark_transactions: usize,
    pub postmark_max_size: u64,
    pub device_blocks: u64,
    /// Blocks the patch cache holds (and may hold dirty).
    pub cache_blocks: usize,
    /// Runs of each row; the row reported is the one with the median CPU time.
    pub runs: usize,
}

impl Scale {
    /// The papers' parameters: the Linux 2.6.15 tree has about 17,000
    /// files; Featherstitch's PostMark uses 500 files of 500 B–4 MB and 500
    /// transactions.
    pub const FULL: Scale = Scale {
        untar_files: 17_000,
        postmark_files: 500,
        postmark_transactions: 500,
        postmark_max_size: 4 << 20,
        device_blocks: 32_768 * 24,
        // Featherstitch's cache for Figure 9.
        cache_blocks: 160_000,
        runs: 1,
    };
    pub const QUICK: Scale = Scale {
        untar_files: 1_500,
        postmark_files: 60,
        postmark_transactions: 60,
        postmark_max_size: 256 << 10,
        device_blocks: 32_768 * 2,
        cache_blocks: 160_000,
        runs: 1,
    };
}

impl Scale {
    /// The PostMark part of the scale.
    pub fn postmark(&self) -> postmark::Shape {
        postmark::Shape {
            files: self.postmark_files,
            transactions: self.postmark_transactions,
            max_size: self.postmark_max_size,
        }
    }
}

/// One row of Figure 9.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub workload: &'static str,
    pub setting: &'static str,
    pub patches: u64,
    pub requests: u64,
    pub undo_bytes: u64,
    pub cpu_seconds: f64,
    pub ops_per_cpu_second: f64,
    /// Sampled before each periodic write-back (synthetic loads only).
    pub peak_patch_memory_ratio: Option<f64>,
    pub blocks_written: u64,
    pub reverts: u64,
    /// Overlap merges the chain search refused (or gave up on).
    pub merges_refused: u64,
}

/// Write-back every this many file operations, like a periodic flush.
pub(super) const WRITEBACK_EVERY: u64 = 500;

struct Bench {
    cache: PatchCache,
    fs: SynthFs,
    peak_ratio: f64,
}

impl Bench {
    fn new(opts: Optimizations, scale: &Scale) -> Bench {
        let dev = Arc::new(Sink {
            blocks: scale.device_blocks,
            written: AtomicU64::new(0),
        });
        let cfg = CacheConfig {
            optimizations: opts,
            max_blocks: scale.cache_blocks,
            max_dirty_blocks: scale.cache_blocks,
            check_invariants: false,
        };
        Bench {
            cache: PatchCache::new(dev, cfg),
            fs: SynthFs::new(scale.device_blocks),
            peak_ratio: 0.0,
        }
    }

    /// The periodic write-back; samples patch memory against dirty bytes
    /// first, when both are at their largest.
    fn maybe_writeback(&mut self) -> Result<()> {
        if self.fs.ops < WRITEBACK_EVERY {
            return Ok(());
        }
        self.fs.ops = 0;
        self.sample();
        self.cache.write_round(usize::MAX)?;
        self.cache.flush()?;
        self.fs.recycle(&self.cache);
        Ok(())
    }

    fn sample(&mut self) {
        if std::env::var_os("STITCH_BENCH_DEBUG").is_some() {
            eprintln!(
                "dirty {} live {} busiest {:?}",
                self.cache.dirty_blocks(),
                self.cache.stats().live_patches,
                self.cache.busiest_blocks(4)
            );
        }
        let dirty = self.cache.dirty_blocks() as f64 * 4096.0;
        if dirty > 0.0 {
            self.peak_ratio = self
                .peak_ratio
                .max(self.cache.patch_memory() as f64 / dirty);
        }
    }

    fn sync(&mut self) -> Result<()> {
        self.sample();
        self.cache.sync()
    }
}

/// Sizes like a source tree: mostly a few kB, a long tail to 256 kB.
fn source_file_size(rng: &mut ChaCha8Rng) -> u64 {
    let exp: f64 = rng.gen_range(6.5..18.0);
    exp.exp2() as u64
}

fn untar(b: &mut Bench, scale: &Scale, rng: &mut ChaCha8Rng) -> Result<Vec<File>> {
    let mut files = Vec::with_capacity(scale.untar_files);
    for _ in 0..scale.untar_files {
        files.push(b.fs.create(&mut b.cache, source_file_size(rng))?);
        b.maybe_writeback()?;
    }
    b.sync()?;
    Ok(files)
}

fn delete(b: &mut Bench, files: Vec<File>) -> Result<()> {
    for f in files {
        b.fs.delete(&mut b.cache, f)?;
        b.maybe_writeback()?;
    }
    b.sync()
}

impl postmark::Target for Bench {
    type File = File;
    type Error = stitch_patch::PatchError;
    fn create(&mut self, size: u64) -> Result<File> {
        self.fs.create(&mut self.cache, size)
    }
    fn delete(&mut self, f: File) -> Result<()> {
        self.fs.delete(&mut self.cache, f)
    }
    fn append(&mut self, f: &mut File, len: usize) -> Result<()> {
        self.fs.append(&mut self.cache, f, len)
    }
    fn tick(&mut self) -> Result<()> {
        self.maybe_writeback()
    }
}

fn postmark(b: &mut Bench, scale: &Scale, rng: &mut ChaCha8Rng) -> Result<()> {
    postmark::run(b, &scale.postmark(), rng)?;
    b.sync()
}

pub(crate) fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

pub(crate) fn row(
    workload: &'static str,
    setting: &'static str,
    before: &Stats,
    after: &Stats,
    cpu: f64,
    peak: f64,
) -> Row {
    let requests = after.requests - before.requests;
    let commits = after.commits - before.commits;
    Row {
        workload,
        setting,
        patches: after.patches_created() - before.patches_created(),
        requests,
        undo_bytes: after.undo_bytes_allocated - before.undo_bytes_allocated,
        cpu_seconds: cpu,
        ops_per_cpu_second: (requests + commits) as f64 / cpu.max(1e-9),
        peak_patch_memory_ratio: (peak > 0.0).then_some(peak),
        blocks_written: after.blocks_written - before.blocks_written,
        reverts: after.reverts - before.reverts,
        merges_refused: after.overlap_merge_refused - before.overlap_merge_refused,
    }
}

/// Runs one workload under one setting; `delete` first untars (unmeasured).
fn run_one(
    workload: &'static str,
    name: &'static str,
    opts: Optimizations,
    scale: &Scale,
) -> Result<Row> {
    let mut rng = ChaCha8Rng::seed_from_u64(2007);
    let mut b = Bench::new(opts, scale);
    let files = if workload == "delete" {
        untar(&mut b, scale, &mut rng)?
    } else {
        Vec::new()
    };
    b.peak_ratio = 0.0;
    let before = b.cache.stats();
    let t0 = cpu_seconds();
    match workload {
        "untar" => drop(untar(&mut b, scale, &mut rng)?),
        "delete" => delete(&mut b, files)?,
        _ => postmark(&mut b, scale, &mut rng)?,
    }
    let cpu = cpu_seconds() - t0;
    Ok(row(
        workload,
        name,
        &before,
        &b.cache.stats(),
        cpu,
        b.peak_ratio,
    ))
}

/// The workloads, in the order they run.
pub const WORKLOADS: [&str; 3] = ["untar", "delete", "postmark"];

/// Rows for every workload and Figure 9 setting that `keep` accepts.
pub fn run(
    scale: &Scale,
    keep: impl Fn(&str, &str) -> bool,
    mut progress: impl FnMut(&str),
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for workload in WORKLOADS {
        for (name, opts) in Optimizations::figure9() {
            if !keep(workload, name) {
                continue;
            }
            progress(&format!("{workload} / {name}"));
            let mut runs = (0..scale.runs.max(1))
                .map(|_| run_one(workload, name, opts, scale))
                .collect::<Result<Vec<Row>>>()?;
            // Counts are the same every run; CPU time is not: keep the median.
            runs.sort_by(|a, b| a.cpu_seconds.total_cmp(&b.cpu_seconds));
            rows.push(runs.swap_remove(runs.len() / 2));
        }
    }
    Ok(rows)
}
