//! Helpers of the memfs tests: images in memory, mounts, remounts.
#![allow(dead_code)]

use std::sync::Arc;
use stitch_blockdev::MemDevice;
use stitch_diskfs::{Consistency, DiskFs};
use stitch_memfs::{MemFs, Options};
use stitch_patch::{CacheConfig, PatchCache};

pub const NOW: u32 = 1_700_000_000;

/// A fresh image from our mkfs (ext3 with a journal when `journal`).
pub fn fresh_image(size: u64, journal: bool) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fresh.img");
    let opts = stitch_mkfs::MkfsOptions {
        size: Some(size),
        journal: journal.then_some(stitch_mkfs::JournalSize::Default),
        force: true,
    };
    stitch_mkfs::mkfs(&path, &opts, &mut |_, _| {}).unwrap();
    std::fs::read(&path).unwrap()
}

pub fn opts() -> Options {
    Options {
        flush_interval: None,
        fixed_time: Some(NOW),
        ..Options::default()
    }
}

/// memfs over diskfs over a memory device holding `image`.
pub fn mount_on(dev: Arc<MemDevice>, mode: Consistency, opts: Options) -> MemFs {
    let cache = PatchCache::new(dev, CacheConfig::default());
    let disk = DiskFs::mount(cache, mode, NOW).unwrap();
    MemFs::mount(disk, opts).unwrap()
}

pub fn device(image: Vec<u8>) -> Arc<MemDevice> {
    Arc::new(MemDevice::from_image(4096, image).unwrap())
}

/// The device's contents as an image file, judged by e2fsck -fn.
pub fn e2fsck(dev: &MemDevice) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("check.img");
    std::fs::write(&path, dev.snapshot()).unwrap();
    let out = std::process::Command::new("e2fsck")
        .args(["-fn"])
        .arg(&path)
        .output()
        .expect("e2fsck (apt-get install e2fsprogs)");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

pub const MODES: [Consistency; 3] = [
    Consistency::SoftUpdates,
    Consistency::Journal(stitch_diskfs::DataMode::Ordered),
    Consistency::Journal(stitch_diskfs::DataMode::Journal),
];
