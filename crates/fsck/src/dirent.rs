//! LOCAL WORKAROUND for a gap in `stitch-format`: `dir::entry_at` refuses an
//! entry whose name holds `/` or NUL, is empty, or whose file type is above
//! 7, with the same error as a broken `rec_len`, and its iterator stops
//! there. e2fsck treats those as problems *of the entry* and goes on with the
//! next one, so to name what e2fsck names this checker must too.
//!
//! [`lenient_entry`] reads the header with `stitch_format::codec` (no
//! offsets of its own beyond the header layout documented in `dir`), and
//! only when the header itself is sound. Remove it once the format crate
//! offers a lenient decoder.

use stitch_format::codec::{read, Le};
use stitch_format::dir::{rec_len_for, HEADER};

/// An entry whose header is sound but whose name or type is not.
pub struct Lenient<'a> {
    pub inode: u32,
    pub rec_len: usize,
    pub name: &'a [u8],
    pub file_type: u8,
}

/// The entry at `off` if its `rec_len` and `name_len` are sound (block
/// sizes below 64 KiB only, as the checker supports).
pub fn lenient_entry(block: &[u8], off: usize) -> Option<Lenient<'_>> {
    let inode = read::<u32, Le>(block, off)?;
    let rec_len = usize::from(read::<u16, Le>(block, off + 4)?);
    let name_len = usize::from(*block.get(off + 6)?);
    let file_type = *block.get(off + 7)?;
    let sound = rec_len >= rec_len_for(1)
        && rec_len % 4 == 0
        && off + rec_len <= block.len()
        && rec_len >= rec_len_for(name_len);
    sound.then(|| Lenient {
        inode,
        rec_len,
        name: &block[off + HEADER..off + HEADER + name_len],
        file_type,
    })
}
