//! Block and inode bitmaps: one bit per block (or inode) of a group, bit `i`
//! is bit `i % 8` of byte `i / 8`.
//!
//! A bitmap occupies a whole block, but a group may have fewer blocks or
//! inodes than the block has bits. Those padding bits must be set (e2fsck
//! checks it, and it stops allocators from handing out nonexistent objects).
//!
//! Invariant: every method here is bounds-checked and returns `None`/`false`
//! or an error for an index past the buffer; none of them panics.

use crate::error::{FormatError, Result, Structure};

/// A bitmap view over a block buffer.
pub struct Bitmap<'a> {
    bytes: &'a [u8],
}

/// A mutable bitmap view over a block buffer.
pub struct BitmapMut<'a> {
    bytes: &'a mut [u8],
}

impl<'a> Bitmap<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Bitmap { bytes }
    }

    /// Number of bits the buffer holds.
    pub fn capacity(&self) -> usize {
        self.bytes.len() * 8
    }

    /// The bit for index `i`, or `None` past the buffer.
    pub fn get(&self, i: usize) -> Option<bool> {
        self.bytes.get(i / 8).map(|b| b & (1 << (i % 8)) != 0)
    }

    /// Number of set bits among the first `n`.
    pub fn count_set(&self, n: usize) -> usize {
        let n = n.min(self.capacity());
        let whole: usize = self.bytes[..n / 8]
            .iter()
            .map(|b| b.count_ones() as usize)
            .sum();
        whole
            + (n / 8 * 8..n)
                .filter(|&i| self.get(i) == Some(true))
                .count()
    }

    /// First clear bit in `start..end`, if any.
    pub fn find_clear(&self, start: usize, end: usize) -> Option<usize> {
        let end = end.min(self.capacity());
        let mut i = start;
        while i < end {
            // Whole bytes with every bit set are passed over at once.
            if i.is_multiple_of(8) && self.bytes[i / 8] == 0xff {
                i += 8;
                continue;
            }
            if self.get(i) == Some(false) {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// Checks that every bit from `used` to the end of the buffer is set.
    pub fn check_padding(&self, used: usize) -> Result<()> {
        match self.find_clear(used, self.capacity()) {
            None => Ok(()),
            Some(i) => Err(FormatError::corrupt_at(
                Structure::Bitmap,
                i / 8,
                format!("padding bit {i} (past the group's {used} entries) is clear"),
            )),
        }
    }
}

impl<'a> BitmapMut<'a> {
    pub fn new(bytes: &'a mut [u8]) -> Self {
        BitmapMut { bytes }
    }

    pub fn view(&self) -> Bitmap<'_> {
        Bitmap { bytes: self.bytes }
    }

    /// Sets bit `i` to `value`; returns the previous value, `None` past the buffer.
    pub fn put(&mut self, i: usize, value: bool) -> Option<bool> {
        let byte = self.bytes.get_mut(i / 8)?;
        let mask = 1u8 << (i % 8);
        let old = *byte & mask != 0;
        if value {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
        Some(old)
    }

    /// Sets bits `start..end` (clamped to the buffer).
    pub fn set_range(&mut self, start: usize, end: usize) {
        for i in start..end.min(self.bytes.len() * 8) {
            self.put(i, true);
        }
    }

    /// Sets the padding bits from `used` to the end of the buffer.
    pub fn set_padding(&mut self, used: usize) {
        let cap = self.bytes.len() * 8;
        self.set_range(used, cap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_order_is_lsb_first() {
        let mut buf = [0u8; 4];
        let mut bm = BitmapMut::new(&mut buf);
        assert_eq!(bm.put(0, true), Some(false));
        assert_eq!(bm.put(9, true), Some(false));
        assert_eq!(bm.put(32, true), None);
        assert_eq!(buf, [0x01, 0x02, 0, 0]);
    }

    #[test]
    fn padding_and_counts() {
        let mut buf = [0u8; 4];
        let mut bm = BitmapMut::new(&mut buf);
        bm.set_range(0, 3);
        bm.set_padding(20);
        let v = bm.view();
        assert_eq!(v.count_set(32), 3 + 12);
        assert_eq!(v.count_set(20), 3);
        assert_eq!(v.find_clear(0, 32), Some(3));
        v.check_padding(20).unwrap();
        assert!(v
            .check_padding(19)
            .unwrap_err()
            .to_string()
            .contains("padding bit 19"));
    }

    proptest::proptest! {
        /// The byte-skipping search agrees with a bit-by-bit one.
        #[test]
        fn find_clear_is_the_first_clear_bit(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![proptest::prelude::Just(0xffu8), proptest::prelude::any::<u8>()],
                0..12,
            ),
            start in 0usize..100,
            end in 0usize..100,
        ) {
            let v = Bitmap::new(&bytes);
            let naive = (start..end.min(v.capacity())).find(|&i| v.get(i) == Some(false));
            proptest::prop_assert_eq!(v.find_clear(start, end), naive);
        }
    }
}
