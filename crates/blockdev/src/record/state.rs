//! [`CrashState`]: one crash image described as choices over a [`Log`], and
//! [`build_image`], which turns it into bytes.
//!
//! A state names its epoch's committed prefix and, for each block written in
//! flight, which in-flight write (if any) the disk kept, whole or torn.
//! Blocks not named keep their committed contents. Invariants checked by
//! [`CrashState::validate`] before any image is built: every persisted entry
//! is a write in flight at the state's last point (index in
//! `[committed, last)`), and names a block no other entry names.

use std::collections::HashSet;
use std::ops::RangeInclusive;

use super::{CrashError, CrashPoint, Log, LogPos};
use crate::BlockNo;

/// Torn-write granularity: the sector, which disks write atomically.
pub const SECTOR: usize = 512;

/// Which sectors of a torn block hold the new data: bit `i` set means sector
/// `i` is new, clear means it keeps the committed contents.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SectorMask(pub u64);

/// How a state was chosen, so a report can say whether coverage was
/// complete.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// Part of an exhaustive enumeration of its epoch.
    Exhaustive,
    /// The in-order state at some point (a disk that reorders nothing),
    /// always included for sampled epochs.
    InOrder,
    /// Drawn at random in a sampled epoch.
    Sampled,
    /// Contains one torn write.
    Torn,
}

/// One in-flight write that reached the disk.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Persisted {
    /// The write's log entry.
    pub write: LogPos,
    /// `Some` if only some sectors reached the disk.
    pub torn: Option<SectorMask>,
}

/// A crash image, as choices over a log.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CrashState {
    /// Index of the epoch (run of crash points sharing a committed prefix).
    pub epoch: usize,
    /// Writes before this point are committed and always in the image.
    pub committed: CrashPoint,
    /// The crash points at which exactly this image can arise: from the
    /// first point where every chosen write had been accepted, to the end of
    /// the epoch. A checker must accept the image at each of them.
    pub points: RangeInclusive<CrashPoint>,
    /// The in-flight writes on disk, sorted by block, one per block at most.
    pub persisted: Vec<Persisted>,
    pub origin: Origin,
}

impl CrashState {
    /// The state a disk that reorders nothing leaves at `point`: everything
    /// before `point` applied in log order.
    pub fn in_order(log: &Log, point: CrashPoint) -> Result<CrashState, CrashError> {
        if point > log.end() {
            return Err(CrashError::PointOutOfRange {
                point,
                len: log.len(),
            });
        }
        let committed = log.committed_at(point);
        let mut latest = std::collections::BTreeMap::new();
        for i in committed.0..point.0 {
            if let Some((block, _)) = log.write_at(LogPos(i)) {
                latest.insert(block, LogPos(i));
            }
        }
        let persisted = latest
            .into_values()
            .map(|write| Persisted { write, torn: None })
            .collect();
        Ok(CrashState {
            epoch: 0,
            committed,
            points: point..=point,
            persisted,
            origin: Origin::InOrder,
        })
    }

    /// Checks the invariants in the module doc against `log`.
    pub fn validate(&self, log: &Log) -> Result<(), CrashError> {
        let last = *self.points.end();
        if last > log.end() || self.committed > last {
            return Err(CrashError::PointOutOfRange {
                point: last,
                len: log.len(),
            });
        }
        let sectors = log.geometry().block_size() / SECTOR;
        let mut blocks = HashSet::new();
        for p in &self.persisted {
            let (block, _) = log
                .write_at(p.write)
                .ok_or(CrashError::NotAWrite(p.write))?;
            if p.write.0 < self.committed.0 || p.write.0 >= last.0 {
                return Err(CrashError::NotInFlight {
                    write: p.write,
                    last,
                });
            }
            if !blocks.insert(block) {
                return Err(CrashError::BlockTwice(block));
            }
            check_torn(p.torn, sectors, log.geometry().block_size())?;
        }
        Ok(())
    }
}

fn check_torn(
    torn: Option<SectorMask>,
    sectors: usize,
    block_size: usize,
) -> Result<(), CrashError> {
    let Some(mask) = torn else { return Ok(()) };
    if !block_size.is_multiple_of(SECTOR)
        || sectors > 64
        || (sectors < 64 && mask.0 >> sectors != 0)
    {
        return Err(CrashError::BadTear { mask, block_size });
    }
    Ok(())
}

/// The image `state` describes: `base` (the device when recording began),
/// then the committed writes in log order, then the persisted choices.
/// Copies `base` once.
pub fn build_image(base: &[u8], log: &Log, state: &CrashState) -> Result<Vec<u8>, CrashError> {
    check_base(base, log)?;
    state.validate(log)?;
    let mut image = base.to_vec();
    apply_range(&mut image, log, CrashPoint(0), state.committed);
    apply_persisted(&mut image, log, state);
    Ok(image)
}

/// Builds many images fast: keeps the committed image of the last epoch
/// seen, so each image costs one copy plus its in-flight writes.
pub struct ImageBuilder<'a> {
    base: &'a [u8],
    log: &'a Log,
    committed: Option<(CrashPoint, Vec<u8>)>,
}

impl<'a> ImageBuilder<'a> {
    pub fn new(base: &'a [u8], log: &'a Log) -> Result<Self, CrashError> {
        check_base(base, log)?;
        Ok(ImageBuilder {
            base,
            log,
            committed: None,
        })
    }

    /// The image of `state`, as [`build_image`] would make it.
    pub fn build(&mut self, state: &CrashState) -> Result<Vec<u8>, CrashError> {
        state.validate(self.log)?;
        let mut image = self.committed_image(state.committed).to_vec();
        apply_persisted(&mut image, self.log, state);
        Ok(image)
    }

    fn committed_image(&mut self, committed: CrashPoint) -> &[u8] {
        let reusable = matches!(&self.committed, Some((c, _)) if *c <= committed);
        if !reusable {
            self.committed = Some((CrashPoint(0), self.base.to_vec()));
        }
        let (at, image) = self.committed.as_mut().expect("set just above");
        apply_range(image, self.log, *at, committed);
        *at = committed;
        image
    }
}

fn check_base(base: &[u8], log: &Log) -> Result<(), CrashError> {
    let want = log.geometry().total_bytes();
    if base.len() as u64 != want {
        return Err(CrashError::BaseSize {
            len: base.len(),
            want,
        });
    }
    Ok(())
}

/// Applies the writes in `[from, to)` in log order. Blocks are in range by
/// the log's invariant and `image` has the log's size by `check_base`.
fn apply_range(image: &mut [u8], log: &Log, from: CrashPoint, to: CrashPoint) {
    for i in from.0..to.0 {
        if let Some((block, data)) = log.write_at(LogPos(i)) {
            block_mut(image, log, block).copy_from_slice(data);
        }
    }
}

fn apply_persisted(image: &mut [u8], log: &Log, state: &CrashState) {
    for p in &state.persisted {
        let Some((block, data)) = log.write_at(p.write) else {
            continue;
        };
        let dst = block_mut(image, log, block);
        match p.torn {
            None => dst.copy_from_slice(data),
            Some(mask) => tear(dst, data, mask),
        }
    }
}

/// Copies the sectors of `new` selected by `mask`; the rest of `dst` keeps
/// its committed contents.
fn tear(dst: &mut [u8], new: &[u8], mask: SectorMask) {
    for (i, (d, n)) in dst.chunks_mut(SECTOR).zip(new.chunks(SECTOR)).enumerate() {
        if i < 64 && mask.0 & (1 << i) != 0 {
            d.copy_from_slice(n);
        }
    }
}

fn block_mut<'i>(image: &'i mut [u8], log: &Log, block: BlockNo) -> &'i mut [u8] {
    let bs = log.geometry().block_size();
    let start = log.geometry().offset(block) as usize;
    &mut image[start..start + bs]
}
