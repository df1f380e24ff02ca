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
///
/// Compared a chunk at a time (slice equality is `memcmp`): every block
/// allocated rewrites the 1 KiB superblock for its free count, and a
/// byte-by-byte walk over it was 5% of the server's time in a 100 MB write.
pub fn changed_span(old: &[u8], new: &[u8]) -> Option<(usize, usize)> {
    debug_assert_eq!(old.len(), new.len());
    const CHUNK: usize = 64;
    let len = old.len().min(new.len());
    let (old, new) = (&old[..len], &new[..len]);
    let start = old
        .chunks(CHUNK)
        .zip(new.chunks(CHUNK))
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .and_then(|(i, (a, b))| {
            let k = a.iter().zip(b).position(|(x, y)| x != y)?;
            Some(i * CHUNK + k)
        })?;
    let end = old
        .rchunks(CHUNK)
        .zip(new.rchunks(CHUNK))
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .and_then(|(i, (a, b))| {
            let k = a
                .iter()
                .rev()
                .zip(b.iter().rev())
                .position(|(x, y)| x != y)?;
            Some(len - (i * CHUNK + k))
        })?;
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

    /// Chunked comparison agrees with the byte-by-byte definition at every
    /// length around the chunk size and every pair of changed positions.
    #[test]
    fn spans_across_chunks() {
        for len in [1usize, 63, 64, 65, 127, 128, 129, 200, 1024] {
            for first in (0..len).step_by(7) {
                for last in (first..len).step_by(11).chain([len - 1]) {
                    let old = vec![0u8; len];
                    let mut new = old.clone();
                    new[first] = 1;
                    new[last] = 2;
                    check(&old, &new, Some((first, last + 1)));
                }
            }
            check(&vec![5u8; len], &vec![5u8; len], None);
        }
    }
}
