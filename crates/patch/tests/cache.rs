//! Behaviour of the patch cache beyond safety: rollback of a block-level
//! cycle (Featherstitch Figure 2b), failures and halts from above latched,
//! back-pressure, eviction, the n+1 write heuristic, precise `sync_patch`,
//! the graph export.

use std::sync::Arc;
use stitch_blockdev::{FaultDevice, FaultKind, MemDevice};
use stitch_patch::{
    BlockNo, CacheConfig, FlushTicket, Optimizations, PatchCache, PatchError, PatchFlags,
    PatchState, Stop, SyncStep, DATA_KEEP, EMPTY_FAN_IN,
};

const BS: usize = 4096;
const META: PatchFlags = PatchFlags { data: false };

fn cache(blocks: u64, cfg: CacheConfig) -> (Arc<MemDevice>, PatchCache) {
    let dev = Arc::new(MemDevice::new(BS, blocks).unwrap());
    (dev.clone(), PatchCache::new(dev, cfg))
}

/// Figure 2b: an append (bitmap b, inode i → b) and, before it commits, a
/// delete whose bitmap change b2 must follow the inode change i2 (rule 2).
/// Bitmap and inode block wait on each other; the cache must roll b2 back
/// and write the bitmap with b alone before the inode block with i.
#[test]
fn a_block_level_cycle_is_broken_by_rolling_back() {
    let (dev, mut c) = cache(8, CacheConfig::default());
    let (bitmap, inodes) = (BlockNo(2), BlockNo(3));
    let b = c.create_bit(bitmap, 0, 1 << 5, &[], META).unwrap();
    let i = c.create_byte(inodes, 0, &[5, 0, 0, 0], &[b], META).unwrap();
    let i2 = c.create_byte(inodes, 128, &[0; 4], &[], META).unwrap();
    let b2 = c.create_bit(bitmap, 0, 1 << 9, &[i2], META).unwrap();
    assert!(
        !c.is_hard(b2),
        "b2 must keep undo data: the inode block waits on its block"
    );
    c.sync().unwrap();
    let s = c.stats();
    assert!(s.reverts >= 1, "b2 was rolled back once: {s:?}");
    // Two rounds: first the bitmap with b (b2 rolled back) and the inode
    // block with i2 (i rolled back: it waits on b), then both blocks whole.
    // Patches that wait on another block stay soft, so nothing ready waits
    // behind them: more block writes, fewer device flushes.
    assert_eq!(s.write_batches, 2, "two rounds: {s:?}");
    assert_eq!(s.blocks_written, 4, "each block twice: {s:?}");
    assert!(c.is_committed(i) && c.is_committed(b2));
    let img = dev.snapshot();
    assert_eq!(
        u32::from_le_bytes(img[2 * BS..2 * BS + 4].try_into().unwrap()),
        (1 << 5) | (1 << 9)
    );
}

#[test]
fn a_failed_write_stops_the_cache_and_loses_nothing_silently() {
    let mem = MemDevice::new(BS, 8).unwrap();
    let dev = Arc::new(FaultDevice::new(mem).unwrap());
    let mut c = PatchCache::new(dev.clone(), CacheConfig::default());
    let p = c.create_byte(BlockNo(1), 0, &[1; 16], &[], META).unwrap();
    dev.fail_nth_write(1, FaultKind::Io);
    assert!(matches!(c.sync(), Err(PatchError::Device(_))));
    assert_eq!(
        c.state(p),
        PatchState::Uncommitted,
        "a failed write commits nothing"
    );
    // Every later call that would write refuses, naming the first failure
    // and its kind.
    assert!(matches!(
        c.flush(),
        Err(PatchError::Stopped {
            cause: Stop::Device,
            ..
        })
    ));
    assert!(matches!(
        c.create_byte(BlockNo(2), 0, &[1], &[], META),
        Err(PatchError::Stopped { .. })
    ));
    assert!(matches!(c.sync(), Err(PatchError::Stopped { why, .. }) if why.contains("I/O")));
}

/// A halt from the layer above (a state its file system cannot be in)
/// stops the cache as a failure does: what it held never reaches the
/// device, and every later call says why.
#[test]
fn a_halt_from_above_writes_nothing_more() {
    let (dev, mut c) = cache(8, CacheConfig::default());
    let p = c.create_byte(BlockNo(1), 0, &[1; 16], &[], META).unwrap();
    c.halt("a count below zero".into());
    c.halt("a later reason".into());
    assert_eq!(c.stopped(), Some("a count below zero"));
    assert!(matches!(
        c.sync(),
        Err(PatchError::Stopped { cause: Stop::Halted, why }) if why == "a count below zero"
    ));
    assert!(matches!(
        c.create_byte(BlockNo(2), 0, &[1], &[], META),
        Err(PatchError::Stopped { .. })
    ));
    assert_eq!(c.state(p), PatchState::Uncommitted);
    assert!(
        dev.snapshot().iter().all(|&b| b == 0),
        "the device was written"
    );
}

#[test]
fn a_failed_flush_commits_nothing() {
    let mem = MemDevice::new(BS, 8).unwrap();
    let dev = Arc::new(FaultDevice::new(mem).unwrap());
    let mut c = PatchCache::new(dev.clone(), CacheConfig::default());
    let p = c.create_byte(BlockNo(1), 0, &[1; 16], &[], META).unwrap();
    dev.fail_nth_flush(1, FaultKind::NoSpace);
    assert_eq!(c.write_round(10).unwrap(), 1);
    assert!(c.flush().is_err());
    assert_eq!(
        c.state(p),
        PatchState::InFlight,
        "not durable, so not committed"
    );
    assert!(c.sync_patch(p).is_err());
}

#[test]
fn writers_wait_for_write_back_past_the_dirty_bound() {
    let cfg = CacheConfig {
        max_dirty_blocks: 16,
        ..CacheConfig::default()
    };
    let (dev, mut c) = cache(256, cfg);
    for n in 0..100 {
        c.create_byte(BlockNo(n), 0, &[n as u8; 8], &[], META)
            .unwrap();
        assert!(
            c.dirty_blocks() <= 16,
            "dirty blocks {} past the bound",
            c.dirty_blocks()
        );
    }
    assert!(c.stats().backpressure_waits > 0);
    assert!(dev.stats().flushes > 0);
}

#[test]
fn clean_blocks_are_evicted_least_recently_used_first() {
    let cfg = CacheConfig {
        max_blocks: 4,
        ..CacheConfig::default()
    };
    let (_, mut c) = cache(64, cfg);
    for n in 0..4 {
        c.read(BlockNo(n)).unwrap();
    }
    c.read(BlockNo(0)).unwrap(); // 0 is now the most recent
    c.read(BlockNo(10)).unwrap(); // evicts 1, the least recent
    let reads = c.stats().blocks_read;
    c.read(BlockNo(0)).unwrap();
    assert_eq!(c.stats().blocks_read, reads, "block 0 stayed cached");
    c.read(BlockNo(1)).unwrap();
    assert_eq!(c.stats().blocks_read, reads + 1, "block 1 was evicted");
    assert!(c.stats().evictions >= 2 && c.stats().cached_blocks <= 4);
}

#[test]
fn dirty_blocks_are_never_evicted() {
    let cfg = CacheConfig {
        max_blocks: 2,
        max_dirty_blocks: 100,
        ..CacheConfig::default()
    };
    let (dev, mut c) = cache(64, cfg);
    for n in 0..10 {
        c.create_byte(BlockNo(n), 0, &[7; 4], &[], META).unwrap();
    }
    c.sync().unwrap();
    for n in 0..10u64 {
        assert_eq!(dev.snapshot()[n as usize * BS], 7, "block {n} lost");
    }
}

/// File contents are cached above the patch cache (memfs), so once written
/// they are not kept beyond a few: a 100 MB file must not leave 100 MB of
/// copies here. Metadata blocks stay cached as before.
#[test]
fn written_file_data_is_evicted_and_metadata_kept() {
    const DATA: PatchFlags = PatchFlags { data: true };
    let n = DATA_KEEP as u64 + 100;
    let (dev, mut c) = cache(n + 64, CacheConfig::default());
    for b in 0..n {
        c.create_byte(BlockNo(b), 0, &[9; BS], &[], DATA).unwrap();
    }
    for b in n..n + 10 {
        c.create_byte(BlockNo(b), 0, &[5; 4], &[], META).unwrap();
    }
    c.sync().unwrap();
    let s = c.stats();
    assert_eq!(s.cached_blocks, DATA_KEEP as u64 + 10, "{s:?}");
    assert_eq!(s.evictions, 100, "{s:?}");
    let reads = s.blocks_read;
    for b in n..n + 10 {
        c.read(BlockNo(b)).unwrap();
    }
    assert_eq!(c.stats().blocks_read, reads, "metadata stayed cached");
    // The most recently written data stayed; the oldest is read back intact.
    c.read(BlockNo(n - 1)).unwrap();
    assert_eq!(c.stats().blocks_read, reads);
    assert_eq!(c.read(BlockNo(0)).unwrap(), &[9; BS][..]);
    assert_eq!(c.stats().blocks_read, reads + 1);
    assert_eq!(dev.snapshot()[(n as usize - 1) * BS], 9);
}

/// File data read once stays out of the way: `read_data` keeps at most
/// `DATA_KEEP` such blocks and never evicts metadata for them.
#[test]
fn data_read_once_is_bounded_and_leaves_metadata_cached() {
    let n = DATA_KEEP as u64 + 300;
    let (_dev, mut c) = cache(n + 64, CacheConfig::default());
    for b in n..n + 10 {
        c.create_byte(BlockNo(b), 0, &[5; 4], &[], META).unwrap();
    }
    c.sync().unwrap();
    for b in 0..n {
        assert_eq!(c.read_data(BlockNo(b)).unwrap(), &[0; BS][..]);
    }
    let s = c.stats();
    assert_eq!(s.cached_blocks, DATA_KEEP as u64 + 10, "{s:?}");
    let reads = s.blocks_read;
    for b in n..n + 10 {
        assert_eq!(&c.read(BlockNo(b)).unwrap()[..4], &[5; 4]);
    }
    assert_eq!(c.stats().blocks_read, reads, "metadata stayed cached");
    // The latest data is still cached; a read of it is no read of the device.
    c.read_data(BlockNo(n - 1)).unwrap();
    assert_eq!(c.stats().blocks_read, reads);
    // A metadata block read as data stays where it was, and stays cached.
    c.read_data(BlockNo(n)).unwrap();
    for b in 0..DATA_KEEP as u64 {
        c.read_data(BlockNo(b)).unwrap();
    }
    c.read(BlockNo(n)).unwrap();
    assert_eq!(c.stats().blocks_read, reads + DATA_KEEP as u64);
}

/// `write_back_over` streams: past the bound it writes what it may and
/// flushes; under it, it does nothing; what must wait still waits.
#[test]
fn write_back_over_writes_only_past_the_bound_and_only_what_may_go() {
    let (dev, mut c) = cache(64, CacheConfig::default());
    let held = c.create_held(&[]).unwrap();
    let free = c.create_byte(BlockNo(1), 0, &[1; 4], &[], META).unwrap();
    let waits = c
        .create_byte(BlockNo(2), 0, &[2; 4], &[held], META)
        .unwrap();
    c.write_back_over(2).unwrap();
    assert_eq!(dev.stats().write_batches, 0, "two dirty blocks, bound 2");
    c.write_back_over(1).unwrap();
    assert_eq!(c.state(free), PatchState::Committed);
    assert_eq!(c.state(waits), PatchState::Uncommitted);
    assert_eq!(
        dev.snapshot()[2 * BS],
        0,
        "block 2 waits for the held patch"
    );
    assert_eq!(c.dirty_blocks(), 1);
}

/// After a try that left more than the bound dirty (what stayed could not
/// go), `write_back_over` does not scan and write again at the very next
/// call: it waits until another quarter of the bound has become dirty.
#[test]
fn write_back_over_waits_for_another_slice_before_trying_again() {
    let (dev, mut c) = cache(64, CacheConfig::default());
    let held = c.create_held(&[]).unwrap();
    for b in 0..20 {
        c.create_byte(BlockNo(b), 0, &[1; 4], &[held], META)
            .unwrap();
    }
    c.write_back_over(16).unwrap();
    assert_eq!(dev.stats().write_batches, 0, "nothing could go");
    let first = c.create_byte(BlockNo(30), 0, &[2; 4], &[], META).unwrap();
    c.write_back_over(16).unwrap();
    assert_eq!(
        c.state(first),
        PatchState::Uncommitted,
        "21 dirty: not 20 + 16/4 yet"
    );
    for b in 31..34 {
        c.create_byte(BlockNo(b), 0, &[2; 4], &[], META).unwrap();
    }
    c.write_back_over(16).unwrap();
    assert_eq!(c.state(first), PatchState::Committed, "24 dirty: a try");
    assert_eq!(c.dirty_blocks(), 20);
    // Under the bound, the next excess is tried at once.
    c.release(held).unwrap();
    c.sync().unwrap();
    for b in 0..17 {
        c.create_byte(BlockNo(b), 0, &[3; 4], &[], META).unwrap();
    }
    c.write_back_over(16).unwrap();
    assert_eq!(c.dirty_blocks(), 0);
}

/// An empty patch over many patches waits on them through a tree of empty
/// patches of fan-in [`EMPTY_FAN_IN`] (one patch waiting on thousands cost
/// a shift of its whole list at each of their commits), and means what one
/// wide patch would: it commits with the last of them, not before.
#[test]
fn a_wide_group_is_a_tree_that_commits_with_its_last_member() {
    let (_dev, mut c) = cache(4096, CacheConfig::default());
    let (gate, last) = (c.create_held(&[]).unwrap(), c.create_held(&[]).unwrap());
    let mut members: Vec<_> = (1..3000)
        .map(|b| {
            c.create_byte(BlockNo(b), 0, &[1; 4], &[gate], META)
                .unwrap()
        })
        .collect();
    let late = c
        .create_byte(BlockNo(3000), 0, &[2; 4], &[last], META)
        .unwrap();
    members.insert(1234, late);
    let group = c.create_empty(&members).unwrap();
    assert!(
        c.widest_empty_wait() <= EMPTY_FAN_IN,
        "an empty patch waits on {} directly",
        c.widest_empty_wait()
    );
    c.check_graph().unwrap();
    c.release(gate).unwrap();
    while c.write_round(usize::MAX).unwrap() > 0 {
        c.flush().unwrap();
    }
    c.flush().unwrap();
    let left: Vec<_> = members
        .iter()
        .filter(|&&m| c.state(m) != PatchState::Committed)
        .collect();
    assert_eq!(left, [&late], "all but the held member committed");
    assert_eq!(c.state(group), PatchState::Uncommitted);
    c.check_graph().unwrap();
    c.release(last).unwrap();
    c.sync().unwrap();
    assert_eq!(c.state(group), PatchState::Committed);
    c.check_graph().unwrap();
}

#[test]
fn a_round_follows_fifo_order_extended_by_n_plus_1() {
    let (dev, mut c) = cache(64, CacheConfig::default());
    // Dirty in the order 10, 30, 11. FIFO alone would pick 10 and 30; the
    // n+1 heuristic (§6.3) takes 11 right after 10, so one round of two
    // blocks writes 10 and 11, and 30 waits for the next round.
    let p10 = c.create_byte(BlockNo(10), 0, &[1; 4], &[], META).unwrap();
    let p30 = c.create_byte(BlockNo(30), 0, &[1; 4], &[], META).unwrap();
    let p11 = c.create_byte(BlockNo(11), 0, &[1; 4], &[], META).unwrap();
    assert_eq!(c.write_round(2).unwrap(), 2, "the limit counts blocks");
    assert_eq!(c.state(p10), PatchState::InFlight);
    assert_eq!(c.state(p11), PatchState::InFlight);
    assert_eq!(c.state(p30), PatchState::Uncommitted);
    c.flush().unwrap();
    assert_eq!(dev.stats().write_batches, 1);
    c.sync().unwrap();
    assert_eq!(c.stats().blocks_written, 3);
}

#[test]
fn sync_patch_writes_only_what_the_patch_needs() {
    let (_, mut c) = cache(64, CacheConfig::default());
    let a = c.create_byte(BlockNo(1), 0, &[1; 4], &[], META).unwrap();
    let b = c.create_byte(BlockNo(2), 0, &[2; 4], &[a], META).unwrap();
    for n in 10..20 {
        c.create_byte(BlockNo(n), 0, &[3; 4], &[], META).unwrap();
    }
    c.sync_patch(b).unwrap();
    assert!(c.is_committed(a) && c.is_committed(b));
    assert_eq!(c.stats().blocks_written, 2, "the ten unrelated blocks wait");
    assert_eq!(c.dirty_blocks(), 10);
}

#[test]
fn handles_of_merged_patches_follow_the_merge_until_commit() {
    let (_, mut c) = cache(8, CacheConfig::default());
    let d = c.create_byte(BlockNo(1), 0, &[0; 8], &[], META).unwrap();
    let i = c.create_byte(BlockNo(2), 0, &[1; 4], &[d], META).unwrap();
    // Overlaps d, which block 2 waits on: not hard, merges into d (§4.3).
    let d2 = c.create_byte(BlockNo(1), 0, &[9; 8], &[], META).unwrap();
    assert_eq!(c.resolve(d2), c.resolve(d));
    assert_eq!(c.stats().merged_overlap, 1);
    c.sync_patch(i).unwrap();
    assert!(c.is_committed(d2) && c.is_committed(d));
}

#[test]
fn bad_requests_are_errors_not_panics() {
    let (_, mut c) = cache(8, CacheConfig::default());
    assert!(matches!(
        c.create_byte(BlockNo(1), 4090, &[0; 8], &[], META),
        Err(PatchError::OutOfBlock { .. })
    ));
    assert!(matches!(
        c.create_byte(BlockNo(1), 0, &[], &[], META),
        Err(PatchError::OutOfBlock { .. })
    ));
    assert!(matches!(
        c.create_bit(BlockNo(1), 4094, 1, &[], META),
        Err(PatchError::OutOfBlock { .. })
    ));
    assert!(matches!(
        c.create_byte(BlockNo(99), 0, &[0; 8], &[], META),
        Err(PatchError::OutOfRange { .. })
    ));
    let p = c.create_byte(BlockNo(1), 0, &[1], &[], META).unwrap();
    assert!(matches!(c.release(p), Err(PatchError::NotHeld(_))));
    c.check_graph().unwrap();
}

#[test]
fn the_graph_exports_as_dot() {
    let (_, mut c) = cache(
        8,
        CacheConfig {
            optimizations: Optimizations::NONE,
            ..CacheConfig::default()
        },
    );
    let a = c.create_byte(BlockNo(1), 0, &[1; 4], &[], META).unwrap();
    let e = c.create_held(&[a]).unwrap();
    let b = c.create_byte(BlockNo(2), 0, &[1; 4], &[e], META).unwrap();
    let dot = c.to_dot();
    assert!(dot.starts_with("digraph"));
    assert!(dot.contains("cluster_1") && dot.contains("cluster_2"));
    assert!(
        dot.contains(&format!("\"{b}\" -> \"{e}\""))
            && dot.contains(&format!("\"{e}\" -> \"{a}\""))
    );
    assert!(dot.contains("held"));
}

/// The summary by block: blocks as nodes with their patches counted,
/// one arrow per pair of groups, and blocks past the bound as one node.
#[test]
fn the_graph_summarised_by_block() {
    let (_, mut c) = cache(
        8,
        CacheConfig {
            optimizations: Optimizations::NONE,
            ..CacheConfig::default()
        },
    );
    let a = c.create_byte(BlockNo(1), 0, &[1; 4], &[], META).unwrap();
    let a2 = c.create_byte(BlockNo(1), 8, &[1; 4], &[], META).unwrap();
    let e = c.create_held(&[a, a2]).unwrap();
    c.create_byte(BlockNo(2), 0, &[1; 4], &[e], META).unwrap();
    c.create_byte(BlockNo(3), 0, &[1; 4], &[a], META).unwrap();
    let dot = c.to_dot_by_block(2);
    assert!(dot.contains("\"b1\" [label=\"block 1\\n2 patches"), "{dot}");
    assert!(dot.contains("\"empty\" -> \"b1\" [label=\"2\"]"), "{dot}");
    // Blocks 2 and 3 hold one patch each: the one ranked lower (3) goes
    // with the others.
    assert!(dot.contains("\"b2\" -> \"empty\" [label=\"1\"]"), "{dot}");
    assert!(dot.contains("\"other\" -> \"b1\" [label=\"1\"]"), "{dot}");
    assert!(dot.contains("1 other blocks"), "{dot}");
}

#[test]
fn patch_memory_is_counted() {
    let (_, mut c) = cache(
        8,
        CacheConfig {
            optimizations: Optimizations::NONE,
            ..CacheConfig::default()
        },
    );
    c.create_byte(BlockNo(1), 0, &[1; 4096], &[], META).unwrap();
    assert!(c.patch_memory() >= 4096, "undo data counts");
}

/// The journal's transactions: a patch of a new merge epoch never merges
/// into one of an older epoch, however mergeable, so an older transaction's
/// home write never waits on a newer one's commit.
#[test]
fn patches_of_different_merge_epochs_never_merge() {
    let (_dev, mut c) = cache(8, CacheConfig::default());
    let hold1 = c.create_held(&[]).unwrap();
    let a = c
        .create_byte(BlockNo(1), 0, &[1; 8], &[hold1], META)
        .unwrap();
    let a2 = c
        .create_byte(BlockNo(1), 4, &[2; 8], &[hold1], META)
        .unwrap();
    assert_eq!(c.resolve(a), c.resolve(a2), "one epoch: merged");
    c.set_merge_epoch(1);
    let hold2 = c.create_held(&[]).unwrap();
    let b = c
        .create_byte(BlockNo(1), 0, &[3; 8], &[hold2], META)
        .unwrap();
    assert_ne!(c.resolve(a), c.resolve(b), "two epochs: kept apart");
    let b2 = c
        .create_byte(BlockNo(1), 2, &[4; 2], &[hold2], META)
        .unwrap();
    assert_eq!(
        c.resolve(b),
        c.resolve(b2),
        "the new epoch merges with itself"
    );
    // Releasing the first hold writes the first epoch's patch alone, with
    // the second rolled back.
    c.release(hold1).unwrap();
    c.sync_patch(a).unwrap();
    assert!(c.is_committed(a) && !c.is_committed(b));
    c.release(hold2).unwrap();
    c.sync().unwrap();
    c.check_graph().unwrap();
}

/// A mode tells data from metadata by the flag; a merge must not hide it.
#[test]
fn patches_with_different_flags_never_merge() {
    let (_dev, mut c) = cache(8, CacheConfig::default());
    let data = PatchFlags { data: true };
    let d = c.create_byte(BlockNo(1), 0, &[1; 64], &[], data).unwrap();
    let m = c.create_byte(BlockNo(1), 32, &[2; 64], &[], META).unwrap();
    assert_ne!(c.resolve(d), c.resolve(m));
    assert_eq!(c.flags(d), Some(data));
    assert_eq!(c.flags(m), Some(META));
    let m2 = c.create_byte(BlockNo(1), 40, &[3; 8], &[], META).unwrap();
    assert_eq!(c.resolve(m), c.resolve(m2), "same flags still merge");
    c.sync().unwrap();
    c.check_graph().unwrap();
}

/// The flush a sync step asks for (the test fails if it asks for another).
fn flush_of(step: SyncStep) -> FlushTicket {
    match step {
        SyncStep::Flush(t) => t,
        SyncStep::Done => panic!("asked to flush, the step says done"),
        SyncStep::Wait => panic!("asked to flush, the step says wait"),
    }
}

/// A flush run outside the cache (another thread writing meanwhile)
/// commits only what was written before it began: a later write waits for
/// a later flush, and a dependency on it keeps its dependent back.
#[test]
fn a_flush_ticket_commits_only_what_was_written_before_it() {
    let (_dev, mut c) = cache(8, CacheConfig::default());
    let a = c.create_byte(BlockNo(1), 0, &[1; 16], &[], META).unwrap();
    let first = c.sync_step(a).unwrap().expect("a is not durable yet");
    // While the first flush runs, another write goes out.
    let b = c.create_byte(BlockNo(2), 0, &[2; 16], &[], META).unwrap();
    let second = c.sync_step(b).unwrap().expect("b is not durable yet");
    let r = first.flush();
    c.flushed(first, r).unwrap();
    assert!(c.is_committed(a), "written before the ticket: committed");
    assert_eq!(
        c.state(b),
        PatchState::InFlight,
        "written after it: not yet"
    );
    let r = second.flush();
    c.flushed(second, r).unwrap();
    assert!(c.is_committed(b));
    // An earlier ticket ended late commits nothing twice and breaks nothing.
    let d = c.create_byte(BlockNo(3), 0, &[3; 16], &[], META).unwrap();
    let early = c.flush_ticket().unwrap();
    let late = c.sync_step(d).unwrap().unwrap();
    let r = late.flush();
    c.flushed(late, r).unwrap();
    assert!(c.is_committed(d));
    let r = early.flush();
    c.flushed(early, r).unwrap();
    assert!(c.sync_step(d).unwrap().is_none());
    c.check_graph().unwrap();
}

/// A sync whose patch waits on blocks a running ticket covers is told to
/// wait for that flush rather than run one of its own, which would commit
/// only part of what it needs; so is one whose whole closure is already in
/// flight under it. One that needs something no running ticket covers
/// still flushes beside it.
#[test]
fn a_sync_step_waits_for_a_running_flush_that_covers_what_it_needs() {
    let (_dev, mut c) = cache(8, CacheConfig::default());
    let a = c.create_byte(BlockNo(1), 0, &[1; 16], &[], META).unwrap();
    let first = flush_of(c.sync_step_or_wait(a).unwrap());
    // b must follow a, which is in flight under `first`.
    let b = c.create_byte(BlockNo(2), 0, &[2; 16], &[a], META).unwrap();
    assert!(matches!(c.sync_step_or_wait(b).unwrap(), SyncStep::Wait));
    assert_eq!(c.state(b), PatchState::Uncommitted, "b went before a");
    // a itself is all in flight under `first`: waiting serves it too.
    assert!(matches!(c.sync_step_or_wait(a).unwrap(), SyncStep::Wait));
    // Independent of a: its own flush, beside the running one.
    let e = c.create_byte(BlockNo(4), 0, &[4; 16], &[], META).unwrap();
    let beside = flush_of(c.sync_step_or_wait(e).unwrap());
    let r = first.flush();
    c.flushed(first, r).unwrap();
    assert!(c.is_committed(a));
    let second = flush_of(c.sync_step_or_wait(b).unwrap());
    let r = second.flush();
    c.flushed(second, r).unwrap();
    assert!(c.is_committed(b) && c.is_committed(e));
    let r = beside.flush();
    c.flushed(beside, r).unwrap();
    // With no ticket running, never a wait.
    let f = c.create_byte(BlockNo(5), 0, &[5; 16], &[b], META).unwrap();
    let own = flush_of(c.sync_step_or_wait(f).unwrap());
    let r = own.flush();
    c.flushed(own, r).unwrap();
    assert!(matches!(c.sync_step_or_wait(f).unwrap(), SyncStep::Done));
    c.check_graph().unwrap();
}

/// A whole block from a page its caller keeps: the block takes the page
/// itself (no copy) and the device gets its bytes; a later change to the
/// block copies it first, so the caller's page never changes; once written,
/// the block lets the page go, so the caller can reuse it.
#[test]
fn a_shared_page_is_the_block_until_it_changes_or_is_written() {
    let (dev, mut c) = cache(8, CacheConfig::default());
    let data = PatchFlags { data: true };
    let page = Arc::new(vec![7u8; BS]);
    c.create_byte_shared(BlockNo(3), &page, &[], data).unwrap();
    assert_eq!(Arc::strong_count(&page), 2, "the block holds the page");
    assert_eq!(c.read(BlockNo(3)).unwrap(), &page[..]);
    c.create_byte(BlockNo(3), 10, &[1, 2, 3], &[], data)
        .unwrap();
    assert_eq!(&page[..], &[7u8; BS][..], "the caller's page was changed");
    assert_eq!(Arc::strong_count(&page), 1, "the change copied the page");

    let other = Arc::new(vec![9u8; BS]);
    c.create_byte_shared(BlockNo(4), &other, &[], data).unwrap();
    c.sync().unwrap();
    let img = dev.snapshot();
    let mut want = vec![7u8; BS];
    want[10..13].copy_from_slice(&[1, 2, 3]);
    assert_eq!(&img[3 * BS..4 * BS], &want[..]);
    assert_eq!(&img[4 * BS..5 * BS], &other[..]);
    assert_eq!(Arc::strong_count(&other), 1, "a clean block kept the page");
    assert_eq!(
        c.read(BlockNo(4)).unwrap(),
        &other[..],
        "read back from disk"
    );

    let short = Arc::new(vec![1u8; BS / 2]);
    assert!(matches!(
        c.create_byte_shared(BlockNo(5), &short, &[], data),
        Err(PatchError::OutOfBlock { .. })
    ));
}
