//! Pass 5: the bitmaps and summary counts against what passes 1-4 found.
//!
//! A bit set for nothing in use is a leak; a bit clear for something in use
//! is corruption. Free and directory counts are compared with the on-disk
//! bitmaps (as e2fsck -n does, since it fixes neither), and are leaks when
//! wrong. Differences are reported as ranges, like e2fsck's
//! "-(1040--1042)", each with its first and last number for a repair.
//!
//! Invariant: each group's two bitmap blocks are read once, in group order.

use crate::error::FsckError;
use crate::finding::{BitmapKind, FindingKind};
use crate::fs::Fs;
use crate::image::Image;
use crate::state::{State, DIR, USED};
use crate::Phase;
use stitch_format::bitmap::Bitmap;
use stitch_format::codec::ondisk_block;
use stitch_format::GroupNo;

/// Totals over all groups, from the on-disk bitmaps.
#[derive(Default)]
pub struct Totals {
    pub free_blocks: u32,
    pub free_inodes: u32,
    pub dirs: u32,
}

/// Collects runs of equal differences into ranged findings.
struct Runs {
    open: Option<(bool, u32, u32)>,
    found: Vec<FindingKind>,
    leak: fn(u32, u32) -> FindingKind,
    lost: fn(u32, u32) -> FindingKind,
}

impl Runs {
    fn new(leak: fn(u32, u32) -> FindingKind, lost: fn(u32, u32) -> FindingKind) -> Runs {
        Runs {
            open: None,
            found: Vec::new(),
            leak,
            lost,
        }
    }

    /// `n` differs: `leaked` if marked but unused, else used but unmarked.
    fn add(&mut self, n: u32, leaked: bool) {
        match &mut self.open {
            Some((l, _, last)) if *l == leaked && *last + 1 == n => *last = n,
            _ => {
                self.close();
                self.open = Some((leaked, n, n));
            }
        }
    }

    fn close(&mut self) {
        if let Some((leaked, a, b)) = self.open.take() {
            self.found.push(if leaked {
                (self.leak)(a, b)
            } else {
                (self.lost)(a, b)
            });
        }
    }
}

pub fn run(
    img: &Image,
    fs: &Fs,
    st: &mut State,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> Result<Totals, FsckError> {
    let mut blocks = Runs::new(
        |first, last| FindingKind::BlocksLeaked { first, last },
        |first, last| FindingKind::BlocksMarkedFree { first, last },
    );
    let mut inodes = Runs::new(
        |first, last| FindingKind::InodesLeaked { first, last },
        |first, last| FindingKind::InodesMarkedFree { first, last },
    );
    let mut totals = Totals::default();
    let mut counts = Vec::new();
    for g in 0..fs.layout.group_count {
        progress(
            Phase::Bitmaps,
            u64::from(g),
            u64::from(fs.layout.group_count),
        );
        if !fs.valid[g as usize] {
            continue;
        }
        let gd = &fs.groups[g as usize];
        let bb = img.read_blocks(ondisk_block(gd.block_bitmap), 1)?;
        let ib = img.read_blocks(ondisk_block(gd.inode_bitmap), 1)?;
        let free_b = compare_blocks(fs, st, g, &Bitmap::new(&bb), &mut blocks, &mut counts);
        let (free_i, dirs) = compare_inodes(fs, st, g, &Bitmap::new(&ib), &mut inodes);
        totals.free_blocks += free_b;
        totals.free_inodes += free_i;
        totals.dirs += dirs;
        group_counts(g, gd, free_b, free_i, dirs, &mut counts);
    }
    blocks.close();
    inodes.close();
    for k in blocks.found.into_iter().chain(inodes.found).chain(counts) {
        st.report(k);
    }
    superblock_counts(fs, st, &totals);
    Ok(totals)
}

/// Returns the group's free blocks by its bitmap.
fn compare_blocks(
    fs: &Fs,
    st: &State,
    g: u32,
    bm: &Bitmap,
    runs: &mut Runs,
    out: &mut Vec<FindingKind>,
) -> u32 {
    let first = ondisk_block(fs.layout.group_first_block(GroupNo(g)));
    let n = fs.layout.blocks_in_group(GroupNo(g));
    let mut free = 0;
    for i in 0..n {
        let on = bm.get(i as usize).unwrap_or(false);
        let used = st.is_claimed(first + i);
        if on != used {
            runs.add(first + i, on);
        }
        free += u32::from(!on);
    }
    // The last group's bits past the end of the file system must be set.
    let padding_clear = (n..fs.layout.blocks_per_group).any(|i| bm.get(i as usize) == Some(false));
    if padding_clear {
        out.push(FindingKind::BitmapPaddingClear {
            group: g,
            bitmap: BitmapKind::Block,
        });
    }
    free
}

/// Returns the group's free inodes and used directories by its bitmap.
fn compare_inodes(fs: &Fs, st: &State, g: u32, bm: &Bitmap, runs: &mut Runs) -> (u32, u32) {
    let ipg = fs.layout.inodes_per_group;
    let (mut free, mut dirs) = (0, 0);
    for i in 0..ipg {
        let ino = g * ipg + i + 1;
        let on = bm.get(i as usize).unwrap_or(false);
        let flags = st.inode(ino).map_or(0, |x| x.flags);
        let used = flags & USED != 0;
        if on != used {
            runs.add(ino, on);
        }
        if on {
            dirs += u32::from(flags & DIR != 0);
        } else {
            free += 1;
        }
    }
    (free, dirs)
}

fn group_counts(
    g: u32,
    gd: &stitch_format::GroupDesc,
    free_b: u32,
    free_i: u32,
    dirs: u32,
    out: &mut Vec<FindingKind>,
) {
    let group = g;
    if u32::from(gd.free_blocks_count) != free_b {
        out.push(FindingKind::GroupFreeBlocksWrong {
            group,
            stored: gd.free_blocks_count.into(),
            counted: free_b,
        });
    }
    if u32::from(gd.free_inodes_count) != free_i {
        out.push(FindingKind::GroupFreeInodesWrong {
            group,
            stored: gd.free_inodes_count.into(),
            counted: free_i,
        });
    }
    if u32::from(gd.used_dirs_count) != dirs {
        out.push(FindingKind::GroupDirsWrong {
            group,
            stored: gd.used_dirs_count.into(),
            counted: dirs,
        });
    }
}

fn superblock_counts(fs: &Fs, st: &mut State, t: &Totals) {
    if fs.sb.free_blocks_count_lo != t.free_blocks {
        st.report(FindingKind::FreeBlocksWrong {
            stored: fs.sb.free_blocks_count_lo,
            counted: t.free_blocks,
        });
    }
    if fs.sb.free_inodes_count != t.free_inodes {
        st.report(FindingKind::FreeInodesWrong {
            stored: fs.sb.free_inodes_count,
            counted: t.free_inodes,
        });
    }
}
