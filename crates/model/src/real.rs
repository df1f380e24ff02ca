//! The same [`Op`]s applied to a real directory through the kernel, and
//! [`Tree::from_dir`], which reads a real directory into a [`Tree`].
//!
//! This is how the model itself is validated (against tmpfs or ext4), and
//! how a kernel-mounted stitchfs image is later compared with the model.
//!
//! Invariants: the runner never leaves its root directory (paths are
//! joined under it; ops that would name the root itself are refused with
//! `EBUSY`, as the model does) and never opens a special file (see
//! [`crate::op`]). [`RealFs::new`] sets the process umask to 0 so that
//! permissions given to create calls land unmasked, as in the model; the
//! umask is process-wide, so tests that use a runner share that setting.

use std::ffi::{CString, OsStr};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use crate::op::free_slot;
use crate::tree::{Content, Node, Tree, TreeOptions};
use crate::types::{Kind, Meta, Name, Path, Rdev, Special, Time};
use crate::{Errno, Fd, Op, Outcome, RenameFlags};

/// A real directory that ops are applied to.
#[derive(Debug)]
pub struct RealFs {
    root: PathBuf,
    fds: Vec<Option<File>>,
}

type Res = Result<Outcome, Errno>;

fn errno(e: io::Error) -> Errno {
    Errno::from_io(&e)
}

/// The result of a libc call that returns -1 on error.
fn check(ret: libc::c_int) -> Res {
    if ret == -1 {
        return Err(errno(io::Error::last_os_error()));
    }
    Ok(Outcome::Done)
}

impl RealFs {
    /// A runner rooted at `root` (which must exist). Sets the umask to 0.
    pub fn new(root: impl Into<PathBuf>) -> RealFs {
        // SAFETY: umask only swaps the process's mask.
        unsafe { libc::umask(0) };
        RealFs {
            root: root.into(),
            fds: Vec::new(),
        }
    }

    fn full(&self, path: &Path) -> PathBuf {
        self.root.join(OsStr::from_bytes(&path.to_bytes()))
    }

    fn cfull(&self, path: &Path) -> CString {
        CString::new(self.full(path).into_os_string().into_vec()).expect("no NUL in path")
    }

    /// The full path of an op that names an entry; never the root.
    fn entry(&self, path: &Path) -> Result<CString, Errno> {
        if path.0.is_empty() {
            return Err(Errno::Ebusy);
        }
        Ok(self.cfull(path))
    }

    /// Applies one op; the result compares with [`crate::Model::apply`]'s.
    pub fn apply(&mut self, op: &Op) -> Res {
        match op {
            Op::Create { path, perm } => self.create(path, *perm),
            Op::Mkdir { path, perm } => {
                self.entry(path)?;
                let mut b = fs::DirBuilder::new();
                b.mode(*perm).create(self.full(path)).map_err(errno)?;
                Ok(Outcome::Done)
            }
            Op::Mknod { path, kind, perm } => self.mknod(path, *kind, *perm),
            Op::Symlink { path, target } => {
                self.entry(path)?;
                let made = std::os::unix::fs::symlink(OsStr::from_bytes(target), self.full(path));
                made.map_err(errno).map(|_| Outcome::Done)
            }
            Op::Link { from, to } => {
                let (f, t) = (self.cfull(from), self.entry(to)?);
                // SAFETY: both are valid C strings; flags 0 = do not follow.
                check(unsafe {
                    libc::linkat(libc::AT_FDCWD, f.as_ptr(), libc::AT_FDCWD, t.as_ptr(), 0)
                })
            }
            Op::Unlink { path } => {
                let p = self.entry(path)?;
                // SAFETY: valid C string.
                check(unsafe { libc::unlink(p.as_ptr()) })
            }
            Op::Rmdir { path } => {
                let p = self.entry(path)?;
                // SAFETY: valid C string.
                check(unsafe { libc::rmdir(p.as_ptr()) })
            }
            Op::Rename { from, to, flags } => self.rename(from, to, *flags),
            _ => self.apply_inode_op(op),
        }
    }

    fn apply_inode_op(&mut self, op: &Op) -> Res {
        match op {
            Op::Write { path, offset, data } => {
                let f = self.open_data(path, true)?;
                f.write_all_at(data, *offset).map_err(errno)?;
                Ok(Outcome::Done)
            }
            Op::Truncate { path, size } => {
                let f = self.open_data(path, true)?;
                f.set_len(*size).map_err(errno)?;
                Ok(Outcome::Done)
            }
            Op::Read { path, offset, len } => {
                let f = self.open_data(path, false)?;
                read_at(&f, *offset, *len).map(Outcome::Data)
            }
            Op::Chmod { path, perm } => {
                let p = self.cfull(path);
                // SAFETY: valid C string; chmod follows symlinks, as specified.
                check(unsafe { libc::chmod(p.as_ptr(), *perm) })
            }
            Op::Chown { path, uid, gid } => {
                let p = self.cfull(path);
                // SAFETY: valid C string.
                check(unsafe { libc::lchown(p.as_ptr(), *uid, *gid) })
            }
            Op::SetTimes { path, atime, mtime } => self.set_times(path, *atime, *mtime),
            Op::Readdir { path } => self.readdir(path),
            Op::Stat { path } => {
                let m = fs::symlink_metadata(self.full(path)).map_err(errno)?;
                Ok(Outcome::Stat(meta_of(&m)))
            }
            Op::Open { path } => self.open(path),
            Op::WriteFd { fd, offset, data } => {
                let f = self.fd(*fd)?;
                f.write_all_at(data, *offset).map_err(errno)?;
                Ok(Outcome::Done)
            }
            Op::Close { fd } => {
                self.fd(*fd)?;
                self.fds[fd.0 as usize] = None;
                Ok(Outcome::Done)
            }
            _ => unreachable!("namespace ops are handled by apply"),
        }
    }

    fn create(&self, path: &Path, perm: u32) -> Res {
        self.entry(path)?;
        let mut o = OpenOptions::new();
        o.write(true).create_new(true).mode(perm);
        o.open(self.full(path)).map_err(errno)?;
        Ok(Outcome::Done)
    }

    fn mknod(&self, path: &Path, kind: Special, perm: u32) -> Res {
        let p = self.entry(path)?;
        let (fmt, rdev) = match kind {
            Special::Char(r) | Special::Block(r) => (Kind::Special(kind).format_bits(), r),
            _ => (
                Kind::Special(kind).format_bits(),
                Rdev { major: 0, minor: 0 },
            ),
        };
        let dev = libc::makedev(rdev.major, rdev.minor);
        // SAFETY: valid C string.
        check(unsafe { libc::mknod(p.as_ptr(), fmt | perm, dev) })
    }

    fn rename(&self, from: &Path, to: &Path, flags: RenameFlags) -> Res {
        let (f, t) = (self.entry(from)?, self.entry(to)?);
        let mut bits = 0;
        if flags.noreplace {
            bits |= libc::RENAME_NOREPLACE;
        }
        if flags.exchange {
            bits |= libc::RENAME_EXCHANGE;
        }
        // SAFETY: valid C strings.
        check(unsafe {
            libc::renameat2(libc::AT_FDCWD, f.as_ptr(), libc::AT_FDCWD, t.as_ptr(), bits)
        })
    }

    fn set_times(&self, path: &Path, atime: Time, mtime: Time) -> Res {
        let p = self.cfull(path);
        let ts = |t: Time| libc::timespec {
            tv_sec: t.secs,
            tv_nsec: t.nsec.into(),
        };
        let times = [ts(atime), ts(mtime)];
        let flags = libc::AT_SYMLINK_NOFOLLOW;
        // SAFETY: valid C string and a two-element array.
        check(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), flags) })
    }

    fn readdir(&self, path: &Path) -> Res {
        let mut names = Vec::new();
        for entry in fs::read_dir(self.full(path)).map_err(errno)? {
            let entry = entry.map_err(errno)?;
            names.push(Name(entry.file_name().as_bytes().to_vec()));
        }
        names.sort();
        Ok(Outcome::Names(names))
    }

    /// Opens a regular file for a data op. A special file is refused with
    /// `ENXIO` *before* opening it (see [`crate::op`]).
    fn open_data(&self, path: &Path, write: bool) -> Result<File, Errno> {
        let full = self.full(path);
        if let Ok(m) = fs::symlink_metadata(&full) {
            if matches!(kind_of(&m), Kind::Special(_)) {
                return Err(Errno::Enxio);
            }
        }
        let mut o = OpenOptions::new();
        o.read(true).write(write).custom_flags(libc::O_NOFOLLOW);
        o.open(full).map_err(errno)
    }

    fn open(&mut self, path: &Path) -> Res {
        let f = self.open_data(path, true)?;
        let slot = free_slot(&self.fds)?;
        if slot == self.fds.len() {
            self.fds.push(None);
        }
        self.fds[slot] = Some(f);
        Ok(Outcome::Opened(Fd(slot as u32)))
    }

    fn fd(&self, fd: Fd) -> Result<&File, Errno> {
        let slot = self.fds.get(fd.0 as usize).and_then(Option::as_ref);
        slot.ok_or(Errno::Ebadf)
    }
}

/// Up to `len` bytes at `offset`, stopping at end of file.
fn read_at(f: &File, offset: u64, len: usize) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0; len];
    let mut got = 0;
    // At least one pread even for len 0: the kernel still checks the file
    // (a directory gives EISDIR), and skipping the call would hide that.
    loop {
        let n = f
            .read_at(&mut buf[got..], offset + got as u64)
            .map_err(errno)?;
        got += n;
        if n == 0 || got == len {
            break;
        }
    }
    buf.truncate(got);
    Ok(buf)
}

fn kind_of(m: &fs::Metadata) -> Kind {
    let t = m.file_type();
    let rdev = || Rdev {
        major: libc::major(m.rdev()),
        minor: libc::minor(m.rdev()),
    };
    if t.is_dir() {
        Kind::Dir
    } else if t.is_symlink() {
        Kind::Symlink
    } else if t.is_fifo() {
        Kind::Special(Special::Fifo)
    } else if t.is_socket() {
        Kind::Special(Special::Socket)
    } else if t.is_char_device() {
        Kind::Special(Special::Char(rdev()))
    } else if t.is_block_device() {
        Kind::Special(Special::Block(rdev()))
    } else {
        Kind::File
    }
}

/// The canonical attributes of a real inode (directory sizes left out:
/// see [`Meta`]).
fn meta_of(m: &fs::Metadata) -> Meta {
    let kind = kind_of(m);
    Meta {
        kind,
        perm: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        nlink: m.nlink() as u32,
        size: (kind != Kind::Dir).then_some(m.size()),
    }
}

impl Tree {
    /// Reads the tree under `root` (the root itself is the empty path).
    /// Does not follow symlinks.
    pub fn from_dir(root: &std::path::Path, opts: TreeOptions) -> io::Result<Tree> {
        let mut tree = Tree::default();
        let mut ids = Vec::new();
        walk(root, Vec::new(), opts, &mut tree, &mut ids)?;
        tree.link_groups(ids.into_iter());
        Ok(tree)
    }
}

fn walk(
    full: &std::path::Path,
    key: Vec<u8>,
    opts: TreeOptions,
    tree: &mut Tree,
    ids: &mut Vec<(Vec<u8>, (u64, u64))>,
) -> io::Result<()> {
    let m = fs::symlink_metadata(full)?;
    let meta = meta_of(&m);
    let content = match meta.kind {
        Kind::File => Content::Bytes(fs::read(full)?),
        Kind::Symlink => Content::Target(fs::read_link(full)?.into_os_string().into_vec()),
        _ => Content::None,
    };
    let mtime = opts.mtime.then(|| Time {
        secs: m.mtime(),
        nsec: m.mtime_nsec() as u32,
    });
    tree.nodes.insert(
        key.clone(),
        Node {
            meta,
            content,
            same_as: None,
            mtime,
        },
    );
    ids.push((key.clone(), (m.dev(), m.ino())));
    if meta.kind != Kind::Dir {
        return Ok(());
    }
    for entry in fs::read_dir(full)? {
        let entry = entry?;
        let mut child = key.clone();
        if !child.is_empty() {
            child.push(b'/');
        }
        child.extend_from_slice(entry.file_name().as_bytes());
        walk(&entry.path(), child, opts, tree, ids)?;
    }
    Ok(())
}
