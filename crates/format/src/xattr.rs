//! Extended-attribute blocks (`i_file_acl`, ext2's `ext_attr` feature).
//!
//! stitchfs writes no attributes, but files made by the kernel or other
//! tools on the same image may carry an attribute block, and identical
//! blocks are shared between files through the header's reference count.
//! What stitchfs must do with one is let go of it when the file goes: free
//! it, or drop the count by one. The header is all it reads.

use crate::codec::{ondisk, Le};
use crate::error::{ensure, FormatError, Result, Structure};

/// `EXT2_XATTR_MAGIC`.
pub const XATTR_MAGIC: u32 = 0xEA02_0000;

ondisk! {
    /// `struct ext2_xattr_header`, the start of an attribute block.
    pub struct XattrHeader: Le, size = 32;
    {
        0x00 magic: u32,
        /// Inodes whose `i_file_acl` names this block.
        0x04 refcount: u32,
        /// Blocks the attributes use: always 1.
        0x08 blocks: u32,
        0x0C hash: u32,
        0x10 reserved: [u32; 4],
    }
}

impl XattrHeader {
    /// The header of an attribute block; an error if `buf` is not one.
    pub fn parse(buf: &[u8]) -> Result<XattrHeader> {
        let h = Self::decode_raw(buf).ok_or_else(|| {
            FormatError::corrupt(Structure::XattrBlock, "shorter than its header")
        })?;
        ensure(h.magic == XATTR_MAGIC, Structure::XattrBlock, || {
            format!("magic {:#x}, not {XATTR_MAGIC:#x}", h.magic)
        })?;
        ensure(h.blocks == 1, Structure::XattrBlock, || {
            format!("spans {} blocks", h.blocks)
        })?;
        ensure(h.refcount >= 1, Structure::XattrBlock, || {
            "reference count 0".into()
        })?;
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(refcount: u32) -> Vec<u8> {
        let mut b = vec![0u8; 1024];
        b[0..4].copy_from_slice(&XATTR_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&refcount.to_le_bytes());
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        b[12..16].copy_from_slice(&0xdead_beefu32.to_le_bytes());
        b[16] = 7;
        b
    }

    #[test]
    fn a_header_round_trips_with_a_new_count() {
        let b = block(3);
        let mut h = XattrHeader::parse(&b).unwrap();
        assert_eq!((h.refcount, h.hash), (3, 0xdead_beef));
        h.refcount -= 1;
        let bytes = h.to_bytes();
        let mut want = b[..32].to_vec();
        want[4..8].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(bytes.as_slice(), want.as_slice());
    }

    #[test]
    fn anything_else_is_refused() {
        let mut b = block(1);
        b[3] = 0;
        assert!(XattrHeader::parse(&b).is_err());
        assert!(XattrHeader::parse(&block(0)).is_err());
        let mut two = block(1);
        two[8] = 2;
        assert!(XattrHeader::parse(&two).is_err());
        assert!(XattrHeader::parse(&[0u8; 8]).is_err());
    }
}
