//! `stitchfs bench SUITE`: run a benchmark suite, print a Markdown table,
//! optionally write JSON and a plot.

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use stitch_bench::optimizations::{self, Row, Scale};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    suite: Suite,
}

#[derive(clap::Subcommand)]
enum Suite {
    /// Featherstitch Figure 9: patches, undo bytes and CPU time of untar-,
    /// delete- and PostMark-shaped loads under the four combinations of hard
    /// patches and overlap merging, run on the patch cache in memory.
    Optimizations(OptArgs),
    /// Featherstitch Figure 10 and Seltzer Tables 4–5: wall time and writes
    /// of untar, delete, PostMark and fsync loads under async, soft updates
    /// and the three journal data modes, on real image files (made in --out
    /// DIR, so the disk measured is that directory's; without --out, in the
    /// system's temporary directory).
    Modes(ModesArgs),
    /// McoreFS §6 through a mount: smallfile, largefile, mailbench and
    /// create/stat/unlink rates of stitchfs beside ext4 (loop device),
    /// fuse2fs, bindfs and the FUSE floor (`floor-server`), each on storage
    /// made fresh in --out DIR (so the
    /// disk measured is that directory's; without --out, the system's
    /// temporary directory). Needs root (loop mounts, dropping caches).
    Mount(MountArgs),
    /// The seed papers' experiments through a mount on every system in one
    /// run: Seltzer's create/delete microbenchmarks and PostMark (Debian's
    /// `postmark`), Featherstitch's untar/delete, PostMark and
    /// unpack/configure/make and IMAP move (Dovecot), ccfs's applications
    /// (SQLite in rollback and WAL modes, Git, LevelDB) and fsync-latency
    /// tests, xsyncfs's PostMark and key-value server; stitchfs in each
    /// mode, and with the programs in a stream ignoring fsync, under
    /// `stitchfs xsync` or with every fsync dropped,
    /// beside ext4 (each data mode and -o sync), ext2, fuse2fs and the FUSE
    /// floor, each on storage made fresh in --out DIR (default: the
    /// system's temporary directory). Needs root.
    Seeds(SeedsArgs),
    /// `stitchfs fsck` beside `e2fsck -fn` on one kernel-filled ext2 image
    /// (needs root for the loop mount that fills it).
    Fsck(FsckArgs),
    /// The FUSE floor `bench mount` compares against (the system
    /// `fuse-floor`): a FUSE server mounted as stitchfs is that keeps its
    /// namespace in memory, writes file data straight into IMAGE, and makes
    /// fsync one fdatasync of IMAGE (no metadata, no ordering: a crash loses
    /// the namespace). It shows how fast any durable FUSE file system over
    /// an image could be on this machine. Runs in the foreground until
    /// unmounted; the namespace is kept in IMAGE.floor between mounts.
    FloorServer(FloorArgs),
}

#[derive(clap::Args)]
struct FloorArgs {
    /// An existing file whose size bounds the data (made with `truncate`).
    image: PathBuf,
    /// Where to mount.
    mountpoint: PathBuf,
    /// FUSE mount options (allow_other, ...).
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// Spin on the device during bursts of requests, as `stitchfs mount
    /// --spin` (the same default, so the floor keeps meaning what any
    /// FUSE server could reach as stitchfs is served).
    #[arg(long, value_name = "ON|OFF", default_value = "on", value_parser = ["on", "off"])]
    spin: String,
    /// Be sent OPEN and RELEASE for every file opened, as `stitchfs mount
    /// --open-requests` (the same default: off).
    #[arg(long, value_name = "ON|OFF", default_value = "off", value_parser = ["on", "off"])]
    open_requests: String,
}

#[derive(clap::Args)]
struct FsckArgs {
    /// Files the kernel creates on the image.
    #[arg(long, default_value_t = 100_000)]
    files: u64,
    /// Image size in MiB.
    #[arg(long, default_value_t = 1024)]
    size_mib: u64,
    /// Where the image and its mount point go.
    #[arg(long, default_value = "bench-fsck")]
    dir: PathBuf,
}

/// What every suite that reports results takes.
#[derive(clap::Args)]
struct Output {
    /// Small sizes, for a smoke run (seconds instead of minutes).
    #[arg(long)]
    quick: bool,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write SUITE.{md,json,png} here (the plot needs python3 with
    /// matplotlib).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(clap::Args)]
struct ModesArgs {
    #[command(flatten)]
    output: Output,
    /// Runs of each load and mode; medians are reported (default 3, 1 with
    /// --quick).
    #[arg(long)]
    runs: Option<usize>,
    /// The source tree to untar and delete (default: as `bench
    /// optimizations`, $CARGO_HOME/registry/src).
    #[arg(long, value_name = "DIR")]
    tree: Option<PathBuf>,
    /// Files of the tree to use (default: all; 300 with --quick).
    #[arg(long)]
    tree_files: Option<usize>,
    /// Journal size (as for mkfs; default as mke2fs picks, 64 MiB for the
    /// 4 GiB image).
    #[arg(long, value_name = "SIZE", value_parser = crate::cmd::mkfs::parse_size)]
    journal_size: Option<u64>,
}

#[derive(clap::Args)]
struct MountArgs {
    #[command(flatten)]
    output: Output,
    /// Runs of every workload on every system; medians are reported
    /// (default 3, 1 with --quick).
    #[arg(long)]
    runs: Option<usize>,
    /// Systems to compare, comma-separated, or `all`: stitchfs,
    /// stitchfs-precise (journal, `--order precise`), stitchfs-context
    /// (journal, with the benchmark holding a context on the mount, so
    /// every request's caller is resolved in full), stitchfs-nbd and
    /// stitchfs-nbd-depth1 (journal, the image served by nbdkit's file
    /// plugin on a Unix socket and mounted by URI, 16 or 1 requests in
    /// flight), stitchfs-nbd-1ms and stitchfs-nbd-1ms-depth1 (the same with
    /// nbdkit's delay filter holding every read and write 1 ms, as a
    /// network's round trip would), stitchfs-softupdates,
    /// stitchfs-writeback, stitchfs-data-journal, stitchfs-async, ext4
    /// (data=ordered), ext4-writeback, ext4-journal,
    /// ext4-sync, ext2, fuse2fs, bindfs, fuse-floor (see `floor-server`).
    /// Five more launch a workload's programs, so they run only `bench
    /// seeds`' workloads done by programs (the others are skipped as not
    /// applicable): stitchfs-stream (journal, data=ordered, the programs
    /// in stream `bench` with IGNORE_FSYNC: their fsyncs only order; the
    /// SQLite and LevelDB drivers call setstream and one streamsync after
    /// their last transaction, other commands run under `stitchfs run
    /// --stream bench --ignore-fsync`); stitchfs-softupdates-stream (the
    /// same in soft updates); stitchfs-xsync (journal, data=ordered, each
    /// program under `stitchfs xsync --at MOUNT`: its fsyncs return at
    /// once, its output is held until what it changed is durable; the kv
    /// server's answers go through xsync's `--proxy`; skipped where this
    /// binary has no `xsync`); stitchfs-ceiling (async, the
    /// programs under eatmydata: every fsync dropped, no order, one sync at
    /// the end of the phase, inside its timing, as on every system); and
    /// fuse-floor-nofsync (the FUSE floor with the programs under
    /// eatmydata: what FUSE alone allows without fsyncs).
    #[arg(long, default_value = stitch_bench::mount::DEFAULT_SYSTEMS)]
    systems: String,
    /// Workloads to run, comma-separated, or `all`: smallfile, largefile,
    /// mailbench, metadata (create, stat cold and warm, unlink), mailbox
    /// (mailbench with full mailboxes).
    #[arg(long, default_value = "all")]
    workloads: String,
    /// smallfile: files created, written, fsynced and unlinked.
    #[arg(long)]
    files: Option<usize>,
    /// largefile: MB written.
    #[arg(long)]
    large_mb: Option<u64>,
    /// mailbench: messages per thread (two threads).
    #[arg(long)]
    messages: Option<usize>,
    /// mailbox: messages already in each thread's mailbox.
    #[arg(long)]
    mailbox: Option<usize>,
    /// create/stat/unlink: files.
    #[arg(long)]
    meta_files: Option<usize>,
    /// Seconds a phase may take before the system counts as hung (its FUSE
    /// server is then killed).
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

#[derive(clap::Args)]
struct SeedsArgs {
    #[command(flatten)]
    output: Output,
    /// Runs of every workload on every system; medians are reported
    /// (default 3, 1 with --quick).
    #[arg(long)]
    runs: Option<usize>,
    /// Systems to compare, comma-separated, or `all` (as for `bench
    /// mount`). The report holds stitchfs-stream to its goals on ccfs's
    /// applications: at least 0.8 of stitchfs-ceiling, and 10× ext4 on
    /// SQLite and Git, 5× on LevelDB; and sets stitchfs-xsync beside
    /// stitchfs, ext4-sync and ext4-journal on every phase it ran.
    #[arg(long, default_value = stitch_bench::seeds::DEFAULT_SYSTEMS)]
    systems: String,
    /// Workloads, comma-separated, or `all`: seltzer-micro, seltzer-0len,
    /// postmark-small, postmark-large, untar, postmark-fst, andrew, sqlite
    /// (rollback journal), sqlite-wal, git, leveldb, fsync,
    /// postmark-xsyncfs, postmark-fsync (PostMark's shape in Python,
    /// fsyncing at each transaction's end), kv (a key-value server of ours
    /// fsyncing each PUT before it answers, under 1, 4 and 16 clients:
    /// requests/s, median and p99 latency), imap (Dovecot, Maildir), imap-mbox (our mbox
    /// server, fsync where the protocol needs durability), imap-pg (the
    /// same with patchgroups; stitchfs systems only), imap-nosync (the
    /// same syncing nothing: the floor).
    #[arg(long, default_value = "all")]
    workloads: String,
    /// The source tree for untar and git (default: $CARGO_HOME/registry/src).
    #[arg(long, value_name = "DIR")]
    tree: Option<PathBuf>,
    /// Files of the tree to use (default: all; 200 with --quick).
    #[arg(long)]
    tree_files: Option<usize>,
    /// The C project tarball for andrew (scripts/setup-bench.sh makes it).
    #[arg(
        long,
        value_name = "TARBALL",
        default_value = "/var/cache/stitchfs-bench/hello.tar.gz"
    )]
    project: PathBuf,
    /// Image size in MiB (default 4096; 256 with --quick).
    #[arg(long)]
    size_mib: Option<u64>,
    /// Seconds a phase may take before the system counts as hung.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Measure nothing: make one report (table, JSON, plot) from the
    /// seeds.json of earlier runs of different workloads, for a suite too
    /// long to run at one sitting. They must come from one machine, with
    /// the same sizes and number of runs.
    #[arg(long, value_name = "JSON", value_delimiter = ',', num_args = 1..)]
    merge: Vec<PathBuf>,
}

#[derive(clap::Args)]
struct OptArgs {
    #[command(flatten)]
    output: Output,
    /// Blocks the patch cache holds (Featherstitch used 160,000).
    #[arg(long, default_value_t = 160_000)]
    cache_blocks: usize,
    /// A real source tree to untar and delete through diskfs (default: the
    /// crate sources cargo keeps, $CARGO_HOME/registry/src).
    #[arg(long, value_name = "DIR")]
    tree: Option<PathBuf>,
    /// Files of the tree to use (default: all; 1,500 with --quick).
    #[arg(long)]
    tree_files: Option<usize>,
    /// Skip the diskfs rows on a real tree.
    #[arg(long)]
    no_tree: bool,
    /// Runs of each row; the median CPU time is reported.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Only this workload: untar, delete or postmark.
    #[arg(long)]
    workload: Option<String>,
    /// Only this setting: none, "hard patches", "overlap merging" or both.
    #[arg(long)]
    setting: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.suite {
        Suite::Optimizations(a) => run_optimizations(a),
        Suite::Modes(a) => run_modes(a),
        Suite::Mount(a) => run_mount(a),
        Suite::Seeds(a) => run_seeds(a),
        Suite::Fsck(a) => stitch_bench::fsck::run(&a.dir, a.files, a.size_mib << 20),
        Suite::FloorServer(a) => stitch_floor::serve(
            &a.image,
            &a.mountpoint,
            &a.options,
            a.spin == "on",
            a.open_requests == "on",
        ),
    }
}

impl Output {
    /// Prints the results: `json` with --json, else the table.
    fn show(&self, json: &impl serde::Serialize, table: &str) -> anyhow::Result<()> {
        if self.json {
            println!("{}", serde_json::to_string_pretty(json)?);
        } else {
            print!("{table}");
        }
        Ok(())
    }

    /// With --out, writes SUITE.json, SUITE.md and SUITE.png there.
    fn write(&self, suite: &str, json: &impl serde::Serialize, table: &str) -> anyhow::Result<()> {
        let Some(dir) = &self.out else {
            return Ok(());
        };
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{suite}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(json)?)?;
        std::fs::write(dir.join(format!("{suite}.md")), table)?;
        stitch_bench::plot::plot(&path, &dir.join(format!("{suite}.png")), suite)
    }
}

/// Where a suite on real storage puts its images: --out DIR, so the disk
/// measured is the one the results go to, else the temporary directory.
fn scratch_dir(out: &Output) -> anyhow::Result<PathBuf> {
    let scratch = out.out.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    Ok(scratch)
}

/// A progress bar of `steps` steps, on stderr.
fn progress(steps: usize) -> anyhow::Result<ProgressBar> {
    Ok(ProgressBar::new(steps as u64)
        .with_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")?))
}

fn run_modes(a: ModesArgs) -> anyhow::Result<()> {
    use stitch_bench::modes;
    let out = &a.output;
    let tree = a
        .tree
        .or_else(stitch_bench::tree::default_tree)
        .context("no source tree to untar (give --tree DIR)")?;
    let scratch = scratch_dir(out)?;
    let cfg = modes::Config {
        quick: out.quick,
        tree_files: a.tree_files,
        runs: a.runs.unwrap_or(if out.quick { 1 } else { 3 }),
        tree,
        journal: a.journal_size.map_or(
            stitch_mkfs::JournalSize::Default,
            stitch_mkfs::JournalSize::Bytes,
        ),
        scratch,
    };
    let bar = progress(cfg.runs * modes::STEPS)?;
    let report = modes::run(&cfg, |step| {
        bar.set_message(step.to_string());
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    let table = modes::table(&report);
    out.show(&report, &table)?;
    out.write("modes", &report, &table)
}

fn run_mount(a: MountArgs) -> anyhow::Result<()> {
    use stitch_bench::mount;
    let out = &a.output;
    let mut scale = if out.quick {
        mount::Scale::QUICK
    } else {
        mount::Scale::FULL
    };
    scale.smallfile_files = a.files.unwrap_or(scale.smallfile_files);
    scale.largefile_bytes = a.large_mb.map_or(scale.largefile_bytes, |m| m * 1_000_000);
    scale.mail_messages = a.messages.unwrap_or(scale.mail_messages);
    scale.mailbox_messages = a.mailbox.unwrap_or(scale.mailbox_messages);
    scale.meta_files = a.meta_files.unwrap_or(scale.meta_files);
    let cfg = mount::Config {
        scale,
        runs: a.runs.unwrap_or(if out.quick { 1 } else { 3 }),
        systems: stitch_bench::systems::select(&a.systems)?,
        workloads: mount::select_workloads(&a.workloads)?,
        scratch: scratch_dir(out)?,
        timeout: std::time::Duration::from_secs(a.timeout),
        inputs: (),
    };
    let bar = progress(cfg.steps())?;
    let report = mount::run(&cfg, |step| {
        bar.set_message(step.to_string());
        if step.starts_with("run ") {
            bar.inc(1);
        }
    })?;
    bar.finish_and_clear();
    let table = mount::table(&report);
    out.show(&report, &table)?;
    out.write("mount", &report, &table)
}

fn run_seeds(a: SeedsArgs) -> anyhow::Result<()> {
    use stitch_bench::seeds;
    let out = &a.output;
    if !a.merge.is_empty() {
        let report = seeds::merge(&a.merge)?;
        let table = seeds::table(&report);
        out.show(&report, &table)?;
        return out.write("seeds", &report, &table);
    }
    let mut scale = if out.quick {
        seeds::Scale::QUICK
    } else {
        seeds::Scale::FULL
    };
    scale.tree_files = a.tree_files.or(scale.tree_files);
    scale.image_bytes = a.size_mib.map_or(scale.image_bytes, |m| m << 20);
    let cfg = seeds::Config {
        scale,
        runs: a.runs.unwrap_or(if out.quick { 1 } else { 3 }),
        systems: stitch_bench::systems::select(&a.systems)?,
        workloads: seeds::select_workloads(&a.workloads)?,
        scratch: scratch_dir(out)?,
        timeout: std::time::Duration::from_secs(a.timeout),
        inputs: seeds::Inputs {
            tree: a.tree.or_else(stitch_bench::tree::default_tree),
            project: Some(a.project),
        },
    };
    let bar = progress(cfg.steps())?;
    let report = seeds::run(&cfg, |step| {
        bar.set_message(step.to_string());
        if !step.ends_with("measuring the device") {
            bar.inc(1);
        }
    })?;
    bar.finish_and_clear();
    let table = seeds::table(&report);
    out.show(&report, &table)?;
    out.write("seeds", &report, &table)
}

fn run_optimizations(a: OptArgs) -> anyhow::Result<()> {
    let out = &a.output;
    let mut scale = if out.quick { Scale::QUICK } else { Scale::FULL };
    scale.cache_blocks = a.cache_blocks;
    scale.runs = a.runs;
    let keep = |w: &str, s: &str| {
        a.workload.as_deref().is_none_or(|x| x == w) && a.setting.as_deref().is_none_or(|x| x == s)
    };
    let bar = progress(optimizations::WORKLOADS.len() * 4)?;
    let mut rows = optimizations::run(&scale, keep, |step| {
        bar.set_message(step.to_string());
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    rows.extend(tree_rows(&a, &keep)?);
    if rows.is_empty() {
        anyhow::bail!("no workload and setting match the filters");
    }
    let table = table(&rows, &scale);
    out.show(&rows, &table)?;
    out.write(
        "optimizations",
        &serde_json::json!({ "scale": scale, "rows": rows }),
        &table,
    )
}

/// Figure 9's untar and delete through diskfs on a real tree, per setting.
fn tree_rows(a: &OptArgs, keep: &dyn Fn(&str, &str) -> bool) -> anyhow::Result<Vec<Row>> {
    use stitch_bench::tree;
    let Some(root) = a
        .tree
        .clone()
        .or_else(tree::default_tree)
        .filter(|_| !a.no_tree)
    else {
        eprintln!("no source tree for the diskfs rows (give --tree DIR)");
        return Ok(Vec::new());
    };
    let limit = a
        .tree_files
        .unwrap_or(if a.output.quick { 1_500 } else { usize::MAX });
    let t =
        tree::Tree::read(&root, limit).with_context(|| format!("reading {}", root.display()))?;
    eprintln!(
        "diskfs rows: {} files, {:.1} MB from {}",
        t.files,
        t.bytes as f64 / 1e6,
        root.display()
    );
    let mut rows = Vec::new();
    for (name, opts) in stitch_patch::Optimizations::figure9() {
        if !keep("untar (diskfs)", name) && !keep("delete (diskfs)", name) {
            continue;
        }
        rows.extend(tree::rows(&root, &t, name, opts)?);
    }
    Ok(rows
        .into_iter()
        .filter(|r| keep(r.workload, r.setting))
        .collect())
}

fn table(rows: &[Row], scale: &Scale) -> String {
    let mut out = format!(
        "Featherstitch Figure 9 on stitchfs's patch cache ({} untar files; PostMark {} files, {} transactions; cache {} blocks)\n\n",
        scale.untar_files, scale.postmark_files, scale.postmark_transactions, scale.cache_blocks
    );
    out.push_str("| workload | optimization | patches | undo data | CPU s | patch ops / CPU s | peak patch memory / dirty bytes |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {:.2} MB | {:.2} | {:.2} M | {} |\n",
            r.workload,
            r.setting,
            r.patches,
            r.undo_bytes as f64 / 1e6,
            r.cpu_seconds,
            r.ops_per_cpu_second / 1e6,
            r.peak_patch_memory_ratio
                .map_or("–".to_string(), |p| format!("{:.1}%", 100.0 * p))
        ));
    }
    out.push_str("\nReduction with both optimizations, against none:\n\n");
    for w in [
        "untar",
        "delete",
        "postmark",
        "untar (diskfs)",
        "delete (diskfs)",
    ] {
        let find = |s: &str| rows.iter().find(|r| r.workload == w && r.setting == s);
        if let (Some(none), Some(both)) = (find("none"), find("both")) {
            out.push_str(&format!(
                "- {w}: patches -{:.1}%, undo data -{:.3}%\n",
                reduction(none.patches, both.patches),
                reduction(none.undo_bytes, both.undo_bytes)
            ));
        }
    }
    out
}

fn reduction(before: u64, after: u64) -> f64 {
    if before == 0 {
        0.0
    } else {
        100.0 * (1.0 - after as f64 / before as f64)
    }
}
