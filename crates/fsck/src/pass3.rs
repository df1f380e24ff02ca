//! Pass 3: connectivity. The root must be a directory in use, every other
//! directory must reach the root through the parents pass 2 recorded, and
//! each directory's `..` must name its parent.
//!
//! A directory nothing names is *unconnected*: used but unreferenced, a
//! soft-updates leak (a crash between writing a new directory and its
//! entry, or between removing an entry and freeing the directory). e2fsck
//! then also says its `..` "should be `<The NULL inode>`"; that is the same
//! finding, not a second one.
//!
//! Invariant: each directory is walked once (a done-set), so the pass is
//! linear in the number of directories.

use crate::finding::FindingKind;
use crate::state::{State, DIR, USED};
use std::collections::HashSet;
use stitch_format::inode::ROOT_INO;

pub fn run(st: &mut State) {
    let root = ROOT_INO.0;
    if !st.has(root, USED) || !st.has(root, DIR) {
        st.report(FindingKind::RootMissing);
        return;
    }
    if let Some(d) = st.dirs.get_mut(&root) {
        d.parent = root;
    }
    if st.lost_found == 0 || !st.has(st.lost_found, DIR) {
        st.report(FindingKind::LostFoundMissing);
    }
    let mut dirs: Vec<u32> = st.dirs.keys().copied().collect();
    dirs.sort_unstable();
    let mut done: HashSet<u32> = HashSet::from([root]);
    for &dir in &dirs {
        if dir != root {
            connect(st, dir, &mut done);
        }
        check_dotdot(st, dir);
    }
}

/// Walks up from `dir` until a directory already known to be connected.
fn connect(st: &mut State, dir: u32, done: &mut HashSet<u32>) {
    let mut walk = HashSet::new();
    let mut cur = dir;
    while done.insert(cur) {
        walk.insert(cur);
        let info = st.dirs.get(&cur).copied().unwrap_or_default();
        if info.parent == 0 {
            st.report(FindingKind::UnconnectedDirectory {
                ino: cur,
                dotdot: info.dotdot,
            });
            return;
        }
        if walk.contains(&info.parent) {
            st.report(FindingKind::DirectoryLoop { ino: cur });
            return;
        }
        cur = info.parent;
    }
}

fn check_dotdot(st: &mut State, dir: u32) {
    let Some(info) = st.dirs.get(&dir).copied() else {
        return;
    };
    if info.parent != 0 && info.dotdot != info.parent {
        st.report(FindingKind::DotDotWrong {
            dir,
            found: info.dotdot,
            should_be: info.parent,
        });
    }
}
