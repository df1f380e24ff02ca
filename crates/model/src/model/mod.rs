//! The reference model: a map from inode number to inode, where each
//! directory maps names to inode numbers.
//!
//! Invariants (checked by [`Model::check`], which tests call after every
//! operation):
//!
//! - every directory entry names a live inode; every directory but the root
//!   is named by exactly one entry (no directory hard links), so it has one
//!   parent, and following parents from any directory reaches the root;
//! - an inode that no entry names is kept only while it is open
//!   ([`Model::open`] / [`Model::release`]): an unlinked-but-open file has
//!   link count 0 and survives until its last release, like Linux's orphan
//!   list. The disk layer's orphan handling is checked against this.
//!
//! Link counts and parents are *computed* from the entries whenever they are
//! needed, never stored: a directory has `2 + subdirectories` links (its
//! entry in the parent, or `..` for the root, plus its own `.`), any other
//! inode one link per entry naming it.
//!
//! Timestamps are plain seconds supplied by the caller (`now`): the model
//! never reads a clock, so runs replay exactly.

mod data;
mod namespace;
mod rename;

use std::collections::BTreeMap;

use crate::types::{InodeNo, Kind, Meta, Name, Owner, Special, Time, NAME_MAX};
use crate::Errno;

pub use data::SetAttr;
pub use rename::RenameFlags;

/// Bounds the model enforces. Defaults follow ext2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `EMLINK` above this many links to a non-directory. ext2's
    /// `EXT2_LINK_MAX` (32000) is its `s_max_links` for every inode kind.
    pub file_link_max: u32,
    /// `EMLINK` when a directory with this many links gains a subdirectory.
    pub dir_link_max: u32,
    /// `EFBIG` beyond this size. A bound of the model (file data is a plain
    /// vector), not of ext2; tests stay far below it.
    pub max_file_size: u64,
    /// Longest symlink target (`ENAMETOOLONG` beyond, like `PATH_MAX`).
    pub max_symlink: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            file_link_max: 32000,
            dir_link_max: 32000,
            max_file_size: 64 << 20,
            max_symlink: 4095,
        }
    }
}

/// What an inode holds besides its attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Body {
    /// File bytes; holes are zeros (an obviously-correct sparse file).
    File(Vec<u8>),
    Dir(BTreeMap<Name, InodeNo>),
    Symlink(Vec<u8>),
    Special(Special),
}

/// One inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inode {
    pub(crate) perm: u32,
    pub(crate) owner: Owner,
    pub(crate) atime: Time,
    pub(crate) mtime: Time,
    pub(crate) ctime: Time,
    /// Open handles ([`Model::open`]); keeps an unlinked inode alive.
    pub(crate) opens: u32,
    pub(crate) body: Body,
}

impl Inode {
    fn new(perm: u32, owner: Owner, now: Time, body: Body) -> Inode {
        Inode {
            perm,
            owner,
            atime: now,
            mtime: now,
            ctime: now,
            opens: 0,
            body,
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        match &self.body {
            Body::File(_) => Kind::File,
            Body::Dir(_) => Kind::Dir,
            Body::Symlink(_) => Kind::Symlink,
            Body::Special(s) => Kind::Special(*s),
        }
    }

    pub(crate) fn entries(&self) -> Option<&BTreeMap<Name, InodeNo>> {
        match &self.body {
            Body::Dir(e) => Some(e),
            _ => None,
        }
    }
}

/// Attributes of one inode, as `stat` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub ino: InodeNo,
    pub meta: Meta,
    pub atime: Time,
    pub mtime: Time,
    pub ctime: Time,
}

/// The in-memory reference file tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    pub(crate) inodes: BTreeMap<InodeNo, Inode>,
    next_ino: u32,
    pub(crate) limits: Limits,
    /// Owner of inodes made through [`Model::apply`] (the caller's
    /// credentials on a real system).
    pub(crate) cred: Owner,
    /// Time used by [`Model::apply`].
    pub(crate) now: Time,
    /// Open handles of [`Model::apply`]: slot → inode (see [`crate::op`]).
    pub(crate) fds: Vec<Option<InodeNo>>,
}

impl Model {
    /// An empty tree: a root directory with permissions `root_perm` owned by
    /// `cred`, who also owns everything [`Model::apply`] creates.
    pub fn new(root_perm: u32, cred: Owner, limits: Limits) -> Model {
        let root = Inode::new(
            root_perm & 0o7777,
            cred,
            Time::EPOCH,
            Body::Dir(BTreeMap::new()),
        );
        Model {
            inodes: BTreeMap::from([(InodeNo::ROOT, root)]),
            // ext2's first non-reserved inode; the model never reuses numbers.
            next_ino: 11,
            limits,
            cred,
            now: Time::EPOCH,
            fds: Vec::new(),
        }
    }

    /// Sets the time [`Model::apply`] stamps on what it changes.
    pub fn set_now(&mut self, now: Time) {
        self.now = now;
    }

    pub(crate) fn inode(&self, ino: InodeNo) -> Result<&Inode, Errno> {
        self.inodes.get(&ino).ok_or(Errno::Enoent)
    }

    pub(crate) fn inode_mut(&mut self, ino: InodeNo) -> Result<&mut Inode, Errno> {
        self.inodes.get_mut(&ino).ok_or(Errno::Enoent)
    }

    fn dir_entries(&self, dir: InodeNo) -> Result<&BTreeMap<Name, InodeNo>, Errno> {
        self.inode(dir)?.entries().ok_or(Errno::Enotdir)
    }

    pub(crate) fn dir_entries_mut(
        &mut self,
        dir: InodeNo,
    ) -> Result<&mut BTreeMap<Name, InodeNo>, Errno> {
        match &mut self.inode_mut(dir)?.body {
            Body::Dir(e) => Ok(e),
            _ => Err(Errno::Enotdir),
        }
    }

    /// The inode `name` names in directory `parent`.
    pub fn lookup(&self, parent: InodeNo, name: &Name) -> Result<InodeNo, Errno> {
        let entries = self.dir_entries(parent)?;
        check_name(name)?;
        entries.get(name).copied().ok_or(Errno::Enoent)
    }

    /// The entries of a directory, sorted by name (without `.` and `..`).
    pub fn readdir(&self, dir: InodeNo) -> Result<Vec<(Name, InodeNo)>, Errno> {
        let entries = self.dir_entries(dir)?;
        Ok(entries.iter().map(|(n, i)| (n.clone(), *i)).collect())
    }

    /// Link count, computed from the entries (see the module comment).
    pub fn nlink(&self, ino: InodeNo) -> u32 {
        let node = &self.inodes[&ino];
        if let Some(entries) = node.entries() {
            let subdirs = entries.values().filter(|i| self.is_dir(**i)).count();
            return 2 + subdirs as u32;
        }
        let named = self.inodes.values().filter_map(Inode::entries);
        named
            .flat_map(|e| e.values())
            .filter(|i| **i == ino)
            .count() as u32
    }

    pub(crate) fn is_dir(&self, ino: InodeNo) -> bool {
        matches!(self.inodes[&ino].body, Body::Dir(_))
    }

    /// The directory holding the entry of directory `dir` (root: itself).
    pub fn parent(&self, dir: InodeNo) -> InodeNo {
        if dir == InodeNo::ROOT {
            return dir;
        }
        let mut holders = self.inodes.iter().filter(|(_, node)| {
            node.entries()
                .is_some_and(|e| e.values().any(|i| *i == dir))
        });
        *holders.next().expect("every directory has a parent").0
    }

    /// Whether directory `anc` is `dir` or one of its ancestors.
    pub(crate) fn is_ancestor_or_self(&self, anc: InodeNo, mut dir: InodeNo) -> bool {
        loop {
            if dir == anc {
                return true;
            }
            if dir == InodeNo::ROOT {
                return false;
            }
            dir = self.parent(dir);
        }
    }

    /// `stat`.
    pub fn stat(&self, ino: InodeNo) -> Result<Stat, Errno> {
        let node = self.inode(ino)?;
        let size = match &node.body {
            Body::File(d) => Some(d.len() as u64),
            Body::Symlink(t) => Some(t.len() as u64),
            Body::Dir(_) => None,
            Body::Special(_) => Some(0),
        };
        let meta = Meta {
            kind: node.kind(),
            perm: node.perm,
            uid: node.owner.uid,
            gid: node.owner.gid,
            nlink: self.nlink(ino),
            size,
        };
        let (atime, mtime, ctime) = (node.atime, node.mtime, node.ctime);
        Ok(Stat {
            ino,
            meta,
            atime,
            mtime,
            ctime,
        })
    }

    /// Inodes with no name that stay alive because they are open.
    pub fn orphans(&self) -> Vec<InodeNo> {
        let ids = self.inodes.keys().copied();
        ids.filter(|i| *i != InodeNo::ROOT && self.nlink(*i) == 0)
            .collect()
    }

    /// Opens an inode: it now survives losing its last name until
    /// [`Model::release`].
    pub fn open(&mut self, ino: InodeNo) -> Result<(), Errno> {
        self.inode_mut(ino)?.opens += 1;
        Ok(())
    }

    /// Releases one open of `ino`; frees it if it has no name left.
    pub fn release(&mut self, ino: InodeNo) -> Result<(), Errno> {
        let node = self.inode_mut(ino)?;
        assert!(node.opens > 0, "release of {ino:?} that is not open");
        node.opens -= 1;
        self.free_if_unused(ino);
        Ok(())
    }

    /// Frees `ino` if no entry names it and nobody has it open.
    pub(crate) fn free_if_unused(&mut self, ino: InodeNo) {
        if self.inodes[&ino].opens == 0 && self.nlink_is_zero(ino) {
            self.inodes.remove(&ino);
        }
    }

    fn nlink_is_zero(&self, ino: InodeNo) -> bool {
        // A directory loses its last name only through rmdir, which frees it
        // whatever `nlink` would compute from its (empty) entries.
        let named = self.inodes.values().filter_map(Inode::entries);
        !named.flat_map(|e| e.values()).any(|i| *i == ino)
    }

    pub(crate) fn alloc(&mut self, inode: Inode) -> InodeNo {
        let ino = InodeNo(self.next_ino);
        self.next_ino += 1;
        self.inodes.insert(ino, inode);
        ino
    }

    /// Asserts the invariants of the module comment; panics on a model bug.
    pub fn check(&self) {
        let mut named: BTreeMap<InodeNo, u32> = BTreeMap::new();
        for node in self.inodes.values() {
            for ino in node.entries().into_iter().flat_map(|e| e.values()) {
                assert!(self.inodes.contains_key(ino), "dangling entry {ino:?}");
                *named.entry(*ino).or_default() += 1;
            }
        }
        for (ino, node) in &self.inodes {
            let links = named.get(ino).copied().unwrap_or(0);
            if *ino == InodeNo::ROOT {
                assert_eq!(links, 0, "root is named");
            } else if links == 0 {
                assert!(node.opens > 0, "unnamed closed inode {ino:?} kept");
            } else if self.is_dir(*ino) {
                assert_eq!(links, 1, "directory {ino:?} has {links} names");
                assert!(self.is_ancestor_or_self(InodeNo::ROOT, *ino));
            }
        }
        let open = self.fds.iter().flatten();
        assert!(open.clone().all(|i| self.inodes.contains_key(i)));
    }
}

/// Checks a name for a new or looked-up entry.
pub(crate) fn check_name(name: &Name) -> Result<(), Errno> {
    let b = name.as_bytes();
    if b.len() > NAME_MAX {
        return Err(Errno::Enametoolong);
    }
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(Errno::Einval);
    }
    Ok(())
}
