//! Symbolic links: a *fast* symlink keeps its target in the 60 bytes of
//! `i_block` (targets shorter than 60 bytes); a *slow* one stores it in its
//! first data block. e2fsck decides by size alone (`i_size < 60` is fast),
//! so stitchfs writes targets of up to 59 bytes fast and longer ones slow.
//!
//! Invariant: targets are non-empty, have no NUL byte and fit one block.

use crate::error::{ensure, FormatError, Result, Structure};
use crate::inode::{Inode, N_BLOCKS};

/// Bytes of `i_block`.
pub const FAST_MAX: usize = N_BLOCKS * 4;

/// Is this symlink's target in `i_block`?
pub fn is_fast(inode: &Inode) -> bool {
    inode.size() < FAST_MAX as u64
}

fn check_target(t: &[u8], block_len: usize) -> Result<()> {
    ensure(!t.is_empty() && !t.contains(&0), Structure::Symlink, || {
        "target is empty or contains NUL".into()
    })?;
    ensure(t.len() < block_len, Structure::Symlink, || {
        format!(
            "target of {} bytes does not fit a {block_len} byte block",
            t.len()
        )
    })
}

/// The target of a fast symlink.
pub fn fast_target(inode: &Inode) -> Result<Vec<u8>> {
    let len = inode.size() as usize;
    ensure(is_fast(inode) && len > 0, Structure::Symlink, || {
        format!("size {len} is not a fast symlink")
    })?;
    let bytes: Vec<u8> = inode
        .core
        .block
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    let target = bytes[..len].to_vec();
    check_target(&target, FAST_MAX + 1)?;
    Ok(target)
}

/// Stores `target` in `i_block` and sets the size; fails if it is too long.
pub fn set_fast_target(inode: &mut Inode, target: &[u8]) -> Result<()> {
    check_target(target, FAST_MAX)?;
    let mut bytes = [0u8; FAST_MAX];
    bytes[..target.len()].copy_from_slice(target);
    for (w, c) in inode.core.block.iter_mut().zip(bytes.chunks_exact(4)) {
        *w = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    inode.set_size(target.len() as u64);
    Ok(())
}

/// The target of a slow symlink, from its first data block.
pub fn slow_target(inode: &Inode, block: &[u8]) -> Result<Vec<u8>> {
    let len = usize::try_from(inode.size()).unwrap_or(usize::MAX);
    let target = block.get(..len).ok_or_else(|| {
        FormatError::corrupt(Structure::Symlink, format!("size {len} exceeds the block"))
    })?;
    check_target(target, block.len())?;
    Ok(target.to_vec())
}

/// The data block of a slow symlink for `target` (zero padded).
pub fn slow_block(target: &[u8], block_len: usize) -> Result<Vec<u8>> {
    check_target(target, block_len)?;
    let mut b = vec![0u8; block_len];
    b[..target.len()].copy_from_slice(target);
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inode::FileType;

    #[test]
    fn fast_round_trip_and_limits() {
        let mut ino = Inode::new(FileType::Symlink, 0o777, 256, crate::Timestamp::EPOCH);
        set_fast_target(&mut ino, b"../some/where").unwrap();
        assert!(is_fast(&ino));
        assert_eq!(fast_target(&ino).unwrap(), b"../some/where");
        assert!(set_fast_target(&mut ino, &[b'a'; 60]).is_err());
        set_fast_target(&mut ino, &[b'a'; 59]).unwrap();
        ino.set_size(60);
        assert!(fast_target(&ino).is_err(), "size 60 is slow");
    }

    #[test]
    fn slow_round_trip_and_corrupt_size() {
        let mut ino = Inode::new(FileType::Symlink, 0o777, 256, crate::Timestamp::EPOCH);
        let t = vec![b'x'; 100];
        let b = slow_block(&t, 4096).unwrap();
        ino.set_size(100);
        assert_eq!(slow_target(&ino, &b).unwrap(), t);
        ino.set_size(5000);
        assert!(slow_target(&ino, &b).is_err());
        ino.set_size(u64::MAX);
        assert!(slow_target(&ino, &b).is_err());
    }
}
