//! The device or image file mkfs writes to: opening it, finding its size,
//! detecting an existing file system, and writing blocks.
//!
//! A regular file is first truncated to zero and extended to its new size,
//! so every block mkfs does not write is a hole that reads as zeros; that is
//! what makes a 64 GiB image without a journal take a fraction of a second.
//! A block device has no such guarantee, so the caller zeroes the ranges that
//! must read as zero (inode tables, journal) with [`Target::zero`]; on a file
//! it zeroes the ones it wants the host to allocate now.
//!
//! An export on an NBD server is a device too. It is trimmed whole first
//! when the server offers TRIM (as mke2fs discards a device), and zeroed
//! with NBD's WRITE_ZEROES where the server offers it, so that zeros are
//! not sent over the network.

use crate::MkfsError;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use stitch_blockdev::{BlockDevice, Location, NbdDevice, NbdOptions};
use stitch_format::superblock::{EXT2_MAGIC, SUPERBLOCK_OFFSET};
use stitch_format::BlockNo;

enum Backend {
    File(File),
    Nbd(Box<NbdDevice>),
}

pub struct Target {
    backend: Backend,
    path: PathBuf,
    pub is_device: bool,
    pub bytes: u64,
}

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> MkfsError + 'a {
    move |source| MkfsError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}

fn dev_io(e: stitch_blockdev::DevError) -> std::io::Error {
    stitch_blockdev::io_error(e)
}

impl Target {
    /// Opens `at`: a path (made if missing; `size` is then required) or
    /// an NBD export, whose size is the default.
    pub fn open_at(at: &Location, size: Option<u64>) -> Result<Target, MkfsError> {
        let uri = match at {
            Location::Path(path) => return Target::open(path, size),
            Location::Nbd(uri) => uri,
        };
        let path = at.name();
        let opts = NbdOptions::from_env().map_err(|e| io(&path, "open")(dev_io(e)))?;
        let dev = NbdDevice::open(uri, opts).map_err(|e| io(&path, "open")(dev_io(e)))?;
        let current = dev.len_bytes();
        let bytes = match size {
            Some(s) if s > current => {
                return Err(MkfsError::SizeBeyondDevice {
                    size: s,
                    device: current,
                })
            }
            Some(s) => s,
            None => current,
        };
        Ok(Target {
            backend: Backend::Nbd(Box::new(dev)),
            path,
            is_device: true,
            bytes,
        })
    }

    /// Opens (or creates) `path`; `size` is required for a new file.
    pub fn open(path: &Path, size: Option<u64>) -> Result<Target, MkfsError> {
        let meta = std::fs::metadata(path).ok();
        if meta.is_none() && size.is_none() {
            return Err(MkfsError::NoSize {
                path: path.to_path_buf(),
            });
        }
        let is_device = meta.is_some_and(|m| m.file_type().is_block_device());
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(!is_device)
            .truncate(false)
            .open(path)
            .map_err(io(path, "open"))?;
        let current = file.seek(SeekFrom::End(0)).map_err(io(path, "size"))?;
        let bytes = match (is_device, size) {
            (true, Some(s)) if s > current => {
                return Err(MkfsError::SizeBeyondDevice {
                    size: s,
                    device: current,
                })
            }
            (_, Some(s)) => s,
            (_, None) if current > 0 => current,
            (_, None) => {
                return Err(MkfsError::NoSize {
                    path: path.to_path_buf(),
                })
            }
        };
        Ok(Target {
            backend: Backend::File(file),
            path: path.to_path_buf(),
            is_device,
            bytes,
        })
    }

    /// Is there an ext2/3/4 superblock at the usual place?
    pub fn has_ext2_magic(&self) -> Result<bool, MkfsError> {
        let mut magic = [0u8; 2];
        let at = SUPERBLOCK_OFFSET + 0x38;
        let read = match &self.backend {
            Backend::File(f) => f.read_exact_at(&mut magic, at),
            Backend::Nbd(d) => d.read_bytes(at, &mut magic).map_err(dev_io),
        };
        match read {
            Ok(()) => Ok(u16::from_le_bytes(magic) == EXT2_MAGIC),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(io(&self.path, "read superblock")(e)),
        }
    }

    /// Makes a regular file all holes at its new size; trims an NBD
    /// export whose server offers it.
    pub fn reset(&mut self) -> Result<(), MkfsError> {
        match &self.backend {
            Backend::File(f) if !self.is_device => {
                f.set_len(0).map_err(io(&self.path, "truncate"))?;
                f.set_len(self.bytes).map_err(io(&self.path, "extend"))?;
            }
            Backend::File(_) => {}
            Backend::Nbd(d) => {
                d.trim_all()
                    .map_err(|e| io(&self.path, "trim")(dev_io(e)))?;
            }
        }
        Ok(())
    }

    pub fn write_block(
        &self,
        block: BlockNo,
        data: &[u8],
        block_size: u32,
    ) -> Result<(), MkfsError> {
        let off = block.0 * u64::from(block_size);
        match &self.backend {
            Backend::File(f) => f.write_all_at(data, off),
            Backend::Nbd(d) => d.write_bytes(off, data).map_err(dev_io),
        }
        .map_err(io(&self.path, "write"))
    }

    /// Writes zeros over blocks `range`.
    pub fn zero(&self, range: std::ops::Range<BlockNo>, block_size: u32) -> Result<(), MkfsError> {
        const CHUNK_BLOCKS: u64 = 256;
        let bs = u64::from(block_size);
        if let Backend::Nbd(d) = &self.backend {
            let (off, len) = (range.start.0 * bs, range.end.since(range.start) * bs);
            if d.zero_bytes(off, len)
                .map_err(|e| io(&self.path, "zero")(dev_io(e)))?
            {
                return Ok(());
            }
        }
        let zeros = vec![0u8; (CHUNK_BLOCKS * bs) as usize];
        let mut b = range.start;
        while b < range.end {
            let n = range.end.since(b).min(CHUNK_BLOCKS);
            self.write_block(b, &zeros[..(n * bs) as usize], block_size)?;
            b = b.plus(n);
        }
        Ok(())
    }

    /// The durability point of mkfs: every block above is on the device.
    pub fn sync(&self) -> Result<(), MkfsError> {
        match &self.backend {
            Backend::File(f) => f.sync_all(),
            Backend::Nbd(d) => d.flush().map_err(dev_io),
        }
        .map_err(io(&self.path, "fsync"))
    }
}
