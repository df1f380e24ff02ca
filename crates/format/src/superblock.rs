//! The ext2 superblock (revision 0 and 1): layout, validation, and the few
//! values derived from it.
//!
//! The primary copy lives at byte [`SUPERBLOCK_OFFSET`] of the device whatever
//! the block size; backups start at the first byte of their group's first block
//! (see [`crate::layout`]).
//!
//! Invariant: a [`Superblock`] returned by [`Superblock::decode`] has passed
//! [`Superblock::validate`]: its layout is self-consistent and every
//! incompat/ro_compat flag is supported, so [`crate::layout::Layout`] can
//! be built from it without further checks.

use crate::codec::{ondisk, Le};
use crate::error::{ensure, FormatError, Result, Structure};
use crate::features::{incompat, ro_compat, Features};
use crate::units::BlockSize;

/// Byte offset of the primary superblock on the device.
pub const SUPERBLOCK_OFFSET: u64 = 1024;
/// `s_magic`.
pub const EXT2_MAGIC: u16 = 0xEF53;
/// Size of an inode in revision 0, and the fixed part of every inode.
pub const GOOD_OLD_INODE_SIZE: u16 = 128;
/// First non-reserved inode in revision 0.
pub const GOOD_OLD_FIRST_INO: u32 = 11;
/// `s_rev_level` of the dynamic revision, the one stitchfs writes.
pub const DYNAMIC_REV: u32 = 1;
/// `s_state` bits.
pub const STATE_VALID: u16 = 0x1;
pub const STATE_ERROR: u16 = 0x2;
/// `s_errors`: continue on errors.
pub const ERRORS_CONTINUE: u16 = 1;
/// `s_jnl_backup_type`: `s_jnl_blocks` holds a copy of the journal inode's
/// `i_block`, then `i_size_high`, then `i_size`.
pub const JNL_BACKUP_BLOCKS: u8 = 1;
/// `s_def_hash_version` values.
pub const HASH_HALF_MD4: u8 = 1;
/// `s_flags`: directory hashes use signed chars.
pub const FLAGS_SIGNED_HASH: u32 = 0x1;
/// `s_default_mount_opts`: user_xattr and acl, as mke2fs sets.
pub const DEFMOPT_XATTR_USER: u32 = 0x4;
pub const DEFMOPT_ACL: u32 = 0x8;

ondisk! {
    /// The superblock, field for field (`s_` prefixes dropped).
    pub struct Superblock: Le, size = 1024;
    {
        0x000 inodes_count: u32,
        0x004 blocks_count_lo: u32,
        0x008 r_blocks_count_lo: u32,
        0x00C free_blocks_count_lo: u32,
        0x010 free_inodes_count: u32,
        0x014 first_data_block: u32,
        0x018 log_block_size: u32,
        0x01C log_cluster_size: u32,
        0x020 blocks_per_group: u32,
        0x024 clusters_per_group: u32,
        0x028 inodes_per_group: u32,
        0x02C mtime: u32,
        0x030 wtime: u32,
        0x034 mnt_count: u16,
        0x036 max_mnt_count: u16,
        0x038 magic: u16,
        0x03A state: u16,
        0x03C errors: u16,
        0x03E minor_rev_level: u16,
        0x040 lastcheck: u32,
        0x044 checkinterval: u32,
        0x048 creator_os: u32,
        0x04C rev_level: u32,
        0x050 def_resuid: u16,
        0x052 def_resgid: u16,
        0x054 first_ino: u32,
        0x058 inode_size: u16,
        0x05A block_group_nr: u16,
        0x05C feature_compat: u32,
        0x060 feature_incompat: u32,
        0x064 feature_ro_compat: u32,
        0x068 uuid: [u8; 16],
        0x078 volume_name: [u8; 16],
        0x088 last_mounted: [u8; 64],
        0x0C8 algorithm_usage_bitmap: u32,
        0x0CC prealloc_blocks: u8,
        0x0CD prealloc_dir_blocks: u8,
        0x0CE reserved_gdt_blocks: u16,
        0x0D0 journal_uuid: [u8; 16],
        0x0E0 journal_inum: u32,
        0x0E4 journal_dev: u32,
        0x0E8 last_orphan: u32,
        0x0EC hash_seed: [u32; 4],
        0x0FC def_hash_version: u8,
        0x0FD jnl_backup_type: u8,
        0x0FE desc_size: u16,
        0x100 default_mount_opts: u32,
        0x104 first_meta_bg: u32,
        0x108 mkfs_time: u32,
        0x10C jnl_blocks: [u32; 17],
        0x150 blocks_count_hi: u32,
        0x154 r_blocks_count_hi: u32,
        0x158 free_blocks_count_hi: u32,
        0x15C min_extra_isize: u16,
        0x15E want_extra_isize: u16,
        0x160 flags: u32,
        0x164 raid_stride: u16,
        0x166 mmp_interval: u16,
        0x168 mmp_block: u64,
        0x170 raid_stripe_width: u32,
        0x174 log_groups_per_flex: u8,
        0x175 checksum_type: u8,
        0x176 encryption_level: u8,
        0x177 reserved_pad: u8,
        0x178 kbytes_written: u64,
        0x180 snapshot_inum: u32,
        0x184 snapshot_id: u32,
        0x188 snapshot_r_blocks_count: u64,
        0x190 snapshot_list: u32,
        0x194 error_count: u32,
        0x198 first_error_time: u32,
        0x19C first_error_ino: u32,
        0x1A0 first_error_block: u64,
        0x1A8 first_error_func: [u8; 32],
        0x1C8 first_error_line: u32,
        0x1CC last_error_time: u32,
        0x1D0 last_error_ino: u32,
        0x1D4 last_error_line: u32,
        0x1D8 last_error_block: u64,
        0x1E0 last_error_func: [u8; 32],
        0x200 mount_opts: [u8; 64],
        0x240 usr_quota_inum: u32,
        0x244 grp_quota_inum: u32,
        0x248 overhead_clusters: u32,
        0x24C backup_bgs: [u32; 2],
        0x254 encrypt_algos: [u8; 4],
        0x258 encrypt_pw_salt: [u8; 16],
        0x268 lpf_ino: u32,
        0x26C prj_quota_inum: u32,
        0x270 checksum_seed: u32,
        /// `s_wtime_hi` .. `s_last_error_errcode`: eight one-byte fields.
        0x274 time_hi_and_errcodes: [u8; 8],
        0x27C encoding: u16,
        0x27E encoding_flags: u16,
        0x280 orphan_file_inum: u32,
        0x284 reserved: [u32; 94],
        0x3FC checksum: u32,
    }
}

impl Superblock {
    /// Decodes and validates a superblock, refusing unsupported features.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        let sb = Self::decode_raw(buf).ok_or_else(|| {
            FormatError::corrupt(
                Structure::Superblock,
                format!("{} bytes, need 1024", buf.len()),
            )
        })?;
        sb.validate()?;
        sb.features().check_supported()?;
        Ok(sb)
    }

    pub fn features(&self) -> Features {
        Features {
            compat: self.feature_compat,
            incompat: self.feature_incompat,
            ro_compat: self.feature_ro_compat,
        }
    }

    /// Block size; `None` only for a superblock that failed validation.
    pub fn block_size(&self) -> Option<BlockSize> {
        BlockSize::from_log(self.log_block_size)
    }

    /// Inode size in bytes (128 in revision 0).
    pub fn inode_size(&self) -> u16 {
        if self.rev_level == 0 {
            GOOD_OLD_INODE_SIZE
        } else {
            self.inode_size
        }
    }

    /// First inode available to files (11 in revision 0).
    pub fn first_ino(&self) -> u32 {
        if self.rev_level == 0 {
            GOOD_OLD_FIRST_INO
        } else {
            self.first_ino
        }
    }

    /// Block count. The high word is only meaningful with `64bit`, which
    /// is refused, so it is ignored here as the kernel does.
    pub fn blocks_count(&self) -> u32 {
        self.blocks_count_lo
    }

    /// Number of block groups implied by the block count.
    pub fn group_count(&self) -> u32 {
        let span = self.blocks_count_lo.saturating_sub(self.first_data_block);
        span.div_ceil(self.blocks_per_group.max(1))
    }

    pub fn has_journal(&self) -> bool {
        self.features()
            .has_compat(crate::features::compat::HAS_JOURNAL)
    }

    /// `s_state` says the file system was unmounted cleanly (ext2's
    /// `EXT2_VALID_FS`), not left in use by a mount that stopped.
    pub fn cleanly_unmounted(&self) -> bool {
        self.state & STATE_VALID != 0
    }

    pub fn needs_recovery(&self) -> bool {
        self.features().has_incompat(incompat::RECOVER)
    }

    pub fn sparse_super(&self) -> bool {
        self.features().has_ro_compat(ro_compat::SPARSE_SUPER)
    }

    /// Checks every value the layout depends on. Feature flags are
    /// checked separately by [`Features::check_supported`].
    pub fn validate(&self) -> Result<()> {
        let s = Structure::Superblock;
        ensure(self.magic == EXT2_MAGIC, s, || {
            format!("bad magic 0x{:04x}", self.magic)
        })?;
        ensure(self.rev_level <= DYNAMIC_REV, s, || {
            format!("unknown revision {}", self.rev_level)
        })?;
        let bs = self.block_size().ok_or_else(|| {
            FormatError::corrupt(
                s,
                format!("log_block_size {} too large", self.log_block_size),
            )
        })?;
        ensure(self.log_cluster_size == self.log_block_size, s, || {
            "cluster size differs from block size (bigalloc)".into()
        })?;
        self.validate_groups(bs)?;
        self.validate_inodes(bs)?;
        self.validate_counts()
    }

    fn validate_groups(&self, bs: BlockSize) -> Result<()> {
        let s = Structure::Superblock;
        let want_first = u32::from(bs.bytes() == 1024);
        ensure(self.first_data_block == want_first, s, || {
            format!(
                "first_data_block {} with {} byte blocks",
                self.first_data_block,
                bs.bytes()
            )
        })?;
        let bpg = self.blocks_per_group;
        ensure(
            bpg >= 8 && bpg <= 8 * bs.bytes() && bpg.is_multiple_of(8),
            s,
            || format!("blocks_per_group {bpg} out of range"),
        )?;
        ensure(self.clusters_per_group == bpg, s, || {
            format!(
                "clusters_per_group {} != blocks_per_group {bpg}",
                self.clusters_per_group
            )
        })?;
        ensure(self.blocks_count_lo > self.first_data_block, s, || {
            format!("blocks_count {} too small", self.blocks_count_lo)
        })?;
        // The kernel and e2fsck bound the descriptor blocks kept for
        // growth by what one block of pointers can map.
        let most = bs.bytes() / 4;
        ensure(u32::from(self.reserved_gdt_blocks) <= most, s, || {
            format!(
                "reserved_gdt_blocks {} above {most}",
                self.reserved_gdt_blocks
            )
        })
    }

    fn validate_inodes(&self, bs: BlockSize) -> Result<()> {
        let s = Structure::Superblock;
        let isz = self.inode_size();
        ensure(
            isz.is_power_of_two() && isz >= GOOD_OLD_INODE_SIZE && u32::from(isz) <= bs.bytes(),
            s,
            || format!("inode_size {isz} invalid"),
        )?;
        let ipg = self.inodes_per_group;
        ensure(ipg > 0 && ipg <= 8 * bs.bytes(), s, || {
            format!("inodes_per_group {ipg} out of range")
        })?;
        let total = u64::from(ipg) * u64::from(self.group_count());
        ensure(u64::from(self.inodes_count) == total, s, || {
            format!(
                "inodes_count {} != {ipg} per group x {} groups",
                self.inodes_count,
                self.group_count()
            )
        })?;
        let first = self.first_ino();
        ensure(
            first > crate::inode::ROOT_INO.0 && first <= self.inodes_count,
            s,
            || format!("first_ino {first} out of range"),
        )
    }

    fn validate_counts(&self) -> Result<()> {
        let s = Structure::Superblock;
        ensure(self.free_blocks_count_lo <= self.blocks_count_lo, s, || {
            format!(
                "free_blocks_count {} > blocks_count {}",
                self.free_blocks_count_lo, self.blocks_count_lo
            )
        })?;
        ensure(self.r_blocks_count_lo <= self.blocks_count_lo, s, || {
            format!("r_blocks_count {} > blocks_count", self.r_blocks_count_lo)
        })?;
        ensure(self.free_inodes_count <= self.inodes_count, s, || {
            format!(
                "free_inodes_count {} > inodes_count {}",
                self.free_inodes_count, self.inodes_count
            )
        })?;
        let desc_ok = self.features().has_incompat(incompat::BIT64)
            || self.desc_size == 0
            || self.desc_size == 32;
        ensure(desc_ok, s, || {
            format!("desc_size {} without 64bit", self.desc_size)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_offsets_match_ext2_fs_h_landmarks() {
        let off = |name: &str| {
            Superblock::OFFSETS
                .iter()
                .find(|(n, _)| *n == name)
                .unwrap()
                .1
        };
        assert_eq!(off("magic"), 0x38);
        assert_eq!(off("uuid"), 0x68);
        assert_eq!(off("journal_inum"), 0xE0);
        assert_eq!(off("jnl_blocks"), 0x10C);
        assert_eq!(off("checksum"), 0x3FC);
    }

    #[test]
    fn short_buffer_is_an_error() {
        let e = Superblock::decode(&[0u8; 100]).unwrap_err();
        assert!(e.to_string().contains("superblock"), "{e}");
    }

    #[test]
    fn zeroes_are_rejected_for_bad_magic() {
        let e = Superblock::decode(&[0u8; 1024]).unwrap_err();
        assert!(e.to_string().contains("bad magic"), "{e}");
    }
}
