//! [`NbdDevice`]: a stitchfs image on a Network Block Device server
//! (qemu-nbd, nbdkit, nbd-server, rbd-nbd), reached through libnbd.
//!
//! The device keeps the block layer's promise over the network: a write is
//! in flight until a flush returns, and the first failed write or flush
//! latches. NBD's `FLUSH` is the device flush, so a server that cannot flush
//! is refused at open for writing, as is one that exports read-only.
//!
//! - Connecting: any URI libnbd takes (`nbd://HOST[:PORT]/EXPORT`,
//!   `nbd+unix:///EXPORT?socket=PATH`, `nbds://` for TLS, ...); the
//!   handshake must finish within the timeout.
//! - Writes: a batch is cut into runs of consecutive blocks, each run into
//!   requests of at most [`MAX_REQUEST`] bytes, and up to `depth` requests
//!   are in flight at once (the protocol lets a client send before earlier
//!   replies arrive), so a long write is not one round trip per block.
//! - FUA saves a flush: a batch of one block written while nothing else
//!   is unflushed is held (in memory, like any write still in flight) until
//!   the next call. If that call is a flush, the block goes with NBD's FUA
//!   flag, which makes it durable before the reply, and the flush itself is
//!   not sent: one round trip where there were two (a journal's commit
//!   block, a lone fsynced block). Any other call sends it first as a plain
//!   write. Reads see a held block.
//! - Failure: a server that answers a write or flush with an error, goes
//!   away, or stays silent for the timeout while commands wait, latches the
//!   device; a lost connection is closed and never reopened, since a new
//!   connection could not know what the old one had in flight. A read the
//!   server answers with an error is reported without latching, as for an
//!   image file; a read that loses the connection latches.
//! - TRIM: [`BlockDevice::discard`] trims where the server offers it
//!   (diskfs discards every free block at a clean unmount); a server's
//!   error to a trim is counted, not latched, since it loses nothing.
//! - Locking: there is none across the network; a server that takes one
//!   client at a time (qemu-nbd's default) keeps a second mount out.

mod conn;
mod ffi;

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

pub use conn::Caps;
use conn::{Conn, ConnError};

use crate::latch::Latch;
use crate::{BlockDevice, BlockNo, BlockWrite, DevError, Geometry};

/// Largest single NBD request sent, in bytes; servers accept at least
/// 32 MiB, and 1 MiB keeps each request's buffer small.
pub const MAX_REQUEST: usize = 1 << 20;

/// Default seconds the server may stay silent while commands wait.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
/// Default requests in flight at once.
pub const DEFAULT_DEPTH: usize = 16;

/// How to open an [`NbdDevice`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct NbdOptions {
    /// Writes fail with `ReadOnly`; a read-only export is accepted.
    pub read_only: bool,
    /// Bytes per block.
    pub block_size: usize,
    /// How long the server may answer nothing while commands wait (and
    /// how long the handshake may take) before the connection counts as
    /// lost.
    pub timeout: Duration,
    /// Requests in flight at once (1: each waits for the one before).
    pub depth: usize,
}

impl Default for NbdOptions {
    fn default() -> Self {
        NbdOptions {
            read_only: false,
            block_size: 4096,
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
            depth: DEFAULT_DEPTH,
        }
    }
}

impl NbdOptions {
    /// The defaults, with `STITCHFS_NBD_TIMEOUT` (seconds, may be
    /// fractional) and `STITCHFS_NBD_DEPTH` (requests in flight) from the
    /// environment when set: the one place every command (mkfs, fsck,
    /// mount, bench) takes them from.
    pub fn from_env() -> Result<NbdOptions, DevError> {
        let mut o = NbdOptions::default();
        if let Ok(v) = std::env::var("STITCHFS_NBD_TIMEOUT") {
            o.timeout = v
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| bad_env("STITCHFS_NBD_TIMEOUT", &v, "seconds above 0"))?;
        }
        if let Ok(v) = std::env::var("STITCHFS_NBD_DEPTH") {
            o.depth = v
                .parse::<usize>()
                .ok()
                .filter(|d| (1..=1024).contains(d))
                .ok_or_else(|| bad_env("STITCHFS_NBD_DEPTH", &v, "a count from 1 to 1024"))?;
        }
        Ok(o)
    }
}

fn bad_env(name: &str, value: &str, want: &str) -> DevError {
    DevError::Refused {
        target: "the environment".to_string(),
        reason: format!("{name}={value:?} is not {want}"),
    }
}

/// Counters of an [`NbdDevice`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct NbdStats {
    /// NBD write requests sent (FUA ones included).
    pub write_requests: u64,
    pub blocks_written: u64,
    /// NBD flush requests sent.
    pub flushes: u64,
    /// Flushes answered by one FUA write instead.
    pub fua_writes: u64,
    pub reads: u64,
    /// Blocks trimmed ([`BlockDevice::discard`]).
    pub trimmed_blocks: u64,
    /// Trims the server answered with an error (nothing is lost by one).
    pub trim_failures: u64,
}

/// What the device holds between calls.
#[derive(Default)]
struct Pending {
    /// Writes sent since the last flush (or FUA write) that made them
    /// durable. Every call that sends anything holds the lock around this
    /// for its whole length, so a flush never clears it for a write still
    /// on its way.
    unflushed: bool,
    /// A lone block not yet sent (see the module's FUA note).
    held: Option<(BlockNo, Vec<u8>)>,
}

/// An image on an NBD server.
pub struct NbdDevice {
    conn: Conn,
    uri: String,
    geometry: Geometry,
    opts: NbdOptions,
    latch: Latch,
    pending: Mutex<Pending>,
    write_requests: AtomicU64,
    blocks_written: AtomicU64,
    flushes: AtomicU64,
    fua_writes: AtomicU64,
    reads: AtomicU64,
    trimmed_blocks: AtomicU64,
    trim_failures: AtomicU64,
}

impl std::fmt::Debug for NbdDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdDevice")
            .field("uri", &self.uri)
            .field("geometry", &self.geometry)
            .finish_non_exhaustive()
    }
}

impl NbdDevice {
    /// Connects to `uri` and checks that the export can hold an image
    /// opened as `opts` says.
    pub fn open(uri: &str, opts: NbdOptions) -> Result<NbdDevice, DevError> {
        let refused = |reason: String| DevError::Refused {
            target: uri.to_string(),
            reason,
        };
        let conn =
            Conn::connect(uri, opts.timeout, opts.depth).map_err(|e| refused(e.to_string()))?;
        let caps = conn.caps();
        if !opts.read_only && caps.read_only {
            return Err(refused("the server exports it read-only".into()));
        }
        if !opts.read_only && !caps.flush {
            return Err(refused(
                "the server does not support FLUSH, so no write could be made durable".into(),
            ));
        }
        if opts.block_size == 0 || !(opts.block_size as u64).is_multiple_of(caps.min_block) {
            return Err(refused(format!(
                "the server's smallest request is {} bytes, which does not divide the block \
                 size {}",
                caps.min_block, opts.block_size
            )));
        }
        let geometry = Geometry::new(opts.block_size, caps.size / opts.block_size as u64)?;
        Ok(NbdDevice {
            conn,
            uri: uri.to_string(),
            geometry,
            opts,
            latch: Latch::new(),
            pending: Mutex::new(Pending::default()),
            write_requests: AtomicU64::new(0),
            blocks_written: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            fua_writes: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            trimmed_blocks: AtomicU64::new(0),
            trim_failures: AtomicU64::new(0),
        })
    }

    /// Addresses the export in blocks of `block_size` from now on (a
    /// tool that learns the image's block size from its superblock).
    pub fn set_block_size(&mut self, block_size: usize) -> Result<(), DevError> {
        let min = self.conn.caps().min_block;
        if block_size == 0 || !(block_size as u64).is_multiple_of(min) {
            return Err(DevError::Refused {
                target: self.uri.clone(),
                reason: format!(
                    "the server's smallest request is {min} bytes, which does not divide the \
                     block size {block_size}"
                ),
            });
        }
        let mut p = self.pending_lock();
        self.send_held(&mut p)?;
        drop(p);
        self.geometry = Geometry::new(block_size, self.len_bytes() / block_size as u64)?;
        self.opts.block_size = block_size;
        Ok(())
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// What the server offers.
    pub fn caps(&self) -> Caps {
        self.conn.caps()
    }

    /// The export's size in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.conn.caps().size
    }

    pub fn stats(&self) -> NbdStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        NbdStats {
            write_requests: get(&self.write_requests),
            blocks_written: get(&self.blocks_written),
            flushes: get(&self.flushes),
            fua_writes: get(&self.fua_writes),
            reads: get(&self.reads),
            trimmed_blocks: get(&self.trimmed_blocks),
            trim_failures: get(&self.trim_failures),
        }
    }

    /// The first failure, if the device has latched.
    pub fn failure(&self) -> Option<String> {
        self.latch.first()
    }

    /// Reads `buf.len()` bytes at byte `off`, for tools that address the
    /// image in bytes (mkfs, fsck); not through the block checks.
    pub fn read_bytes(&self, off: u64, buf: &mut [u8]) -> Result<(), DevError> {
        self.latch.check()?;
        let mut p = self.pending_lock();
        self.send_held(&mut p)?;
        self.conn
            .read(off, buf)
            .map_err(|e| self.failed(format!("read of {} bytes at {off}", buf.len()), e, false))
    }

    /// Writes bytes at byte `off`, in flight until [`BlockDevice::flush`].
    pub fn write_bytes(&self, off: u64, data: &[u8]) -> Result<(), DevError> {
        self.writable()?;
        let mut p = self.pending_lock();
        self.send_held(&mut p)?;
        let reqs: Vec<(u64, &[u8])> = data
            .chunks(MAX_REQUEST)
            .enumerate()
            .map(|(i, c)| (off + (i * MAX_REQUEST) as u64, c))
            .collect();
        self.send(
            &mut p,
            &reqs,
            data.len().div_ceil(self.opts.block_size) as u64,
        )
    }

    /// Makes `len` bytes at `off` read as zeros without sending them, if
    /// the server supports it (`Ok(false)` if not: write zeros instead).
    pub fn zero_bytes(&self, off: u64, len: u64) -> Result<bool, DevError> {
        if !self.conn.caps().zero {
            return Ok(false);
        }
        self.writable()?;
        let mut p = self.pending_lock();
        self.send_held(&mut p)?;
        p.unflushed = true;
        self.conn
            .zero(off, len)
            .map_err(|e| self.failed(format!("zeroing {len} bytes at {off}"), e, true))?;
        Ok(true)
    }

    /// Tells the server the whole export is unused, if it supports TRIM
    /// (`Ok(false)` if not). What trimmed blocks read afterwards is up to
    /// the server.
    pub fn trim_all(&self) -> Result<bool, DevError> {
        if !self.conn.caps().trim {
            return Ok(false);
        }
        self.writable()?;
        let mut p = self.pending_lock();
        self.send_held(&mut p)?;
        p.unflushed = true;
        let size = self.len_bytes();
        self.conn
            .trim(0, size)
            .map_err(|e| self.failed(format!("trim of {size} bytes"), e, true))?;
        Ok(true)
    }

    fn writable(&self) -> Result<(), DevError> {
        self.latch.check()?;
        if self.opts.read_only {
            return Err(DevError::ReadOnly {
                path: self.uri.clone(),
            });
        }
        Ok(())
    }

    fn pending_lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends a held block as a plain write.
    fn send_held(&self, p: &mut Pending) -> Result<(), DevError> {
        match p.held.take() {
            Some((block, data)) => self.send(p, &[(self.geometry.offset(block), &data)], 1),
            None => Ok(()),
        }
    }

    /// Sends writes; the caller holds `p` (the pending lock) throughout,
    /// so no flush runs between marking them unflushed and sending them.
    fn send(&self, p: &mut Pending, reqs: &[(u64, &[u8])], blocks: u64) -> Result<(), DevError> {
        p.unflushed = true;
        self.conn.write(reqs, false).map_err(|e| {
            self.failed(
                format!("write of {blocks} block(s) in {} request(s)", reqs.len()),
                e,
                true,
            )
        })?;
        self.write_requests
            .fetch_add(reqs.len() as u64, Ordering::Relaxed);
        self.blocks_written.fetch_add(blocks, Ordering::Relaxed);
        Ok(())
    }

    /// The error of a failed call, latched if it was a write or flush or
    /// the connection is gone.
    fn failed(&self, what: String, e: ConnError, latch: bool) -> DevError {
        let (kind, errno) = match &e {
            ConnError::Command { errno, .. } => (None, *errno),
            ConnError::Lost(_) | ConnError::Refused(_) => {
                (Some(io::ErrorKind::ConnectionAborted), 0)
            }
        };
        let source = match kind {
            Some(k) => io::Error::new(k, e.to_string()),
            None if errno > 0 => io::Error::new(
                io::Error::from_raw_os_error(errno).kind(),
                format!("{e} ({})", io::Error::from_raw_os_error(errno)),
            ),
            None => io::Error::other(e.to_string()),
        };
        let err = DevError::Io {
            what: format!("{what} on {}", self.uri),
            source,
        };
        if latch || self.conn.is_lost() {
            self.latch.trip(err)
        } else {
            err
        }
    }
}

impl BlockDevice for NbdDevice {
    fn block_size(&self) -> usize {
        self.geometry.block_size()
    }

    fn num_blocks(&self) -> u64 {
        self.geometry.num_blocks()
    }

    fn read(&self, block: BlockNo, buf: &mut [u8]) -> Result<(), DevError> {
        self.latch.check()?;
        self.geometry.check(block, buf.len())?;
        // Under the pending lock, so no write sent meanwhile can race it.
        let p = self.pending_lock();
        if let Some((b, data)) = &p.held {
            if *b == block {
                buf.copy_from_slice(data);
                return Ok(());
            }
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        let off = self.geometry.offset(block);
        self.conn
            .read(off, buf)
            .map_err(|e| self.failed(format!("read of {block}"), e, false))
    }

    fn write_batch(&self, writes: &[BlockWrite<'_>]) -> Result<(), DevError> {
        self.writable()?;
        self.geometry.check_batch(writes)?;
        let mut p = self.pending_lock();
        self.send_held(&mut p)?;
        if let [one] = writes {
            if !p.unflushed && p.held.is_none() && self.conn.caps().fua {
                p.held = Some((one.block, one.data.to_vec()));
                return Ok(());
            }
        }
        let bs = self.geometry.block_size();
        let per_req = (MAX_REQUEST / bs).max(1);
        let mut gathered: Vec<(u64, Vec<u8>)> = Vec::new();
        for run in writes.chunk_by(|a, b| a.block.0.checked_add(1) == Some(b.block.0)) {
            for part in run.chunks(per_req) {
                let mut buf = Vec::with_capacity(part.len() * bs);
                for w in part {
                    buf.extend_from_slice(w.data);
                }
                gathered.push((self.geometry.offset(part[0].block), buf));
            }
        }
        let reqs: Vec<(u64, &[u8])> = gathered.iter().map(|(o, b)| (*o, &b[..])).collect();
        self.send(&mut p, &reqs, writes.len() as u64)
    }

    fn flush(&self) -> Result<(), DevError> {
        self.latch.check()?;
        if self.opts.read_only {
            return Ok(()); // nothing was written, so nothing can be lost
        }
        let mut p = self.pending_lock();
        if let Some((block, data)) = p.held.take() {
            // Nothing else is unflushed (the hold's condition): a FUA write
            // of this block makes all that was accepted durable.
            let off = self.geometry.offset(block);
            self.conn
                .write(&[(off, &data)], true)
                .map_err(|e| self.failed(format!("FUA write of {block}"), e, true))?;
            p.unflushed = false;
            self.write_requests.fetch_add(1, Ordering::Relaxed);
            self.blocks_written.fetch_add(1, Ordering::Relaxed);
            self.fua_writes.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if !p.unflushed {
            return Ok(()); // every write sent is durable already
        }
        self.conn
            .flush()
            .map_err(|e| self.failed("flush".into(), e, true))?;
        p.unflushed = false;
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn discards(&self) -> bool {
        self.conn.caps().trim && !self.opts.read_only
    }

    fn discard(&self, first: BlockNo, count: u64) -> Result<u64, DevError> {
        if count == 0 || !self.conn.caps().trim {
            return Ok(0);
        }
        self.writable()?;
        self.geometry.check(first, self.geometry.block_size())?;
        self.geometry
            .check(first.plus(count - 1), self.geometry.block_size())?;
        let mut p = self.pending_lock();
        self.send_held(&mut p)?;
        let bs = self.geometry.block_size() as u64;
        let done = match self.conn.trim(self.geometry.offset(first), count * bs) {
            Ok(()) => count,
            Err(ConnError::Command { .. }) => {
                self.trim_failures.fetch_add(1, Ordering::Relaxed);
                0
            }
            Err(e) => return Err(self.failed(format!("trim at {first}"), e, true)),
        };
        self.trimmed_blocks.fetch_add(done, Ordering::Relaxed);
        Ok(done)
    }
}

impl Drop for NbdDevice {
    fn drop(&mut self) {
        // A held block is a write the caller was told is in flight: send
        // it, as an image file's page cache would still write it back.
        if self.latch.check().is_ok() {
            let mut p = self.pending_lock();
            let _ = self.send_held(&mut p);
        }
    }
}
