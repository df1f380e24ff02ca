//! Pictures of benchmark results: `scripts/plot.py` draws them with
//! matplotlib from the JSON a suite wrote. A missing python3 or matplotlib
//! is reported, never fatal: the table and JSON are already written.

use std::path::Path;
use std::process::Command;

/// The plotting script, compiled in so the binary works from any directory.
const SCRIPT: &str = include_str!("../../../scripts/plot.py");

pub fn plot(json: &Path, png: &Path, kind: &str) -> anyhow::Result<()> {
    let status = Command::new("python3")
        .arg("-c")
        .arg(SCRIPT)
        .arg(kind)
        .arg(json)
        .arg(png)
        .status();
    match status {
        Ok(s) if s.success() => {
            eprintln!("wrote {}", png.display());
            Ok(())
        }
        Ok(_) | Err(_) => {
            eprintln!("no plot: python3 with matplotlib is needed (scripts/setup.sh installs it)");
            Ok(())
        }
    }
}
