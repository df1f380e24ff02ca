//! The journal mode: soft-updates patches become JBD2 transactions
//! (Featherstitch §3.4 Figure 2c and §6.2; the log format is ext3's, so
//! `e2fsck` and the kernel replay what we leave, see `stitch_format::jbd2`).
//!
//! A transaction's life:
//!
//! 1. **Running.** Every metadata patch diskfs makes (and, with data mode
//!    `journal`, every data patch) is created depending only on the
//!    transaction's *hold*, an empty patch held in memory; the soft-updates
//!    dependencies diskfs stated are dropped, because the transaction makes
//!    its changes atomic. All patches of a transaction share one merge epoch,
//!    so within it a block's changes merge into one hard patch (no undo
//!    data), and they never merge with another transaction's.
//!    Unjournaled data patches (data modes `writeback`, `ordered`) keep no
//!    dependencies; `ordered` remembers them for the commit.
//! 2. **Commit** (at an operation boundary, when asked or when the running
//!    transaction is old or big): a copy of each changed block goes into the
//!    log behind descriptor blocks, then revoke records, then a commit block
//!    that depends on the revoke blocks, on the whole previous transaction
//!    (transactions commit in sequence), and in `ordered` mode on the
//!    transaction's data patches, but not on the descriptors and copies:
//!    those are written with it, in one device flush, and the checksum
//!    tells a torn transaction (`ASYNC_COMMIT`). The hold then depends on
//!    the whole transaction (every log block and the commit) and is
//!    released: the home writes may go.
//! 3. **Checkpoint.** Home writes are sent to the device once every
//!    [`JournalConfig::home_writes_every`] committing syncs (and after a big
//!    transaction's), so most fsyncs flush their log only.
//!    Once every home write of the oldest transactions is
//!    durable, the journal superblock's tail moves past them (lazily: when
//!    log space is needed, at `sync` and at unmount), and log blocks written
//!    into the freed space depend on that superblock write.
//!
//! Log space is reserved before a commit writes anything; when the log is
//! full the commit waits (writing home blocks of the oldest transactions and
//! moving the tail) rather than overwrite a live transaction.
//!
//! Revokes: a block whose copy is still in the live log and that is now
//! written as unjournaled data gets a revoke record in the running
//! transaction, so replay never puts the old copy over the new data (JBD2
//! revokes copies with a sequence up to and including the revoke's own).
//!
//! Checksums: the log uses `COMPAT_CHECKSUM` (a CRC32 of every descriptor
//! and log data block in the commit block) with `ASYNC_COMMIT`. Replay by
//! the kernel, by e2fsck and by us ends at a transaction whose checksum
//! does not match, so a torn transaction is never half replayed, and no
//! later one is replayed either (nothing later was acknowledged: a commit
//! waits for the whole previous transaction).
//!
//! Which data is journaled is a policy ([`DataMode`], [`Journal::journals`]);
//! ccfs's selective data journaling (overwrites journaled, appends home
//! first) will be another arm of it.

mod checkpoint;
mod commit;

use crate::Result;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use stitch_format::jbd2::superblock::features;
use stitch_format::jbd2::{JournalSuperblock, TagFormat};
use stitch_patch::{BlockNo, PatchCache, PatchError, PatchFlags, PatchId, SyncStep};

/// What the journal does with file data.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DataMode {
    /// Data is not journaled and not ordered against metadata.
    Writeback,
    /// Data is not journaled, but a transaction's data reaches its home
    /// before the transaction's commit block (ext3's default).
    Ordered,
    /// Data is journaled with the metadata: every transaction is atomic.
    Journal,
}

impl std::str::FromStr for DataMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "writeback" => Ok(DataMode::Writeback),
            "ordered" => Ok(DataMode::Ordered),
            "journal" => Ok(DataMode::Journal),
            other => Err(format!(
                "unknown data mode {other:?} (writeback, ordered, journal)"
            )),
        }
    }
}

impl std::fmt::Display for DataMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DataMode::Writeback => "writeback",
            DataMode::Ordered => "ordered",
            DataMode::Journal => "journal",
        })
    }
}

/// When the running transaction commits on its own.
#[derive(Clone, Debug)]
pub struct JournalConfig {
    /// Commit a transaction at the first operation boundary after it is this
    /// old (ext3's commit interval).
    pub max_age: Duration,
    /// Commit at the first boundary after the transaction changed this many
    /// blocks; `None` means a quarter of the log (as JBD2).
    pub max_blocks: Option<u32>,
    /// In `ordered` mode, how many of a transaction's data blocks are
    /// journaled (default [`SMALL_DATA`]; 0: none, as ext3).
    pub small_data: u32,
    /// A sync sends the home writes of the transactions it made durable
    /// to the device once every this many syncs that commit (default
    /// [`HOME_WRITES_EVERY`]; 1: after each), with the log of the next.
    /// In between, an fsync's device flush carries its log only.
    pub home_writes_every: u32,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            max_age: Duration::from_secs(5),
            max_blocks: None,
            small_data: SMALL_DATA,
            home_writes_every: HOME_WRITES_EVERY,
        }
    }
}

/// Counters for benchmarks and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Transactions that wrote a commit block.
    pub commits: u64,
    /// Transactions with only unjournaled data (no log record).
    pub data_only: u64,
    /// Log blocks written: descriptors, copies, revoke and commit blocks.
    pub log_blocks: u64,
    /// Block copies in the log.
    pub copies: u64,
    /// Revoke records written.
    pub revokes: u64,
    /// Journal superblock writes moving the tail.
    pub tail_moves: u64,
    /// Commits that had to wait for log space.
    pub space_waits: u64,
}

/// Why the journal refused.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("a transaction of {need} log blocks does not fit a journal of {capacity}")]
    TooBig { need: u32, capacity: u32 },
    #[error("the journal superblock: {0}")]
    Superblock(String),
    /// Writing the journal superblock failed in the cache (the device, or
    /// a stop before it).
    #[error("writing the journal superblock: {0}")]
    Write(#[from] PatchError),
}

struct Running {
    epoch: u32,
    hold: PatchId,
    started: Instant,
    /// Journaled blocks, in first-change order, and as a set.
    blocks: Vec<BlockNo>,
    block_set: FxHashSet<BlockNo>,
    /// The home patches (for the checkpoint).
    homes: FxHashSet<PatchId>,
    /// Unjournaled data patches.
    data: Vec<PatchId>,
    /// Data blocks journaled in `ordered` mode (see [`SMALL_DATA`]).
    small_data: u32,
    revokes: BTreeSet<BlockNo>,
    /// It journals its data whatever the data mode
    /// ([`Journal::journal_data`]).
    journal_data: bool,
}

/// In `ordered` mode, a transaction's first data blocks (up to this many,
/// by default: [`JournalConfig::small_data`])
/// are journaled rather than written home before the commit: the commit of
/// a small fsync (a new file's few blocks) then needs one device flush,
/// not one for the data and one for the log. Journaled data is ordered
/// data and more (it is in the transaction); larger writes go home first
/// as `ordered` says, so the log is not filled with file contents.
pub const SMALL_DATA: u32 = 32;

/// How many syncs share one round of home writes (see
/// [`JournalConfig::home_writes_every`] and [`Journal::sync_patch`]).
pub const HOME_WRITES_EVERY: u32 = 32;

/// A transaction of this many blocks has its home writes sent at once.
const BIG_TRANSACTION: usize = 32;

struct Closed {
    epoch: u32,
    /// Log position and length; `None` for a data-only transaction.
    log: Option<(u32, u32)>,
    seq: u32,
    /// Durable once this commits: the commit block (and unordered data).
    durable: PatchId,
    /// Checkpointed once this commits: every home write.
    homes: PatchId,
    blocks: Vec<BlockNo>,
}

/// The journal's state while mounted in journal mode.
pub struct Journal {
    data: DataMode,
    cfg: JournalConfig,
    /// Logical journal block → file-system block.
    area: Vec<BlockNo>,
    jsb: JournalSuperblock,
    fmt: TagFormat,
    bs: usize,
    /// Next log block to write, and the tail the newest superblock write says.
    head: u32,
    tail: u32,
    /// Sequence the next logged transaction takes.
    next_seq: u32,
    running: Option<Running>,
    closed: VecDeque<Closed>,
    /// The newest superblock write; log blocks wait for it while uncommitted.
    tail_patch: Option<PatchId>,
    prev_commit: Option<PatchId>,
    /// Home block → sequence of its newest copy in the live log.
    live_copies: FxHashMap<BlockNo, u32>,
    /// Operation patches (groups) → epoch of their transaction.
    tx_of: FxHashMap<PatchId, u32>,
    /// Nesting of atomic sections: no commit inside one.
    depth: u32,
    want_commit: bool,
    syncs_since_home_writes: u32,
    /// A round of home writes went out with a commit's log: once a sync
    /// finds its commit durable, the home patches it released go too.
    send_homes: bool,
    last_commit_time: (u64, u32),
    /// The copies of one descriptor's blocks on their way into the log (one
    /// buffer, reused by every commit).
    copies: Vec<u8>,
    stats: JournalStats,
}

/// The block size-independent bytes of the superblock's `sequence` and `start`.
const JSB_SEQ_START: usize = 0x18;

impl Journal {
    /// Prepares the journal of `area` (the journal inode's blocks in logical
    /// order) whose superblock is `jsb`, already replayed (its `start` 0).
    /// Returns the journal and the bytes to write over block 0 of the
    /// journal before the first transaction (features we write, and an empty
    /// log starting at `first`).
    pub fn open(
        cache: &PatchCache,
        area: Vec<BlockNo>,
        mut jsb: JournalSuperblock,
        data: DataMode,
        cfg: JournalConfig,
    ) -> std::result::Result<(Journal, Vec<u8>), JournalError> {
        if jsb.start != 0 {
            return Err(JournalError::Superblock(
                "the journal needs recovery".into(),
            ));
        }
        if (jsb.maxlen as usize) > area.len() || jsb.first == 0 || jsb.first >= jsb.maxlen {
            return Err(JournalError::Superblock(format!(
                "maxlen {} first {} for a journal of {} blocks",
                jsb.maxlen,
                jsb.first,
                area.len()
            )));
        }
        // We write COMPAT_CHECKSUM logs with 32-bit tags and revoke records,
        // and commit blocks without waiting for the log blocks, as the
        // kernel does with journal_async_commit; the journal is empty, so
        // its features may change (the kernel does so at mount).
        jsb.blocktype = stitch_format::jbd2::BlockType::SuperblockV2 as u32;
        jsb.feature_compat = features::COMPAT_CHECKSUM.bit;
        jsb.feature_incompat = features::INCOMPAT_REVOKE.bit | features::INCOMPAT_ASYNC_COMMIT.bit;
        jsb.feature_ro_compat = 0;
        jsb.checksum_type = 0;
        jsb.checksum = 0;
        jsb.start = jsb.first;
        let bs = cache.block_size();
        let mut block = vec![0u8; bs];
        block[..JournalSuperblock::SIZE].copy_from_slice(&jsb.to_bytes());
        let j = Journal {
            data,
            cfg,
            fmt: jsb.tag_format(),
            bs,
            head: jsb.first,
            tail: jsb.first,
            next_seq: jsb.sequence,
            jsb,
            area,
            running: None,
            closed: VecDeque::new(),
            tail_patch: None,
            prev_commit: None,
            live_copies: FxHashMap::default(),
            tx_of: FxHashMap::default(),
            depth: 0,
            want_commit: false,
            syncs_since_home_writes: 0,
            send_homes: false,
            last_commit_time: (0, 0),
            copies: Vec::new(),
            stats: JournalStats::default(),
        };
        Ok((j, block))
    }

    pub fn data_mode(&self) -> DataMode {
        self.data
    }

    pub fn stats(&self) -> JournalStats {
        self.stats.clone()
    }

    /// The journal superblock block (physical), for the final reset.
    pub(crate) fn superblock_block(&self) -> BlockNo {
        self.area[0]
    }

    /// Whether a patch with these flags is journaled (the data policy).
    pub fn journals(&self, flags: PatchFlags) -> bool {
        !flags.data || self.data == DataMode::Journal
    }

    /// The log's blocks in use now (written, not yet checkpointed) and
    /// its capacity.
    pub fn space(&self) -> (u32, u32) {
        (self.used(), self.capacity())
    }

    /// Blocks in the log area, less one kept free so a full log is never
    /// mistaken for an empty one.
    fn capacity(&self) -> u32 {
        self.jsb.maxlen - self.jsb.first - 1
    }

    fn used(&self) -> u32 {
        let span = self.jsb.maxlen - self.jsb.first;
        (self.head + span - self.tail) % span
    }

    fn next_pos(&self, p: u32) -> u32 {
        if p + 1 >= self.jsb.maxlen {
            self.jsb.first
        } else {
            p + 1
        }
    }

    fn max_blocks(&self) -> u32 {
        self.cfg.max_blocks.unwrap_or(self.capacity() / 4).max(1)
    }

    fn ensure_running(&mut self, cache: &mut PatchCache) -> Result<&mut Running> {
        if self.running.is_none() {
            let epoch = cache.merge_epoch() + 1;
            cache.set_merge_epoch(epoch);
            let hold = cache.create_held(&[])?;
            self.running = Some(Running {
                epoch,
                hold,
                started: Instant::now(),
                blocks: Vec::new(),
                block_set: FxHashSet::default(),
                homes: FxHashSet::default(),
                data: Vec::new(),
                small_data: 0,
                revokes: BTreeSet::new(),
                journal_data: false,
            });
        }
        Ok(self.running.as_mut().expect("just made"))
    }

    /// Journals the running transaction's file data, whatever the data
    /// mode, as a stream needs it: a crash then shows all of the
    /// transaction or none of it. A block written in place before the
    /// commit (`writeback`, and `ordered` past its first blocks) would
    /// show a later change before an earlier one committed, or bytes
    /// before the size and name that go with them. Call it before the
    /// changes it should cover.
    pub(crate) fn journal_data(&mut self, cache: &mut PatchCache) -> Result<()> {
        self.ensure_running(cache)?.journal_data = true;
        Ok(())
    }

    /// A change diskfs asks for, transformed: journaled changes wait on the
    /// running transaction's hold; unjournaled data waits on nothing.
    pub(crate) fn change(
        &mut self,
        cache: &mut PatchCache,
        block: BlockNo,
        flags: PatchFlags,
        make: impl FnOnce(&mut PatchCache, &[PatchId]) -> Result<PatchId>,
    ) -> Result<PatchId> {
        let always = self.journals(flags);
        let ordered = self.data == DataMode::Ordered;
        let small = self.cfg.small_data;
        let live_copy = self.live_copies.contains_key(&block);
        let r = self.ensure_running(cache)?;
        let journaled = always
            || r.journal_data
            || (ordered && (r.block_set.contains(&block) || r.small_data < small) && {
                r.small_data += u32::from(!r.block_set.contains(&block));
                true
            });
        if journaled {
            let id = make(cache, &[r.hold])?;
            r.homes.insert(id);
            if r.block_set.insert(block) {
                r.blocks.push(block);
            }
            if r.blocks.len() as u32 >= self.max_blocks() {
                self.want_commit = true;
            }
            Ok(id)
        } else {
            let id = make(cache, &[])?;
            if r.data.last() != Some(&id) {
                r.data.push(id);
            }
            if live_copy && !r.block_set.contains(&block) {
                r.revokes.insert(block);
            }
            Ok(id)
        }
    }

    /// An operation's empty patch: remembered with its transaction, so a
    /// sync of it waits for that transaction's commit only.
    pub(crate) fn group(&mut self, cache: &mut PatchCache, deps: &[PatchId]) -> Result<PatchId> {
        let g = cache.create_empty(deps)?;
        if let Some(r) = &self.running {
            if !cache.is_committed(g) {
                self.tx_of.insert(g, r.epoch);
            }
        }
        Ok(g)
    }

    pub(crate) fn begin_atomic(&mut self) {
        self.depth += 1;
    }

    pub(crate) fn end_atomic(&mut self, cache: &mut PatchCache) -> Result<()> {
        self.depth = self.depth.saturating_sub(1);
        self.boundary(cache)
    }

    /// An operation boundary: commit if the running transaction is due.
    pub(crate) fn boundary(&mut self, cache: &mut PatchCache) -> Result<()> {
        if self.depth > 0 {
            return Ok(());
        }
        let due = self.want_commit
            || self
                .running
                .as_ref()
                .is_some_and(|r| r.started.elapsed() >= self.cfg.max_age);
        if due {
            self.commit(cache)?;
        }
        Ok(())
    }

    /// A point inside a long operation: commit only if the transaction
    /// would otherwise outgrow the log (half of it), since a commit here
    /// splits the operation across two transactions.
    pub(crate) fn safe_point_span(&self) -> u32 {
        (self.capacity() / 8).max(1)
    }

    pub(crate) fn safe_point(&mut self, cache: &mut PatchCache) -> Result<()> {
        let big = self
            .running
            .as_ref()
            .is_some_and(|r| r.blocks.len() as u32 >= self.capacity() / 2);
        if self.depth == 0 && big {
            self.commit(cache)?;
        }
        Ok(())
    }

    /// A boundary between two operations of an atomic section: commit if
    /// the running transaction has reached half the log, splitting the
    /// section there (a batch larger than the log is written as several
    /// transactions, oldest operations first: McoreFS §4.3).
    pub(crate) fn split_point(&mut self, cache: &mut PatchCache) -> Result<()> {
        let big = self
            .running
            .as_ref()
            .is_some_and(|r| r.blocks.len() as u32 >= self.capacity() / 2);
        if big {
            self.commit(cache)?;
        }
        Ok(())
    }

    /// Writes one log block at the head and advances it.
    ///
    /// To the cache a log block is like file data: written once and not
    /// read while mounted. Flagged so, it joins the cache's clean file-data
    /// LRU once written, which each flush cuts to a few hundred blocks. As
    /// metadata it stayed until the whole cache was full: every commit took
    /// fresh memory for its log blocks, and the log crowded out the metadata
    /// later operations read.
    fn write_log(
        &mut self,
        cache: &mut PatchCache,
        bytes: &[u8],
        deps: &[PatchId],
    ) -> Result<PatchId> {
        let at = self.area[self.head as usize];
        let p = cache.create_byte(at, 0, bytes, deps, PatchFlags { data: true })?;
        self.head = self.next_pos(self.head);
        self.stats.log_blocks += 1;
        Ok(p)
    }

    /// A strictly increasing commit time (replay treats a bad checksum on
    /// a commit older than the previous one as the end of the log).
    fn commit_time(&mut self) -> (u64, u32) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut t = (now.as_secs(), now.subsec_nanos());
        if t <= self.last_commit_time {
            let (s, n) = self.last_commit_time;
            t = if n + 1 >= 1_000_000_000 {
                (s + 1, 0)
            } else {
                (s, n + 1)
            };
        }
        self.last_commit_time = t;
        t
    }

    /// Makes `p` durable: commits its transaction (and every earlier one)
    /// and waits for the commit block, not for the home writes.
    pub fn sync_patch(&mut self, cache: &mut PatchCache, p: PatchId) -> Result<()> {
        // Not waiting, the step runs its flushes itself and ends done.
        self.sync_step(cache, p, false).map(|_| ())
    }

    /// One round of [`Journal::sync_patch`] for a caller that runs the
    /// device flush without its lock (see [`PatchCache::sync_step_or_wait`]). The
    /// first round commits `p`'s transaction; later rounds find it closed.
    /// While the previous commit's flush runs in another thread, this one's
    /// log blocks go out and the step says to wait: its commit block
    /// follows the previous commit, and a flush of its own before that
    /// would commit its log blocks only and cost a second flush. Without
    /// `may_wait` the whole sync happens here, flushes included.
    pub fn sync_step(
        &mut self,
        cache: &mut PatchCache,
        p: PatchId,
        may_wait: bool,
    ) -> Result<SyncStep> {
        if cache.is_committed(p) {
            return Ok(SyncStep::Done);
        }
        let epoch = self.tx_of.get(&p).copied();
        let running = self.running.as_ref().map(|r| r.epoch);
        let mut home_writes = false;
        if epoch.is_none() || epoch == running {
            self.commit(cache)?;
            if epoch.is_none() {
                // Remember what this sync waits for, so its later rounds
                // do not commit whatever is running then.
                if let Some(last) = self.closed.back() {
                    self.tx_of.insert(p, last.epoch);
                }
            }
            // Home writes, once every `home_writes_every` syncs that
            // commit: most fsyncs then flush their log only (about ten
            // contiguous blocks), not the log and the previous
            // transaction's home blocks scattered over the disk. The tail
            // moves only past transactions whose home writes are durable,
            // so waiting changes nothing a crash can see.
            self.syncs_since_home_writes += 1;
            home_writes = self.syncs_since_home_writes >= self.cfg.home_writes_every.max(1);
        }
        let target = match self.tx_of.get(&p) {
            Some(&e) => self.closed.iter().find(|c| c.epoch == e),
            None => self.closed.back(),
        };
        let goal = target.map_or(p, |c| c.durable);
        // Waiting is bounded: left on their blocks, committed home patches
        // are another transaction's patches there, and every change the
        // next transaction makes to those blocks becomes a soft patch that
        // scans them (freeing a 100 MB file just written, 25,600 bits in
        // one bitmap, spent a third of the server's time in that scan), so
        // a big transaction's homes go at once.
        let big = target.is_some_and(|c| c.blocks.len() >= BIG_TRANSACTION);
        if home_writes || big {
            // Everything writable, not only what `goal` needs: that takes
            // the home blocks of transactions already committed, in the same
            // device flush as this commit's log.
            self.syncs_since_home_writes = 0;
            self.send_homes = true;
            cache.write_round(usize::MAX)?;
        }
        // Then only what `goal` needs: its log blocks (and ordered data).
        let step = if may_wait {
            cache.sync_step_or_wait(goal)?
        } else {
            cache.sync_patch(goal)?;
            SyncStep::Done
        };
        if matches!(step, SyncStep::Done) && std::mem::take(&mut self.send_homes) {
            // Now durable, the commit released its home patches: send them
            // to the device at once (they commit with the next flush,
            // whoever asks for it) rather than at the next round.
            cache.write_round(usize::MAX)?;
        }
        Ok(step)
    }

    /// Commits, writes every home block, and moves the tail to the head:
    /// the log is empty afterwards.
    pub fn sync(&mut self, cache: &mut PatchCache) -> Result<()> {
        self.commit(cache)?;
        cache.sync()?;
        self.advance_tail(cache)?;
        cache.sync()?;
        Ok(())
    }

    /// After [`Journal::sync`]: the bytes that mark the journal empty
    /// (`start` 0), for unmount.
    pub(crate) fn closing_superblock(&self) -> Vec<u8> {
        let mut jsb = self.jsb.clone();
        jsb.start = 0;
        jsb.sequence = self.next_seq;
        jsb.to_bytes()
    }
}
