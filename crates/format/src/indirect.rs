//! Block maps of ext2 inodes: 12 direct pointers in `i_block`, then a single,
//! a double and a triple indirect block, each an array of little-endian `u32`
//! block numbers (0 = hole).
//!
//! Invariant: [`map_path`] accepts exactly the logical blocks the four levels
//! can address, and [`check_pointers`] accepts an indirect block only if each
//! non-zero pointer lies in the file system's data area.

use crate::codec::{read, write, Field, Le};
use crate::error::{FormatError, Result, Structure};
use crate::layout::Layout;
use crate::units::{BlockNo, NO_BLOCK};

/// Direct pointers in `i_block`.
pub const N_DIRECT: u64 = 12;
/// `i_block` slots of the single, double and triple indirect blocks.
pub const IND_SLOT: usize = 12;
pub const DIND_SLOT: usize = 13;
pub const TIND_SLOT: usize = 14;

/// Pointers per indirect block.
pub fn ptrs_per_block(block_len: usize) -> u64 {
    (block_len / 4) as u64
}

/// How to reach one logical block: start at `i_block[slot]`, then follow
/// `indices[..depth]` through that many indirect blocks.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MapPath {
    pub slot: usize,
    pub depth: usize,
    pub indices: [u32; 3],
}

impl MapPath {
    pub fn levels(&self) -> &[u32] {
        &self.indices[..self.depth]
    }
}

/// Number of logical blocks the whole map can address.
pub fn max_blocks(block_len: usize) -> u64 {
    let p = ptrs_per_block(block_len);
    N_DIRECT + p + p * p + p * p * p
}

/// The path to logical block `logical`, or an error past the triple level.
pub fn map_path(logical: u64, block_len: usize) -> Result<MapPath> {
    let p = ptrs_per_block(block_len);
    let mut rest = logical;
    if rest < N_DIRECT {
        return Ok(MapPath {
            slot: rest as usize,
            depth: 0,
            indices: [0; 3],
        });
    }
    rest -= N_DIRECT;
    for (slot, depth) in [(IND_SLOT, 1u32), (DIND_SLOT, 2), (TIND_SLOT, 3)] {
        let span = p.pow(depth);
        if rest < span {
            let mut indices = [0u32; 3];
            for level in 0..depth {
                let below = p.pow(depth - 1 - level);
                indices[level as usize] = ((rest / below) % p) as u32;
            }
            return Ok(MapPath {
                slot,
                depth: depth as usize,
                indices,
            });
        }
        rest -= span;
    }
    Err(FormatError::unsupported(
        Structure::IndirectBlock,
        format!("logical block {logical} is past the triple indirect range"),
    ))
}

/// Pointer `index` of an indirect block ([`NO_BLOCK`] = hole), `None`
/// past the block.
pub fn pointer(block: &[u8], index: u32) -> Option<BlockNo> {
    read::<BlockNo, Le>(block, index as usize * 4)
}

/// Sets pointer `index`; `false` past the block.
pub fn set_pointer(block: &mut [u8], index: u32, value: BlockNo) -> bool {
    write::<BlockNo, Le>(block, index as usize * 4, value)
}

/// All pointers of an indirect block, in order.
pub fn pointers(block: &[u8]) -> impl Iterator<Item = BlockNo> + '_ {
    block.chunks_exact(4).map(BlockNo::get::<Le>)
}

/// Checks that every non-zero pointer is inside the data area.
pub fn check_pointers(block: &[u8], layout: &Layout) -> Result<()> {
    for (i, p) in pointers(block).enumerate() {
        if p != NO_BLOCK && !layout.in_data_area(p) {
            return Err(FormatError::corrupt_at(
                Structure::IndirectBlock,
                i * 4,
                format!(
                    "pointer {i} = {} outside the file system ({} blocks)",
                    p.0, layout.blocks_count
                ),
            ));
        }
    }
    Ok(())
}

/// Indirect blocks needed to map logical blocks `0..n` with no holes.
pub fn indirect_blocks_for(n: u64, block_len: usize) -> u64 {
    let p = ptrs_per_block(block_len);
    let mut rest = n.saturating_sub(N_DIRECT);
    let mut total = 0;
    for depth in 1..=3u32 {
        if rest == 0 {
            break;
        }
        let here = rest.min(p.pow(depth));
        // A tree of `depth` levels over `here` leaves has ceil(here / p^k)
        // blocks at height k.
        total += (1..=depth).map(|k| here.div_ceil(p.pow(k))).sum::<u64>();
        rest -= here;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_at_level_boundaries() {
        let bs = 4096; // 1024 pointers
        assert_eq!(
            map_path(11, bs).unwrap(),
            MapPath {
                slot: 11,
                depth: 0,
                indices: [0; 3]
            }
        );
        assert_eq!(map_path(12, bs).unwrap().levels(), &[0]);
        assert_eq!(map_path(12 + 1023, bs).unwrap().levels(), &[1023]);
        let d = map_path(12 + 1024, bs).unwrap();
        assert_eq!((d.slot, d.levels()), (DIND_SLOT, &[0, 0][..]));
        let d = map_path(12 + 1024 + 1025, bs).unwrap();
        assert_eq!(d.levels(), &[1, 1]);
        let t = map_path(12 + 1024 + 1024 * 1024, bs).unwrap();
        assert_eq!((t.slot, t.levels()), (TIND_SLOT, &[0, 0, 0][..]));
        assert_eq!(
            map_path(max_blocks(bs) - 1, bs).unwrap().levels(),
            &[1023, 1023, 1023]
        );
        assert!(map_path(max_blocks(bs), bs).is_err());
    }

    #[test]
    fn indirect_block_counts_match_mke2fs_journals() {
        // mke2fs journals: 1024 blocks -> 1 IND (debugfs shows TOTAL 1025).
        assert_eq!(indirect_blocks_for(1024, 4096), 1);
        assert_eq!(indirect_blocks_for(12, 4096), 0);
        assert_eq!(indirect_blocks_for(13, 4096), 1);
        // 12 + 1024 + 1 -> IND, DIND, one IND under DIND.
        assert_eq!(indirect_blocks_for(12 + 1024 + 1, 4096), 3);
        // 16384 blocks: IND + DIND + ceil((16384-1036)/1024)=15 INDs.
        assert_eq!(indirect_blocks_for(16384, 4096), 17);
    }
}
