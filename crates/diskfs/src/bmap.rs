//! Block maps: the twelve direct pointers and the single, double and triple
//! indirect blocks of an inode: looking a block up, attaching new blocks
//! (missing indirect blocks allocated and zeroed before the pointer to
//! them), cutting a map short (truncate), and every block a file owns.

use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, META};
use stitch_format::indirect::{map_path, pointer, pointers, ptrs_per_block, set_pointer};
use stitch_format::{BlockNo, Inode, InodeNo, NO_BLOCK};
use stitch_patch::PatchId;

/// Where one block pointer lives.
#[derive(Clone, Copy)]
enum PtrAt {
    /// Slot `slot` of the inode's `i_block`.
    Inode { slot: usize },
    /// Entry `index` of indirect block `block`.
    Indirect { block: BlockNo, index: u32 },
}

impl DiskFs {
    /// The physical block of logical block `logical`, if mapped.
    pub(crate) fn bmap(&mut self, inode: &Inode, logical: u64) -> Result<Option<BlockNo>> {
        let path = map_path(logical, self.bs)?;
        let mut ptr = inode.block_ptr(path.slot);
        for &index in path.levels() {
            if ptr == NO_BLOCK {
                return Ok(None);
            }
            let block = self.m.read(ptr)?;
            ptr = pointer(block, index)
                .ok_or_else(|| DiskError::Corrupt(format!("indirect block {} too short", ptr.0)))?;
        }
        Ok((ptr != NO_BLOCK).then_some(ptr))
    }

    /// The physical block behind logical block `logical` of `ino`, if any.
    pub fn physical_block(&mut self, ino: InodeNo, logical: u64) -> Result<Option<BlockNo>> {
        let inode = self.read_inode(ino)?;
        self.bmap(&inode, logical)
    }

    /// Points logical blocks `logical..` at `run` (pointers side by side:
    /// see [`Self::new_run_len`]), allocating and zeroing any missing
    /// indirect blocks first; the final pointers depend on `deps`.
    pub(crate) fn attach(
        &mut self,
        ino: InodeNo,
        inode: &mut Inode,
        logical: u64,
        run: &[BlockNo],
        deps: &[PatchId],
    ) -> Result<Vec<PatchId>> {
        let path = map_path(logical, self.bs)?;
        let phys = run[0];
        if path.depth == 0 {
            inode.core.blocks_lo += (run.len() * self.bs / 512) as u32;
            for (k, &b) in run.iter().enumerate() {
                inode.set_block_ptr(path.slot + k, b);
            }
            return self.inodes.write(&mut self.m, ino, inode, deps);
        }
        let mut out = Vec::new();
        // Walk down, creating indirect blocks where the map has holes.
        let mut parent: Option<BlockNo> = None;
        let mut ptr = inode.block_ptr(path.slot);
        let levels = path.levels().to_vec();
        for (depth, &index) in levels.iter().enumerate() {
            if ptr == NO_BLOCK {
                let (ind, ib) = self
                    .alloc
                    .alloc_block(&mut self.m, self.alloc.indirect_goal(phys))?;
                // Like a data block, a new block's contents need not wait
                // for its bitmap bit (see `write_new_run`); the pointer to
                // it waits for both.
                let init = self.m.byte(ind, 0, &vec![0u8; self.bs], &[], META)?;
                out.extend([ib, init]);
                let counted = self.count_blocks(ino, inode, 1, parent.is_some())?;
                let mut after = vec![ib, init];
                after.extend(&counted);
                out.extend(counted);
                let at = match (parent, levels.get(depth.wrapping_sub(1))) {
                    (Some(block), Some(&index)) => PtrAt::Indirect { block, index },
                    _ => PtrAt::Inode { slot: path.slot },
                };
                out.extend(self.set_ptr(ino, inode, at, ind, &after)?);
                ptr = ind;
            }
            parent = Some(ptr);
            let block = self.m.read(ptr)?;
            let next = pointer(block, index).unwrap_or(NO_BLOCK);
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
            self.inodes.write(&mut self.m, ino, inode, &[])
        } else {
            Ok(Vec::new())
        }
    }

    /// Sets the pointer at `at` to `value`, after `deps`.
    fn set_ptr(
        &mut self,
        ino: InodeNo,
        inode: &mut Inode,
        at: PtrAt,
        value: BlockNo,
        deps: &[PatchId],
    ) -> Result<Vec<PatchId>> {
        match at {
            PtrAt::Indirect { block: p, index: i } => {
                let mut bytes = self.m.read(p)?.to_vec();
                set_pointer(&mut bytes, i, value);
                let at = i as usize * 4;
                Ok(vec![self.m.byte(p, at, &bytes[at..at + 4], deps, META)?])
            }
            PtrAt::Inode { slot } => {
                inode.set_block_ptr(slot, value);
                self.inodes.write(&mut self.m, ino, inode, deps)
            }
        }
    }

    /// Sets the pointers at `index..` of indirect block `parent` to `run`,
    /// in one patch.
    fn set_ptrs(
        &mut self,
        parent: BlockNo,
        index: u32,
        run: &[BlockNo],
        deps: &[PatchId],
    ) -> Result<PatchId> {
        let mut bytes = self.m.read(parent)?.to_vec();
        for (k, &phys) in run.iter().enumerate() {
            set_pointer(&mut bytes, index + k as u32, phys);
        }
        let (lo, hi) = (index as usize * 4, (index as usize + run.len()) * 4);
        Ok(self.m.byte(parent, lo, &bytes[lo..hi], deps, META)?)
    }

    /// Unmaps every logical block from `keep` on, without touching any
    /// block that stays mapped: a partly cut indirect tree is copied (the
    /// kept pointers only) into new indirect blocks, which the inode will
    /// point at. So the inode write that switches to them, with the new size
    /// and block count, is the single atomic step, and no crash can leave a
    /// block count or size that disagrees with the map. Returns the blocks to
    /// free (cut data, cut subtrees, replaced indirect blocks) and the
    /// patches the inode write must follow (the new indirect blocks).
    pub(crate) fn cut_map(
        &mut self,
        inode: &mut Inode,
        keep: u64,
    ) -> Result<(Vec<BlockNo>, Vec<PatchId>)> {
        let (mut freed, mut written) = (Vec::new(), Vec::new());
        for slot in 0..12 {
            if slot as u64 >= keep && inode.block_ptr(slot) != NO_BLOCK {
                freed.push(inode.block_ptr(slot));
                inode.set_block_ptr(slot, NO_BLOCK);
            }
        }
        let p = ptrs_per_block(self.bs);
        let mut base = 12u64;
        let sectors = (self.bs / 512) as u32;
        for (slot, depth) in [(12usize, 1u32), (13, 2), (14, 3)] {
            let span = p.pow(depth);
            let top = inode.block_ptr(slot);
            if top != NO_BLOCK && keep < base + span {
                if keep <= base {
                    self.collect_tree(top, depth, &mut freed)?;
                    inode.set_block_ptr(slot, NO_BLOCK);
                } else {
                    let (copy, made) =
                        self.copy_cut(top, depth, base, keep, &mut freed, &mut written)?;
                    inode.set_block_ptr(slot, copy);
                    inode.core.blocks_lo += made * sectors;
                }
            }
            base += span;
        }
        Ok((freed, written))
    }

    /// A copy of indirect block `block` (mapping logical blocks from
    /// `base`) holding only the pointers below `keep`, its partly cut child
    /// copied the same way. The original goes to `freed` with everything
    /// cut; the copies' writes go to `written`. Returns the copy's number and
    /// how many blocks were allocated for copies.
    fn copy_cut(
        &mut self,
        block: BlockNo,
        depth: u32,
        base: u64,
        keep: u64,
        freed: &mut Vec<BlockNo>,
        written: &mut Vec<PatchId>,
    ) -> Result<(BlockNo, u32)> {
        let per = ptrs_per_block(self.bs).pow(depth - 1);
        let mut bytes = self.m.read(block)?.to_vec();
        let children: Vec<BlockNo> = pointers(&bytes).collect();
        let mut made = 0;
        let mut deps = Vec::new();
        for (i, &child) in children.iter().enumerate() {
            let child_base = base + i as u64 * per;
            if child == NO_BLOCK || child_base + per <= keep {
                continue;
            }
            let replacement = if child_base >= keep {
                if depth > 1 {
                    self.collect_tree(child, depth - 1, freed)?;
                } else {
                    freed.push(child);
                }
                NO_BLOCK
            } else {
                let before = written.len();
                let (copy, m) =
                    self.copy_cut(child, depth - 1, child_base, keep, freed, written)?;
                deps.extend_from_slice(&written[before..]);
                made += m;
                copy
            };
            set_pointer(&mut bytes, i as u32, replacement);
        }
        let (copy, ab) = self.alloc.alloc_block(&mut self.m, block)?;
        let w = self.m.byte(copy, 0, &bytes, &deps, META)?;
        written.extend([ab, w]);
        freed.push(block);
        Ok((copy, made + 1))
    }

    /// Every block the file owns (data and indirect), for freeing it.
    pub(crate) fn owned_blocks(&mut self, inode: &Inode) -> Result<Vec<BlockNo>> {
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
        let mut out: Vec<BlockNo> = inode
            .block_ptrs()
            .take(12)
            .filter(|&b| b != NO_BLOCK)
            .collect();
        for (slot, depth) in [(12, 1), (13, 2), (14, 3)] {
            self.collect_tree(inode.block_ptr(slot), depth, &mut out)?;
        }
        Ok(out)
    }

    pub(crate) fn collect_tree(
        &mut self,
        block: BlockNo,
        depth: u32,
        out: &mut Vec<BlockNo>,
    ) -> Result<()> {
        if block == NO_BLOCK {
            return Ok(());
        }
        out.push(block);
        let children: Vec<BlockNo> = pointers(self.m.read(block)?)
            .filter(|&p| p != NO_BLOCK)
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
