//! Fresh images for tests: from our mkfs (what stitchfs itself makes) or
//! from e2fsprogs' mke2fs (what users bring).

use std::path::Path;
use std::process::Command;
pub use stitch_mkfs::JournalSize;

/// Makes a fresh image at `path` with our mkfs: `size` bytes, 4 KiB
/// blocks, ext2, or ext3 with a journal of `journal`'s size. Existing
/// files are overwritten.
pub fn mkfs(path: &Path, size: u64, journal: Option<JournalSize>) {
    let opts = stitch_mkfs::MkfsOptions {
        size: Some(size),
        journal,
        force: true,
        ..Default::default()
    };
    stitch_mkfs::mkfs(path, &opts, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("mkfs {}: {e}", path.display()));
}

/// [`mkfs`] into a scratch file, returned in memory (for a memory or
/// recording device).
pub fn fresh_image(size: u64, journal: Option<JournalSize>) -> Vec<u8> {
    let dir = crate::scratch();
    let path = dir.path().join("fresh.img");
    mkfs(&path, size, journal);
    std::fs::read(&path).expect("read the fresh image")
}

/// Makes a fresh sparse file of `size` bytes at `path` into a file system
/// with `mke2fs -q -F ARGS` (reading the system's `/etc/mke2fs.conf`,
/// whatever the environment says).
pub fn mke2fs(path: &Path, size: u64, args: &[&str]) {
    let f = std::fs::File::create(path).expect("create the image file");
    f.set_len(size).expect("size the image file");
    drop(f);
    let out = Command::new("mke2fs")
        .args(["-q", "-F"])
        .args(args)
        .arg(path)
        .env("MKE2FS_CONFIG", "/etc/mke2fs.conf")
        .output()
        .expect("mke2fs runs (apt-get install e2fsprogs)");
    assert!(
        out.status.success(),
        "mke2fs {args:?} {}: {}{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
