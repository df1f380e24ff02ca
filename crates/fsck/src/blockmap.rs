//! Block maps: claims every block an inode's map names, finds the last
//! logical block and the block count, then judges `i_size` and `i_blocks`
//! with e2fsck's rules (pass 1, `check_blocks`).
//!
//! Indirect blocks are not followed inode by inode. [`Walk`] queues them,
//! and [`Walk::finish`] reads one level of the whole file system at a time
//! (all single-indirect blocks, then the double level's children, ...)
//! sorted by block number, so the reads sweep the disk in order.
//!
//! Invariant: a pointer outside the file system is reported and never
//! followed; an inode's accounting is judged exactly once, after its last
//! indirect block was read.

use crate::error::FsckError;
use crate::finding::{FindingKind, Owner};
use crate::fs::Fs;
use crate::image::Image;
use crate::state::{DirBlock, State, BAD};
use crate::Phase;
use std::collections::HashMap;
use stitch_format::codec::ondisk_block;
use stitch_format::indirect::{self, IND_SLOT, N_DIRECT};
use stitch_format::inode::{FileType, Inode, RESIZE_INO};
use stitch_format::symlink;
use stitch_format::NO_BLOCK;

/// What one inode's map adds up to so far.
#[derive(Clone, Debug)]
pub struct Acc {
    ino: u32,
    is_dir: bool,
    is_symlink: bool,
    size: u64,
    i_blocks: u64,
    num_blocks: u64,
    /// Last mapped logical data block, -1 if none.
    last_block: i64,
    /// Indirect blocks of this inode not yet read.
    pending: u32,
}

impl Acc {
    pub fn new(_fs: &Fs, ino: u32, inode: &Inode) -> Acc {
        let ft = inode.file_type();
        Acc {
            ino,
            is_dir: ft == Some(FileType::Directory),
            is_symlink: ft == Some(FileType::Symlink),
            size: inode.size(),
            i_blocks: u64::from(inode.core.blocks_lo),
            num_blocks: 0,
            last_block: -1,
            pending: 0,
        }
    }
}

#[derive(Copy, Clone, Debug)]
struct IndTask {
    block: u32,
    ino: u32,
    depth: u32,
    base: u64,
}

/// Indirect blocks waiting to be read, and the inodes they belong to.
#[derive(Default)]
pub struct Walk {
    tasks: Vec<IndTask>,
    open: HashMap<u32, Acc>,
    /// Slow symlinks: (target block, inode, size).
    symlinks: Vec<(u32, u32, u64)>,
}

/// Does e2fsck walk this inode's `i_block` (`ext2fs_inode_has_valid_blocks2`)?
fn has_block_map(inode: &Inode) -> bool {
    match inode.file_type() {
        Some(FileType::Directory | FileType::Regular) => true,
        Some(FileType::Symlink) if inode.file_acl() == NO_BLOCK => inode.core.blocks_lo != 0,
        Some(FileType::Symlink) => {
            let size = inode.size();
            size >= symlink::FAST_MAX as u64 || (size > 4 && inode.core.block[1] == 0)
        }
        _ => false,
    }
}

impl Walk {
    /// Claims the direct blocks and queues the indirect ones of `inode`.
    pub fn start(&mut self, fs: &Fs, st: &mut State, mut acc: Acc, inode: &Inode) {
        self.ext_attr(fs, st, &mut acc, inode);
        if has_block_map(inode) || acc.ino == 1 {
            self.map(fs, st, &mut acc, inode);
        }
        if acc.is_symlink {
            self.symlink(fs, st, inode, acc.ino);
        }
        if acc.pending == 0 {
            judge(fs, st, &acc);
        } else {
            self.open.insert(acc.ino, acc);
        }
    }

    fn ext_attr(&mut self, fs: &Fs, st: &mut State, acc: &mut Acc, inode: &Inode) {
        let b = ondisk_block(inode.file_acl());
        if b == 0 {
            return;
        }
        if fs.ext_attr && fs.in_range(b) {
            st.claim_ea(b, acc.ino);
            acc.num_blocks += 1;
        } else {
            if let Some(i) = st.inode_mut(acc.ino) {
                i.flags |= BAD;
            }
            st.report(FindingKind::BadInode {
                ino: acc.ino,
                reason: format!("i_file_acl is {b}, should be zero"),
            });
        }
    }

    fn map(&mut self, fs: &Fs, st: &mut State, acc: &mut Acc, inode: &Inode) {
        let p = indirect::ptrs_per_block(fs.bs());
        for (slot, &b) in inode.core.block.iter().enumerate() {
            if b == 0 {
                continue;
            }
            if slot < IND_SLOT {
                data_block(fs, st, acc, b, slot as u64);
                continue;
            }
            let depth = (slot - IND_SLOT + 1) as u32;
            let base = N_DIRECT + (1..depth).map(|d| p.pow(d)).sum::<u64>();
            if !fs.in_range(b) {
                st.report(FindingKind::IllegalBlock {
                    ino: acc.ino,
                    logical: None,
                    block: b,
                });
                continue;
            }
            st.claim(b, Owner::Inode(acc.ino));
            acc.num_blocks += 1;
            acc.pending += 1;
            self.tasks.push(IndTask {
                block: b,
                ino: acc.ino,
                depth,
                base,
            });
        }
    }

    /// e2fsck_pass1_check_symlink; the slow case waits for its block.
    fn symlink(&mut self, fs: &Fs, st: &mut State, inode: &Inode, ino: u32) {
        let c = &inode.core;
        let invalid =
            c.size_high != 0 || c.size_lo == 0 || c.flags & stitch_format::inode::flags::INDEX != 0;
        if !invalid && symlink::is_fast(inode) {
            let bytes: Vec<u8> = c.block.iter().flat_map(|w| w.to_le_bytes()).collect();
            let len = bytes.iter().position(|&x| x == 0).unwrap_or(bytes.len());
            if len as u64 == inode.size() && len < bytes.len() {
                return;
            }
        } else if !invalid && c.block[1..].iter().all(|&b| b == 0) && fs.in_range(c.block[0]) {
            self.symlinks.push((c.block[0], ino, inode.size()));
            return;
        }
        invalid_symlink(st, ino);
    }

    /// Reads the queued indirect blocks level by level, then judges the
    /// inodes that waited for them and checks slow symlink targets.
    pub fn finish(
        mut self,
        img: &Image,
        fs: &Fs,
        st: &mut State,
        progress: &mut dyn FnMut(Phase, u64, u64),
    ) -> Result<(), FsckError> {
        let mut level = std::mem::take(&mut self.tasks);
        let mut done = 0u64;
        while !level.is_empty() {
            level.sort_unstable_by_key(|t| t.block);
            let blocks: Vec<u32> = level.iter().map(|t| t.block).collect();
            let mut next = Vec::new();
            img.read_sorted(&blocks, |i, buf| {
                self.indirect(fs, st, level[i], buf, &mut next);
            })?;
            done += level.len() as u64;
            progress(Phase::IndirectBlocks, done, done + next.len() as u64);
            level = next;
        }
        self.check_symlink_targets(img, st)
    }

    fn indirect(
        &mut self,
        fs: &Fs,
        st: &mut State,
        t: IndTask,
        buf: &[u8],
        next: &mut Vec<IndTask>,
    ) {
        let Some(mut acc) = self.open.remove(&t.ino) else {
            return;
        };
        let span = indirect::ptrs_per_block(fs.bs()).pow(t.depth - 1);
        for (j, b) in indirect::pointers(buf).map(ondisk_block).enumerate() {
            if b == 0 {
                continue;
            }
            let logical = t.base + j as u64 * span;
            if t.depth == 1 {
                data_block(fs, st, &mut acc, b, logical);
            } else if !fs.in_range(b) {
                st.report(FindingKind::IllegalBlock {
                    ino: t.ino,
                    logical: None,
                    block: b,
                });
            } else {
                st.claim(b, Owner::Inode(t.ino));
                acc.num_blocks += 1;
                acc.pending += 1;
                next.push(IndTask {
                    block: b,
                    ino: t.ino,
                    depth: t.depth - 1,
                    base: logical,
                });
            }
        }
        acc.pending -= 1;
        if acc.pending == 0 {
            judge(fs, st, &acc);
        } else {
            self.open.insert(t.ino, acc);
        }
    }

    fn check_symlink_targets(&mut self, img: &Image, st: &mut State) -> Result<(), FsckError> {
        self.symlinks.sort_unstable();
        let blocks: Vec<u32> = self.symlinks.iter().map(|s| s.0).collect();
        let mut bad = Vec::new();
        img.read_sorted(&blocks, |i, buf| {
            let (_, ino, size) = self.symlinks[i];
            let len = buf.iter().position(|&x| x == 0).unwrap_or(buf.len());
            if len as u64 != size || len >= buf.len() {
                bad.push(ino);
            }
        })?;
        for ino in bad {
            invalid_symlink(st, ino);
        }
        Ok(())
    }
}

fn invalid_symlink(st: &mut State, ino: u32) {
    if let Some(i) = st.inode_mut(ino) {
        i.flags |= BAD;
    }
    st.report(FindingKind::InvalidSymlink { ino });
}

fn data_block(fs: &Fs, st: &mut State, acc: &mut Acc, b: u32, logical: u64) {
    if !fs.in_range(b) {
        st.report(FindingKind::IllegalBlock {
            ino: acc.ino,
            logical: Some(logical),
            block: b,
        });
        return;
    }
    st.claim(b, Owner::Inode(acc.ino));
    acc.num_blocks += 1;
    acc.last_block = acc.last_block.max(logical as i64);
    if acc.is_dir {
        st.dir_blocks.push(DirBlock {
            block: b,
            dir: acc.ino,
            logical,
        });
    }
}

/// e2fsck's verdict on size and block count once the whole map is known.
fn judge(fs: &Fs, st: &mut State, acc: &Acc) {
    if acc.ino == RESIZE_INO.0 {
        return;
    }
    if acc.is_dir && acc.num_blocks == 0 {
        st.report(FindingKind::ZeroLengthDirectory { ino: acc.ino });
    }
    if !acc.is_symlink && size_is_bad(fs, acc) {
        let should_be = ((acc.last_block + 1) as u64) * fs.bs() as u64;
        st.report(FindingKind::BadSize {
            ino: acc.ino,
            size: acc.size,
            should_be,
            dir_blocks_past_size: acc.is_dir
                && acc.size.is_multiple_of(fs.bs() as u64)
                && acc.size < should_be,
        });
    }
    let should_be = acc.num_blocks * (fs.bs() as u64 / 512);
    if should_be != acc.i_blocks {
        st.report(FindingKind::BadBlockCount {
            ino: acc.ino,
            i_blocks: acc.i_blocks,
            should_be,
        });
    }
}

fn size_is_bad(fs: &Fs, acc: &Acc) -> bool {
    let bs = fs.bs() as u64;
    let blocks = (acc.last_block + 1) as u64;
    if acc.is_dir {
        let nblock = acc.size / bs;
        let prealloc = u64::from(fs.sb.prealloc_dir_blocks);
        return !acc.size.is_multiple_of(bs)
            || nblock > blocks
            || blocks - nblock.min(blocks) > prealloc && nblock < blocks;
    }
    let max = indirect::max_blocks(fs.bs()) * bs;
    (acc.last_block >= 0 && acc.size < acc.last_block as u64 * bs) || acc.size > max
}
