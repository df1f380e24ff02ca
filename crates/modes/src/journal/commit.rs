//! The commit of one transaction, one function per phase (the module
//! comment of `journal` tells a transaction's whole life):
//!
//! 1. **close**: the running transaction stops taking changes; its
//!    revokes (of blocks it does not journal itself) and its unjournaled
//!    data patches are listed. A transaction with neither journaled blocks
//!    nor revokes takes no log record and no sequence number
//!    ([`Journal::close_data_only`]).
//! 2. **reserve**: log space for descriptors, copies, revoke blocks and the
//!    commit block, waiting for checkpoints if the log is full; the
//!    transaction takes its sequence number.
//! 3. **revokes**: the revoke blocks.
//! 4. **copies**: descriptor blocks, each followed by copies of the blocks
//!    it tags, the CRC32 of all of them running along.
//! 5. **commit block**: the point at which the transaction commits once it
//!    is durable. It depends on the revoke blocks, on the whole previous
//!    transaction and, in `ordered`, on the transaction's data, but not on
//!    its descriptors and copies: they go out in the same device flush,
//!    and the checksum tells a torn transaction (`ASYNC_COMMIT`).
//! 6. **release**: the hold waits on the whole transaction in the log and
//!    is released, so home writes may go; the transaction joins the closed
//!    list with what makes it durable and what checkpoints it.
//!
//! [`Phase`] records how far a commit got; each phase checks that the one
//! before it ran, so the order cannot be broken by a later edit.

use super::{Closed, Journal, Running};
use crate::{DataMode, Result};
use std::collections::BTreeSet;
use stitch_format::jbd2::blocks::{commit_csum, encode_descriptor, tag_flags, tags_per_descriptor};
use stitch_format::jbd2::checksum::crc32_be;
use stitch_format::jbd2::{CommitBlock, DescriptorTag, RevokeBlock, JBD2_MAGIC};
use stitch_patch::{BlockNo, PatchCache, PatchError, PatchId, EMPTY_FAN_IN};

/// How far a commit got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Closed,
    Reserved,
    RevokesWritten,
    CopiesWritten,
    CommitWritten,
}

/// A transaction on its way into the log.
struct Committing {
    phase: Phase,
    running: Running,
    /// Blocks revoked and not journaled again by this transaction.
    revokes: Vec<BlockNo>,
    /// Its unjournaled data patches, live ones only, each once.
    data: Vec<PatchId>,
    seq: u32,
    /// Log position of its first block, and its length in blocks.
    start: u32,
    need: u32,
    /// The superblock write that freed the log space it writes into.
    space_dep: Vec<PatchId>,
    /// Every log block written so far, and the revoke blocks among them.
    log: Vec<PatchId>,
    revoke_blocks: Vec<PatchId>,
    crc: u32,
    commit: Option<PatchId>,
    /// Fault injection: the home writes went before the commit block.
    homes_first: bool,
}

impl Committing {
    /// Moves to `next`, which must follow the phase reached.
    fn enter(&mut self, next: Phase, from: Phase) {
        assert_eq!(
            self.phase, from,
            "journal commit: {next:?} after {:?}, not after {from:?}",
            self.phase
        );
        self.phase = next;
    }
}

impl Journal {
    /// Closes the running transaction: log record, commit block, release.
    pub fn commit(&mut self, cache: &mut PatchCache) -> Result<()> {
        self.want_commit = false;
        let Some(running) = self.running.take() else {
            return Ok(());
        };
        let mut tx = close(running, cache);
        if tx.running.blocks.is_empty() && tx.revokes.is_empty() {
            return self.close_data_only(tx, cache);
        }
        self.reserve(&mut tx, cache)?;
        self.write_revokes(&mut tx, cache)?;
        self.write_copies(&mut tx, cache)?;
        self.write_commit_block(&mut tx, cache)?;
        self.release(tx, cache)
    }

    /// Only unjournaled data (or nothing): no log record, no sequence.
    /// Still durable only after every earlier transaction, so a sync of it
    /// covers them too (as JBD2's commits wait in order).
    fn close_data_only(&mut self, tx: Committing, cache: &mut PatchCache) -> Result<()> {
        assert_eq!(tx.phase, Phase::Closed);
        cache.release(tx.running.hold)?;
        let mut deps = tx.data.clone();
        deps.extend(self.closed.back().map(|c| c.durable));
        let durable = cache.create_empty(&deps)?;
        let homes = cache.create_empty(&[])?;
        self.stats.data_only += u64::from(!tx.data.is_empty());
        self.closed.push_back(Closed {
            epoch: tx.running.epoch,
            log: None,
            seq: self.next_seq,
            durable,
            homes,
            blocks: Vec::new(),
        });
        Ok(())
    }

    /// Reserves the transaction's log space and gives it a sequence number.
    fn reserve(&mut self, tx: &mut Committing, cache: &mut PatchCache) -> Result<()> {
        tx.enter(Phase::Reserved, Phase::Closed);
        let per_desc = tags_per_descriptor(self.fmt, self.bs).max(1);
        let per_revoke = RevokeBlock::capacity(self.fmt, self.bs).max(1);
        let blocks = tx.running.blocks.len();
        tx.need =
            (tx.revokes.len().div_ceil(per_revoke) + blocks.div_ceil(per_desc) + blocks + 1) as u32;
        self.make_space(cache, tx.need)?;
        tx.seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        tx.space_dep = self
            .tail_patch
            .filter(|&p| !cache.is_committed(p))
            .into_iter()
            .collect();
        tx.start = self.head;
        tx.log = Vec::with_capacity(tx.need as usize);
        Ok(())
    }

    fn write_revokes(&mut self, tx: &mut Committing, cache: &mut PatchCache) -> Result<()> {
        tx.enter(Phase::RevokesWritten, Phase::Reserved);
        let per_revoke = RevokeBlock::capacity(self.fmt, self.bs).max(1);
        for chunk in tx.revokes.chunks(per_revoke) {
            let rb = RevokeBlock {
                sequence: tx.seq,
                blocks: chunk.to_vec(),
            };
            let bytes = rb
                .encode(self.fmt, self.bs)
                .map_err(|e| PatchError::Invariant(format!("revoke block: {e}")))?;
            let p = self.write_log(cache, &bytes, &tx.space_dep)?;
            tx.log.push(p);
            tx.revoke_blocks.push(p);
            self.stats.revokes += chunk.len() as u64;
        }
        Ok(())
    }

    /// Descriptor blocks, each followed by copies of the blocks it tags (a
    /// copy starting with the JBD2 magic is escaped).
    fn write_copies(&mut self, tx: &mut Committing, cache: &mut PatchCache) -> Result<()> {
        tx.enter(Phase::CopiesWritten, Phase::RevokesWritten);
        let per_desc = tags_per_descriptor(self.fmt, self.bs).max(1);
        let mut copies = std::mem::take(&mut self.copies);
        for chunk in tx.running.blocks.chunks(per_desc) {
            let mut tags = Vec::with_capacity(chunk.len());
            copies.clear();
            for (i, &b) in chunk.iter().enumerate() {
                let at = copies.len();
                copies.extend_from_slice(cache.read(b)?);
                let copy = &mut copies[at..];
                let mut flags = if i == 0 { 0 } else { tag_flags::SAME_UUID };
                if copy[..4] == JBD2_MAGIC.to_be_bytes() {
                    flags |= tag_flags::ESCAPE;
                    copy[..4].fill(0);
                }
                if i + 1 == chunk.len() {
                    flags |= tag_flags::LAST_TAG;
                }
                tags.push(DescriptorTag {
                    blocknr: b,
                    flags,
                    checksum: 0,
                    uuid: (i == 0).then_some(self.jsb.uuid),
                });
            }
            let desc = encode_descriptor(tx.seq, &tags, self.fmt, self.bs)
                .map_err(|e| PatchError::Invariant(format!("descriptor block: {e}")))?;
            tx.crc = crc32_be(tx.crc, &desc);
            tx.log.push(self.write_log(cache, &desc, &tx.space_dep)?);
            for copy in copies.chunks(self.bs) {
                tx.crc = crc32_be(tx.crc, copy);
                tx.log.push(self.write_log(cache, copy, &tx.space_dep)?);
                self.stats.copies += 1;
            }
        }
        self.copies = copies;
        Ok(())
    }

    /// The commit block: the transaction commits when it is durable.
    fn write_commit_block(&mut self, tx: &mut Committing, cache: &mut PatchCache) -> Result<()> {
        tx.enter(Phase::CommitWritten, Phase::CopiesWritten);
        let (sec, nsec) = self.commit_time();
        let mut cb = CommitBlock::new(tx.seq, sec, nsec);
        cb.chksum_type = commit_csum::CRC32;
        cb.chksum_size = commit_csum::CRC32_SIZE;
        cb.chksum[0] = tx.crc;
        // Revoke blocks are not in the checksum, so the commit follows
        // them; it follows the previous transaction (replay stops at the
        // first torn one) and, in `ordered` mode, the transaction's data.
        let mut deps = tx.revoke_blocks.clone();
        deps.extend(self.prev_commit);
        if self.data == DataMode::Ordered {
            // Through one empty patch (a tree of them, for a wide one) when
            // there are many: the commit block is a byte patch, which waits
            // on its dependencies directly, and each data patch that
            // committed shifted the sorted list behind it. A 16 MiB
            // write-behind flush has 4,096 data patches.
            if tx.data.len() > EMPTY_FAN_IN {
                deps.push(cache.create_empty(&tx.data)?);
            } else {
                deps.extend(&tx.data);
            }
        }
        deps.extend(&tx.space_dep);
        // FAULT INJECTION (feature `fault-injection`): with the switch on,
        // the home writes go first and the commit block waits for them.
        #[cfg(feature = "fault-injection")]
        {
            tx.homes_first = crate::fault::home_before_commit();
        }
        if tx.homes_first {
            cache.release(tx.running.hold)?;
            deps.extend(tx.running.homes.iter().filter_map(|&h| cache.resolve(h)));
        }
        let block = cb.encode_block(self.bs, None);
        tx.commit = Some(self.write_log(cache, &block, &deps)?);
        Ok(())
    }

    /// The transaction is in the log once all of it is: only then may home
    /// blocks be written, a later commit follow, or a sync return.
    fn release(&mut self, mut tx: Committing, cache: &mut PatchCache) -> Result<()> {
        assert_eq!(tx.phase, Phase::CommitWritten, "journal commit: release");
        tx.log.extend(tx.commit);
        let logged = cache.create_empty(&tx.log)?;
        self.prev_commit = Some(logged);
        let r = &tx.running;
        if !tx.homes_first {
            cache.add_dependency(r.hold, logged)?;
            cache.release(r.hold)?;
        }
        let durable = if self.data == DataMode::Writeback && !tx.data.is_empty() {
            let mut d = tx.data.clone();
            d.push(logged);
            cache.create_empty(&d)?
        } else {
            logged
        };
        let homes: Vec<PatchId> = r.homes.iter().filter_map(|&h| cache.resolve(h)).collect();
        let homes = cache.create_empty(&homes)?;
        let blocks = r.blocks.clone();
        for &b in &blocks {
            self.live_copies.insert(b, tx.seq);
        }
        for b in &tx.revokes {
            self.live_copies.remove(b);
        }
        self.stats.commits += 1;
        self.closed.push_back(Closed {
            epoch: r.epoch,
            log: Some((tx.start, tx.need)),
            seq: tx.seq,
            durable,
            homes,
            blocks,
        });
        Ok(())
    }
}

/// Phase 1: the running transaction, closed.
fn close(running: Running, cache: &PatchCache) -> Committing {
    let revokes: Vec<BlockNo> = running
        .revokes
        .iter()
        .copied()
        .filter(|b| !running.block_set.contains(b))
        .collect();
    let data: Vec<PatchId> = running
        .data
        .iter()
        .filter_map(|&d| cache.resolve(d))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    Committing {
        phase: Phase::Closed,
        running,
        revokes,
        data,
        seq: 0,
        start: 0,
        need: 0,
        space_dep: Vec::new(),
        log: Vec::new(),
        revoke_blocks: Vec::new(),
        crc: !0u32,
        commit: None,
        homes_first: false,
    }
}
