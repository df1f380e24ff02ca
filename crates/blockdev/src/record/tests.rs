//! Tests of recording and crash enumeration. The property tests check the
//! enumerator against an oracle written separately here: committed prefixes
//! and allowed block versions are recomputed from the raw log entries.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::*;
use crate::{BlockDevice, BlockWrite, FaultDevice, FaultKind, MemDevice};

const BS: usize = 1024; // two sectors, so torn writes are possible

fn write(dev: &impl BlockDevice, block: u64, byte: u8) {
    let data = vec![byte; dev.block_size()];
    dev.write_batch(&[BlockWrite {
        block: BlockNo(block),
        data: &data,
    }])
    .unwrap();
}

fn all(log: &Log, opts: Enumerate) -> Vec<CrashState> {
    crash_states(log, &opts).unwrap().collect()
}

fn big() -> Enumerate {
    Enumerate {
        max_states: 1 << 20,
        ..Enumerate::default()
    }
}

/// Blocks of an image as a map from block number to its first byte (tests
/// write uniform blocks).
fn bytes(image: &[u8]) -> Vec<u8> {
    image.chunks(BS).map(|b| b[0]).collect()
}

#[test]
fn epochs_and_images_of_a_small_log() {
    let rec = RecordingDevice::new(MemDevice::new(BS, 4).unwrap()).unwrap();
    write(&rec, 0, 1); // entry 0
    rec.flush().unwrap(); // entry 1
    write(&rec, 1, 2); // entry 2
    write(&rec, 1, 3); // entry 3
    write(&rec, 2, 4); // entry 4
    let log = rec.log();
    let states = all(&log, big());
    // Epoch 0: block 0 old or new (2). Epoch 1: block 1 in {old,2,3} x block 2 in {old,4} (6).
    assert_eq!(states.len(), 8);
    let images: HashSet<Vec<u8>> = states
        .iter()
        .filter(|s| s.epoch == 1)
        .map(|s| bytes(&build_image(&rec.base(), &log, s).unwrap()))
        .collect();
    let want: HashSet<Vec<u8>> = [0, 2, 3]
        .iter()
        .flat_map(|&b1| [0, 4].map(|b2| vec![1, b1, b2, 0]))
        .collect();
    assert_eq!(images, want);
    // The state persisting version 2 of block 1 and nothing else can arise
    // from point 3 (after entry 2) to the end.
    let s = states
        .iter()
        .find(|s| {
            s.persisted
                == [Persisted {
                    write: LogPos(2),
                    torn: None,
                }]
        })
        .unwrap();
    assert_eq!(s.points, CrashPoint(3)..=CrashPoint(5));
    let empty = states
        .iter()
        .find(|s| s.epoch == 1 && s.persisted.is_empty())
        .unwrap();
    assert_eq!(empty.points, CrashPoint(2)..=CrashPoint(5));
}

#[test]
fn a_write_during_a_flush_stays_in_flight() {
    let geometry = crate::Geometry::new(BS, 2).unwrap();
    let mut log = Log::new(geometry);
    log.push_write(BlockNo(0), &[1; BS]).unwrap();
    // The flush was called after entry 0, then block 1 was written while it ran.
    log.push_write(BlockNo(1), &[2; BS]).unwrap();
    log.push_flush_covering(CrashPoint(1)).unwrap();
    let states = all(&log, big());
    let last: Vec<_> = states.iter().filter(|s| s.epoch == 1).collect();
    assert_eq!(last.len(), 2, "block 1 old or new after the flush");
    assert!(last.iter().all(|s| s.committed == CrashPoint(1)));
    let sampled = all(
        &log,
        Enumerate {
            max_states: 0,
            ..big()
        },
    );
    let in_order: Vec<_> = sampled.iter().filter(|s| s.epoch == 1).collect();
    assert_eq!(in_order.len(), 1);
    assert_eq!(
        in_order[0].persisted,
        [Persisted {
            write: LogPos(1),
            torn: None
        }]
    );
}

#[test]
fn torn_prefix_states_mix_sectors() {
    let rec = RecordingDevice::new(MemDevice::new(BS, 2).unwrap()).unwrap();
    write(&rec, 1, 7);
    let log = rec.log();
    let opts = Enumerate {
        torn: Some(TornModel::Prefix),
        ..big()
    };
    let torn: Vec<_> = all(&log, opts)
        .into_iter()
        .filter(|s| s.origin == Origin::Torn)
        .collect();
    assert_eq!(torn.len(), 1, "one write, one proper prefix of two sectors");
    let image = build_image(&rec.base(), &log, &torn[0]).unwrap();
    assert!(image[BS..BS + SECTOR].iter().all(|&b| b == 7));
    assert!(image[BS + SECTOR..].iter().all(|&b| b == 0));
    let any = Enumerate {
        torn: Some(TornModel::AnySubset),
        ..big()
    };
    assert_eq!(
        all(&log, any)
            .iter()
            .filter(|s| s.origin == Origin::Torn)
            .count(),
        2
    );
}

#[test]
fn torn_needs_two_sectors() {
    let log = Log::new(crate::Geometry::new(512, 2).unwrap());
    let opts = Enumerate {
        torn: Some(TornModel::Prefix),
        ..big()
    };
    assert!(matches!(
        crash_states(&log, &opts),
        Err(CrashError::TornUnsupported { .. })
    ));
}

#[test]
fn bad_states_and_bases_are_errors() {
    let rec = RecordingDevice::new(MemDevice::new(BS, 2).unwrap()).unwrap();
    write(&rec, 0, 1);
    rec.flush().unwrap();
    write(&rec, 1, 2);
    write(&rec, 1, 3);
    let log = rec.log();
    let base = rec.base();
    let mut s = CrashState::in_order(&log, log.end()).unwrap();
    assert!(build_image(&base, &log, &s).is_ok());
    assert!(matches!(
        build_image(&base[1..], &log, &s),
        Err(CrashError::BaseSize { .. })
    ));
    s.persisted = vec![Persisted {
        write: LogPos(0),
        torn: None,
    }];
    assert!(matches!(
        build_image(&base, &log, &s),
        Err(CrashError::NotInFlight { .. })
    ));
    s.persisted = vec![Persisted {
        write: LogPos(1),
        torn: None,
    }];
    assert!(matches!(
        build_image(&base, &log, &s),
        Err(CrashError::NotAWrite(_))
    ));
    s.persisted = vec![
        Persisted {
            write: LogPos(2),
            torn: None,
        },
        Persisted {
            write: LogPos(3),
            torn: None,
        },
    ];
    assert!(matches!(
        build_image(&base, &log, &s),
        Err(CrashError::BlockTwice(_))
    ));
    s.persisted = vec![Persisted {
        write: LogPos(2),
        torn: Some(SectorMask(0b100)),
    }];
    assert!(matches!(
        build_image(&base, &log, &s),
        Err(CrashError::BadTear { .. })
    ));
    s.points = CrashPoint(0)..=CrashPoint(9);
    assert!(matches!(
        build_image(&base, &log, &s),
        Err(CrashError::PointOutOfRange { .. })
    ));
    assert!(CrashState::in_order(&log, CrashPoint(9)).is_err());
}

#[test]
fn a_failed_flush_is_not_logged() {
    let fault = FaultDevice::new(MemDevice::new(BS, 2).unwrap()).unwrap();
    fault.fail_nth_flush(1, FaultKind::Io);
    let rec = RecordingDevice::new(fault).unwrap();
    write(&rec, 0, 1);
    assert!(rec.flush().is_err());
    let log = rec.log();
    assert_eq!(log.len(), 1);
    assert_eq!(
        log.committed_at(log.end()),
        CrashPoint(0),
        "the write is still in flight"
    );
}

#[test]
fn with_base_checks_the_length() {
    let mem = MemDevice::new(BS, 2).unwrap();
    assert!(RecordingDevice::with_base(mem, vec![0; BS]).is_err());
}

// ---- property tests against an oracle ----

#[derive(Clone, Debug)]
enum Op {
    Write(u64, u8),
    Flush,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0..5u64, 1..=255u8).prop_map(|(b, x)| Op::Write(b, x)),
        1 => Just(Op::Flush),
    ];
    proptest::collection::vec(op, 0..14)
}

fn record(ops: &[Op]) -> (RecordingDevice<MemDevice>, Log) {
    let base: Vec<u8> = (0..5 * BS).map(|i| (i / BS) as u8 + 100).collect();
    let mem = MemDevice::from_image(BS, base).unwrap();
    let rec = RecordingDevice::new(mem).unwrap();
    for op in ops {
        match *op {
            Op::Write(b, x) => write(&rec, b, x),
            Op::Flush => rec.flush().unwrap(),
        }
    }
    let log = rec.log();
    (rec, log)
}

/// The oracle's view of the log: writes as (block, byte), flush covers.
fn oracle_committed(log: &Log, point: usize) -> usize {
    log.entries()[..point]
        .iter()
        .filter_map(|e| match e {
            LogEntry::Flush { covers } => Some(covers.0),
            LogEntry::Write { .. } => None,
        })
        .fold(0, usize::max)
}

fn oracle_writes(log: &Log, from: usize, to: usize) -> Vec<(u64, u8)> {
    log.entries()[from..to]
        .iter()
        .filter_map(|e| match e {
            LogEntry::Write { block, data } => Some((block.0, data[0])),
            LogEntry::Flush { .. } => None,
        })
        .collect()
}

/// Checks `image` against the model at crash point `p`.
fn check_image(
    base: &[u8],
    log: &Log,
    p: usize,
    image: &[u8],
    torn_ok: bool,
) -> Result<(), TestCaseError> {
    let c = oracle_committed(log, p);
    let mut committed: Vec<u8> = bytes(base);
    for (b, x) in oracle_writes(log, 0, c) {
        committed[b as usize] = x;
    }
    let mut in_flight: HashMap<u64, Vec<u8>> = HashMap::new();
    for (b, x) in oracle_writes(log, c, p) {
        in_flight.entry(b).or_default().push(x);
    }
    for (b, blk) in image.chunks(BS).enumerate() {
        let old = committed[b];
        let mut allowed = vec![old];
        allowed.extend(in_flight.get(&(b as u64)).cloned().unwrap_or_default());
        let sectors: Vec<u8> = blk.chunks(SECTOR).map(|s| s[0]).collect();
        prop_assert!(
            blk.chunks(SECTOR).all(|s| s.iter().all(|&x| x == s[0])),
            "block {b} not sector-uniform"
        );
        let whole = sectors.iter().all(|&x| x == sectors[0]) && allowed.contains(&sectors[0]);
        let torn = torn_ok && sectors.iter().all(|x| *x == old || allowed.contains(x));
        prop_assert!(
            whole || torn,
            "block {b} at point {p}: {sectors:?} not in {allowed:?}"
        );
    }
    Ok(())
}

fn oracle_count(log: &Log) -> u64 {
    let n = log.len();
    let mut total = 0;
    let mut p = 0;
    while p <= n {
        let c = oracle_committed(log, p);
        let mut last = p;
        while last < n && oracle_committed(log, last + 1) == c {
            last += 1;
        }
        let mut per_block: HashMap<u64, u64> = HashMap::new();
        for (b, _) in oracle_writes(log, c, last) {
            *per_block.entry(b).or_default() += 1;
        }
        total += per_block.values().map(|v| 1 + v).product::<u64>();
        p = last + 1;
    }
    total
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn every_state_is_allowed_and_keeps_committed_writes(ops in ops(), max in 0u64..20, torn in any::<bool>()) {
        let (rec, log) = record(&ops);
        let base = rec.base();
        let model = torn.then_some(TornModel::AnySubset);
        let opts = Enumerate { max_states: max, seed: 7, torn: model };
        let mut builder = ImageBuilder::new(&base, &log).unwrap();
        for s in crash_states(&log, &opts).unwrap() {
            let image = build_image(&base, &log, &s).unwrap();
            prop_assert_eq!(&image, &builder.build(&s).unwrap());
            let torn_ok = s.origin == Origin::Torn;
            for p in [s.points.start().0, s.points.end().0] {
                prop_assert_eq!(oracle_committed(&log, p), s.committed.0);
                check_image(&base, &log, p, &image, torn_ok)?;
            }
            for w in &s.persisted {
                prop_assert!(w.write.0 < s.points.start().0);
            }
        }
    }

    #[test]
    fn exhaustive_count_is_the_product_formula(ops in ops()) {
        let (_, log) = record(&ops);
        let states = all(&log, big());
        prop_assert!(states.iter().all(|s| s.origin == Origin::Exhaustive));
        prop_assert_eq!(states.len() as u64, oracle_count(&log));
        let distinct: HashSet<_> = states.iter().map(|s| (s.committed, s.persisted.clone())).collect();
        prop_assert_eq!(distinct.len(), states.len());
    }

    #[test]
    fn sampling_replays_from_its_seed(ops in ops(), seed in any::<u64>()) {
        let (_, log) = record(&ops);
        let opts = Enumerate { max_states: 3, seed, torn: Some(TornModel::Prefix) };
        prop_assert_eq!(all(&log, opts), all(&log, opts));
    }

    #[test]
    fn all_writes_applied_is_the_inner_device(ops in ops()) {
        let (rec, log) = record(&ops);
        let s = CrashState::in_order(&log, log.end()).unwrap();
        prop_assert_eq!(build_image(&rec.base(), &log, &s).unwrap(), rec.inner().snapshot());
    }
}

#[test]
fn sampling_happens_and_is_bounded() {
    // Eight blocks written twice each: 3^8 = 6561 states, far over 10.
    let rec = RecordingDevice::new(MemDevice::new(BS, 8).unwrap()).unwrap();
    for round in 1..=2 {
        for b in 0..8 {
            write(&rec, b, round * 10 + b as u8);
        }
    }
    let log = rec.log();
    let opts = Enumerate {
        max_states: 10,
        seed: 42,
        torn: None,
    };
    let it = crash_states(&log, &opts).unwrap();
    assert!(it.is_sampled(0));
    assert_eq!(it.seed(), 42);
    let states: Vec<_> = it.collect();
    let in_order = states
        .iter()
        .filter(|s| s.origin == Origin::InOrder)
        .count();
    let sampled = states
        .iter()
        .filter(|s| s.origin == Origin::Sampled)
        .count();
    assert_eq!(in_order, 17, "one per point 0..=16");
    assert!((1..=10).contains(&sampled), "{sampled}");
    let other = all(&log, Enumerate { seed: 43, ..opts });
    assert_ne!(states, other, "a different seed draws different states");
}
