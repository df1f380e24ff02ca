//! A synthetic ext2-shaped file system built directly from patches, for the
//! optimizations benchmark (Featherstitch §8.2, Figure 9). It lays out one
//! group per 32,768 blocks (block bitmap, inode bitmap, inode table, data)
//! and states soft-updates dependencies the way an ext2 module would
//! (§3.4): bitmap before pointer, initialized data before pointer, inode
//! before the directory entry naming it, entry cleared before the inode and
//! blocks are freed. It keeps only what it needs to free files again; it is
//! a load generator, not a file system.

use stitch_diskfs::InodeNo;
use stitch_patch::{BlockNo, PatchCache, PatchFlags, PatchId, Result};

const BLOCKS_PER_GROUP: u64 = 32_768;
const INODE_SIZE: usize = 256;
const INODES_PER_BLOCK: u64 = 16;
const INODE_TABLE_BLOCKS: u64 = 512;
const DIRECT: usize = 12;
/// Block-sized buffers the generator writes from, so the benchmark times the
/// patch engine rather than the generator's allocations.
static ZEROS: [u8; 4096] = [0; 4096];
static FILL: [u8; 4096] = [0x5a; 4096];
const META: PatchFlags = PatchFlags { data: false };
const DATA: PatchFlags = PatchFlags { data: true };

/// Block `block` as the 32 bits ext2 keeps of it.
fn ondisk(block: u64) -> u32 {
    u32::try_from(block).expect("a synthetic device has fewer than 2^32 blocks")
}

/// A file the generator created and may delete.
pub struct File {
    ino: InodeNo,
    blocks: Vec<u64>,
    indirect: Option<u64>,
    dir_block: u64,
    dir_slot: usize,
}

/// A directory: one block of entries, filled slot by slot.
struct Dir {
    block: u64,
    used: usize,
}

pub struct SynthFs {
    groups: u64,
    next_block: u64,
    next_inode: u32,
    free_blocks: Vec<u64>,
    free_inodes: Vec<InodeNo>,
    /// Freed, with the patch that frees each: not reused until that patch
    /// has committed, as soft updates' allocator does (rule 2 holds either
    /// way, through the bitmap overlap; waiting keeps reuse cheap).
    pending_blocks: Vec<(u64, PatchId)>,
    pending_inodes: Vec<(InodeNo, PatchId)>,
    dirs: Vec<Dir>,
    /// Operations since the last write-back.
    pub ops: u64,
}

impl SynthFs {
    pub fn new(device_blocks: u64) -> Self {
        SynthFs {
            groups: device_blocks / BLOCKS_PER_GROUP,
            next_block: 0,
            next_inode: 11,
            free_blocks: Vec::new(),
            free_inodes: Vec::new(),
            pending_blocks: Vec::new(),
            pending_inodes: Vec::new(),
            dirs: Vec::new(),
            ops: 0,
        }
    }

    fn first_data(&self, group: u64) -> u64 {
        group * BLOCKS_PER_GROUP + 3 + INODE_TABLE_BLOCKS
    }

    fn block_bitmap(block: u64) -> (BlockNo, usize, u32) {
        let group = block / BLOCKS_PER_GROUP;
        let bit = block % BLOCKS_PER_GROUP;
        (
            BlockNo(group * BLOCKS_PER_GROUP + 1),
            (bit / 32 * 4) as usize,
            1 << (bit % 32),
        )
    }

    /// Inode `ino`'s group and index in it.
    fn inode_place(ino: InodeNo) -> (u64, u64) {
        let per_group = INODE_TABLE_BLOCKS * INODES_PER_BLOCK;
        let ino = u64::from(ino.0);
        (ino / per_group, ino % per_group)
    }

    fn inode_bitmap(ino: InodeNo) -> (BlockNo, usize, u32) {
        let (group, idx) = Self::inode_place(ino);
        (
            BlockNo(group * BLOCKS_PER_GROUP + 2),
            (idx / 32 * 4) as usize,
            1 << (idx % 32),
        )
    }

    fn inode_at(ino: InodeNo) -> (BlockNo, usize) {
        let (group, idx) = Self::inode_place(ino);
        let block = group * BLOCKS_PER_GROUP + 3 + idx / INODES_PER_BLOCK;
        (
            BlockNo(block),
            (idx % INODES_PER_BLOCK) as usize * INODE_SIZE,
        )
    }

    /// Group counters (group descriptor and superblock free counts): small
    /// patches with no dependencies, as in Figure 3.
    fn count(&self, c: &mut PatchCache, group: u64, field: usize, value: u32) -> Result<()> {
        c.create_byte(
            BlockNo(0),
            32 * group as usize + field,
            &value.to_le_bytes(),
            &[],
            META,
        )?;
        c.create_byte(BlockNo(0), 1024 + field, &value.to_le_bytes(), &[], META)?;
        Ok(())
    }

    fn alloc_block(&mut self, c: &mut PatchCache) -> Result<(u64, PatchId)> {
        let block = match self.free_blocks.pop() {
            Some(b) => b,
            None => {
                if self.next_block == 0 || (self.next_block + 1).is_multiple_of(BLOCKS_PER_GROUP) {
                    let group = if self.next_block == 0 {
                        0
                    } else {
                        self.next_block / BLOCKS_PER_GROUP + 1
                    };
                    assert!(group < self.groups, "synthetic device full");
                    self.next_block = self.first_data(group);
                } else {
                    self.next_block += 1;
                }
                self.next_block
            }
        };
        let (bm, off, mask) = Self::block_bitmap(block);
        let b = c.create_bit(bm, off, mask, &[], META)?;
        self.count(c, block / BLOCKS_PER_GROUP, 12, ondisk(block))?;
        Ok((block, b))
    }

    /// Makes a directory with one block of entries.
    pub fn mkdir(&mut self, c: &mut PatchCache) -> Result<()> {
        let (block, b) = self.alloc_block(c)?;
        c.create_byte(BlockNo(block), 0, &ZEROS, &[b], META)?;
        self.dirs.push(Dir { block, used: 0 });
        Ok(())
    }

    /// Creates a file of `size` bytes in the newest directory, writing its
    /// data in 4 kB application writes (each updating the inode's size).
    pub fn create(&mut self, c: &mut PatchCache, size: u64) -> Result<File> {
        if self.dirs.last().is_none_or(|d| d.used >= 128) {
            self.mkdir(c)?;
        }
        let ino = self.free_inodes.pop().unwrap_or_else(|| {
            self.next_inode += 1;
            InodeNo(self.next_inode)
        });
        let (ibm, ioff, imask) = Self::inode_bitmap(ino);
        let ib = c.create_bit(ibm, ioff, imask, &[], META)?;
        let (iblock, ioffset) = Self::inode_at(ino);
        let mut init = [0u8; INODE_SIZE];
        init[0..2].copy_from_slice(&0o100644u16.to_le_bytes());
        let inode = c.create_byte(iblock, ioffset, &init, &[ib], META)?;
        let mut file = File {
            ino,
            blocks: Vec::new(),
            indirect: None,
            dir_block: 0,
            dir_slot: 0,
        };
        let mut written = 0;
        while written < size {
            let n = (size - written).min(4096);
            self.append_block(c, &mut file, n as usize)?;
            written += n;
            let sz = (written as u32).to_le_bytes();
            c.create_byte(iblock, ioffset + 4, &sz, &[], META)?;
        }
        self.link(c, &mut file, inode)?;
        self.ops += 1;
        Ok(file)
    }

    /// Allocates, initializes and attaches one data block (Figure 3's
    /// b, d, d', i for one 4 kB write).
    fn append_block(&mut self, c: &mut PatchCache, f: &mut File, len: usize) -> Result<()> {
        let (block, b) = self.alloc_block(c)?;
        let d = c.create_byte(BlockNo(block), 0, &ZEROS, &[b], DATA)?;
        let d2 = c.create_byte(BlockNo(block), 0, &FILL[..len], &[], DATA)?;
        let (iblock, ioffset) = Self::inode_at(f.ino);
        let ptr = ondisk(block).to_le_bytes();
        let n = f.blocks.len();
        if n < DIRECT {
            c.create_byte(iblock, ioffset + 40 + 4 * n, &ptr, &[b, d, d2], META)?;
        } else {
            let ind = match f.indirect {
                Some(ind) => ind,
                None => {
                    let (ind, ib) = self.alloc_block(c)?;
                    let init = c.create_byte(BlockNo(ind), 0, &ZEROS, &[ib], META)?;
                    c.create_byte(
                        iblock,
                        ioffset + 40 + 4 * DIRECT,
                        &ondisk(ind).to_le_bytes(),
                        &[ib, init],
                        META,
                    )?;
                    f.indirect = Some(ind);
                    ind
                }
            };
            c.create_byte(BlockNo(ind), 4 * (n - DIRECT), &ptr, &[b, d, d2], META)?;
        }
        f.blocks.push(block);
        // ext2 keeps the 512-byte sector count and the modification time in
        // the inode; every allocating write updates both.
        let sectors =
            (f.blocks.len() as u32 * 8 + u32::from(f.indirect.is_some()) * 8).to_le_bytes();
        c.create_byte(iblock, ioffset + 28, &sectors, &[b], META)?;
        c.create_byte(
            iblock,
            ioffset + 16,
            &(f.blocks.len() as u32).to_le_bytes(),
            &[],
            META,
        )?;
        Ok(())
    }

    /// Adds the directory entry, after the inode it names (rule 1).
    fn link(&mut self, c: &mut PatchCache, f: &mut File, inode: PatchId) -> Result<()> {
        let dir = self.dirs.last_mut().expect("a directory exists");
        let mut entry = [0u8; 32];
        entry[0..4].copy_from_slice(&f.ino.0.to_le_bytes());
        entry[4..6].copy_from_slice(&32u16.to_le_bytes());
        entry[8..16].copy_from_slice(b"file.txt");
        c.create_byte(BlockNo(dir.block), dir.used * 32, &entry, &[inode], META)?;
        f.dir_block = dir.block;
        f.dir_slot = dir.used;
        dir.used += 1;
        Ok(())
    }

    /// Deletes a file: the entry goes first; the inode and its blocks are
    /// freed after (rule 2, never reuse before nullifying).
    pub fn delete(&mut self, c: &mut PatchCache, f: File) -> Result<()> {
        let gone = c.create_byte(BlockNo(f.dir_block), f.dir_slot * 32, &[0; 4], &[], META)?;
        let (iblock, ioffset) = Self::inode_at(f.ino);
        let cleared = c.create_byte(iblock, ioffset, &[0; 2], &[gone], META)?;
        let (ibm, ioff, imask) = Self::inode_bitmap(f.ino);
        let ifree = c.create_bit(ibm, ioff, imask, &[cleared], META)?;
        for &block in f.blocks.iter().chain(f.indirect.iter()) {
            let (bm, off, mask) = Self::block_bitmap(block);
            let free = c.create_bit(bm, off, mask, &[cleared], META)?;
            self.pending_blocks.push((block, free));
        }
        self.count(c, Self::inode_place(f.ino).0, 14, f.ino.0)?;
        self.pending_inodes.push((f.ino, ifree));
        self.ops += 1;
        Ok(())
    }

    /// After a write-back: what was freed on disk may be reused.
    pub fn recycle(&mut self, c: &PatchCache) {
        let (blocks, inodes) = (&mut self.free_blocks, &mut self.free_inodes);
        self.pending_blocks.retain(|&(b, p)| {
            !(c.is_committed(p) && {
                blocks.push(b);
                true
            })
        });
        self.pending_inodes.retain(|&(i, p)| {
            !(c.is_committed(p) && {
                inodes.push(i);
                true
            })
        });
    }

    /// Appends `len` bytes to an existing file (PostMark's append).
    pub fn append(&mut self, c: &mut PatchCache, f: &mut File, len: usize) -> Result<()> {
        self.append_block(c, f, len)?;
        let (iblock, ioffset) = Self::inode_at(f.ino);
        let size = (f.blocks.len() as u32 * 4096).to_le_bytes();
        c.create_byte(iblock, ioffset + 4, &size, &[], META)?;
        self.ops += 1;
        Ok(())
    }
}
