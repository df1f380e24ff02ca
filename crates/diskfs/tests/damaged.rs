//! Mount refuses a damaged image before writing a byte: every image of the
//! damaged corpus (`stitch_testkit::damaged`: a root that is a file or is
//! cleared, an image shorter than its block count, a zeroed descriptor
//! block, bitmaps and inode tables out of place, counts above their
//! totals, bad superblock values, an unsupported feature, a broken orphan
//! list or resize inode, a damaged journal on an image needing recovery,
//! a journal whose replay would damage the file system) is mounted from
//! its file, in every mode its base allows; the mount must fail with
//! damage (or an unsupported feature) named in the message, and the
//! image's digest must not change. The undamaged bases mount, as a control.

use std::path::Path;
use std::sync::Arc;
use stitch_blockdev::{FileDevice, OpenOptions};
use stitch_diskfs::{Consistency, DataMode, DiskFs};
use stitch_testkit::damaged::{self, Damage};

const NOW: stitch_diskfs::Timestamp = stitch_diskfs::Timestamp::from_secs(1_700_000_000);

fn modes(journal: bool) -> Vec<Consistency> {
    let mut m = vec![Consistency::SoftUpdates, Consistency::Async];
    if journal {
        m.push(Consistency::Journal(DataMode::Ordered));
    }
    m
}

fn mount(img: &Path, mode: Consistency) -> stitch_diskfs::Result<DiskFs> {
    let dev = FileDevice::open(img, OpenOptions::default()).unwrap();
    DiskFs::mount(Arc::new(dev), mode, NOW)
}

/// Mounts the damaged image in each of `modes`: every mount must be
/// refused, naming the problem, and leave the image's digest as it was.
fn refused_unchanged(dir: &Path, d: &Damage, modes: &[Consistency]) {
    let img = dir.join("damaged.img");
    damaged::base_image(&img, d.journal);
    (d.apply)(&img);
    let before = damaged::digest(&img);
    for &mode in modes {
        let err = match mount(&img, mode) {
            Ok(_) => panic!("{} ({mode}): mounted", d.name),
            Err(e) => e,
        };
        let msg = err.to_string();
        assert!(
            msg.contains(d.says),
            "{} ({mode}): the refusal does not name the problem\n  want: {}\n  got:  {msg}",
            d.name,
            d.says
        );
        let unsupported = matches!(
            err,
            stitch_diskfs::DiskError::Format(stitch_format::FormatError::UnsupportedFeature { .. })
        );
        assert!(
            err.is_damage() || unsupported,
            "{} ({mode}): not reported as damage: {err:?}",
            d.name
        );
        assert_eq!(
            damaged::digest(&img),
            before,
            "{} ({mode}): the refused image was changed",
            d.name
        );
    }
}

#[test]
fn every_damaged_image_is_refused_and_left_unchanged() {
    let tmp = stitch_testkit::scratch();
    let corpus = damaged::corpus();
    for d in &corpus {
        refused_unchanged(tmp.path(), d, &modes(d.journal));
    }
    println!("{} damaged images refused unchanged", corpus.len());
}

/// The control: the bases themselves mount in every mode and unmount clean.
#[test]
fn the_undamaged_bases_mount() {
    let tmp = stitch_testkit::scratch();
    let img = tmp.path().join("base.img");
    for journal in [false, true] {
        for mode in modes(journal) {
            damaged::base_image(&img, journal);
            let fs = mount(&img, mode).unwrap_or_else(|e| panic!("{mode}: {e}"));
            fs.unmount(NOW).unwrap();
            let e2 = stitch_testkit::e2fsck(&img, &["-fn"]);
            assert!(e2.clean(), "{mode}: {}", e2.stdout);
        }
    }
}
