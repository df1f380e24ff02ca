//! What the benchmark tests share: whether this machine can mount what
//! they compare.

use std::path::Path;

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
