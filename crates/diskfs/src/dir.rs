//! Directories: linear ext2 directories, looked up by scanning their
//! blocks; entries added in the first block with room (reusing the slack of
//! removed entries), or in a new block; removed by merging into the
//! previous entry. A directory with a hash index gets its index flag
//! cleared when changed, which leaves it a valid linear directory.

use crate::diff;
use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, META};
use stitch_format::dir::{self as fdir, MAX_NAME};
use stitch_format::inode::flags;
use stitch_format::{FileType, Inode, InodeNo};
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
        return Err(DiskError::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(DiskError::Invalid("bad file name"));
    }
    Ok(())
}

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

    /// Looks `name` up in directory `dir`.
    pub fn lookup(&mut self, dir: InodeNo, name: &[u8]) -> Result<Option<Entry>> {
        let inode = self.dir_inode(dir)?;
        if name.len() > MAX_NAME {
            return Err(DiskError::NameTooLong);
        }
        for b in self.dir_blocks(&inode)? {
            let block = self.m.read(BlockNo(u64::from(b)))?;
            if let Some(e) = fdir::lookup(block, name).map_err(|e| e.in_block(u64::from(b)))? {
                return Ok(Some(Entry {
                    name: e.name.to_vec(),
                    ino: e.inode,
                    kind: e.file_type(),
                }));
            }
        }
        Ok(None)
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

    /// Tries `edit` on each block of directory `dir` in turn; the first
    /// block it changes is written as one patch after `deps`, covering also
    /// the bytes the edit says it read (see `diff::write_covering`). Returns
    /// what the edit returned and that patch.
    fn edit_dir_block<T>(
        &mut self,
        inode: &Inode,
        deps: &[PatchId],
        mut edit: impl FnMut(&mut [u8]) -> stitch_format::Result<Option<(T, Option<(usize, usize)>)>>,
    ) -> Result<Option<(T, Vec<PatchId>)>> {
        for b in self.dir_blocks(inode)? {
            let blk = BlockNo(u64::from(b));
            let mut bytes = self.m.read(blk)?.to_vec();
            if let Some((value, read)) = edit(&mut bytes).map_err(|e| e.in_block(u64::from(b)))? {
                let patch = diff::write_covering(&mut self.m, blk, 0, &bytes, read, deps, META)?;
                return Ok(Some((value, patch)));
            }
        }
        Ok(None)
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
        now: u32,
    ) -> Result<Vec<PatchId>> {
        let mut inode = self.dir_inode(dir)?;
        let mut out = self.clear_index(dir, &mut inode)?;
        let inserted = self.edit_dir_block(&inode, deps, |bytes| {
            Ok(fdir::insert(bytes, name, ino, ft)?.then_some(((), None)))
        })?;
        if let Some(((), added)) = inserted {
            if let Some(&p) = added.first() {
                self.entry_adds.insert((dir, name.to_vec()), p);
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
        let (n, ps) = self.write_data(dir, &mut inode, logical * self.bs as u64, &bytes, now)?;
        if n < bytes.len() {
            return Err(DiskError::NoSpace("no block for a directory"));
        }
        out.extend(ps);
        Ok(out)
    }

    /// Removes the entry `name` from `dir`; returns the inode it named, the
    /// patches that removed it (what the inode's unlinking must follow), and
    /// whether the entry never reached the disk.
    pub(crate) fn remove_entry(
        &mut self,
        dir: InodeNo,
        name: &[u8],
        deps: &[PatchId],
        now: u32,
    ) -> Result<(Entry, Vec<PatchId>, bool)> {
        let mut inode = self.dir_inode(dir)?;
        let mut out = self.clear_index(dir, &mut inode)?;
        let removed = self.edit_dir_block(&inode, deps, |bytes| {
            let Some(found) = fdir::lookup(bytes, name)? else {
                return Ok(None);
            };
            // The previous entry's new length is read from the removed
            // entry's header: the patch covers it.
            let header = (found.offset, found.offset + fdir::HEADER);
            let kind = found.file_type();
            Ok(fdir::remove(bytes, name)?.map(|ino| ((ino, kind), Some(header))))
        })?;
        let Some(((ino, kind), gone)) = removed else {
            return Err(DiskError::NotFound);
        };
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
        now: u32,
    ) -> Result<Vec<PatchId>> {
        let mut inode = self.dir_inode(dir)?;
        let mut out = self.clear_index(dir, &mut inode)?;
        let set = self.edit_dir_block(&inode, deps, |bytes| {
            Ok(fdir::set_inode(bytes, name, ino, ft)?.then_some(((), None)))
        })?;
        let Some(((), patch)) = set else {
            return Err(DiskError::NotFound);
        };
        out.extend(patch);
        out.extend(self.touch(dir, &mut inode, now)?);
        Ok(out)
    }

    /// Whether the entry `name` of `dir`, just removed by `gone`, never
    /// reached the disk: its removal merged into the still uncommitted patch
    /// that added it (Featherstitch §4.5). Then nothing need wait for the
    /// removal: no state of the disk ever held the entry.
    fn never_on_disk(&mut self, dir: InodeNo, name: &[u8], gone: &[PatchId]) -> bool {
        let Some(add) = self.entry_adds.remove(&(dir, name.to_vec())) else {
            return false;
        };
        let cache = self.m.cache();
        let (Some(a), Some(g)) = (
            cache.resolve(add),
            gone.first().and_then(|&g| cache.resolve(g)),
        ) else {
            return false;
        };
        a == g && cache.state(a) == stitch_patch::PatchState::Uncommitted
    }

    /// Whether `dir` holds nothing but `.` and `..`.
    pub(crate) fn is_empty_dir(&mut self, dir: InodeNo) -> Result<bool> {
        Ok(self
            .readdir(dir)?
            .iter()
            .all(|e| e.name == b"." || e.name == b".."))
    }

    /// A changed directory loses its hash index (we keep directories linear).
    fn clear_index(&mut self, dir: InodeNo, inode: &mut Inode) -> Result<Vec<PatchId>> {
        if inode.core.flags & flags::INDEX == 0 {
            return Ok(Vec::new());
        }
        inode.core.flags &= !flags::INDEX;
        self.write_inode(dir, inode, &[])
    }

    /// A directory's modification and change times.
    fn touch(&mut self, dir: InodeNo, inode: &mut Inode, now: u32) -> Result<Vec<PatchId>> {
        inode.core.mtime = now;
        inode.core.ctime = now;
        self.write_inode(dir, inode, &[])
    }
}
