//! Checkpoints: the log's space. A transaction leaves the log once its
//! home writes are durable; the tail in the journal superblock then moves
//! past it, lazily (when space is needed, at `sync`, at unmount), and log
//! blocks written into the freed space depend on that superblock write.
//! A full log makes the commit wait for home writes, never overwrite a
//! live transaction.

use super::{Journal, JournalError, JSB_SEQ_START};
use crate::Result;
use stitch_patch::{PatchCache, PatchError, PatchFlags};

impl Journal {
    /// Waits until `need` log blocks are free: moves the tail past
    /// checkpointed transactions, writing the oldest ones' home blocks when
    /// that is not enough. A full journal blocks the commit, never corrupts.
    pub(super) fn make_space(&mut self, cache: &mut PatchCache, need: u32) -> Result<()> {
        if need > self.capacity() {
            return Err(PatchError::Invariant(
                JournalError::TooBig {
                    need,
                    capacity: self.capacity(),
                }
                .to_string(),
            ));
        }
        if self.capacity() - self.used() < need + self.capacity() / 2 {
            // Over half full: move the tail past what is already home.
            self.advance_tail(cache)?;
        }
        let mut waited = false;
        while self.capacity() - self.used() < need {
            let Some(oldest) = self.closed.front() else {
                return Err(PatchError::Invariant(format!(
                    "journal: {} blocks used with no live transaction",
                    self.used()
                )));
            };
            let homes = oldest.homes;
            let durable = oldest.durable;
            cache.sync_patch(durable)?;
            cache.sync_patch(homes)?;
            waited = true;
            self.advance_tail(cache)?;
        }
        self.stats.space_waits += u64::from(waited);
        Ok(())
    }

    /// Drops checkpointed transactions from the front of the log and, if
    /// the tail moved, writes it in the journal superblock.
    pub(super) fn advance_tail(&mut self, cache: &mut PatchCache) -> Result<()> {
        let mut moved = false;
        let mut done = None;
        while let Some(c) = self.closed.front() {
            if !(cache.is_committed(c.homes) && cache.is_committed(c.durable)) {
                break;
            }
            let c = self.closed.pop_front().expect("front exists");
            for b in &c.blocks {
                if self.live_copies.get(b) == Some(&c.seq) {
                    self.live_copies.remove(b);
                }
            }
            done = Some(c.epoch);
            moved |= c.log.is_some();
        }
        if let Some(last) = done {
            // Transactions close in epoch order: every group up to the
            // last one popped is durable.
            self.tx_of.retain(|_, e| *e > last);
        }
        if !moved {
            return Ok(());
        }
        let (tail, seq) = match self
            .closed
            .iter()
            .find_map(|c| c.log.map(|(s, _)| (s, c.seq)))
        {
            Some(t) => t,
            None => (self.head, self.next_seq),
        };
        self.write_tail(cache, tail, seq)
    }

    fn write_tail(&mut self, cache: &mut PatchCache, start: u32, seq: u32) -> Result<()> {
        self.tail = start;
        self.jsb.start = start;
        self.jsb.sequence = seq;
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&seq.to_be_bytes());
        bytes[4..].copy_from_slice(&start.to_be_bytes());
        let p = cache.create_byte(
            self.area[0],
            JSB_SEQ_START,
            &bytes,
            &[],
            PatchFlags::default(),
        )?;
        self.tail_patch = Some(p);
        self.stats.tail_moves += 1;
        Ok(())
    }
}
