//! Enumeration of crash states over a [`Log`], epoch by epoch.
//!
//! An epoch is a maximal run of crash points that share a committed prefix.
//! Its states are the choices, for each block written in flight by the
//! epoch's last point, of "committed contents" or one of the block's
//! in-flight versions: `Π (1 + versions_b)` states. Each distinct choice is
//! yielded once, with the range of points where it can arise (see
//! [`CrashState::points`]).
//!
//! - If an epoch's count is at most [`Enumerate::max_states`], all of them
//!   are yielded (`Origin::Exhaustive`).
//! - Otherwise the epoch is sampled: the in-order state of every point where
//!   the epoch gains a write (`Origin::InOrder`), then `max_states` random
//!   draws (`Origin::Sampled`), skipping choices already yielded. The RNG is
//!   ChaCha8 seeded with [`Enumerate::seed`], one stream per epoch, so a run
//!   replays from its seed and an epoch's sample does not depend on others.
//! - With [`Enumerate::torn`], each epoch also yields torn states: for each
//!   in-flight write `w`, the in-order state just before `w` with `w`'s block
//!   torn (`Origin::Torn`). The torn block's old sectors hold its committed
//!   contents. All of them if their count fits `max_states`, else a sample.
//!
//! The enumeration is bounded: per epoch at most `max_states` exhaustive, or
//! (points + `max_states`) sampled, plus at most `max_states` torn states.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::state::SECTOR;
use super::{
    CrashError, CrashPoint, CrashState, Log, LogEntry, LogPos, Origin, Persisted, SectorMask,
};
use crate::BlockNo;

/// Which torn writes to add.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TornModel {
    /// The first `j` sectors new, the rest old, for `j` in `1..sectors`: a
    /// disk that writes a block front to back.
    Prefix,
    /// Every proper, non-empty subset of sectors new (blocks of at most 16
    /// sectors): a disk that writes sectors in any order.
    AnySubset,
}

/// Options of [`crash_states`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Enumerate {
    /// Largest epoch enumerated exhaustively; also the sample size beyond.
    pub max_states: u64,
    /// Seed of the sampling RNG; print it so a run can be replayed.
    pub seed: u64,
    /// Torn writes to add, or none.
    pub torn: Option<TornModel>,
}

impl Default for Enumerate {
    fn default() -> Self {
        Enumerate {
            max_states: 4096,
            seed: 0,
            torn: None,
        }
    }
}

/// The in-flight versions of one block at an epoch's last point.
#[derive(Clone, Debug)]
struct BlockVersions {
    versions: Vec<LogPos>,
}

/// One epoch of the log.
#[derive(Clone, Debug)]
struct Epoch {
    index: usize,
    committed: CrashPoint,
    first: CrashPoint,
    last: CrashPoint,
    blocks: Vec<BlockVersions>,
    /// For each in-flight write in log order: (its entry, block slot, digit).
    writes: Vec<(LogPos, usize, usize)>,
}

impl Epoch {
    /// How many in-flight writes were accepted before the epoch's first point.
    fn pre_first(&self) -> usize {
        self.writes
            .iter()
            .take_while(|(w, _, _)| w.0 < self.first.0)
            .count()
    }

    /// `Π (1 + versions)`, or `None` on overflow.
    fn count(&self) -> Option<u64> {
        self.blocks
            .iter()
            .try_fold(1u64, |acc, b| acc.checked_mul(1 + b.versions.len() as u64))
    }

    /// The state of one choice vector: digit 0 keeps the committed contents,
    /// digit `j` persists version `j - 1`.
    fn state(
        &self,
        digits: &[usize],
        torn: Option<(usize, SectorMask)>,
        origin: Origin,
    ) -> CrashState {
        let mut persisted = Vec::new();
        let mut newest = None;
        for (slot, (b, &d)) in self.blocks.iter().zip(digits).enumerate() {
            let mask = torn.filter(|(s, _)| *s == slot).map(|(_, m)| m);
            if d == 0 {
                continue;
            }
            let write = b.versions[d - 1];
            newest = newest.max(Some(write));
            persisted.push(Persisted { write, torn: mask });
        }
        let first = newest.map_or(self.first, |w| self.first.max(CrashPoint(w.0 + 1)));
        CrashState {
            epoch: self.index,
            committed: self.committed,
            points: first..=self.last,
            persisted,
            origin,
        }
    }
}

/// Splits `log` into epochs.
fn epochs(log: &Log) -> Vec<Epoch> {
    let mut out = Vec::new();
    let mut committed = CrashPoint(0);
    let mut first = CrashPoint(0);
    for (i, entry) in log.entries().iter().enumerate() {
        if let LogEntry::Flush { covers } = entry {
            if *covers > committed {
                // Point i is the last one before this flush completes.
                out.push(epoch(log, out.len(), committed, first, CrashPoint(i)));
                committed = *covers;
                first = CrashPoint(i + 1);
            }
        }
    }
    out.push(epoch(log, out.len(), committed, first, log.end()));
    out
}

fn epoch(
    log: &Log,
    index: usize,
    committed: CrashPoint,
    first: CrashPoint,
    last: CrashPoint,
) -> Epoch {
    let mut by_block: BTreeMap<BlockNo, Vec<LogPos>> = BTreeMap::new();
    for i in committed.0..last.0 {
        if let Some((block, _)) = log.write_at(LogPos(i)) {
            by_block.entry(block).or_default().push(LogPos(i));
        }
    }
    let blocks: Vec<BlockVersions> = by_block
        .into_values()
        .map(|versions| BlockVersions { versions })
        .collect();
    let mut writes = Vec::new();
    for (slot, b) in blocks.iter().enumerate() {
        writes.extend(
            b.versions
                .iter()
                .enumerate()
                .map(|(j, &w)| (w, slot, j + 1)),
        );
    }
    writes.sort();
    Epoch {
        index,
        committed,
        first,
        last,
        blocks,
        writes,
    }
}

/// Every crash state of `log` under `opts`, epoch by epoch.
pub fn crash_states(log: &Log, opts: &Enumerate) -> Result<CrashStates, CrashError> {
    let masks = match opts.torn {
        None => Vec::new(),
        Some(model) => torn_masks(model, log.geometry().block_size())?,
    };
    let epochs = epochs(log);
    Ok(CrashStates {
        opts: *opts,
        masks,
        epochs,
        next_epoch: 0,
        current: None,
    })
}

fn torn_masks(model: TornModel, block_size: usize) -> Result<Vec<SectorMask>, CrashError> {
    let sectors = block_size / SECTOR;
    let bad = || CrashError::TornUnsupported { block_size, model };
    if !block_size.is_multiple_of(SECTOR) || sectors < 2 {
        return Err(bad());
    }
    match model {
        TornModel::Prefix if sectors <= 64 => {
            Ok((1..sectors).map(|j| SectorMask((1u64 << j) - 1)).collect())
        }
        TornModel::AnySubset if sectors <= 16 => {
            Ok((1..(1u64 << sectors) - 1).map(SectorMask).collect())
        }
        _ => Err(bad()),
    }
}

/// Iterator over crash states; see the module doc for the order.
pub struct CrashStates {
    opts: Enumerate,
    masks: Vec<SectorMask>,
    epochs: Vec<Epoch>,
    next_epoch: usize,
    current: Option<EpochStates>,
}

impl CrashStates {
    /// The seed in use, to print beside any failure.
    pub fn seed(&self) -> u64 {
        self.opts.seed
    }

    /// How many epochs the log has.
    pub fn epochs(&self) -> usize {
        self.epochs.len()
    }

    /// Whether epoch `index` is sampled rather than exhaustive.
    pub fn is_sampled(&self, index: usize) -> bool {
        self.epochs
            .get(index)
            .is_some_and(|e| e.count().is_none_or(|c| c > self.opts.max_states))
    }
}

impl Iterator for CrashStates {
    type Item = CrashState;

    fn next(&mut self) -> Option<CrashState> {
        loop {
            if let Some(cur) = &mut self.current {
                if let Some(state) = cur.next(&self.epochs[cur.epoch], &self.masks, &self.opts) {
                    return Some(state);
                }
            }
            let epoch = self.epochs.get(self.next_epoch)?;
            self.current = Some(EpochStates::new(epoch, &self.opts));
            self.next_epoch += 1;
        }
    }
}

/// Where the enumeration of one epoch stands.
enum Phase {
    /// Mixed-radix counter over the choice digits.
    Exhaustive {
        digits: Vec<usize>,
        done: bool,
    },
    /// In-order states: before the epoch's `k`th in-flight write (k = 0 is
    /// the epoch's first point; k = writes.len() its last).
    InOrder {
        k: usize,
    },
    /// Random draws left.
    Sampled {
        left: u64,
    },
    /// Torn states: index into (write, mask) pairs, or draws left.
    TornAll {
        next: usize,
    },
    TornSampled {
        left: u64,
    },
    Done,
}

struct EpochStates {
    epoch: usize,
    phase: Phase,
    rng: ChaCha8Rng,
    /// Hashes of choice vectors yielded in a sampled epoch.
    seen: HashSet<u64>,
}

impl EpochStates {
    fn new(epoch: &Epoch, opts: &Enumerate) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
        rng.set_stream(epoch.index as u64);
        let exhaustive = epoch.count().is_some_and(|c| c <= opts.max_states);
        let phase = if exhaustive {
            Phase::Exhaustive {
                digits: vec![0; epoch.blocks.len()],
                done: false,
            }
        } else {
            Phase::InOrder {
                k: epoch.pre_first(),
            }
        };
        EpochStates {
            epoch: epoch.index,
            phase,
            rng,
            seen: HashSet::new(),
        }
    }

    fn next(
        &mut self,
        epoch: &Epoch,
        masks: &[SectorMask],
        opts: &Enumerate,
    ) -> Option<CrashState> {
        loop {
            if let Some(state) = self.step(epoch, masks, opts) {
                return Some(state);
            }
            if matches!(self.phase, Phase::Done) {
                return None;
            }
        }
    }

    /// Advances one step; `None` with a phase other than `Done` means "no
    /// state this step, call again".
    fn step(
        &mut self,
        epoch: &Epoch,
        masks: &[SectorMask],
        opts: &Enumerate,
    ) -> Option<CrashState> {
        match &mut self.phase {
            Phase::Exhaustive { digits, done } => {
                if *done {
                    self.phase = torn_phase(epoch, masks, opts);
                    return None;
                }
                let state = epoch.state(digits, None, Origin::Exhaustive);
                *done = !increment(digits, &epoch.blocks);
                Some(state)
            }
            Phase::InOrder { k } => {
                if *k > epoch.writes.len() {
                    self.phase = Phase::Sampled {
                        left: opts.max_states,
                    };
                    return None;
                }
                let digits = in_order_digits(epoch, *k);
                *k += 1;
                self.seen.insert(hash(&digits));
                Some(epoch.state(&digits, None, Origin::InOrder))
            }
            Phase::Sampled { left } => {
                if *left == 0 {
                    self.phase = torn_phase(epoch, masks, opts);
                    return None;
                }
                *left -= 1;
                let digits: Vec<usize> = epoch
                    .blocks
                    .iter()
                    .map(|b| self.rng.gen_range(0..=b.versions.len()))
                    .collect();
                self.seen
                    .insert(hash(&digits))
                    .then(|| epoch.state(&digits, None, Origin::Sampled))
            }
            Phase::TornAll { next } => {
                let Some(pair) = torn_pair(epoch, masks, *next) else {
                    self.phase = Phase::Done;
                    return None;
                };
                *next += 1;
                Some(torn_state(epoch, pair))
            }
            Phase::TornSampled { left } => {
                if *left == 0 {
                    self.phase = Phase::Done;
                    return None;
                }
                *left -= 1;
                let n = epoch.writes.len() * masks.len();
                let pair = torn_pair(epoch, masks, self.rng.gen_range(0..n))?;
                Some(torn_state(epoch, pair))
            }
            Phase::Done => None,
        }
    }
}

/// The torn phase that follows the regular states, or `Done`.
fn torn_phase(epoch: &Epoch, masks: &[SectorMask], opts: &Enumerate) -> Phase {
    let n = epoch.writes.len() as u64 * masks.len() as u64;
    if n == 0 {
        Phase::Done
    } else if n <= opts.max_states {
        Phase::TornAll { next: 0 }
    } else {
        Phase::TornSampled {
            left: opts.max_states,
        }
    }
}

/// The `i`th (in-flight write index, mask) pair.
fn torn_pair(epoch: &Epoch, masks: &[SectorMask], i: usize) -> Option<(usize, SectorMask)> {
    let (w, m) = (i / masks.len().max(1), i % masks.len().max(1));
    (w < epoch.writes.len()).then(|| (w, masks[m]))
}

/// The in-order state before in-flight write `k`, with write `k` torn.
fn torn_state(epoch: &Epoch, (k, mask): (usize, SectorMask)) -> CrashState {
    let mut digits = in_order_digits(epoch, k);
    let (_, slot, digit) = epoch.writes[k];
    digits[slot] = digit;
    epoch.state(&digits, Some((slot, mask)), Origin::Torn)
}

/// Choice digits of the in-order state after the epoch's first `k` in-flight
/// writes. Writes accepted before the epoch's first point (while the flush
/// that opened it ran) are in every in-order state of the epoch.
fn in_order_digits(epoch: &Epoch, k: usize) -> Vec<usize> {
    let mut digits = vec![0; epoch.blocks.len()];
    // `writes` is in log order, so a later version overwrites an earlier one.
    for &(_, slot, digit) in epoch.writes.iter().take(k.max(epoch.pre_first())) {
        digits[slot] = digit;
    }
    digits
}

/// Next mixed-radix value; `false` after the last one.
fn increment(digits: &mut [usize], blocks: &[BlockVersions]) -> bool {
    for (d, b) in digits.iter_mut().zip(blocks) {
        if *d < b.versions.len() {
            *d += 1;
            return true;
        }
        *d = 0;
    }
    false
}

fn hash(digits: &[usize]) -> u64 {
    let mut h = DefaultHasher::new();
    digits.hash(&mut h);
    h.finish()
}
