//! [`InodeView`]: a file system under test seen by inode number, as a
//! runner of [`Op`](crate::Op)s needs it, and the path walk every such
//! runner shares with the model: the same symlink rules (see
//! [`crate::op`]), the same errors in the same order, and the whole tree
//! as a [`Tree`] to diff against [`Model::snapshot`](crate::Model::snapshot).
//!
//! A runner implements the five lookups of the trait for its file system
//! and maps each op's call itself; the walk, `stat`, `readdir` and the
//! tree are written once here.

use crate::tree::{Content, Node, Tree, TreeOptions};
use crate::types::{Kind, Meta, Name, Path, Time, NAME_MAX};
use crate::{Errno, Outcome};

/// A file system's inodes, in the model's terms.
pub trait InodeView {
    /// The file system's inode number.
    type Ino: Copy + Ord;

    /// The root directory of the tree under test.
    fn root(&self) -> Self::Ino;

    /// The inode `name` names in directory `dir`; `Ok(None)` if no entry.
    /// A name the file system refuses (too long) is its error.
    fn lookup(&mut self, dir: Self::Ino, name: &Name) -> Result<Option<Self::Ino>, Errno>;

    /// The inode's attributes. The model has no `lost+found`: an ext2
    /// root's link count leaves its link out.
    fn meta(&mut self, ino: Self::Ino) -> Result<Meta, Errno>;

    /// A symlink's target.
    fn readlink(&mut self, ino: Self::Ino) -> Result<Vec<u8>, Errno>;

    /// The first `size` bytes of a regular file (its whole content).
    fn contents(&mut self, ino: Self::Ino, size: u64) -> Result<Vec<u8>, Errno>;

    /// A directory's entries without `.` and `..` (nor an ext2 root's
    /// `lost+found`), in any order.
    fn entries(&mut self, dir: Self::Ino) -> Result<Vec<(Name, Self::Ino)>, Errno>;

    /// The inode's modification time (for trees with
    /// [`TreeOptions::mtime`]).
    fn mtime(&mut self, ino: Self::Ino) -> Result<Time, Errno>;
}

/// The error of following a symlink to `target`, which dangles: the lookup
/// of its first component fails, `ENAMETOOLONG` if that name is too long.
pub fn dangling(target: &[u8]) -> Errno {
    match target.split(|b| *b == b'/').find(|c| !c.is_empty()) {
        Some(c) if c.len() > NAME_MAX => Errno::Enametoolong,
        _ => Errno::Enoent,
    }
}

/// The permission bits after a `chown`: Linux clears setuid, and setgid
/// when group-executable, on every chown of a non-directory, even by root.
pub fn perm_after_chown(perm: u32, dir: bool) -> u32 {
    let mut perm = perm;
    if !dir {
        perm &= !0o4000;
        if perm & 0o2010 == 0o2010 {
            perm &= !0o2000;
        }
    }
    perm
}

fn kind<V: InodeView>(v: &mut V, ino: V::Ino) -> Result<Kind, Errno> {
    Ok(v.meta(ino)?.kind)
}

fn follow<V: InodeView>(v: &mut V, ino: V::Ino) -> Errno {
    match v.readlink(ino) {
        Ok(t) => dangling(&t),
        Err(e) => e,
    }
}

/// Walks the directories of `parts` from the root, as the model does.
pub fn resolve_dirs<V: InodeView>(v: &mut V, parts: &[Name]) -> Result<V::Ino, Errno> {
    let mut at = v.root();
    for name in parts {
        let ino = v.lookup(at, name)?.ok_or(Errno::Enoent)?;
        at = match kind(v, ino)? {
            Kind::Dir => ino,
            Kind::Symlink => return Err(follow(v, ino)),
            _ => return Err(Errno::Enotdir),
        };
    }
    Ok(at)
}

/// The inode `path` names, without following a final symlink.
pub fn resolve<V: InodeView>(v: &mut V, path: &Path) -> Result<V::Ino, Errno> {
    match path.split_last() {
        None => Ok(v.root()),
        Some((dirs, name)) => {
            let dir = resolve_dirs(v, dirs)?;
            v.lookup(dir, name)?.ok_or(Errno::Enoent)
        }
    }
}

/// The directory and last name of a path that names an entry (`EBUSY`
/// for the root, as the model says).
pub fn resolve_parent<'p, V: InodeView>(
    v: &mut V,
    path: &'p Path,
) -> Result<(V::Ino, &'p [u8]), Errno> {
    let (dirs, last) = path.split_last().ok_or(Errno::Ebusy)?;
    Ok((resolve_dirs(v, dirs)?, last.as_bytes()))
}

/// The inode of a data op: a regular file, else the model's errors.
pub fn resolve_data<V: InodeView>(v: &mut V, path: &Path) -> Result<V::Ino, Errno> {
    let ino = resolve(v, path)?;
    match kind(v, ino)? {
        Kind::File => Ok(ino),
        Kind::Dir => Err(Errno::Eisdir),
        Kind::Symlink => Err(Errno::Eloop),
        Kind::Special(_) => Err(Errno::Enxio),
    }
}

/// `chmod` and `readdir` follow a final symlink, which dangles.
pub fn resolve_follow<V: InodeView>(v: &mut V, path: &Path) -> Result<V::Ino, Errno> {
    let ino = resolve(v, path)?;
    if kind(v, ino)? == Kind::Symlink {
        return Err(follow(v, ino));
    }
    Ok(ino)
}

/// [`Op::Readdir`](crate::Op::Readdir).
pub fn readdir<V: InodeView>(v: &mut V, path: &Path) -> Result<Outcome, Errno> {
    let ino = resolve_follow(v, path)?;
    let mut names: Vec<Name> = v.entries(ino)?.into_iter().map(|(n, _)| n).collect();
    names.sort();
    Ok(Outcome::Names(names))
}

/// [`Op::Stat`](crate::Op::Stat).
pub fn stat<V: InodeView>(v: &mut V, path: &Path) -> Result<Outcome, Errno> {
    let ino = resolve(v, path)?;
    Ok(Outcome::Stat(v.meta(ino)?))
}

/// The whole tree below the root, in the model's terms, without times.
pub fn tree<V: InodeView>(v: &mut V) -> Result<Tree, Errno> {
    tree_with(v, TreeOptions::default())
}

/// The whole tree below the root, in the model's terms.
pub fn tree_with<V: InodeView>(v: &mut V, opts: TreeOptions) -> Result<Tree, Errno> {
    let mut tree = Tree::default();
    let mut paths = Vec::new();
    let mut stack = vec![(Vec::new(), v.root())];
    while let Some((path, ino)) = stack.pop() {
        let meta = v.meta(ino)?;
        let content = match meta.kind {
            Kind::File => Content::Bytes(v.contents(ino, meta.size.unwrap_or(0))?),
            Kind::Symlink => Content::Target(v.readlink(ino)?),
            _ => Content::None,
        };
        if meta.kind == Kind::Dir {
            for (name, child) in v.entries(ino)? {
                let mut p = path.clone();
                if !p.is_empty() {
                    p.push(b'/');
                }
                p.extend_from_slice(name.as_bytes());
                stack.push((p, child));
            }
        }
        paths.push((path.clone(), ino));
        let mtime = if opts.mtime {
            Some(v.mtime(ino)?)
        } else {
            None
        };
        let node = Node {
            meta,
            content,
            same_as: None,
            mtime,
        };
        tree.nodes.insert(path, node);
    }
    tree.link_groups(paths.into_iter());
    Ok(tree)
}
