//! Helpers shared by the integration tests: make images with mke2fs and read
//! blocks from them.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch directory under /work (not /tmp, which may be a small tmpfs).
pub fn scratch() -> tempfile::TempDir {
    let base = Path::new("/work/tmp-tests");
    std::fs::create_dir_all(base).unwrap();
    tempfile::tempdir_in(base).unwrap()
}

/// Runs mke2fs on a fresh sparse image of `size` bytes with `args`.
pub fn mke2fs(dir: &Path, name: &str, size: u64, args: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(size).unwrap();
    let out = Command::new("mke2fs")
        .args(["-q", "-F"])
        .args(args)
        .arg(&path)
        .env("MKE2FS_CONFIG", "/etc/mke2fs.conf")
        .output()
        .expect("mke2fs is installed (e2fsprogs)");
    assert!(
        out.status.success(),
        "mke2fs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// Reads `len` bytes at byte offset `off`.
pub fn read_at(path: &Path, off: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, off).unwrap();
    buf
}

/// Reads block `b` of a file system with `bs`-byte blocks.
pub fn block(path: &Path, bs: usize, b: u32) -> Vec<u8> {
    read_at(path, u64::from(b) * bs as u64, bs)
}
