//! Property tests of the patch cache over crash images.
//!
//! A seeded generator builds random workloads: byte patches that stamp a
//! unique, increasing counter into one or two 4-byte slots of a block, bit
//! patches that set a fresh bitmap bit, empty and held empty patches, random
//! dependencies on earlier operations, and write rounds and flushes
//! interleaved at random. The cache runs on a recording device. Then every
//! crash image the recording allows (exhaustive per epoch up to a bound,
//! sampled with the seed beyond) is checked against a model:
//!
//! - disk safety: an operation whose change is on disk has every operation
//!   it depends on (declared, through empty patches) on disk too;
//! - no garbage: every slot holds 0 or the counter of an operation that
//!   wrote that slot (a bad rollback would leave something else);
//! - durability: what the cache reported committed by a flush that the
//!   crash image's committed prefix covers is on disk.
//!
//! Finally every workload must drain (liveness: `sync` never gets stuck), the
//! graph invariants hold after every step, and each optimization setting
//! leaves the same final disk as no optimization at all.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use stitch_blockdev::record::{crash_states, Enumerate, ImageBuilder, Log};
use stitch_blockdev::{MemDevice, RecordingDevice};
use stitch_patch::{
    BlockNo, CacheConfig, Optimizations, PatchCache, PatchError, PatchFlags, PatchId,
};

const BLOCKS: u64 = 6;
const BS: usize = 4096;
const SLOTS: usize = 12;
/// Bit patches use the words from this offset on.
const BITS_AT: usize = 2048;

/// One step of a workload, independent of the handles a run gets back.
#[derive(Clone, Debug)]
enum Step {
    Bytes {
        block: u64,
        slot: usize,
        width: usize,
        deps: Vec<usize>,
    },
    Bit {
        block: u64,
        bit: usize,
        deps: Vec<usize>,
    },
    Empty {
        deps: Vec<usize>,
        held: bool,
    },
    AddDep {
        empty: usize,
        dep: usize,
    },
    Release {
        empty: usize,
    },
    WriteRound {
        limit: usize,
    },
    Flush,
}

fn workload(seed: u64, len: usize) -> Vec<Step> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut steps = Vec::new();
    let mut ops: Vec<usize> = Vec::new(); // step indices that are operations
    let mut held: Vec<usize> = Vec::new();
    let mut next_bit = vec![0usize; BLOCKS as usize];
    while steps.len() < len {
        let deps: Vec<usize> = if ops.is_empty() {
            vec![]
        } else {
            (0..rng.gen_range(0..3))
                .map(|_| ops[rng.gen_range(0..ops.len())])
                .collect()
        };
        let block = rng.gen_range(0..BLOCKS);
        let step = match rng.gen_range(0..100) {
            0..=44 => {
                let width = rng.gen_range(1..=2);
                Step::Bytes {
                    block,
                    slot: rng.gen_range(0..=SLOTS - width),
                    width,
                    deps,
                }
            }
            45..=59 => {
                let bit = next_bit[block as usize];
                next_bit[block as usize] += 1;
                Step::Bit { block, bit, deps }
            }
            60..=64 => Step::Empty { deps, held: false },
            65..=67 => Step::Empty { deps, held: true },
            68..=71 if !held.is_empty() && !ops.is_empty() => Step::AddDep {
                empty: held[rng.gen_range(0..held.len())],
                dep: ops[rng.gen_range(0..ops.len())],
            },
            72..=74 if !held.is_empty() => Step::Release {
                empty: held.swap_remove(rng.gen_range(0..held.len())),
            },
            75..=89 => Step::WriteRound {
                limit: rng.gen_range(1..=4),
            },
            _ => Step::Flush,
        };
        match &step {
            Step::Bytes { .. } | Step::Bit { .. } => ops.push(steps.len()),
            Step::Empty { held: h, .. } => {
                ops.push(steps.len());
                if *h {
                    held.push(steps.len());
                }
            }
            _ => {}
        }
        steps.push(step);
    }
    for e in held {
        steps.push(Step::Release { empty: e });
    }
    steps
}

/// What a run leaves behind for checking.
struct Run {
    /// Declared dependencies of each step (grown by successful AddDep).
    deps: Vec<Vec<usize>>,
    /// (flush's log position, steps committed when it returned).
    flushes: Vec<(usize, Vec<usize>)>,
    base: Arc<[u8]>,
    log: Log,
    final_image: Vec<u8>,
}

fn execute(steps: &[Step], opts: Optimizations) -> Run {
    execute_with(steps, opts, CacheConfig::default().max_blocks)
}

/// Runs a workload with a cache of `max_blocks` blocks (a small cache makes
/// write-back evict and reload blocks between rounds).
fn execute_with(steps: &[Step], opts: Optimizations, max_blocks: usize) -> Run {
    let mem = MemDevice::new(BS, BLOCKS).unwrap();
    let rec = Arc::new(RecordingDevice::with_base(mem, vec![0; BS * BLOCKS as usize]).unwrap());
    let cfg = CacheConfig {
        optimizations: opts,
        check_invariants: true,
        max_blocks,
        ..CacheConfig::default()
    };
    let mut cache = PatchCache::new(rec.clone(), cfg);
    let mut handles: Vec<Option<PatchId>> = vec![None; steps.len()];
    let mut deps: Vec<Vec<usize>> = vec![Vec::new(); steps.len()];
    let mut flushes = Vec::new();
    let flags = PatchFlags::default();
    for (i, step) in steps.iter().enumerate() {
        let resolve =
            |d: &[usize]| -> Vec<PatchId> { d.iter().filter_map(|&x| handles[x]).collect() };
        match step {
            Step::Bytes {
                block,
                slot,
                width,
                deps: d,
            } => {
                let mut data = Vec::new();
                for _ in 0..*width {
                    data.extend_from_slice(&(i as u32 + 1).to_le_bytes());
                }
                handles[i] = Some(
                    cache
                        .create_byte(BlockNo(*block), slot * 4, &data, &resolve(d), flags)
                        .unwrap(),
                );
                deps[i] = d.clone();
            }
            Step::Bit {
                block,
                bit,
                deps: d,
            } => {
                let off = BITS_AT + bit / 32 * 4;
                handles[i] = Some(
                    cache
                        .create_bit(BlockNo(*block), off, 1 << (bit % 32), &resolve(d), flags)
                        .unwrap(),
                );
                deps[i] = d.clone();
            }
            Step::Empty { deps: d, held } => {
                let r = resolve(d);
                handles[i] = Some(
                    if *held {
                        cache.create_held(&r)
                    } else {
                        cache.create_empty(&r)
                    }
                    .unwrap(),
                );
                deps[i] = d.clone();
            }
            Step::AddDep { empty, dep } => {
                let (e, d) = (handles[*empty].unwrap(), handles[*dep].unwrap());
                let closes_cycle = reaches(&deps, *dep, *empty);
                match cache.add_dependency(e, d) {
                    Ok(()) => {
                        assert!(!closes_cycle, "a dependency closing a cycle was accepted");
                        deps[*empty].push(*dep);
                    }
                    Err(PatchError::Cycle { .. } | PatchError::BlockCycle { .. }) => {}
                    Err(PatchError::NotEmpty(_)) => {
                        assert!(cache.is_committed(e) || cache.resolve(e) != Some(e))
                    }
                    Err(other) => panic!("add_dependency: {other}"),
                }
            }
            Step::Release { empty } => cache.release(handles[*empty].unwrap()).unwrap(),
            Step::WriteRound { limit } => {
                cache.write_round(*limit).unwrap();
            }
            Step::Flush => {
                cache.flush().unwrap();
                let committed = (0..=i)
                    .filter(|&j| handles[j].is_some_and(|h| cache.is_committed(h)))
                    .collect();
                flushes.push((rec.log().len() - 1, committed));
            }
        }
        if std::env::var("TRACE").is_ok() {
            eprintln!("{i}: {step:?} -> {:?}", handles[i]);
        }
        cache
            .check_graph()
            .unwrap_or_else(|e| panic!("after step {i} {step:?}: {e}"));
    }
    if let Err(e) = cache.sync() {
        panic!("sync failed: {e}\n{}", cache.to_dot());
    }
    assert_eq!(
        cache.stats().live_patches,
        0,
        "everything committed after sync"
    );
    Run {
        deps,
        flushes,
        base: rec.base(),
        log: rec.log(),
        final_image: rec.inner().snapshot(),
    }
}

/// Does step `from` depend, through declared dependencies, on step `to`?
fn reaches(deps: &[Vec<usize>], from: usize, to: usize) -> bool {
    let mut stack = vec![from];
    let mut seen = vec![false; deps.len()];
    while let Some(x) = stack.pop() {
        if x == to {
            return true;
        }
        if !std::mem::replace(&mut seen[x], true) {
            stack.extend(&deps[x]);
        }
    }
    false
}

fn slot(image: &[u8], block: u64, slot: usize) -> u32 {
    let at = block as usize * BS + slot * 4;
    u32::from_le_bytes(image[at..at + 4].try_into().unwrap())
}

/// Whether step `i`'s change is on disk in `image` (empty patches: whether
/// everything they depend on is).
fn visible(
    steps: &[Step],
    deps: &[Vec<usize>],
    image: &[u8],
    i: usize,
    memo: &mut [Option<bool>],
) -> bool {
    if let Some(v) = memo[i] {
        return v;
    }
    let v = match &steps[i] {
        Step::Bytes {
            block,
            slot: s,
            width,
            ..
        } => (0..*width).all(|k| slot(image, *block, s + k) > i as u32),
        Step::Bit { block, bit, .. } => {
            let at = *block as usize * BS + BITS_AT + bit / 32 * 4;
            u32::from_le_bytes(image[at..at + 4].try_into().unwrap()) & (1 << (bit % 32)) != 0
        }
        Step::Empty { .. } => deps[i]
            .iter()
            .all(|&d| visible(steps, deps, image, d, memo)),
        _ => true,
    };
    memo[i] = Some(v);
    v
}

fn check_image(
    steps: &[Step],
    run: &Run,
    image: &[u8],
    committed_prefix: usize,
) -> Result<(), String> {
    let mut memo = vec![None; steps.len()];
    for (i, step) in steps.iter().enumerate() {
        if let Step::Bytes {
            block,
            slot: s,
            width,
            ..
        } = step
        {
            for k in 0..*width {
                let v = slot(image, *block, s + k);
                let wrote = v == 0
                    || matches!(steps.get(v as usize - 1), Some(Step::Bytes { block: b, slot: s2, width: w, .. })
                        if b == block && (*s2..s2 + w).contains(&(s + k)));
                if !wrote {
                    return Err(format!(
                        "block {block} slot {} holds {v}, which no step wrote there",
                        s + k
                    ));
                }
            }
        }
        if matches!(step, Step::Bytes { .. } | Step::Bit { .. })
            && visible(steps, &run.deps, image, i, &mut memo)
        {
            for &d in &run.deps[i] {
                if !visible(steps, &run.deps, image, d, &mut memo) {
                    return Err(format!(
                        "disk safety: step {i} is on disk but its dependency {d} is not"
                    ));
                }
            }
        }
    }
    for (pos, committed) in &run.flushes {
        if *pos <= committed_prefix {
            if let Some(&i) = committed
                .iter()
                .find(|&&i| !visible(steps, &run.deps, image, i, &mut memo))
            {
                return Err(format!(
                    "durability: step {i} was committed by the flush at {pos} but is missing"
                ));
            }
        }
    }
    Ok(())
}

fn check_all_crashes(seed: u64, steps: &[Step], run: &Run) -> usize {
    let opts = Enumerate {
        max_states: 64,
        seed,
        torn: None,
    };
    let mut builder = ImageBuilder::new(&run.base, &run.log).unwrap();
    let mut n = 0;
    for state in crash_states(&run.log, &opts).unwrap() {
        let image = builder.build(&state).unwrap();
        if let Err(e) = check_image(steps, run, &image, state.committed.0) {
            panic!("seed {seed}: crash state {state:?}: {e}");
        }
        n += 1;
    }
    n
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_crash_image_is_safe_with_all_optimizations(seed in any::<u64>()) {
        let steps = workload(seed, 120);
        let run = execute(&steps, Optimizations::ALL);
        prop_assert!(check_all_crashes(seed, &steps, &run) > 0);
    }

    #[test]
    fn every_crash_image_is_safe_with_prompt_rounds(seed in any::<u64>()) {
        let steps = workload(seed, 120);
        let run = execute(&steps, Optimizations::STITCH);
        prop_assert!(check_all_crashes(seed, &steps, &run) > 0);
    }

    #[test]
    fn a_tiny_cache_with_prompt_rounds_stays_safe(seed in any::<u64>()) {
        let steps = workload(seed, 120);
        let run = execute_with(&steps, Optimizations::STITCH, 2);
        check_all_crashes(seed, &steps, &run);
    }

    #[test]
    fn every_crash_image_is_safe_without_optimizations(seed in any::<u64>()) {
        let steps = workload(seed, 120);
        let run = execute(&steps, Optimizations::NONE);
        check_all_crashes(seed, &steps, &run);
    }

    #[test]
    fn a_tiny_cache_evicts_between_rounds_and_stays_safe(seed in any::<u64>()) {
        let steps = workload(seed, 120);
        let reference = execute(&steps, Optimizations::ALL).final_image;
        let run = execute_with(&steps, Optimizations::ALL, 2);
        prop_assert!(run.final_image == reference, "seed {}: evictions changed the disk", seed);
        check_all_crashes(seed, &steps, &run);
    }

    #[test]
    fn every_setting_leaves_the_same_final_disk(seed in any::<u64>()) {
        let steps = workload(seed, 150);
        let reference = execute(&steps, Optimizations::NONE).final_image;
        let mut settings: Vec<(&str, Optimizations)> = Optimizations::figure9().to_vec();
        settings.push(("no ready lists", Optimizations { ready_lists: false, ..Optimizations::ALL }));
        settings.push(("hard merging without soft-to-hard", Optimizations { soft_to_hard: false, ..Optimizations::ALL }));
        settings.push(("hard patches without merging", Optimizations { hard_patches: true, ..Optimizations::NONE }));
        settings.push(("prompt rounds (stitchfs's default)", Optimizations::STITCH));
        for (name, opts) in settings {
            let run = execute(&steps, opts);
            prop_assert!(run.final_image == reference, "seed {}: {} differs", seed, name);
            check_all_crashes(seed, &steps, &run);
        }
    }
}

#[test]
fn a_held_patch_holds_write_back_until_released() {
    let dev = Arc::new(MemDevice::new(BS, 4).unwrap());
    let mut cache = PatchCache::new(dev.clone(), CacheConfig::default());
    let e = cache.create_held(&[]).unwrap();
    let p = cache
        .create_byte(BlockNo(1), 0, &[7; 8], &[e], PatchFlags::default())
        .unwrap();
    assert!(matches!(
        cache.sync(),
        Err(PatchError::HeldBack { held: 1 })
    ));
    assert!(!cache.is_committed(p));
    let c = cache
        .create_byte(BlockNo(2), 0, &[9; 8], &[], PatchFlags::default())
        .unwrap();
    cache.add_dependency(e, c).unwrap();
    cache.release(e).unwrap();
    cache.sync_patch(p).unwrap();
    assert!(cache.is_committed(c) && cache.is_committed(p));
    assert_eq!(&dev.snapshot()[BS..BS + 8], &[7; 8]);
}

#[test]
fn add_dependency_refuses_a_cycle() {
    let dev = Arc::new(MemDevice::new(BS, 4).unwrap());
    let mut cache = PatchCache::new(dev, CacheConfig::default());
    let e = cache.create_held(&[]).unwrap();
    let p = cache
        .create_byte(BlockNo(1), 0, &[1; 4], &[e], PatchFlags::default())
        .unwrap();
    assert!(matches!(
        cache.add_dependency(e, p),
        Err(PatchError::Cycle { .. })
    ));
    assert!(matches!(
        cache.add_dependency(p, e),
        Err(PatchError::NotEmpty(_))
    ));
    cache.check_graph().unwrap();
}
