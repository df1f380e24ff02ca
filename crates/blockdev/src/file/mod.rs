//! [`FileDevice`]: a stitchfs image in a regular file, or a Linux block
//! device.
//!
//! - Writes: a batch is cut into runs of consecutive block numbers (the patch
//!   cache writes n, n+1, ...) and each run is one `pwritev`. With `direct`
//!   (`O_DIRECT`) a run is first copied into one page-aligned buffer.
//! - Streaming: without `direct`, a long run (at least [`STREAM_RUN`] blocks)
//!   whose buffers are all page-aligned goes through a second descriptor
//!   opened `O_DIRECT`, straight from those buffers to the device, instead of
//!   being copied into the page cache and written back at the next flush.
//!   Short writes (metadata, commits) stay buffered: they would wait for the
//!   device. Linux keeps the two coherent for a regular file or block device
//!   (a direct write first writes back and then drops the cached pages it
//!   covers), and the flush's `fdatasync` makes both durable. Where the file
//!   system refuses `O_DIRECT` (tmpfs), or a direct write fails with
//!   `EINVAL`, streaming is off and the run is written buffered.
//! - Flush: `fdatasync`, which on Linux also flushes the disk's volatile
//!   write cache for files and block devices.
//! - Failure: a failed write or flush latches ([`crate::latch`]); nothing is
//!   retried and every later call fails. A failed read is reported but does
//!   not latch: it loses no accepted write.
//! - Locking: read-write opens take `flock(LOCK_EX | LOCK_NB)`, read-only
//!   opens take `flock(LOCK_SH | LOCK_NB)`. So a second mount is refused, and
//!   a read-only tool (fsck, debugging) is refused while the image is mounted,
//!   and a mount is refused while such a tool reads it: a reader never sees
//!   an image that changes under it. The lock is advisory and tied to the
//!   path's inode: another device node for the same disk is not covered.
//!
//! Invariants: `geometry` describes a prefix of the file (a trailing partial
//! block is ignored, as `mke2fs` does); when `direct`, every transfer goes
//! through an `aligned::AlignedBuf`.

mod aligned;
mod sys;

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::latch::Latch;
use crate::{BlockDevice, BlockNo, BlockWrite, DevError, Geometry};
use aligned::AlignedBuf;
use sys::LockKind;

/// How to open a [`FileDevice`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OpenOptions {
    /// Open `O_RDONLY` and take a shared lock; writes fail with `ReadOnly`.
    pub read_only: bool,
    /// Bypass the page cache with `O_DIRECT`.
    pub direct: bool,
    /// Bytes per block; must be a multiple of 512 when `direct`.
    pub block_size: usize,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read_only: false,
            direct: false,
            block_size: 4096,
        }
    }
}

/// Counters of a [`FileDevice`]; `write_calls` shows coalescing at work.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FileStats {
    /// Write system calls issued (one per run of consecutive blocks).
    pub write_calls: u64,
    /// Blocks written.
    pub blocks_written: u64,
    /// Successful `fdatasync` calls.
    pub flushes: u64,
    /// Runs written through the `O_DIRECT` descriptor (streaming).
    pub streamed_runs: u64,
}

/// Blocks in a run worth writing around the page cache (256 KiB of 4 KiB
/// blocks). On the project's VM copying 100 MB into the page cache took a
/// quarter of the FUSE server's CPU in a large write; direct, that write +
/// fsync ran faster by a median 1.07x in journal mode and 1.3x in soft
/// updates (three pairs each).
pub const STREAM_RUN: usize = 64;

/// Buffer address and length alignment a streamed run needs: a page, which
/// covers devices with 512-byte and 4 KiB logical blocks.
const STREAM_ALIGN: usize = 4096;

/// An image file or block device.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    /// The same file opened `O_DIRECT` for long runs; `None` if the file
    /// system refused, or `direct` already is.
    stream: Option<File>,
    /// Cleared by a direct write failing with `EINVAL`.
    stream_ok: AtomicBool,
    streamed_runs: AtomicU64,
    path: PathBuf,
    geometry: Geometry,
    opts: OpenOptions,
    latch: Latch,
    write_calls: AtomicU64,
    blocks_written: AtomicU64,
    flushes: AtomicU64,
}

impl FileDevice {
    /// Opens an existing image or block device and locks it.
    pub fn open(path: impl AsRef<Path>, opts: OpenOptions) -> Result<Self, DevError> {
        let path = path.as_ref();
        if opts.block_size == 0 || (opts.direct && !opts.block_size.is_multiple_of(512)) {
            return Err(DevError::BadGeometry {
                reason: format!(
                    "block size {} (O_DIRECT needs a multiple of 512)",
                    opts.block_size
                ),
            });
        }
        let file =
            open_file(path, opts).map_err(|e| io_err(format!("open {}", path.display()), e))?;
        lock(&file, path, opts.read_only)?;
        let size =
            sys::size_of(&file).map_err(|e| io_err(format!("size of {}", path.display()), e))?;
        let geometry = Geometry::new(opts.block_size, size / opts.block_size as u64)?;
        if geometry.num_blocks() == 0 {
            return Err(DevError::BadGeometry {
                reason: format!("{} holds {size} bytes, less than one block", path.display()),
            });
        }
        let stream = (!opts.read_only && !opts.direct)
            .then(|| {
                open_file(
                    path,
                    OpenOptions {
                        direct: true,
                        ..opts
                    },
                )
                .ok()
            })
            .flatten();
        Ok(FileDevice {
            file,
            stream,
            stream_ok: AtomicBool::new(true),
            streamed_runs: AtomicU64::new(0),
            path: path.to_path_buf(),
            geometry,
            opts,
            latch: Latch::new(),
            write_calls: AtomicU64::new(0),
            blocks_written: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        })
    }

    /// Creates a new sparse image of `size_bytes` (a whole number of blocks)
    /// and opens it read-write. Refuses to overwrite an existing file: an
    /// image is precious and deleting one should be an explicit act.
    pub fn create(
        path: impl AsRef<Path>,
        size_bytes: u64,
        block_size: usize,
    ) -> Result<Self, DevError> {
        let path = path.as_ref();
        let geometry = Geometry::from_len(block_size, size_bytes)?;
        if geometry.num_blocks() == 0 {
            return Err(DevError::BadGeometry {
                reason: "an image needs at least one block".into(),
            });
        }
        let what = || format!("create {}", path.display());
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| io_err(what(), e))?;
        // set_len extends with a hole: the image is sparse until written.
        file.set_len(size_bytes).map_err(|e| io_err(what(), e))?;
        file.sync_all().map_err(|e| io_err(what(), e))?;
        drop(file);
        FileDevice::open(
            path,
            OpenOptions {
                block_size,
                ..OpenOptions::default()
            },
        )
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn options(&self) -> OpenOptions {
        self.opts
    }

    pub fn stats(&self) -> FileStats {
        FileStats {
            write_calls: self.write_calls.load(Ordering::Relaxed),
            blocks_written: self.blocks_written.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            streamed_runs: self.streamed_runs.load(Ordering::Relaxed),
        }
    }

    /// The first failure, if the device has latched.
    pub fn failure(&self) -> Option<String> {
        self.latch.first()
    }

    /// One run of consecutive blocks as one system call.
    fn write_run(&self, run: &[BlockWrite<'_>]) -> Result<(), DevError> {
        let offset = self.geometry.offset(run[0].block);
        let result = if self.opts.direct {
            let buf = self.gather_aligned(run)?;
            sys::pwritev_all(&self.file, &[&buf], offset)
        } else {
            let bufs: Vec<&[u8]> = run.iter().map(|w| w.data).collect();
            match self.streamable(&bufs) {
                Some(stream) => match sys::pwritev_all(stream, &bufs, offset) {
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        self.stream_ok.store(false, Ordering::Relaxed);
                        sys::pwritev_all(&self.file, &bufs, offset)
                    }
                    done => {
                        if done.is_ok() {
                            self.streamed_runs.fetch_add(1, Ordering::Relaxed);
                        }
                        done
                    }
                },
                None => sys::pwritev_all(&self.file, &bufs, offset),
            }
        };
        self.write_calls.fetch_add(1, Ordering::Relaxed);
        result.map_err(|e| {
            let what = format!(
                "write of {} at {} of {}",
                run.len(),
                run[0].block,
                self.path.display()
            );
            io_err(what, e)
        })
    }

    /// The `O_DIRECT` descriptor, if this run may stream through it.
    fn streamable(&self, bufs: &[&[u8]]) -> Option<&File> {
        let aligned = |b: &&[u8]| {
            (b.as_ptr() as usize).is_multiple_of(STREAM_ALIGN)
                && b.len().is_multiple_of(STREAM_ALIGN)
        };
        self.stream
            .as_ref()
            .filter(|_| bufs.len() >= STREAM_RUN && self.stream_ok.load(Ordering::Relaxed))
            .filter(|_| bufs.iter().all(aligned))
    }

    fn gather_aligned(&self, run: &[BlockWrite<'_>]) -> Result<AlignedBuf, DevError> {
        let bs = self.geometry.block_size();
        let mut buf = self.aligned(bs * run.len())?;
        for (chunk, w) in buf.chunks_exact_mut(bs).zip(run) {
            chunk.copy_from_slice(w.data);
        }
        Ok(buf)
    }

    fn aligned(&self, len: usize) -> Result<AlignedBuf, DevError> {
        AlignedBuf::zeroed(len).ok_or_else(|| {
            io_err(
                format!("aligned buffer of {len} bytes"),
                io::ErrorKind::OutOfMemory.into(),
            )
        })
    }

    fn read_at(&self, block: BlockNo, buf: &mut [u8]) -> io::Result<()> {
        let offset = self.geometry.offset(block);
        if !self.opts.direct {
            return self.file.read_exact_at(buf, offset);
        }
        let mut aligned = AlignedBuf::zeroed(buf.len()).ok_or(io::ErrorKind::OutOfMemory)?;
        self.file.read_exact_at(&mut aligned, offset)?;
        buf.copy_from_slice(&aligned);
        Ok(())
    }
}

impl BlockDevice for FileDevice {
    fn block_size(&self) -> usize {
        self.geometry.block_size()
    }

    fn num_blocks(&self) -> u64 {
        self.geometry.num_blocks()
    }

    fn read(&self, block: BlockNo, buf: &mut [u8]) -> Result<(), DevError> {
        self.latch.check()?;
        self.geometry.check(block, buf.len())?;
        self.read_at(block, buf)
            .map_err(|e| io_err(format!("read of {block} of {}", self.path.display()), e))
    }

    fn write_batch(&self, writes: &[BlockWrite<'_>]) -> Result<(), DevError> {
        self.latch.check()?;
        if self.opts.read_only {
            return Err(DevError::ReadOnly {
                path: self.path.display().to_string(),
            });
        }
        self.geometry.check_batch(writes)?;
        for run in writes.chunk_by(|a, b| a.block.0.checked_add(1) == Some(b.block.0)) {
            self.write_run(run).map_err(|e| self.latch.trip(e))?;
            self.blocks_written
                .fetch_add(run.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DevError> {
        self.latch.check()?;
        if self.opts.read_only {
            return Ok(()); // nothing was written, so nothing can be lost
        }
        self.file.sync_data().map_err(|e| {
            self.latch
                .trip(io_err(format!("fdatasync of {}", self.path.display()), e))
        })?;
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn open_file(path: &Path, opts: OpenOptions) -> io::Result<File> {
    let mut flags = libc::O_CLOEXEC;
    if opts.direct {
        flags |= libc::O_DIRECT;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(!opts.read_only)
        .custom_flags(flags)
        .open(path)
}

fn lock(file: &File, path: &Path, read_only: bool) -> Result<(), DevError> {
    let kind = if read_only {
        LockKind::Shared
    } else {
        LockKind::Exclusive
    };
    match sys::try_lock(file, kind) {
        Ok(true) => Ok(()),
        Ok(false) => Err(DevError::Locked {
            path: path.display().to_string(),
        }),
        Err(e) => Err(io_err(format!("flock {}", path.display()), e)),
    }
}

/// The size in bytes of a regular file or a block device.
pub(crate) fn size_of(file: &File) -> io::Result<u64> {
    sys::size_of(file)
}

/// Waits until no read-write open (a mount) holds the image `file` is
/// open on, by the locking rule above: the lock a mount keeps until its
/// process exits. Calls `on_wait` first if it has to wait. The shared lock
/// taken goes with `file`.
pub fn wait_for_writer(file: &File, on_wait: impl FnOnce()) -> io::Result<()> {
    if !sys::try_lock(file, LockKind::Shared)? {
        on_wait();
        sys::lock(file, LockKind::Shared)?;
    }
    Ok(())
}

fn io_err(what: String, source: io::Error) -> DevError {
    DevError::Io { what, source }
}

#[cfg(test)]
mod tests;
