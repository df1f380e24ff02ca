//! Shared helpers of the agreement tests: filling images through the
//! kernel, damaging them with debugfs or byte edits, and running both
//! checkers. Scratch directories, fresh images and e2fsck come from
//! stitch-testkit.

#![allow(dead_code)]

pub mod e2fsck;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

pub fn run(cmd: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// Fills `img` through a kernel loop mount: nested directories, small,
/// double-indirect and sparse files, fast and slow symlinks, hard links, an
/// empty directory and a directory of many files.
pub fn fill_with_kernel(img: &Path, mnt: &Path) {
    let guard =
        stitch_testkit::LoopMount::new(img, mnt, "").unwrap_or_else(|e| panic!("mount: {e}"));
    let p = |s: &str| mnt.join(s);
    std::fs::create_dir_all(p("a/b/c")).unwrap();
    std::fs::create_dir_all(p("d")).unwrap();
    std::fs::create_dir_all(p("e")).unwrap();
    std::fs::write(p("a/f1"), b"hello\n").unwrap();
    std::fs::write(p("a/b/f2"), vec![7u8; 10_000]).unwrap();
    std::fs::write(p("a/b/c/f3"), vec![1u8; 100_000]).unwrap();
    let big: Vec<u8> = (0..6 << 20).map(|i: u32| (i % 251) as u8).collect();
    std::fs::write(p("big"), big).unwrap();
    let sparse = std::fs::File::create(p("sparse")).unwrap();
    sparse.write_all_at(b"end", 40 << 20).unwrap();
    sparse.write_all_at(b"start", 0).unwrap();
    std::os::unix::fs::symlink("a/f1", p("fastlink")).unwrap();
    std::os::unix::fs::symlink("x".repeat(200), p("slowlink")).unwrap();
    std::fs::hard_link(p("a/f1"), p("d/hl")).unwrap();
    for i in 0..300 {
        std::fs::write(p(&format!("d/f{i}")), format!("{i}\n")).unwrap();
    }
    drop(sparse);
    guard.unmount();
}

/// Runs debugfs -w with `cmds` (one per line).
pub fn debugfs_w(img: &Path, cmds: &[String]) {
    let cmds: Vec<&str> = cmds.iter().map(String::as_str).collect();
    stitch_testkit::damaged::debugfs_w(img, &cmds);
}

/// Output of a read-only debugfs request.
pub fn debugfs_r(img: &Path, req: &str) -> String {
    run("debugfs", &["-R", req, img.to_str().unwrap()]).1
}

pub fn ino_of(img: &Path, path: &str) -> u32 {
    let out = debugfs_r(img, &format!("stat {path}"));
    let tail = out
        .split("Inode: ")
        .nth(1)
        .unwrap_or_else(|| panic!("stat {path}: {out}"));
    tail.split_whitespace().next().unwrap().parse().unwrap()
}

/// Physical block of logical block `logical` of `path`.
pub fn bmap(img: &Path, path: &str, logical: u64) -> u64 {
    let out = debugfs_r(img, &format!("bmap {path} {logical}"));
    out.lines()
        .filter_map(|l| l.trim().parse().ok())
        .next()
        .unwrap_or_else(|| panic!("bmap {path}: {out}"))
}

pub fn block_size(img: &Path) -> u64 {
    let out = run("dumpe2fs", &["-h", img.to_str().unwrap()]).1;
    let line = out.lines().find(|l| l.starts_with("Block size:")).unwrap();
    line.split_whitespace().last().unwrap().parse().unwrap()
}

pub fn poke(img: &Path, offset: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

pub fn copy(from: &Path, to: &Path) {
    let (code, text) = run(
        "cp",
        &[
            "--sparse=always",
            from.to_str().unwrap(),
            to.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{text}");
}
