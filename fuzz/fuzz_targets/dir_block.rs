//! Directory blocks: iteration must stop with an error on bad entries, and
//! edits on a valid block must keep it valid.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stitch_format::{dir, FileType, InodeNo};

fuzz_target!(|data: &[u8]| {
    let n = dir::entries(data).count();
    assert!(n <= data.len() / 12 + 1);
    if dir::check_block(data).is_err() {
        return;
    }
    let mut block = data.to_vec();
    let name = b"fuzz-entry";
    if dir::insert(&mut block, name, InodeNo(12), FileType::Regular).unwrap() {
        dir::check_block(&block).unwrap();
        assert!(dir::lookup(&block, name).unwrap().is_some());
        assert!(dir::remove(&mut block, name).unwrap().is_some());
        dir::check_block(&block).unwrap();
    }
});
