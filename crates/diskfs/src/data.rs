//! File data: writes (a byte slice, or whole pages the layer above shares
//! with the cache) and reads, through the block maps (`bmap`).
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
use crate::Refusal;
use std::sync::Arc;
use stitch_format::indirect::map_path;
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

/// A file write made of whole pages: the first `len` bytes of `pages`, each
/// page one block long, written from byte `offset`, a block boundary.
#[derive(Clone, Copy, Debug)]
pub struct Pages<'a> {
    pub offset: u64,
    pub pages: &'a [Arc<Vec<u8>>],
    pub len: usize,
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

/// The new blocks of a run, allocated and written, not yet pointed at.
#[derive(Default)]
struct Filled {
    /// The blocks, in logical order.
    blocks: Vec<BlockNo>,
    /// Their bitmap bits and contents.
    patches: Vec<PatchId>,
    /// The bytes of the write they hold.
    len: usize,
    /// What stopped the allocation short, if anything.
    failure: Option<DiskError>,
}

/// The most new blocks one patch points at: a run's data is all written
/// before its pointers, so a run stays well inside a journal transaction.
const MAX_RUN: u64 = 256;

impl DiskFs {
    /// Writes `data` at `offset` of regular file `ino`; returns the bytes
    /// written (short only when the disk filled up part-way).
    pub fn write(
        &mut self,
        ino: InodeNo,
        offset: u64,
        data: &[u8],
        now: Timestamp,
    ) -> Result<(usize, PatchId)> {
        self.write_src(ino, offset, Src::Bytes(data), now)
    }

    /// [`write`](Self::write) of a [`Pages`] run. A block a page fills
    /// whole takes the page as it is rather than a copy, and the device
    /// writes it from there: the caller keeps sharing it but must not change
    /// it in place (copy first, as `Arc::make_mut` does).
    pub fn write_pages(
        &mut self,
        ino: InodeNo,
        run: Pages<'_>,
        now: Timestamp,
    ) -> Result<(usize, PatchId)> {
        let Pages { offset, pages, len } = run;
        let bs = self.bs;
        if !offset.is_multiple_of(bs as u64)
            || pages.iter().any(|p| p.len() != bs)
            || len > pages.len() * bs
        {
            return Err(DiskError::Refused(Refusal::Invalid(
                "write_pages: block-sized pages from a block boundary",
            )));
        }
        if len == 0 {
            return self.write(ino, offset, &[], now);
        }
        self.write_src(ino, offset, Src::Pages { pages, len }, now)
    }

    fn write_src(
        &mut self,
        ino: InodeNo,
        offset: u64,
        data: Src<'_>,
        now: Timestamp,
    ) -> Result<(usize, PatchId)> {
        let mut inode = self.read_inode(ino)?;
        if inode.is_dir() {
            return Err(DiskError::Refused(Refusal::IsDir));
        }
        let max = stitch_format::indirect::max_blocks(self.bs) * self.bs as u64;
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|end| end > max)
        {
            return Err(DiskError::Refused(Refusal::TooLarge));
        }
        // Every block new, each 1,024 with an indirect block, and the
        // chain to the first (a double or triple indirect block).
        let blocks = (data.len() as u64).div_ceil(self.bs as u64) + 1;
        self.alloc
            .room_before_op(&mut self.m, blocks + blocks / (self.bs as u64 / 4) + 3)?;
        let (n, ps) = self.write_data(ino, &mut inode, offset, data, now)?;
        Ok((n, self.stands_for(&[&ps])?))
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
                    .write_block(phys, in_block, data, pos, len, inode)
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
        out.extend(self.inodes.write(&mut self.m, ino, inode, &out.clone())?);
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
        let filled = self.fill_new_blocks(ino, inode, first, in_block, data)?;
        let mut out = filled.patches;
        let mut pointer_deps = out.clone();
        pointer_deps.extend(after);
        let end = first * self.bs as u64 + (in_block + filled.len) as u64;
        out.extend(self.size_and_attach(ino, inode, first, end, &filled.blocks, pointer_deps)?);
        Ok((filled.len, out, filled.failure))
    }

    /// The first phase of [`Self::write_new_run`]: allocates blocks for
    /// `data` (from `in_block` of logical block `first`) a free run at a
    /// time and writes each whole. Running out of space after the first
    /// block stops there, with the error kept.
    fn fill_new_blocks(
        &mut self,
        ino: InodeNo,
        inode: &Inode,
        first: u64,
        in_block: usize,
        data: Src<'_>,
    ) -> Result<Filled> {
        let mut goal = self.goal(ino, inode, first)?;
        let mut filled = Filled::default();
        let (mut pos, mut at) = (0, in_block);
        while pos < data.len() {
            let blocks_left = (at + data.len() - pos).div_ceil(self.bs);
            let (start, n, bits) = match self.alloc.alloc_run(&mut self.m, goal, blocks_left) {
                Ok(x) => x,
                Err(e) if !filled.blocks.is_empty() => {
                    filled.failure = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            };
            filled.patches.extend(bits);
            for block in (start.0..start.0 + n as u64).map(BlockNo) {
                let len = (self.bs - at).min(data.len() - pos);
                // A whole block is patched from `data` as it is; a partial
                // one is padded with zeros (a new block has no old bytes to
                // keep).
                // The data need not wait for the bitmap: nothing points at
                // the block yet, and no earlier owner can (allocation never
                // takes a block whose free is not durable: see `alloc`).
                // Only the pointer waits for both, so data and bitmap go out
                // in one device flush.
                let d = if len == self.bs {
                    self.write_block(block, 0, data, pos, len, inode)?
                } else {
                    let mut b = vec![0u8; self.bs];
                    b[at..at + len].copy_from_slice(data.bytes(pos, len));
                    self.m.byte(block, 0, &b, &[], contents_flags(inode))?
                };
                filled.patches.push(d);
                filled.blocks.push(block);
                pos += len;
                at = 0;
            }
            goal = start.plus(n as u64);
        }
        filled.len = pos;
        Ok(filled)
    }

    /// The second phase of [`Self::write_new_run`]: the size covering the
    /// run up to byte `end`, and the pointers to `blocks` after
    /// `pointer_deps`. With the pointers in the inode, the size goes with
    /// them (one patch, after the data): an append shows whole or not at
    /// all, as a stream's order needs. With the pointers in an indirect
    /// block, a file's size goes first (a crash before its pointer leaves
    /// a hole of zeros, which ext2 allows and a mapped block past the size
    /// it does not); a directory may have no hole, so its size goes after.
    fn size_and_attach(
        &mut self,
        ino: InodeNo,
        inode: &mut Inode,
        first: u64,
        end: u64,
        blocks: &[BlockNo],
        mut pointer_deps: Vec<PatchId>,
    ) -> Result<Vec<PatchId>> {
        let mut out = Vec::new();
        let mut size_after = false;
        if end > inode.size() {
            if map_path(first, self.bs)?.depth == 0 {
                inode.set_size(end);
            } else if !inode.is_dir() {
                inode.set_size(end);
                let s = self.inodes.write(&mut self.m, ino, inode, &[])?;
                pointer_deps.extend(&s);
                out.extend(s);
            } else {
                size_after = true;
            }
        }
        let ps = match self.attach(ino, inode, first, blocks, &pointer_deps) {
            Ok(ps) => ps,
            Err(e) => {
                // No indirect block for them: nothing points at the data
                // blocks, so give them back rather than leak them.
                for &phys in blocks {
                    self.alloc.free_block(&mut self.m, phys, &[])?;
                }
                return Err(e);
            }
        };
        if size_after {
            inode.set_size(end);
            let s = self.inodes.write(&mut self.m, ino, inode, &ps)?;
            out.extend(s);
        }
        out.extend(ps);
        Ok(out)
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
    fn goal(&mut self, ino: InodeNo, inode: &Inode, logical: u64) -> Result<BlockNo> {
        if logical > 0 {
            if let Some(prev) = self.bmap(inode, logical - 1)? {
                return Ok(prev.plus(1));
            }
        }
        Ok(self.alloc.inode_group_start(ino))
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
                Some(p) => out.extend_from_slice(&self.m.read_data(p)?[in_block..in_block + n]),
                None => out.resize(out.len() + n, 0),
            }
            at += n as u64;
        }
        Ok(out)
    }
}
