//! What the probe examples share: a fresh 1 GiB image file in each mode,
//! mounted as the mount command does (no background flush).
use std::path::Path;
use std::sync::Arc;
use stitch_blockdev::{FileDevice, OpenOptions};
use stitch_diskfs::{Consistency, DataMode, DiskFs};
use stitch_memfs::{MemFs, Options};

/// Soft updates and the journal's ordered and journal data modes.
pub const MODES: [Consistency; 3] = [
    Consistency::SoftUpdates,
    Consistency::Journal(DataMode::Ordered),
    Consistency::Journal(DataMode::Journal),
];

/// memfs over a fresh image `dir/name` for `mode` (ext3 for the journal
/// modes), and the device, for its counters.
pub fn mount(dir: &Path, name: &str, mode: Consistency) -> (Arc<FileDevice>, MemFs) {
    let path = dir.join(name);
    let journal =
        matches!(mode, Consistency::Journal(_)).then_some(stitch_testkit::JournalSize::Default);
    stitch_testkit::mkfs(&path, 1 << 30, journal);
    let dev = Arc::new(FileDevice::open(&path, OpenOptions::default()).unwrap());
    let disk = DiskFs::mount(dev.clone(), mode, stitch_diskfs::Timestamp::from_secs(1)).unwrap();
    let opts = Options {
        flush_interval: None,
        ..Options::default()
    };
    (dev, MemFs::mount(disk, opts).unwrap())
}
