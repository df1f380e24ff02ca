//! [`Op`]: one operation named by path, so a sequence can be replayed on
//! the model, on a real directory ([`crate::real`]) or on a mounted
//! stitchfs, and the results compared.
//!
//! Path rules (the same on every side):
//!
//! - Paths are relative to the root of the tree under test. An op that adds
//!   or removes a name refuses the empty path (the root) with `EBUSY`, so a
//!   runner never touches the directory that holds the tree.
//! - **Symlinks are never followed successfully.** Op sequences must use
//!   targets that name nothing (the generator starts every target with `~`,
//!   which no generated name does), so every symlink dangles: a symlink in
//!   the middle of a path, or at the end of a path that `chmod` or `readdir`
//!   follows, gives `ENOENT` (`ENAMETOOLONG` if the target's first name is
//!   too long). Data ops open with `O_NOFOLLOW`, so a symlink
//!   at their end gives `ELOOP`. `stat`, `chown` and `set_times` act on the
//!   link itself.
//! - Data ops (`read`, `write`, `truncate`, `open`) on a fifo, socket or
//!   device node give `ENXIO`: the kernel's answer for a socket or a device
//!   with no driver. The real runner checks the type first and never opens a
//!   special file, so a test neither blocks on a fifo nor reaches a device.
//! - Open handles are slots `0..MAX_FDS`, lowest free slot first, kept by
//!   each runner itself (not kernel descriptor numbers).

use crate::model::{Body, SetAttr};
use crate::types::{InodeNo, Kind, Meta, Name, Path, Special, Time};
use crate::{Errno, Model, RenameFlags};

/// Bound on open handles; one more open gives `EMFILE`.
pub const MAX_FDS: usize = 8;

/// An open-handle slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fd(pub u32);

/// One file system operation, by path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `open(O_CREAT | O_EXCL | O_WRONLY, perm)` then close.
    Create {
        path: Path,
        perm: u32,
    },
    Mkdir {
        path: Path,
        perm: u32,
    },
    Mknod {
        path: Path,
        kind: Special,
        perm: u32,
    },
    Symlink {
        path: Path,
        target: Vec<u8>,
    },
    /// `link(from, to)`; does not follow a symlink at `from`.
    Link {
        from: Path,
        to: Path,
    },
    Unlink {
        path: Path,
    },
    Rmdir {
        path: Path,
    },
    Rename {
        from: Path,
        to: Path,
        flags: RenameFlags,
    },
    Write {
        path: Path,
        offset: u64,
        data: Vec<u8>,
    },
    Truncate {
        path: Path,
        size: u64,
    },
    Chmod {
        path: Path,
        perm: u32,
    },
    /// `lchown`.
    Chown {
        path: Path,
        uid: u32,
        gid: u32,
    },
    /// `utimensat(AT_SYMLINK_NOFOLLOW)`.
    SetTimes {
        path: Path,
        atime: Time,
        mtime: Time,
    },
    Read {
        path: Path,
        offset: u64,
        len: usize,
    },
    Readdir {
        path: Path,
    },
    /// `lstat`.
    Stat {
        path: Path,
    },
    /// `open(O_RDWR | O_NOFOLLOW)` of a regular file.
    Open {
        path: Path,
    },
    WriteFd {
        fd: Fd,
        offset: u64,
        data: Vec<u8>,
    },
    Close {
        fd: Fd,
    },
}

/// What a successful op returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done,
    Opened(Fd),
    Data(Vec<u8>),
    /// Entry names, sorted, without `.` and `..`.
    Names(Vec<Name>),
    Stat(Meta),
}

impl Model {
    /// Applies one op at the current time ([`Model::set_now`]) with the
    /// model's credentials.
    pub fn apply(&mut self, op: &Op) -> Result<Outcome, Errno> {
        let (now, cred) = (self.now, self.cred);
        match op {
            Op::Create { path, perm } => {
                let (dir, name) = self.resolve_parent(path)?;
                self.create(dir, name, *perm, cred, now)
                    .map(|_| Outcome::Done)
            }
            Op::Mkdir { path, perm } => {
                let (dir, name) = self.resolve_parent(path)?;
                self.mkdir(dir, name, *perm, cred, now)
                    .map(|_| Outcome::Done)
            }
            Op::Mknod { path, kind, perm } => {
                let (dir, name) = self.resolve_parent(path)?;
                let made = self.mknod(dir, name, *kind, *perm, cred, now);
                made.map(|_| Outcome::Done)
            }
            Op::Symlink { path, target } => {
                // symlinkat copies the target in (getname) before it walks
                // the path, so a bad target is reported first.
                self.check_target(target)?;
                let (dir, name) = self.resolve_parent(path)?;
                let made = self.symlink(dir, name, target, cred, now);
                made.map(|_| Outcome::Done)
            }
            Op::Link { from, to } => self.apply_link(from, to),
            Op::Unlink { path } => {
                let (dir, name) = self.resolve_parent(path)?;
                self.unlink(dir, name, now).map(|_| Outcome::Done)
            }
            Op::Rmdir { path } => {
                let (dir, name) = self.resolve_parent(path)?;
                self.rmdir(dir, name, now).map(|_| Outcome::Done)
            }
            Op::Rename { from, to, flags } => self.apply_rename(from, to, *flags),
            _ => self.apply_inode_op(op),
        }
    }

    /// Ops on one existing inode.
    fn apply_inode_op(&mut self, op: &Op) -> Result<Outcome, Errno> {
        let now = self.now;
        match op {
            Op::Write { path, offset, data } => {
                let ino = self.resolve_data(path)?;
                self.write(ino, *offset, data, now).map(|_| Outcome::Done)
            }
            Op::Truncate { path, size } => {
                let ino = self.resolve_data(path)?;
                self.truncate(ino, *size, now).map(|_| Outcome::Done)
            }
            Op::Read { path, offset, len } => {
                let ino = self.resolve_data(path)?;
                self.read(ino, *offset, *len).map(Outcome::Data)
            }
            Op::Chmod { path, perm } => self.apply_chmod(path, *perm),
            Op::Chown { path, uid, gid } => self.apply_chown(path, *uid, *gid),
            Op::SetTimes { path, atime, mtime } => {
                let ino = self.resolve(path)?;
                let set = SetAttr {
                    atime: Some(*atime),
                    mtime: Some(*mtime),
                    ..SetAttr::default()
                };
                self.setattr(ino, set, now).map(|_| Outcome::Done)
            }
            Op::Readdir { path } => self.apply_readdir(path),
            Op::Stat { path } => Ok(Outcome::Stat(self.stat(self.resolve(path)?)?.meta)),
            Op::Open { path } => self.apply_open(path),
            Op::WriteFd { fd, offset, data } => {
                let ino = self.fd_inode(*fd)?;
                self.write(ino, *offset, data, now).map(|_| Outcome::Done)
            }
            Op::Close { fd } => self.apply_close(*fd),
            _ => unreachable!("namespace ops are handled by apply"),
        }
    }

    /// Walks the directories of `parts`; a symlink on the way dangles.
    fn resolve_dirs(&self, parts: &[Name]) -> Result<InodeNo, Errno> {
        let mut dir = InodeNo::ROOT;
        for name in parts {
            let ino = self.lookup(dir, name)?;
            dir = match self.inodes[&ino].kind() {
                Kind::Dir => ino,
                Kind::Symlink => return Err(self.follow_dangling(ino)),
                _ => return Err(Errno::Enotdir),
            };
        }
        Ok(dir)
    }

    /// The error of following symlink `ino`, which dangles: the lookup of
    /// the target's first component fails, with `ENAMETOOLONG` if that name
    /// is too long and `ENOENT` otherwise.
    fn follow_dangling(&self, ino: InodeNo) -> Errno {
        let Body::Symlink(target) = &self.inodes[&ino].body else {
            unreachable!("called on a symlink");
        };
        crate::view::dangling(target)
    }

    /// The directory and last name of a path that names an entry.
    fn resolve_parent<'p>(&self, path: &'p Path) -> Result<(InodeNo, &'p Name), Errno> {
        let (parent, name) = path.split_last().ok_or(Errno::Ebusy)?;
        Ok((self.resolve_dirs(parent)?, name))
    }

    /// The inode a path names, without following a final symlink.
    pub fn resolve(&self, path: &Path) -> Result<InodeNo, Errno> {
        match path.split_last() {
            None => Ok(InodeNo::ROOT),
            Some((parent, name)) => self.lookup(self.resolve_dirs(parent)?, name),
        }
    }

    /// The inode of a data op (see the module comment for the errors).
    fn resolve_data(&self, path: &Path) -> Result<InodeNo, Errno> {
        let ino = self.resolve(path)?;
        match self.inodes[&ino].kind() {
            Kind::File => Ok(ino),
            Kind::Dir => Err(Errno::Eisdir),
            Kind::Symlink => Err(Errno::Eloop),
            Kind::Special(_) => Err(Errno::Enxio),
        }
    }

    fn apply_link(&mut self, from: &Path, to: &Path) -> Result<Outcome, Errno> {
        let ino = self.resolve(from)?;
        let (dir, name) = self.resolve_parent(to)?;
        self.link(ino, dir, name, self.now).map(|_| Outcome::Done)
    }

    fn apply_rename(
        &mut self,
        from: &Path,
        to: &Path,
        flags: RenameFlags,
    ) -> Result<Outcome, Errno> {
        // renameat2 checks its flags before it looks at either path.
        if flags.noreplace && flags.exchange {
            return Err(Errno::Einval);
        }
        let (sp, sn) = self.resolve_parent(from)?;
        let (dp, dn) = self.resolve_parent(to)?;
        let renamed = self.rename((sp, sn), (dp, dn), flags, self.now);
        renamed.map(|_| Outcome::Done)
    }

    /// `chmod(2)` follows a final symlink, which dangles.
    fn apply_chmod(&mut self, path: &Path, perm: u32) -> Result<Outcome, Errno> {
        let ino = self.resolve(path)?;
        if self.inodes[&ino].kind() == Kind::Symlink {
            return Err(self.follow_dangling(ino));
        }
        let set = SetAttr {
            perm: Some(perm),
            ..SetAttr::default()
        };
        self.setattr(ino, set, self.now).map(|_| Outcome::Done)
    }

    /// `lchown(2)`. Linux clears setuid, and setgid when group-executable,
    /// on every chown of a non-directory, even by root.
    fn apply_chown(&mut self, path: &Path, uid: u32, gid: u32) -> Result<Outcome, Errno> {
        let ino = self.resolve(path)?;
        let node = &self.inodes[&ino];
        let perm = crate::view::perm_after_chown(node.perm, node.kind() == Kind::Dir);
        let set = SetAttr {
            perm: Some(perm),
            uid: Some(uid),
            gid: Some(gid),
            ..SetAttr::default()
        };
        self.setattr(ino, set, self.now).map(|_| Outcome::Done)
    }

    /// `readdir` follows a final symlink, which dangles.
    fn apply_readdir(&self, path: &Path) -> Result<Outcome, Errno> {
        let ino = self.resolve(path)?;
        if self.inodes[&ino].kind() == Kind::Symlink {
            return Err(self.follow_dangling(ino));
        }
        let entries = self.readdir(ino)?;
        Ok(Outcome::Names(
            entries.into_iter().map(|(n, _)| n).collect(),
        ))
    }

    fn apply_open(&mut self, path: &Path) -> Result<Outcome, Errno> {
        let ino = self.resolve_data(path)?;
        let slot = free_slot(&self.fds)?;
        self.open(ino)?;
        if slot == self.fds.len() {
            self.fds.push(None);
        }
        self.fds[slot] = Some(ino);
        Ok(Outcome::Opened(Fd(slot as u32)))
    }

    /// The inode open in handle slot `fd`, or `EBADF`.
    pub fn fd_inode(&self, fd: Fd) -> Result<InodeNo, Errno> {
        let slot = self.fds.get(fd.0 as usize).copied().flatten();
        slot.ok_or(Errno::Ebadf)
    }

    fn apply_close(&mut self, fd: Fd) -> Result<Outcome, Errno> {
        let ino = self.fd_inode(fd)?;
        self.fds[fd.0 as usize] = None;
        self.release(ino).map(|_| Outcome::Done)
    }
}

/// The lowest free handle slot (which may be one past the end), or `EMFILE`.
pub fn free_slot<T>(slots: &[Option<T>]) -> Result<usize, Errno> {
    let slot = slots
        .iter()
        .position(Option::is_none)
        .unwrap_or(slots.len());
    if slot >= MAX_FDS {
        return Err(Errno::Emfile);
    }
    Ok(slot)
}
