//! Helpers shared by the format tests: read blocks from images (scratch
//! directories and mke2fs come from stitch-testkit).

#![allow(dead_code)]

use std::path::Path;
use stitch_format::BlockNo;

/// Reads `len` bytes at byte offset `off`.
pub fn read_at(path: &Path, off: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, off).unwrap();
    buf
}

/// Reads block `b` of a file system with `bs`-byte blocks.
pub fn block(path: &Path, bs: usize, b: BlockNo) -> Vec<u8> {
    read_at(path, b.0 * bs as u64, bs)
}
