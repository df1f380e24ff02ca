//! `stitchfs bench SUITE`: run a benchmark suite, print a Markdown table,
//! optionally write JSON and a plot.

use crate::bench::optimizations::{self, Row, Scale};
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};

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
    /// `stitchfs fsck` beside `e2fsck -fn` on one kernel-filled ext2 image
    /// (needs root for the loop mount that fills it).
    Fsck(FsckArgs),
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

#[derive(clap::Args)]
struct OptArgs {
    /// Small sizes, for a smoke run (seconds instead of minutes).
    #[arg(long)]
    quick: bool,
    /// Print the rows as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write optimizations.{md,json,png} here (the plot needs python3 with
    /// matplotlib).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
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
        Suite::Fsck(a) => crate::bench::fsck::run(&a.dir, a.files, a.size_mib << 20),
    }
}

fn run_optimizations(a: OptArgs) -> anyhow::Result<()> {
    let mut scale = if a.quick { Scale::QUICK } else { Scale::FULL };
    scale.cache_blocks = a.cache_blocks;
    scale.runs = a.runs;
    let keep = |w: &str, s: &str| {
        a.workload.as_deref().is_none_or(|x| x == w) && a.setting.as_deref().is_none_or(|x| x == s)
    };
    let steps = optimizations::WORKLOADS.len() * 4;
    let bar = ProgressBar::new(steps as u64)
        .with_style(ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")?);
    let mut rows = optimizations::run(&scale, keep, |step| {
        bar.set_message(step.to_string());
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    rows.extend(tree_rows(&a, &keep)?);
    if rows.is_empty() {
        anyhow::bail!("no workload and setting match the filters");
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", table(&rows, &scale));
    }
    if let Some(dir) = a.out {
        write_outputs(&dir, &rows, &scale)?;
    }
    Ok(())
}

/// Figure 9's untar and delete through diskfs on a real tree, per setting.
fn tree_rows(a: &OptArgs, keep: &dyn Fn(&str, &str) -> bool) -> anyhow::Result<Vec<Row>> {
    use crate::bench::tree;
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
        .unwrap_or(if a.quick { 1_500 } else { usize::MAX });
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

fn write_outputs(dir: &Path, rows: &[Row], scale: &Scale) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let json = dir.join("optimizations.json");
    std::fs::write(
        &json,
        serde_json::to_string_pretty(&serde_json::json!({ "scale": scale, "rows": rows }))?,
    )?;
    std::fs::write(dir.join("optimizations.md"), table(rows, scale))?;
    crate::plot::plot(&json, &dir.join("optimizations.png"), "optimizations")
}
