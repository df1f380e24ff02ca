//! Consistency modes: how the dependencies diskfs states reach the patch
//! cache (docs/design.md "Consistency modes"; Featherstitch §6.2).
//!
//! diskfs always states soft-updates dependencies. A mode rewrites them
//! without knowing what the patches mean beyond their data/metadata flag:
//! - `SoftUpdates` passes them through;
//! - `Async` drops every dependency (the control case: after a crash
//!   anything may be on disk in any order);
//! - `Journal` turns them into JBD2 transactions ([`journal`]).
//!
//! Architecture invariant: this crate knows patches and flags, never the
//! ext2 layout (diskfs hands the journal its blocks), and sits strictly
//! between diskfs and the patch cache.

pub mod journal;

// FAULT INJECTION (feature `fault-injection`, crash tests only).
#[cfg(feature = "fault-injection")]
pub mod fault;

pub use journal::{DataMode, Journal, JournalConfig, JournalError, JournalStats};
pub use stitch_format::jbd2::JournalSuperblock;
use stitch_patch::{
    BlockNo, DevError, FlushTicket, PatchCache, PatchFlags, PatchId, Result, SyncStep,
};

/// Which dependency transform is in force.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Consistency {
    /// No ordering at all (Featherstitch's asynchronous mode).
    Async,
    /// The soft-updates rules, as diskfs states them.
    SoftUpdates,
    /// JBD2 transactions, with this treatment of file data.
    Journal(DataMode),
}

impl std::fmt::Display for Consistency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Consistency::Async => f.write_str("async"),
            Consistency::SoftUpdates => f.write_str("softupdates"),
            Consistency::Journal(d) => write!(f, "journal (data={d})"),
        }
    }
}

impl std::str::FromStr for Consistency {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "async" => Ok(Consistency::Async),
            "softupdates" | "soft-updates" => Ok(Consistency::SoftUpdates),
            "journal" => Ok(Consistency::Journal(DataMode::Ordered)),
            other => match other.strip_prefix("journal-") {
                Some(d) => Ok(Consistency::Journal(d.parse()?)),
                None => Err(format!(
                    "unknown consistency mode {other:?} (async, softupdates, journal, \
                     journal-writeback, journal-ordered, journal-journal)"
                )),
            },
        }
    }
}

/// The patch cache seen through a consistency mode.
///
/// In `Journal` consistency, patches pass through unchanged (as in soft
/// updates) until [`Modes::start_journal`], and again after
/// [`Modes::stop_journal`]: mount and unmount write the superblocks that
/// way, outside any transaction.
pub struct Modes {
    cache: PatchCache,
    consistency: Consistency,
    journal: Option<Journal>,
    /// Dirty blocks a batch may leave in the cache at a split point before
    /// the cache writes back: [`STREAM_BYTES`], or an eighth of a small
    /// device (so tests on small images stream too).
    stream_dirty: usize,
    /// Soft updates' order for a batch that carries streams: see
    /// [`Modes::ordered`].
    chain: Chain,
}

/// A chain of operations in soft updates: while `open`, every patch made
/// depends on `tail` (an empty patch standing for everything made before
/// the last link), and is noted in `since` for the next link. The tail
/// outlives the batch, so the next ordered batch comes after this one's
/// every patch too (a handle to a committed patch is no dependency).
#[derive(Default)]
struct Chain {
    open: bool,
    tail: Option<PatchId>,
    since: Vec<PatchId>,
}

/// Bytes of dirty blocks a batch may leave in the cache at a split point
/// before the cache writes back.
pub const STREAM_BYTES: usize = 16 << 20;

impl Modes {
    pub fn new(cache: PatchCache, consistency: Consistency) -> Self {
        let dev = cache.device();
        let stream_dirty = (STREAM_BYTES / dev.block_size())
            .min(usize::try_from(dev.num_blocks() / 8).unwrap_or(usize::MAX))
            .max(16);
        Modes {
            cache,
            consistency,
            journal: None,
            stream_dirty,
            chain: Chain::default(),
        }
    }

    /// Starts journaling into `area` (the journal's blocks in logical
    /// order) whose replayed superblock is `jsb`: writes the superblock
    /// with an empty log and makes it durable. Patches made before this
    /// call must already be durable or independent of the journal.
    pub fn start_journal(
        &mut self,
        area: Vec<BlockNo>,
        jsb: JournalSuperblock,
        cfg: JournalConfig,
    ) -> std::result::Result<(), JournalError> {
        let Consistency::Journal(data) = self.consistency else {
            return Err(JournalError::Superblock(format!(
                "consistency {} has no journal",
                self.consistency
            )));
        };
        let (j, block) = Journal::open(&self.cache, area, jsb, data, cfg)?;
        let at = j.superblock_block();
        let sb = self
            .cache
            .create_byte(at, 0, &block, &[], PatchFlags::default())?;
        self.cache.sync_patch(sb)?;
        self.journal = Some(j);
        Ok(())
    }

    /// Commits and checkpoints everything, marks the log empty in the
    /// journal superblock, makes it durable and stops journaling.
    pub fn stop_journal(&mut self) -> Result<()> {
        let Some(mut j) = self.journal.take() else {
            return Ok(());
        };
        j.sync(&mut self.cache)?;
        let bytes = j.closing_superblock();
        let p =
            self.cache
                .create_byte(j.superblock_block(), 0, &bytes, &[], PatchFlags::default())?;
        self.cache.sync_patch(p)
    }

    /// The journal, while journaling.
    pub fn journal(&self) -> Option<&Journal> {
        self.journal.as_ref()
    }

    pub fn consistency(&self) -> Consistency {
        self.consistency
    }

    /// The dependencies this mode keeps of those diskfs stated (the
    /// journal replaces them instead, see [`journal`]).
    fn keep<'a>(&self, deps: &'a [PatchId]) -> &'a [PatchId] {
        match self.consistency {
            Consistency::Async => &[],
            Consistency::SoftUpdates | Consistency::Journal(_) => deps,
        }
    }

    /// A change to `block` made by `make` (given the dependencies to use):
    /// through the journal's transaction in journal modes, else with the
    /// dependencies this mode keeps of `deps`.
    fn on_block(
        &mut self,
        block: BlockNo,
        deps: &[PatchId],
        flags: PatchFlags,
        make: impl FnOnce(&mut PatchCache, &[PatchId]) -> Result<PatchId>,
    ) -> Result<PatchId> {
        if let Some(j) = &mut self.journal {
            return j.change(&mut self.cache, block, flags, make);
        }
        let deps = self.keep(deps);
        if !self.chain.open {
            return make(&mut self.cache, deps);
        }
        let mut all = deps.to_vec();
        all.extend(self.chain.tail);
        let p = make(&mut self.cache, &all)?;
        self.chain.since.push(p);
        Ok(p)
    }

    pub fn byte(
        &mut self,
        block: BlockNo,
        offset: usize,
        data: &[u8],
        deps: &[PatchId],
        flags: PatchFlags,
    ) -> Result<PatchId> {
        self.on_block(block, deps, flags, |c, d| {
            c.create_byte(block, offset, data, d, flags)
        })
    }

    /// [`byte`](Self::byte) of a whole block from a page the caller keeps
    /// sharing ([`PatchCache::create_byte_shared`]: no copy).
    pub fn byte_shared(
        &mut self,
        block: BlockNo,
        page: &std::sync::Arc<Vec<u8>>,
        deps: &[PatchId],
        flags: PatchFlags,
    ) -> Result<PatchId> {
        self.on_block(block, deps, flags, |c, d| {
            c.create_byte_shared(block, page, d, flags)
        })
    }

    pub fn bit(
        &mut self,
        block: BlockNo,
        offset: usize,
        mask: u32,
        deps: &[PatchId],
        flags: PatchFlags,
    ) -> Result<PatchId> {
        self.on_block(block, deps, flags, |c, d| {
            c.create_bit(block, offset, mask, d, flags)
        })
    }

    /// An empty patch standing for a set of patches: an operation's result.
    /// The end of an operation is a boundary where the journal may commit.
    pub fn group(&mut self, deps: &[PatchId]) -> Result<PatchId> {
        match &mut self.journal {
            Some(j) => {
                let g = j.group(&mut self.cache, deps)?;
                j.boundary(&mut self.cache)?;
                Ok(g)
            }
            None => self.cache.create_empty(deps),
        }
    }

    /// The running batch carries streams, which need every crash to leave
    /// a prefix of each. With a journal the batch is one transaction:
    /// its data is journaled too, whatever the data mode (all of it or
    /// none after a crash). In soft updates the batch's operations are
    /// chained, each after the one before, until [`Modes::end_atomic`]:
    /// every patch made depends on an empty patch standing for all the
    /// patches made before the last [`Modes::split_point`] (and before
    /// the previous ordered batch). The chain costs no write; it only
    /// holds patches back, and some blocks get written twice. Async keeps
    /// no order, this one neither.
    pub fn ordered(&mut self) -> Result<()> {
        match &mut self.journal {
            Some(j) => j.journal_data(&mut self.cache),
            None => {
                self.chain.open = self.consistency == Consistency::SoftUpdates;
                Ok(())
            }
        }
    }

    /// The empty patch standing for every patch chained so far (soft
    /// updates, once an ordered batch made any).
    pub fn chain_tail(&self) -> Option<PatchId> {
        self.chain.tail
    }

    /// A link of the chain: what is made from now on comes after what was
    /// made before.
    fn chain_link(&mut self) -> Result<()> {
        if self.chain.since.is_empty() {
            return Ok(());
        }
        let mut deps = std::mem::take(&mut self.chain.since);
        deps.extend(self.chain.tail);
        self.chain.tail = Some(self.cache.create_empty(&deps)?);
        Ok(())
    }

    /// Opens an atomic section: the journal commits nothing until the
    /// matching [`Modes::end_atomic`] (a batch of operations becomes one
    /// transaction). Sections nest.
    pub fn begin_atomic(&mut self) {
        if let Some(j) = &mut self.journal {
            j.begin_atomic();
        }
    }

    pub fn end_atomic(&mut self) -> Result<()> {
        if self.chain.open {
            self.chain_link()?;
            self.chain.open = false;
        }
        match &mut self.journal {
            Some(j) => j.end_atomic(&mut self.cache),
            None => Ok(()),
        }
    }

    /// A point inside a long operation (between the blocks of a large
    /// write) where the journal may commit if the transaction would
    /// otherwise outgrow the log.
    pub fn safe_point(&mut self) -> Result<()> {
        match &mut self.journal {
            Some(j) => j.safe_point(&mut self.cache),
            None => Ok(()),
        }
    }

    /// How many blocks a long operation may change between two safe points:
    /// in journal mode an eighth of the log, so the transaction a safe point
    /// leaves running (under half the log) always fits; otherwise no limit.
    pub fn safe_point_span(&self) -> u64 {
        match &self.journal {
            Some(j) => u64::from(j.safe_point_span()),
            None => u64::MAX,
        }
    }

    /// Between two whole operations of an atomic section: the journal
    /// commits here only if the transaction has reached half the log, so a
    /// batch too large for the log is split at an operation boundary. In
    /// every mode, once more than [`STREAM_BYTES`] of blocks are dirty the
    /// cache writes what it may and flushes, so a large file goes to the
    /// device in slices rather than all of it being copied into the cache
    /// first. In an ordered batch ([`Modes::ordered`]) a link of the chain.
    pub fn split_point(&mut self) -> Result<()> {
        if let Some(j) = &mut self.journal {
            j.split_point(&mut self.cache)?;
        }
        if self.chain.open {
            self.chain_link()?;
        }
        self.cache.write_back_over(self.stream_dirty)?;
        Ok(())
    }

    /// Commits the running transaction now (journal mode; otherwise nothing).
    pub fn commit(&mut self) -> Result<()> {
        match &mut self.journal {
            Some(j) => j.commit(&mut self.cache),
            None => Ok(()),
        }
    }

    /// Makes `p` durable. In journal mode that is its transaction's commit
    /// (every transaction before it commits first); the home writes may
    /// follow later.
    pub fn sync_patch(&mut self, p: PatchId) -> Result<()> {
        match &mut self.journal {
            Some(j) => j.sync_patch(&mut self.cache, p),
            None => self.cache.sync_patch(p),
        }
    }

    /// One round of [`Modes::sync_patch`] for a caller that runs the device
    /// flush without its lock on the cache: done, a flush to run, or (with
    /// a journal) a wait for another thread's flush. Soft updates flush
    /// beside the other thread ([`PatchCache::sync_step`]); a journal's
    /// commit waits for the previous one ([`Journal::sync_step`]).
    pub fn sync_step(&mut self, p: PatchId) -> Result<SyncStep> {
        match &mut self.journal {
            Some(j) => j.sync_step(&mut self.cache, p, true),
            None => Ok(match self.cache.sync_step(p)? {
                Some(t) => SyncStep::Flush(t),
                None => SyncStep::Done,
            }),
        }
    }

    /// Ends a flush begun by [`Modes::sync_step`] (see [`PatchCache::flushed`]).
    pub fn flushed(
        &mut self,
        ticket: FlushTicket,
        result: std::result::Result<(), DevError>,
    ) -> Result<()> {
        self.cache.flushed(ticket, result)
    }

    /// Makes everything durable; in journal mode also checkpoints, so the
    /// log is empty afterwards.
    pub fn sync(&mut self) -> Result<()> {
        match &mut self.journal {
            Some(j) => j.sync(&mut self.cache),
            None => self.cache.sync(),
        }
    }

    /// Whether changes with these flags are journaled now.
    pub fn journals(&self, flags: PatchFlags) -> bool {
        self.journal.as_ref().is_some_and(|j| j.journals(flags))
    }

    /// A block's current contents, every uncommitted patch applied.
    pub fn read(&mut self, block: BlockNo) -> Result<&[u8]> {
        self.cache.read(block)
    }

    /// A block of file data; see [`PatchCache::read_data`].
    pub fn read_data(&mut self, block: BlockNo) -> Result<&[u8]> {
        self.cache.read_data(block)
    }

    pub fn cache(&self) -> &PatchCache {
        &self.cache
    }

    pub fn cache_mut(&mut self) -> &mut PatchCache {
        &mut self.cache
    }

    pub fn into_cache(self) -> PatchCache {
        self.cache
    }
}
