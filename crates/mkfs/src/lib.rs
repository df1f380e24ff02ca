//! `stitchfs mkfs`: make an ext2 or ext3 file system on an image file or a
//! block device, close to what `mke2fs -t ext2/ext3 -b 4096 -I 256 -O
//! ^resize_inode,^dir_index` makes.
//!
//! Steps: size the file system ([`params`]), plan every metadata block in
//! memory ([`image`], no I/O), then write them ([`target`]). The plan is pure,
//! so it is tested without a disk; the tests in `tests/` judge written images
//! with e2fsck, debugfs and the kernel.
//!
//! Architecture invariant: all on-disk encoding comes from `stitch-format`;
//! this crate decides values and placement, never byte layouts.

pub mod image;
pub mod params;
pub mod target;

pub use params::JournalSize;

use std::path::{Path, PathBuf};
use stitch_blockdev::Location;
use stitch_format::superblock::Superblock;
use stitch_format::BlockNo;

/// What the caller asks for.
#[derive(Clone, Debug, Default)]
pub struct MkfsOptions {
    /// Bytes of the file system; defaults to the size of the file or device.
    pub size: Option<u64>,
    /// `None` makes ext2; `Some` makes ext3 with a journal of this size.
    pub journal: Option<JournalSize>,
    /// Overwrite an existing ext2/3/4 file system.
    pub force: bool,
    /// Which zero regions of an image file to write now (a block device has
    /// all of them written, since its blocks are not known to be zero).
    pub preallocate: Preallocate,
}

/// Which regions of a new image file mkfs writes as zeros rather than leaving
/// as holes. A hole reads as zeros just the same; the difference is when the
/// host file system allocates it. A write into a hole allocates, and the
/// host's `fdatasync` then commits the host's own metadata too, which about
/// doubles the cost of a small synchronous write. The journal is rewritten
/// at every commit, so its holes would cost each commit until the log had
/// wrapped once; mke2fs also writes it (`lazy_journal_init=0`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Preallocate {
    /// Write only the metadata blocks that hold something: the sparsest
    /// image and the fastest mkfs.
    None,
    /// Also write the journal's body.
    #[default]
    Journal,
    /// Also write every inode table, as mke2fs's `lazy_itable_init=0`.
    Metadata,
}

impl std::str::FromStr for Preallocate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Preallocate::None),
            "journal" => Ok(Preallocate::Journal),
            "metadata" => Ok(Preallocate::Metadata),
            other => Err(format!(
                "unknown preallocation {other:?} (none, journal, metadata)"
            )),
        }
    }
}

/// What was made.
#[derive(Clone, Debug)]
pub struct MkfsReport {
    pub block_size: u32,
    pub blocks: u32,
    pub groups: u32,
    pub inodes: u32,
    pub journal_blocks: u32,
    pub uuid: [u8; 16],
    /// Blocks actually written (the rest are holes or zeroed ranges).
    pub blocks_written: u64,
}

impl MkfsReport {
    pub fn kind(&self) -> &'static str {
        if self.journal_blocks > 0 {
            "ext3"
        } else {
            "ext2"
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MkfsError {
    /// Displayed without its source, which error chains print after it.
    #[error("{path}: {what}")]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} already holds an ext2/ext3/ext4 file system; use --force to overwrite it")]
    ExistingFileSystem { path: PathBuf },
    #[error("{path} is empty or new: give a size (--size)")]
    NoSize { path: PathBuf },
    #[error("size {size} is larger than the device ({device} bytes)")]
    SizeBeyondDevice { size: u64, device: u64 },
    #[error("{bytes} bytes is too small for a file system")]
    TooSmall { bytes: u64 },
    #[error("a journal of {blocks} blocks is too small (at least 1024 blocks)")]
    JournalTooSmall { blocks: u32 },
    #[error("a journal of {blocks} blocks does not fit a file system of {fs_blocks} blocks")]
    JournalTooLarge { blocks: u32, fs_blocks: u32 },
    #[error("internal error: the planned file system does not validate: {0}")]
    Plan(String),
}

fn identity() -> image::Identity {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    let mut uuid: [u8; 16] = rng.gen();
    uuid[6] = (uuid[6] & 0x0F) | 0x40; // version 4
    uuid[8] = (uuid[8] & 0x3F) | 0x80; // RFC 4122 variant
    image::Identity {
        uuid,
        hash_seed: rng.gen(),
        now: stitch_format::Timestamp::now(),
    }
}

/// Makes a file system at `path`; `progress(done, total)` is called as blocks
/// are written (total counts written and zeroed blocks).
pub fn mkfs(
    path: &Path,
    opts: &MkfsOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<MkfsReport, MkfsError> {
    mkfs_at(&Location::from(path), opts, progress)
}

/// [`mkfs`] at a path or on an NBD export.
pub fn mkfs_at(
    at: &Location,
    opts: &MkfsOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<MkfsReport, MkfsError> {
    let mut target = target::Target::open_at(at, opts.size)?;
    if !opts.force && target.has_ext2_magic()? {
        return Err(MkfsError::ExistingFileSystem { path: at.name() });
    }
    let p = params::Params::new(target.bytes, opts.journal)?;
    let id = identity();
    let img =
        image::Image::build(&p, &id).ok_or_else(|| MkfsError::Plan("allocation failed".into()))?;
    // Check the plan with the decoder before anything touches the disk.
    Superblock::decode(&img.sb.to_bytes()).map_err(|e| MkfsError::Plan(e.to_string()))?;
    target.reset()?;
    let blocks_written = write_image(&target, &img, opts.preallocate, progress)?;
    Ok(MkfsReport {
        block_size: params::BLOCK_SIZE,
        blocks: p.blocks_count,
        groups: p.group_count,
        inodes: p.inodes_count(),
        journal_blocks: p.journal_blocks,
        uuid: id.uuid,
        blocks_written,
    })
}

/// Zeroes what must be zero (all of it on a device; on a file, what
/// `preallocate` asks for), then writes the metadata with the primary
/// superblock last, so an interrupted mkfs leaves no valid-looking file
/// system behind; then syncs.
fn write_image(
    t: &target::Target,
    img: &image::Image,
    preallocate: Preallocate,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64, MkfsError> {
    let bs = params::BLOCK_SIZE;
    let (journal, tables) = match (t.is_device, preallocate) {
        (true, _) | (false, Preallocate::Metadata) => (true, true),
        (false, Preallocate::Journal) => (true, false),
        (false, Preallocate::None) => (false, false),
    };
    let zero: Vec<_> = [(journal, &img.journal_body), (tables, &img.inode_tables)]
        .into_iter()
        .filter(|(on, _)| *on)
        .flat_map(|(_, ranges)| ranges.iter().cloned())
        .collect();
    let zero_total: u64 = zero.iter().map(|r| r.end.since(r.start)).sum();
    let total = zero_total + img.writes.len() as u64;
    let mut done = 0;
    for r in zero {
        done += r.end.since(r.start);
        t.zero(r, bs)?;
        progress(done, total);
    }
    let primary = BlockNo(0);
    for (&b, data) in img.writes.iter().filter(|(&b, _)| b != primary) {
        t.write_block(b, data, bs)?;
        done += 1;
        if done % 256 == 0 {
            progress(done, total);
        }
    }
    t.sync()?;
    t.write_block(primary, &img.writes[&primary], bs)?;
    t.sync()?;
    progress(total, total);
    Ok(img.writes.len() as u64)
}
