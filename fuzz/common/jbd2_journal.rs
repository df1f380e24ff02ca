//! The input of the `jbd2_recovery` fuzz target, shared with the corpus
//! replay in `crates/format/tests/fuzz_corpus.rs` (included by path in
//! both, so the two read an input the same way).
//!
//! An input is a journal of 1 KiB blocks: its first 1024 bytes are the
//! journal superblock (magic, type and block size forced, checksum
//! recomputed so the fuzzer reaches the log), then records of a 2-byte
//! big-endian journal block number and that block's 1024 bytes. Blocks not
//! given read as zeros; a non-zero `s_errno` names a block whose read
//! fails.

use std::collections::BTreeMap;
use stitch_format::jbd2::{recover, BlockType, JournalSuperblock, JBD2_MAGIC};

pub const BS: usize = 1024;

/// The journal an input describes: superblock, blocks, failing block.
pub fn journal(data: &[u8]) -> (JournalSuperblock, BTreeMap<u32, Vec<u8>>, u32) {
    let mut head = data.get(..BS).unwrap_or(data).to_vec();
    head.resize(BS, 0);
    let mut jsb = JournalSuperblock::decode_raw(&head).unwrap_or_default();
    jsb.magic = JBD2_MAGIC;
    jsb.blocktype = BlockType::SuperblockV2 as u32;
    jsb.blocksize = BS as u32;
    jsb.update_checksum();
    let mut blocks = BTreeMap::new();
    for rec in data.get(BS..).unwrap_or_default().chunks(2 + BS) {
        if let [hi, lo, block @ ..] = rec {
            let mut block = block.to_vec();
            block.resize(BS, 0);
            blocks.insert(u32::from(u16::from_be_bytes([*hi, *lo])), block);
        }
    }
    blocks.insert(0, jsb.to_bytes());
    let failing = jsb.errno;
    (jsb, blocks, failing)
}

/// Recovers the journal of `data`: it must not panic, must read a bounded
/// number of blocks, and what it replays must be whole blocks.
pub fn run(data: &[u8]) {
    let (jsb, blocks, failing) = journal(data);
    let mut reads = 0u64;
    let result = recover(&jsb, |n| {
        reads += 1;
        if n.0 != 0 && n.0 == failing {
            return Err("injected read error");
        }
        Ok(blocks.get(&n.0).cloned().unwrap_or_else(|| vec![0; BS]))
    });
    // Three passes of at most the log area, plus the data blocks of the
    // descriptor that crosses the end of the area (at most BS / 8 tags).
    let area = u64::from(jsb.maxlen.saturating_sub(jsb.first));
    assert!(
        reads <= 3 * (area + BS as u64 / 8),
        "{reads} reads, area {area}"
    );
    if let Ok(r) = result {
        assert!(r.blocks.values().all(|b| b.len() == BS));
        assert!(r.transactions == 0 || jsb.start != 0);
    }
}
