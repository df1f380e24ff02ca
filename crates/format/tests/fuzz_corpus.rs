//! Replays the cargo-fuzz corpus (`fuzz/corpus/*`, including the inputs that
//! once crashed a decoder) on stable Rust, so `cargo test` keeps every input
//! the fuzzers found free of panics.

use std::path::Path;
use stitch_format::jbd2::blocks::decode_descriptor;
use stitch_format::jbd2::{CommitBlock, JournalSuperblock, RevokeBlock, TagFormat};
use stitch_format::{dir, Inode, JournalBlockNo, Superblock};

#[path = "../../../fuzz/common/jbd2_journal.rs"]
mod jbd2_journal;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let files: Vec<Vec<u8>> = std::fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert!(!files.is_empty(), "corpus {target} has seeds");
    files
}

#[test]
fn corpus_inputs_never_panic() {
    for data in corpus("superblock") {
        let _ = Superblock::decode(&data);
    }
    for data in corpus("inode") {
        let _ = Inode::decode(&data);
    }
    for data in corpus("dir_block") {
        let _ = dir::check_block(&data);
    }
    for data in corpus("journal") {
        for sel in 0..8u8 {
            let fmt = TagFormat {
                csum_v2: sel & 1 != 0,
                csum_v3: sel & 2 != 0,
                bit64: sel & 4 != 0,
            };
            let block = data.get(1..).unwrap_or_default();
            let _ = decode_descriptor(block, fmt);
            let _ = RevokeBlock::decode(block, fmt);
        }
        let _ = CommitBlock::decode(&data);
        let _ = JournalSuperblock::decode(data.get(1..).unwrap_or_default(), 4096, u32::MAX);
    }
}

#[test]
fn jbd2_recovery_corpus_recovers_without_panic_and_seeds_replay() {
    for data in corpus("jbd2_recovery") {
        jbd2_journal::run(&data);
    }
    // The hand-made seeds are real journals: each replays something, so
    // the fuzzer starts from the interesting paths, not the first check.
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/jbd2_recovery");
    let mut seeds = 0;
    for e in std::fs::read_dir(&d).unwrap() {
        let path = e.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("seed-")
        {
            continue;
        }
        seeds += 1;
        let (jsb, blocks, _) = jbd2_journal::journal(&std::fs::read(&path).unwrap());
        let read =
            |n: JournalBlockNo| Ok::<_, ()>(blocks.get(&n.0).cloned().unwrap_or(vec![0; 1024]));
        let r = stitch_format::jbd2::recover(&jsb, read).unwrap();
        assert!(
            r.transactions > 0 && !r.blocks.is_empty(),
            "{}",
            path.display()
        );
    }
    assert_eq!(seeds, 4, "seed-* files in {}", d.display());
}

#[test]
fn fuzzer_found_dir_header_crash_is_an_error() {
    let data = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/dir_block/regression-header-7-bytes"),
    )
    .unwrap();
    assert_eq!(data.len(), 7);
    assert!(dir::check_block(&data).is_err());
}
