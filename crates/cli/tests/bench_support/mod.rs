//! What the benchmark tests share: whether this machine can mount what
//! they compare.

use std::path::Path;

/// Why the benchmarks cannot mount here (not root, no FUSE, a tool
/// missing), or `None` when they can.
pub fn can_mount() -> Option<String> {
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
