//! JBD2 blocks: the first byte picks the tag format, the rest is one log
//! block read as a journal superblock, descriptor, commit and revoke block.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stitch_format::jbd2::blocks::{decode_descriptor, encode_descriptor, verify_tail_checksum};
use stitch_format::jbd2::{BlockHeader, CommitBlock, JournalSuperblock, RevokeBlock, TagFormat};
use stitch_format::Structure;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, block)) = data.split_first() else { return };
    let fmt = TagFormat { csum_v2: sel & 1 != 0, csum_v3: sel & 2 != 0, bit64: sel & 4 != 0 };
    let _ = BlockHeader::parse(block);
    if let Ok(jsb) = JournalSuperblock::decode(block, 1024, u32::MAX) {
        assert!(jsb.first < jsb.maxlen);
        let _ = jsb.tag_format().tag_bytes();
    }
    if let Ok((seq, tags)) = decode_descriptor(block, fmt) {
        assert!(!tags.is_empty());
        // Tags that decoded must re-encode into a block of the same size.
        encode_descriptor(seq, &tags, fmt, block.len()).unwrap();
    }
    let _ = verify_tail_checksum(block, 1, Structure::JournalDescriptor);
    let _ = CommitBlock::decode(block);
    let _ = CommitBlock::verify_csum_v2v3(block, 1);
    if let Ok(r) = RevokeBlock::decode(block, fmt) {
        assert_eq!(r.encode(fmt, block.len()).unwrap()[..16], block[..16]);
    }
});
