//! [`FaultDevice`]: wraps any [`BlockDevice`] and fails chosen calls, so that
//! every layer's error handling can be tested (docs/design.md: "A failed device
//! write or flush is never hidden").
//!
//! Calls are numbered from 1 since the device was made, separately per kind
//! (`write_batch`, `flush`) and together for "all I/O". A fault fires on the
//! matching call; that call does nothing to the inner device. After any
//! failed write or flush, injected or from the inner device, the wrapper
//! latches like a real device. Misuse (a bad block number or length) is
//! rejected before faults are considered and neither counts nor latches, so
//! a test's numbering is not shifted by its own mistakes.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::latch::Latch;
use crate::{BlockDevice, BlockNo, BlockWrite, DevError, Geometry};

/// What an injected failure looks like to the caller.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// `EIO`: the medium failed.
    Io,
    /// `ENOSPC`: a thin-provisioned or sparse backing store ran out of space.
    NoSpace,
}

impl FaultKind {
    fn errno(self) -> i32 {
        match self {
            FaultKind::Io => libc::EIO,
            FaultKind::NoSpace => libc::ENOSPC,
        }
    }
}

/// When a fault fires.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Trigger {
    NthWrite(u64),
    NthFlush(u64),
    FromOp(u64),
}

#[derive(Copy, Clone, Debug)]
struct Fault {
    trigger: Trigger,
    kind: FaultKind,
}

/// The ordinals of the call being made.
#[derive(Copy, Clone, Debug)]
enum Call {
    Read { op: u64 },
    Write { op: u64, nth: u64 },
    Flush { op: u64, nth: u64 },
}

/// A device that fails when told to.
#[derive(Debug)]
pub struct FaultDevice<D> {
    inner: D,
    geometry: Geometry,
    faults: Mutex<Vec<Fault>>,
    latch: Latch,
    ops: AtomicU64,
    writes: AtomicU64,
    flushes: AtomicU64,
}

impl<D: BlockDevice> FaultDevice<D> {
    pub fn new(inner: D) -> Result<Self, DevError> {
        let geometry = Geometry::new(inner.block_size(), inner.num_blocks())?;
        Ok(FaultDevice {
            inner,
            geometry,
            faults: Mutex::new(Vec::new()),
            latch: Latch::new(),
            ops: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
        })
    }

    /// The `n`th `write_batch` call (from 1) fails.
    pub fn fail_nth_write(&self, n: u64, kind: FaultKind) {
        self.add(Trigger::NthWrite(n), kind);
    }

    /// The `n`th `flush` call (from 1) fails.
    pub fn fail_nth_flush(&self, n: u64, kind: FaultKind) {
        self.add(Trigger::NthFlush(n), kind);
    }

    /// Every call (read, write or flush) from the `n`th on fails.
    pub fn fail_from_op(&self, n: u64, kind: FaultKind) {
        self.add(Trigger::FromOp(n), kind);
    }

    /// Every later call fails.
    pub fn fail_from_now(&self, kind: FaultKind) {
        self.fail_from_op(self.ops.load(Ordering::SeqCst) + 1, kind);
    }

    /// Calls counted so far: (all, writes, flushes).
    pub fn counts(&self) -> (u64, u64, u64) {
        let load = |c: &AtomicU64| c.load(Ordering::SeqCst);
        (load(&self.ops), load(&self.writes), load(&self.flushes))
    }

    /// The first failure, if the device has latched.
    pub fn failure(&self) -> Option<String> {
        self.latch.first()
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    pub fn into_inner(self) -> D {
        self.inner
    }

    fn add(&self, trigger: Trigger, kind: FaultKind) {
        self.faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Fault { trigger, kind });
    }

    /// The fault that fires for `call`, if any.
    fn firing(&self, call: Call) -> Option<DevError> {
        let faults = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        let fault = faults.iter().find(|f| fires(f.trigger, call))?;
        let what = format!("injected fault ({:?}) on {call:?}", fault.kind);
        Some(DevError::Io {
            what,
            source: io::Error::from_raw_os_error(fault.kind.errno()),
        })
    }

    fn next_op(&self) -> u64 {
        self.ops.fetch_add(1, Ordering::SeqCst) + 1
    }
}

fn fires(trigger: Trigger, call: Call) -> bool {
    match (trigger, call) {
        (Trigger::NthWrite(n), Call::Write { nth, .. }) => n == nth,
        (Trigger::NthFlush(n), Call::Flush { nth, .. }) => n == nth,
        (
            Trigger::FromOp(n),
            Call::Read { op } | Call::Write { op, .. } | Call::Flush { op, .. },
        ) => op >= n,
        _ => false,
    }
}

impl<D: BlockDevice> BlockDevice for FaultDevice<D> {
    fn block_size(&self) -> usize {
        self.geometry.block_size()
    }

    fn num_blocks(&self) -> u64 {
        self.geometry.num_blocks()
    }

    fn read(&self, block: BlockNo, buf: &mut [u8]) -> Result<(), DevError> {
        self.latch.check()?;
        self.geometry.check(block, buf.len())?;
        // A failed read latches nothing, as on a real device: no write is lost.
        match self.firing(Call::Read { op: self.next_op() }) {
            Some(err) => Err(err),
            None => self.inner.read(block, buf),
        }
    }

    fn write_batch(&self, writes: &[BlockWrite<'_>]) -> Result<(), DevError> {
        self.latch.check()?;
        self.geometry.check_batch(writes)?;
        let call = Call::Write {
            op: self.next_op(),
            nth: self.writes.fetch_add(1, Ordering::SeqCst) + 1,
        };
        match self.firing(call) {
            Some(err) => Err(self.latch.trip(err)),
            None => self
                .inner
                .write_batch(writes)
                .map_err(|e| self.latch.trip(e)),
        }
    }

    fn flush(&self) -> Result<(), DevError> {
        self.latch.check()?;
        let call = Call::Flush {
            op: self.next_op(),
            nth: self.flushes.fetch_add(1, Ordering::SeqCst) + 1,
        };
        match self.firing(call) {
            Some(err) => Err(self.latch.trip(err)),
            None => self.inner.flush().map_err(|e| self.latch.trip(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    fn dev() -> FaultDevice<MemDevice> {
        FaultDevice::new(MemDevice::new(512, 8).unwrap()).unwrap()
    }

    fn write(d: &impl BlockDevice, block: u64, byte: u8) -> Result<(), DevError> {
        let data = vec![byte; 512];
        d.write_batch(&[BlockWrite {
            block: BlockNo(block),
            data: &data,
        }])
    }

    fn errno(e: &DevError) -> Option<i32> {
        match e {
            DevError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    #[test]
    fn nth_write_fails_writes_nothing_and_latches() {
        let d = dev();
        d.fail_nth_write(2, FaultKind::NoSpace);
        write(&d, 0, 1).unwrap();
        let err = write(&d, 1, 2).unwrap_err();
        assert_eq!(errno(&err), Some(libc::ENOSPC), "{err}");
        assert!(
            d.inner().snapshot()[512..1024].iter().all(|&b| b == 0),
            "failed write must not land"
        );
        assert!(matches!(write(&d, 2, 3), Err(DevError::Latched { .. })));
        assert!(matches!(d.flush(), Err(DevError::Latched { .. })));
        let mut buf = vec![0; 512];
        assert!(matches!(
            d.read(BlockNo(0), &mut buf),
            Err(DevError::Latched { .. })
        ));
        assert!(d.failure().unwrap().contains("NoSpace"));
    }

    #[test]
    fn nth_flush_fails_and_latches() {
        let d = dev();
        d.fail_nth_flush(1, FaultKind::Io);
        write(&d, 0, 1).unwrap();
        assert_eq!(errno(&d.flush().unwrap_err()), Some(libc::EIO));
        assert!(matches!(d.flush(), Err(DevError::Latched { .. })));
        assert_eq!(d.inner().stats().flushes, 0);
    }

    #[test]
    fn from_op_fails_reads_too() {
        let d = dev();
        d.fail_from_op(2, FaultKind::Io);
        let mut buf = vec![0; 512];
        d.read(BlockNo(0), &mut buf).unwrap();
        assert_eq!(
            errno(&d.read(BlockNo(0), &mut buf).unwrap_err()),
            Some(libc::EIO)
        );
        // A failed read does not latch, but the trigger keeps firing.
        assert!(errno(&write(&d, 0, 1).unwrap_err()).is_some());
        assert!(matches!(write(&d, 0, 1), Err(DevError::Latched { .. })));
    }

    #[test]
    fn misuse_neither_counts_nor_latches() {
        let d = dev();
        d.fail_nth_write(1, FaultKind::Io);
        assert!(matches!(write(&d, 99, 1), Err(DevError::OutOfRange { .. })));
        assert_eq!(d.counts(), (0, 0, 0));
        assert!(errno(&write(&d, 0, 1).unwrap_err()).is_some());
    }

    #[test]
    fn fail_from_now_stops_everything_after() {
        let d = dev();
        write(&d, 0, 1).unwrap();
        d.fail_from_now(FaultKind::Io);
        assert!(d.flush().is_err());
        assert!(matches!(d.flush(), Err(DevError::Latched { .. })));
    }
}
