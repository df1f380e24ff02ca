//! FUSE node ids and ext2 inode numbers, mapped here and nowhere else.
//!
//! FUSE's root node id is 1 and ext2's root is inode 2; every other node
//! id is the inode number itself, so `st_ino` is the same across remounts
//! (and the root reports 2). A node id is 64 bits and an inode number 32:
//! the kernel sends only node ids this server gave it (each [`node_of`]
//! an inode) and the root's, so every one names an inode; one that does
//! not is answered `ESTALE`, as a node id no inode has, never cut short.

use fuser::{Errno, INodeNo};
use stitch_memfs::InodeNo;

/// The FUSE node id of an inode.
pub(super) fn node_of(ino: InodeNo) -> INodeNo {
    if ino == InodeNo::ROOT {
        INodeNo::ROOT
    } else {
        INodeNo(u64::from(ino.0))
    }
}

/// The inode behind a FUSE node id; `ESTALE` for one no inode has.
pub(super) fn ino_of(node: INodeNo) -> Result<InodeNo, Errno> {
    if node == INodeNo::ROOT {
        return Ok(InodeNo::ROOT);
    }
    u32::try_from(node.0)
        .map(InodeNo)
        .map_err(|_| Errno::ESTALE)
}

/// What `stat` and a directory listing show as the inode number
/// (`st_ino`, `d_ino`): the ext2 number itself, 2 for the root.
pub(super) fn shown_ino(ino: InodeNo) -> INodeNo {
    INodeNo(u64::from(ino.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_maps_both_ways_and_others_are_identity() {
        assert_eq!(ino_of(INodeNo::ROOT), Ok(InodeNo::ROOT));
        assert_eq!(node_of(InodeNo::ROOT), INodeNo::ROOT);
        assert_eq!(shown_ino(InodeNo::ROOT), INodeNo(2));
        for n in [2, 11, 12, 4096, u32::MAX] {
            assert_eq!(ino_of(INodeNo(u64::from(n))), Ok(InodeNo(n)));
            assert_eq!(shown_ino(InodeNo(n)), INodeNo(u64::from(n)));
        }
        for n in [11, 12, 4096, u32::MAX] {
            assert_eq!(node_of(InodeNo(n)), INodeNo(u64::from(n)));
        }
    }

    #[test]
    fn a_node_id_past_32_bits_is_stale_not_cut() {
        let past = u64::from(u32::MAX) + 13;
        assert_eq!(ino_of(INodeNo(past)), Err(Errno::ESTALE));
    }
}
