//! Reads a journal the Linux kernel wrote: mke2fs makes an ext3 image, the
//! kernel mounts it and writes files, and every descriptor and commit block
//! left in the log must decode with the sequence numbers chaining up.
//! Skipped (with a message) when not root, since it needs a loop mount.

mod common;

use common::{block, read_at};
use std::process::Command;
use stitch_format::indirect::pointer;
use stitch_format::jbd2::blocks::decode_descriptor;
use stitch_format::jbd2::{BlockHeader, BlockType, CommitBlock, JournalSuperblock};
use stitch_format::{BlockNo, Superblock};
use stitch_testkit::{mke2fs, scratch};

#[test]
fn kernel_written_log_decodes() {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout)
        .unwrap_or_default();
    if uid != b"0\n" {
        println!("SKIPPED kernel_written_log_decodes: needs root for mount -o loop");
        return;
    }
    let dir = scratch();
    let path = dir.path().join("k.img");
    mke2fs(&path, 64 << 20, &["-t", "ext3", "-b", "4096", "-I", "256"]);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let Ok(mount) = stitch_testkit::LoopMount::new(&path, &mnt, "") else {
        println!("SKIPPED kernel_written_log_decodes: loop mount failed");
        return;
    };
    for i in 0..20 {
        std::fs::write(mnt.join(format!("f{i}")), b"data").unwrap();
        std::fs::create_dir(mnt.join(format!("d{i}"))).unwrap();
    }
    Command::new("sync").status().unwrap();
    mount.unmount();

    let sb = Superblock::decode(&read_at(&path, 1024, 1024)).unwrap();
    // A 1024-block journal needs the direct and the single indirect level;
    // `s_jnl_blocks` backs up the journal inode's i_block.
    let ind = block(&path, 4096, BlockNo::from(sb.jnl_blocks[12]));
    let phys = |j: u32| match j {
        0..=11 => BlockNo::from(sb.jnl_blocks[j as usize]),
        _ => pointer(&ind, j - 12).unwrap(),
    };
    let jsb = JournalSuperblock::decode(&block(&path, 4096, phys(0)), 4096, 1024).unwrap();
    let fmt = jsb.tag_format();
    let (mut descriptors, mut commits) = (0, 0);
    for j in jsb.first..jsb.maxlen {
        let b = block(&path, 4096, phys(j));
        match BlockHeader::parse(&b) {
            Some((BlockType::Descriptor, seq)) => {
                let (s, tags) = decode_descriptor(&b, fmt).unwrap();
                assert_eq!(s, seq);
                assert!(tags
                    .iter()
                    .all(|t| t.blocknr < BlockNo::from(sb.blocks_count())));
                descriptors += 1;
            }
            Some((BlockType::Commit, seq)) => {
                assert_eq!(CommitBlock::decode(&b).unwrap().sequence, seq);
                commits += 1;
            }
            _ => {}
        }
    }
    assert!(
        descriptors > 0 && commits > 0,
        "{descriptors} descriptors, {commits} commits"
    );
}
