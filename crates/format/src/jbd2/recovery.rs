//! Journal recovery as a pure function: what replaying a journal would write
//! to the file system, given a way to read journal blocks.
//!
//! It follows the kernel's `fs/jbd2/recovery.c` (e2fsck runs the same code)
//! pass by pass, each pass walking the log from `s_start`, expecting
//! `s_sequence`, wrapping from `s_maxlen - 1` to `s_first`:
//!
//! 1. **scan** (`scan`): find the end of the log — the first transaction
//!    not replayed — and verify the checksums;
//! 2. **revoke** (`collect_revokes`): for every home block a revoke record
//!    of a transaction before the end names, the newest such sequence;
//! 3. **replay** (`replay`): every tagged block of those transactions,
//!    except a copy in transaction `t` of a block revoked at a sequence
//!    `>= t`. The last copy wins.
//!
//! The scan pass as a decision table ("ends": this transaction and every
//! later one are not replayed):
//!
//! | block met | condition | outcome |
//! |---|---|---|
//! | any | no magic, unknown type or wrong sequence | ends |
//! | any | the pass has walked the whole log area | ends |
//! | descriptor, revoke | v2/v3 tail checksum bad | decided at the commit |
//! | commit | after such a block; commit time >= the last good one | [`RecoverError::Corrupt`] |
//! | commit | after such a block; commit time older | ends (a stale block) |
//! | commit | v1 or v2/v3 checksum bad; commit time older | ends (a stale block) |
//! | commit | checksum bad, no `ASYNC_COMMIT` | ends, `failed_commit` |
//! | commit | checksum bad, `ASYNC_COMMIT` | ends; the scan goes on, and a later bad commit moves the end (as the kernel) |
//! | commit | good | next transaction |
//!
//! In the replay pass a copy whose v2/v3 tag checksum fails is not written
//! ([`Recovery::bad_checksums`]); the kernel writes the others and then
//! fails the recovery with `EIO`.
//!
//! Where we differ from the kernel, and why:
//! - A pass walks at most the log area (`s_maxlen - s_first` blocks) before
//!   it calls the log ended. The kernel trusts the log to end, and a log of
//!   descriptor blocks of one sequence with no commit block would make it
//!   loop for ever; no valid log is longer than the area.
//! - Any read error fails the recovery. The kernel fails on an unreadable
//!   header block too, but skips an unreadable data block and fails at the
//!   end, having written what it could.
//!
//! Invariant: [`recover`] does no I/O but through `read`, calls it a bounded
//! number of times (three passes over at most the log area, plus one
//! descriptor's worth of blocks), and never panics on any journal content.

use super::blocks::{
    commit_csum, tag_checksum, tag_flags, verify_tail_checksum, BlockHeader, BlockType,
    CommitBlock, TagFormat, TAIL_SIZE,
};
use super::checksum::crc32_be;
use super::superblock::features;
use super::{JournalSuperblock, JBD2_MAGIC};
use crate::codec::{read, Be};
use crate::error::{ensure, FormatError, Structure};
use crate::units::{BlockNo, JournalBlockNo};
use std::collections::BTreeMap;
use std::fmt;

/// What replaying a journal would write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Final contents of every home block replay writes (after revokes, last
    /// copy wins), keyed by file-system block number. Numbers are as the
    /// tags give them: the caller checks them against the file system.
    pub blocks: BTreeMap<BlockNo, Vec<u8>>,
    /// Committed transactions found (replayed).
    pub transactions: u32,
    /// The sequence of the first of them (`s_sequence`).
    pub first_sequence: u32,
    /// The sequence the journal superblock takes when reset: the kernel's
    /// `++end_transaction`, one past the first transaction not replayed, so
    /// that no block left in the log can match it.
    pub next_sequence: u32,
    /// Journal copies skipped because a revoke record covered them.
    pub revoked: u32,
    /// A transaction whose commit block was found but whose checksum failed
    /// (not replayed, nor anything after it), as the kernel's
    /// `j_failed_commit`.
    pub failed_commit: Option<u32>,
    /// Home blocks with a journal copy whose v2/v3 tag checksum failed: that
    /// copy was not replayed. The kernel replays the rest and then fails the
    /// recovery, so a caller should treat a non-empty list as damage.
    pub bad_checksums: Vec<BlockNo>,
}

/// Why a journal could not be recovered.
#[derive(Debug)]
pub enum RecoverError<E> {
    /// `read` failed for this journal block.
    Read { block: JournalBlockNo, source: E },
    /// The journal is damaged in a way that makes the kernel refuse to
    /// recover it: a bad superblock, a block with a bad checksum inside a
    /// transaction committed after it, a revoke block's count past its end,
    /// or passes that disagree on where the log ends.
    Corrupt(FormatError),
}

impl<E: fmt::Display> fmt::Display for RecoverError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoverError::Read { block, source } => {
                write!(f, "reading journal block {}: {source}", block.0)
            }
            RecoverError::Corrupt(e) => write!(f, "journal cannot be recovered: {e}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for RecoverError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RecoverError::Read { .. } => None,
            RecoverError::Corrupt(e) => Some(e),
        }
    }
}

impl<E> From<FormatError> for RecoverError<E> {
    fn from(e: FormatError) -> Self {
        RecoverError::Corrupt(e)
    }
}

/// Works out what replaying the journal described by `jsb` would write.
/// `read(n)` returns logical journal block `n` (block 0 is the journal
/// superblock), each `jsb.blocksize` bytes.
pub fn recover<E>(
    jsb: &JournalSuperblock,
    read: impl FnMut(JournalBlockNo) -> Result<Vec<u8>, E>,
) -> Result<Recovery, RecoverError<E>> {
    validate(jsb)?;
    let empty = Recovery {
        first_sequence: jsb.sequence,
        next_sequence: jsb.sequence,
        ..Recovery::default()
    };
    // `s_start` is zero if, and only if, the journal was emptied cleanly.
    if jsb.start == 0 {
        return Ok(empty);
    }
    let mut log = Log::new(jsb, read);
    let scanned = scan(&mut log)?;
    let revokes = collect_revokes(&mut log, scanned.end)?;
    let mut rec = replay(&mut log, scanned.end, &revokes)?;
    rec.transactions = scanned.end.wrapping_sub(jsb.sequence);
    rec.next_sequence = scanned.end.wrapping_add(1);
    rec.failed_commit = scanned.failed_commit;
    rec.first_sequence = jsb.sequence;
    Ok(rec)
}

impl JournalSuperblock {
    /// This superblock once the journal is replayed and emptied: `start` 0,
    /// the next transaction `sequence`, checksum updated (v2/v3), as the
    /// kernel's `jbd2_mark_journal_empty` writes it.
    pub fn reset(&self, sequence: u32) -> JournalSuperblock {
        let mut sb = self.clone();
        sb.start = 0;
        sb.sequence = sequence;
        sb.update_checksum();
        sb
    }
}

/// The superblock must be one [`JournalSuperblock::decode`] accepts, with a
/// block size replay can work in.
fn validate(jsb: &JournalSuperblock) -> Result<(), FormatError> {
    let bs = jsb.blocksize;
    ensure(
        bs.is_power_of_two() && (1024..=65536).contains(&bs),
        Structure::JournalSuperblock,
        || format!("block size {bs}"),
    )?;
    JournalSuperblock::decode(&jsb.to_bytes(), bs, jsb.maxlen).map(|_| ())
}

/// `tid_gt`: sequence numbers compare modulo 2^32.
fn tid_gt(x: u32, y: u32) -> bool {
    (x.wrapping_sub(y) as i32) > 0
}

/// The log as one pass walks it: where the next block is, which sequence
/// it must carry, and how much of the area this pass has used.
struct Log<'j, R> {
    jsb: &'j JournalSuperblock,
    read: R,
    fmt: TagFormat,
    seed: u32,
    /// The kernel's `next_log_block`.
    next: u32,
    /// The kernel's `next_commit_ID`.
    seq: u32,
    /// Log blocks this pass has read or skipped.
    used: u64,
}

impl<'j, E, R: FnMut(JournalBlockNo) -> Result<Vec<u8>, E>> Log<'j, R> {
    fn new(jsb: &'j JournalSuperblock, read: R) -> Self {
        Log {
            jsb,
            read,
            fmt: jsb.tag_format(),
            seed: jsb.csum_seed(),
            next: jsb.start,
            seq: jsb.sequence,
            used: 0,
        }
    }

    fn restart(&mut self) {
        self.next = self.jsb.start;
        self.seq = self.jsb.sequence;
        self.used = 0;
    }

    /// Moves past `n` log blocks, wrapping as the kernel's `wrap()` does
    /// (one subtraction of the area's length).
    fn advance(&mut self, n: u32) {
        let (first, last) = (u64::from(self.jsb.first), u64::from(self.jsb.maxlen));
        self.used += u64::from(n);
        let mut next = u64::from(self.next) + u64::from(n);
        if next >= last {
            next -= last - first;
        }
        self.next = u32::try_from(next).unwrap_or(u32::MAX);
    }

    /// Reads the next log block and moves past it.
    fn take(&mut self) -> Result<(u32, Vec<u8>), RecoverError<E>> {
        let at = self.next;
        self.advance(1);
        let s = Structure::JournalBlock;
        if at >= self.jsb.maxlen {
            // The kernel's jread(): "corrupted journal superblock".
            let e = FormatError::corrupt(s, format!("log block {at} is past the journal's end"));
            return Err(e.into());
        }
        let block = JournalBlockNo(at);
        let buf = (self.read)(block).map_err(|source| RecoverError::Read { block, source })?;
        let want = self.jsb.blocksize as usize;
        if buf.len() != want {
            let e = FormatError::corrupt(s, format!("read {} bytes, not {want}", buf.len()));
            return Err(e.in_block(u64::from(at)).into());
        }
        Ok((at, buf))
    }

    /// The next block, if it continues the log: journal magic, a known
    /// type and the expected sequence, within one walk of the area.
    fn next_block(&mut self) -> Result<Option<LogBlock>, RecoverError<E>> {
        let area = u64::from(self.jsb.maxlen - self.jsb.first);
        if self.used >= area {
            return Ok(None);
        }
        let (at, buf) = self.take()?;
        Ok(match BlockHeader::parse(&buf) {
            Some((kind, seq)) if seq == self.seq => Some(LogBlock { kind, at, buf }),
            _ => None,
        })
    }

    /// A descriptor or revoke block's v2/v3 tail checksum (true without).
    fn tail_ok(&self, buf: &[u8]) -> bool {
        !self.fmt.has_tail()
            || verify_tail_checksum(buf, self.seed, Structure::JournalBlock).is_ok()
    }

    /// A data block's v2/v3 checksum as its tag gives it (true without).
    fn tag_ok(&self, tag: &Tag, data: &[u8]) -> bool {
        !self.fmt.has_tail() || tag.checksum == tag_checksum(self.fmt, self.seed, self.seq, data)
    }
}

/// A block that continues the log, and where it is.
struct LogBlock {
    kind: BlockType,
    at: u32,
    buf: Vec<u8>,
}

/// One descriptor tag, as replay reads it.
#[derive(Debug)]
struct Tag {
    blocknr: BlockNo,
    flags: u32,
    checksum: u32,
}

/// The tags of a descriptor block as the kernel walks them (`count_tags`
/// and the replay loop): every tag that starts before the v2/v3 tail
/// counts, one without `SAME_UUID` is followed by a 16-byte UUID, and
/// `LAST_TAG` ends the list. Unlike [`super::blocks::decode_descriptor`]
/// this never fails: a UUID running past the end still counts its tag.
fn tags(buf: &[u8], fmt: TagFormat) -> Vec<Tag> {
    let tail = if fmt.has_tail() { TAIL_SIZE } else { 0 };
    let end = buf.len().saturating_sub(tail);
    let size = fmt.tag_bytes();
    let mut off = BlockHeader::SIZE;
    let mut out = Vec::new();
    while off + size <= end {
        let tag = tag_at(buf, off, fmt);
        off += size;
        if tag.flags & tag_flags::SAME_UUID == 0 {
            off += 16;
        }
        let last = tag.flags & tag_flags::LAST_TAG != 0;
        out.push(tag);
        if last {
            break;
        }
    }
    out
}

/// `journal_block_tag_t` or, with v3, `journal_block_tag3_t` at `off`; the
/// high half of the block number only with the 64bit feature.
fn tag_at(buf: &[u8], off: usize, fmt: TagFormat) -> Tag {
    let be32 = |o: usize| read::<u32, Be>(buf, off + o).unwrap_or(0);
    let be16 = |o: usize| read::<u16, Be>(buf, off + o).map_or(0, u32::from);
    let high = if fmt.bit64 { be32(8) } else { 0 };
    let (flags, checksum) = if fmt.csum_v3 {
        (be32(4), be32(12))
    } else {
        (be16(6), be16(4))
    };
    Tag {
        blocknr: BlockNo(u64::from(be32(0)) | (u64::from(high) << 32)),
        flags,
        checksum,
    }
}

/// The block numbers of a revoke block, as the kernel's
/// `scan_revoke_records` reads them: `r_count` bytes (header included) of
/// 4- or 8-byte records; a count past the block is corruption.
fn revoke_records(buf: &[u8], fmt: TagFormat) -> Result<Vec<BlockNo>, FormatError> {
    const HEADER: usize = 16;
    let count = read::<u32, Be>(buf, 12).unwrap_or(0) as usize;
    let usable = buf.len() - if fmt.has_tail() { TAIL_SIZE } else { 0 };
    ensure(count <= usable, Structure::JournalRevoke, || {
        format!("r_count {count} is past the block's {usable} bytes")
    })?;
    let records = buf.get(HEADER..count).unwrap_or_default();
    Ok(if fmt.bit64 {
        let rec = records.chunks_exact(8);
        rec.map(|r| BlockNo(read::<u64, Be>(r, 0).unwrap_or(0)))
            .collect()
    } else {
        let rec = records.chunks_exact(4);
        rec.map(|r| read::<BlockNo, Be>(r, 0).unwrap_or(BlockNo(0)))
            .collect()
    })
}

/// What the scan pass found.
struct Scanned {
    /// The first transaction not replayed (`info->end_transaction`).
    end: u32,
    failed_commit: Option<u32>,
}

/// The scan pass's running state: the kernel's locals of `do_one_pass`.
struct ScanState {
    /// v1: CRC32 of this transaction's descriptor and data blocks so far.
    crc: u32,
    /// A descriptor or revoke block of this transaction failed its
    /// checksum (`need_check_commit_time`).
    bad_block: bool,
    last_commit_time: u64,
    end: Option<u32>,
    failed_commit: Option<u32>,
}

/// What the scan does after a commit block.
enum AfterCommit {
    /// Expect the next transaction.
    Next,
    /// Stay on this sequence (the kernel's `break` out of its `switch`).
    Stay,
    /// The log ends here.
    End,
}

fn scan<E, R: FnMut(JournalBlockNo) -> Result<Vec<u8>, E>>(
    log: &mut Log<'_, R>,
) -> Result<Scanned, RecoverError<E>> {
    log.restart();
    let mut st = ScanState {
        crc: !0,
        bad_block: false,
        last_commit_time: 0,
        end: None,
        failed_commit: None,
    };
    while let Some(LogBlock { kind, at, buf }) = log.next_block()? {
        match kind {
            BlockType::Descriptor => scan_descriptor(log, &mut st, &buf)?,
            BlockType::Revoke => st.bad_block |= !log.tail_ok(&buf),
            BlockType::Commit => match st.commit(log, &buf).map_err(|e| e.in_block(at.into()))? {
                AfterCommit::Next => log.seq = log.seq.wrapping_add(1),
                AfterCommit::Stay => {}
                AfterCommit::End => break,
            },
            _ => break,
        }
    }
    Ok(Scanned {
        end: st.end.unwrap_or(log.seq),
        failed_commit: st.failed_commit,
    })
}

/// Steps over a descriptor's data blocks, reading them into the v1 CRC
/// while the transaction is still in good standing.
fn scan_descriptor<E, R: FnMut(JournalBlockNo) -> Result<Vec<u8>, E>>(
    log: &mut Log<'_, R>,
    st: &mut ScanState,
    buf: &[u8],
) -> Result<(), RecoverError<E>> {
    st.bad_block |= !log.tail_ok(buf);
    let n = tags(buf, log.fmt).len() as u32;
    if !log.jsb.has_csum_v1() || st.bad_block || st.end.is_some() {
        log.advance(n);
        return Ok(());
    }
    st.crc = crc32_be(st.crc, buf);
    for _ in 0..n {
        let (_, data) = log.take()?;
        st.crc = crc32_be(st.crc, &data);
    }
    Ok(())
}

impl ScanState {
    fn commit<R>(&mut self, log: &Log<'_, R>, buf: &[u8]) -> Result<AfterCommit, FormatError> {
        let c = CommitBlock::decode_raw(buf).unwrap_or_default();
        let (seq, time) = (log.seq, c.commit_sec);
        if self.bad_block {
            ensure(
                time < self.last_commit_time,
                Structure::JournalCommit,
                || format!("transaction {seq} holds a block with a bad checksum"),
            )?;
            return Ok(AfterCommit::End);
        }
        if log.jsb.has_csum_v1() {
            if let Some(end) = self.end {
                self.failed_commit = Some(end);
                return Ok(AfterCommit::Stay);
            }
            if !v1_commit_ok(&c, self.crc) {
                return Ok(self.checksum_failed(log.jsb, seq, time));
            }
            self.crc = !0;
        }
        if log.jsb.has_csum_v2v3() && CommitBlock::verify_csum_v2v3(buf, log.seed).is_err() {
            return Ok(self.checksum_failed(log.jsb, seq, time));
        }
        self.last_commit_time = time;
        Ok(AfterCommit::Next)
    }

    /// The kernel's `chksum_error`: a stale block ends the log quietly;
    /// otherwise this transaction is the end, and without `ASYNC_COMMIT`
    /// the failure is reported.
    fn checksum_failed(&mut self, jsb: &JournalSuperblock, seq: u32, time: u64) -> AfterCommit {
        if time < self.last_commit_time {
            return AfterCommit::End;
        }
        self.end = Some(seq);
        if !async_commit(jsb) {
            self.failed_commit = Some(seq);
            return AfterCommit::Stay;
        }
        self.last_commit_time = time;
        AfterCommit::Next
    }
}

/// v1: the commit's CRC32 matches, or the commit carries none at all.
fn v1_commit_ok(c: &CommitBlock, crc: u32) -> bool {
    let sum = c.chksum[0];
    let crc32 = c.chksum_type == commit_csum::CRC32 && c.chksum_size == commit_csum::CRC32_SIZE;
    (crc32 && sum == crc) || (c.chksum_type == 0 && c.chksum_size == 0 && sum == 0)
}

fn async_commit(jsb: &JournalSuperblock) -> bool {
    jsb.blocktype == BlockType::SuperblockV2 as u32
        && jsb.feature_incompat & features::INCOMPAT_ASYNC_COMMIT.bit != 0
}

/// Walks the transactions before `end` again, handing each descriptor and
/// revoke block to `f`; the revoke and replay passes. Like the kernel, a
/// descriptor with a bad tail checksum here is corruption (the scan would
/// have ended the log before it), and so is a walk that stops short.
fn walk_committed<E, R, F>(log: &mut Log<'_, R>, end: u32, mut f: F) -> Result<(), RecoverError<E>>
where
    R: FnMut(JournalBlockNo) -> Result<Vec<u8>, E>,
    F: FnMut(&mut Log<'_, R>, BlockType, u32, &[u8]) -> Result<(), RecoverError<E>>,
{
    log.restart();
    while log.seq != end {
        let Some(LogBlock { kind, at, buf }) = log.next_block()? else {
            break;
        };
        match kind {
            BlockType::Commit => log.seq = log.seq.wrapping_add(1),
            BlockType::Descriptor if !log.tail_ok(&buf) => {
                let e = FormatError::corrupt(Structure::JournalDescriptor, "bad tail checksum");
                return Err(e.in_block(at.into()).into());
            }
            BlockType::Descriptor | BlockType::Revoke => f(log, kind, at, &buf)?,
            _ => break,
        }
    }
    let seq = log.seq;
    ensure(seq == end, Structure::JournalBlock, || {
        format!("a later pass ended at transaction {seq}, the scan at {end}")
    })?;
    Ok(())
}

/// Block number → the newest sequence that revoked it.
type Revokes = BTreeMap<BlockNo, u32>;

fn collect_revokes<E, R: FnMut(JournalBlockNo) -> Result<Vec<u8>, E>>(
    log: &mut Log<'_, R>,
    end: u32,
) -> Result<Revokes, RecoverError<E>> {
    let mut revokes = Revokes::new();
    walk_committed(log, end, |log, kind, at, buf| {
        if kind == BlockType::Descriptor {
            log.advance(tags(buf, log.fmt).len() as u32);
            return Ok(());
        }
        let records = revoke_records(buf, log.fmt).map_err(|e| e.in_block(at.into()))?;
        for b in records {
            let seq = revokes.entry(b).or_insert(log.seq);
            if tid_gt(log.seq, *seq) {
                *seq = log.seq;
            }
        }
        Ok(())
    })?;
    Ok(revokes)
}

fn replay<E, R: FnMut(JournalBlockNo) -> Result<Vec<u8>, E>>(
    log: &mut Log<'_, R>,
    end: u32,
    revokes: &Revokes,
) -> Result<Recovery, RecoverError<E>> {
    let mut rec = Recovery::default();
    walk_committed(log, end, |log, kind, _, buf| {
        if kind == BlockType::Descriptor {
            replay_descriptor(log, buf, revokes, &mut rec)?;
        }
        Ok(())
    })?;
    Ok(rec)
}

/// Replays one descriptor's data blocks into `rec`.
fn replay_descriptor<E, R: FnMut(JournalBlockNo) -> Result<Vec<u8>, E>>(
    log: &mut Log<'_, R>,
    buf: &[u8],
    revokes: &Revokes,
    rec: &mut Recovery,
) -> Result<(), RecoverError<E>> {
    for tag in tags(buf, log.fmt) {
        let (_, mut data) = log.take()?;
        // `jbd2_journal_test_revoke`: revoked at this sequence or later.
        if revokes
            .get(&tag.blocknr)
            .is_some_and(|&r| !tid_gt(log.seq, r))
        {
            rec.revoked += 1;
            continue;
        }
        if !log.tag_ok(&tag, &data) {
            rec.bad_checksums.push(tag.blocknr);
            continue;
        }
        if tag.flags & tag_flags::ESCAPE != 0 {
            data[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
        }
        rec.blocks.insert(tag.blocknr, data);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jbd2::blocks::{encode_descriptor, set_tail_checksum, DescriptorTag, RevokeBlock};
    use crate::jbd2::superblock::CSUM_TYPE_CRC32C;
    use tag_flags::{ESCAPE, LAST_TAG, SAME_UUID};

    const BS: usize = 1024;
    const REVOKE: u32 = features::INCOMPAT_REVOKE.bit;
    const BIT64: u32 = features::INCOMPAT_64BIT.bit;
    const V2: u32 = features::INCOMPAT_CSUM_V2.bit;
    const V3: u32 = features::INCOMPAT_CSUM_V3.bit;
    const ASYNC: u32 = features::INCOMPAT_ASYNC_COMMIT.bit;
    const V1: u32 = features::COMPAT_CHECKSUM.bit;

    /// A journal in memory, written transaction by transaction the way the
    /// kernel's commit code lays one out.
    struct Builder {
        jsb: JournalSuperblock,
        log: BTreeMap<u32, Vec<u8>>,
        next: u32,
        seq: u32,
        crc: u32,
        time: u64,
    }

    impl Builder {
        /// A 1024-block journal of 1 KiB blocks with these features, whose
        /// log starts at `start` with sequence `seq`.
        fn new(compat: u32, incompat: u32, start: u32, seq: u32) -> Builder {
            let mut jsb = JournalSuperblock::new_v2(BS as u32, 1024, [7; 16]);
            jsb.feature_compat = compat;
            jsb.feature_incompat = incompat;
            if incompat & (V2 | V3) != 0 {
                jsb.checksum_type = CSUM_TYPE_CRC32C;
            }
            jsb.start = start;
            jsb.sequence = seq;
            jsb.update_checksum();
            Builder {
                jsb,
                log: BTreeMap::new(),
                next: start,
                seq,
                crc: !0,
                time: 1_700_000_000,
            }
        }

        fn plain() -> Builder {
            Builder::new(0, REVOKE, 1, 10)
        }

        fn put(&mut self, buf: Vec<u8>) {
            self.log.insert(self.next, buf);
            self.next += 1;
            if self.next == self.jsb.maxlen {
                self.next = self.jsb.first;
            }
        }

        /// A descriptor naming `blocks`, then their data, escaped where a
        /// block begins with the journal magic.
        fn descriptor(&mut self, blocks: &[(u64, Vec<u8>)]) {
            let (fmt, seed) = (self.jsb.tag_format(), self.jsb.csum_seed());
            let mut stored = Vec::new();
            let mut tags = Vec::new();
            for (i, (nr, data)) in blocks.iter().enumerate() {
                let mut copy = data.clone();
                let escape = copy[..4] == JBD2_MAGIC.to_be_bytes();
                if escape {
                    copy[..4].fill(0);
                }
                let flag = |on: bool, f: u32| if on { f } else { 0 };
                tags.push(DescriptorTag {
                    blocknr: BlockNo(*nr),
                    flags: flag(i > 0, SAME_UUID)
                        | flag(i + 1 == blocks.len(), LAST_TAG)
                        | flag(escape, ESCAPE),
                    checksum: tag_checksum(fmt, seed, self.seq, &copy),
                    uuid: (i == 0).then_some([7; 16]),
                });
                stored.push(copy);
            }
            let mut d = encode_descriptor(self.seq, &tags, fmt, BS).unwrap();
            if fmt.has_tail() {
                set_tail_checksum(&mut d, seed);
            }
            self.crc = crc32_be(self.crc, &d);
            self.put(d);
            for data in stored {
                self.crc = crc32_be(self.crc, &data);
                self.put(data);
            }
        }

        fn revoke(&mut self, blocks: &[u64]) {
            let fmt = self.jsb.tag_format();
            let r = RevokeBlock {
                sequence: self.seq,
                blocks: blocks.iter().copied().map(BlockNo).collect(),
            };
            let mut buf = r.encode(fmt, BS).unwrap();
            if fmt.has_tail() {
                set_tail_checksum(&mut buf, self.jsb.csum_seed());
            }
            self.put(buf);
        }

        /// The commit block closing the transaction, with the checksums the
        /// journal's features ask for.
        fn commit(&mut self) {
            let mut c = CommitBlock::new(self.seq, self.time, 0);
            if self.jsb.has_csum_v1() {
                c.chksum_type = commit_csum::CRC32;
                c.chksum_size = commit_csum::CRC32_SIZE;
                c.chksum[0] = self.crc;
            }
            let seed = self.jsb.has_csum_v2v3().then(|| self.jsb.csum_seed());
            self.put(c.encode_block(BS, seed));
            self.seq += 1;
            self.crc = !0;
            self.time += 1;
        }

        fn transaction(&mut self, blocks: &[(u64, Vec<u8>)]) {
            self.descriptor(blocks);
            self.commit();
        }

        fn flip(&mut self, pos: u32, byte: usize) {
            self.log.get_mut(&pos).unwrap()[byte] ^= 0x40;
        }

        fn recover(&self) -> Result<Recovery, RecoverError<String>> {
            recover(&self.jsb, |n| {
                Ok(self.log.get(&n.0).cloned().unwrap_or_else(|| vec![0; BS]))
            })
        }

        fn recovered(&self) -> Recovery {
            self.recover().unwrap_or_else(|e| panic!("{e}"))
        }
    }

    fn data(fill: u8) -> Vec<u8> {
        vec![fill; BS]
    }

    /// The replayed blocks as (block, first byte) pairs.
    fn written(r: &Recovery) -> Vec<(u64, u8)> {
        r.blocks.iter().map(|(&b, d)| (b.0, d[1])).collect()
    }

    #[test]
    fn empty_journal_replays_nothing_even_with_old_transactions_in_it() {
        let mut b = Builder::plain();
        b.transaction(&[(100, data(1))]);
        b.jsb.start = 0;
        b.jsb.update_checksum();
        let r = b.recovered();
        assert!(r.blocks.is_empty());
        assert_eq!((r.transactions, r.next_sequence), (0, 10));
    }

    #[test]
    fn committed_transactions_replay_in_order_and_the_last_copy_wins() {
        let mut b = Builder::plain();
        b.transaction(&[(100, data(0xA1)), (101, data(0xA2))]);
        b.transaction(&[(100, data(0xB1)), (200, data(0xB2))]);
        // An uncommitted transaction: a descriptor and data, no commit.
        b.descriptor(&[(300, data(0xC1))]);
        let r = b.recovered();
        assert_eq!(written(&r), [(100, 0xB1), (101, 0xA2), (200, 0xB2)]);
        assert_eq!((r.transactions, r.first_sequence), (2, 10));
        // The kernel restarts one past the first transaction it did not
        // replay (12), so the stale descriptor of 12 can never match.
        assert_eq!(r.next_sequence, 13);
        assert_eq!((r.revoked, r.failed_commit), (0, None));
    }

    #[test]
    fn a_lone_descriptor_is_not_replayed() {
        let mut b = Builder::plain();
        b.descriptor(&[(5, data(1)), (6, data(2))]);
        let r = b.recovered();
        assert!(r.blocks.is_empty());
        assert_eq!((r.transactions, r.next_sequence), (0, 11));
    }

    #[test]
    fn the_log_wraps_from_maxlen_to_first() {
        for compat in [0, V1] {
            let mut b = Builder::new(compat, REVOKE, 1020, 7);
            // Descriptor at 1020, data at 1021-1023, commit at 1 (wrapped).
            b.transaction(&[(10, data(1)), (11, data(2)), (12, data(3))]);
            b.transaction(&[(13, data(4))]);
            assert_eq!(b.next, 5, "the second transaction is at 2..=4");
            let r = b.recovered();
            assert_eq!(written(&r), [(10, 1), (11, 2), (12, 3), (13, 4)]);
            assert_eq!(r.transactions, 2);
        }
    }

    #[test]
    fn a_block_of_another_sequence_ends_the_log() {
        let mut b = Builder::plain();
        b.transaction(&[(1, data(1))]);
        b.seq += 1; // transaction 11 is missing: 12 follows 10
        b.transaction(&[(2, data(2))]);
        let r = b.recovered();
        assert_eq!(written(&r), [(1, 1)]);
        assert_eq!((r.transactions, r.next_sequence), (1, 12));
    }

    #[test]
    fn revoke_hides_copies_up_to_its_own_transaction() {
        let mut b = Builder::plain();
        b.transaction(&[(50, data(1)), (51, data(1))]); // 10
        b.revoke(&[50]); // 11 revokes 50: its copies in 10 and 11 are skipped
        b.transaction(&[(50, data(2)), (52, data(2))]);
        b.transaction(&[(53, data(3))]); // 12
        b.transaction(&[(50, data(4))]); // 13: later than the revoke, replayed
        let r = b.recovered();
        assert_eq!(written(&r), [(50, 4), (51, 1), (52, 2), (53, 3)]);
        assert_eq!(r.revoked, 2);
    }

    #[test]
    fn revoke_in_the_last_transaction_hides_every_copy() {
        let mut b = Builder::plain();
        b.transaction(&[(50, data(1))]);
        b.descriptor(&[(50, data(2)), (60, data(2))]);
        b.revoke(&[50]);
        b.commit();
        let r = b.recovered();
        assert_eq!(written(&r), [(60, 2)]);
        assert_eq!(r.revoked, 2);
    }

    #[test]
    fn revokes_of_an_uncommitted_transaction_do_not_count() {
        let mut b = Builder::plain();
        b.transaction(&[(50, data(1))]);
        b.revoke(&[50]);
        let r = b.recovered();
        assert_eq!(written(&r), [(50, 1)]);
        assert_eq!(r.revoked, 0);
    }

    #[test]
    fn escaped_blocks_get_their_magic_back() {
        let mut b = Builder::plain();
        let mut magic = data(9);
        magic[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
        b.transaction(&[(70, magic.clone()), (71, data(8))]);
        assert_eq!(b.log[&2][..4], [0; 4], "the log copy is escaped");
        let r = b.recovered();
        assert_eq!(r.blocks[&BlockNo(70)], magic);
        assert_eq!(r.transactions, 1);
    }

    #[test]
    fn sixty_four_bit_tags_name_blocks_past_u32() {
        let mut b = Builder::new(0, REVOKE | BIT64, 1, 1);
        let far = (1u64 << 40) + 5;
        b.transaction(&[(far, data(1)), (6, data(2))]);
        b.revoke(&[6]);
        b.commit();
        let r = b.recovered();
        assert_eq!(written(&r), [(far, 1)]);
    }

    #[test]
    fn v1_checksums_good_and_bad() {
        let mut b = Builder::new(V1, REVOKE, 1, 10);
        b.transaction(&[(1, data(1))]); // 1..=3
        b.transaction(&[(2, data(2))]); // 4..=6
        b.transaction(&[(3, data(3))]); // 7..=9
        let r = b.recovered();
        assert_eq!((r.transactions, r.failed_commit), (3, None));
        b.flip(5, 100); // a data block of transaction 11
        let r = b.recovered();
        assert_eq!(written(&r), [(1, 1)], "11 and everything after are dropped");
        assert_eq!((r.transactions, r.failed_commit), (1, Some(11)));
        assert_eq!(r.next_sequence, 12);
    }

    #[test]
    fn v1_commit_without_a_checksum_is_accepted() {
        let mut b = Builder::new(V1, REVOKE, 1, 10);
        b.transaction(&[(1, data(1))]);
        let mut c = CommitBlock::decode(&b.log[&3]).unwrap();
        (c.chksum_type, c.chksum_size, c.chksum[0]) = (0, 0, 0);
        b.log.insert(3, c.encode_block(BS, None));
        assert_eq!(b.recovered().transactions, 1);
        c.chksum[0] = 1; // a checksum but no type: neither valid nor unused
        b.log.insert(3, c.encode_block(BS, None));
        assert_eq!(b.recovered().failed_commit, Some(10));
    }

    /// Two transactions of a v2 or v3 journal: 10 at log blocks 1..=3
    /// (descriptor, data, commit), 11 at 4..=7 (two data blocks).
    fn checksummed(incompat: u32) -> Builder {
        let mut b = Builder::new(0, REVOKE | incompat, 1, 10);
        b.transaction(&[(1, data(1))]);
        b.transaction(&[(2, data(2)), (3, data(3))]);
        b
    }

    #[test]
    fn v2_and_v3_checksums_verify() {
        for v in [V2, V3, V3 | BIT64] {
            let r = checksummed(v).recovered();
            assert_eq!(written(&r), [(1, 1), (2, 2), (3, 3)], "{v:#x}");
        }
    }

    #[test]
    fn v3_bad_data_checksum_skips_only_that_block() {
        for v in [V2, V3] {
            let mut b = checksummed(v);
            b.flip(5, 7); // block 2's copy
            let r = b.recovered();
            assert_eq!(written(&r), [(1, 1), (3, 3)], "{v:#x}");
            assert_eq!(r.bad_checksums, [BlockNo(2)]);
            assert_eq!(r.transactions, 2);
        }
    }

    #[test]
    fn v3_bad_commit_checksum_ends_the_log_and_is_reported() {
        let mut b = checksummed(V3);
        b.flip(7, 200); // transaction 11's commit
        let r = b.recovered();
        assert_eq!(written(&r), [(1, 1)]);
        assert_eq!((r.transactions, r.failed_commit), (1, Some(11)));
    }

    #[test]
    fn with_async_commit_a_bad_commit_ends_the_log_unreported() {
        let mut b = checksummed(V3 | ASYNC);
        b.transaction(&[(4, data(4))]);
        b.flip(7, 200);
        let r = b.recovered();
        assert_eq!(written(&r), [(1, 1)]);
        assert_eq!((r.transactions, r.failed_commit), (1, None));
    }

    #[test]
    fn bad_descriptor_checksum_in_a_committed_transaction_is_corruption() {
        let mut b = checksummed(V3);
        b.flip(4, 600); // transaction 11's descriptor, past its tags
        let e = b.recover().unwrap_err();
        assert!(matches!(&e, RecoverError::Corrupt(_)), "{e}");
        assert!(e.to_string().contains("transaction 11"), "{e}");
    }

    #[test]
    fn bad_checksum_under_an_older_commit_is_a_stale_end() {
        let mut b = checksummed(V3);
        b.time -= 10; // transaction 12 claims to be older than 11
        b.transaction(&[(9, data(9))]); // 8..=10
        b.flip(8, 600);
        let r = b.recovered();
        assert_eq!((r.transactions, r.failed_commit), (2, None));
        assert!(!r.blocks.contains_key(&BlockNo(9)));
        // Its commit checksum failing instead is the same stale end.
        let mut b = checksummed(V3);
        b.time -= 10;
        b.transaction(&[(9, data(9))]);
        b.flip(10, 200);
        assert_eq!(b.recovered().failed_commit, None);
    }

    #[test]
    fn revoke_count_past_the_block_is_corruption() {
        let mut b = Builder::plain();
        b.revoke(&[1]);
        b.commit();
        b.log.get_mut(&1).unwrap()[12..16].copy_from_slice(&5000u32.to_be_bytes());
        let e = b.recover().unwrap_err();
        assert!(e.to_string().contains("r_count 5000"), "{e}");
    }

    #[test]
    fn a_log_with_no_end_stops_after_one_walk_of_the_area() {
        // Every block of the area a descriptor of sequence 10 naming one
        // block: the kernel would go round for ever. One walk, no commit.
        let b = Builder::plain();
        let tag = DescriptorTag {
            blocknr: BlockNo(1),
            flags: LAST_TAG,
            checksum: 0,
            uuid: Some([0; 16]),
        };
        let d = encode_descriptor(10, &[tag], b.jsb.tag_format(), BS).unwrap();
        let mut reads = 0;
        let r = recover(&b.jsb, |_| {
            reads += 1;
            Ok::<_, String>(d.clone())
        })
        .unwrap();
        assert_eq!((r.transactions, r.blocks.len()), (0, 0));
        assert!(reads <= 1023, "{reads} reads");
    }

    #[test]
    fn tags_are_counted_as_the_kernel_counts_them() {
        let fmt = TagFormat::default();
        // A first tag with SAME_UUID (8 bytes), then no LAST_TAG and no
        // SAME_UUID: 24-byte steps from byte 20 to the block's end.
        let mut d = vec![0u8; BS];
        BlockHeader::new(BlockType::Descriptor, 1).encode_into(&mut d);
        d[12 + 7] = SAME_UUID as u8;
        assert_eq!(tags(&d, fmt).len(), 1 + (BS - 20 - 8) / 24 + 1);
        // The last one's UUID would cross the end; it still counts, where
        // the strict decoder refuses the block.
        assert!(super::super::blocks::decode_descriptor(&d, fmt).is_err());
    }

    #[test]
    fn read_errors_and_bad_superblocks_are_errors() {
        let mut b = Builder::plain();
        b.transaction(&[(1, data(1))]);
        let read = |n: JournalBlockNo| match b.log.get(&n.0) {
            _ if n.0 == 2 => Err("gone"),
            Some(block) => Ok(block.clone()),
            None => Ok(data(0)),
        };
        let e = recover(&b.jsb, read).unwrap_err();
        assert!(
            matches!(
                e,
                RecoverError::Read {
                    block: JournalBlockNo(2),
                    ..
                }
            ),
            "{e}"
        );
        let e = recover(&b.jsb, |_| Ok::<_, String>(vec![0; 10])).unwrap_err();
        assert!(e.to_string().contains("read 10 bytes"), "{e}");
        let mut bad = b.jsb.clone();
        bad.start = 2000;
        bad.update_checksum();
        assert!(matches!(
            recover(&bad, |_| Ok::<_, String>(data(0))),
            Err(RecoverError::Corrupt(_))
        ));
    }

    #[test]
    fn reset_superblock_is_empty_and_checksummed() {
        let b = checksummed(V3);
        let r = b.recovered();
        let sb = b.jsb.reset(r.next_sequence);
        let sb = JournalSuperblock::decode(&sb.to_bytes(), 1024, 1024).unwrap();
        assert_eq!((sb.start, sb.sequence), (0, 13));
        assert_eq!(
            recover(&sb, |_| Ok::<_, String>(data(0)))
                .unwrap()
                .blocks
                .len(),
            0
        );
    }

    /// Writes the seed corpus of the `jbd2_recovery` fuzz target from the
    /// journals above (format: `fuzz/common/jbd2_journal.rs`). Run with
    /// `cargo test -p stitch-format write_fuzz_seeds -- --ignored`.
    #[test]
    #[ignore]
    fn write_fuzz_seeds() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/jbd2_recovery");
        std::fs::create_dir_all(&dir).unwrap();
        let mut escaped = data(3);
        escaped[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
        let seeds: Vec<(&str, Builder)> = vec![
            ("seed-plain", {
                let mut b = Builder::plain();
                b.transaction(&[(50, data(1)), (51, escaped)]);
                b.revoke(&[50]);
                b.transaction(&[(52, data(2))]);
                b.descriptor(&[(53, data(3))]);
                b
            }),
            ("seed-wrap-v1", {
                let mut b = Builder::new(V1, REVOKE, 1020, 7);
                b.transaction(&[(10, data(1)), (11, data(2)), (12, data(3))]);
                b.transaction(&[(13, data(4))]);
                b
            }),
            ("seed-v2", checksummed(V2)),
            ("seed-v3-64bit-async", checksummed(V3 | BIT64 | ASYNC)),
        ];
        for (name, b) in seeds {
            let mut out = b.jsb.to_bytes();
            for (n, block) in &b.log {
                out.extend_from_slice(&(*n as u16).to_be_bytes());
                out.extend_from_slice(block);
            }
            std::fs::write(dir.join(name), out).unwrap();
        }
    }
}
