//! Damaged images for the tests that mount must refuse: each a fresh
//! mke2fs image (two groups, so descriptors can point across them) with
//! one thing wrong, made with e2fsprogs (`debugfs -w`, including its
//! journal writer) or a plain byte edit, the way a user's image goes bad.
//!
//! Every [`Damage`] says which words a refusal must contain, so a test
//! checks that the message names the problem, and [`digest`] tells whether
//! the refusal left the image as it was.
//!
//! Invariant: builders use only e2fsprogs and the file system, never a
//! stitch crate, so the damage is made by code independent of the code
//! that must find it.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// Blocks in each of the base image's two groups (4 KiB blocks).
pub const BLOCKS_PER_GROUP: u64 = 2048;
/// The base image's size: two full groups (16 MiB).
pub const IMAGE_BYTES: u64 = 2 * BLOCKS_PER_GROUP * 4096;
/// Inodes in each group.
pub const INODES_PER_GROUP: u32 = 256;

/// One way an image is damaged.
pub struct Damage {
    /// What is wrong, for test messages.
    pub name: &'static str,
    /// Made on an ext3 base (with a journal) rather than ext2.
    pub journal: bool,
    /// Words a refusal must contain: it names the problem.
    pub says: &'static str,
    /// Damages the image at the path.
    pub apply: fn(&Path),
}

/// A fresh image at `path` from mke2fs: ext2, or ext3 with a 1024-block
/// journal; two groups of [`BLOCKS_PER_GROUP`], 256-byte inodes, mke2fs's
/// default features for the type (`resize_inode` among them).
pub fn base_image(path: &Path, journal: bool) {
    let kind = if journal { "ext3" } else { "ext2" };
    let (bpg, ipg) = (
        BLOCKS_PER_GROUP.to_string(),
        (INODES_PER_GROUP * 2).to_string(),
    );
    let mut args = vec![
        "-t", kind, "-b", "4096", "-I", "256", "-g", &bpg, "-N", &ipg,
    ];
    if journal {
        args.extend(["-J", "size=4"]);
    }
    crate::mke2fs(path, IMAGE_BYTES, &args);
}

/// A digest of the whole image, to compare before and after a refusal.
pub fn digest(path: &Path) -> (u64, u64) {
    let bytes = std::fs::read(path).unwrap();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    (bytes.len() as u64, h.finish())
}

/// Runs `debugfs -w` with `cmds`, one per line, failing the test if it
/// fails.
pub fn debugfs_w(img: &Path, cmds: &[&str]) {
    let mut child = Command::new("debugfs")
        .args(["-w", "-f", "-", img.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("debugfs (apt-get install e2fsprogs)");
    let script = cmds.join("\n");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "debugfs {cmds:?}");
}

/// The physical block of logical block `logical` of inode `ino`.
fn bmap(img: &Path, ino: u32, logical: u64) -> u64 {
    let out = Command::new("debugfs")
        .args(["-R", &format!("bmap <{ino}> {logical}")])
        .arg(img)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("bmap <{ino}> {logical}: {text}"))
}

fn zero_block(img: &Path, block: u64) {
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    f.write_all_at(&[0u8; 4096], block * 4096).unwrap();
}

/// Every damage the refusal tests use: a table, one entry per damage,
/// long because the corpus is.
pub fn corpus() -> Vec<Damage> {
    vec![
        Damage {
            name: "root is a regular file",
            journal: false,
            says: "root directory (inode 2) is a regular file, not a directory",
            apply: |p| debugfs_w(p, &["sif <2> mode 0100644"]),
        },
        Damage {
            name: "root cleared",
            journal: false,
            says: "root directory (inode 2) is deleted",
            apply: |p| debugfs_w(p, &["clri <2>"]),
        },
        Damage {
            name: "root with one link",
            journal: false,
            says: "root directory (inode 2) has 1 link",
            apply: |p| debugfs_w(p, &["sif <2> links_count 1"]),
        },
        Damage {
            name: "root's first block outside the file system",
            journal: false,
            says: "root directory (inode 2) maps its first block at 99999",
            apply: |p| debugfs_w(p, &["sif <2> block[0] 99999"]),
        },
        Damage {
            name: "image shorter than its block count",
            journal: false,
            says: "the image holds 1024 blocks but its superblock claims 4096",
            apply: |p| {
                let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
                f.set_len(IMAGE_BYTES / 4).unwrap();
            },
        },
        Damage {
            name: "descriptor block zeroed",
            journal: false,
            says: "group 0's block bitmap at block 0 lies on the group's superblock copy",
            apply: |p| zero_block(p, 1),
        },
        Damage {
            name: "inode table outside the file system",
            journal: false,
            says: "group 1's inode table at block 99999 lies outside the file system",
            apply: |p| debugfs_w(p, &["set_bg 1 inode_table 99999"]),
        },
        Damage {
            name: "block bitmap outside the file system",
            journal: false,
            says: "group 0's block bitmap at block 9000 lies outside the file system",
            apply: |p| debugfs_w(p, &["set_bg 0 block_bitmap 9000"]),
        },
        Damage {
            name: "block bitmap in another group",
            journal: false,
            says: "group 1's block bitmap at block 100 lies outside its group",
            apply: |p| debugfs_w(p, &["set_bg 1 block_bitmap 100"]),
        },
        Damage {
            name: "inode bitmap on the inode table",
            journal: false,
            says: "group 1's inode table at block 2067 lies on its inode bitmap",
            apply: |p| debugfs_w(p, &["set_bg 1 inode_bitmap 2068"]),
        },
        Damage {
            name: "free inode count above the group's",
            journal: false,
            says: "group 0's free inode count 9000 is above the 256 it has",
            apply: |p| debugfs_w(p, &["set_bg 0 free_inodes_count 9000"]),
        },
        Damage {
            name: "free block total above the block count",
            journal: false,
            says: "free_blocks_count 99999 > blocks_count 4096",
            apply: |p| debugfs_w(p, &["ssv free_blocks_count 99999"]),
        },
        Damage {
            name: "blocks per group out of range",
            journal: false,
            says: "blocks_per_group 7 out of range",
            apply: |p| debugfs_w(p, &["ssv blocks_per_group 7"]),
        },
        Damage {
            name: "reserved descriptor blocks insanely many",
            journal: false,
            says: "reserved_gdt_blocks 4000",
            apply: |p| debugfs_w(p, &["ssv reserved_gdt_blocks 4000"]),
        },
        Damage {
            name: "an unsupported feature",
            journal: false,
            says: "unsupported incompat feature `extent`",
            apply: |p| debugfs_w(p, &["feature extent"]),
        },
        Damage {
            name: "orphan list naming a reserved inode",
            journal: false,
            says: "the orphan list names inode 3",
            apply: |p| debugfs_w(p, &["ssv last_orphan 3"]),
        },
        Damage {
            name: "orphan list looping",
            journal: false,
            says: "the orphan list loops back to inode 11",
            apply: |p| debugfs_w(p, &["ssv last_orphan 11", "sif <11> dtime 11"]),
        },
        Damage {
            name: "resize inode cleared",
            journal: false,
            says: "the resize inode (7) is not a regular file",
            apply: |p| debugfs_w(p, &["clri <7>"]),
        },
        Damage {
            name: "needs recovery without a journal",
            journal: false,
            says: "the journal is missing, yet the superblock asks for recovery",
            apply: |p| debugfs_w(p, &["feature needs_recovery"]),
        },
        Damage {
            name: "journal inode cleared",
            journal: true,
            says: "the journal inode is not an in-use regular file",
            apply: |p| debugfs_w(p, &["clri <8>"]),
        },
        Damage {
            name: "journal superblock zeroed on an image needing recovery",
            journal: true,
            says: "the journal superblock: corrupt journal superblock: bad magic",
            apply: |p| {
                let at = bmap(p, 8, 0);
                debugfs_w(p, &["feature needs_recovery"]);
                zero_block(p, at);
            },
        },
        Damage {
            name: "journal replaying zeros over the descriptors",
            journal: true,
            says: "the journal replays into a damaged file system",
            apply: |p| {
                let zeros = p.with_extension("zeros");
                std::fs::write(&zeros, [0u8; 4096]).unwrap();
                let write = format!("jw -b 1 {}", zeros.display());
                debugfs_w(p, &["jo", &write, "jc"]);
                std::fs::remove_file(zeros).unwrap();
            },
        },
    ]
}
