//! Helpers shared by the diskfs tests: mounts in memory, crash images and
//! their verdict (fresh images, scratch directories and e2fsck come from
//! stitch-testkit).
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use stitch_blockdev::MemDevice;
use stitch_diskfs::{Consistency, DiskFs};

pub const NOW: stitch_diskfs::Timestamp = stitch_diskfs::Timestamp::from_secs(1_700_000_000);

/// Mounts `image` on a memory device; the device holds what reached "disk".
pub fn mount(image: Vec<u8>, mode: Consistency) -> (Arc<MemDevice>, DiskFs) {
    let dev = Arc::new(MemDevice::from_image(4096, image).unwrap());
    let fs = DiskFs::mount(dev.clone(), mode, NOW).unwrap();
    (dev, fs)
}

/// Byte `i` of the file made as inode `f`: never zero, different per file,
/// so a crash test can tell a file's own bytes from anyone else's.
pub fn byte_of(f: u32, i: u64) -> u8 {
    (((f as u64 * 131 + i * 7) % 251) + 1) as u8
}

/// A crash-test workload's write-back step: a few blocks, and a flush half
/// the time, so crashes fall between and inside write rounds.
pub fn write_back_some(fs: &mut DiskFs, rng: &mut impl rand::Rng) {
    let cache = fs.modes_mut().cache_mut();
    cache.write_round(rng.gen_range(1..6)).unwrap();
    if rng.gen_bool(0.5) {
        cache.flush().unwrap();
    }
}

/// `image` mounted in `mode` on a recording device, for crash tests.
pub fn mount_recorded(
    image: Vec<u8>,
    mode: Consistency,
) -> (Arc<stitch_blockdev::RecordingDevice<MemDevice>>, DiskFs) {
    let mem = MemDevice::from_image(4096, image.clone()).unwrap();
    let rec = Arc::new(stitch_blockdev::RecordingDevice::with_base(mem, image).unwrap());
    let fs = DiskFs::mount(rec.clone(), mode, NOW).unwrap();
    (rec, fs)
}

/// Every crash image `rec`'s log allows whose committed prefix reaches
/// `from` (exhaustive per epoch up to `max_states`, sampled beyond with
/// `seed`), given to `f` with its state.
pub fn each_crash_image(
    rec: &stitch_blockdev::RecordingDevice<MemDevice>,
    from: stitch_blockdev::record::CrashPoint,
    max_states: u64,
    seed: u64,
    mut f: impl FnMut(&stitch_blockdev::record::CrashState, Vec<u8>),
) {
    use stitch_blockdev::record::{crash_states, Enumerate, ImageBuilder};
    let (log, start) = (rec.log(), rec.base());
    let mut builder = ImageBuilder::new(&start, &log).unwrap();
    let opts = Enumerate {
        max_states,
        seed,
        torn: None,
    };
    for state in crash_states(&log, &opts).unwrap() {
        if state.committed >= from {
            f(&state, builder.build(&state).unwrap());
        }
    }
}

/// The soft-updates verdict on the image at `path`: our fsck finds at most
/// leaks, `e2fsck -fn` exits 0 or 4 (errors it would fix), and 0 whenever
/// ours finds nothing. `Err` says why not.
pub fn soft_updates_verdict(path: &Path) -> Result<(), String> {
    let report = stitch_fsck::check(path, &Default::default(), &mut |_, _, _| {})
        .map_err(|e| e.to_string())?;
    if !report.is_clean() && !report.only_leaks() {
        return Err(format!("corruption:\n{report}"));
    }
    let e2 = stitch_testkit::e2fsck(path, &["-fn"]);
    let (code, clean) = (e2.code, report.is_clean());
    if (clean && code != 0) || !matches!(code, 0 | 4) {
        return Err(format!(
            "e2fsck exit {code} (ours: {}):\n{}",
            if clean { "clean" } else { "leaks only" },
            e2.stdout
        ));
    }
    Ok(())
}
