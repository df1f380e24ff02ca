//! What the benchmark tests share: whether this machine can mount what
//! they compare, and a run of a bench suite read back as JSON.

use std::path::Path;
use std::process::Command;

/// `stitchfs bench SUITE ARGS... --json --out OUT`: the report it printed
/// and its stderr (for failure messages); panics if the run failed.
pub fn run_json(suite_args: &[&str], out: &Path) -> (serde_json::Value, String) {
    let run = Command::new(env!("CARGO_BIN_EXE_stitchfs"))
        .arg("bench")
        .args(suite_args)
        .args(["--json", "--out"])
        .arg(out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{stderr}");
    (serde_json::from_slice(&run.stdout).unwrap(), stderr)
}

/// Whether the benchmarks cannot mount here; if so, says why (not root,
/// no FUSE, a tool missing) and the test skips.
pub fn cannot_mount() -> bool {
    match why_not() {
        Some(why) => {
            eprintln!("skipping: {why}");
            true
        }
        None => false,
    }
}

fn why_not() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    for tool in ["mkfs.ext4", "losetup", "fusermount3"] {
        let found = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .any(|d| Path::new(d).join(tool).exists());
        if !found {
            return Some(format!("no {tool}"));
        }
    }
    None
}
