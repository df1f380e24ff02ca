//! Agreement with `e2fsck -fn` on a corpus: images made by our mkfs and by
//! mke2fs (ext2, ext3, 4 KiB and 1 KiB blocks), filled by the kernel through
//! a loop mount, and copies damaged on purpose in each way fsck must catch.
//!
//! For every image: both checkers say clean, or both say not; every problem
//! e2fsck names maps (table in `common/e2fsck.rs`) to a kind we name; the
//! bitmap ranges e2fsck lists are covered by ours; and for a damaged image,
//! the damage's kind is reported with the class docs/design.md gives it.
//!
//! Kernel mounts need root (CI runs as root); without it, the filled images
//! and the damages that need their files are skipped, saying so.

mod common;

use common::e2fsck as e2;
use common::*;
use std::path::{Path, PathBuf};
use stitch_fsck::{Class, Report};
use stitch_testkit::{is_root, mke2fs, mkfs, scratch, JournalSize};

/// What a damaged image must show besides agreement.
#[derive(Clone, Copy)]
struct Expect {
    /// A kind we must report, and its class.
    kind: Option<(&'static str, Class)>,
    needs_recovery: bool,
}

const CLEAN: Expect = Expect {
    kind: None,
    needs_recovery: false,
};

const fn finds(kind: &'static str, class: Class) -> Expect {
    Expect {
        kind: Some((kind, class)),
        needs_recovery: false,
    }
}

/// Runs both checkers on `img` and asserts agreement and `expect`.
fn check(img: &Path, expect: Expect) -> Option<Report> {
    let r = stitch_testkit::e2fsck(img, &["-fn"]);
    let (code, out) = (r.code, r.report());
    let ours = stitch_fsck::check(img, &Default::default(), &mut |_, _, _| {});
    if code == 8 {
        let err = ours.expect_err("e2fsck could not check it, neither should we");
        assert_eq!(err.exit_code(), 8, "{err}");
        return None;
    }
    let report = ours.unwrap_or_else(|e| panic!("{}: {e}\ne2fsck:\n{out}", img.display()));
    let ctx = || {
        format!(
            "{}\ne2fsck (exit {code}):\n{out}\nours:\n{report}",
            img.display()
        )
    };
    let problems = e2::problems(&out).unwrap_or_else(|e| panic!("{e}\n{}", ctx()));
    // Clean for e2fsck: exit 0 and nothing said but superblock totals
    // (which we report as notes, and which leave us clean too).
    let e2_clean = code == 0 && problems.iter().all(e2::Problem::is_note);
    assert_eq!(
        e2_clean,
        report.is_clean(),
        "clean verdicts differ: {}",
        ctx()
    );
    assert_eq!(
        code & 4,
        report.exit_code() & 4,
        "exit codes differ: {}",
        ctx()
    );
    let kinds = e2::kinds(&report);
    for p in &problems {
        let named = p.kinds.iter().any(|k| kinds.iter().any(|o| o == k));
        assert!(
            named,
            "e2fsck names {:?}, we name none of {:?}: {}",
            p.line,
            p.kinds,
            ctx()
        );
    }
    check_bitmap_ranges(&problems, &report, &ctx);
    if let Some((kind, class)) = expect.kind {
        let hit = report.findings.iter().zip(&kinds).find(|(_, k)| *k == kind);
        let (f, _) = hit.unwrap_or_else(|| panic!("no {kind} finding: {}", ctx()));
        assert_eq!(f.class, class, "class of {kind}: {}", ctx());
    }
    assert_eq!(report.needs_recovery, expect.needs_recovery, "{}", ctx());
    Some(report)
}

/// Every block or inode e2fsck lists as a bitmap difference is in one of
/// our ranges of the matching kind.
fn check_bitmap_ranges(problems: &[e2::Problem], report: &Report, ctx: &dyn Fn() -> String) {
    let json = serde_json::to_value(report).unwrap();
    for p in problems
        .iter()
        .filter(|p| p.line.contains("bitmap differences"))
    {
        let what = if p.line.starts_with("Block") {
            "blocks"
        } else {
            "inodes"
        };
        for (sign, a, b) in e2::bitmap_ranges(&p.line) {
            let kind = match sign {
                '-' => format!("{what}_leaked"),
                _ => format!("{what}_marked_free"),
            };
            assert!(
                e2::covered(&json, &kind, a, b),
                "{sign}{a}..{b} not in our {kind}: {}",
                ctx()
            );
        }
    }
}

/// The clean images of the corpus, made in `dir`.
fn corpus(dir: &Path, root: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut add = |name: &str, make: &dyn Fn(&Path), fill: bool| {
        let p = dir.join(name);
        make(&p);
        if fill && root {
            fill_with_kernel(&p, &dir.join("mnt"));
        }
        out.push(p);
    };
    add("ours-ext2-64m", &|p| mkfs(p, 64 << 20, None), true);
    add("ours-ext2-300m", &|p| mkfs(p, 300 << 20, None), false);
    add(
        "ours-ext3-64m",
        &|p| mkfs(p, 64 << 20, Some(JournalSize::Default)),
        true,
    );
    add(
        "ours-ext3-200m",
        &|p| mkfs(p, 200 << 20, Some(JournalSize::Default)),
        false,
    );
    add(
        "mke2fs-ext2-64m",
        &|p| mke2fs(p, 64 << 20, &["-t", "ext2", "-b", "4096"]),
        true,
    );
    add(
        "mke2fs-ext2-300m",
        &|p| mke2fs(p, 300 << 20, &["-t", "ext2", "-b", "4096"]),
        true,
    );
    add(
        "mke2fs-ext2-noresize",
        &|p| {
            mke2fs(
                p,
                96 << 20,
                &["-t", "ext2", "-b", "4096", "-O", "^resize_inode,^dir_index"],
            )
        },
        true,
    );
    add(
        "mke2fs-ext3-128m",
        &|p| mke2fs(p, 128 << 20, &["-t", "ext3", "-b", "4096"]),
        true,
    );
    add(
        "mke2fs-ext2-1k",
        &|p| mke2fs(p, 48 << 20, &["-t", "ext2", "-b", "1024"]),
        true,
    );
    out
}

#[test]
fn clean_corpus_agrees() {
    let root = is_root();
    if !root {
        eprintln!("not root: kernel-filled images skipped (mount -o loop needs root)");
    }
    let dir = scratch();
    for img in corpus(dir.path(), root) {
        let r = check(&img, CLEAN).unwrap();
        assert!(r.is_clean(), "{}: {r}", img.display());
        assert!(
            r.summary.inodes_used >= 11,
            "{}: {:?}",
            img.display(),
            r.summary
        );
    }
}

/// A damage: its name, whether it needs the kernel-filled files, how to
/// make it, and what must be found.
type Damage = (&'static str, bool, fn(&Path), Expect);

fn dbg(img: &Path, cmds: &[&str]) {
    debugfs_w(img, &cmds.iter().map(|s| s.to_string()).collect::<Vec<_>>());
}

/// Byte offset of entry field `field` of the entry at `entry_off` in
/// logical block 0 of directory `path`.
fn dirent_offset(img: &Path, path: &str, entry_off: u64, field: u64) -> u64 {
    bmap(img, path, 0) * block_size(img) + entry_off + field
}

const DAMAGES: &[Damage] = &[
    (
        "inode-bit-cleared",
        true,
        |p| dbg(p, &["freei /a/f1"]),
        finds("inodes_marked_free", Class::Corruption),
    ),
    (
        "unused-block-bit-set",
        false,
        |p| dbg(p, &["setb 15000"]),
        finds("blocks_leaked", Class::Leak),
    ),
    (
        "unused-inode-bit-set",
        false,
        |p| dbg(p, &["seti <16000>"]),
        finds("inodes_leaked", Class::Leak),
    ),
    (
        "link-count-bumped",
        true,
        |p| dbg(p, &["sif /a/b/f2 links_count 4"]),
        finds("link_count_too_high", Class::Leak),
    ),
    (
        "link-count-lowered",
        true,
        |p| dbg(p, &["sif /a/f1 links_count 1"]),
        finds("link_count_too_low", Class::Corruption),
    ),
    (
        "lost-found-count-bumped",
        false,
        |p| dbg(p, &["sif <11> links_count 3"]),
        finds("link_count_too_high", Class::Leak),
    ),
    (
        "lost-found-count-lowered",
        false,
        |p| dbg(p, &["sif <11> links_count 1"]),
        finds("link_count_too_low", Class::Corruption),
    ),
    (
        "block-owned-twice",
        true,
        |p| {
            let b = bmap(p, "/a/f1", 0);
            dbg(p, &[&format!("sif /big block[0] {b}")]);
        },
        finds("block_claimed_twice", Class::Corruption),
    ),
    (
        "dangling-entry",
        false,
        |p| dbg(p, &["ln <15000> /dangling"]),
        finds("dangling_entry", Class::Corruption),
    ),
    (
        "rec-len-corrupt",
        false,
        |p| poke(p, dirent_offset(p, "/", 12, 4), &[5, 0]),
        finds("dir_block_corrupt", Class::Corruption),
    ),
    (
        "dotdot-broken",
        true,
        |p| {
            let d = ino_of(p, "/d");
            poke(p, dirent_offset(p, "/a/b", 12, 0), &d.to_le_bytes());
        },
        finds("dot_dot_wrong", Class::Corruption),
    ),
    (
        "file-type-wrong",
        false,
        |p| poke(p, dirent_offset(p, "/", 24, 7), &[1]),
        finds("file_type_wrong", Class::Corruption),
    ),
    (
        "size-too-small",
        true,
        |p| dbg(p, &["sif /big size 4096"]),
        finds("bad_size", Class::Corruption),
    ),
    (
        "dir-size-too-large",
        false,
        |p| dbg(p, &["sif / size 409600"]),
        finds("bad_size", Class::Corruption),
    ),
    (
        "blocks-count-too-high",
        true,
        |p| dbg(p, &["sif /a/f1 blocks 64"]),
        finds("bad_block_count", Class::Leak),
    ),
    (
        "blocks-count-too-low",
        true,
        |p| dbg(p, &["sif /a/b/f2 blocks 8"]),
        finds("bad_block_count", Class::Corruption),
    ),
    (
        "group-free-blocks",
        false,
        |p| dbg(p, &["set_bg 0 free_blocks_count 7"]),
        finds("group_free_blocks_wrong", Class::Leak),
    ),
    (
        "group-free-inodes",
        false,
        |p| dbg(p, &["set_bg 0 free_inodes_count 7"]),
        finds("group_free_inodes_wrong", Class::Leak),
    ),
    (
        "group-dirs",
        false,
        |p| dbg(p, &["set_bg 0 used_dirs_count 9"]),
        finds("group_dirs_wrong", Class::Leak),
    ),
    (
        "sb-free-blocks",
        false,
        |p| dbg(p, &["ssv free_blocks_count 100"]),
        finds("free_blocks_wrong", Class::Note),
    ),
    (
        "sb-free-inodes",
        false,
        |p| dbg(p, &["ssv free_inodes_count 100"]),
        finds("free_inodes_wrong", Class::Note),
    ),
    (
        "orphan",
        true,
        |p| {
            let i = ino_of(p, "/big");
            dbg(
                p,
                &[
                    "sif /big links_count 0",
                    "unlink /big",
                    &format!("ssv last_orphan {i}"),
                ],
            );
        },
        finds("orphan", Class::Leak),
    ),
    (
        "unattached-file",
        true,
        |p| dbg(p, &["unlink /a/b/f2"]),
        finds("link_count_too_high", Class::Leak),
    ),
    (
        "unconnected-dir",
        true,
        |p| dbg(p, &["unlink /e"]),
        finds("unconnected_directory", Class::Leak),
    ),
    (
        "in-use-with-dtime",
        false,
        |p| dbg(p, &["sif <11> dtime 12345678"]),
        finds("in_use_with_dtime", Class::Corruption),
    ),
    (
        "illegal-block",
        true,
        |p| dbg(p, &["sif /a/b/f2 block[1] 4000000000"]),
        finds("illegal_block", Class::Corruption),
    ),
    (
        "invalid-symlink",
        true,
        |p| dbg(p, &["sif /fastlink size 70"]),
        finds("invalid_symlink", Class::Corruption),
    ),
    (
        "bad-mode",
        true,
        |p| dbg(p, &["sif /a/f1 mode 0170644"]),
        finds("bad_inode", Class::Corruption),
    ),
];

#[test]
fn damaged_ext2_agrees() {
    let root = is_root();
    let dir = scratch();
    let base = dir.path().join("base");
    mke2fs(&base, 64 << 20, &["-t", "ext2", "-b", "4096"]);
    if root {
        fill_with_kernel(&base, &dir.path().join("mnt"));
    } else {
        eprintln!("not root: damages that need kernel-made files are skipped");
    }
    check(&base, CLEAN);
    let mut ran = 0;
    for (name, needs_files, damage, expect) in DAMAGES {
        if *needs_files && !root {
            eprintln!("skipped {name}: needs kernel-filled files");
            continue;
        }
        let img = dir.path().join(name);
        copy(&base, &img);
        damage(&img);
        let r = check(&img, *expect).unwrap();
        assert!(!r.findings.is_empty(), "{name}: damage not reported");
        let kinds = e2::kinds(&r);
        eprintln!("{name}: exit {} {kinds:?}", r.exit_code());
        ran += 1;
    }
    assert!(ran >= 15, "only {ran} damages ran");
}

#[test]
fn journal_needing_recovery_is_clean_but_flagged() {
    let dir = scratch();
    let img = dir.path().join("ext3");
    mke2fs(&img, 64 << 20, &["-t", "ext3", "-b", "4096"]);
    dbg(&img, &["feature needs_recovery"]);
    let expect = Expect {
        kind: None,
        needs_recovery: true,
    };
    let r = check(&img, expect).unwrap();
    assert!(r.is_clean(), "{r}");
}

#[test]
fn bad_magic_uses_backup_or_fails_like_e2fsck() {
    let dir = scratch();
    // Several groups: e2fsck and we fall back to group 1's copy.
    let multi = dir.path().join("multi");
    mke2fs(&multi, 300 << 20, &["-t", "ext2", "-b", "4096"]);
    poke(&multi, 1024 + 0x38, &[0, 0]);
    let r = check(&multi, finds("superblock_corrupt", Class::Corruption)).unwrap();
    assert!(!r.is_clean());
    // One group: no backup, both give up with exit 8.
    let single = dir.path().join("single");
    mke2fs(&single, 64 << 20, &["-t", "ext2", "-b", "4096"]);
    poke(&single, 1024 + 0x38, &[0, 0]);
    assert!(
        check(&single, CLEAN).is_none(),
        "expected an operational error"
    );
}

#[test]
fn garbage_is_an_error_or_a_finding_never_a_panic() {
    let dir = scratch();
    let img = dir.path().join("img");
    mkfs(&img, 64 << 20, None);
    // Scribble over the root directory's block and the first inode table block.
    let bs = block_size(&img);
    let root_blk = bmap(&img, "/", 0);
    poke(&img, root_blk * bs, &[0xAB; 4096]);
    let r = stitch_fsck::check(&img, &Default::default(), &mut |_, _, _| {}).unwrap();
    assert!(
        r.findings.iter().any(|f| f.class == Class::Corruption),
        "{r}"
    );
}
