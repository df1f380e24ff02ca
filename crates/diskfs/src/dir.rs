//! Directories: linear ext2 directories; entries added in the first block
//! with room (reusing the slack of removed entries), or in a new block;
//! removed by merging into the previous entry. A directory with a hash
//! index gets its index flag cleared when changed, which leaves it a valid
//! linear directory.
//!
//! The disk format is linear, but finding a name is not: the first use of a
//! directory scans it once into a [`DirIndex`] (memory only): its blocks,
//! which block holds each name, and each block's largest free slot. Every
//! edit here keeps the index exact, so a lookup, an add or a remove reads
//! one block, and a directory of a million names is not scanned per
//! operation. Invariant: an index exists only for a directory whose block
//! count it matches (checked on use; a mismatch rebuilds it), and it goes
//! when the inode is freed.

use crate::data::Src;
use crate::diff;
use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, META};
use std::collections::HashMap;
use stitch_format::dir::{self as fdir, MAX_NAME};
use stitch_format::inode::flags;
use stitch_format::{FileType, Inode, InodeNo, Timestamp};
use stitch_patch::{BlockNo, PatchId};

/// Directories indexed at once; past this, one is forgotten per new one.
const MAX_INDEXED: usize = 4096;

/// One directory's blocks and names, as the blocks in the cache hold them.
#[derive(Default)]
pub(crate) struct DirIndex {
    /// Physical blocks, in logical order.
    blocks: Vec<u32>,
    /// Which block (logical) holds each used name.
    names: HashMap<Vec<u8>, u32>,
    /// The largest record a block can take (`fdir::insert`'s test).
    room: Vec<usize>,
}

/// The largest record `block` can take.
fn room_in(block: &[u8]) -> usize {
    fdir::entries(block)
        .filter_map(|e| e.ok())
        .map(|e| e.slack())
        .max()
        .unwrap_or(0)
}

/// One entry as `readdir` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: Vec<u8>,
    pub ino: InodeNo,
    pub kind: Option<FileType>,
}

pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > MAX_NAME {
        return Err(DiskError::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(DiskError::Invalid("bad file name"));
    }
    Ok(())
}

/// The patch that added a directory entry since mount, and the removals
/// of older names its inode may still have on disk (a rename's source).
pub(crate) type Added = (PatchId, Vec<PatchId>);

impl DiskFs {
    pub(crate) fn dir_inode(&mut self, dir: InodeNo) -> Result<Inode> {
        let inode = self.read_inode(dir)?;
        if !inode.is_dir() {
            return Err(DiskError::NotDir);
        }
        Ok(inode)
    }

    /// The physical blocks of a directory, in order.
    fn dir_blocks(&mut self, inode: &Inode) -> Result<Vec<u32>> {
        let n = inode.size().div_ceil(self.bs as u64);
        let mut out = Vec::new();
        for logical in 0..n {
            let b = self
                .bmap(inode, logical)?
                .ok_or_else(|| DiskError::Corrupt(format!("directory hole at block {logical}")))?;
            out.push(b);
        }
        Ok(out)
    }

    /// Checks that `name` may be a new name in `parent`: well formed and
    /// not taken.
    pub(crate) fn check_new_name(&mut self, parent: InodeNo, name: &[u8]) -> Result<()> {
        check_name(name)?;
        if self.lookup(parent, name)?.is_some() {
            return Err(DiskError::Exists);
        }
        Ok(())
    }

    /// Looks `name` up in directory `dir`.
    pub fn lookup(&mut self, dir: InodeNo, name: &[u8]) -> Result<Option<Entry>> {
        let inode = self.dir_inode(dir)?;
        if name.len() > MAX_NAME {
            return Err(DiskError::NameTooLong);
        }
        let idx = self.index(dir, &inode)?;
        let Some(&i) = idx.names.get(name) else {
            return Ok(None);
        };
        let b = idx.blocks[i as usize];
        let block = self.m.read(BlockNo(u64::from(b)))?;
        match fdir::lookup(block, name).map_err(|e| e.in_block(u64::from(b)))? {
            Some(e) => Ok(Some(Entry {
                name: e.name.to_vec(),
                ino: e.inode,
                kind: e.file_type(),
            })),
            None => Err(self.stale_index(dir, "a name is not where the index has it")),
        }
    }

    /// The index of `dir` (`inode`), built by one scan if missing or if
    /// the directory's block count changed under it.
    fn index(&mut self, dir: InodeNo, inode: &Inode) -> Result<&DirIndex> {
        let n = inode.size().div_ceil(self.bs as u64) as usize;
        if self.dirs.get(&dir).is_none_or(|d| d.blocks.len() != n) {
            let blocks = self.dir_blocks(inode)?;
            let mut idx = DirIndex {
                names: HashMap::new(),
                room: Vec::with_capacity(blocks.len()),
                blocks: Vec::new(),
            };
            for (i, &b) in blocks.iter().enumerate() {
                let block = self.m.read(BlockNo(u64::from(b)))?;
                let mut room = 0;
                for e in fdir::entries(block) {
                    let e = e.map_err(|e| e.in_block(u64::from(b)))?;
                    room = room.max(e.slack());
                    if e.inode.0 != 0 {
                        idx.names.insert(e.name.to_vec(), i as u32);
                    }
                }
                idx.room.push(room);
            }
            idx.blocks = blocks;
            if self.dirs.len() >= MAX_INDEXED {
                if let Some(&k) = self.dirs.keys().next() {
                    self.dirs.remove(&k);
                }
            }
            self.dirs.insert(dir, idx);
        }
        Ok(&self.dirs[&dir])
    }

    /// Drops an index found wrong (a bug, or a directory changed behind
    /// diskfs's back) and says so; the next use rebuilds it.
    fn stale_index(&mut self, dir: InodeNo, what: &str) -> DiskError {
        self.dirs.remove(&dir);
        DiskError::Corrupt(format!("directory {}: {what}", dir.0))
    }

    /// Forgets the index of an inode that is freed (its number may come
    /// back as another directory).
    pub(crate) fn forget_dir(&mut self, ino: InodeNo) {
        self.dirs.remove(&ino);
    }

    /// Every used entry of `dir`, `.` and `..` included.
    pub fn readdir(&mut self, dir: InodeNo) -> Result<Vec<Entry>> {
        let inode = self.dir_inode(dir)?;
        let mut out = Vec::new();
        for b in self.dir_blocks(&inode)? {
            let block = self.m.read(BlockNo(u64::from(b)))?;
            for e in fdir::entries(block) {
                let e = e.map_err(|e| e.in_block(u64::from(b)))?;
                if e.inode.0 != 0 {
                    out.push(Entry {
                        name: e.name.to_vec(),
                        ino: e.inode,
                        kind: e.file_type(),
                    });
                }
            }
        }
        Ok(out)
    }

    /// Tries `edit` on the blocks `candidates` (logical, in order) of
    /// directory `dir`; the first block it changes is written as one patch
    /// after `deps`, covering also the bytes the edit says it read (see
    /// `diff::write_covering`), and its free room is noted in the index.
    /// Returns what the edit returned, that patch and the block's index.
    fn edit_dir_block<T>(
        &mut self,
        dir: InodeNo,
        candidates: &[u32],
        deps: &[PatchId],
        mut edit: impl FnMut(&mut [u8]) -> stitch_format::Result<Option<(T, Option<(usize, usize)>)>>,
    ) -> Result<Option<(T, Vec<PatchId>, u32)>> {
        for &i in candidates {
            let Some(&b) = self.dirs.get(&dir).and_then(|d| d.blocks.get(i as usize)) else {
                return Err(self.stale_index(dir, "the index lost a block it named"));
            };
            let blk = BlockNo(u64::from(b));
            let mut bytes = self.m.read(blk)?.to_vec();
            let edited = match edit(&mut bytes) {
                Ok(r) => r,
                Err(e) => {
                    self.dirs.remove(&dir);
                    return Err(e.in_block(u64::from(b)).into());
                }
            };
            let room = room_in(&bytes);
            if let Some((value, read)) = edited {
                let patch =
                    match diff::write_covering(&mut self.m, blk, 0, &bytes, read, deps, META) {
                        Ok(p) => p,
                        Err(e) => {
                            self.dirs.remove(&dir);
                            return Err(e.into());
                        }
                    };
                if let Some(d) = self.dirs.get_mut(&dir) {
                    d.room[i as usize] = room;
                }
                return Ok(Some((value, patch, i)));
            }
            if let Some(d) = self.dirs.get_mut(&dir) {
                d.room[i as usize] = room;
            }
        }
        Ok(None)
    }

    /// The block of `dir` holding `name`, as a candidate list.
    fn block_of(&mut self, dir: InodeNo, inode: &Inode, name: &[u8]) -> Result<Vec<u32>> {
        Ok(self
            .index(dir, inode)?
            .names
            .get(name)
            .copied()
            .into_iter()
            .collect())
    }

    /// Adds an entry; it depends on `deps` (the initialized inode it names:
    /// soft-updates rule 1).
    pub(crate) fn add_entry(
        &mut self,
        dir: InodeNo,
        name: &[u8],
        ino: InodeNo,
        ft: FileType,
        deps: &[PatchId],
        now: Timestamp,
    ) -> Result<Vec<PatchId>> {
        let mut inode = self.dir_inode(dir)?;
        let mut out = self.clear_index(dir, &mut inode)?;
        let need = fdir::rec_len_for(name.len());
        let candidates: Vec<u32> = {
            let idx = self.index(dir, &inode)?;
            if idx.names.contains_key(name) {
                return Err(DiskError::Exists);
            }
            (0..idx.room.len() as u32)
                .filter(|&i| idx.room[i as usize] >= need)
                .collect()
        };
        let inserted = self.edit_dir_block(dir, &candidates, deps, |bytes| {
            Ok(fdir::insert(bytes, name, ino, ft)?.then_some(((), None)))
        })?;
        if let Some(((), added, i)) = inserted {
            if let Some(&p) = added.first() {
                self.entry_adds
                    .insert((dir, name.to_vec()), (p, Vec::new()));
                self.forget_committed_adds();
            }
            self.named(ino, ft, &added);
            if let Some(d) = self.dirs.get_mut(&dir) {
                d.names.insert(name.to_vec(), i);
            }
            out.extend(added);
            out.extend(self.touch(dir, &mut inode, now)?);
            return Ok(out);
        }
        // No room: a new block, holding just this entry.
        let mut bytes = fdir::empty_block(self.bs);
        if !fdir::insert(&mut bytes, name, ino, ft)? {
            return Err(DiskError::Corrupt(
                "a new directory block has no room".into(),
            ));
        }
        let logical = inode.size() / self.bs as u64;
        let written = self.write_data_after(
            dir,
            &mut inode,
            logical * self.bs as u64,
            Src::Bytes(&bytes),
            now,
            deps,
        );
        let (n, ps) = match written {
            Ok(w) => w,
            Err(e) => {
                self.dirs.remove(&dir);
                return Err(e);
            }
        };
        if n < bytes.len() {
            self.dirs.remove(&dir);
            return Err(DiskError::NoSpace("no block for a directory"));
        }
        self.named(ino, ft, &ps);
        out.extend(ps);
        // The index grows by the new block (or is rebuilt if that fails).
        match self.bmap(&inode, logical)? {
            Some(b)
                if self
                    .dirs
                    .get(&dir)
                    .is_some_and(|d| d.blocks.len() as u64 == logical) =>
            {
                let d = self.dirs.get_mut(&dir).expect("checked");
                d.blocks.push(b);
                d.room.push(room_in(&bytes));
                d.names.insert(name.to_vec(), logical as u32);
            }
            _ => {
                self.dirs.remove(&dir);
            }
        }
        Ok(out)
    }

    /// Removes the entry `name` from `dir`; returns the inode it named, the
    /// patches that removed it (what the inode's unlinking must follow),
    /// and, if the entry never reached the disk, what that unlinking must
    /// follow instead ([`DiskFs::never_on_disk`]).
    pub(crate) fn remove_entry(
        &mut self,
        dir: InodeNo,
        name: &[u8],
        deps: &[PatchId],
        now: Timestamp,
    ) -> Result<(Entry, Vec<PatchId>, Option<Vec<PatchId>>)> {
        let mut inode = self.dir_inode(dir)?;
        let mut out = self.clear_index(dir, &mut inode)?;
        let candidates = self.block_of(dir, &inode, name)?;
        let removed = self.edit_dir_block(dir, &candidates, deps, |bytes| {
            let Some(found) = fdir::lookup(bytes, name)? else {
                return Ok(None);
            };
            // The previous entry's new length is read from the removed
            // entry's header: the patch covers it.
            let header = (found.offset, found.offset + fdir::HEADER);
            let kind = found.file_type();
            Ok(fdir::remove(bytes, name)?.map(|ino| ((ino, kind), Some(header))))
        })?;
        let Some(((ino, kind), gone, _)) = removed else {
            return Err(DiskError::NotFound);
        };
        if let Some(d) = self.dirs.get_mut(&dir) {
            d.names.remove(name);
        }
        let never_on_disk = self.never_on_disk(dir, name, &gone);
        out.extend(gone);
        out.extend(self.touch(dir, &mut inode, now)?);
        Ok((
            Entry {
                name: name.to_vec(),
                ino,
                kind,
            },
            out,
            never_on_disk,
        ))
    }

    /// Points the existing entry `name` of `dir` at `ino` (rename over an
    /// existing name: the entry changes in place, so the name is never
    /// missing on disk); after `deps`.
    pub(crate) fn retarget_entry(
        &mut self,
        dir: InodeNo,
        name: &[u8],
        ino: InodeNo,
        ft: FileType,
        deps: &[PatchId],
        now: Timestamp,
    ) -> Result<Vec<PatchId>> {
        let mut inode = self.dir_inode(dir)?;
        let mut out = self.clear_index(dir, &mut inode)?;
        let candidates = self.block_of(dir, &inode, name)?;
        let set = self.edit_dir_block(dir, &candidates, deps, |bytes| {
            Ok(fdir::set_inode(bytes, name, ino, ft)?.then_some(((), None)))
        })?;
        let Some(((), patch, _)) = set else {
            return Err(DiskError::NotFound);
        };
        self.named(ino, ft, &patch);
        out.extend(patch);
        out.extend(self.touch(dir, &mut inode, now)?);
        Ok(out)
    }

    /// Whether the entry `name` of `dir`, just removed by `gone`, never
    /// reached the disk: its removal merged into the still uncommitted patch
    /// that added it (Featherstitch §4.5). Then no state of the disk ever
    /// held the entry, and what the inode's loss of it must wait for is
    /// only the removal of any older name a rename took it from, which may
    /// still be on disk: `Some` of those (empty for a plain create).
    fn never_on_disk(
        &mut self,
        dir: InodeNo,
        name: &[u8],
        gone: &[PatchId],
    ) -> Option<Vec<PatchId>> {
        let (add, before) = self.entry_adds.remove(&(dir, name.to_vec()))?;
        let cache = self.m.cache();
        let a = cache.resolve(add)?;
        let g = gone.first().and_then(|&g| cache.resolve(g))?;
        (a == g && cache.state(a) == stitch_patch::PatchState::Uncommitted).then_some(before)
    }

    /// Drops the adds that have reached the disk (their entries can no
    /// longer be elided), each time the map reaches a power of two from
    /// 4096 on: otherwise every name made since mount would stay in it.
    fn forget_committed_adds(&mut self) {
        let n = self.entry_adds.len();
        if n < 4096 || !n.is_power_of_two() {
            return;
        }
        let cache = self.m.cache();
        self.entry_adds.retain(|_, (add, _)| {
            cache
                .resolve(*add)
                .is_some_and(|a| cache.state(a) == stitch_patch::PatchState::Uncommitted)
        });
    }

    /// Records that `added` gave the inode `ino` (of type `ft`) a name.
    /// Directories have one name and are left out. Each inode's list drops
    /// what has reached the disk as it grows, and the map drops inodes whose
    /// names all have, each time it reaches a power of two from 4096 on.
    fn named(&mut self, ino: InodeNo, ft: FileType, added: &[PatchId]) {
        if ft == FileType::Directory || added.is_empty() {
            return;
        }
        let cache = self.m.cache();
        let list = self.names_added.entry(ino).or_default();
        list.retain(|p| cache.resolve(*p).is_some());
        list.extend(added);
        let n = self.names_added.len();
        if n >= 4096 && n.is_power_of_two() {
            self.names_added
                .retain(|_, l| l.iter().any(|p| cache.resolve(*p).is_some()));
        }
    }

    /// What removing the name `name` of `dir` from `ino` must wait for: the
    /// patches that gave `ino` its other names, while not on disk. Without
    /// them a crash could keep the removal and lose the other name's entry,
    /// leaving the inode with no name at all (soft-updates rule 3). The
    /// name's own add is left out: a removal that merges into it leaves no
    /// trace on disk (`never_on_disk`). With `links` (its link count) at
    /// one the inode has no other name, and nothing is looked up (most
    /// unlinks).
    pub(crate) fn names_elsewhere(
        &self,
        ino: InodeNo,
        links: u16,
        dir: InodeNo,
        name: &[u8],
    ) -> Vec<PatchId> {
        if links <= 1 {
            return Vec::new();
        }
        let Some(list) = self.names_added.get(&ino) else {
            return Vec::new();
        };
        let cache = self.m.cache();
        let own = self
            .entry_adds
            .get(&(dir, name.to_vec()))
            .and_then(|(p, _)| cache.resolve(*p));
        list.iter()
            .filter_map(|p| cache.resolve(*p))
            .filter(|p| Some(*p) != own)
            .collect()
    }

    /// Records that the entry `name` of `dir`, just added by a rename,
    /// names an inode whose older name goes with `removed` (and, if that
    /// name never reached the disk either, with what it waited for).
    pub(crate) fn renamed_from(
        &mut self,
        dir: InodeNo,
        name: &[u8],
        removed: &[PatchId],
        before: Option<Vec<PatchId>>,
    ) {
        if let Some(added) = self.entry_adds.get_mut(&(dir, name.to_vec())) {
            added.1 = removed
                .iter()
                .copied()
                .chain(before.into_iter().flatten())
                .collect();
        }
    }

    /// Whether `dir` holds nothing but `.` and `..`.
    pub(crate) fn is_empty_dir(&mut self, dir: InodeNo) -> Result<bool> {
        let inode = self.dir_inode(dir)?;
        Ok(self
            .index(dir, &inode)?
            .names
            .keys()
            .all(|n| n == b"." || n == b".."))
    }

    /// A changed directory loses its hash index (we keep directories linear).
    fn clear_index(&mut self, dir: InodeNo, inode: &mut Inode) -> Result<Vec<PatchId>> {
        if inode.core.flags & flags::INDEX == 0 {
            return Ok(Vec::new());
        }
        inode.core.flags &= !flags::INDEX;
        self.inodes.write(&mut self.m, dir, inode, &[])
    }

    /// A directory's modification and change times.
    fn touch(&mut self, dir: InodeNo, inode: &mut Inode, now: Timestamp) -> Result<Vec<PatchId>> {
        inode.touch(now);
        self.inodes.write(&mut self.m, dir, inode, &[])
    }
}
