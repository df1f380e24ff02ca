//! Directories' names by block, in memory (see the parent module): for
//! each directory used, its blocks, which block holds each name, and each
//! block's largest free slot.
//!
//! Invariant: an index is kept only for a directory whose block count it
//! matches (checked on use; a mismatch rebuilds it), and it goes when the
//! inode is freed or found out of step.

use rustc_hash::FxHashMap;
use std::collections::HashMap;
use stitch_format::dir as fdir;
use stitch_format::{BlockNo, InodeNo};

/// Directories indexed at once; past this, one is forgotten per new one.
const MAX_INDEXED: usize = 4096;

/// One directory's blocks and names, as the blocks in the cache hold them.
#[derive(Default)]
pub(crate) struct DirIndex {
    /// Physical blocks, in logical order.
    blocks: Vec<BlockNo>,
    /// Which block (logical) holds each used name.
    names: HashMap<Vec<u8>, u32>,
    /// The largest record a block can take (`fdir::insert`'s test).
    room: Vec<usize>,
}

/// The largest record `block` can take.
pub(crate) fn room_in(block: &[u8]) -> usize {
    fdir::entries(block)
        .filter_map(|e| e.ok())
        .map(|e| e.slack())
        .max()
        .unwrap_or(0)
}

impl DirIndex {
    /// An index of no blocks, to be filled a block at a time.
    pub(crate) fn with_capacity(blocks: usize) -> DirIndex {
        DirIndex {
            blocks: Vec::with_capacity(blocks),
            names: HashMap::new(),
            room: Vec::with_capacity(blocks),
        }
    }

    /// Adds physical block `b`, the next in logical order, whose entries
    /// are `block`; fails on an entry that does not decode.
    pub(crate) fn push_scanned(&mut self, b: BlockNo, block: &[u8]) -> stitch_format::Result<()> {
        let i = self.blocks.len() as u32;
        let mut room = 0;
        for e in fdir::entries(block) {
            let e = e?;
            room = room.max(e.slack());
            if e.inode.0 != 0 {
                self.names.insert(e.name.to_vec(), i);
            }
        }
        self.blocks.push(b);
        self.room.push(room);
        Ok(())
    }

    /// The physical block of logical block `i`.
    pub(crate) fn block(&self, i: u32) -> Option<BlockNo> {
        self.blocks.get(i as usize).copied()
    }

    /// The logical block holding `name`.
    pub(crate) fn block_of(&self, name: &[u8]) -> Option<u32> {
        self.names.get(name).copied()
    }

    /// The logical blocks with room for a record of `need` bytes.
    pub(crate) fn blocks_with_room(&self, need: usize) -> Vec<u32> {
        (0..self.room.len() as u32)
            .filter(|&i| self.room[i as usize] >= need)
            .collect()
    }

    /// Whether the directory holds nothing but `.` and `..`.
    pub(crate) fn only_dots(&self) -> bool {
        self.names.keys().all(|n| n == b"." || n == b"..")
    }
}

/// The indexes of the directories in use.
#[derive(Default)]
pub(crate) struct Indexes {
    dirs: FxHashMap<InodeNo, DirIndex>,
}

impl Indexes {
    /// `dir`'s index, if it has one of `blocks` blocks.
    pub(crate) fn current(&self, dir: InodeNo, blocks: usize) -> Option<&DirIndex> {
        self.dirs.get(&dir).filter(|d| d.blocks.len() == blocks)
    }

    pub(crate) fn get(&self, dir: InodeNo) -> Option<&DirIndex> {
        self.dirs.get(&dir)
    }

    /// Keeps `idx` as `dir`'s index (forgetting another directory's when
    /// there are too many).
    pub(crate) fn keep(&mut self, dir: InodeNo, idx: DirIndex) -> &DirIndex {
        if self.dirs.len() >= MAX_INDEXED {
            if let Some(&k) = self.dirs.keys().next() {
                self.dirs.remove(&k);
            }
        }
        self.dirs.entry(dir).insert_entry(idx).into_mut()
    }

    /// Forgets `dir`'s index; the next use rebuilds it.
    pub(crate) fn forget(&mut self, dir: InodeNo) {
        self.dirs.remove(&dir);
    }

    /// Notes that logical block `i` of `dir` can now take a record of
    /// `room` bytes.
    pub(crate) fn set_room(&mut self, dir: InodeNo, i: u32, room: usize) {
        if let Some(d) = self.dirs.get_mut(&dir) {
            d.room[i as usize] = room;
        }
    }

    /// Notes that logical block `i` of `dir` now holds `name`.
    pub(crate) fn add_name(&mut self, dir: InodeNo, name: &[u8], i: u32) {
        if let Some(d) = self.dirs.get_mut(&dir) {
            d.names.insert(name.to_vec(), i);
        }
    }

    /// Notes that `dir` no longer holds `name`.
    pub(crate) fn remove_name(&mut self, dir: InodeNo, name: &[u8]) {
        if let Some(d) = self.dirs.get_mut(&dir) {
            d.names.remove(name);
        }
    }

    /// Notes that `dir` grew by physical block `b` (logical `logical`),
    /// holding `bytes` with the one entry `name`; an index not of
    /// `logical` blocks before is out of step, and goes.
    pub(crate) fn grew(
        &mut self,
        dir: InodeNo,
        logical: u64,
        b: BlockNo,
        bytes: &[u8],
        name: &[u8],
    ) {
        match self.dirs.get_mut(&dir) {
            Some(d) if d.blocks.len() as u64 == logical => {
                d.blocks.push(b);
                d.room.push(room_in(bytes));
                d.names.insert(name.to_vec(), logical as u32);
            }
            _ => self.forget(dir),
        }
    }
}
