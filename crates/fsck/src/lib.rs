//! `stitchfs fsck`: an independent, read-only checker of ext2/ext3 images.
//!
//! It is written against the format layer (`stitch-format`) only, never the
//! code that modifies file systems, so that it stays an independent judge of
//! what diskfs writes. It follows e2fsck's five passes and e2fsck's rules
//! for what counts as a problem, and classifies each finding as corruption
//! or soft-updates leak ([`finding`]).
//!
//! Passes: 0 superblock, descriptors, metadata blocks (`fs`) and the
//! journal (`journal`), replayed in memory if the file system needs
//! recovery, so the passes judge what the kernel would mount;
//! 1 inodes and block maps (`pass1`, `blockmap`); 2 directories
//! (`pass2`); 3 connectivity (`pass3`); 4 link counts (`pass4`);
//! 5 bitmaps and counts (`pass5`).
//!
//! Architecture invariants:
//! - Read-only, but for `CheckOptions::recover`: then the image is opened
//!   for writing and the journal replay (`journal::replay`) is the only
//!   code that writes, before any pass runs. The checker never repairs.
//! - Every block is read at most once per pass, in increasing order (inode
//!   tables in one sweep; indirect and directory blocks sorted), so a check
//!   costs a few sequential sweeps, never a seek per inode.
//! - A corrupt image never panics the checker: decoding problems become
//!   findings, and only unreadable images or unsupported features are
//!   [`FsckError`]s.

mod blockmap;
mod dirent;
pub mod error;
pub mod finding;
mod fs;
mod image;
mod journal;
mod pass1;
mod pass2;
mod pass3;
mod pass4;
mod pass5;
pub mod report;
mod state;

pub use error::FsckError;
pub use finding::{BitmapKind, Class, Finding, FindingKind, Owner};
pub use report::{RecoverySummary, Report, Summary, EXIT_CLEAN, EXIT_ERROR, EXIT_UNCORRECTED};

use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
use stitch_blockdev::{ByteImage, Location};

/// What the caller asks for.
#[derive(Clone, Debug, Default)]
pub struct CheckOptions {
    /// Replay the journal into the image before checking (the kernel's
    /// recovery at mount), then empty it and clear `needs_recovery`.
    /// Without it an image that needs recovery is checked as if replayed,
    /// in memory, and left as it is.
    pub recover: bool,
}

/// The phase a progress report is about; `(done, total)` are in the
/// phase's own units (groups, blocks).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Superblock,
    Journal,
    Inodes,
    IndirectBlocks,
    Directories,
    Connectivity,
    LinkCounts,
    Bitmaps,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::Superblock => "superblock",
            Phase::Journal => "journal",
            Phase::Inodes => "inodes",
            Phase::IndirectBlocks => "indirect blocks",
            Phase::Directories => "directories",
            Phase::Connectivity => "connectivity",
            Phase::LinkCounts => "link counts",
            Phase::Bitmaps => "bitmaps",
        }
    }
}

/// Checks the image at `image` and reports what is wrong with it.
pub fn check(
    image: &Path,
    opts: &CheckOptions,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> Result<Report, FsckError> {
    check_at(&Location::from(image), opts, progress)
}

/// [`check`] for a path or an NBD URI.
pub fn check_at(
    image: &Location,
    opts: &CheckOptions,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> Result<Report, FsckError> {
    check_image(image::Image::open_at(image, opts.recover)?, opts, progress)
}

/// [`check`] through an image already open (shared with a device that
/// mounts it next): `name` is what errors call it.
pub fn check_over(
    name: &Path,
    file: Arc<dyn ByteImage>,
    opts: &CheckOptions,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> Result<Report, FsckError> {
    let img = image::Image::over(file).map_err(|source| FsckError::Open {
        path: name.to_path_buf(),
        source,
    })?;
    check_image(img, opts, progress)
}

fn check_image(
    mut img: image::Image,
    opts: &CheckOptions,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> Result<Report, FsckError> {
    progress(Phase::Superblock, 0, 1);
    let mut early = Vec::new();
    let fs = fs::load(&mut img, &mut early)?;
    progress(Phase::Superblock, 1, 1);
    let needs_recovery = fs.sb.needs_recovery();
    progress(Phase::Journal, 0, 1);
    let (fs, recovery) = with_journal(&mut img, fs, opts, &mut early)?;
    progress(Phase::Journal, 1, 1);
    let mut st = state::State::new(fs.inodes_count(), fs.layout.blocks_count);
    for k in early {
        st.report(k);
    }
    fs::claim_metadata(&fs, &mut st);
    pass1::run(&img, &fs, &mut st, progress)?;
    check_xattr_blocks(&img, &mut st)?;
    report_dups(&mut st);
    pass2::run(&img, &fs, &mut st, progress)?;
    progress(Phase::Connectivity, 0, 1);
    pass3::run(&mut st);
    progress(Phase::LinkCounts, 0, 1);
    pass4::run(&fs, &mut st);
    let totals = pass5::run(&img, &fs, &mut st, progress)?;
    let applied = recovery.as_ref().is_some_and(|r| r.applied);
    let mut report = finish(&fs, st, totals);
    report.needs_recovery = needs_recovery && !applied;
    report.recovery = recovery;
    Ok(report)
}

/// Replays the journal if the file system needs it: in memory, or into
/// the image with `opts.recover`. Then the file system is loaded again
/// (the superblock and descriptors may be among the replayed blocks) and
/// its findings replace `early`'s; the journal's own are added.
fn with_journal(
    img: &mut image::Image,
    fs: fs::Fs,
    opts: &CheckOptions,
    early: &mut Vec<FindingKind>,
) -> Result<(fs::Fs, Option<RecoverySummary>), FsckError> {
    let mut found = Vec::new();
    let Some(replay) = journal::examine(img, &fs, &mut found)? else {
        early.append(&mut found);
        return Ok((fs, None));
    };
    let summary = replay.summary(opts.recover);
    if opts.recover {
        journal::replay(img, &fs, &replay)?;
    } else {
        img.set_overlay(replay.recovery.blocks);
    }
    early.clear();
    let fs = fs::load(img, early)?;
    early.append(&mut found);
    Ok((fs, Some(summary)))
}

/// Each extended-attribute block pass 1 found named is one, counting as
/// many references as inodes name it (e2fsck's pass 1 `check_ext_attr`).
fn check_xattr_blocks(img: &image::Image, st: &mut state::State) -> Result<(), FsckError> {
    let blocks: Vec<u32> = st.ea_blocks.keys().copied().collect();
    let mut found = Vec::new();
    img.read_sorted(&blocks, |i, buf| {
        let (block, users) = (blocks[i], st.ea_blocks[&blocks[i]]);
        match stitch_format::xattr::XattrHeader::parse(buf) {
            Err(e) => found.push(FindingKind::XattrBlockCorrupt {
                block,
                reason: e.to_string(),
            }),
            Ok(h) if h.refcount != users => found.push(FindingKind::XattrRefcountWrong {
                block,
                refcount: h.refcount,
                should_be: users,
            }),
            Ok(_) => {}
        }
    })?;
    for k in found {
        st.report(k);
    }
    Ok(())
}

fn report_dups(st: &mut state::State) {
    let dups = std::mem::take(&mut st.dups);
    for (block, owners) in dups {
        st.report(FindingKind::BlockClaimedTwice { block, owners });
    }
}

fn finish(fs: &fs::Fs, st: state::State, t: pass5::Totals) -> Report {
    let mut r = Report {
        findings: st.findings,
        summary: Summary {
            blocks: fs.layout.blocks_count,
            blocks_used: fs.layout.blocks_count - t.free_blocks.min(fs.layout.blocks_count),
            inodes: fs.inodes_count(),
            inodes_used: fs.inodes_count() - t.free_inodes.min(fs.inodes_count()),
            directories: t.dirs,
            ..Summary::default()
        },
        needs_recovery: false,
        recovery: None,
        orphans_in_use: st.orphans_in_use,
    };
    r.finish();
    r
}
