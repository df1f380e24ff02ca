//! The journal superblock (v1 and v2), block 0 of the journal.
//!
//! Invariant: a [`JournalSuperblock`] from [`JournalSuperblock::decode`] has a
//! valid magic and type, a block size equal to the file system's, a log area
//! `first..maxlen` inside the journal, `start` inside that area (or 0 for an
//! empty journal), only supported features, and (with `CSUM_V2`/`CSUM_V3`) a
//! correct checksum.

use super::blocks::{BlockType, TagFormat};
use super::checksum::{crc32c_raw, csum_seed};
use super::JBD2_MAGIC;
use crate::codec::{ondisk, Be};
use crate::error::{ensure, FeatureSet, FormatError, Result, Structure};
use crate::features::{f, name_of, Flag};

/// Journal feature flags.
pub mod features {
    use super::{f, Flag};
    /// Compat: CRC32 of the transaction in the commit block (v1 checksums).
    pub const COMPAT_CHECKSUM: Flag = f(0x1, "journal_checksum");
    pub const INCOMPAT_REVOKE: Flag = f(0x1, "journal_incompat_revoke");
    pub const INCOMPAT_64BIT: Flag = f(0x2, "journal_64bit");
    pub const INCOMPAT_ASYNC_COMMIT: Flag = f(0x4, "journal_async_commit");
    pub const INCOMPAT_CSUM_V2: Flag = f(0x8, "journal_checksum_v2");
    pub const INCOMPAT_CSUM_V3: Flag = f(0x10, "journal_checksum_v3");
    pub const INCOMPAT_FAST_COMMIT: Flag = f(0x20, "journal_fast_commit");
    pub const INCOMPAT_ALL: &[Flag] = &[
        INCOMPAT_REVOKE,
        INCOMPAT_64BIT,
        INCOMPAT_ASYNC_COMMIT,
        INCOMPAT_CSUM_V2,
        INCOMPAT_CSUM_V3,
        INCOMPAT_FAST_COMMIT,
    ];
    pub const INCOMPAT_SUPPORTED: u32 = INCOMPAT_REVOKE.bit
        | INCOMPAT_64BIT.bit
        | INCOMPAT_ASYNC_COMMIT.bit
        | INCOMPAT_CSUM_V2.bit
        | INCOMPAT_CSUM_V3.bit;
}

/// `s_checksum_type` for CRC32C.
pub const CSUM_TYPE_CRC32C: u8 = 4;
/// The smallest journal e2fsck accepts, in blocks.
pub const MIN_JOURNAL_BLOCKS: u32 = 1024;

ondisk! {
    /// `journal_superblock_t`, header included.
    pub struct JournalSuperblock: Be, size = 1024;
    {
        0x000 magic: u32,
        0x004 blocktype: u32,
        0x008 header_sequence: u32,
        0x00C blocksize: u32,
        /// Total blocks of the journal.
        0x010 maxlen: u32,
        /// First block of the log.
        0x014 first: u32,
        /// Sequence of the first transaction expected in the log.
        0x018 sequence: u32,
        /// Block of the first transaction; 0 means the journal is empty.
        0x01C start: u32,
        0x020 errno: u32,
        0x024 feature_compat: u32,
        0x028 feature_incompat: u32,
        0x02C feature_ro_compat: u32,
        0x030 uuid: [u8; 16],
        0x040 nr_users: u32,
        0x044 dynsuper: u32,
        0x048 max_transaction: u32,
        0x04C max_trans_data: u32,
        0x050 checksum_type: u8,
        0x051 padding2: [u8; 3],
        0x054 num_fc_blocks: u32,
        0x058 head: u32,
        0x05C padding: [u32; 40],
        0x0FC checksum: u32,
        0x100 users: [u8; 768],
    }
}

impl JournalSuperblock {
    /// A fresh, empty v2 journal of `maxlen` blocks, as mke2fs writes it for
    /// an internal journal (no journal features, one user).
    pub fn new_v2(block_size: u32, maxlen: u32, fs_uuid: [u8; 16]) -> Self {
        JournalSuperblock {
            magic: JBD2_MAGIC,
            blocktype: BlockType::SuperblockV2 as u32,
            blocksize: block_size,
            maxlen,
            first: 1,
            sequence: 1,
            uuid: fs_uuid,
            nr_users: 1,
            ..Default::default()
        }
    }

    /// Decodes and validates block 0 of a journal of `journal_blocks` blocks.
    pub fn decode(buf: &[u8], fs_block_size: u32, journal_blocks: u32) -> Result<Self> {
        let s = Structure::JournalSuperblock;
        let sb = Self::decode_raw(buf)
            .ok_or_else(|| FormatError::corrupt(s, "shorter than 1024 bytes"))?;
        ensure(sb.magic == JBD2_MAGIC, s, || {
            format!("bad magic 0x{:08x}", sb.magic)
        })?;
        let v2 = sb.blocktype == BlockType::SuperblockV2 as u32;
        ensure(
            v2 || sb.blocktype == BlockType::SuperblockV1 as u32,
            s,
            || format!("block type {} is not a superblock", sb.blocktype),
        )?;
        ensure(sb.blocksize == fs_block_size, s, || {
            format!(
                "block size {} differs from the file system's {fs_block_size}",
                sb.blocksize
            )
        })?;
        sb.validate_area(journal_blocks)?;
        if v2 {
            sb.check_features()?;
        }
        sb.verify_checksum()?;
        Ok(sb)
    }

    fn validate_area(&self, journal_blocks: u32) -> Result<()> {
        let s = Structure::JournalSuperblock;
        ensure(
            self.maxlen >= MIN_JOURNAL_BLOCKS && self.maxlen <= journal_blocks,
            s,
            || {
                format!(
                    "maxlen {} outside {MIN_JOURNAL_BLOCKS}..={journal_blocks}",
                    self.maxlen
                )
            },
        )?;
        ensure(self.first >= 1 && self.first < self.maxlen, s, || {
            format!("first {} outside the journal", self.first)
        })?;
        ensure(
            self.start == 0 || (self.start >= self.first && self.start < self.maxlen),
            s,
            || format!("start {} outside the log area", self.start),
        )
    }

    fn check_features(&self) -> Result<()> {
        let bad = self.feature_incompat & !features::INCOMPAT_SUPPORTED;
        if bad != 0 {
            let bit = 1 << bad.trailing_zeros();
            return Err(FormatError::UnsupportedFeature {
                set: FeatureSet::JournalIncompat,
                name: name_of(features::INCOMPAT_ALL, bit),
                bit,
            });
        }
        if self.feature_ro_compat != 0 {
            let bit = 1 << self.feature_ro_compat.trailing_zeros();
            return Err(FormatError::UnsupportedFeature {
                set: FeatureSet::JournalRoCompat,
                name: "unknown",
                bit,
            });
        }
        let csum = self.has_csum_v2v3();
        ensure(
            !csum || self.checksum_type == CSUM_TYPE_CRC32C,
            Structure::JournalSuperblock,
            || format!("checksum type {} is not crc32c", self.checksum_type),
        )
    }

    fn has_incompat(&self, flag: Flag) -> bool {
        self.blocktype == BlockType::SuperblockV2 as u32 && self.feature_incompat & flag.bit != 0
    }

    /// `CSUM_V2` or `CSUM_V3`: CRC32C everywhere.
    pub fn has_csum_v2v3(&self) -> bool {
        self.has_incompat(features::INCOMPAT_CSUM_V2)
            || self.has_incompat(features::INCOMPAT_CSUM_V3)
    }

    /// `COMPAT_CHECKSUM`: CRC32 of the transaction in the commit block.
    pub fn has_csum_v1(&self) -> bool {
        self.blocktype == BlockType::SuperblockV2 as u32
            && self.feature_compat & features::COMPAT_CHECKSUM.bit != 0
    }

    pub fn has_revoke(&self) -> bool {
        self.has_incompat(features::INCOMPAT_REVOKE)
    }

    /// How descriptor tags and revoke records are laid out in this journal.
    pub fn tag_format(&self) -> TagFormat {
        TagFormat {
            csum_v2: self.has_incompat(features::INCOMPAT_CSUM_V2),
            csum_v3: self.has_incompat(features::INCOMPAT_CSUM_V3),
            bit64: self.has_incompat(features::INCOMPAT_64BIT),
        }
    }

    /// The seed of every CRC32C in the log.
    pub fn csum_seed(&self) -> u32 {
        csum_seed(&self.uuid)
    }

    /// The superblock's own CRC32C (over the structure, checksum zeroed).
    pub fn compute_checksum(&self) -> u32 {
        let mut copy = self.clone();
        copy.checksum = 0;
        crc32c_raw(!0, &copy.to_bytes())
    }

    /// Sets `checksum` if the journal uses CRC32C checksums.
    pub fn update_checksum(&mut self) {
        if self.has_csum_v2v3() {
            self.checksum = self.compute_checksum();
        }
    }

    /// Verifies the checksum (a no-op without `CSUM_V2`/`CSUM_V3`).
    pub fn verify_checksum(&self) -> Result<()> {
        let want = self.compute_checksum();
        ensure(
            !self.has_csum_v2v3() || self.checksum == want,
            Structure::JournalSuperblock,
            || format!("checksum 0x{:08x}, computed 0x{want:08x}", self.checksum),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_superblock_decodes_and_checksums() {
        let mut sb = JournalSuperblock::new_v2(4096, 1024, [7; 16]);
        let bytes = sb.to_bytes();
        assert_eq!(&bytes[..8], &[0xC0, 0x3B, 0x39, 0x98, 0, 0, 0, 4]);
        assert_eq!(JournalSuperblock::decode(&bytes, 4096, 1024).unwrap(), sb);
        sb.feature_incompat = features::INCOMPAT_CSUM_V3.bit;
        sb.checksum_type = CSUM_TYPE_CRC32C;
        sb.update_checksum();
        let mut bytes = sb.to_bytes();
        JournalSuperblock::decode(&bytes, 4096, 1024).unwrap();
        bytes[0x40] ^= 1;
        let e = JournalSuperblock::decode(&bytes, 4096, 1024).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
    }

    #[test]
    fn refuses_fast_commit_and_bad_areas() {
        let mut sb = JournalSuperblock::new_v2(4096, 1024, [0; 16]);
        sb.feature_incompat = features::INCOMPAT_FAST_COMMIT.bit;
        let e = JournalSuperblock::decode(&sb.to_bytes(), 4096, 1024).unwrap_err();
        assert!(e.to_string().contains("journal_fast_commit"), "{e}");
        let sb = JournalSuperblock::new_v2(4096, 2048, [0; 16]);
        assert!(JournalSuperblock::decode(&sb.to_bytes(), 4096, 1024).is_err());
        assert!(JournalSuperblock::decode(&sb.to_bytes(), 1024, 4096).is_err());
    }
}
