//! Positioned reads of an image file, block by block or in runs.
//!
//! The checker reads every metadata block at most once and in increasing
//! block order (inode tables group by group, then indirect and directory
//! blocks sorted by number), so [`Image::read_sorted`] coalesces adjacent
//! blocks into one `pread` and a run never costs a seek per block.
//!
//! An image needing recovery is checked as if its journal were replayed:
//! [`Image::set_overlay`] lays the replayed blocks over every read. Writes
//! ([`Image::write_at`]) exist only for `--recover`, on an image opened for
//! writing.
//!
//! Invariant: reads past the end of the file are zero-filled, as a sparse
//! image reads; only an I/O error from the OS is an error. Every read sees
//! the overlay.

use crate::error::FsckError;
use std::collections::BTreeMap;
use std::sync::Arc;
use stitch_blockdev::{io_error, ByteImage, Location, NbdDevice, NbdOptions};
use stitch_format::BlockNo;

/// Largest single read, so that a run of many blocks has a bounded buffer.
const MAX_RUN_BYTES: usize = 1 << 20;

pub struct Image {
    file: Arc<dyn ByteImage>,
    len: u64,
    block_size: usize,
    /// Replayed blocks by number, in blocks of `overlay_bs` bytes.
    overlay: BTreeMap<BlockNo, Vec<u8>>,
    overlay_bs: u64,
}

impl Image {
    /// Opens the image at a path or an NBD URI read-only, or for writing
    /// too (`--recover`).
    pub fn open_at(at: &Location, write: bool) -> Result<Image, FsckError> {
        let open_err = |source| FsckError::Open {
            path: at.name(),
            source,
        };
        let file: Arc<dyn ByteImage> = match at {
            Location::Path(path) => Arc::new(
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(write)
                    .open(path)
                    .map_err(open_err)?,
            ),
            Location::Nbd(uri) => {
                let opts = NbdOptions {
                    read_only: !write,
                    ..NbdOptions::from_env().map_err(|e| open_err(io_error(e)))?
                };
                Arc::new(NbdDevice::open(uri, opts).map_err(|e| open_err(io_error(e)))?)
            }
        };
        Image::over(file).map_err(open_err)
    }

    /// The image behind `file`, which may be shared (a mount's NBD device
    /// checked before it is mounted).
    pub fn over(file: Arc<dyn ByteImage>) -> std::io::Result<Image> {
        let len = file.len()?;
        Ok(Image {
            file,
            len,
            block_size: 1024,
            overlay: BTreeMap::new(),
            overlay_bs: 1024,
        })
    }

    /// Makes every later read see `blocks` (whole blocks of the current
    /// block size) in place of what the file holds.
    pub fn set_overlay(&mut self, blocks: BTreeMap<BlockNo, Vec<u8>>) {
        assert!(blocks.values().all(|b| b.len() == self.block_size));
        self.overlay = blocks;
        self.overlay_bs = self.block_size as u64;
    }

    /// Writes `data` at byte `offset` (the image must be open for writing).
    pub fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<(), FsckError> {
        self.file
            .write_at(offset, data)
            .map_err(|source| FsckError::Write {
                block: offset / self.block_size as u64,
                len: data.len(),
                source,
            })?;
        self.len = self.len.max(offset + data.len() as u64);
        Ok(())
    }

    /// `fdatasync`: every write so far is durable.
    pub fn sync(&self) -> Result<(), FsckError> {
        self.file.sync().map_err(FsckError::Sync)
    }

    pub fn set_block_size(&mut self, bs: usize) {
        self.block_size = bs;
    }

    /// Reads `buf.len()` bytes at byte `offset`; zero past the end of file.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), FsckError> {
        buf.fill(0);
        let avail = self.len.saturating_sub(offset).min(buf.len() as u64) as usize;
        self.file
            .read_at(offset, &mut buf[..avail])
            .map_err(|source| FsckError::Read {
                block: offset / self.block_size as u64,
                len: buf.len(),
                source,
            })?;
        self.apply_overlay(offset, buf);
        Ok(())
    }

    /// Copies the overlay's bytes in `offset..offset + buf.len()` into `buf`.
    fn apply_overlay(&self, offset: u64, buf: &mut [u8]) {
        let bs = self.overlay_bs;
        let end = offset + buf.len() as u64;
        let blocks = BlockNo(offset / bs)..BlockNo(end.div_ceil(bs));
        for (&b, data) in self.overlay.range(blocks) {
            let start = b.0 * bs;
            let (from, to) = (start.max(offset), (start + bs).min(end));
            let dst = (from - offset) as usize..(to - offset) as usize;
            buf[dst].copy_from_slice(&data[(from - start) as usize..(to - start) as usize]);
        }
    }

    /// Reads `count` blocks starting at `first` into a fresh buffer.
    pub fn read_blocks(&self, first: u32, count: usize) -> Result<Vec<u8>, FsckError> {
        let mut buf = vec![0u8; count * self.block_size];
        self.read_at(u64::from(first) * self.block_size as u64, &mut buf)?;
        Ok(buf)
    }

    /// Calls `f(index, block_bytes)` for every block in `blocks` (sorted by
    /// block number; duplicates allowed), reading adjacent blocks together.
    pub fn read_sorted<F>(&self, blocks: &[u32], mut f: F) -> Result<(), FsckError>
    where
        F: FnMut(usize, &[u8]),
    {
        let bs = self.block_size;
        let max_run = (MAX_RUN_BYTES / bs).max(1) as u32;
        let mut i = 0;
        while i < blocks.len() {
            let first = blocks[i];
            let mut j = i;
            while j + 1 < blocks.len()
                && blocks[j + 1] <= blocks[j].saturating_add(1)
                && blocks[j + 1] - first < max_run
            {
                j += 1;
            }
            let count = (blocks[j] - first + 1) as usize;
            let buf = self.read_blocks(first, count)?;
            for (k, &b) in blocks.iter().enumerate().take(j + 1).skip(i) {
                let off = (b - first) as usize * bs;
                f(k, &buf[off..off + bs]);
            }
            i = j + 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads of any offset and length see the overlay's bytes exactly
    /// where its blocks lie, and the file's elsewhere.
    #[test]
    fn overlay_covers_exactly_its_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        std::fs::write(&path, vec![1u8; 4 * 4096]).unwrap();
        let mut img = Image::open_at(&Location::from(path.as_path()), false).unwrap();
        img.set_block_size(4096);
        let mut over = BTreeMap::new();
        let (zero, two) = (BlockNo(0), BlockNo(2));
        over.insert(
            zero,
            (0..4096).map(|i| (i % 251) as u8).collect::<Vec<u8>>(),
        );
        over.insert(two, vec![3u8; 4096]);
        img.set_overlay(over.clone());
        let mut sb = vec![0u8; 1024];
        img.read_at(1024, &mut sb).unwrap();
        assert_eq!(sb, over[&zero][1024..2048]);
        let all = img.read_blocks(0, 4).unwrap();
        assert_eq!(all[..4096], over[&zero][..]);
        assert!(all[4096..8192].iter().all(|&b| b == 1));
        assert!(all[8192..12288].iter().all(|&b| b == 3));
        assert!(all[12288..].iter().all(|&b| b == 1));
        let mut straddle = vec![0u8; 8];
        img.read_at(3 * 4096 - 4, &mut straddle).unwrap();
        assert_eq!(straddle, [3, 3, 3, 3, 1, 1, 1, 1]);
        assert_eq!(std::fs::read(&path).unwrap(), vec![1u8; 4 * 4096]);
    }
}
