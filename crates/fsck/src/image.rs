//! Positioned reads of an image file, block by block or in runs.
//!
//! The checker reads every metadata block at most once and in increasing
//! block order (inode tables group by group, then indirect and directory
//! blocks sorted by number), so [`Image::read_sorted`] coalesces adjacent
//! blocks into one `pread` and a run never costs a seek per block.
//!
//! Invariant: reads past the end of the file are zero-filled, as a sparse
//! image reads; only an I/O error from the OS is an error.

use crate::error::FsckError;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Largest single read, so that a run of many blocks has a bounded buffer.
const MAX_RUN_BYTES: usize = 1 << 20;

pub struct Image {
    file: File,
    len: u64,
    block_size: usize,
}

impl Image {
    pub fn open(path: &Path) -> Result<Image, FsckError> {
        let open_err = |source| FsckError::Open {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(open_err)?;
        let len = file.metadata().map_err(open_err)?.len();
        Ok(Image {
            file,
            len,
            block_size: 1024,
        })
    }

    pub fn set_block_size(&mut self, bs: usize) {
        self.block_size = bs;
    }

    /// Reads `buf.len()` bytes at byte `offset`; zero past the end of file.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), FsckError> {
        buf.fill(0);
        let avail = self.len.saturating_sub(offset).min(buf.len() as u64) as usize;
        self.file
            .read_exact_at(&mut buf[..avail], offset)
            .map_err(|source| FsckError::Read {
                block: offset / self.block_size as u64,
                len: buf.len(),
                source,
            })
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
