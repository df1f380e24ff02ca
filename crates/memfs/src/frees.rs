//! The blocks the disk will free: what memfs's removals and truncates give
//! back once a flush applies them, counted by `statfs` at once (`df` shows
//! a removed file's room when it is removed, not at the next flush).
//!
//! Each inode's share is a pure function of its state
//! ([`NodeState::freeing`]):
//! - an inode that leaves the disk (no name left, and a file nobody holds
//!   open): every block its `i_blocks` counts (data, indirect, a directory's
//!   or symlink's blocks, its attribute block), less an attribute block
//!   other inodes name too (a deletion only drops its count);
//! - a file cut below its size on disk: `i_blocks` less its attribute
//!   block and less what the new size can hold without holes (its data
//!   blocks and the indirect blocks mapping them). Exact for a file with no
//!   holes below the cut; less for one with holes (the flush frees more).
//!
//! The inode holds its share in `freeing` and the file system the sum in
//! [`Frees::pending`], changed together under the inode's lock whenever
//! the state it depends on changes ([`MemFs::recount_frees`]). A cut moves
//! the shares its plan applies to [`Frees::in_flight`], and sets the
//! inode's view of the disk to what it will be (no more than), so a share
//! counted again before the flush reads the disk back cannot count a block
//! twice. The apply stores the disk's free count and takes its plan's
//! shares out of `in_flight` in one step ([`MemFs::publish_disk_free`]),
//! which `statfs` reads in one step too.
//!
//! Invariant: a share never exceeds what its flush will free, so `statfs`
//! never shows room the disk will not have. What it leaves out comes back
//! at the flush: the holes case above, an attribute set rewritten (its old
//! block), and the room held for names and new directories not yet on
//! disk (held until the flush applies them).

use crate::fs::MemFs;
use crate::node::{Node, NodeState};
use crate::types::Kind;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use stitch_diskfs::XattrBlock;

/// A share taken out of a sum that does not hold it: a bug in the
/// bookkeeping, which would show room the disk does not have.
const COUNTED: &str = "a share is counted in the sum it leaves";

/// The shares of every inode in memory: not yet cut, and cut but not yet
/// applied.
#[derive(Default)]
pub(crate) struct Frees {
    pub pending: u64,
    pub in_flight: u64,
}

impl NodeState {
    /// Whether the inode leaves the disk once what memory holds reaches
    /// it: no name, and (a file) nobody holds it open. A directory leaves
    /// at its `rmdir` even if it is someone's working directory.
    fn leaves_disk(&self) -> bool {
        self.nlink == 0 && (self.kind == Kind::Dir || self.open == 0) && !self.never_disk
    }

    /// This inode's share: the blocks the disk will free for it (see the
    /// module).
    pub fn freeing(&self, block_size: u64) -> u64 {
        let held = self.disk_sectors / (block_size / 512);
        if self.leaves_disk() {
            return held.saturating_sub(u64::from(self.xattr_block == XattrBlock::Shared));
        }
        if self.kind == Kind::File && self.min_size < self.disk_size && !self.never_disk {
            let attrs = u64::from(self.xattr_block != XattrBlock::None);
            return held.saturating_sub(dense_blocks(self.min_size, block_size) + attrs);
        }
        0
    }
}

impl MemFs {
    /// Counts `s`'s share anew after a change of what it depends on.
    pub(crate) fn recount_frees(&self, s: &mut NodeState) {
        let now = s.freeing(self.inner.block_size);
        let mut f = self.inner.frees.lock();
        f.pending = f.pending.checked_sub(s.freeing).expect(COUNTED) + now;
        s.freeing = now;
    }

    /// A cut takes the state of file `s` (`Dirty`), which still has
    /// names: its cut below the disk's size goes with the plan. Its share
    /// moves to in flight; its sectors drop by the most the cut can free,
    /// and an attribute set the plan rewrites is not counted on, until the
    /// flush reads the inode back. Returns the share. Call before the cut
    /// sets the disk's size to memory's.
    pub(crate) fn take_cut_frees(&self, s: &mut NodeState, xattrs_written: bool) -> u64 {
        let bs = self.inner.block_size;
        if s.min_size < s.disk_size {
            let most = dense_blocks(s.disk_size, bs) - dense_blocks(s.min_size, bs);
            s.disk_sectors = s.disk_sectors.saturating_sub(most * (bs / 512));
        }
        if xattrs_written && s.xattr_block != XattrBlock::None {
            s.xattr_block = XattrBlock::Shared;
        }
        self.move_to_flight(s)
    }

    /// A cut whose plan applies every change left of the inodes in
    /// `nodes` (none is pending after it): each that leaves the disk goes
    /// with the plan, its share in flight and no sectors left to it.
    /// Returns the shares.
    pub(crate) fn take_leaving_frees<'a>(
        &self,
        nodes: impl IntoIterator<Item = &'a Arc<Node>>,
    ) -> u64 {
        let mut sum = 0;
        for n in nodes {
            let mut s = n.s.write();
            if s.leaves_disk() {
                sum += self.move_to_flight(&mut s);
                s.disk_sectors = 0;
                s.xattr_block = XattrBlock::None;
            }
        }
        sum
    }

    /// A flush read inode `s` back from the disk: its sectors and
    /// attribute block, and its share anew. Not for an inode that left the
    /// disk: what the read found is its remains, and its share went with
    /// the cut (one that left after the cut keeps its older, smaller view:
    /// a file shrinks only at a cut, a directory never).
    pub(crate) fn read_back(&self, s: &mut NodeState, sectors: u64, xattr_block: XattrBlock) {
        if s.leaves_disk() {
            return;
        }
        s.disk_sectors = sectors;
        s.xattr_block = xattr_block;
        self.recount_frees(s);
    }

    /// Moves `s`'s share from pending to in flight.
    fn move_to_flight(&self, s: &mut NodeState) -> u64 {
        let share = std::mem::take(&mut s.freeing);
        let mut f = self.inner.frees.lock();
        f.pending = f.pending.checked_sub(share).expect(COUNTED);
        f.in_flight += share;
        share
    }

    /// Stores the disk's free block count after a plan was applied, and
    /// takes the plan's shares (`applied`) out of in flight: one step, so
    /// no `statfs` counts a freed block both ways.
    pub(crate) fn publish_disk_free(&self, free: u64, applied: u64) {
        let mut f = self.inner.frees.lock();
        self.inner.disk_free_blocks.store(free, Ordering::Release);
        f.in_flight = f.in_flight.checked_sub(applied).expect(COUNTED);
    }

    /// Postcondition of a flush of everything with nothing running beside
    /// it (unmount): every share was applied, and none is left over.
    pub(crate) fn debug_assert_frees_settled(&self) {
        let f = self.inner.frees.lock();
        debug_assert_eq!(
            (f.pending, f.in_flight),
            (0, 0),
            "shares left after a full flush"
        );
    }

    /// The disk's free blocks and the blocks memfs knows it will free, read
    /// in one step.
    pub(crate) fn free_and_freeing(&self) -> (u64, u64) {
        let f = self.inner.frees.lock();
        let free = self.inner.disk_free_blocks.load(Ordering::Acquire);
        (free, f.pending + f.in_flight)
    }
}

/// Blocks a file of `size` bytes without holes holds: its data blocks and
/// the indirect blocks mapping them (ext2's 12 direct pointers, then a
/// single, a double and a triple indirect tree of `block_size / 4`
/// pointers a block).
pub(crate) fn dense_blocks(size: u64, block_size: u64) -> u64 {
    let data = size.div_ceil(block_size);
    let per = block_size / 4;
    let mut left = data.saturating_sub(12);
    let mut maps = 0;
    if left > 0 {
        maps += 1;
        left = left.saturating_sub(per);
    }
    if left > 0 {
        let here = left.min(per * per);
        maps += 1 + here.div_ceil(per);
        left -= here;
    }
    if left > 0 {
        maps += 1 + left.div_ceil(per * per) + left.div_ceil(per);
    }
    data + maps
}

#[cfg(test)]
mod tests {
    use super::dense_blocks;

    /// The counts mke2fs's and the kernel's ext2 give files of these sizes
    /// (4 KiB blocks, 1024 pointers a block).
    #[test]
    fn dense_files_hold_their_data_and_indirect_blocks() {
        let k = 4096u64;
        let check = [
            (0, 0),
            (1, 1),
            (12 * k, 12),
            (12 * k + 1, 14),
            ((12 + 1024) * k, 1037),
            ((12 + 1024) * k + 1, 1040),
            (
                (12 + 1024 + 1024 * 1024) * k,
                12 + 1024 + 1024 * 1024 + 1 + 1 + 1024,
            ),
            (
                (12 + 1024 + 1024 * 1024 + 1) * k,
                12 + 1024 + 1024 * 1024 + 1 + 1 + 1024 + 1 + 3,
            ),
        ];
        for (size, blocks) in check {
            assert_eq!(dense_blocks(size, k), blocks, "{size}");
        }
    }
}
