//! [`Tree`]: a canonical, comparable description of a whole file tree,
//! built from the model ([`Model::snapshot`]) or from a real directory
//! ([`Tree::from_dir`]), and [`Tree::diff`] between two of them.
//!
//! Invariant: a tree holds only what every correct file system must agree
//! on after the same ops: see [`Meta`] for the attributes left out and why.
//! Hard links are recorded as "same inode as the first path (in byte
//! order) naming it", which both sides can compute without comparing inode
//! numbers. Modification times are included only on request
//! ([`TreeOptions::mtime`]): the kernel stamps them from a real clock, the
//! model from the `now` its caller gives. Access times are never included
//! (`relatime` and reads make them unpredictable).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::model::Body;
use crate::types::{InodeNo, Meta, Name, Path, Time};
use crate::Model;

/// What to include in a tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeOptions {
    pub mtime: bool,
}

/// The content of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// Directories and special files.
    None,
    /// A regular file's bytes.
    Bytes(Vec<u8>),
    /// A symlink's target.
    Target(Vec<u8>),
}

/// One path of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub meta: Meta,
    pub content: Content,
    /// The first path (in byte order) naming the same inode, if not this one.
    pub same_as: Option<Vec<u8>>,
    pub mtime: Option<Time>,
}

/// A whole tree: path bytes (`a/b`, the root is empty) → node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tree {
    pub nodes: BTreeMap<Vec<u8>, Node>,
}

impl Model {
    /// The tree as it stands, without times.
    pub fn snapshot(&self) -> Tree {
        self.snapshot_with(TreeOptions::default())
    }

    /// The tree as it stands.
    pub fn snapshot_with(&self, opts: TreeOptions) -> Tree {
        let mut paths: Vec<(Vec<u8>, InodeNo)> = Vec::new();
        self.collect(&Path::root(), InodeNo::ROOT, &mut paths);
        let mut tree = Tree::default();
        for (path, ino) in &paths {
            let node = self.node(*ino, opts);
            tree.nodes.insert(path.clone(), node);
        }
        tree.link_groups(paths.into_iter());
        tree
    }

    /// Every path under `dir` (which is at `at`), depth first.
    fn collect(&self, at: &Path, dir: InodeNo, out: &mut Vec<(Vec<u8>, InodeNo)>) {
        out.push((at.to_bytes(), dir));
        for (name, ino) in self.inodes[&dir].entries().expect("dir") {
            let path = Path(at.0.iter().cloned().chain([name.clone()]).collect());
            if self.is_dir(*ino) {
                self.collect(&path, *ino, out);
            } else {
                out.push((path.to_bytes(), *ino));
            }
        }
    }

    fn node(&self, ino: InodeNo, opts: TreeOptions) -> Node {
        let stat = self.stat(ino).expect("live inode");
        let content = match &self.inodes[&ino].body {
            Body::File(d) => Content::Bytes(d.clone()),
            Body::Symlink(t) => Content::Target(t.clone()),
            Body::Dir(_) | Body::Special(_) => Content::None,
        };
        Node {
            meta: stat.meta,
            content,
            same_as: None,
            mtime: opts.mtime.then_some(stat.mtime),
        }
    }
}

impl Tree {
    /// Fills `same_as` from (path, inode identity) pairs.
    pub fn link_groups<K: Ord>(&mut self, paths: impl Iterator<Item = (Vec<u8>, K)>) {
        let mut first: BTreeMap<K, Vec<u8>> = BTreeMap::new();
        let mut sorted: Vec<(Vec<u8>, K)> = paths.collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, key) in sorted {
            match first.get(&key) {
                Some(p) => self.nodes.get_mut(&path).expect("path").same_as = Some(p.clone()),
                None => {
                    first.insert(key, path);
                }
            }
        }
    }

    /// Human-readable differences between `self` and `other` (empty if
    /// equal), one line per path and field.
    pub fn diff(&self, other: &Tree) -> Vec<String> {
        let mut out = Vec::new();
        let keys: std::collections::BTreeSet<&Vec<u8>> =
            self.nodes.keys().chain(other.nodes.keys()).collect();
        for key in keys {
            let shown = show_path(key);
            match (self.nodes.get(key), other.nodes.get(key)) {
                (Some(_), None) => out.push(format!("{shown}: only in left")),
                (None, Some(_)) => out.push(format!("{shown}: only in right")),
                (Some(a), Some(b)) => diff_node(&shown, a, b, &mut out),
                (None, None) => unreachable!("key from one side"),
            }
        }
        out
    }
}

fn show_path(key: &[u8]) -> String {
    format!("/{}", String::from_utf8_lossy(key))
}

fn diff_node(path: &str, a: &Node, b: &Node, out: &mut Vec<String>) {
    if a.meta != b.meta {
        out.push(format!("{path}: {:?} != {:?}", a.meta, b.meta));
    }
    if a.content != b.content {
        out.push(format!("{path}: {}", diff_content(&a.content, &b.content)));
    }
    if a.same_as != b.same_as {
        let show = |s: &Option<Vec<u8>>| s.as_deref().map(show_path);
        out.push(format!(
            "{path}: same inode as {:?} != {:?}",
            show(&a.same_as),
            show(&b.same_as)
        ));
    }
    if a.mtime != b.mtime {
        out.push(format!("{path}: mtime {:?} != {:?}", a.mtime, b.mtime));
    }
}

/// Describes how two contents differ (for bytes: lengths and the first
/// differing offset, not the bytes themselves, which may be megabytes).
fn diff_content(a: &Content, b: &Content) -> String {
    match (a, b) {
        (Content::Bytes(x), Content::Bytes(y)) => {
            let first = x.iter().zip(y).position(|(p, q)| p != q);
            let mut s = format!("contents differ: lengths {} and {}", x.len(), y.len());
            if let Some(at) = first {
                let _ = write!(s, ", first at byte {at} ({:#04x} != {:#04x})", x[at], y[at]);
            }
            s
        }
        _ => format!("content {a:?} != {b:?}"),
    }
}

/// Names of a path's components, for callers that build [`Path`]s from
/// tree keys.
pub fn key_to_path(key: &[u8]) -> Path {
    let parts = key.split(|b| *b == b'/').filter(|c| !c.is_empty());
    Path(parts.map(|c| Name(c.to_vec())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, Op, Owner};

    fn model_with_link() -> Model {
        let mut m = Model::new(0o755, Owner { uid: 0, gid: 0 }, Limits::default());
        let ops = [
            Op::Create {
                path: Path::parse("f"),
                perm: 0o644,
            },
            Op::Write {
                path: Path::parse("f"),
                offset: 0,
                data: b"abc".to_vec(),
            },
            Op::Link {
                from: Path::parse("f"),
                to: Path::parse("g"),
            },
        ];
        for op in &ops {
            m.apply(op).unwrap();
        }
        m
    }

    #[test]
    fn diff_is_empty_only_for_equal_trees() {
        let m = model_with_link();
        assert!(m.snapshot().diff(&m.snapshot()).is_empty());
        let mut other = m.clone();
        let f = other.resolve(&Path::parse("f")).unwrap();
        other.write(f, 1, b"X", Time::EPOCH).unwrap();
        let diff = m.snapshot().diff(&other.snapshot());
        assert_eq!(diff.len(), 2, "{diff:?}"); // both names of the inode
        assert!(diff[0].contains("first at byte 1"), "{diff:?}");
    }

    #[test]
    fn hard_links_are_recorded_by_first_path() {
        let tree = model_with_link().snapshot();
        assert_eq!(tree.nodes[&b"f".to_vec()].same_as, None);
        assert_eq!(tree.nodes[&b"g".to_vec()].same_as, Some(b"f".to_vec()));
        assert_eq!(tree.nodes[&b"g".to_vec()].meta.nlink, 2);
    }

    #[test]
    fn mtime_only_on_request() {
        let m = model_with_link();
        assert_eq!(m.snapshot().nodes[&Vec::new()].mtime, None);
        let with = m.snapshot_with(TreeOptions { mtime: true });
        assert_eq!(with.nodes[&Vec::new()].mtime, Some(Time::EPOCH));
    }
}
