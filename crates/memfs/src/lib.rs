//! memfs: the in-memory file system in front of diskfs (McoreFS, whole
//! thesis; docs/design.md "Layers"). Every request is served from memory:
//! namespace and inodes are loaded from diskfs on demand, file data lives
//! in pages with dirty tracking. What changes is logged in per-thread
//! operation logs, each operation stamped at its linearization point. A
//! flush cuts the logs, merges them by stamp, takes the dependency closure
//! of what must be durable (all of it for `sync`, McoreFS §4.3's rules for
//! `fsync`), drops operations that cancel out (absorption), and hands
//! diskfs one batch, applied as one atomic unit (one journal transaction).
//!
//! Architecture invariants: memfs knows files, names and ordering domains
//! (streams and patchgroups, `domains`), never blocks or patches; it reaches the disk only through
//! diskfs, and only at flush time or to load what memory lacks.
//!
//! Modules: `types` (what the frontend sees), `error`, `node` (in-memory
//! inodes, directories, pages), `log` (per-thread logs, stamps, the cut),
//! `fs` (the operations), `flush` (closure, absorption, the batch),
//! `domains` (the stream and patchgroups the calling thread's changes
//! belong to), `groups` (patchgroups: the table, a process's holdings,
//! the rules of their life),
//! `frees` (what the disk will free, for `statfs`).

mod data;
mod domains;
mod error;
mod flush;
mod frees;
mod fs;
mod groups;
mod log;
mod node;
mod types;

pub use domains::{in_domains, Domains, GLOBAL};
pub use error::{MemError, Result, Trouble};
pub use fs::MemFs;
pub use groups::{
    GroupError, GroupInfo, GroupTable, Held, PgSyncError, GROUP_DOMAIN, MAX_GROUPS, MAX_HELD,
};
pub use node::Xattrs;
pub use stitch_diskfs::{InodeNo, Refusal, RenameFlags, TimeRange, Timestamp};
pub use types::{
    Attr, DirEntry, DropSetId, FlushCause, Kind, Memory, OpKinds, Options, Order, OwnFlushes,
    Pending, SetAttrs, SetTime, StatFs, Stats, XattrSet,
};
