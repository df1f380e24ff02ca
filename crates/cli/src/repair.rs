//! Reclaiming soft-updates leaks: our checker finds them, diskfs repairs
//! them (`DiskFs::mount` with `StackOptions::reclaiming`, which sets the
//! group summaries before anything else moves them), the checker looks
//! again; repeated until the image is clean. Used by `stitchfs fsck --repair-leaks` and by `stitchfs
//! mount` after an unclean shutdown. Corruption is never "repaired" here:
//! the image is left as it is.

use crate::image::Opened;
use anyhow::{bail, Context};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use stitch_blockdev::{ByteImage, FileDevice, Location, OpenOptions};
use stitch_diskfs::{BlockNo, DiskFs, InodeNo, Leak, StackOptions};
use stitch_fsck::{CheckOptions, FindingKind, Phase, Report};

const MAX_PASSES: usize = 5;

/// What checking and repairing found.
pub enum Verdict {
    /// Clean now; what it took.
    Clean(Reclaimed),
    /// Corruption (not only leaks): nothing was written.
    Corrupt(Report),
}

/// What the repair passes reclaimed, counted from the checker's findings.
#[derive(Debug, Default)]
pub struct Reclaimed {
    /// Leaks repaired in each pass.
    pub per_pass: Vec<usize>,
    pub orphans: usize,
    pub blocks: u64,
    pub inodes: u64,
    pub link_counts: usize,
    pub reconnected: usize,
    pub summaries: usize,
    /// Block counts, directory sizes, orphan links, attribute counts.
    pub fields: usize,
}

impl Reclaimed {
    fn add(&mut self, report: &Report, leaks: &[Leak]) {
        self.per_pass.push(leaks.len());
        self.orphans += report
            .findings
            .iter()
            .filter(|f| matches!(f.kind, FindingKind::Orphan { .. }))
            .count();
        for leak in leaks {
            match *leak {
                Leak::BlocksLeaked { first, last } => self.blocks += last.since(first) + 1,
                Leak::InodesLeaked { first, last } => {
                    self.inodes += u64::from(last.0 - first.0) + 1
                }
                Leak::LinkCount { counted: 0, .. } | Leak::UnconnectedDirectory { .. } => {
                    self.reconnected += 1
                }
                Leak::LinkCount { .. } => self.link_counts += 1,
                l if l.is_count() => self.summaries += 1,
                _ => self.fields += 1,
            }
        }
    }
}

impl fmt::Display for Reclaimed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = [
            (self.orphans as u64, "orphan(s) freed"),
            (self.blocks, "leaked block(s) freed"),
            (self.inodes, "leaked inode(s) freed"),
            (self.reconnected as u64, "file(s) reconnected to lost+found"),
            (self.link_counts as u64, "link count(s) lowered"),
            (
                self.fields as u64,
                "inode field(s) or attribute count(s) corrected",
            ),
            (
                self.summaries as u64,
                "group summary or total count(s) set from the bitmaps",
            ),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        if parts.is_empty() {
            return f.write_str("nothing to reclaim");
        }
        write!(f, "{}", parts.join(", "))
    }
}

/// Checks the image and repairs its leaks until it is clean. `opened` is
/// the image, opened (and locked) by the caller; the checker reads it
/// through `opened.bytes` between the passes.
pub fn reclaim(
    image: &Location,
    opened: &Opened,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> anyhow::Result<Verdict> {
    let dev = &opened.dev;
    let check =
        |progress: &mut dyn FnMut(Phase, u64, u64)| check(image, opened.bytes.clone(), progress);
    let mut done = Reclaimed::default();
    for _ in 0..MAX_PASSES {
        let report = check(progress)?;
        // Notes (superblock totals) are repaired too, as e2fsck -p does.
        if report.findings.is_empty() {
            return Ok(Verdict::Clean(done));
        }
        if !report.only_leaks() {
            return Ok(Verdict::Corrupt(report));
        }
        let leaks = leaks_of(&report);
        done.add(&report, &leaks);
        let now = stitch_diskfs::Timestamp::now();
        DiskFs::mount(dev.clone(), StackOptions::reclaiming(&leaks), now)?.unmount(now)?;
    }
    let report = check(progress)?;
    if report.findings.is_empty() {
        return Ok(Verdict::Clean(done));
    }
    bail!("still not clean after {MAX_PASSES} repair passes:\n{report}")
}

/// `stitchfs fsck --repair-leaks`.
pub fn run(at: &Location) -> anyhow::Result<i32> {
    let opened = match at {
        Location::Path(image) => {
            let open = || -> anyhow::Result<Opened> {
                let dev = FileDevice::open(
                    image,
                    OpenOptions {
                        read_only: false,
                        direct: false,
                        block_size: block_size(image)?,
                    },
                )?;
                Ok(Opened {
                    dev: Arc::new(dev),
                    bytes: Arc::new(std::fs::File::open(image)?),
                    nbd: None,
                })
            };
            open().with_context(|| format!("{}: cannot open", image.display()))?
        }
        Location::Nbd(_) => crate::image::open(at, &|at, e| anyhow::anyhow!("{at}: {e}"))?.0,
    };
    let image = at;
    match reclaim(image, &opened, &mut |_, _, _| {})? {
        Verdict::Clean(done) => {
            for (pass, n) in done.per_pass.iter().enumerate() {
                eprintln!("pass {}: repaired {n} leak(s)", pass + 1);
            }
            println!(
                "{}: clean after {} repair pass(es)",
                image,
                done.per_pass.len()
            );
            Ok(stitch_fsck::EXIT_CLEAN)
        }
        Verdict::Corrupt(report) => {
            println!("{image}:");
            print!("{report}");
            eprintln!("stitchfs fsck: corruption found; --repair-leaks repairs leaks only, nothing was changed");
            Ok(report.exit_code())
        }
    }
}

/// The image's block size as its primary superblock says, 4 KiB when it
/// says nothing usable (the checker then reports why, and nothing is
/// written).
fn block_size(image: &Path) -> anyhow::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1024];
    std::fs::File::open(image)?.read_exact_at(&mut buf, 1024)?;
    let sb = stitch_format::Superblock::decode_raw(&buf);
    Ok(sb
        .and_then(|sb| sb.block_size())
        .map_or(4096, |b| b.bytes() as usize))
}

fn check(
    image: &Location,
    bytes: Arc<dyn ByteImage>,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> anyhow::Result<Report> {
    stitch_fsck::check_over(&image.name(), bytes, &CheckOptions::default(), progress)
        .map_err(|e| anyhow::anyhow!("{image}: {e}"))
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
            FindingKind::BlocksLeaked { first, last } => Some(Leak::BlocksLeaked {
                first: BlockNo::from(first),
                last: BlockNo::from(last),
            }),
            FindingKind::InodesLeaked { first, last } => Some(Leak::InodesLeaked {
                first: InodeNo(first),
                last: InodeNo(last),
            }),
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
            FindingKind::DeletedWithoutDtime { ino } => {
                Some(Leak::DeletionTime { ino: InodeNo(ino) })
            }
            FindingKind::XattrRefcountWrong {
                block,
                refcount,
                should_be,
            } if refcount > should_be => Some(Leak::XattrRefcount {
                block: BlockNo::from(block),
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
