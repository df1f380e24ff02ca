//! Opening an image named on the command line, a path or an NBD URI
//! ([`Location`]), for the commands that mount or repair it: the block
//! device, byte access to the same image for the checker, and the primary
//! superblock, read and checked before anything writes.
//!
//! A path opens a `FileDevice` (locked: a second mount is refused) and,
//! for the checker, a second descriptor on the same file. An NBD URI opens
//! one connection that serves both: a server that takes one client at a
//! time (qemu-nbd's default) would refuse a second.

use anyhow::Context;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use stitch_blockdev::{
    BlockDevice, ByteImage, DevError, FileDevice, Location, NbdDevice, NbdOptions, OpenOptions,
};
use stitch_format::superblock::EXT2_MAGIC;
use stitch_format::Superblock;

/// An image opened read-write.
pub struct Opened {
    pub dev: Arc<dyn BlockDevice>,
    /// The same image, addressed in bytes, for the checker.
    pub bytes: Arc<dyn ByteImage>,
    /// Set for an image on an NBD server (its counters).
    pub nbd: Option<Arc<NbdDevice>>,
}

/// Opens `at` for writing, with its superblock. A superblock that is not
/// ext2/ext3, or describes what stitchfs cannot mount, is refused with
/// `refusal`'s words before the device is opened for a path.
pub fn open(
    at: &Location,
    refusal: &dyn Fn(&Location, stitch_diskfs::DiskError) -> anyhow::Error,
) -> anyhow::Result<(Opened, Superblock)> {
    match at {
        Location::Path(path) => {
            let sb = read_superblock(path, refusal)?;
            let block_size = block_size(&sb)?;
            let dev = FileDevice::open(
                path,
                OpenOptions {
                    block_size,
                    ..OpenOptions::default()
                },
            )
            .map_err(|e| opening(at, e))?;
            let bytes =
                std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
            let opened = Opened {
                dev: Arc::new(dev),
                bytes: Arc::new(bytes),
                nbd: None,
            };
            Ok((opened, sb))
        }
        Location::Nbd(uri) => {
            let opts = NbdOptions::from_env()?;
            // 1 KiB blocks until the superblock says its own.
            let mut dev = NbdDevice::open(
                uri,
                NbdOptions {
                    block_size: 1024,
                    ..opts
                },
            )
            .map_err(|e| opening(at, e))?;
            let mut head = vec![0u8; 2048];
            dev.read_bytes(0, &mut head)
                .with_context(|| format!("reading the superblock of {uri}"))?;
            let sb = decode_superblock(at, &head, refusal)?;
            dev.set_block_size(block_size(&sb)?)
                .with_context(|| format!("opening {uri}"))?;
            let dev = Arc::new(dev);
            let opened = Opened {
                dev: dev.clone(),
                bytes: dev.clone(),
                nbd: Some(dev),
            };
            Ok((opened, sb))
        }
    }
}

fn opening(at: &Location, e: DevError) -> anyhow::Error {
    match e {
        DevError::Locked { .. } => anyhow::anyhow!(
            "{at} is already mounted (or being checked) by another stitchfs process: \
             unmount it first"
        ),
        e @ DevError::Refused { .. } => anyhow::Error::new(e),
        e => anyhow::Error::new(e).context(format!("opening {at}")),
    }
}

fn block_size(sb: &Superblock) -> anyhow::Result<usize> {
    Ok(sb
        .block_size()
        .context("superblock without a block size")?
        .bytes() as usize)
}

/// The primary superblock of the image file at `image`.
pub fn read_superblock(
    image: &Path,
    refusal: &dyn Fn(&Location, stitch_diskfs::DiskError) -> anyhow::Error,
) -> anyhow::Result<Superblock> {
    let at = Location::from(image);
    let mut f =
        std::fs::File::open(image).with_context(|| format!("opening {}", image.display()))?;
    let mut buf = vec![0u8; 2048];
    f.read_exact(&mut buf)
        .with_context(|| format!("{}: too small to hold a superblock", image.display()))
        .with_context(|| not_ours(&at))?;
    decode_superblock(&at, &buf, refusal)
}

/// The primary superblock read again through an open image (after
/// `DiskFs::check_mountable`, before deciding on a repair).
pub fn superblock_of(at: &Location, bytes: &dyn ByteImage) -> anyhow::Result<Superblock> {
    let mut buf = vec![0u8; 2048];
    bytes
        .read_at(0, &mut buf)
        .with_context(|| format!("reading the superblock of {at}"))?;
    Superblock::decode(&buf[1024..]).with_context(|| not_ours(at))
}

fn not_ours(at: &Location) -> String {
    format!("{at} is not an ext2/ext3 image stitchfs can mount (make one with `stitchfs mkfs`)")
}

/// `head` is the image's first 2 KiB.
fn decode_superblock(
    at: &Location,
    head: &[u8],
    refusal: &dyn Fn(&Location, stitch_diskfs::DiskError) -> anyhow::Error,
) -> anyhow::Result<Superblock> {
    let ext2 = Superblock::decode_raw(&head[1024..]).is_some_and(|sb| sb.magic == EXT2_MAGIC);
    match Superblock::decode(&head[1024..]) {
        // An ext2 superblock with values that contradict each other, or a
        // feature stitchfs does not implement: said as such.
        Err(e) if ext2 => Err(refusal(at, e.into())),
        other => other.with_context(|| not_ours(at)),
    }
}
