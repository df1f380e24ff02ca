//! Shared by the tests of soft-updates crash images (`repair.rs`,
//! `unclean_mount.rs`): a fresh ext2 image and a diskfs workload recorded
//! on the recording device, whose crash images leak.

#![allow(dead_code)] // each test crate uses its own part

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use stitch_blockdev::{MemDevice, RecordingDevice};
use stitch_diskfs::{Consistency, DiskFs, RenameFlags};

pub const NOW: stitch_diskfs::Timestamp = stitch_diskfs::Timestamp::from_secs(1_700_000_000);

/// A soft-updates diskfs workload on the recording device over `image`:
/// creates, writes, unlinks, files unlinked while open, directories made
/// and moved, with write-back rounds and flushes between; returns the
/// recording.
pub fn workload(image: Vec<u8>, seed: u64) -> Arc<RecordingDevice<MemDevice>> {
    let mem = MemDevice::from_image(4096, image.clone()).unwrap();
    let rec = Arc::new(RecordingDevice::with_base(mem, image).unwrap());
    let mut fs = DiskFs::mount(rec.clone(), Consistency::SoftUpdates, NOW).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let root = fs.root();
    let (a, _) = fs.mkdir(root, b"a", 0o755, 0, 0, NOW).unwrap();
    for i in 0..24u32 {
        let name = format!("f{i}");
        let parent = if i % 2 == 0 { root } else { a };
        let (f, _) = fs
            .create(parent, name.as_bytes(), 0o644, 0, 0, NOW)
            .unwrap();
        fs.write(f, 0, &vec![i as u8 + 1; rng.gen_range(1..30_000)], NOW)
            .unwrap();
        match rng.gen_range(0..5) {
            0 => drop(fs.unlink(parent, name.as_bytes(), NOW).unwrap()),
            1 => {
                fs.open(f).unwrap();
                fs.unlink(parent, name.as_bytes(), NOW).unwrap();
            }
            2 => {
                let (d, _) = fs
                    .mkdir(root, format!("d{i}").as_bytes(), 0o755, 0, 0, NOW)
                    .unwrap();
                let _ = d;
                fs.rename(
                    root,
                    format!("d{i}").as_bytes(),
                    a,
                    format!("m{i}").as_bytes(),
                    RenameFlags::default(),
                    NOW,
                )
                .unwrap();
            }
            _ => {}
        }
        let cache = fs.modes_mut().cache_mut();
        cache.write_round(rng.gen_range(1..5)).unwrap();
        if rng.gen_bool(0.4) {
            cache.flush().unwrap();
        }
    }
    rec
}

/// A fresh 16 MiB ext2 image from our mkfs.
pub fn fresh_ext2() -> Vec<u8> {
    stitch_testkit::fresh_image(16 << 20, None)
}
