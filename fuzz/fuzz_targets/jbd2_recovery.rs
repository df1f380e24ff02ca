//! Journal recovery over a whole journal made from the input (format:
//! `fuzz/common/jbd2_journal.rs`): `recover` must not panic or loop.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../common/jbd2_journal.rs"]
mod jbd2_journal;

fuzz_target!(|data: &[u8]| jbd2_journal::run(data));
