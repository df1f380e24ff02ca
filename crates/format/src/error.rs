//! Typed errors of the format layer.
//!
//! A decoder knows *what* it decodes but not *where* the bytes came from, so a
//! [`FormatError`] is created with the structure and the reason, and the caller
//! that read the block adds its number with [`FormatError::in_block`]. Every
//! error here describes the bytes on disk; a bug in stitchfs is an assertion,
//! never one of these.

use std::fmt;

/// The kind of structure a [`FormatError`] is about.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Structure {
    Superblock,
    GroupDescriptor,
    Bitmap,
    Inode,
    DirectoryBlock,
    IndirectBlock,
    Symlink,
    JournalSuperblock,
    JournalDescriptor,
    JournalCommit,
    JournalRevoke,
    JournalBlock,
    XattrBlock,
    XattrInInode,
}

impl fmt::Display for Structure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Structure::Superblock => "superblock",
            Structure::GroupDescriptor => "group descriptor",
            Structure::Bitmap => "bitmap",
            Structure::Inode => "inode",
            Structure::DirectoryBlock => "directory block",
            Structure::IndirectBlock => "indirect block",
            Structure::Symlink => "symlink",
            Structure::JournalSuperblock => "journal superblock",
            Structure::JournalDescriptor => "journal descriptor block",
            Structure::JournalCommit => "journal commit block",
            Structure::JournalRevoke => "journal revoke block",
            Structure::JournalBlock => "journal block",
            Structure::XattrBlock => "extended-attribute block",
            Structure::XattrInInode => "in-inode extended attributes",
        })
    }
}

/// Where a corrupt structure was found, as far as the caller knows.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Location {
    /// File-system (or journal) block number the bytes were read from.
    pub block: Option<u64>,
    /// Byte offset inside that block (or inside the structure).
    pub offset: Option<usize>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.block, self.offset) {
            (Some(b), Some(o)) => write!(f, " (block {b}, offset {o})"),
            (Some(b), None) => write!(f, " (block {b})"),
            (None, Some(o)) => write!(f, " (offset {o})"),
            (None, None) => Ok(()),
        }
    }
}

/// Which feature set an unsupported flag belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FeatureSet {
    Compat,
    Incompat,
    RoCompat,
    JournalIncompat,
    JournalRoCompat,
}

impl fmt::Display for FeatureSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FeatureSet::Compat => "compat",
            FeatureSet::Incompat => "incompat",
            FeatureSet::RoCompat => "ro_compat",
            FeatureSet::JournalIncompat => "journal incompat",
            FeatureSet::JournalRoCompat => "journal ro_compat",
        })
    }
}

/// An error of the format layer: the bytes are not a structure we accept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The bytes contradict the format (bad magic, out-of-range value, ...).
    #[error("corrupt {structure}{location}: {reason}")]
    Corrupt {
        structure: Structure,
        location: Location,
        reason: String,
    },
    /// A feature flag this implementation does not understand.
    #[error("unsupported {set} feature `{name}` (flag 0x{bit:x})")]
    UnsupportedFeature {
        set: FeatureSet,
        name: &'static str,
        bit: u32,
    },
    /// A valid file system that uses something we do not implement.
    #[error("unsupported {structure}: {reason}")]
    Unsupported {
        structure: Structure,
        reason: String,
    },
}

impl FormatError {
    /// A corruption error without a location yet.
    pub fn corrupt(structure: Structure, reason: impl Into<String>) -> Self {
        FormatError::Corrupt {
            structure,
            location: Location::default(),
            reason: reason.into(),
        }
    }

    /// A corruption error at a byte offset inside the structure's block.
    pub fn corrupt_at(structure: Structure, offset: usize, reason: impl Into<String>) -> Self {
        FormatError::Corrupt {
            structure,
            location: Location {
                block: None,
                offset: Some(offset),
            },
            reason: reason.into(),
        }
    }

    pub fn unsupported(structure: Structure, reason: impl Into<String>) -> Self {
        FormatError::Unsupported {
            structure,
            reason: reason.into(),
        }
    }

    /// Names the block the structure was read from (keeps a block already set).
    pub fn in_block(mut self, block: u64) -> Self {
        if let FormatError::Corrupt { location, .. } = &mut self {
            location.block.get_or_insert(block);
        }
        self
    }
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;

/// Returns a [`FormatError::Corrupt`] unless `cond` holds.
pub(crate) fn ensure(cond: bool, s: Structure, reason: impl FnOnce() -> String) -> Result<()> {
    if cond {
        Ok(())
    } else {
        Err(FormatError::corrupt(s, reason()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_structure_block_and_reason() {
        let e = FormatError::corrupt_at(Structure::DirectoryBlock, 12, "rec_len 3").in_block(77);
        assert_eq!(
            e.to_string(),
            "corrupt directory block (block 77, offset 12): rec_len 3"
        );
    }
}
