//! Inode slots of 128 or 256 bytes: decode, then re-encode must give back the
//! same bytes; symlink and device readers must not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stitch_format::{symlink, Inode};

fuzz_target!(|data: &[u8]| {
    let Ok(inode) = Inode::decode(data) else { return };
    let mut again = data.to_vec();
    inode.encode_into(&mut again);
    assert_eq!(again, data);
    let _ = inode.device();
    let _ = inode.check_mapping_supported();
    let _ = symlink::fast_target(&inode);
    let _ = symlink::slow_target(&inode, data);
});
