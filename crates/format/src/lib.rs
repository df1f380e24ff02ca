//! The ext2/ext3 and JBD2 on-disk format: decode, validate and encode every
//! structure stitchfs reads or writes, as pure functions on byte slices.
//!
//! Architecture invariants:
//! - This crate does no I/O and knows nothing of devices, caches or patches;
//!   callers read blocks and hand the bytes in.
//! - Every decoder returns a [`FormatError`] for bad bytes and never panics;
//!   the fuzz targets in `fuzz/` hold it to that.
//! - Every offset is written once, in an [`ondisk!`](codec) table; byte order
//!   is handled only in [`codec`].
//! - Unsupported incompat/ro_compat features are refused by name
//!   ([`features`]), so the rest of the crate may assume the classic ext2
//!   layout (no extents, no 64bit, no meta_bg, no flex_bg, no checksums).

pub mod bitmap;
pub mod codec;
pub mod dir;
pub mod error;
pub mod features;
pub mod group_desc;
pub mod indirect;
pub mod inode;
pub mod jbd2;
pub mod layout;
pub mod superblock;
pub mod symlink;
pub mod time;
pub mod units;
pub mod xattr;

pub use error::{FormatError, Result, Structure};
pub use group_desc::GroupDesc;
pub use inode::{FileType, Inode, InodeCore, InodeExtra};
pub use layout::{GroupLayout, InodeLocation, Layout, SuperCopy};
pub use superblock::Superblock;
pub use time::{TimeRange, Timestamp};
pub use units::{BlockNo, BlockSize, GroupNo, InodeNo, JournalBlockNo, NO_BLOCK};
