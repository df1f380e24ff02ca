//! Journal recovery end to end. An ext3 image from our mkfs gets, by hand,
//! the state a crash leaves after a committed transaction whose home writes
//! were torn: the root directory's block scribbled over on disk, and in the
//! journal one committed transaction (descriptor, data, commit; `s_start`
//! set, `needs_recovery` set) holding the good root block and the inode
//! table block with the root's mtime changed.
//!
//! fsck must check the replayed view (clean, where the image as it is has
//! a corrupt directory) and leave the file alone; `--recover` must write
//! the replay, empty the journal and clear the flag, after which our check
//! and `e2fsck -fn` (skipped, saying so, if it is not installed) are clean.

mod common;

use common::*;
use std::path::Path;
use stitch_format::features::incompat;
use stitch_format::inode::{InodeCore, JOURNAL_INO, ROOT_INO};
use stitch_format::jbd2::blocks::{encode_descriptor, tag_flags};
use stitch_format::jbd2::{CommitBlock, DescriptorTag, JournalSuperblock};
use stitch_format::superblock::SUPERBLOCK_OFFSET;
use stitch_format::{BlockNo, GroupDesc, Inode, InodeNo, Superblock};
use stitch_fsck::{CheckOptions, Class, Report};
use stitch_testkit::{mkfs, scratch, JournalSize};

const MTIME: u32 = 1_234_567;

/// Where things are in the image, found with the format crate.
struct Layout {
    bs: u64,
    blocks_count: u32,
    /// File-system blocks of journal blocks 0..8 (all direct).
    journal: [u64; 8],
    root_dir: u64,
    /// The inode-table block holding the root inode, and its offset there.
    root_inode: (u64, usize),
}

fn read(img: &Path, offset: u64, len: usize) -> Vec<u8> {
    let f = std::fs::File::open(img).unwrap();
    let mut buf = vec![0u8; len];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, offset).unwrap();
    buf
}

fn layout(img: &Path) -> Layout {
    let sb = Superblock::decode(&read(img, SUPERBLOCK_OFFSET, 1024)).unwrap();
    let fs = stitch_format::Layout::from_superblock(&sb).unwrap();
    let bs = u64::from(fs.block_size.bytes());
    let gdt = u64::from(sb.first_data_block) + 1;
    let gd = GroupDesc::decode_raw(&read(img, gdt * bs, GroupDesc::SIZE)).unwrap();
    let inode = |ino: InodeNo| {
        let loc = fs.inode_location(ino, gd.inode_table).unwrap();
        let at = loc.block.0 * bs + loc.offset as u64;
        let i = Inode::decode(&read(img, at, usize::from(fs.inode_size))).unwrap();
        (i, (loc.block.0, loc.offset))
    };
    let (journal, _) = inode(JOURNAL_INO);
    let (root, root_inode) = inode(ROOT_INO);
    Layout {
        bs,
        blocks_count: fs.blocks_count,
        journal: std::array::from_fn(|i| journal.block_ptr(i).0),
        root_dir: root.block_ptr(0).0,
        root_inode,
    }
}

fn journal_sb(img: &Path, l: &Layout) -> JournalSuperblock {
    let buf = read(img, l.journal[0] * l.bs, l.bs as usize);
    JournalSuperblock::decode(&buf, l.bs as u32, 1 << 20).unwrap()
}

/// Writes one committed transaction copying `blocks` (home block, new
/// contents) into the journal at its first log block, and marks the
/// journal and the file system as needing recovery.
fn journal_transaction(img: &Path, l: &Layout, blocks: &[(u64, Vec<u8>)]) {
    let mut jsb = journal_sb(img, l);
    let seq = jsb.sequence;
    let n = blocks.len();
    let tags: Vec<DescriptorTag> = (0..n)
        .map(|i| DescriptorTag {
            blocknr: BlockNo(blocks[i].0),
            flags: if i > 0 { tag_flags::SAME_UUID } else { 0 }
                | if i + 1 == n { tag_flags::LAST_TAG } else { 0 },
            checksum: 0,
            uuid: (i == 0).then_some(jsb.uuid),
        })
        .collect();
    let desc = encode_descriptor(seq, &tags, jsb.tag_format(), l.bs as usize).unwrap();
    let mut log = vec![desc];
    log.extend(blocks.iter().map(|(_, data)| data.clone()));
    log.push(CommitBlock::new(seq, 1_700_000_000, 0).encode_block(l.bs as usize, None));
    let room = l.journal.len() - jsb.first as usize;
    assert!(log.len() <= room, "the log fits the journal blocks we know");
    for (i, block) in log.iter().enumerate() {
        poke(img, l.journal[jsb.first as usize + i] * l.bs, block);
    }
    jsb.start = jsb.first;
    poke(img, l.journal[0] * l.bs, &jsb.to_bytes());
    set_needs_recovery(img, true);
}

fn set_needs_recovery(img: &Path, on: bool) {
    let mut sb = Superblock::decode_raw(&read(img, SUPERBLOCK_OFFSET, 1024)).unwrap();
    sb.feature_incompat &= !incompat::RECOVER.bit;
    sb.feature_incompat |= if on { incompat::RECOVER.bit } else { 0 };
    poke(img, SUPERBLOCK_OFFSET, &sb.to_bytes());
}

/// The crash state described at the top, on a fresh ext3 image; returns
/// the layout and the good root directory block.
fn crashed_image(img: &Path) -> (Layout, Vec<u8>) {
    mkfs(img, 64 << 20, Some(JournalSize::Default));
    let l = layout(img);
    let bs = l.bs as usize;
    let good_root = read(img, l.root_dir * l.bs, bs);
    let mut table = read(img, l.root_inode.0 * l.bs, bs);
    let slot = &mut table[l.root_inode.1..];
    let mut core = InodeCore::decode_raw(slot).unwrap();
    core.mtime = MTIME;
    core.encode_into(slot);
    journal_transaction(
        img,
        &l,
        &[(l.root_dir, good_root.clone()), (l.root_inode.0, table)],
    );
    poke(img, l.root_dir * l.bs, &vec![0xAB; bs]);
    (l, good_root)
}

fn check(img: &Path, recover: bool) -> Report {
    let opts = CheckOptions { recover };
    stitch_fsck::check(img, &opts, &mut |_, _, _| {}).unwrap_or_else(|e| panic!("{e}"))
}

fn root_mtime(img: &Path, l: &Layout) -> u32 {
    let table = read(img, l.root_inode.0 * l.bs, l.bs as usize);
    InodeCore::decode_raw(&table[l.root_inode.1..])
        .unwrap()
        .mtime
}

fn have(cmd: &str) -> bool {
    std::process::Command::new(cmd).arg("-V").output().is_ok()
}

#[test]
fn fsck_checks_the_replayed_view_without_writing() {
    let dir = scratch();
    let img = dir.path().join("ext3");
    let (l, _) = crashed_image(&img);
    let before = std::fs::read(&img).unwrap();

    let r = check(&img, false);
    assert!(r.is_clean(), "the replayed view is consistent:\n{r}");
    assert!(r.needs_recovery);
    let s = r.recovery.as_ref().expect("a recovery summary");
    assert_eq!((s.transactions, s.blocks, s.applied), (1, 2, false));
    assert!(
        r.to_string()
            .contains("journal needs recovery: 1 transaction(s), 2 block(s); checked as replayed"),
        "{r}"
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["recovery"]["transactions"], 1, "{json}");
    assert!(
        std::fs::read(&img).unwrap() == before,
        "a check without --recover writes nothing"
    );

    // The damage is real: with the journal emptied, the root is corrupt.
    let empty = dir.path().join("empty");
    copy(&img, &empty);
    let mut jsb = journal_sb(&empty, &l);
    jsb.start = 0;
    poke(&empty, l.journal[0] * l.bs, &jsb.to_bytes());
    let r = check(&empty, false);
    assert!(
        r.findings.iter().any(|f| f.class == Class::Corruption),
        "{r}"
    );
}

#[test]
fn recover_writes_the_replay_and_then_the_image_is_clean() {
    let dir = scratch();
    let img = dir.path().join("ext3");
    let (l, good_root) = crashed_image(&img);
    let seq = journal_sb(&img, &l).sequence;

    let r = check(&img, true);
    assert!(r.is_clean(), "{r}");
    assert!(!r.needs_recovery);
    assert!(r.recovery.as_ref().is_some_and(|s| s.applied), "{r}");
    assert!(r
        .to_string()
        .contains("journal recovered: 1 transaction(s), 2 block(s) written"));

    assert_eq!(read(&img, l.root_dir * l.bs, l.bs as usize), good_root);
    assert_eq!(root_mtime(&img, &l), MTIME);
    let jsb = journal_sb(&img, &l);
    assert_eq!(
        (jsb.start, jsb.sequence),
        (0, seq + 2),
        "reset as the kernel resets it"
    );
    let sb = Superblock::decode(&read(&img, SUPERBLOCK_OFFSET, 1024)).unwrap();
    assert!(!sb.needs_recovery());

    let again = check(&img, false);
    assert!(
        again.is_clean() && again.recovery.is_none() && !again.needs_recovery,
        "{again}"
    );

    if !have("e2fsck") {
        eprintln!("skipped the e2fsck -fn check: e2fsck is not installed");
        return;
    }
    let r = stitch_testkit::e2fsck(&img, &["-fn"]);
    let (code, out) = (r.code, r.report());
    assert_eq!(code, 0, "e2fsck -fn after --recover:\n{out}");
}

#[test]
fn our_replay_writes_what_e2fsck_replay_writes() {
    if !have("e2fsck") {
        eprintln!("skipped: e2fsck is not installed");
        return;
    }
    let dir = scratch();
    let ours = dir.path().join("ours");
    let (l, _) = crashed_image(&ours);
    let theirs = dir.path().join("theirs");
    copy(&ours, &theirs);
    assert!(check(&ours, true).is_clean());
    // e2fsck -fy replays the journal first, then finds nothing to fix.
    let r = stitch_testkit::e2fsck(&theirs, &["-fy"]);
    let (code, out) = (r.code, r.report());
    assert_eq!(code, 0, "{out}");
    let (a, b) = (
        std::fs::read(&ours).unwrap(),
        std::fs::read(&theirs).unwrap(),
    );
    assert_eq!(a.len(), b.len());
    // Every block but the superblock's (e2fsck may stamp its own fields
    // there) is the same, the journal superblock's reset sequence included.
    let bs = l.bs as usize;
    let sb_block = SUPERBLOCK_OFFSET as usize / bs;
    for (i, (x, y)) in a.chunks(bs).zip(b.chunks(bs)).enumerate() {
        assert!(
            i == sb_block || x == y,
            "block {i} differs from e2fsck's replay"
        );
    }
    let sb = |img: &[u8]| Superblock::decode(&img[1024..2048]).unwrap();
    assert_eq!(sb(&a).feature_incompat, sb(&b).feature_incompat);
}

#[test]
fn a_transaction_outside_the_file_system_is_a_finding_and_never_written() {
    let dir = scratch();
    let img = dir.path().join("ext3");
    mkfs(&img, 64 << 20, Some(JournalSize::Default));
    let l = layout(&img);
    let far = u64::from(l.blocks_count) + 5;
    journal_transaction(&img, &l, &[(far, vec![1; l.bs as usize])]);
    let before = std::fs::read(&img).unwrap();
    for recover in [false, true] {
        let r = check(&img, recover);
        assert!(r.recovery.is_none(), "{r}");
        let f = r
            .findings
            .iter()
            .find(|f| f.message.contains("outside the file system"));
        assert!(f.is_some_and(|f| f.class == Class::Corruption), "{r}");
        assert!(
            r.to_string().contains("checked without replaying it"),
            "{r}"
        );
    }
    assert!(
        std::fs::read(&img).unwrap() == before,
        "nothing was written"
    );
}

/// The kernel discards such a journal unread; e2fsck -n names it and
/// exits 0, and so do we.
#[test]
fn journal_data_without_the_needs_recovery_flag_is_named_not_replayed() {
    let dir = scratch();
    let img = dir.path().join("ext3");
    mkfs(&img, 64 << 20, Some(JournalSize::Default));
    let l = layout(&img);
    let table = read(&img, l.root_inode.0 * l.bs, l.bs as usize);
    journal_transaction(&img, &l, &[(l.root_inode.0, table)]);
    set_needs_recovery(&img, false);
    let r = check(&img, false);
    assert!(r.recovery.is_none() && !r.needs_recovery, "{r}");
    let kinds = common::e2fsck::kinds(&r);
    assert_eq!(kinds, ["journal_data_ignored"], "{r}");
    assert_eq!(r.exit_code(), 0);
    if have("e2fsck") {
        let r = stitch_testkit::e2fsck(&img, &["-fn"]);
        let (code, out) = (r.code, r.report());
        assert_eq!(code, 0, "{out}");
        let problems = common::e2fsck::problems(&out).unwrap();
        assert_eq!(problems.len(), 1, "{out}");
        assert!(problems[0].kinds.contains(&"journal_data_ignored"));
    }
}
