//! The write log of a [`super::RecordingDevice`]: every accepted block write
//! and every completed flush, in order.
//!
//! Invariants (kept by construction; the fields are private): every write is
//! one block long and inside the device; a flush entry at index `i` covers a
//! prefix `covers <= i` of the log (the writes accepted before the flush was
//! called). Each write's data is stored once, behind an `Arc`, so cloning a
//! log copies no block contents.

use std::sync::Arc;

use super::CrashError;
use crate::{BlockNo, Geometry};

/// Index of an entry in a [`Log`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogPos(pub usize);

/// A moment at which the machine may crash: `CrashPoint(k)` means the first
/// `k` log entries happened and the rest did not. Points run from 0 (nothing
/// recorded) to `log.len()` (everything).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CrashPoint(pub usize);

/// One recorded event.
#[derive(Clone, Debug)]
pub enum LogEntry {
    /// A block write accepted by `write_batch`.
    Write { block: BlockNo, data: Arc<[u8]> },
    /// A flush that returned `Ok`. It makes durable the writes before
    /// `covers`, the log length when the flush was called; writes accepted
    /// while it ran stay in flight.
    Flush { covers: CrashPoint },
}

/// The recorded history of a device.
#[derive(Clone, Debug)]
pub struct Log {
    geometry: Geometry,
    entries: Vec<LogEntry>,
}

impl Log {
    /// An empty log for a device of this geometry.
    pub fn new(geometry: Geometry) -> Self {
        Log {
            geometry,
            entries: Vec::new(),
        }
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    pub fn entries(&self) -> &[LogEntry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The last crash point, after every entry.
    pub fn end(&self) -> CrashPoint {
        CrashPoint(self.entries.len())
    }

    /// Appends a write of one block.
    pub fn push_write(&mut self, block: BlockNo, data: &[u8]) -> Result<LogPos, CrashError> {
        self.geometry
            .check(block, data.len())
            .map_err(CrashError::BadWrite)?;
        self.entries.push(LogEntry::Write {
            block,
            data: data.into(),
        });
        Ok(LogPos(self.entries.len() - 1))
    }

    /// Appends a flush that covers every entry before it.
    pub fn push_flush(&mut self) -> LogPos {
        let covers = self.end();
        self.entries.push(LogEntry::Flush { covers });
        LogPos(self.entries.len() - 1)
    }

    /// Appends a flush that covers the first `covers` entries (a flush that
    /// was called when the log was that long).
    pub fn push_flush_covering(&mut self, covers: CrashPoint) -> Result<LogPos, CrashError> {
        if covers > self.end() {
            return Err(CrashError::PointOutOfRange {
                point: covers,
                len: self.len(),
            });
        }
        self.entries.push(LogEntry::Flush { covers });
        Ok(LogPos(self.entries.len() - 1))
    }

    /// The write at `pos`, if that entry is a write.
    pub fn write_at(&self, pos: LogPos) -> Option<(BlockNo, &Arc<[u8]>)> {
        match self.entries.get(pos.0)? {
            LogEntry::Write { block, data } => Some((*block, data)),
            LogEntry::Flush { .. } => None,
        }
    }

    /// The committed prefix at `point`: writes before it are durable because
    /// a flush covering them completed before `point`.
    pub fn committed_at(&self, point: CrashPoint) -> CrashPoint {
        let done = &self.entries[..point.0.min(self.entries.len())];
        done.iter()
            .filter_map(|e| match e {
                LogEntry::Flush { covers } => Some(*covers),
                LogEntry::Write { .. } => None,
            })
            .max()
            .unwrap_or(CrashPoint(0))
    }
}
