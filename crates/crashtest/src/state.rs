//! [`State`]: a file tree as the judge compares it, keyed by inode number
//! (memfs shows the ext2 numbers, so expected and recovered trees share
//! them), and [`Cells`], the state cut into independent facts (one entry,
//! one attribute, one file's bytes) so that a crash image can be held to
//! "each fact as in one of these states".
//!
//! Invariants: `lost+found` at the root is never part of a state (mkfs
//! makes it, no workload touches it); link counts of an expected state are
//! computed from its entries, a recovered state carries the counts the disk
//! stores.

use crate::error::ReadError;
use std::collections::{BTreeMap, BTreeSet};
use stitch_diskfs::InodeNo;
use stitch_model::{Content, Meta, Node, Tree};

/// The root directory's inode number.
pub const ROOT: InodeNo = InodeNo::ROOT;

/// Longest file the judge reads back from an image (a corrupt size is a
/// finding, not an allocation).
const READ_LIMIT: u64 = 64 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    /// A fifo, socket or device node, with its device number.
    Special(stitch_model::Special),
}

/// The special file of type `t` (not a file, directory or symlink) with
/// device number `rdev`.
pub fn special(t: stitch_diskfs::FileType, (major, minor): (u32, u32)) -> stitch_model::Special {
    use stitch_diskfs::FileType;
    use stitch_model::{Rdev, Special};
    match t {
        FileType::CharDevice => Special::Char(Rdev { major, minor }),
        FileType::BlockDevice => Special::Block(Rdev { major, minor }),
        FileType::Socket => Special::Socket,
        _ => Special::Fifo,
    }
}

/// One inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    pub kind: FileKind,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    /// A file's bytes or a symlink's target.
    pub bytes: Vec<u8>,
    /// A directory's entries, without `.` and `..`.
    pub entries: BTreeMap<Vec<u8>, InodeNo>,
    /// Extended attributes by full name (`user.k`).
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Inode {
    pub fn new(kind: FileKind, perm: u16, uid: u32, gid: u32) -> Inode {
        Inode {
            kind,
            perm,
            uid,
            gid,
            bytes: Vec::new(),
            entries: BTreeMap::new(),
            xattrs: BTreeMap::new(),
        }
    }
}

/// A whole tree.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct State {
    pub inodes: BTreeMap<InodeNo, Inode>,
}

impl State {
    /// The inode `path` (`a/b`, empty for the root) names.
    pub fn lookup(&self, path: &str) -> Option<InodeNo> {
        let mut at = ROOT;
        for name in path.split('/').filter(|c| !c.is_empty()) {
            at = *self.inodes.get(&at)?.entries.get(name.as_bytes())?;
        }
        Some(at)
    }

    /// The directory holding the entry of directory `dir`.
    pub fn parent(&self, dir: InodeNo) -> Option<InodeNo> {
        if dir == ROOT {
            return Some(ROOT);
        }
        self.inodes
            .iter()
            .find(|(_, i)| i.kind == FileKind::Dir && i.entries.values().any(|&e| e == dir))
            .map(|(&p, _)| p)
    }

    /// Link counts computed from the entries (a directory: 2 plus its
    /// subdirectories).
    pub fn links(&self) -> BTreeMap<InodeNo, u32> {
        let mut n: BTreeMap<InodeNo, u32> = BTreeMap::new();
        for (&ino, i) in &self.inodes {
            if i.kind == FileKind::Dir {
                *n.entry(ino).or_default() += 2;
            }
            for &e in i.entries.values() {
                let is_dir = self.inodes.get(&e).is_some_and(|c| c.kind == FileKind::Dir);
                if is_dir {
                    *n.entry(ino).or_default() += 1;
                } else {
                    *n.entry(e).or_default() += 1;
                }
            }
        }
        n
    }

    /// Paths from the root, depth first, each with its inode.
    pub fn paths(&self) -> Vec<(Vec<u8>, InodeNo)> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        self.walk(ROOT, Vec::new(), &mut out, &mut seen);
        out
    }

    fn walk(
        &self,
        ino: InodeNo,
        at: Vec<u8>,
        out: &mut Vec<(Vec<u8>, InodeNo)>,
        seen: &mut BTreeSet<InodeNo>,
    ) {
        out.push((at.clone(), ino));
        let Some(i) = self.inodes.get(&ino) else {
            return;
        };
        if i.kind != FileKind::Dir || !seen.insert(ino) {
            return;
        }
        for (name, &child) in &i.entries {
            let mut p = at.clone();
            if !p.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(name);
            self.walk(child, p, out, seen);
        }
    }

    /// The tree as the reference model describes trees, with `links` as
    /// the link counts (computed ones unless the disk's are given).
    pub fn to_tree(&self, links: Option<&BTreeMap<InodeNo, u32>>) -> Tree {
        let computed;
        let links = match links {
            Some(l) => l,
            None => {
                computed = self.links();
                &computed
            }
        };
        let paths = self.paths();
        let mut tree = Tree::default();
        for (path, ino) in &paths {
            let Some(i) = self.inodes.get(ino) else {
                continue;
            };
            let (kind, size, content) = match i.kind {
                FileKind::File => (
                    stitch_model::Kind::File,
                    Some(i.bytes.len() as u64),
                    Content::Bytes(i.bytes.clone()),
                ),
                FileKind::Dir => (stitch_model::Kind::Dir, None, Content::None),
                FileKind::Symlink => (
                    stitch_model::Kind::Symlink,
                    Some(i.bytes.len() as u64),
                    Content::Target(i.bytes.clone()),
                ),
                FileKind::Special(sp) => (stitch_model::Kind::Special(sp), Some(0), Content::None),
            };
            let meta = Meta {
                kind,
                perm: u32::from(i.perm),
                uid: i.uid,
                gid: i.gid,
                nlink: links.get(ino).copied().unwrap_or(0),
                size,
            };
            tree.nodes.insert(
                path.clone(),
                Node {
                    meta,
                    content,
                    same_as: None,
                    mtime: None,
                },
            );
        }
        tree.link_groups(paths.into_iter());
        tree
    }

    /// A listing for reports: one line per path.
    pub fn show(&self, links: Option<&BTreeMap<InodeNo, u32>>) -> String {
        show_tree(&self.to_tree(links), &self.paths())
    }
}

/// One line per path of `tree`: inode, kind, permissions, links, size and
/// a digest of the contents.
fn show_tree(tree: &Tree, paths: &[(Vec<u8>, InodeNo)]) -> String {
    let mut s = String::new();
    for (path, ino) in paths {
        let Some(n) = tree.nodes.get(path) else {
            continue;
        };
        let content = match &n.content {
            Content::Bytes(b) => format!(" bytes {}", digest(b)),
            Content::Target(t) => format!(" -> {}", String::from_utf8_lossy(t)),
            Content::None => String::new(),
        };
        s.push_str(&format!(
            "/{:<12} ino {:<3} {:?} {:o} uid {} gid {} links {} size {:?}{}\n",
            String::from_utf8_lossy(path),
            ino.0,
            n.meta.kind,
            n.meta.perm,
            n.meta.uid,
            n.meta.gid,
            n.meta.nlink,
            n.meta.size,
            content
        ));
    }
    s
}

/// A short description of file bytes: runs of equal bytes, at most a few.
pub fn digest(b: &[u8]) -> String {
    let mut runs: Vec<(usize, usize, u8)> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        // Workload bytes change every byte, so describe by which write made
        // them: a run is a range whose bytes are zero or all non-zero.
        let zero = b[i] == 0;
        let mut j = i;
        while j < b.len() && (b[j] == 0) == zero {
            j += 1;
        }
        runs.push((i, j, if zero { 0 } else { b[i] }));
        i = j;
    }
    let mut s = format!("{}:", b.len());
    for (n, (a, e, v)) in runs.iter().enumerate() {
        if n == 6 {
            s.push_str(" ...");
            break;
        }
        if *v == 0 {
            s.push_str(&format!(" [{a}..{e} zero]"));
        } else {
            s.push_str(&format!(" [{a}..{e} from {v:#04x}]"));
        }
    }
    s
}

/// A tree read back from an image, with what the disk says that a
/// computed state cannot: the stored link counts, and structural problems
/// met on the way (a directory reachable twice).
#[derive(Clone, Debug, Default)]
pub struct Found {
    pub state: State,
    pub links: BTreeMap<InodeNo, u32>,
    pub problems: Vec<String>,
}

/// Reads the tree of a mounted diskfs from the root.
pub fn read_tree(fs: &mut stitch_diskfs::DiskFs) -> Result<Found, ReadError> {
    let mut r = TreeReader {
        fs,
        found: Found::default(),
        stack: vec![ROOT],
        named_dirs: BTreeSet::new(),
        lost_found: 0,
    };
    while let Some(ino) = r.stack.pop() {
        if !r.found.state.inodes.contains_key(&ino) {
            r.inode(ino)?;
        }
    }
    let mut found = r.found;
    if let Some(l) = found.links.get_mut(&ROOT) {
        *l = l.saturating_sub(r.lost_found);
    }
    Ok(found)
}

/// A walk of the tree from the root, inode by inode.
struct TreeReader<'a> {
    fs: &'a mut stitch_diskfs::DiskFs,
    found: Found,
    /// Inodes named but not read yet.
    stack: Vec<InodeNo>,
    /// Directories met so far by a name (a second name is a problem).
    named_dirs: BTreeSet<InodeNo>,
    /// 1 once the root's lost+found is met: its ".." counts in the root's
    /// links, and the state leaves it out, so the count does too.
    lost_found: u32,
}

/// The error of a failed diskfs `call` on `ino`.
fn failed(call: &'static str, ino: InodeNo) -> impl FnOnce(stitch_diskfs::DiskError) -> ReadError {
    move |error| ReadError { call, ino, error }
}

impl TreeReader<'_> {
    /// Reads inode `ino` whole: attributes, contents, extended attributes.
    fn inode(&mut self, ino: InodeNo) -> Result<(), ReadError> {
        use stitch_diskfs::FileType;
        let a = self.fs.getattr(ino).map_err(failed("inode", ino))?;
        let kind = match a.kind {
            Some(FileType::Regular) => FileKind::File,
            Some(FileType::Directory) => FileKind::Dir,
            Some(FileType::Symlink) => FileKind::Symlink,
            Some(t) => FileKind::Special(special(t, a.rdev.unwrap_or((0, 0)))),
            None => {
                let problem = format!("an entry names inode {}, which has no file type", ino.0);
                self.found.problems.push(problem);
                return Ok(());
            }
        };
        let mut inode = Inode::new(kind, a.perm, a.uid, a.gid);
        match kind {
            FileKind::File if a.size > READ_LIMIT => {
                let problem = format!("inode {} has size {}", ino.0, a.size);
                self.found.problems.push(problem);
            }
            FileKind::File => {
                inode.bytes = self
                    .fs
                    .read(ino, 0, a.size as usize)
                    .map_err(failed("read inode", ino))?;
            }
            FileKind::Symlink => {
                inode.bytes = self.fs.readlink(ino).map_err(failed("readlink", ino))?;
            }
            FileKind::Dir => self.entries(ino, &mut inode)?,
            FileKind::Special(_) => {}
        }
        self.xattrs(ino, &mut inode)?;
        self.found.links.insert(ino, u32::from(a.nlink));
        self.found.state.inodes.insert(ino, inode);
        Ok(())
    }

    /// The entries of directory `ino`, whose children join the walk.
    fn entries(&mut self, ino: InodeNo, inode: &mut Inode) -> Result<(), ReadError> {
        use stitch_diskfs::FileType;
        let list = self.fs.readdir(ino).map_err(failed("readdir", ino))?;
        for e in list {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            if ino == ROOT && e.name == b"lost+found" {
                self.lost_found = 1;
                continue;
            }
            let child = e.ino;
            let is_dir = e.kind == Some(FileType::Directory);
            if is_dir && (child == ROOT || !self.named_dirs.insert(child)) {
                self.found.problems.push(format!(
                    "directory {} is reachable twice (again as {} in {})",
                    child.0,
                    String::from_utf8_lossy(&e.name),
                    ino.0
                ));
                continue;
            }
            inode.entries.insert(e.name, child);
            self.stack.push(child);
        }
        Ok(())
    }

    /// The extended attributes of `ino`.
    fn xattrs(&mut self, ino: InodeNo, inode: &mut Inode) -> Result<(), ReadError> {
        let list = self
            .fs
            .xattrs(ino)
            .map_err(failed("extended attributes of", ino))?;
        for x in list {
            match x.full_name() {
                Some(name) => {
                    inode.xattrs.insert(name, x.value);
                }
                None => self.found.problems.push(format!(
                    "inode {} has an extended attribute of unknown index {}",
                    ino.0, x.index
                )),
            }
        }
        Ok(())
    }
}

/// One independent fact of a state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cell {
    /// The entry `name` of directory `dir`: which inode it names.
    Entry(InodeNo, Vec<u8>),
    Kind(InodeNo),
    Perm(InodeNo),
    Owner(InodeNo),
    Links(InodeNo),
    Size(InodeNo),
    /// A file's bytes or a symlink's target.
    Bytes(InodeNo),
    /// The value of an inode's extended attribute.
    Xattr(InodeNo, Vec<u8>),
}

impl Cell {
    /// The inode the fact is about (the directory, for an entry).
    pub fn ino(&self) -> InodeNo {
        match self {
            Cell::Entry(d, _) | Cell::Xattr(d, _) => *d,
            Cell::Kind(i)
            | Cell::Perm(i)
            | Cell::Owner(i)
            | Cell::Links(i)
            | Cell::Size(i)
            | Cell::Bytes(i) => *i,
        }
    }

    pub fn show(&self) -> String {
        match self {
            Cell::Entry(d, n) => {
                format!("entry {:?} of dir {}", String::from_utf8_lossy(n), d.0)
            }
            Cell::Kind(i) => format!("kind of {i}"),
            Cell::Perm(i) => format!("permissions of {i}"),
            Cell::Owner(i) => format!("owner of {i}"),
            Cell::Links(i) => format!("link count of {i}"),
            Cell::Size(i) => format!("size of {i}"),
            Cell::Bytes(i) => format!("contents of {i}"),
            Cell::Xattr(i, n) => {
                format!("extended attribute {:?} of {i}", String::from_utf8_lossy(n))
            }
        }
    }
}

/// A fact's value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    Ino(InodeNo),
    Kind(FileKind),
    Num(u64),
    Pair(u32, u32),
    Bytes(Vec<u8>),
}

impl Value {
    pub fn show(&self) -> String {
        match self {
            Value::Ino(i) => format!("{i}"),
            Value::Kind(k) => format!("{k:?}"),
            Value::Num(n) => format!("{n}"),
            Value::Pair(a, b) => format!("{a}:{b}"),
            Value::Bytes(b) => digest(b),
        }
    }
}

pub fn show_opt(v: Option<&Value>) -> String {
    v.map_or_else(|| "absent".to_string(), Value::show)
}

/// A state as facts.
pub type Cells = BTreeMap<Cell, Value>;

/// The facts of `state`, with `links` as its link counts.
pub fn cells(state: &State, links: &BTreeMap<InodeNo, u32>) -> Cells {
    let mut c = Cells::new();
    for (&ino, i) in &state.inodes {
        c.insert(Cell::Kind(ino), Value::Kind(i.kind));
        c.insert(Cell::Perm(ino), Value::Num(u64::from(i.perm)));
        c.insert(Cell::Owner(ino), Value::Pair(i.uid, i.gid));
        c.insert(
            Cell::Links(ino),
            Value::Num(u64::from(links.get(&ino).copied().unwrap_or(0))),
        );
        for (name, value) in &i.xattrs {
            c.insert(Cell::Xattr(ino, name.clone()), Value::Bytes(value.clone()));
        }
        match i.kind {
            FileKind::File | FileKind::Symlink => {
                c.insert(Cell::Size(ino), Value::Num(i.bytes.len() as u64));
                c.insert(Cell::Bytes(ino), Value::Bytes(i.bytes.clone()));
            }
            FileKind::Dir => {
                for (name, &e) in &i.entries {
                    c.insert(Cell::Entry(ino, name.clone()), Value::Ino(e));
                }
            }
            FileKind::Special(_) => {}
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> State {
        let mut s = State::default();
        let mut root = Inode::new(FileKind::Dir, 0o755, 0, 0);
        root.entries.insert(b"a".to_vec(), InodeNo(12));
        root.entries.insert(b"d".to_vec(), InodeNo(13));
        let mut d = Inode::new(FileKind::Dir, 0o755, 0, 0);
        d.entries.insert(b"b".to_vec(), InodeNo(12));
        let mut f = Inode::new(FileKind::File, 0o644, 0, 0);
        f.bytes = vec![1, 2, 3];
        s.inodes.insert(ROOT, root);
        s.inodes.insert(InodeNo(13), d);
        s.inodes.insert(InodeNo(12), f);
        s
    }

    #[test]
    fn links_count_entries_and_subdirectories() {
        let s = sample();
        let l = s.links();
        assert_eq!(l[&ROOT], 3);
        assert_eq!(l[&InodeNo(13)], 2);
        assert_eq!(l[&InodeNo(12)], 2);
        assert_eq!(s.lookup("d/b"), Some(InodeNo(12)));
        assert_eq!(s.parent(InodeNo(13)), Some(ROOT));
    }

    #[test]
    fn trees_record_hard_links() {
        let t = sample().to_tree(None);
        assert_eq!(t.nodes[&b"d/b".to_vec()].same_as, Some(b"a".to_vec()));
        assert_eq!(t.nodes[&b"a".to_vec()].meta.nlink, 2);
    }

    #[test]
    fn digest_names_runs() {
        assert_eq!(
            digest(&[0, 0, 5, 6, 0]),
            "5: [0..2 zero] [2..4 from 0x05] [4..5 zero]"
        );
    }
}
