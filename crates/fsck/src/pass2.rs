//! Pass 2: every directory block, read in block order. Checks the record
//! chain (`rec_len`, names), `.` and `..`, what each entry names (a legal,
//! used inode of the type the entry says), counts every entry toward its
//! inode's link count, and records each directory's parent for pass 3.
//!
//! Invariant: a block whose record chain breaks is reported at the broken
//! offset and its later entries are not trusted (not counted), as e2fsck
//! does when it may not salvage; every other problem is per entry and the
//! walk goes on.

use crate::dirent::lenient_entry;
use crate::error::FsckError;
use crate::finding::FindingKind;
use crate::fs::Fs;
use crate::image::Image;
use crate::state::{DirBlock, State, BAD, DIR, REG, USED};
use crate::Phase;
use stitch_format::dir;
use stitch_format::inode::ROOT_INO;

pub fn run(
    img: &Image,
    fs: &Fs,
    st: &mut State,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> Result<(), FsckError> {
    let mut blocks = std::mem::take(&mut st.dir_blocks);
    report_holes(st, &mut blocks);
    blocks.sort_unstable_by_key(|d| d.block);
    let nums: Vec<u32> = blocks.iter().map(|d| d.block).collect();
    let total = nums.len() as u64;
    img.read_sorted(&nums, |i, buf| {
        check_block(fs, st, blocks[i], buf);
        if i % 4096 == 0 {
            progress(Phase::Directories, i as u64, total);
        }
    })?;
    progress(Phase::Directories, total, total);
    Ok(())
}

/// Unmapped blocks before a directory's last block (e2fsck pass 2).
fn report_holes(st: &mut State, blocks: &mut [DirBlock]) {
    blocks.sort_unstable_by_key(|d| (d.dir, d.logical));
    let mut prev: Option<(u32, u64)> = None;
    for d in blocks.iter() {
        let from = match prev {
            Some((dir, l)) if dir == d.dir => l + 1,
            _ => 0,
        };
        for logical in from..d.logical {
            st.report(FindingKind::DirectoryHole {
                dir: d.dir,
                logical,
            });
        }
        prev = Some((d.dir, d.logical));
    }
}

/// One decoded entry, whatever state its name is in.
struct Entry<'a> {
    ino: u32,
    name: &'a [u8],
    file_type: u8,
    /// 0 for the first entry of block 0, 1 for the second, then 2.
    dot_state: u32,
}

fn check_block(fs: &Fs, st: &mut State, db: DirBlock, buf: &[u8]) {
    let mut off = 0;
    let mut dot_state = if db.logical == 0 { 0 } else { 2 };
    while off < buf.len() {
        let (e, rec_len) = match dir::entry_at(buf, off) {
            Ok(e) => (
                Entry {
                    ino: e.inode.0,
                    name: e.name,
                    file_type: e.file_type,
                    dot_state,
                },
                e.rec_len,
            ),
            Err(err) => match lenient_entry(buf, off) {
                Some(l) => (
                    Entry {
                        ino: l.inode,
                        name: l.name,
                        file_type: l.file_type,
                        dot_state,
                    },
                    l.rec_len,
                ),
                None => {
                    let reason = err.in_block(u64::from(db.block)).to_string();
                    st.report(FindingKind::DirBlockCorrupt {
                        dir: db.dir,
                        logical: db.logical,
                        block: db.block,
                        offset: off,
                        reason,
                    });
                    return;
                }
            },
        };
        entry(fs, st, db.dir, &e);
        off += rec_len;
        dot_state = (dot_state + 1).min(2);
    }
}

fn name_of(e: &Entry) -> String {
    String::from_utf8_lossy(e.name).into_owned()
}

fn entry(fs: &Fs, st: &mut State, dir: u32, e: &Entry) {
    match e.dot_state {
        0 => check_dot(st, dir, e),
        1 => check_dotdot(st, dir, e),
        _ => {}
    }
    if e.ino == 0 {
        return;
    }
    if !entry_problems(fs, st, dir, e) {
        return;
    }
    if !st.has(e.ino, USED) {
        st.report(FindingKind::DanglingEntry {
            dir,
            name: name_of(e),
            ino: e.ino,
        });
    }
    check_file_type(fs, st, dir, e);
    if e.dot_state > 1 && e.ino != ROOT_INO.0 && st.has(e.ino, DIR) {
        set_parent(st, dir, e);
    }
    if let Some(i) = st.inode_mut(e.ino) {
        i.counted = i.counted.saturating_add(1);
    }
    if dir == ROOT_INO.0 && e.name == b"lost+found" {
        st.lost_found = e.ino;
    }
}

fn check_dot(st: &mut State, dir: u32, e: &Entry) {
    if e.name != b"." {
        st.report(FindingKind::MissingDot { dir });
    } else if e.ino != dir {
        st.report(FindingKind::BadDot { dir, found: e.ino });
    }
}

fn check_dotdot(st: &mut State, dir: u32, e: &Entry) {
    if e.name != b".." || e.ino == 0 {
        st.report(FindingKind::MissingDotDot { dir });
    } else if let Some(d) = st.dirs.get_mut(&dir) {
        d.dotdot = e.ino;
    }
}

/// e2fsck's per-entry problems, in its order; `false` if the entry must
/// not be counted (a bad inode number).
fn entry_problems(fs: &Fs, st: &mut State, dir: u32, e: &Entry) -> bool {
    let name = name_of(e);
    let rest = e.dot_state > 1;
    if (e.ino != ROOT_INO.0 && e.ino < fs.first_ino) || e.ino > fs.inodes_count() {
        st.report(FindingKind::EntryBadInode {
            dir,
            name,
            ino: e.ino,
        });
        return false;
    }
    if rest && e.ino == dir {
        st.report(FindingKind::LinkToDot {
            dir,
            name: name.clone(),
        });
    }
    if rest && (e.name == b"." || e.name == b"..") {
        st.report(FindingKind::DuplicateDot { dir, name });
    } else if rest && e.ino == ROOT_INO.0 {
        st.report(FindingKind::LinkToRoot { dir, name });
    } else if e.name.is_empty() || e.name.contains(&b'/') || e.name.contains(&0) {
        st.report(FindingKind::BadName {
            dir,
            ino: e.ino,
            name,
        });
    }
    true
}

fn check_file_type(fs: &Fs, st: &mut State, dir: u32, e: &Entry) {
    let should_be = if !fs.filetype {
        0
    } else if st.has(e.ino, DIR) {
        2
    } else if st.has(e.ino, REG) {
        1
    } else if st.has(e.ino, BAD) {
        0
    } else {
        st.inode(e.ino).map_or(0, |i| i.ftype)
    };
    if e.file_type != should_be {
        let (name, ino, found) = (name_of(e), e.ino, e.file_type);
        st.report(FindingKind::FileTypeWrong {
            dir,
            name,
            ino,
            found,
            should_be,
        });
    }
}

fn set_parent(st: &mut State, dir: u32, e: &Entry) {
    let Some(d) = st.dirs.get_mut(&e.ino) else {
        return;
    };
    if d.parent == 0 {
        d.parent = dir;
    } else {
        st.report(FindingKind::LinkToDirectory {
            dir,
            name: name_of(e),
            ino: e.ino,
        });
    }
}
