//! `stitchfs graph MOUNTPOINT [-o FILE]`: the live graph of a mount's
//! uncommitted patches, read over the control table (`IOC_GRAPH`), as
//! Graphviz DOT, or drawn as SVG or PNG by Graphviz's `dot`. Each patch
//! sits in its block's box and points at what it depends on; a graph too
//! large to send whole comes summarised by block.

use anyhow::{bail, Context};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[derive(clap::Args)]
pub struct Args {
    /// The mount point (or any file or directory on the mount)
    pub path: PathBuf,
    /// Write to FILE: DOT for .dot (or any other name), drawn by Graphviz
    /// for .svg and .png; without it, DOT on stdout
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dot = read(&args.path)?;
    let Some(out) = args.output else {
        print!("{dot}");
        return Ok(());
    };
    let format = match out.extension().and_then(|e| e.to_str()) {
        Some("svg") => "svg",
        Some("png") => "png",
        _ => {
            return std::fs::write(&out, dot).with_context(|| format!("writing {}", out.display()))
        }
    };
    draw(&dot, format, &out)
}

/// The DOT text of the mount `path` is on.
pub fn read(path: &Path) -> anyhow::Result<String> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    match stitch_control::request_graph(&f) {
        Ok(Some(t)) => Ok(t),
        Ok(None) => bail!(
            "{} is not on a stitchfs mount (or its server predates `graph`)",
            path.display()
        ),
        Err(e) => Err(e).with_context(|| format!("reading the patch graph of {}", path.display())),
    }
}

/// `dot -T<format> -o <out>`, fed `dot` on its input.
fn draw(dot: &str, format: &str, out: &Path) -> anyhow::Result<()> {
    let mut child = match Command::new("dot")
        .arg(format!("-T{format}"))
        .arg("-o")
        .arg(out)
        .stdin(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "drawing {format} needs Graphviz's `dot` (apt-get install graphviz); \
             `-o FILE.dot` writes the graph without it"
        ),
        Err(e) => return Err(e).context("running dot"),
    };
    child
        .stdin
        .take()
        .context("dot's input")?
        .write_all(dot.as_bytes())
        .context("feeding dot")?;
    let status = child.wait().context("waiting for dot")?;
    if !status.success() {
        bail!("dot failed ({status}) drawing {}", out.display());
    }
    Ok(())
}
