//! The cached blocks: contents with every uncommitted patch applied, the
//! block's patch list in application order, its ready list (§4.4), and the
//! bookkeeping the hard-patch test needs (§4.1).
//!
//! Invariants:
//! - `patches` holds the block's uncommitted patches that are not in flight,
//!   in the order their changes were applied; reverting any suffix-closed
//!   subset of them in reverse order yields the block without them.
//! - `ext_in` counts direct dependency edges `q → x` with `x` in `patches`
//!   and `q` on another block or empty. Zero means no other block can wait
//!   for this one, so a new patch here can never head a block-level cycle.
//! - `hard` is the newest hard patch in `patches`; every later patch on the
//!   block depends on it (a hard patch cannot be reverted, so it "overlaps"
//!   everything, §4.1).
//! - A block with a version in flight (`writing`) is not written again until
//!   that version commits (at most one version in flight, §3.2).
//! - Only clean blocks (no patches, not writing) sit in an LRU and may be
//!   evicted. Clean blocks whose last patch was file data sit in their own
//!   LRU, evicted first and kept to a few: the layer above (memfs) caches
//!   file contents itself, so holding them here too would only double the
//!   memory a large write takes.

use crate::id::PatchId;
use crate::patch::BlockIdx;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;
use stitch_blockdev::BlockNo;

/// A cached block's contents: a buffer of the cache's own, or a page the
/// layer above wrote whole and still shares ([`PatchCache::create_byte_shared`]:
/// file data reaches the device without being copied). A shared buffer is
/// never written in place: a change to it copies it first.
///
/// [`PatchCache::create_byte_shared`]: crate::PatchCache::create_byte_shared
pub(crate) enum BlockBuf {
    Owned(Box<[u8]>),
    Shared(Arc<Vec<u8>>),
}

impl BlockBuf {
    /// The bytes, writable: a shared page is copied into a buffer of the
    /// cache's own first unless nothing else holds it.
    pub fn make_mut(&mut self) -> &mut [u8] {
        if let BlockBuf::Shared(page) = self {
            if Arc::get_mut(page).is_none() {
                *self = BlockBuf::Owned(page.as_slice().into());
            }
        }
        match self {
            BlockBuf::Owned(b) => b,
            BlockBuf::Shared(page) => Arc::get_mut(page).expect("held only here"),
        }
    }
}

impl Deref for BlockBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            BlockBuf::Owned(b) => b,
            BlockBuf::Shared(page) => page,
        }
    }
}

pub(crate) struct CachedBlock {
    pub no: BlockNo,
    pub data: BlockBuf,
    pub patches: Vec<PatchId>,
    pub inflight: Vec<PatchId>,
    pub ready: Vec<PatchId>,
    pub hard: Option<PatchId>,
    pub ext_in: u32,
    /// How many soft patches in `patches` touch each chunk (a 64th of the
    /// block). A change's overlap scan stops once it has passed every soft
    /// patch touching its chunks, and skips the list when there is none.
    pub soft_chunks: SoftChunks,
    pub writing: bool,
    /// While `writing`: the number of the write that sent it.
    pub write_seq: u64,
    pub in_fifo: bool,
    pub picked: bool,
    /// The block's newest patch changed file data ([`PatchFlags::data`]).
    /// Changes only while the block is dirty, so never while it sits in an
    /// LRU (which of the two it is in follows from it).
    ///
    /// [`PatchFlags::data`]: crate::PatchFlags::data
    pub file_data: bool,
    pub lru_key: Option<u64>,
}

/// The chunks of a `block_size`-byte block that bytes `[lo, hi)` touch.
pub(crate) fn chunk_mask(lo: u32, hi: u32, block_size: usize) -> u64 {
    let chunk = (block_size as u32 / 64).max(1);
    let (first, last) = (lo / chunk, (hi.max(lo + 1) - 1) / chunk);
    let width = (last - first + 1).min(64);
    let ones = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    ones << first.min(63)
}

/// Per-chunk counts of a block's soft patches (see
/// [`CachedBlock::soft_chunks`]); exact, checked by `check.rs`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct SoftChunks {
    mask: u64,
    refs: [u32; 64],
}

impl Default for SoftChunks {
    fn default() -> Self {
        SoftChunks {
            mask: 0,
            refs: [0; 64],
        }
    }
}

impl SoftChunks {
    pub fn add(&mut self, mask: u64) {
        self.mask |= mask;
        for c in Bits(mask) {
            self.refs[c] += 1;
        }
    }

    pub fn remove(&mut self, mask: u64) {
        for c in Bits(mask) {
            self.refs[c] -= 1;
            if self.refs[c] == 0 {
                self.mask &= !(1 << c);
            }
        }
    }

    pub fn clear(&mut self) {
        *self = SoftChunks::default();
    }

    /// Patch-chunk incidences within `mask`: a scan that has met this many
    /// (counting each patch once per chunk of `mask` it touches) has met
    /// every soft patch touching `mask`.
    pub fn incidences(&self, mask: u64) -> u64 {
        Bits(mask & self.mask)
            .map(|c| u64::from(self.refs[c]))
            .sum()
    }
}

/// The set bits of a word, lowest first.
struct Bits(u64);

impl Iterator for Bits {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        (self.0 != 0).then(|| {
            let c = self.0.trailing_zeros() as usize;
            self.0 &= self.0 - 1;
            c
        })
    }
}

impl CachedBlock {
    pub fn is_clean(&self) -> bool {
        self.patches.is_empty() && !self.writing
    }
}

/// The block table: slots reused through a free list, a map from block
/// number, and an LRU of clean blocks keyed by last use.
pub(crate) struct Blocks {
    table: Vec<Option<CachedBlock>>,
    free: Vec<BlockIdx>,
    map: FxHashMap<BlockNo, BlockIdx>,
    lru: BTreeMap<u64, BlockIdx>,
    /// Clean file-data blocks, least recently used first.
    data_lru: BTreeMap<u64, BlockIdx>,
    tick: u64,
    /// Blocks with a non-empty `patches` list.
    pub dirty: usize,
    /// Buffers of evicted blocks, reused for the next blocks loaded (at most
    /// `POOL` kept), so a steady cache allocates nothing — nor does a large
    /// file written in slices of [`DATA_KEEP`] blocks or fewer.
    pool: Vec<Box<[u8]>>,
}

const POOL: usize = 4096;
/// Clean file-data blocks kept once written (the rest are evicted at the
/// next flush): enough for the read-modify-write of a file's partial last
/// blocks, while memfs keeps the contents.
pub const DATA_KEEP: usize = 256;

impl Blocks {
    pub fn new() -> Self {
        Blocks {
            table: Vec::new(),
            free: Vec::new(),
            map: FxHashMap::default(),
            lru: BTreeMap::new(),
            data_lru: BTreeMap::new(),
            tick: 0,
            dirty: 0,
            pool: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn lookup(&self, no: BlockNo) -> Option<BlockIdx> {
        self.map.get(&no).copied()
    }

    pub fn get(&self, idx: BlockIdx) -> &CachedBlock {
        self.table[idx as usize]
            .as_ref()
            .expect("stale block index")
    }

    pub fn get_mut(&mut self, idx: BlockIdx) -> &mut CachedBlock {
        self.table[idx as usize]
            .as_mut()
            .expect("stale block index")
    }

    pub fn indices(&self) -> impl Iterator<Item = BlockIdx> + '_ {
        self.map.values().copied()
    }

    pub fn insert(&mut self, no: BlockNo, data: Box<[u8]>) -> BlockIdx {
        let block = CachedBlock {
            no,
            data: BlockBuf::Owned(data),
            patches: Vec::new(),
            inflight: Vec::new(),
            ready: Vec::new(),
            hard: None,
            ext_in: 0,
            soft_chunks: SoftChunks::default(),
            writing: false,
            write_seq: 0,
            in_fifo: false,
            picked: false,
            file_data: false,
            lru_key: None,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                self.table[i as usize] = Some(block);
                i
            }
            None => {
                self.table.push(Some(block));
                (self.table.len() - 1) as BlockIdx
            }
        };
        self.map.insert(no, idx);
        self.make_clean(idx);
        idx
    }

    /// The LRU a clean block belongs in.
    fn lru_of(&mut self, idx: BlockIdx) -> &mut BTreeMap<u64, BlockIdx> {
        if self.get(idx).file_data {
            &mut self.data_lru
        } else {
            &mut self.lru
        }
    }

    /// Marks a use: a clean block moves to the young end of its LRU.
    pub fn touch(&mut self, idx: BlockIdx) {
        if let Some(key) = self.get(idx).lru_key {
            self.tick += 1;
            let tick = self.tick;
            let lru = self.lru_of(idx);
            lru.remove(&key);
            lru.insert(tick, idx);
            self.get_mut(idx).lru_key = Some(tick);
        }
    }

    /// The block got its first uncommitted patch: it leaves its LRU.
    pub fn make_dirty(&mut self, idx: BlockIdx) {
        if let Some(key) = self.get_mut(idx).lru_key.take() {
            self.lru_of(idx).remove(&key);
        }
        self.dirty += 1;
    }

    /// The block has nothing left to write: it may be evicted.
    pub fn make_clean(&mut self, idx: BlockIdx) {
        self.tick += 1;
        let tick = self.tick;
        debug_assert!(self.get(idx).lru_key.is_none());
        self.get_mut(idx).lru_key = Some(tick);
        self.lru_of(idx).insert(tick, idx);
    }

    /// Counts a clean block as file data from now on: it moves to the data
    /// LRU, keeping its age. A dirty block is left alone (its next patch
    /// says what it holds).
    pub fn mark_file_data(&mut self, idx: BlockIdx) {
        if self.get(idx).file_data {
            return;
        }
        if let Some(key) = self.get(idx).lru_key {
            self.lru.remove(&key);
            self.get_mut(idx).file_data = true;
            self.data_lru.insert(key, idx);
        }
    }

    /// Evicts the least recently used clean block, file data first; false if
    /// there is none.
    pub fn evict_one(&mut self) -> bool {
        let Some((_, idx)) = self.data_lru.pop_first().or_else(|| self.lru.pop_first()) else {
            return false;
        };
        self.evict(idx);
        true
    }

    /// Evicts clean file-data blocks, oldest first, down to `keep`.
    pub fn evict_data_to(&mut self, keep: usize) -> usize {
        let mut evicted = 0;
        while self.data_lru.len() > keep {
            let (_, idx) = self.data_lru.pop_first().expect("longer than keep");
            self.evict(idx);
            evicted += 1;
        }
        evicted
    }

    /// Whether the block's buffer is a page the layer above still holds.
    pub fn holds_shared_page(&self, idx: BlockIdx) -> bool {
        matches!(&self.get(idx).data, BlockBuf::Shared(p) if Arc::strong_count(p) > 1)
    }

    /// Evicts clean block `idx` now, wherever it is in its LRU.
    pub fn evict_clean(&mut self, idx: BlockIdx) {
        let key = self.get_mut(idx).lru_key.take().expect("a clean block");
        self.lru_of(idx).remove(&key);
        self.evict(idx);
    }

    /// Drops a block just taken off its LRU; its buffer goes to the pool.
    fn evict(&mut self, idx: BlockIdx) {
        let block = self.table[idx as usize]
            .take()
            .expect("LRU names a free slot");
        assert!(
            block.is_clean() && !block.in_fifo,
            "evicting block {} that is still queued",
            block.no.0
        );
        self.map.remove(&block.no);
        self.free.push(idx);
        self.recycle(block.data);
    }

    /// Keeps a buffer of the cache's own for the next block loaded, if the
    /// pool has room; a shared page is let go.
    pub fn recycle(&mut self, data: BlockBuf) {
        if let BlockBuf::Owned(b) = data {
            if self.pool.len() < POOL {
                self.pool.push(b);
            }
        }
    }

    /// A block-sized buffer for a block about to be loaded; its contents are
    /// overwritten by the read or the whole-block write that follows.
    pub fn buffer(&mut self, size: usize) -> Box<[u8]> {
        match self.pool.pop() {
            Some(b) if b.len() == size => b,
            _ => vec![0u8; size].into_boxed_slice(),
        }
    }
}
