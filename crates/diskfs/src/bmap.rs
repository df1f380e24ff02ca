//! Block maps: the twelve direct pointers and the single, double and triple
//! indirect blocks of an inode, and file data through them.
//!
//! Writing a block that is not mapped yet follows the soft-updates order:
//! allocate the block (bitmap bit), write its whole contents (the caller's
//! bytes over zeros, so no stale data of an earlier owner can show), then
//! point at it; a new indirect block is allocated and zeroed before the
//! pointer to it. The pointer depends on the data: no file ever shows data it
//! never wrote. Indirect blocks are placed after the data blocks they follow
//! (the allocator's goal), so runs of data stay contiguous (§4.5).

use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, DATA, META};
use std::sync::Arc;
use stitch_format::indirect::{map_path, pointer, set_pointer};
use stitch_format::{Inode, InodeNo, Timestamp};
use stitch_patch::{BlockNo, PatchId};

/// A directory's blocks are metadata (the journal journals them in every
/// data mode, as ext3 does); a regular file's are data.
fn contents_flags(inode: &Inode) -> stitch_patch::PatchFlags {
    if inode.is_dir() {
        META
    } else {
        DATA
    }
}

/// The bytes of a file write: a slice, or (from [`DiskFs::write_pages`])
/// block-sized pages the caller keeps, starting on a block boundary, of
/// which the first `len` bytes count. A block a page fills whole takes the
/// page itself ([`stitch_modes::Modes::byte_shared`]); any other block
/// copies what it needs.
#[derive(Clone, Copy)]
pub(crate) enum Src<'a> {
    Bytes(&'a [u8]),
    Pages {
        pages: &'a [Arc<Vec<u8>>],
        len: usize,
    },
}

impl<'a> Src<'a> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Src::Bytes(b) => b.len(),
            Src::Pages { len, .. } => *len,
        }
    }

    /// Bytes `pos..pos + len`, which lie within one block.
    fn bytes(&self, pos: usize, len: usize) -> &'a [u8] {
        match *self {
            Src::Bytes(b) => &b[pos..pos + len],
            Src::Pages { pages, .. } => {
                let bs = pages[0].len();
                let at = pos % bs;
                &pages[pos / bs][at..at + len]
            }
        }
    }

    /// The page that is bytes `pos..pos + bs`, if there is one.
    fn page(&self, pos: usize, bs: usize) -> Option<&'a Arc<Vec<u8>>> {
        match *self {
            Src::Pages { pages, len } if pos.is_multiple_of(bs) && pos + bs <= len => {
                pages.get(pos / bs)
            }
            _ => None,
        }
    }

    /// Bytes `pos..pos + len` as a source of their own; `pos` is on a block
    /// boundary when the source is pages.
    fn sub(&self, pos: usize, len: usize) -> Src<'a> {
        match *self {
            Src::Bytes(b) => Src::Bytes(&b[pos..pos + len]),
            Src::Pages { pages, .. } => {
                let bs = pages[0].len();
                debug_assert!(pos.is_multiple_of(bs));
                Src::Pages {
                    pages: &pages[pos / bs..],
                    len,
                }
            }
        }
    }
}

/// The most new blocks one patch points at: a run's data is all written
/// before its pointers, so a run stays well inside a journal transaction.
const MAX_RUN: u64 = 256;

impl DiskFs {
    /// The physical block of logical block `logical`, if mapped.
    pub(crate) fn bmap(&mut self, inode: &Inode, logical: u64) -> Result<Option<u32>> {
        let path = map_path(logical, self.bs)?;
        let mut ptr = inode.core.block[path.slot];
        for &index in path.levels() {
            if ptr == 0 {
                return Ok(None);
            }
            let block = self.m.read(BlockNo(u64::from(ptr)))?;
            ptr = pointer(block, index)
                .ok_or_else(|| DiskError::Corrupt(format!("indirect block {ptr} too short")))?;
        }
        Ok((ptr != 0).then_some(ptr))
    }

    /// Writes `data` at byte `offset` of the file; returns how many bytes
    /// it wrote and the patches of the data and of any pointers and inode
    /// fields it changed. Grows the size (after the data it exposes) if the
    /// write ends past it. Running out of space part-way is a short write,
    /// as POSIX has it; with nothing written it is the error.
    pub(crate) fn write_data(
        &mut self,
        ino: InodeNo,
        inode: &mut Inode,
        offset: u64,
        data: Src<'_>,
        now: Timestamp,
    ) -> Result<(usize, Vec<PatchId>)> {
        self.write_data_after(ino, inode, offset, data, now, &[])
    }

    /// [`write_data`](Self::write_data) whose new blocks are pointed to
    /// only after `after` too: a directory's new block holding an entry
    /// waits so for the inode the entry names (soft-updates rule 1).
    pub(crate) fn write_data_after(
        &mut self,
        ino: InodeNo,
        inode: &mut Inode,
        offset: u64,
        data: Src<'_>,
        now: Timestamp,
        after: &[PatchId],
    ) -> Result<(usize, Vec<PatchId>)> {
        let bs = self.bs as u64;
        let mut out = Vec::new();
        let mut pos = 0usize;
        let mut failure = None;
        while pos < data.len() {
            let at = offset + pos as u64;
            let (logical, in_block) = (at / bs, (at % bs) as usize);
            let mut len = (self.bs - in_block).min(data.len() - pos);
            let step = match self.bmap(inode, logical) {
                Ok(Some(phys)) => self
                    .write_block(BlockNo(u64::from(phys)), in_block, data, pos, len, inode)
                    .map(|p| vec![p]),
                Ok(None) => self
                    .new_run_len(inode, logical, in_block, data.len() - pos)
                    .and_then(|n| {
                        let run = data.sub(pos, n);
                        let (done, ps, err) =
                            self.write_new_run(ino, inode, logical, in_block, run, after)?;
                        len = done;
                        failure = err;
                        Ok(ps)
                    }),
                Err(e) => Err(e),
            };
            match step {
                Ok(ps) => {
                    out.extend(ps);
                    if failure.is_some() {
                        pos += len;
                        break;
                    }
                    // Between blocks (and runs) a large write may let a full
                    // journal transaction commit (each is whole on its own:
                    // data, pointers and size).
                    if let Err(e) = self.m.safe_point() {
                        failure = Some(e.into());
                        pos += len;
                        break;
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
            pos += len;
        }
        if pos == 0 {
            if let Some(e) = failure {
                return Err(e);
            }
        }
        if pos == 0 {
            // A write of nothing changes nothing (POSIX), not even the size.
            return Ok((0, out));
        }
        let end = offset + pos as u64;
        if end > inode.size() {
            inode.set_size(end);
        }
        inode.touch(now);
        out.extend(self.write_inode(ino, inode, &out.clone())?);
        Ok((pos, out))
    }

    /// How many bytes of a `left`-byte write starting at `in_block` of the
    /// unmapped logical block `logical` fall in one run of new blocks: ones
    /// still unmapped whose pointers sit side by side (the direct slots, or
    /// one indirect block), at most [`MAX_RUN`] blocks and no more than the
    /// mode allows between two safe points.
    fn new_run_len(
        &mut self,
        inode: &Inode,
        logical: u64,
        in_block: usize,
        left: usize,
    ) -> Result<usize> {
        let first = map_path(logical, self.bs)?;
        let mut n = (self.bs - in_block).min(left);
        let mut next = logical + 1;
        let most = MAX_RUN.min(self.m.safe_point_span());
        while n < left && next - logical < most {
            let path = map_path(next, self.bs)?;
            // Direct slots side by side, or slots of one indirect block.
            let beside = path.depth == first.depth
                && if first.depth == 0 {
                    path.slot == first.slot + (next - logical) as usize
                } else {
                    let d = path.depth - 1;
                    path.slot == first.slot && path.indices[..d] == first.indices[..d]
                };
            if !beside {
                break;
            }
            if self.bmap(inode, next)?.is_some() {
                break;
            }
            n += self.bs.min(left - n);
            next += 1;
        }
        Ok(n)
    }

    /// Allocates, fills and attaches the new logical blocks `first..` that
    /// `data` (starting at `in_block` of the first) covers, a run from
    /// [`Self::new_run_len`]. The blocks are allocated in as few runs as free
    /// space allows ([`Self::alloc_run`]) and each is written whole; the size
    /// covering the run goes first (e2fsck calls a mapped block past the size
    /// corruption; a size over a hole only reads zeros); then one patch sets
    /// the run's pointers, waiting on all of it. Running
    /// out of space after the first block writes the blocks it got: returns
    /// the bytes written, the patches, and the error that stopped it.
    fn write_new_run(
        &mut self,
        ino: InodeNo,
        inode: &mut Inode,
        first: u64,
        in_block: usize,
        data: Src<'_>,
        after: &[PatchId],
    ) -> Result<(usize, Vec<PatchId>, Option<DiskError>)> {
        let mut goal = self.goal(ino, inode, first)?;
        let mut phys_run = Vec::new();
        let mut out = Vec::new();
        let (mut pos, mut at) = (0, in_block);
        let mut failure = None;
        while pos < data.len() {
            let blocks_left = (at + data.len() - pos).div_ceil(self.bs);
            let (start, n, bits) = match self.alloc_run(goal, blocks_left) {
                Ok(x) => x,
                Err(e) if !phys_run.is_empty() => {
                    failure = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            };
            out.extend(bits);
            for phys in start..start + n as u32 {
                let len = (self.bs - at).min(data.len() - pos);
                // A whole block is patched from `data` as it is; a partial
                // one is padded with zeros (a new block has no old bytes to
                // keep).
                // The data need not wait for the bitmap: nothing points at
                // the block yet, and no earlier owner can (allocation never
                // takes a block whose free is not durable: `pending_frees`).
                // Only the pointer waits for both, so data and bitmap go out
                // in one device flush.
                let block = BlockNo(u64::from(phys));
                let d = if len == self.bs {
                    self.write_block(block, 0, data, pos, len, inode)?
                } else {
                    let mut b = vec![0u8; self.bs];
                    b[at..at + len].copy_from_slice(data.bytes(pos, len));
                    self.m.byte(block, 0, &b, &[], contents_flags(inode))?
                };
                out.push(d);
                phys_run.push(phys);
                pos += len;
                at = 0;
            }
            goal = start + n as u32;
        }
        let mut pointer_deps = out.clone();
        pointer_deps.extend(after);
        let end = first * self.bs as u64 + (in_block + pos) as u64;
        // A file's size goes first: a crash before its pointer leaves a
        // hole, which ext2 allows. A directory may have no hole, nor a
        // block past its size: its size goes with a pointer in the inode
        // (one patch), or after a pointer in an indirect block.
        let mut size_after = false;
        if end > inode.size() {
            if !inode.is_dir() {
                inode.set_size(end);
                let s = self.write_inode(ino, inode, &[])?;
                pointer_deps.extend(&s);
                out.extend(s);
            } else if map_path(first, self.bs)?.depth == 0 {
                inode.set_size(end);
            } else {
                size_after = true;
            }
        }
        match self.attach(ino, inode, first, &phys_run, &pointer_deps) {
            Ok(ps) => {
                if size_after {
                    inode.set_size(end);
                    let s = self.write_inode(ino, inode, &ps)?;
                    out.extend(s);
                }
                out.extend(ps)
            }
            Err(e) => {
                // No indirect block for them: nothing points at the data
                // blocks, so give them back rather than leak them.
                for &phys in &phys_run {
                    self.free_block(phys, &[])?;
                }
                return Err(e);
            }
        }
        Ok((pos, out, failure))
    }

    /// Writes bytes `pos..pos + len` of `data` at `in_block` of `block`:
    /// the page itself when it fills the block, else a copy.
    fn write_block(
        &mut self,
        block: BlockNo,
        in_block: usize,
        data: Src<'_>,
        pos: usize,
        len: usize,
        inode: &Inode,
    ) -> Result<PatchId> {
        let flags = contents_flags(inode);
        let page = (in_block == 0 && len == self.bs)
            .then(|| data.page(pos, self.bs))
            .flatten();
        Ok(match page {
            Some(page) => self.m.byte_shared(block, page, &[], flags)?,
            None => self
                .m
                .byte(block, in_block, data.bytes(pos, len), &[], flags)?,
        })
    }

    /// Where the next block of the file should go: right after its previous
    /// block, or at the start of its inode's group.
    fn goal(&mut self, ino: InodeNo, inode: &Inode, logical: u64) -> Result<u32> {
        if logical > 0 {
            if let Some(prev) = self.bmap(inode, logical - 1)? {
                return Ok(prev + 1);
            }
        }
        Ok(self.inode_group_start(ino))
    }

    /// Points logical blocks `logical..` at `run` (pointers side by side:
    /// see [`Self::new_run_len`]), allocating and zeroing any missing
    /// indirect blocks first; the final pointers depend on `deps`.
    fn attach(
        &mut self,
        ino: InodeNo,
        inode: &mut Inode,
        logical: u64,
        run: &[u32],
        deps: &[PatchId],
    ) -> Result<Vec<PatchId>> {
        let path = map_path(logical, self.bs)?;
        let phys = run[0];
        if path.depth == 0 {
            inode.core.blocks_lo += (run.len() * self.bs / 512) as u32;
            inode.core.block[path.slot..path.slot + run.len()].copy_from_slice(run);
            return self.write_inode(ino, inode, deps);
        }
        let mut out = Vec::new();
        // Walk down, creating indirect blocks where the map has holes.
        let mut parent: Option<u32> = None;
        let mut ptr = inode.core.block[path.slot];
        let levels = path.levels().to_vec();
        for (depth, &index) in levels.iter().enumerate() {
            if ptr == 0 {
                let (ind, ib) = self.alloc_block(self.indirect_goal(phys))?;
                // Like a data block, a new block's contents need not wait
                // for its bitmap bit (see `write_new_run`); the pointer to
                // it waits for both.
                let init =
                    self.m
                        .byte(BlockNo(u64::from(ind)), 0, &vec![0u8; self.bs], &[], META)?;
                out.extend([ib, init]);
                let counted = self.count_blocks(ino, inode, 1, parent.is_some())?;
                let mut after = vec![ib, init];
                after.extend(&counted);
                out.extend(counted);
                out.extend(self.set_ptr(
                    ino,
                    inode,
                    parent,
                    path.slot,
                    levels.get(depth.wrapping_sub(1)).copied(),
                    ind,
                    &after,
                )?);
                ptr = ind;
            }
            parent = Some(ptr);
            let block = self.m.read(BlockNo(u64::from(ptr)))?;
            let next = pointer(block, index).unwrap_or(0);
            if depth + 1 == levels.len() {
                let counted = self.count_blocks(ino, inode, run.len(), true)?;
                let mut after = deps.to_vec();
                after.extend(&counted);
                out.extend(counted);
                out.push(self.set_ptrs(ptr, index, run, &after)?);
            } else {
                ptr = next;
            }
        }
        Ok(out)
    }

    /// Where an indirect block goes: away from the data stream (three
    /// quarters into the data block's group), so the file's data blocks stay
    /// one contiguous run that can be written in one request (§4.5).
    fn indirect_goal(&self, data: u32) -> u32 {
        let g = self
            .geo
            .group_of_block(stitch_format::BlockNo(data))
            .map_or(0, |g| g.0);
        let gn = stitch_format::GroupNo(g);
        self.geo.group_first_block(gn).0 + self.geo.blocks_in_group(gn) / 4 * 3
    }

    /// The physical block behind logical block `logical` of `ino`, if any.
    pub fn physical_block(&mut self, ino: InodeNo, logical: u64) -> Result<Option<u32>> {
        let inode = self.read_inode(ino)?;
        self.bmap(&inode, logical)
    }

    /// Counts `n` more blocks in `i_blocks`. When the pointers to them will
    /// sit in an indirect block (`separate`), the count is written first and
    /// the pointers wait for it: a crash may leave the count too high, never
    /// too low (as with link counts; fsck classes the former a leak).
    /// Otherwise the count goes out with the pointers, in the inode's patch.
    fn count_blocks(
        &mut self,
        ino: InodeNo,
        inode: &mut Inode,
        n: usize,
        separate: bool,
    ) -> Result<Vec<PatchId>> {
        inode.core.blocks_lo += (n * self.bs / 512) as u32;
        if separate {
            self.write_inode(ino, inode, &[])
        } else {
            Ok(Vec::new())
        }
    }

    /// Sets one pointer: in the inode (`parent` none) or at `index` of the
    /// indirect block `parent`.
    #[allow(clippy::too_many_arguments)]
    fn set_ptr(
        &mut self,
        ino: InodeNo,
        inode: &mut Inode,
        parent: Option<u32>,
        slot: usize,
        index: Option<u32>,
        value: u32,
        deps: &[PatchId],
    ) -> Result<Vec<PatchId>> {
        match (parent, index) {
            (Some(p), Some(i)) => {
                let mut bytes = self.m.read(BlockNo(u64::from(p)))?.to_vec();
                set_pointer(&mut bytes, i, stitch_format::BlockNo(value));
                let at = i as usize * 4;
                Ok(vec![self.m.byte(
                    BlockNo(u64::from(p)),
                    at,
                    &bytes[at..at + 4],
                    deps,
                    META,
                )?])
            }
            _ => {
                inode.core.block[slot] = value;
                self.write_inode(ino, inode, deps)
            }
        }
    }

    /// Sets the pointers at `index..` of indirect block `parent` to `run`,
    /// in one patch.
    fn set_ptrs(
        &mut self,
        parent: u32,
        index: u32,
        run: &[u32],
        deps: &[PatchId],
    ) -> Result<PatchId> {
        let mut bytes = self.m.read(BlockNo(u64::from(parent)))?.to_vec();
        for (k, &phys) in run.iter().enumerate() {
            set_pointer(&mut bytes, index + k as u32, stitch_format::BlockNo(phys));
        }
        let (lo, hi) = (index as usize * 4, (index as usize + run.len()) * 4);
        Ok(self
            .m
            .byte(BlockNo(u64::from(parent)), lo, &bytes[lo..hi], deps, META)?)
    }

    /// Reads up to `len` bytes at `offset` (holes read as zeros).
    pub fn read(&mut self, ino: InodeNo, offset: u64, len: usize) -> Result<Vec<u8>> {
        let inode = self.read_inode(ino)?;
        let end = (offset + len as u64).min(inode.size());
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let bs = self.bs as u64;
        let mut at = offset;
        while at < end {
            let (logical, in_block) = (at / bs, (at % bs) as usize);
            let n = ((bs - in_block as u64).min(end - at)) as usize;
            match self.bmap(&inode, logical)? {
                Some(p) => out.extend_from_slice(
                    &self.m.read_data(BlockNo(u64::from(p)))?[in_block..in_block + n],
                ),
                None => out.resize(out.len() + n, 0),
            }
            at += n as u64;
        }
        Ok(out)
    }

    /// Every block the file owns (data and indirect), for freeing it.
    pub(crate) fn owned_blocks(&mut self, inode: &Inode) -> Result<Vec<u32>> {
        // Device numbers and fast symlink targets live in `i_block`: those
        // inodes own no blocks.
        let maps_blocks = match inode.file_type() {
            Some(stitch_format::FileType::Regular | stitch_format::FileType::Directory) => true,
            Some(stitch_format::FileType::Symlink) => !stitch_format::symlink::is_fast(inode),
            _ => false,
        };
        if !maps_blocks {
            return Ok(Vec::new());
        }
        let mut out: Vec<u32> = inode.core.block[..12]
            .iter()
            .copied()
            .filter(|&b| b != 0)
            .collect();
        for (slot, depth) in [(12, 1), (13, 2), (14, 3)] {
            self.collect_tree(inode.core.block[slot], depth, &mut out)?;
        }
        Ok(out)
    }

    pub(crate) fn collect_tree(
        &mut self,
        block: u32,
        depth: u32,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        if block == 0 {
            return Ok(());
        }
        out.push(block);
        let children: Vec<u32> =
            stitch_format::indirect::pointers(self.m.read(BlockNo(u64::from(block)))?)
                .filter(|&p| p != 0)
                .collect();
        for c in children {
            if depth > 1 {
                self.collect_tree(c, depth - 1, out)?;
            } else {
                out.push(c);
            }
        }
        Ok(())
    }
}
