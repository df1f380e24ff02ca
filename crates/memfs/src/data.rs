//! File data and attributes: reads and writes on pages, truncate, setattr.
//! A page read from disk stays as a clean page (a cache); a write dirties
//! its pages, and the first change since a flush logs a `Dirty` entry.

use crate::error::{MemError, Result};
use crate::fs::MemFs;
use crate::log::LogOp;
use crate::node::{NodeState, Page, Xattrs};
use crate::types::{Attr, DropSetId, Kind, SetAttrs, XattrSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use stitch_diskfs::{xattrs_fit_block as fits_block, InodeNo, Xattr};

/// ext2's largest file with 4 KiB blocks and triple indirect maps is
/// about 4 TiB; the block map limit is checked by diskfs at flush, this
/// bound refuses what could never fit before it reaches memory.
const MAX_FILE: u64 = (1 << 42) - 1;

impl MemFs {
    /// The file system's block size.
    pub fn block_size(&self) -> u64 {
        self.inner.block_size
    }

    /// Page `idx` of a file, from memory or (within the disk size) from
    /// diskfs; `None` is a hole or past the disk's end.
    fn page_for_read(&self, ino: u64, s: &NodeState, idx: u64) -> Result<Option<Page>> {
        if let Some(p) = s.pages.get(&idx) {
            return Ok(Some(p.clone()));
        }
        let bs = self.block_size();
        if idx * bs >= s.disk_size.min(s.min_size) {
            return Ok(None);
        }
        let len = (s.disk_size.min(s.min_size) - idx * bs).min(bs) as usize;
        let mut data = self.disk_op(|d| d.read(InodeNo(ino as u32), idx * bs, len))?;
        data.resize(bs as usize, 0);
        Ok(Some(Arc::new(data)))
    }

    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        let _g = self.inner.gate.read();
        let n = self.node(ino)?;
        let bs = self.block_size();
        // Fast path under the read lock; pages missing from memory are
        // loaded under the write lock.
        let mut s = n.s.upgradable_read();
        match s.kind {
            Kind::File => {}
            Kind::Dir => return Err(MemError::IsDir),
            _ => return Err(MemError::Invalid("read of a special file")),
        }
        if offset >= s.size {
            return Ok(Vec::new());
        }
        let end = (offset + u64::from(size)).min(s.size);
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut pos = offset;
        while pos < end {
            let idx = pos / bs;
            let within = (pos % bs) as usize;
            let take = ((bs - pos % bs).min(end - pos)) as usize;
            let page = if s.pages.contains_key(&idx) {
                s.pages.get(&idx).cloned()
            } else {
                let p = self.page_for_read(ino, &s, idx)?;
                if let Some(p) = &p {
                    s.with_upgraded(|w| {
                        if w.pages.insert(idx, p.clone()).is_none() {
                            self.inner.pages.fetch_add(1, Ordering::AcqRel);
                        }
                    });
                }
                p
            };
            match page {
                Some(p) => out.extend_from_slice(&p[within..within + take]),
                None => out.resize(out.len() + take, 0),
            }
            pos += take as u64;
        }
        drop(s);
        drop(_g);
        self.relieve_pressure();
        Ok(out)
    }

    /// Writes `data` at `offset` (or at the end, for `append`); returns the
    /// bytes written, short only when the disk is nearly full.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8], append: bool) -> Result<u32> {
        self.write_as(ino, offset, data, append, None)
    }

    /// [`MemFs::write`] by a caller who, if `drop_setid` says so, takes
    /// the file's set-ID bits away with it. The write's reply does not
    /// carry the new mode, so a drop is told to the attribute hook: a
    /// kernel that cached the old mode would otherwise still run the file
    /// set-user-ID.
    pub fn write_as(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        append: bool,
        drop_setid: Option<DropSetId>,
    ) -> Result<u32> {
        self.writable()?;
        if data.is_empty() {
            return Ok(0);
        }
        let bs = self.block_size();
        let pages_needed = (data.len() as u64).div_ceil(bs) + 1;
        let mut data = data;
        if !self.room_for(pages_needed) {
            if let Err(MemError::NoSpace) = self.ensure_room(pages_needed) {
                // Write what fits, if anything does.
                let mut fit = pages_needed;
                while fit > 1 && !self.room_for(fit) {
                    fit /= 2;
                }
                if fit <= 1 {
                    return Err(MemError::NoSpace);
                }
                data = &data[..((fit - 1) * bs) as usize - (offset % bs) as usize];
            }
        }
        let (written, dirty_pages, dropped) = {
            let _g = self.inner.gate.read();
            let n = self.node(ino)?;
            let mut s = n.s.write();
            match s.kind {
                Kind::File => {}
                Kind::Dir => return Err(MemError::IsDir),
                _ => return Err(MemError::Invalid("write to a special file")),
            }
            let offset = if append { s.size } else { offset };
            let end = offset
                .checked_add(data.len() as u64)
                .filter(|e| *e <= MAX_FILE)
                .ok_or(MemError::TooLarge)?;
            let mut pos = offset;
            let mut src = data;
            while pos < end {
                let idx = pos / bs;
                let within = (pos % bs) as usize;
                let take = ((bs - pos % bs).min(end - pos)) as usize;
                let page =
                    self.page_for_write(ino, &mut s, idx, within == 0 && take == bs as usize)?;
                page[within..within + take].copy_from_slice(&src[..take]);
                src = &src[take..];
                pos += take as u64;
            }
            // Only a write that happened drops the bits (and marks them
            // for the flush, with the rest).
            let perm = s.perm;
            if let Some(who) = drop_setid {
                s.perm = who.apply(perm, s.gid);
            }
            let dropped = s.perm != perm;
            let t = self.now();
            s.size = s.size.max(end);
            s.mtime = t;
            s.ctime = t;
            self.mark_dirty(ino, &mut s, t);
            (data.len() as u32, s.dirty_pages.len(), dropped)
        };
        if dropped {
            self.attrs_changed([ino]);
        }
        self.behind(ino, dirty_pages);
        self.relieve_pressure();
        Ok(written)
    }

    /// Page `idx`, writable and marked dirty (copied first if a flush
    /// holds it: copy-on-write).
    fn page_for_write<'a>(
        &self,
        ino: u64,
        s: &'a mut NodeState,
        idx: u64,
        whole: bool,
    ) -> Result<&'a mut Vec<u8>> {
        if !s.pages.contains_key(&idx) {
            let p = if whole {
                None
            } else {
                self.page_for_read(ino, s, idx)?
            };
            let p = p.unwrap_or_else(|| {
                Arc::new(
                    self.inner
                        .page_pool
                        .take(self.block_size() as usize, !whole),
                )
            });
            s.pages.insert(idx, p);
            self.inner.pages.fetch_add(1, Ordering::AcqRel);
        }
        if s.dirty_pages.insert(idx) {
            self.inner.reserved_blocks.fetch_add(1, Ordering::AcqRel);
        }
        Ok(Arc::make_mut(s.pages.get_mut(&idx).expect("inserted")))
    }

    /// Logs the first change since the last flush.
    pub(crate) fn mark_dirty(&self, ino: u64, s: &mut NodeState, t: u32) {
        if !s.dirty && !s.never_disk {
            s.dirty = true;
            self.log(t, LogOp::Dirty { ino });
        }
    }

    /// Sets the size: shrinking drops the pages past it and zeroes the
    /// tail of the last one (dirtied, so the disk gets the zeros too).
    fn truncate_locked(&self, ino: u64, s: &mut NodeState, size: u64) -> Result<()> {
        let bs = self.block_size();
        if size < s.size {
            let keep = size.div_ceil(bs);
            let gone: Vec<u64> = s.pages.range(keep..).map(|(k, _)| *k).collect();
            for k in gone {
                if let Some(p) = s.pages.remove(&k) {
                    self.inner.page_pool.give(p);
                }
                self.inner.pages.fetch_sub(1, Ordering::AcqRel);
                if s.dirty_pages.remove(&k) {
                    self.inner.reserved_blocks.fetch_sub(1, Ordering::AcqRel);
                }
            }
            if !size.is_multiple_of(bs) {
                let idx = size / bs;
                if idx * bs < s.size {
                    let page = self.page_for_write(ino, s, idx, false)?;
                    page[(size % bs) as usize..].fill(0);
                }
            }
            s.min_size = s.min_size.min(size);
        }
        s.size = size;
        Ok(())
    }

    pub fn setattr(&self, ino: u64, set: SetAttrs) -> Result<Attr> {
        self.writable()?;
        if let Some(size) = set.size {
            if size > MAX_FILE {
                return Err(MemError::TooLarge);
            }
        }
        let _g = self.inner.gate.read();
        let n = self.node(ino)?;
        let mut s = n.s.write();
        if s.attrs_stale() {
            return Err(MemError::Stale(ino));
        }
        let t = self.now();
        if let Some(size) = set.size {
            match s.kind {
                Kind::File => {}
                Kind::Dir => return Err(MemError::IsDir),
                _ => return Err(MemError::Invalid("truncate of a special file")),
            }
            if size != s.size {
                self.truncate_locked(ino, &mut s, size)?;
            }
            s.mtime = t;
        }
        // After the truncate (which may fail), before the owner changes
        // (the rule looks at the group the caller found).
        if let Some(who) = set.drop_setid {
            if s.kind == Kind::File {
                s.perm = who.apply(s.perm, s.gid);
            }
        }
        if let Some(p) = set.perm {
            s.perm = p & 0o7777;
        }
        if let Some(u) = set.uid {
            s.uid = u;
        }
        if let Some(g) = set.gid {
            s.gid = g;
        }
        if let Some(a) = set.atime {
            s.atime = a;
        }
        if let Some(m) = set.mtime {
            s.mtime = m;
        }
        s.ctime = t;
        // A removed directory's inode is freed (or on its way to be): the
        // change stays in memory.
        if !s.gone() {
            self.mark_dirty(ino, &mut s, t);
        }
        Ok(s.attr(ino, self.block_size()))
    }

    /// Sets extended attribute `name` (a full name, `user.k`) of `ino` to
    /// `value`, or removes it (`None`), as `how` says. The whole set is
    /// kept in memory and reaches the disk with the inode's next flush (one
    /// block reserved for it until then). Refused: a name ext2 cannot store
    /// (unsupported), a set that no longer fits one block (no space), an
    /// image without `ext_attr` (unsupported).
    pub fn set_xattr(
        &self,
        ino: u64,
        name: &[u8],
        value: Option<&[u8]>,
        how: XattrSet,
    ) -> Result<()> {
        self.writable()?;
        if !self.inner.xattrs {
            return Err(MemError::Unsupported("the image has no ext_attr feature"));
        }
        let stored = |n: &[u8], v: &[u8]| {
            Xattr::named(n, v.to_vec()).ok_or(MemError::Unsupported(
                "extended attribute name ext2 cannot store",
            ))
        };
        if let Some(v) = value {
            stored(name, v)?;
        }
        let loaded = self.xattrs(ino)?;
        let _g = self.inner.gate.read();
        let n = self.node(ino)?;
        let mut s = n.s.write();
        if s.gone() {
            return Err(MemError::Stale(ino));
        }
        let mut set: Xattrs = (**s.xattrs.as_ref().unwrap_or(&loaded)).clone();
        let at = set.iter().position(|(k, _)| k.as_slice() == name);
        match (value, at, how) {
            (Some(_), Some(_), XattrSet::Create) => return Err(MemError::Exists),
            (Some(_), None, XattrSet::Replace) | (None, None, _) => {
                return Err(MemError::NoAttribute)
            }
            (Some(v), Some(i), _) => set[i].1 = v.to_vec(),
            (Some(v), None, _) => set.push((name.to_vec(), v.to_vec())),
            (None, Some(i), _) => {
                set.remove(i);
            }
        }
        let as_stored = set
            .iter()
            .map(|(k, v)| stored(k, v))
            .collect::<Result<Vec<_>>>()?;
        if !fits_block(&as_stored, self.block_size() as usize) {
            return Err(MemError::NoSpace);
        }
        if !s.xattrs_dirty && !s.never_disk {
            if !self.room_for(1) {
                return Err(MemError::NoSpace);
            }
            self.inner.reserved_blocks.fetch_add(1, Ordering::AcqRel);
            s.xattrs_dirty = true;
        }
        s.xattrs = Some(Arc::new(set));
        let t = self.now();
        s.ctime = t;
        self.mark_dirty(ino, &mut s, t);
        Ok(())
    }
}
