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
//! Modules: `fs` (the `DiskFs` type: mount, unmount, superblock),
//! `validate` (what mount checks before it writes), `journal` (its place
//! and replay), `diff` (changes into patches). Its parts, each a type
//! with private state: `alloc` (bitmaps, group summaries, free totals,
//! reservations), `inode` (the inode table), `dir` (the in-memory
//! directory indexes and the record of names added, under the directory
//! edits), `orphan` (open files and ext3's orphan list). `bmap` (block
//! maps: pointers and indirect blocks, over the allocator and the inode
//! table). The operations: `create` (create, mkdir, symlink, mknod),
//! `link`, `unlink` (unlink, rmdir, an inode's deletion), `rename`, `data`
//! (write, read), `truncate`, `attr` (getattr, setattr, readlink),
//! `xattr`; `repair` (leak reclaiming), `batch` (operations as data),
//! `shared` (the handle the layer above uses: reads, batches,
//! durability), `stack` (what [`DiskFs::mount`] opens each layer below
//! with).

mod alloc;
mod attr;
mod batch;
mod bmap;
mod create;
mod data;
mod diff;
mod dir;
mod error;
// FAULT INJECTION (feature `fault-injection`, crash tests only).
#[cfg(feature = "fault-injection")]
pub mod fault;
mod fs;
mod inode;
mod journal;
mod link;
mod orphan;
mod rename;
mod repair;
mod shared;
mod stack;
mod truncate;
mod unlink;
mod validate;
mod xattr;

pub use attr::{Attr, SetAttr, XattrBlock};
pub use batch::{BatchError, Done, Op};
pub use create::{Owner, Special};
pub use data::Pages;
pub use dir::Entry;
pub use error::{Damage, DiskError, ErrorKind, Refusal, Result};
pub use fs::DiskFs;
pub use journal::Replayed;
pub use rename::RenameFlags;
pub use repair::Leak;
pub use shared::{Batch, Counts, Disk, Durability, Shape};
pub use stack::StackOptions;
pub use stitch_format::inode::TimeField;
pub use stitch_format::symlink::FAST_MAX as FAST_SYMLINK_MAX;
pub use stitch_format::xattr::{fits_block as xattrs_fit_block, Xattr};
pub use stitch_format::{BlockNo, FileType, InodeNo, TimeRange, Timestamp};
pub use stitch_modes::{Consistency, DataMode, JournalConfig};
pub use stitch_patch::{BlockDevice, CacheConfig};
