//! Pass 0: the superblock (primary, or a backup as e2fsck falls back to),
//! the group descriptors and the metadata blocks they place (the journal is
//! [`crate::journal`]). Everything later passes need to find things is here.
//!
//! Invariant: a group whose descriptor is invalid is listed in `valid` as
//! false and no later pass reads its bitmaps or inode table.

use crate::error::FsckError;
use crate::finding::{FindingKind, Owner};
use crate::image::Image;
use crate::state::State;
use std::ops::Range;
use stitch_format::codec::ondisk_block;
use stitch_format::features::{compat, incompat};
use stitch_format::group_desc::GroupDesc;
use stitch_format::superblock::SUPERBLOCK_OFFSET;
use stitch_format::{BlockNo, FormatError, GroupNo, Layout, Superblock};

pub struct Fs {
    pub sb: Superblock,
    pub layout: Layout,
    pub groups: Vec<GroupDesc>,
    pub valid: Vec<bool>,
    pub first_ino: u32,
    pub filetype: bool,
    pub ext_attr: bool,
    pub resize_inode: bool,
}

impl Fs {
    pub fn bs(&self) -> usize {
        self.layout.block_size.usize()
    }

    pub fn in_range(&self, b: u32) -> bool {
        b >= self.layout.first_data_block && b < self.layout.blocks_count
    }

    pub fn inodes_count(&self) -> u32 {
        self.layout.inodes_count()
    }
}

/// Reads the superblock and descriptors; reports a bad primary or bad
/// descriptors as findings, fails only if nothing usable is found.
pub fn load(img: &mut Image, st_findings: &mut Vec<FindingKind>) -> Result<Fs, FsckError> {
    let (sb, sb_block) = read_superblock(img, st_findings)?;
    let layout =
        Layout::from_superblock(&sb).map_err(|e| FsckError::NoSuperblock { primary: e })?;
    img.set_block_size(layout.block_size.usize());
    let gdt = img.read_blocks(sb_block + 1, layout.gdt_blocks() as usize)?;
    let mut groups = Vec::with_capacity(layout.group_count as usize);
    let mut valid = Vec::with_capacity(layout.group_count as usize);
    for g in 0..layout.group_count {
        let off = g as usize * GroupDesc::SIZE;
        let gd = GroupDesc::decode_raw(&gdt[off..]).unwrap_or_default();
        let problem = check_desc(&layout, g, &gd);
        if let Some(reason) = &problem {
            st_findings.push(FindingKind::GroupDescriptorCorrupt {
                group: g,
                reason: reason.clone(),
            });
        }
        valid.push(problem.is_none());
        groups.push(gd);
    }
    let f = sb.features();
    Ok(Fs {
        first_ino: sb.first_ino(),
        filetype: f.has_incompat(incompat::FILETYPE),
        ext_attr: f.has_compat(compat::EXT_ATTR),
        resize_inode: f.has_compat(compat::RESIZE_INODE),
        sb,
        layout,
        groups,
        valid,
    })
}

/// The primary superblock, or the first backup e2fsck would try.
fn read_superblock(
    img: &Image,
    findings: &mut Vec<FindingKind>,
) -> Result<(Superblock, u32), FsckError> {
    let mut buf = vec![0u8; Superblock::SIZE];
    img.read_at(SUPERBLOCK_OFFSET, &mut buf)?;
    let primary = match Superblock::decode(&buf) {
        Ok(sb) => {
            let block = u32::from(sb.log_block_size == 0);
            return Ok((sb, block));
        }
        Err(e @ (FormatError::UnsupportedFeature { .. } | FormatError::Unsupported { .. })) => {
            return Err(FsckError::Unsupported(e))
        }
        Err(e) => e,
    };
    // e2fsck's get_backup_sb: group 1's copy for each possible block size.
    for log in 0..=6u32 {
        let bs = 1024u64 << log;
        let block = bs * 8 + u64::from(log == 0);
        img.read_at(block * bs, &mut buf)?;
        if let Ok(sb) = Superblock::decode(&buf) {
            if sb.log_block_size == log {
                findings.push(FindingKind::SuperblockCorrupt {
                    reason: primary.to_string(),
                });
                return Ok((sb, block as u32));
            }
        }
    }
    Err(FsckError::NoSuperblock { primary })
}

/// e2fsck's pass-0 descriptor checks (`ext2fs_check_desc`): bitmaps and
/// table inside their group (no flex_bg), clear of the superblock copy and
/// of each other, counts within the group's size.
fn check_desc(layout: &Layout, g: u32, gd: &GroupDesc) -> Option<String> {
    gd.validate(layout, GroupNo(g)).err().map(|e| e.to_string())
}

/// The blocks of `r` as the checker numbers them: 32 bits, as on disk
/// (`r` lies in the file system, below `s_blocks_count`).
pub fn raw(r: Range<BlockNo>) -> Range<u32> {
    ondisk_block(r.start)..ondisk_block(r.end)
}

/// Claims every block that holds file-system metadata.
pub fn claim_metadata(fs: &Fs, st: &mut State) {
    for g in 0..fs.layout.group_count {
        if let Some(copy) = fs.layout.super_copy(GroupNo(g)) {
            for b in raw(copy.superblock..copy.reserved_gdt.end) {
                st.claim(b, Owner::Metadata);
            }
        }
        if !fs.valid[g as usize] {
            continue;
        }
        let l = fs.layout.group_layout(GroupNo(g), &fs.groups[g as usize]);
        st.claim(ondisk_block(l.block_bitmap), Owner::Metadata);
        st.claim(ondisk_block(l.inode_bitmap), Owner::Metadata);
        for b in raw(l.inode_table) {
            st.claim(b, Owner::Metadata);
        }
    }
}
