//! Feature flags of the ext2 superblock and the policy for each.
//!
//! Compat flags may be ignored by an implementation that does not know them,
//! except the two that move metadata (`sparse_super2`, `exclude_bitmap`).
//! Incompat and ro_compat flags change the meaning of the bytes, so every one
//! not listed as supported is refused with an error naming it.
//!
//! Invariant: each flag has exactly one entry in the tables below; names are
//! the ones `mke2fs -O` and `dumpe2fs` use.

use crate::error::{FeatureSet, FormatError, Result};

/// One named feature bit.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Flag {
    pub bit: u32,
    pub name: &'static str,
}

pub(crate) const fn f(bit: u32, name: &'static str) -> Flag {
    Flag { bit, name }
}

pub mod compat {
    use super::{f, Flag};
    pub const DIR_PREALLOC: Flag = f(0x1, "dir_prealloc");
    pub const IMAGIC_INODES: Flag = f(0x2, "imagic_inodes");
    pub const HAS_JOURNAL: Flag = f(0x4, "has_journal");
    pub const EXT_ATTR: Flag = f(0x8, "ext_attr");
    pub const RESIZE_INODE: Flag = f(0x10, "resize_inode");
    pub const DIR_INDEX: Flag = f(0x20, "dir_index");
    pub const LAZY_BG: Flag = f(0x40, "lazy_bg");
    pub const EXCLUDE_BITMAP: Flag = f(0x100, "exclude_bitmap");
    pub const SPARSE_SUPER2: Flag = f(0x200, "sparse_super2");
    pub const FAST_COMMIT: Flag = f(0x400, "fast_commit");
    pub const STABLE_INODES: Flag = f(0x800, "stable_inodes");
    pub const ORPHAN_FILE: Flag = f(0x1000, "orphan_file");
    pub const ALL: &[Flag] = &[
        DIR_PREALLOC,
        IMAGIC_INODES,
        HAS_JOURNAL,
        EXT_ATTR,
        RESIZE_INODE,
        DIR_INDEX,
        LAZY_BG,
        EXCLUDE_BITMAP,
        SPARSE_SUPER2,
        FAST_COMMIT,
        STABLE_INODES,
        ORPHAN_FILE,
    ];
    /// Compat flags that move metadata, so ignoring them would misplace it.
    pub const REFUSED: &[Flag] = &[EXCLUDE_BITMAP, SPARSE_SUPER2];
}

pub mod incompat {
    use super::{f, Flag};
    pub const COMPRESSION: Flag = f(0x1, "compression");
    pub const FILETYPE: Flag = f(0x2, "filetype");
    pub const RECOVER: Flag = f(0x4, "needs_recovery");
    pub const JOURNAL_DEV: Flag = f(0x8, "journal_dev");
    pub const META_BG: Flag = f(0x10, "meta_bg");
    pub const EXTENTS: Flag = f(0x40, "extent");
    pub const BIT64: Flag = f(0x80, "64bit");
    pub const MMP: Flag = f(0x100, "mmp");
    pub const FLEX_BG: Flag = f(0x200, "flex_bg");
    pub const EA_INODE: Flag = f(0x400, "ea_inode");
    pub const DIRDATA: Flag = f(0x1000, "dirdata");
    pub const CSUM_SEED: Flag = f(0x2000, "metadata_csum_seed");
    pub const LARGEDIR: Flag = f(0x4000, "large_dir");
    pub const INLINE_DATA: Flag = f(0x8000, "inline_data");
    pub const ENCRYPT: Flag = f(0x10000, "encrypt");
    pub const CASEFOLD: Flag = f(0x20000, "casefold");
    pub const ALL: &[Flag] = &[
        COMPRESSION,
        FILETYPE,
        RECOVER,
        JOURNAL_DEV,
        META_BG,
        EXTENTS,
        BIT64,
        MMP,
        FLEX_BG,
        EA_INODE,
        DIRDATA,
        CSUM_SEED,
        LARGEDIR,
        INLINE_DATA,
        ENCRYPT,
        CASEFOLD,
    ];
    /// `needs_recovery` is supported: it means "replay the journal first".
    pub const SUPPORTED: &[Flag] = &[FILETYPE, RECOVER];
}

pub mod ro_compat {
    use super::{f, Flag};
    pub const SPARSE_SUPER: Flag = f(0x1, "sparse_super");
    pub const LARGE_FILE: Flag = f(0x2, "large_file");
    pub const BTREE_DIR: Flag = f(0x4, "btree_dir");
    pub const HUGE_FILE: Flag = f(0x8, "huge_file");
    pub const GDT_CSUM: Flag = f(0x10, "uninit_bg");
    pub const DIR_NLINK: Flag = f(0x20, "dir_nlink");
    pub const EXTRA_ISIZE: Flag = f(0x40, "extra_isize");
    pub const HAS_SNAPSHOT: Flag = f(0x80, "snapshot");
    pub const QUOTA: Flag = f(0x100, "quota");
    pub const BIGALLOC: Flag = f(0x200, "bigalloc");
    pub const METADATA_CSUM: Flag = f(0x400, "metadata_csum");
    pub const REPLICA: Flag = f(0x800, "replica");
    pub const READONLY: Flag = f(0x1000, "read-only");
    pub const PROJECT: Flag = f(0x2000, "project");
    pub const SHARED_BLOCKS: Flag = f(0x4000, "shared_blocks");
    pub const VERITY: Flag = f(0x8000, "verity");
    pub const ORPHAN_PRESENT: Flag = f(0x10000, "orphan_present");
    pub const ALL: &[Flag] = &[
        SPARSE_SUPER,
        LARGE_FILE,
        BTREE_DIR,
        HUGE_FILE,
        GDT_CSUM,
        DIR_NLINK,
        EXTRA_ISIZE,
        HAS_SNAPSHOT,
        QUOTA,
        BIGALLOC,
        METADATA_CSUM,
        REPLICA,
        READONLY,
        PROJECT,
        SHARED_BLOCKS,
        VERITY,
        ORPHAN_PRESENT,
    ];
    pub const SUPPORTED: &[Flag] = &[SPARSE_SUPER, LARGE_FILE];
}

/// The three feature words of a superblock.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Features {
    pub compat: u32,
    pub incompat: u32,
    pub ro_compat: u32,
}

impl Features {
    pub fn has_compat(&self, flag: Flag) -> bool {
        self.compat & flag.bit != 0
    }
    pub fn has_incompat(&self, flag: Flag) -> bool {
        self.incompat & flag.bit != 0
    }
    pub fn has_ro_compat(&self, flag: Flag) -> bool {
        self.ro_compat & flag.bit != 0
    }

    /// Refuses the first flag that stitchfs cannot handle, naming it.
    pub fn check_supported(&self) -> Result<()> {
        refuse_set(
            self.incompat,
            incompat::SUPPORTED,
            incompat::ALL,
            FeatureSet::Incompat,
        )?;
        refuse_set(
            self.ro_compat,
            ro_compat::SUPPORTED,
            ro_compat::ALL,
            FeatureSet::RoCompat,
        )?;
        for flag in compat::REFUSED {
            if self.compat & flag.bit != 0 {
                return Err(unsupported(FeatureSet::Compat, flag.bit, flag.name));
            }
        }
        Ok(())
    }

    /// Names of every set flag, in `dumpe2fs` order (compat, incompat, ro_compat).
    pub fn names(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        for (word, table) in [
            (self.compat, compat::ALL),
            (self.incompat, incompat::ALL),
            (self.ro_compat, ro_compat::ALL),
        ] {
            out.extend(each_bit(word).map(|bit| name_of(table, bit)));
        }
        out
    }
}

fn each_bit(word: u32) -> impl Iterator<Item = u32> {
    (0..32)
        .map(|i| 1u32 << i)
        .filter(move |bit| word & bit != 0)
}

/// The name of `bit` in `table`, or "unknown" for a bit no table lists.
pub fn name_of(table: &[Flag], bit: u32) -> &'static str {
    table
        .iter()
        .find(|f| f.bit == bit)
        .map_or("unknown", |f| f.name)
}

fn refuse_set(word: u32, supported: &[Flag], all: &[Flag], set: FeatureSet) -> Result<()> {
    let allowed = supported.iter().fold(0, |acc, f| acc | f.bit);
    match each_bit(word & !allowed).next() {
        None => Ok(()),
        Some(bit) => Err(unsupported(set, bit, name_of(all, bit))),
    }
}

fn unsupported(set: FeatureSet, bit: u32, name: &'static str) -> FormatError {
    FormatError::UnsupportedFeature { set, name, bit }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_extents_by_name() {
        let f = Features {
            incompat: incompat::FILETYPE.bit | incompat::EXTENTS.bit,
            ..Default::default()
        };
        let e = f.check_supported().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsupported incompat feature `extent` (flag 0x40)"
        );
    }

    #[test]
    fn refuses_unknown_bits_and_ro_compat() {
        let f = Features {
            incompat: 1 << 30,
            ..Default::default()
        };
        assert!(f
            .check_supported()
            .unwrap_err()
            .to_string()
            .contains("`unknown`"));
        let f = Features {
            ro_compat: ro_compat::METADATA_CSUM.bit,
            ..Default::default()
        };
        assert!(f
            .check_supported()
            .unwrap_err()
            .to_string()
            .contains("metadata_csum"));
    }

    #[test]
    fn accepts_ext3_defaults_and_names_them() {
        let f = Features {
            compat: compat::HAS_JOURNAL.bit
                | compat::EXT_ATTR.bit
                | compat::RESIZE_INODE.bit
                | compat::DIR_INDEX.bit,
            incompat: incompat::FILETYPE.bit,
            ro_compat: ro_compat::SPARSE_SUPER.bit | ro_compat::LARGE_FILE.bit,
        };
        f.check_supported().unwrap();
        assert_eq!(
            f.names(),
            [
                "has_journal",
                "ext_attr",
                "resize_inode",
                "dir_index",
                "filetype",
                "sparse_super",
                "large_file"
            ]
        );
    }

    #[test]
    fn tables_have_unique_single_bits() {
        for table in [compat::ALL, incompat::ALL, ro_compat::ALL] {
            for (i, a) in table.iter().enumerate() {
                assert_eq!(a.bit.count_ones(), 1, "{}", a.name);
                assert!(table[i + 1..]
                    .iter()
                    .all(|b| b.bit != a.bit && b.name != a.name));
            }
        }
    }
}
