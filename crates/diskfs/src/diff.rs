//! Turning a structure's new bytes into a patch. Every metadata change in
//! diskfs is made by decoding a structure from the cached block, changing
//! it, encoding it again, and handing old and new bytes here, so layout
//! lives only in the format crate.
//!
//! One update of one structure becomes exactly one patch, spanning the first
//! to the last byte it changed: the fields changed together (a pointer and
//! the block count, a new directory entry and the shortened entry before
//! it) must reach the disk together, and a patch is atomic with its block.
//! Neighbouring structures (other inodes of the block, other entries) are
//! updated by other calls and so stay in separate patches with independent
//! dependencies (Featherstitch §4.5). The crash tests found the alternative,
//! a patch per changed run, leaving a block pointer on disk without its
//! block count.

use stitch_modes::Modes;
use stitch_patch::{BlockNo, PatchFlags, PatchId, Result};

/// The span `[start, end)` from the first to the last differing byte.
pub fn changed_span(old: &[u8], new: &[u8]) -> Option<(usize, usize)> {
    debug_assert_eq!(old.len(), new.len());
    let start = old.iter().zip(new).position(|(a, b)| a != b)?;
    let end = old.len()
        - old
            .iter()
            .rev()
            .zip(new.iter().rev())
            .position(|(a, b)| a != b)?;
    Some((start, end))
}

/// Writes `new` over the bytes at `offset` of `block` as one patch covering
/// what changed, depending on `deps`. Returns it (none if nothing changed).
pub fn write(
    m: &mut Modes,
    block: BlockNo,
    offset: usize,
    new: &[u8],
    deps: &[PatchId],
    flags: PatchFlags,
) -> Result<Vec<PatchId>> {
    write_covering(m, block, offset, new, None, deps, flags)
}

/// Like [`write`], but the patch also covers `read` (offsets into `new`):
/// bytes the new value was computed from. Covering them gives the patch an
/// overlap dependency on whatever wrote them last, so it can't reach the
/// disk before the bytes it was derived from. (A directory entry's removal
/// adds the removed entry's `rec_len` to the previous entry's: without this
/// the new length could reach the disk before the entry it was read from,
/// pointing into bytes never written; the crash tests found exactly that.)
pub fn write_covering(
    m: &mut Modes,
    block: BlockNo,
    offset: usize,
    new: &[u8],
    read: Option<(usize, usize)>,
    deps: &[PatchId],
    flags: PatchFlags,
) -> Result<Vec<PatchId>> {
    let old = &m.read(block)?[offset..offset + new.len()];
    let (mut s, mut e) = match (changed_span(old, new), read) {
        (Some(span), _) => span,
        // Nothing changed, but what was read must still be ordered: a patch
        // rewriting those bytes as they are carries the dependency.
        (None, Some(r)) => r,
        (None, None) => return Ok(Vec::new()),
    };
    if let Some((rs, re)) = read {
        s = s.min(rs);
        e = e.max(re.min(new.len()));
    }
    Ok(vec![m.byte(block, offset + s, &new[s..e], deps, flags)?])
}

#[cfg(test)]
mod tests {
    use super::changed_span;

    fn check(old: &[u8], new: &[u8], expect: Option<(usize, usize)>) {
        assert_eq!(changed_span(old, new), expect, "{old:?} -> {new:?}");
    }

    #[test]
    fn spans() {
        check(b"aaaa", b"aaaa", None);
        check(b"aaaa", b"abaa", Some((1, 2)));
        check(b"aaaaaaaaaaaa", b"baaaaaaaaaab", Some((0, 12)));
        check(b"abcd", b"wxyz", Some((0, 4)));
        check(b"", b"", None);
    }
}
