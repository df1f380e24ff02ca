//! diskfs: the ext2 layout as patches (Featherstitch §3.4, §4.5, §6.1;
//! Seltzer §3–§4). It turns logical file-system operations into patches on
//! the blocks they change and states the soft-updates dependencies between
//! them; the patch cache enforces them, and the consistency mode (below)
//! may rewrite them (async drops them).
//!
//! Architecture invariants: diskfs never sees FUSE, processes or streams;
//! it reads the file system only through the patch cache (so it always sees
//! its own uncommitted changes); every on-disk structure is decoded and
//! encoded by the format crate, and changes become patches by diffing the
//! encoded bytes (`diff`), so no layout is written twice.
//!
//! Modules: `fs` (mount, unmount, superblock and descriptors), `validate`
//! (what mount checks before it writes), `alloc`,
//! `inode`, `bmap` (block maps and data), `dir`, `ops` and `more_ops` (the
//! operations), `rename`, `orphan`, `repair` (leak reclaiming), `batch`
//! (operations as data), `shared` (the handle the layer above uses: reads,
//! batches, durability), `diff` (changes into patches).

mod alloc;
mod batch;
mod bmap;
mod diff;
mod dir;
mod error;
// FAULT INJECTION (feature `fault-injection`, crash tests only).
#[cfg(feature = "fault-injection")]
pub mod fault;
mod fs;
mod inode;
mod journal;
mod more_ops;
mod ops;
mod orphan;
mod rename;
mod repair;
mod shared;
mod validate;
mod xattr;

pub use batch::{BatchError, Done, Op};
pub use dir::Entry;
pub use error::{Damage, DiskError, ErrorKind, Result};
pub use fs::DiskFs;
pub use journal::Replayed;
pub use more_ops::{SetAttr, Special};
pub use ops::{Attr, Pages, XattrBlock};
pub use rename::RenameFlags;
pub use repair::Leak;
pub use shared::{Batch, Counts, Disk, Durability, Shape};
pub use stitch_format::inode::TimeField;
pub use stitch_format::symlink::FAST_MAX as FAST_SYMLINK_MAX;
pub use stitch_format::xattr::{fits_block as xattrs_fit_block, Xattr};
pub use stitch_format::{FileType, InodeNo, TimeRange, Timestamp};
pub use stitch_modes::{Consistency, DataMode, JournalConfig};
