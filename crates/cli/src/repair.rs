//! `stitchfs fsck --repair-leaks`: our checker finds the leaks, diskfs
//! repairs them, the checker looks again; repeated until the image is clean.
//! Corruption is never "repaired" here: the image is left as it is.

use anyhow::{bail, Context};
use std::path::Path;
use std::sync::Arc;
use stitch_blockdev::{FileDevice, OpenOptions};
use stitch_diskfs::{Consistency, DiskFs, InodeNo, Leak};
use stitch_fsck::{CheckOptions, FindingKind, Report};
use stitch_patch::{CacheConfig, PatchCache};

const MAX_PASSES: usize = 5;

pub fn run(image: &Path) -> anyhow::Result<i32> {
    for pass in 1..=MAX_PASSES {
        let report = check(image)?;
        // Notes (superblock totals) are repaired too, as e2fsck -p does.
        if report.findings.is_empty() {
            println!(
                "{}: clean after {} repair pass(es)",
                image.display(),
                pass - 1
            );
            return Ok(stitch_fsck::EXIT_CLEAN);
        }
        if !report.only_leaks() {
            println!("{}:", image.display());
            print!("{report}");
            eprintln!("stitchfs fsck: corruption found; --repair-leaks repairs leaks only, nothing was changed");
            return Ok(report.exit_code());
        }
        let leaks = leaks_of(&report);
        repair(image, &leaks).with_context(|| format!("repair pass {pass}"))?;
        eprintln!("pass {pass}: repaired {} leak(s)", leaks.len());
    }
    let report = check(image)?;
    print!("{report}");
    bail!("still not clean after {MAX_PASSES} repair passes")
}

fn check(image: &Path) -> anyhow::Result<Report> {
    stitch_fsck::check(image, &CheckOptions::default(), &mut |_, _, _| {})
        .map_err(|e| anyhow::anyhow!("{}: {e}", image.display()))
}

/// The checker's leak findings in diskfs's terms (orphans need none: mount
/// frees them).
pub fn leaks_of(report: &Report) -> Vec<Leak> {
    report
        .findings
        .iter()
        .filter_map(|f| match f.kind {
            FindingKind::LinkCountTooHigh { ino, counted, .. } => Some(Leak::LinkCount {
                ino: InodeNo(ino),
                counted,
            }),
            FindingKind::UnconnectedDirectory { ino, .. } => {
                Some(Leak::UnconnectedDirectory { ino: InodeNo(ino) })
            }
            FindingKind::BlocksLeaked { first, last } => Some(Leak::BlocksLeaked { first, last }),
            FindingKind::InodesLeaked { first, last } => Some(Leak::InodesLeaked { first, last }),
            FindingKind::BadBlockCount { ino, should_be, .. } => Some(Leak::BlockCount {
                ino: InodeNo(ino),
                should_be,
            }),
            FindingKind::BadSize {
                ino,
                should_be,
                dir_blocks_past_size: true,
                ..
            } => Some(Leak::DirSize {
                ino: InodeNo(ino),
                should_be,
            }),
            FindingKind::InUseWithDtime { ino, .. } => Some(Leak::OrphanLink { ino: InodeNo(ino) }),
            FindingKind::XattrRefcountWrong {
                block,
                refcount,
                should_be,
            } if refcount > should_be => Some(Leak::XattrRefcount {
                block,
                users: should_be,
            }),
            FindingKind::GroupFreeBlocksWrong { group, counted, .. } => {
                Some(Leak::GroupFreeBlocks { group, counted })
            }
            FindingKind::GroupFreeInodesWrong { group, counted, .. } => {
                Some(Leak::GroupFreeInodes { group, counted })
            }
            FindingKind::GroupDirsWrong { group, counted, .. } => {
                Some(Leak::GroupDirs { group, counted })
            }
            FindingKind::FreeBlocksWrong { counted, .. } => Some(Leak::FreeBlocks { counted }),
            FindingKind::FreeInodesWrong { counted, .. } => Some(Leak::FreeInodes { counted }),
            _ => None,
        })
        .collect()
}

fn repair(image: &Path, leaks: &[Leak]) -> anyhow::Result<()> {
    let dev = FileDevice::open(
        image,
        OpenOptions {
            read_only: false,
            direct: false,
            block_size: 4096,
        },
    )?;
    let cache = PatchCache::new(Arc::new(dev), CacheConfig::default());
    let now = stitch_diskfs::Timestamp::now();
    // Mounting finishes the orphans.
    let mut fs = DiskFs::mount(cache, Consistency::SoftUpdates, now)?;
    fs.repair_leaks(leaks, now)?;
    fs.unmount(now)?;
    Ok(())
}
