//! `stitch-model`: a simple, obviously-correct in-memory model of an
//! ext2-like POSIX file tree, used as the oracle for model-based tests of
//! the disk layer and for crash tests.
//!
//! Layers, bottom up:
//!
//! - [`types`]: identifiers and the canonical attribute record ([`Meta`]).
//! - [`model`]: the tree of inodes and the inode-level operations
//!   (`create`, `link`, `rename`, `write`, ...), with Linux semantics and
//!   errno-style errors ([`Errno`]).
//! - [`op`]: [`Op`], one operation named by *path*, so the same sequence can
//!   be replayed on any file system; [`Model::apply`] runs one.
//! - [`gen`]: seeded random op sequences over a small name set.
//! - [`tree`]: [`Tree`], a canonical, comparable description of a whole
//!   file tree, and its [`Tree::diff`].
//! - [`real`]: the same [`Op`]s applied to a real directory, and
//!   [`Tree::from_dir`], so the model can be checked against the kernel.
//! - [`view`]: [`InodeView`], another file system seen by inode, with the
//!   model's path walk and [`Tree`] written once for every runner of ops.
//!
//! **Architecture invariant:** this crate knows nothing about disks, blocks,
//! patches or any other stitch crate; it shares only the inode number type
//! every layer uses (`stitch-units`), which knows nothing either. It is deliberately naive: derived
//! facts (link counts, parents) are recomputed from the tree each time they
//! are needed rather than cached, because a cache could drift and an oracle
//! must not be wrong. Trees in tests hold a few hundred inodes, so the
//! quadratic cost does not matter.

pub mod errno;
pub mod gen;
pub mod model;
pub mod op;
pub mod real;
pub mod tree;
pub mod types;
pub mod view;

pub use errno::Errno;
pub use gen::{ops, GenConfig};
pub use model::{Limits, Model, RenameFlags, SetAttr};
pub use op::{Fd, Op, Outcome};
pub use tree::{Content, Node, Tree, TreeOptions};
pub use types::{InodeNo, Kind, Meta, Name, Owner, Path, Rdev, Special, Time};
pub use view::InodeView;
