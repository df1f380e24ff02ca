//! Builds the metadata of a fresh file system as a list of block writes, with
//! no I/O: superblock and its backups, descriptor tables, bitmaps, the inode
//! table blocks that hold used inodes, the root and lost+found directories,
//! and for ext3 the journal inode's indirect blocks and journal superblock.
//!
//! Every block not listed must read as zeros (inode tables, journal body, free
//! space); [`Image::journal_body`] and [`Image::inode_tables`] name the ones
//! whose zeroes matter, for devices that are not known to be zero already and
//! for image files whose host should allocate them now.
//!
//! Invariant: each block appears in [`Image::writes`] at most once, and every
//! block referenced by metadata is marked in its group's block bitmap.

use crate::params::{Params, BLOCKS_PER_GROUP, BLOCK_SIZE, INODE_SIZE, LPF_BLOCKS};
use std::collections::BTreeMap;
use std::ops::Range;
use stitch_format::bitmap::BitmapMut;
use stitch_format::features::{compat, incompat, ro_compat};
use stitch_format::group_desc::{encode_table, free_totals};
use stitch_format::indirect::{map_path, set_pointer};
use stitch_format::inode::{FIRST_INO, JOURNAL_INO, ROOT_INO};
use stitch_format::jbd2::JournalSuperblock;
use stitch_format::superblock::{self as sbc, Superblock};
use stitch_format::{
    dir, BlockNo, FileType, GroupDesc, GroupNo, Inode, InodeNo, Layout, Timestamp, NO_BLOCK,
};

/// Values that differ between runs; fixed in tests.
#[derive(Copy, Clone, Debug)]
pub struct Identity {
    pub uuid: [u8; 16],
    pub hash_seed: [u32; 4],
    pub now: Timestamp,
}

/// The planned file system.
pub struct Image {
    pub sb: Superblock,
    pub layout: Layout,
    pub gds: Vec<GroupDesc>,
    /// Metadata blocks to write, by block number.
    pub writes: BTreeMap<BlockNo, Vec<u8>>,
    /// The journal's blocks after its superblock: must be zero, not written
    /// above. Contiguous blocks form one range.
    pub journal_body: Vec<Range<BlockNo>>,
    /// Every group's inode table: must be zero except the blocks written above
    /// (which are written after the zeroes).
    pub inode_tables: Vec<Range<BlockNo>>,
}

/// Hands out free blocks in increasing order, skipping each group's metadata.
struct Allocator<'a> {
    layout: &'a Layout,
    next: BlockNo,
}

impl Allocator<'_> {
    fn alloc(&mut self) -> Option<BlockNo> {
        while self.next < self.layout.end() {
            let g = self.layout.group_of_block(self.next)?;
            let data_start = self
                .layout
                .group_first_block(g)
                .plus(u64::from(self.layout.overhead_blocks(g)));
            if self.next >= data_start {
                self.next = self.next.plus(1);
                return Some(BlockNo(self.next.0 - 1));
            }
            self.next = data_start;
        }
        None
    }
}

fn features(journal: bool) -> (u32, u32, u32) {
    let jc = if journal { compat::HAS_JOURNAL.bit } else { 0 };
    (
        compat::EXT_ATTR.bit | jc,
        incompat::FILETYPE.bit,
        ro_compat::SPARSE_SUPER.bit | ro_compat::LARGE_FILE.bit,
    )
}

fn base_superblock(p: &Params, id: &Identity) -> Superblock {
    let (fc, fi, fr) = features(p.journal_blocks > 0);
    Superblock {
        inodes_count: p.inodes_count(),
        blocks_count_lo: p.blocks_count,
        r_blocks_count_lo: (u64::from(p.blocks_count) * 5 / 100) as u32,
        log_block_size: 2,
        log_cluster_size: 2,
        blocks_per_group: BLOCKS_PER_GROUP,
        clusters_per_group: BLOCKS_PER_GROUP,
        inodes_per_group: p.inodes_per_group,
        wtime: id.now.secs() as u32,
        max_mnt_count: 0xFFFF,
        magic: sbc::EXT2_MAGIC,
        state: sbc::STATE_VALID,
        errors: sbc::ERRORS_CONTINUE,
        lastcheck: id.now.secs() as u32,
        rev_level: sbc::DYNAMIC_REV,
        first_ino: FIRST_INO.0,
        inode_size: INODE_SIZE,
        feature_compat: fc,
        feature_incompat: fi,
        feature_ro_compat: fr,
        uuid: id.uuid,
        hash_seed: id.hash_seed,
        def_hash_version: sbc::HASH_HALF_MD4,
        default_mount_opts: sbc::DEFMOPT_XATTR_USER | sbc::DEFMOPT_ACL,
        mkfs_time: id.now.secs() as u32,
        min_extra_isize: stitch_format::inode::WANT_EXTRA_ISIZE,
        want_extra_isize: stitch_format::inode::WANT_EXTRA_ISIZE,
        flags: sbc::FLAGS_SIGNED_HASH,
        ..Default::default()
    }
}

/// One file's blocks: data blocks in logical order and the indirect blocks
/// that map them, already filled in.
struct Mapped {
    i_block: [BlockNo; 15],
    data: Vec<BlockNo>,
    indirect: BTreeMap<BlockNo, Vec<u8>>,
}

impl Mapped {
    /// Points `inode`'s `i_block` at the map.
    fn set_pointers(&self, inode: &mut Inode) {
        for (slot, &b) in self.i_block.iter().enumerate() {
            inode.set_block_ptr(slot, b);
        }
    }

    fn sectors(&self) -> u32 {
        (self.data.len() + self.indirect.len()) as u32 * (BLOCK_SIZE / 512)
    }
}

/// Allocates `n` data blocks and the indirect blocks mapping them, each
/// indirect block placed just before the first data block it maps (as ext2
/// and mke2fs do).
fn map_file(alloc: &mut Allocator, n: u32) -> Option<Mapped> {
    let bs = BLOCK_SIZE as usize;
    let mut m = Mapped {
        i_block: [NO_BLOCK; 15],
        data: Vec::with_capacity(n as usize),
        indirect: BTreeMap::new(),
    };
    for logical in 0..u64::from(n) {
        let path = map_path(logical, bs).ok()?;
        let mut here = m.i_block[path.slot];
        if path.depth > 0 && here == NO_BLOCK {
            here = alloc.alloc()?;
            m.i_block[path.slot] = here;
            m.indirect.insert(here, vec![0; bs]);
        }
        for (level, &idx) in path.levels().iter().enumerate() {
            let last = level + 1 == path.depth;
            let child = stitch_format::indirect::pointer(&m.indirect[&here], idx)?;
            let child = if child != NO_BLOCK {
                child
            } else {
                let b = alloc.alloc()?;
                set_pointer(m.indirect.get_mut(&here)?, idx, b);
                if !last {
                    m.indirect.insert(b, vec![0; bs]);
                }
                b
            };
            here = child;
        }
        if path.depth == 0 {
            here = alloc.alloc()?;
            m.i_block[path.slot] = here;
        }
        m.data.push(here);
    }
    Some(m)
}

fn dir_inode(perm: u16, links: u16, m: &Mapped, now: Timestamp) -> Inode {
    let mut ino = Inode::new(FileType::Directory, perm, INODE_SIZE, now);
    ino.core.links_count = links;
    m.set_pointers(&mut ino);
    ino.core.blocks_lo = m.sectors();
    ino.set_size(u64::from(m.data.len() as u32 * BLOCK_SIZE));
    ino
}

impl Image {
    /// Plans the whole file system.
    pub fn build(p: &Params, id: &Identity) -> Option<Image> {
        let sb = base_superblock(p, id);
        let layout = Layout::from_superblock(&sb).ok()?;
        let mut img = Image {
            sb,
            gds: Vec::new(),
            writes: BTreeMap::new(),
            journal_body: Vec::new(),
            inode_tables: Vec::new(),
            layout,
        };
        let mut alloc = Allocator {
            layout: &img.layout,
            next: BlockNo(0),
        };
        let root = map_file(&mut alloc, 1)?;
        let lpf = map_file(&mut alloc, LPF_BLOCKS)?;
        let journal = (p.journal_blocks > 0)
            .then(|| map_file(&mut alloc, p.journal_blocks))
            .flatten();
        if p.journal_blocks > 0 && journal.is_none() {
            return None;
        }
        let used_end = alloc.next;
        img.write_dirs(&root, &lpf);
        let mut inodes = vec![
            (ROOT_INO, dir_inode(0o755, 3, &root, id.now)),
            (FIRST_INO, dir_inode(0o700, 2, &lpf, id.now)),
        ];
        if let Some(j) = &journal {
            let ji = img.write_journal(j, id);
            inodes.push((JOURNAL_INO, ji));
        }
        img.write_inode_table(&inodes);
        img.write_groups(used_end);
        img.write_superblocks();
        Some(img)
    }

    fn write_dirs(&mut self, root: &Mapped, lpf: &Mapped) {
        let bs = BLOCK_SIZE as usize;
        let mut rb = dir::new_dir_block(bs, ROOT_INO, ROOT_INO);
        let inserted = dir::insert(&mut rb, b"lost+found", FIRST_INO, FileType::Directory);
        assert_eq!(inserted, Ok(true), "an empty root block has room");
        self.writes.insert(root.data[0], rb);
        for (i, &b) in lpf.data.iter().enumerate() {
            let block = if i == 0 {
                dir::new_dir_block(bs, FIRST_INO, ROOT_INO)
            } else {
                dir::empty_block(bs)
            };
            self.writes.insert(b, block);
        }
    }

    /// The journal inode, its indirect blocks and the journal superblock; the
    /// superblock keeps a backup of the inode's map (`s_jnl_blocks`).
    fn write_journal(&mut self, j: &Mapped, id: &Identity) -> Inode {
        let mut ino = Inode::new(FileType::Regular, 0o600, INODE_SIZE, id.now);
        j.set_pointers(&mut ino);
        ino.core.blocks_lo = j.sectors();
        ino.set_size(j.data.len() as u64 * u64::from(BLOCK_SIZE));
        self.writes.extend(j.indirect.clone());
        let jsb = JournalSuperblock::new_v2(BLOCK_SIZE, j.data.len() as u32, id.uuid);
        let mut first = vec![0u8; BLOCK_SIZE as usize];
        jsb.encode_into(&mut first);
        self.writes.insert(j.data[0], first);
        for &b in &j.data[1..] {
            match self.journal_body.last_mut() {
                Some(r) if r.end == b => r.end = b.plus(1),
                _ => self.journal_body.push(b..b.plus(1)),
            }
        }
        self.sb.journal_inum = JOURNAL_INO.0;
        self.sb.jnl_backup_type = sbc::JNL_BACKUP_BLOCKS;
        self.sb.jnl_blocks[..15].copy_from_slice(&ino.core.block);
        self.sb.jnl_blocks[15] = ino.core.size_high;
        self.sb.jnl_blocks[16] = ino.core.size_lo;
        ino
    }

    /// Writes the inode table blocks of group 0 that hold used inodes; all
    /// other inode table blocks stay zero.
    fn write_inode_table(&mut self, inodes: &[(InodeNo, Inode)]) {
        let table = self.layout.standard_group_layout(GroupNo(0)).inode_table;
        for (ino, inode) in inodes {
            let loc = self
                .layout
                .inode_location(*ino, table.start)
                .expect("reserved inodes are in group 0");
            let block = self
                .writes
                .entry(loc.block)
                .or_insert_with(|| vec![0; BLOCK_SIZE as usize]);
            inode.encode_into(&mut block[loc.offset..loc.offset + usize::from(INODE_SIZE)]);
        }
        for g in 0..self.layout.group_count {
            self.inode_tables
                .push(self.layout.standard_group_layout(GroupNo(g)).inode_table);
        }
    }

    /// Bitmaps and descriptors of every group. Blocks below `used_end` that
    /// are not group metadata were handed out by the allocator.
    fn write_groups(&mut self, used_end: BlockNo) {
        let (ipg, bs) = (self.layout.inodes_per_group, BLOCK_SIZE as usize);
        for g in (0..self.layout.group_count).map(GroupNo) {
            let group = self.layout.standard_group_layout(g);
            let first = group.blocks.start;
            let n = self.layout.blocks_in_group(g);
            let mut bb = vec![0u8; bs];
            let mut bm = BitmapMut::new(&mut bb);
            let used_here = self
                .layout
                .index_in_group(g, used_end.clamp(first, group.blocks.end));
            bm.set_range(0, used_here.max(self.layout.overhead_blocks(g) as usize));
            bm.set_padding(n as usize);
            let free_blocks = n as usize - bm.view().count_set(n as usize);
            let mut ib = vec![0u8; bs];
            let mut im = BitmapMut::new(&mut ib);
            let used_inodes = if g.0 == 0 { FIRST_INO.0 } else { 0 };
            im.set_range(0, used_inodes as usize);
            im.set_padding(ipg as usize);
            self.gds.push(GroupDesc {
                block_bitmap: group.block_bitmap,
                inode_bitmap: group.inode_bitmap,
                inode_table: group.inode_table.start,
                free_blocks_count: free_blocks as u16,
                free_inodes_count: (ipg - used_inodes) as u16,
                used_dirs_count: if g.0 == 0 { 2 } else { 0 },
                ..Default::default()
            });
            self.writes.insert(group.block_bitmap, bb);
            self.writes.insert(group.inode_bitmap, ib);
        }
        (self.sb.free_blocks_count_lo, self.sb.free_inodes_count) = free_totals(&self.gds);
    }

    /// The primary superblock at byte 1024 of block 0, and a backup (with its
    /// group number) at the start of every group that has a copy.
    fn write_superblocks(&mut self) {
        let table = encode_table(&self.gds, &self.layout);
        let bs = BLOCK_SIZE as usize;
        for g in (0..self.layout.group_count).map(GroupNo) {
            let Some(copy) = self.layout.super_copy(g) else {
                continue;
            };
            let mut sb = self.sb.clone();
            sb.block_group_nr = g.0 as u16;
            let mut block = vec![0u8; bs];
            let off = if g.0 == 0 {
                sbc::SUPERBLOCK_OFFSET as usize
            } else {
                0
            };
            sb.encode_into(&mut block[off..]);
            self.writes.insert(copy.superblock, block);
            for i in 0..copy.gdt.end.since(copy.gdt.start) as usize {
                let b = copy.gdt.start.plus(i as u64);
                self.writes.insert(b, table[i * bs..(i + 1) * bs].to_vec());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::JournalSize;
    use stitch_format::bitmap::Bitmap;

    fn id() -> Identity {
        Identity {
            uuid: [1; 16],
            hash_seed: [2; 4],
            now: Timestamp::from_secs(1_700_000_000),
        }
    }

    #[test]
    fn counts_agree_with_bitmaps_and_superblock_decodes() {
        let p = Params::new(3 * 32768 * 4096 + 4096 * 1000, Some(JournalSize::Default)).unwrap();
        let img = Image::build(&p, &id()).unwrap();
        let sb = Superblock::decode(&img.writes[&BlockNo(0)][1024..2048]).unwrap();
        assert_eq!(sb, img.sb);
        for (g, gd) in img.gds.iter().enumerate() {
            let n = img.layout.blocks_in_group(GroupNo(g as u32)) as usize;
            let bm = Bitmap::new(&img.writes[&gd.block_bitmap]);
            assert_eq!(
                n - bm.count_set(n),
                usize::from(gd.free_blocks_count),
                "group {g}"
            );
            bm.check_padding(n).unwrap();
        }
    }

    #[test]
    fn journal_map_matches_mke2fs_shape() {
        // mke2fs on 64 MiB: root 1028, lost+found 1029-1032, journal
        // (0-11):1033-1044, (IND):1045, (12-1023):1046-2057.
        let p = Params::new(64 << 20, Some(JournalSize::Default)).unwrap();
        let img = Image::build(&p, &id()).unwrap();
        assert_eq!(
            &img.sb.jnl_blocks[..13],
            &[1033, 1034, 1035, 1036, 1037, 1038, 1039, 1040, 1041, 1042, 1043, 1044, 1045]
        );
        assert_eq!(&img.writes[&BlockNo(1045)][..4], &1046u32.to_le_bytes());
        assert_eq!(img.gds[0].free_blocks_count, 16384 - 2058);
    }
}
