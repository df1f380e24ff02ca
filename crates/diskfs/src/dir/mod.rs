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
//!
//! Submodules: `index` (the indexes, [`Indexes`]) and `adds` (the patches
//! that gave names since mount, [`NameAdds`]), each a type of its own that
//! the operations here consult and keep up to date.

use crate::data::Src;
use crate::diff;
use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, META};
use crate::Refusal;

mod adds;
mod index;

pub(crate) use adds::NameAdds;
pub(crate) use index::Indexes;
use index::{room_in, DirIndex};
use stitch_format::dir::{self as fdir, MAX_NAME};
use stitch_format::inode::flags;
use stitch_format::{FileType, Inode, InodeNo, Timestamp};
use stitch_patch::{BlockNo, PatchId};

/// One entry as `readdir` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: Vec<u8>,
    pub ino: InodeNo,
    pub kind: Option<FileType>,
}

pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    if name.len() > MAX_NAME {
        return Err(DiskError::Refused(Refusal::NameTooLong));
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(DiskError::Refused(Refusal::Invalid("bad file name")));
    }
    Ok(())
}

impl DiskFs {
    pub(crate) fn dir_inode(&mut self, dir: InodeNo) -> Result<Inode> {
        let inode = self.read_inode(dir)?;
        if !inode.is_dir() {
            return Err(DiskError::Refused(Refusal::NotDir));
        }
        Ok(inode)
    }

    /// The physical blocks of a directory, in order.
    fn dir_blocks(&mut self, inode: &Inode) -> Result<Vec<BlockNo>> {
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
            return Err(DiskError::Refused(Refusal::Exists));
        }
        Ok(())
    }

    /// Looks `name` up in directory `dir`.
    pub fn lookup(&mut self, dir: InodeNo, name: &[u8]) -> Result<Option<Entry>> {
        let inode = self.dir_inode(dir)?;
        if name.len() > MAX_NAME {
            return Err(DiskError::Refused(Refusal::NameTooLong));
        }
        let idx = self.index(dir, &inode)?;
        let Some(b) = idx.block_of(name).and_then(|i| idx.block(i)) else {
            return Ok(None);
        };
        let block = self.m.read(b)?;
        match fdir::lookup(block, name).map_err(|e| e.in_block(b.0))? {
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
        if self.dirs.current(dir, n).is_none() {
            let blocks = self.dir_blocks(inode)?;
            let mut idx = DirIndex::with_capacity(blocks.len());
            for b in blocks {
                let block = self.m.read(b)?;
                idx.push_scanned(b, block).map_err(|e| e.in_block(b.0))?;
            }
            return Ok(self.dirs.keep(dir, idx));
        }
        Ok(self.dirs.get(dir).expect("current"))
    }

    /// Drops an index found wrong (a bug, or a directory changed behind
    /// diskfs's back) and says so; the next use rebuilds it.
    fn stale_index(&mut self, dir: InodeNo, what: &str) -> DiskError {
        self.dirs.forget(dir);
        DiskError::Corrupt(format!("directory {}: {what}", dir.0))
    }

    /// Forgets the index of an inode that is freed (its number may come
    /// back as another directory).
    pub(crate) fn forget_dir(&mut self, ino: InodeNo) {
        self.dirs.forget(ino);
    }

    /// Every used entry of `dir`, `.` and `..` included.
    pub fn readdir(&mut self, dir: InodeNo) -> Result<Vec<Entry>> {
        let inode = self.dir_inode(dir)?;
        let mut out = Vec::new();
        for b in self.dir_blocks(&inode)? {
            let block = self.m.read(b)?;
            for e in fdir::entries(block) {
                let e = e.map_err(|e| e.in_block(b.0))?;
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
            let Some(blk) = self.dirs.get(dir).and_then(|d| d.block(i)) else {
                return Err(self.stale_index(dir, "the index lost a block it named"));
            };
            let mut bytes = self.m.read(blk)?.to_vec();
            let edited = match edit(&mut bytes) {
                Ok(r) => r,
                Err(e) => {
                    self.dirs.forget(dir);
                    return Err(e.in_block(blk.0).into());
                }
            };
            let room = room_in(&bytes);
            if let Some((value, read)) = edited {
                let patch =
                    match diff::write_covering(&mut self.m, blk, 0, &bytes, read, deps, META) {
                        Ok(p) => p,
                        Err(e) => {
                            self.dirs.forget(dir);
                            return Err(e.into());
                        }
                    };
                self.dirs.set_room(dir, i, room);
                return Ok(Some((value, patch, i)));
            }
            self.dirs.set_room(dir, i, room);
        }
        Ok(None)
    }

    /// The block of `dir` holding `name`, as a candidate list.
    fn block_of(&mut self, dir: InodeNo, inode: &Inode, name: &[u8]) -> Result<Vec<u32>> {
        Ok(self.index(dir, inode)?.block_of(name).into_iter().collect())
    }

    /// Adds an entry; it depends on `deps` (the initialized inode it names:
    /// soft-updates rule 1). It goes in the first block with room, else in
    /// a new block ([`Self::add_in_new_block`]).
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
            if idx.block_of(name).is_some() {
                return Err(DiskError::Refused(Refusal::Exists));
            }
            idx.blocks_with_room(need)
        };
        let inserted = self.edit_dir_block(dir, &candidates, deps, |bytes| {
            let Some(at) = fdir::insert_at(bytes, name, ino, ft)? else {
                return Ok(None);
            };
            // The patch covers the whole new entry, the bytes that equal
            // what was there too (a removed entry's leftovers, the same
            // name): a later edit of the entry (its length, when the entry
            // after it goes; its inode, when a rename retargets it) then
            // overlaps the add and waits for it. Otherwise that edit could
            // reach the disk while the add, rolled back, leaves the entry
            // before skipping this one, and the edit is lost: a removed
            // entry after it shows again.
            Ok(Some(((), Some((at, at + need)))))
        })?;
        let Some(((), added, i)) = inserted else {
            // No room: a new block, holding just this entry.
            let mut bytes = fdir::empty_block(self.bs);
            if !fdir::insert(&mut bytes, name, ino, ft)? {
                return Err(DiskError::Corrupt(
                    "a new directory block has no room".into(),
                ));
            }
            let ps = self.add_in_new_block(dir, &mut inode, &bytes, name, deps, now)?;
            self.adds.named(self.m.cache(), ino, ft, &ps);
            out.extend(ps);
            return Ok(out);
        };
        if let Some(&p) = added.first() {
            self.adds.entry_added(self.m.cache(), dir, name, p);
        }
        self.adds.named(self.m.cache(), ino, ft, &added);
        self.dirs.add_name(dir, name, i);
        out.extend(added);
        out.extend(self.touch(dir, &mut inode, now)?);
        Ok(out)
    }

    /// [`Self::add_entry`] when no block has room: `bytes`, a new block
    /// holding just the entry `name`, goes at the end of `dir`, written as
    /// file data is (`data`), after `deps`.
    fn add_in_new_block(
        &mut self,
        dir: InodeNo,
        inode: &mut Inode,
        bytes: &[u8],
        name: &[u8],
        deps: &[PatchId],
        now: Timestamp,
    ) -> Result<Vec<PatchId>> {
        let logical = inode.size() / self.bs as u64;
        let at = logical * self.bs as u64;
        let written = self.write_data_after(dir, inode, at, Src::Bytes(bytes), now, deps);
        let (n, ps) = match written {
            Ok(w) => w,
            Err(e) => {
                self.dirs.forget(dir);
                return Err(e);
            }
        };
        if n < bytes.len() {
            self.dirs.forget(dir);
            return Err(DiskError::NoSpace("no block for a directory"));
        }
        // The index grows by the new block (or is rebuilt if that fails).
        match self.bmap(inode, logical)? {
            Some(b) => self.dirs.grew(dir, logical, b, bytes, name),
            None => self.dirs.forget(dir),
        }
        Ok(ps)
    }

    /// Removes the entry `name` from `dir`; returns the inode it named, the
    /// patches that removed it (what the inode's unlinking must follow),
    /// and, if the entry never reached the disk, what that unlinking must
    /// follow instead ([`NameAdds::never_on_disk`]).
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
            return Err(DiskError::Refused(Refusal::NotFound));
        };
        self.dirs.remove_name(dir, name);
        let never_on_disk = self.adds.never_on_disk(self.m.cache(), dir, name, &gone);
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
            return Err(DiskError::Refused(Refusal::NotFound));
        };
        self.adds.named(self.m.cache(), ino, ft, &patch);
        out.extend(patch);
        out.extend(self.touch(dir, &mut inode, now)?);
        Ok(out)
    }

    /// Whether `dir` holds nothing but `.` and `..`.
    pub(crate) fn is_empty_dir(&mut self, dir: InodeNo) -> Result<bool> {
        let inode = self.dir_inode(dir)?;
        Ok(self.index(dir, &inode)?.only_dots())
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
