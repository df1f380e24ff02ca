//! Pass 0: the superblock (primary, or a backup as e2fsck falls back to),
//! the group descriptors, the metadata blocks they place, and the journal's
//! state. Everything later passes need to find things is here.
//!
//! Invariant: a group whose descriptor is invalid is listed in `valid` as
//! false and no later pass reads its bitmaps or inode table.

use crate::error::FsckError;
use crate::finding::{FindingKind, Owner};
use crate::image::Image;
use crate::state::State;
use stitch_format::features::{compat, incompat};
use stitch_format::group_desc::GroupDesc;
use stitch_format::inode::JOURNAL_INO;
use stitch_format::jbd2::JournalSuperblock;
use stitch_format::superblock::SUPERBLOCK_OFFSET;
use stitch_format::{FormatError, Geometry, GroupNo, Inode, Superblock};

pub struct Fs {
    pub sb: Superblock,
    pub geo: Geometry,
    pub groups: Vec<GroupDesc>,
    pub valid: Vec<bool>,
    pub first_ino: u32,
    pub filetype: bool,
    pub ext_attr: bool,
    pub resize_inode: bool,
}

impl Fs {
    pub fn bs(&self) -> usize {
        self.geo.block_size.usize()
    }

    pub fn in_range(&self, b: u32) -> bool {
        b >= self.geo.first_data_block && b < self.geo.blocks_count
    }

    pub fn inodes_count(&self) -> u32 {
        self.geo.inodes_count()
    }
}

/// Reads the superblock and descriptors; reports a bad primary or bad
/// descriptors as findings, fails only if nothing usable is found.
pub fn load(img: &mut Image, st_findings: &mut Vec<FindingKind>) -> Result<Fs, FsckError> {
    let (sb, sb_block) = read_superblock(img, st_findings)?;
    let geo = Geometry::from_superblock(&sb).map_err(|e| FsckError::NoSuperblock { primary: e })?;
    img.set_block_size(geo.block_size.usize());
    let gdt = img.read_blocks(sb_block + 1, geo.gdt_blocks() as usize)?;
    let mut groups = Vec::with_capacity(geo.group_count as usize);
    let mut valid = Vec::with_capacity(geo.group_count as usize);
    for g in 0..geo.group_count {
        let off = g as usize * GroupDesc::SIZE;
        let gd = GroupDesc::decode_raw(&gdt[off..]).unwrap_or_default();
        let problem = check_desc(&geo, g, &gd);
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
        geo,
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

/// e2fsck's pass-0 descriptor checks: bitmaps and table inside the group
/// (no flex_bg), counts within the group's size.
fn check_desc(geo: &Geometry, g: u32, gd: &GroupDesc) -> Option<String> {
    if let Err(e) = gd.validate(geo, GroupNo(g)) {
        return Some(e.to_string());
    }
    let first = geo.group_first_block(GroupNo(g)).0;
    let last = first + geo.blocks_in_group(GroupNo(g)) - 1;
    let inside = |b: u32| b >= first && b <= last;
    if !inside(gd.block_bitmap) {
        return Some(format!(
            "block bitmap {} is not in the group",
            gd.block_bitmap
        ));
    }
    if !inside(gd.inode_bitmap) {
        return Some(format!(
            "inode bitmap {} is not in the group",
            gd.inode_bitmap
        ));
    }
    let it_last = u64::from(gd.inode_table) + u64::from(geo.inode_table_blocks()) - 1;
    if !inside(gd.inode_table) || it_last > u64::from(last) {
        return Some(format!(
            "inode table {} is not in the group",
            gd.inode_table
        ));
    }
    None
}

/// Claims every block that holds file-system metadata.
pub fn claim_metadata(fs: &Fs, st: &mut State) {
    for g in 0..fs.geo.group_count {
        if let Some(copy) = fs.geo.super_copy(GroupNo(g)) {
            st.claim(copy.superblock.0, Owner::Metadata);
            for b in copy.gdt.start..copy.reserved_gdt.end {
                st.claim(b, Owner::Metadata);
            }
        }
        if !fs.valid[g as usize] {
            continue;
        }
        let l = fs.geo.layout(GroupNo(g), &fs.groups[g as usize]);
        st.claim(l.block_bitmap.0, Owner::Metadata);
        st.claim(l.inode_bitmap.0, Owner::Metadata);
        for b in l.inode_table {
            st.claim(b, Owner::Metadata);
        }
    }
}

/// Decodes the journal superblock of an ext3 file system; a problem is a
/// finding, an unsupported journal feature an error.
pub fn check_journal(img: &Image, fs: &Fs, st: &mut State) -> Result<(), FsckError> {
    if !fs.sb.has_journal() {
        return Ok(());
    }
    if fs.sb.journal_inum != JOURNAL_INO.0 {
        return Err(FsckError::Unsupported(FormatError::unsupported(
            stitch_format::Structure::JournalSuperblock,
            format!(
                "journal in inode {} (only inode 8 is supported)",
                fs.sb.journal_inum
            ),
        )));
    }
    let problem = match journal_superblock(img, fs)? {
        Ok(_) => return Ok(()),
        Err(e @ FormatError::UnsupportedFeature { .. }) => return Err(FsckError::Unsupported(e)),
        Err(e) => e.to_string(),
    };
    st.report(FindingKind::JournalCorrupt { reason: problem });
    Ok(())
}

fn journal_superblock(
    img: &Image,
    fs: &Fs,
) -> Result<Result<JournalSuperblock, FormatError>, FsckError> {
    let s = stitch_format::Structure::JournalSuperblock;
    let gd = &fs.groups[0];
    let Some(loc) = fs.geo.inode_location(JOURNAL_INO, gd.inode_table_block()) else {
        return Ok(Err(FormatError::corrupt(s, "no journal inode")));
    };
    let blk = img.read_blocks(loc.block.0, 1)?;
    let slot = &blk[loc.offset..loc.offset + usize::from(fs.geo.inode_size)];
    let inode = match Inode::decode(slot) {
        Ok(i) => i,
        Err(e) => return Ok(Err(e)),
    };
    let first = inode.core.block[0];
    if !fs.in_range(first) {
        return Ok(Err(FormatError::corrupt(
            s,
            format!("journal block 0 is {first}"),
        )));
    }
    let buf = img.read_blocks(first, 1)?;
    let jblocks = (inode.size() / fs.bs() as u64).min(u64::from(u32::MAX)) as u32;
    Ok(JournalSuperblock::decode(&buf, fs.bs() as u32, jblocks)
        .map_err(|e| e.in_block(u64::from(first))))
}
