//! The journal mode's shapes, seen through the patch cache and a recording
//! device: what reaches the disk before what.

use std::sync::Arc;
use stitch_blockdev::record::LogEntry;
use stitch_blockdev::{MemDevice, RecordingDevice};
use stitch_modes::{Consistency, DataMode, JournalConfig, JournalSuperblock, Modes};
use stitch_patch::{BlockNo, CacheConfig, PatchCache, PatchFlags, SyncStep};

const BS: usize = 4096;
const META: PatchFlags = PatchFlags { data: false };
const DATA: PatchFlags = PatchFlags { data: true };
const AREA: std::ops::Range<u64> = 1000..2024;

fn journaled(data: DataMode) -> (Arc<RecordingDevice<MemDevice>>, Modes) {
    // Ordered data unjournaled (ext3's way): these tests are about that path.
    journaled_in(
        data,
        JournalConfig {
            small_data: 0,
            ..Default::default()
        },
    )
}

fn journaled_in(data: DataMode, cfg: JournalConfig) -> (Arc<RecordingDevice<MemDevice>>, Modes) {
    let mem = MemDevice::new(BS, 4096).unwrap();
    let rec = Arc::new(RecordingDevice::new(mem).unwrap());
    let cache = PatchCache::new(rec.clone(), CacheConfig::default());
    let mut m = Modes::new(cache, Consistency::Journal(data));
    let jsb = JournalSuperblock::new_v2(BS as u32, 1024, [9; 16]);
    let area = AREA.map(BlockNo).collect();
    m.start_journal(area, jsb, cfg).unwrap();
    (rec, m)
}

/// Log positions of the writes of `block`.
fn writes_of(rec: &RecordingDevice<MemDevice>, block: u64) -> Vec<usize> {
    rec.log()
        .entries()
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            LogEntry::Write { block: b, .. } if b.0 == block => Some(i),
            _ => None,
        })
        .collect()
}

fn flush_between(rec: &RecordingDevice<MemDevice>, a: usize, b: usize) -> bool {
    rec.log().entries()[a..b]
        .iter()
        .any(|e| matches!(e, LogEntry::Flush { .. }))
}

/// Every write of `block` (a journaled block's home) comes after a commit
/// block's write and a device flush after it: it went home only once a
/// commit was durable. (A sync sends the home writes its commit released
/// right after that flush; they are not held back further.)
fn home_only_after_commit(rec: &RecordingDevice<MemDevice>, block: u64) -> bool {
    let log = rec.log();
    let entries = log.entries();
    let is_commit = |e: &LogEntry| {
        matches!(e, LogEntry::Write { block: b, data }
            if AREA.contains(&b.0) && data[..8] == [0xC0, 0x3B, 0x39, 0x98, 0, 0, 0, 2])
    };
    writes_of(rec, block).into_iter().all(|w| {
        let commit = entries[..w].iter().rposition(is_commit);
        commit.is_some_and(|c| flush_between(rec, c, w))
    })
}

/// With the default configuration a small ordered fsync journals its data:
/// the data's home write waits for the commit, and the log and commit go
/// out with one flush before the sync returns.
#[test]
fn small_ordered_data_is_journaled_and_costs_one_flush() {
    let mem = MemDevice::new(BS, 4096).unwrap();
    let rec = Arc::new(RecordingDevice::new(mem).unwrap());
    let cache = PatchCache::new(rec.clone(), CacheConfig::default());
    let mut m = Modes::new(cache, Consistency::Journal(DataMode::Ordered));
    let jsb = JournalSuperblock::new_v2(BS as u32, 1024, [9; 16]);
    m.start_journal(AREA.map(BlockNo).collect(), jsb, JournalConfig::default())
        .unwrap();
    m.sync().unwrap();
    let before = rec.log().len();
    let d = m.byte(BlockNo(50), 0, &[7; 4096], &[], DATA).unwrap();
    let i = m.byte(BlockNo(20), 128, &[1; 64], &[d], META).unwrap();
    let op = m.group(&[d, i]).unwrap();
    m.sync_patch(op).unwrap();
    assert!(
        home_only_after_commit(&rec, 50),
        "the data went home before the commit"
    );
    let flushes = rec.log().entries()[before..]
        .iter()
        .filter(|e| matches!(e, LogEntry::Flush { .. }))
        .count();
    assert_eq!(flushes, 1, "log blocks and commit in one flush");
    let s = m.journal().unwrap().stats();
    assert_eq!(s.copies, 2, "both blocks are in the log: {s:?}");
}

#[test]
fn ordered_data_is_durable_before_the_commit_block() {
    let (rec, mut m) = journaled(DataMode::Ordered);
    let d = m.byte(BlockNo(50), 0, &[7; 4096], &[], DATA).unwrap();
    let i = m.byte(BlockNo(20), 128, &[1; 64], &[d], META).unwrap();
    let op = m.group(&[d, i]).unwrap();
    m.sync_patch(op).unwrap();
    assert!(m.cache().is_committed(d), "fsync left the data behind");
    assert!(!m.cache().is_committed(i), "the home write need not wait");
    // Log: superblock, descriptor, copy of block 20, commit.
    let data_w = writes_of(&rec, 50)[0];
    let commit_w = writes_of(&rec, AREA.start + 3)[0];
    assert!(
        flush_between(&rec, data_w, commit_w),
        "the commit block may reach the disk before the data"
    );
    m.sync().unwrap();
    let home = writes_of(&rec, 20)[0];
    assert!(
        flush_between(&rec, commit_w, home),
        "home write before commit"
    );
}

/// A transaction with more data blocks than one patch waits on directly
/// (`EMPTY_FAN_IN`): its commit block still reaches the disk only after
/// every one of them is durable.
#[test]
fn ordered_commit_waits_for_every_data_block_of_a_wide_transaction() {
    let (rec, mut m) = journaled(DataMode::Ordered);
    let n = 3 * stitch_patch::EMPTY_FAN_IN as u64 + 7;
    let data: Vec<_> = (0..n)
        .map(|k| {
            m.byte(BlockNo(100 + k), 0, &[k as u8; BS], &[], DATA)
                .unwrap()
        })
        .collect();
    let i = m.byte(BlockNo(20), 128, &[1; 64], &data, META).unwrap();
    let mut all = data.clone();
    all.push(i);
    let op = m.group(&all).unwrap();
    m.sync_patch(op).unwrap();
    let log = rec.log();
    let entries = log.entries();
    let commit = entries
        .iter()
        .position(|e| {
            matches!(e, LogEntry::Write { block: b, data }
                if AREA.contains(&b.0) && data[..8] == [0xC0, 0x3B, 0x39, 0x98, 0, 0, 0, 2])
        })
        .expect("a commit block was written");
    drop(log);
    for k in 0..n {
        let w = writes_of(&rec, 100 + k);
        assert!(
            w.first().is_some_and(|&w| flush_between(&rec, w, commit)),
            "data block {} was not durable before the commit block",
            100 + k
        );
    }
}

#[test]
fn writeback_fsync_still_makes_data_durable() {
    let (_rec, mut m) = journaled(DataMode::Writeback);
    let d = m.byte(BlockNo(50), 0, &[7; 4096], &[], DATA).unwrap();
    let i = m.byte(BlockNo(20), 128, &[1; 64], &[d], META).unwrap();
    let op = m.group(&[d, i]).unwrap();
    m.sync_patch(op).unwrap();
    assert!(m.cache().is_committed(d));
}

#[test]
fn data_journal_mode_copies_data_into_the_log() {
    let (rec, mut m) = journaled(DataMode::Journal);
    let d = m.byte(BlockNo(50), 0, &[7; 4096], &[], DATA).unwrap();
    let op = m.group(&[d]).unwrap();
    m.sync_patch(op).unwrap();
    assert!(
        home_only_after_commit(&rec, 50),
        "data went home before its commit"
    );
    assert_eq!(rec.log().entries().iter().filter(|e| matches!(e, LogEntry::Write { block, data } if block.0 == AREA.start + 2 && data[0] == 7)).count(), 1, "no copy of the data in the log");
    let s = m.journal().unwrap().stats();
    assert_eq!((s.commits, s.copies), (1, 1));
}

#[test]
fn a_block_starting_with_the_journal_magic_is_escaped() {
    let (rec, mut m) = journaled(DataMode::Ordered);
    let mut block = vec![0u8; BS];
    block[..4].copy_from_slice(&0xC03B_3998u32.to_be_bytes());
    block[4] = 1;
    let i = m.byte(BlockNo(20), 0, &block, &[], META).unwrap();
    m.sync_patch(i).unwrap();
    let copy = rec
        .log()
        .entries()
        .iter()
        .find_map(|e| match e {
            LogEntry::Write { block, data } if block.0 == AREA.start + 2 => Some(data.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        &copy[..5],
        &[0, 0, 0, 0, 1],
        "the copy must not look like a journal block"
    );
}

#[test]
fn transactions_never_merge_and_commit_in_sequence() {
    let (rec, mut m) = journaled(DataMode::Ordered);
    let a = m.byte(BlockNo(20), 0, &[1; 8], &[], META).unwrap();
    let ga = m.group(&[a]).unwrap();
    m.commit().unwrap();
    let b = m.byte(BlockNo(20), 0, &[2; 8], &[], META).unwrap();
    let gb = m.group(&[b]).unwrap();
    assert_ne!(m.cache().resolve(a), m.cache().resolve(b));
    m.sync_patch(gb).unwrap();
    assert!(m.cache().is_committed(ga) || !m.cache().is_committed(a));
    let s = m.journal().unwrap().stats();
    assert_eq!(s.commits, 2);
    // Second commit block after the first one's flush.
    let c1 = writes_of(&rec, AREA.start + 3)[0];
    let c2 = writes_of(&rec, AREA.start + 6)[0];
    assert!(flush_between(&rec, c1, c2));
}

#[test]
fn a_full_log_waits_for_checkpoints_and_wraps() {
    let (_rec, mut m) = journaled(DataMode::Ordered);
    // 300 transactions of 10 blocks each: three laps of a 1023-block log.
    for t in 0..300u64 {
        let mut ps = Vec::new();
        for k in 0..10u64 {
            ps.push(
                m.byte(
                    BlockNo(10 + (t * 10 + k) % 900),
                    0,
                    &[t as u8; 16],
                    &[],
                    META,
                )
                .unwrap(),
            );
        }
        let g = m.group(&ps).unwrap();
        m.commit().unwrap();
        // An occasional fsync (its first round also takes the home blocks
        // of earlier transactions, so frequent ones would keep the log
        // from ever filling).
        if t % 97 == 0 {
            m.sync_patch(g).unwrap();
        }
    }
    m.sync().unwrap();
    let s = m.journal().unwrap().stats();
    assert_eq!(s.commits, 300);
    assert!(s.log_blocks > 3 * 1023, "the log did not wrap: {s:?}");
    assert!(s.space_waits > 0 && s.tail_moves > 0, "{s:?}");
    m.cache().check_graph().unwrap();
}

/// A block whose copy is in the live log and is then written as
/// unjournaled data gets a revoke record, so replay never puts the old
/// copy over the new data.
#[test]
fn data_over_a_journaled_block_is_revoked() {
    use stitch_format::jbd2::recovery::recover;
    use stitch_format::JournalBlockNo;
    let (rec, mut m) = journaled(DataMode::Ordered);
    let i = m.byte(BlockNo(20), 0, &[0xAB; 4096], &[], META).unwrap();
    let g = m.group(&[i]).unwrap();
    m.sync_patch(g).unwrap();
    // The block is freed and reused as file data (diskfs's business).
    let d = m.byte(BlockNo(20), 0, &[7; 4096], &[], DATA).unwrap();
    let g = m.group(&[d]).unwrap();
    m.sync_patch(g).unwrap();
    assert_eq!(m.journal().unwrap().stats().revokes, 1);
    // A crash now: the log still holds the old copy.
    let img = rec.inner().snapshot();
    let read = |n: JournalBlockNo| -> Result<Vec<u8>, String> {
        let at = (AREA.start + u64::from(n.0)) as usize * BS;
        Ok(img[at..at + BS].to_vec())
    };
    let jsb =
        JournalSuperblock::decode(&read(JournalBlockNo(0)).unwrap(), BS as u32, 1024).unwrap();
    let r = recover(&jsb, read).unwrap();
    assert_eq!(r.transactions, 2);
    assert!(r.revoked >= 1);
    assert!(
        !r.blocks.contains_key(&BlockNo(20)),
        "replay would put the old metadata over the new data"
    );
    assert_eq!(&img[20 * BS..20 * BS + 4], &[7; 4]);
}

/// Group commit: fsyncs of operations that arrived before one commit are
/// all served by it.
#[test]
fn one_commit_serves_every_earlier_fsync() {
    let (_rec, mut m) = journaled(DataMode::Ordered);
    let mut ops = Vec::new();
    for k in 0..10u64 {
        let p = m
            .byte(BlockNo(20 + k), 0, &[k as u8; 32], &[], META)
            .unwrap();
        ops.push(m.group(&[p]).unwrap());
    }
    for g in ops {
        m.sync_patch(g).unwrap();
    }
    assert_eq!(m.journal().unwrap().stats().commits, 1);
}

/// The age trigger: a transaction older than `max_age` commits at the next
/// operation boundary; inside an atomic section nothing commits.
#[test]
fn an_old_transaction_commits_at_the_next_boundary() {
    let mem = MemDevice::new(BS, 4096).unwrap();
    let cache = PatchCache::new(Arc::new(mem), CacheConfig::default());
    let mut m = Modes::new(cache, Consistency::Journal(DataMode::Ordered));
    let jsb = JournalSuperblock::new_v2(BS as u32, 1024, [9; 16]);
    let cfg = JournalConfig {
        max_age: std::time::Duration::ZERO,
        ..Default::default()
    };
    m.start_journal(AREA.map(BlockNo).collect(), jsb, cfg)
        .unwrap();
    m.begin_atomic();
    for k in 0..3u64 {
        let p = m.byte(BlockNo(20 + k), 0, &[1; 8], &[], META).unwrap();
        m.group(&[p]).unwrap();
    }
    assert_eq!(
        m.journal().unwrap().stats().commits,
        0,
        "committed inside an atomic section"
    );
    m.end_atomic().unwrap();
    assert_eq!(m.journal().unwrap().stats().commits, 1);
    let p = m.byte(BlockNo(30), 0, &[1; 8], &[], META).unwrap();
    m.group(&[p]).unwrap();
    assert_eq!(m.journal().unwrap().stats().commits, 2);
}

/// A transaction with only unjournaled data writes no log record, but a
/// sync of it still waits for every earlier transaction's commit.
#[test]
fn a_data_only_sync_covers_earlier_transactions() {
    let (rec, mut m) = journaled(DataMode::Ordered);
    let i = m.byte(BlockNo(20), 0, &[1; 8], &[], META).unwrap();
    let gi = m.group(&[i]).unwrap();
    m.commit().unwrap();
    let d = m.byte(BlockNo(50), 0, &[7; 4096], &[], DATA).unwrap();
    let gd = m.group(&[d]).unwrap();
    m.sync_patch(gd).unwrap();
    let s = m.journal().unwrap().stats();
    assert_eq!((s.commits, s.data_only), (1, 1));
    let commit = writes_of(&rec, AREA.start + 3);
    assert!(
        !commit.is_empty() && flush_between(&rec, commit[0], rec.log().len()),
        "the earlier commit block is not durable after the sync"
    );
    // The earlier transaction is durable: its commit block committed (the
    // home write of block 20 may still wait).
    m.sync_patch(gi).unwrap();
    assert_eq!(
        m.journal().unwrap().stats().commits,
        1,
        "no new commit was needed"
    );
}

/// The log is written once and not read while mounted, so its blocks leave
/// the cache soon after they are written: a run of small fsyncs keeps the
/// cache at its few home blocks and the clean file-data LRU's
/// [`DATA_KEEP`](stitch_patch::DATA_KEEP) blocks, however many log blocks it
/// wrote. Kept as metadata, every log block stayed until the whole cache was
/// full, taking fresh memory at each commit and crowding out metadata.
#[test]
fn log_blocks_do_not_stay_in_the_cache() {
    let (_rec, mut m) = journaled(DataMode::Ordered);
    for t in 0..300u64 {
        let p = m
            .byte(BlockNo(10 + t % 4), 0, &[t as u8; 16], &[], META)
            .unwrap();
        let g = m.group(&[p]).unwrap();
        m.sync_patch(g).unwrap();
    }
    let log_blocks = m.journal().unwrap().stats().log_blocks;
    let cached = m.cache().stats().cached_blocks;
    assert!(log_blocks >= 900, "three log blocks per sync: {log_blocks}");
    assert!(
        cached <= stitch_patch::DATA_KEEP as u64 + 16,
        "{cached} blocks cached after {log_blocks} log blocks"
    );
    m.cache().check_graph().unwrap();
}

/// Two fsyncs from two threads, each running its flush outside the lock
/// (as memfs does): while the first commit's flush runs, the second
/// transaction's log blocks go out and its sync waits rather than flushes.
/// Its commit block goes only after the first flush ended (it must follow
/// the first commit); the two syncs cost two flushes, not three.
#[test]
fn a_sync_behind_a_running_commit_writes_its_log_and_waits() {
    sync_behind_a_running_commit(JournalConfig::default().home_writes_every);
}

/// The same when each sync also sends home writes: their round goes out
/// with the log, and no flush of its own runs beside the other's.
#[test]
fn a_home_writes_sync_behind_a_running_commit_waits_too() {
    sync_behind_a_running_commit(1);
}

fn sync_behind_a_running_commit(home_writes_every: u32) {
    let cfg = JournalConfig {
        small_data: 0,
        home_writes_every,
        ..Default::default()
    };
    let (rec, mut m) = journaled_in(DataMode::Ordered, cfg);
    let setup = rec.log().len();
    let a = m.byte(BlockNo(20), 0, &[1; 32], &[], META).unwrap();
    let ga = m.group(&[a]).unwrap();
    let SyncStep::Flush(first) = m.sync_step(ga).unwrap() else {
        panic!("the first commit is not waiting for its flush");
    };
    let b = m.byte(BlockNo(21), 0, &[2; 32], &[], META).unwrap();
    let gb = m.group(&[b]).unwrap();
    let before = rec.log().len();
    assert!(matches!(m.sync_step(gb).unwrap(), SyncStep::Wait));
    let log = rec.log();
    let sent: Vec<u64> = log.entries()[before..]
        .iter()
        .map(|e| match e {
            LogEntry::Write { block, .. } => block.0,
            LogEntry::Flush { .. } => panic!("flushed beside the running commit"),
        })
        .collect();
    assert_eq!(
        sent,
        [AREA.start + 4, AREA.start + 5],
        "the second transaction's descriptor and copy, without its commit"
    );
    drop(log);
    let r = first.flush();
    m.flushed(first, r).unwrap();
    assert!(
        matches!(m.sync_step(ga).unwrap(), SyncStep::Done),
        "the first commit is not durable after its flush"
    );
    let SyncStep::Flush(second) = m.sync_step(gb).unwrap() else {
        panic!("the second commit is not waiting for its flush");
    };
    assert_eq!(writes_of(&rec, AREA.start + 6).len(), 1, "no commit block");
    let r = second.flush();
    m.flushed(second, r).unwrap();
    assert!(matches!(m.sync_step(gb).unwrap(), SyncStep::Done));
    let flushes = rec.log().entries()[setup..]
        .iter()
        .filter(|e| matches!(e, LogEntry::Flush { .. }))
        .count();
    assert_eq!(flushes, 2);
}
