//! Identifiers and the canonical attribute record shared by the model, the
//! op language and trees.
//!
//! Invariants: a [`Name`] is any byte string (validity is checked by the
//! operation that uses it, so the errno order matches Linux); a [`Path`] is
//! relative to the root of the tree under test and never contains `.` or
//! `..` components; [`Meta`] holds only the fields every file system under
//! test must agree on.

use std::fmt;

/// An inode number, the one type every layer uses (`stitch-units`). The
/// model numbers inodes itself, the root 2 as in ext2; numbers are never
/// compared with another file system's.
pub use stitch_units::InodeNo;

/// Longest name a directory entry may have (ext2's `EXT2_NAME_LEN`).
pub const NAME_MAX: usize = 255;

/// One directory entry name, as raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(pub Vec<u8>);

impl Name {
    /// The name as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name(s.as_bytes().to_vec())
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(&self.0))
    }
}

/// A path relative to the root of the tree under test; the empty path is
/// the root itself.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Path(pub Vec<Name>);

impl Path {
    /// The root.
    pub fn root() -> Path {
        Path(Vec::new())
    }

    /// Parses `a/b/c` (empty components are dropped, so `""` is the root).
    pub fn parse(s: &str) -> Path {
        Path(
            s.split('/')
                .filter(|c| !c.is_empty())
                .map(Name::from)
                .collect(),
        )
    }

    /// The parent path and the last name, or `None` for the root.
    pub fn split_last(&self) -> Option<(&[Name], &Name)> {
        self.0.split_last().map(|(last, parent)| (parent, last))
    }

    /// The path as bytes, components joined by `/`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let parts: Vec<&[u8]> = self.0.iter().map(Name::as_bytes).collect();
        parts.join(&b'/')
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/{}", String::from_utf8_lossy(&self.to_bytes()))
    }
}

/// A timestamp: seconds since 1970 (negative before) and nanoseconds
/// within the second. The model's own, kept exactly as given: it depends
/// on no other stitch crate, and what a file system may hold is for the
/// generator to respect ([`crate::gen`]), not the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time {
    pub secs: i64,
    pub nsec: u32,
}

impl Time {
    pub const EPOCH: Time = Time { secs: 0, nsec: 0 };

    pub const fn from_secs(secs: i64) -> Time {
        Time { secs, nsec: 0 }
    }
}

/// Owner of a new inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// A device number, kept as major and minor so it means the same on every
/// file system (the kernel's `dev_t` packing is the runner's business).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rdev {
    pub major: u32,
    pub minor: u32,
}

/// The kinds of special file `mknod` makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Special {
    Fifo,
    Socket,
    Char(Rdev),
    Block(Rdev),
}

/// The type of an inode, with the device number where there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Special(Special),
}

impl Kind {
    /// The `S_IFMT` bits of this kind.
    pub fn format_bits(self) -> u32 {
        match self {
            Kind::File => libc::S_IFREG,
            Kind::Dir => libc::S_IFDIR,
            Kind::Symlink => libc::S_IFLNK,
            Kind::Special(Special::Fifo) => libc::S_IFIFO,
            Kind::Special(Special::Socket) => libc::S_IFSOCK,
            Kind::Special(Special::Char(_)) => libc::S_IFCHR,
            Kind::Special(Special::Block(_)) => libc::S_IFBLK,
        }
    }
}

/// The attributes every file system under test must agree on.
///
/// Left out on purpose: inode numbers (each file system picks its own),
/// `st_blocks` and directory sizes (they depend on the on-disk layout:
/// ext4 reports whole blocks, tmpfs counts entries), and timestamps (kept
/// apart in [`crate::tree::Node`] because the kernel reads a real clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Meta {
    pub kind: Kind,
    /// Permission bits (`mode & 0o7777`).
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    /// Size in bytes; `None` for directories (see above).
    pub size: Option<u64>,
}
