//! File data and attributes: reads and writes on pages, truncate, setattr.
//! A page read from disk stays as a clean page (a cache); a write dirties
//! its pages, and the first change since a flush logs a `Dirty` entry.

use crate::error::{MemError, Result};
use crate::fs::{Claim, MemFs};
use crate::log::LogOp;
use crate::node::{NodeState, Page, Xattrs};
use crate::types::{Attr, DropSetId, FlushCause, Kind, SetAttrs, SetTime, XattrSet};
use rustc_hash::FxHashSet;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use stitch_diskfs::Refusal;
use stitch_diskfs::{xattrs_fit_block as fits_block, InodeNo, Timestamp, Xattr};

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
    fn page_for_read(&self, ino: InodeNo, s: &NodeState, idx: u64) -> Result<Option<Page>> {
        if let Some(p) = s.pages.get(&idx) {
            return Ok(Some(p.clone()));
        }
        let bs = self.block_size();
        if idx * bs >= s.disk_size.min(s.min_size) {
            return Ok(None);
        }
        let len = (s.disk_size.min(s.min_size) - idx * bs).min(bs) as usize;
        let mut data = self.on_disk(self.inner.disk.read(ino, idx * bs, len))?;
        data.resize(bs as usize, 0);
        Ok(Some(Arc::new(data)))
    }

    pub fn read(&self, ino: InodeNo, offset: u64, size: u32) -> Result<Vec<u8>> {
        let _g = self.inner.gate.read();
        let n = self.node(ino)?;
        let bs = self.block_size();
        // Fast path under the read lock; pages missing from memory are
        // loaded under the write lock.
        let mut s = n.s.upgradable_read();
        match s.kind {
            Kind::File => {}
            Kind::Dir => return Err(MemError::Refused(Refusal::IsDir)),
            _ => {
                return Err(MemError::Refused(Refusal::Invalid(
                    "read of a special file",
                )))
            }
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
    pub fn write(&self, ino: InodeNo, offset: u64, data: &[u8], append: bool) -> Result<u32> {
        self.write_as(ino, offset, data, append, None)
    }

    /// [`MemFs::write`] by a caller who, if `drop_setid` says so, takes
    /// the file's set-ID bits away with it. The write's reply does not
    /// carry the new mode, so a drop is told to the attribute hook: a
    /// kernel that cached the old mode would otherwise still run the file
    /// set-user-ID.
    pub fn write_as(
        &self,
        ino: InodeNo,
        offset: u64,
        data: &[u8],
        append: bool,
        drop_setid: Option<DropSetId>,
    ) -> Result<u32> {
        self.writable()?;
        if data.is_empty() {
            return Ok(0);
        }
        self.settle_before_change(ino)?;
        let bs = self.block_size();
        // Room for every page as new, with the indirect blocks to map them.
        let pages = (data.len() as u64).div_ceil(bs) + 1;
        let mut claim = match self.claim_or_flush((pages + pages / (bs / 4) + 3) as i64) {
            Ok(c) => Some(c),
            Err(MemError::NoSpace) => None,
            Err(e) => return Err(e),
        };
        let (written, dirty_pages, dropped) = {
            // Near full, diskfs is asked which blocks the file already holds:
            // with the flush locks held, every plan cut so far is applied, so
            // its answer is the one the next flush will find.
            let _flushes = claim
                .is_none()
                .then(|| (self.inner.merged.lock(), self.inner.apply_lock.lock()));
            let _g = self.inner.gate.read();
            let n = self.node(ino)?;
            let mut s = n.s.write();
            match s.kind {
                Kind::File => {}
                Kind::Dir => return Err(MemError::Refused(Refusal::IsDir)),
                _ => {
                    return Err(MemError::Refused(Refusal::Invalid(
                        "write to a special file",
                    )))
                }
            }
            let offset = if append { s.size } else { offset };
            let mut data = data;
            let mut held = BTreeSet::new();
            if claim.is_none() {
                let (fit, h, c) = self.what_fits(ino, &s, offset, data.len() as u64)?;
                if fit == 0 {
                    return Err(MemError::NoSpace);
                }
                data = &data[..fit as usize];
                held = h;
                claim = Some(c);
            }
            let claim = claim.as_mut().expect("room claimed");
            let end = offset
                .checked_add(data.len() as u64)
                .filter(|e| *e <= MAX_FILE)
                .ok_or(MemError::Refused(Refusal::TooLarge))?;
            self.copy_into_pages(ino, &mut s, offset, data, &held, claim)?;
            let dropped = self.wrote(ino, &mut s, end, drop_setid);
            (data.len() as u32, s.dirty_pages.len(), dropped)
        };
        if dropped {
            self.attrs_changed([ino]);
        }
        self.behind(ino, dirty_pages);
        self.relieve_pressure();
        Ok(written)
    }

    /// Copies `data` into the pages of `ino` (state `s`) from byte
    /// `offset`, taking room for new pages from `claim` except for those
    /// already `held`.
    fn copy_into_pages(
        &self,
        ino: InodeNo,
        s: &mut NodeState,
        offset: u64,
        data: &[u8],
        held: &BTreeSet<u64>,
        claim: &mut Claim<'_>,
    ) -> Result<()> {
        let bs = self.block_size();
        let end = offset + data.len() as u64;
        let mut pos = offset;
        let mut src = data;
        while pos < end {
            let idx = pos / bs;
            let within = (pos % bs) as usize;
            let take = ((bs - pos % bs).min(end - pos)) as usize;
            let whole = within == 0 && take == bs as usize;
            let room = (!held.contains(&idx)).then_some(&mut *claim);
            let page = self.page_for_write(ino, s, idx, whole, room)?;
            page[within..within + take].copy_from_slice(&src[..take]);
            src = &src[take..];
            pos += take as u64;
        }
        Ok(())
    }

    /// After a write to `ino` (state `s`) ending at `end`: the size, the
    /// times, the set-ID bits `drop_setid` takes away, the mark for the
    /// flush. Returns whether the bits dropped.
    fn wrote(
        &self,
        ino: InodeNo,
        s: &mut NodeState,
        end: u64,
        drop_setid: Option<DropSetId>,
    ) -> bool {
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
        self.mark_dirty(ino, s, t);
        dropped
    }

    /// Near a full disk: how many of `len` bytes written at `offset` fit,
    /// counting only the pages that need a new block (and the indirect
    /// blocks to map them). A page already dirty has its room; a page whose
    /// block the file holds on disk, below the size the next flush cuts it
    /// to, is rewritten in place and needs none (these come back as
    /// `held`: a database rewriting its pages on a full disk is not
    /// refused). The caller holds the flush locks and the inode's.
    fn what_fits(
        &self,
        ino: InodeNo,
        s: &NodeState,
        offset: u64,
        len: u64,
    ) -> Result<(u64, BTreeSet<u64>, Claim<'_>)> {
        let bs = self.block_size();
        let per = bs / 4;
        let kept = s.min_size.min(s.disk_size).div_ceil(bs);
        let mut held = BTreeSet::new();
        let mut maps = s.reserved_maps.clone();
        let mut costs = Vec::new();
        let end = offset.saturating_add(len);
        let first = offset / bs;
        let mut idx = first;
        while idx * bs < end {
            let cost = if s.dirty_pages.contains(&idx) || s.never_disk {
                0
            } else if idx < kept
                && self
                    .on_disk(self.inner.disk.physical_block(ino, idx))?
                    .is_some()
            {
                held.insert(idx);
                0
            } else {
                1 + new_maps(&mut maps, idx, per) as i64
            };
            costs.push(cost);
            idx += 1;
        }
        let (pages, claim) = self.claim_prefix(&costs);
        let fit = ((first + pages as u64) * bs)
            .min(end)
            .saturating_sub(offset);
        Ok((fit, held, claim))
    }

    /// Holds room for a newly dirty page and for the indirect blocks that
    /// map it (each counted once a flush, as if none were on disk yet).
    fn reserve_page(&self, s: &mut NodeState, idx: u64, claim: &mut Claim<'_>) {
        if s.never_disk {
            return;
        }
        let per = self.block_size() / 4;
        let n = 1 + new_maps(&mut s.reserved_maps, idx, per) as i64;
        claim.hold(s, n);
    }

    /// Page `idx`, writable and marked dirty (copied first if a flush
    /// holds it: copy-on-write). A newly dirty page holds room for its
    /// block, from `room`, unless there is none to hold (the file holds
    /// that block already).
    fn page_for_write<'a>(
        &self,
        ino: InodeNo,
        s: &'a mut NodeState,
        idx: u64,
        whole: bool,
        room: Option<&mut Claim<'_>>,
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
            if let Some(claim) = room {
                self.reserve_page(s, idx, claim);
            }
        }
        Ok(Arc::make_mut(s.pages.get_mut(&idx).expect("inserted")))
    }

    /// Logs the first change since the last flush.
    pub(crate) fn mark_dirty(&self, ino: InodeNo, s: &mut NodeState, t: Timestamp) {
        if s.never_disk {
            return;
        }
        let domains = self.stream_now().all();
        let new_domain = domains.iter().any(|d| !s.dirty_domains.contains(d));
        if !s.dirty || new_domain {
            s.dirty = true;
            for d in domains {
                if !s.dirty_domains.contains(&d) {
                    s.dirty_domains.push(d);
                }
            }
            self.log(t, LogOp::Dirty { ino });
        }
    }

    /// Before a change to the data or attributes of `ino`, in soft
    /// updates: if the file's state is dirty and in a stream or patchgroup
    /// (or the caller is in one), that state goes to diskfs first, in its own
    /// place of the stream's chain. A flush writes a file's state in one
    /// place (where its first `Dirty` entry stands), and a crash may show
    /// any of its blocks without the others: two changes in one state
    /// would show the later one without the earlier, or one of them
    /// before the changes that came between. The settling flush does not
    /// wait for the device (the chain orders it; `MemFs::apply`), so a
    /// change costs a batch, not a device flush. With a journal the flush
    /// is one transaction and needs no such care.
    pub(crate) fn settle_before_change(&self, ino: InodeNo) -> Result<()> {
        if !self.inner.soft_updates {
            return Ok(());
        }
        let Some(n) = self.cached_node(ino) else {
            return Ok(());
        };
        let due = {
            let s = n.s.read();
            let due = s.dirty
                && !s.never_disk
                && (!s.dirty_domains.is_empty() || !self.stream_now().is_empty());
            due.then_some(s.dirty_pages.len())
        };
        let Some(pages) = due else {
            return Ok(());
        };
        self.flush_own(FlushCause::Settle(ino))?;
        self.settled(ino, pages);
        Ok(())
    }

    /// Sets the size: shrinking drops the pages past it and zeroes the
    /// tail of the last one (dirtied, so the disk gets the zeros too).
    fn truncate_locked(&self, ino: InodeNo, s: &mut NodeState, size: u64) -> Result<()> {
        let bs = self.block_size();
        if size < s.size {
            let keep = size.div_ceil(bs);
            let gone: Vec<u64> = s.pages.range(keep..).map(|(k, _)| *k).collect();
            for k in gone {
                if let Some(p) = s.pages.remove(&k) {
                    self.inner.page_pool.give(p);
                }
                self.inner.pages.fetch_sub(1, Ordering::AcqRel);
                // Its room stays held until the flush (it may have had
                // none, and it may be written again before then).
                s.dirty_pages.remove(&k);
            }
            if !size.is_multiple_of(bs) {
                let idx = size / bs;
                if idx * bs < s.size {
                    let mut room = self.unclaimed();
                    let page = self.page_for_write(ino, s, idx, false, Some(&mut room))?;
                    page[(size % bs) as usize..].fill(0);
                }
            }
            s.min_size = s.min_size.min(size);
            self.recount_frees(s);
        }
        s.size = size;
        Ok(())
    }

    pub fn setattr(&self, ino: InodeNo, set: SetAttrs) -> Result<Attr> {
        self.writable()?;
        if let Some(size) = set.size {
            if size > MAX_FILE {
                return Err(MemError::Refused(Refusal::TooLarge));
            }
        }
        self.settle_before_change(ino)?;
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
                Kind::Dir => return Err(MemError::Refused(Refusal::IsDir)),
                _ => {
                    return Err(MemError::Refused(Refusal::Invalid(
                        "truncate of a special file",
                    )))
                }
            }
            if size != s.size {
                self.truncate_locked(ino, &mut s, size)?;
            }
            s.mtime = t;
        }
        // After the truncate (which may fail), before the owner changes
        // (the rule looks at the group the caller found). Every type but a
        // directory: only a file is truncated, but a change of owner takes
        // the bits of a fifo, socket or device node too.
        if let Some(who) = set.drop_setid {
            if s.kind != Kind::Dir {
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
        let at = |given: SetTime| match given {
            SetTime::Now => t,
            SetTime::At(x) => self.inner.times.truncate(x),
        };
        if let Some(a) = set.atime {
            s.atime = at(a);
        }
        if let Some(m) = set.mtime {
            s.mtime = at(m);
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
        ino: InodeNo,
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
        self.settle_before_change(ino)?;
        let _g = self.inner.gate.read();
        let n = self.node(ino)?;
        let mut s = n.s.write();
        if s.gone() {
            return Err(MemError::Stale(ino));
        }
        let mut set: Xattrs = (**s.xattrs.as_ref().unwrap_or(&loaded)).clone();
        let at = set.iter().position(|(k, _)| k.as_slice() == name);
        match (value, at, how) {
            (Some(_), Some(_), XattrSet::Create) => return Err(MemError::Refused(Refusal::Exists)),
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
            let Some(mut room) = self.claim(1) else {
                return Err(MemError::NoSpace);
            };
            room.hold(&mut s, 1);
            s.xattrs_dirty = true;
        }
        s.xattrs = Some(Arc::new(set));
        let t = self.now();
        s.ctime = t;
        self.mark_dirty(ino, &mut s, t);
        Ok(())
    }
}

/// Names the indirect blocks that map block `idx` of a file in ext2's
/// `i_block` (12 direct blocks, then single, double and triple indirect,
/// `per` addresses to a block), each distinct within one file, the
/// deepest first; adds those not in `seen` and returns how many were new.
/// An ancestor is always added with its first child, so the walk stops at
/// the first one already there.
fn new_maps(seen: &mut FxHashSet<u64>, idx: u64, per: u64) -> u64 {
    const DIRECT: u64 = 12;
    let (single, double, triple, triple_mid) = (1 << 60, 2 << 60, 3 << 60, 4 << 60);
    let Some(i) = idx.checked_sub(DIRECT) else {
        return 0;
    };
    let (path, levels) = if i < per {
        ([single, 0, 0], 1)
    } else if i - per < per * per {
        let i = i - per;
        ([double | (1 + i / per), double, 0], 2)
    } else {
        let i = i - per - per * per;
        let mid = triple_mid | (1 + i / per);
        ([mid, triple | (1 + i / (per * per)), triple], 3)
    };
    let mut added = 0;
    for key in &path[..levels] {
        if !seen.insert(*key) {
            break;
        }
        added += 1;
    }
    added
}
