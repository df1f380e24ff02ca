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
//! Done so far: mount and unmount, allocation, inodes, block maps with
//! indirect blocks, directories, and create, mkdir, unlink, rmdir, link,
//! symlink, mknod, setattr, truncate, write and read. Rename and orphan
//! handling come next.

mod alloc;
mod batch;
mod bmap;
mod diff;
mod dir;
mod error;
mod fs;
mod inode;
mod more_ops;
mod ops;
mod orphan;
mod rename;
mod repair;

pub use batch::{BatchError, Done, Op};
pub use dir::Entry;
pub use error::{DiskError, Result};
pub use fs::DiskFs;
pub use more_ops::{SetAttr, Special};
pub use ops::Attr;
pub use rename::RenameFlags;
pub use repair::Leak;
pub use stitch_format::{FileType, InodeNo};
pub use stitch_modes::Consistency;
