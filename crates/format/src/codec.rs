//! Byte order and the on-disk struct macro: the one place where integers meet bytes.
//!
//! ext2 structures are little-endian and JBD2 structures are big-endian; both go
//! through [`Endian`] and [`Field`] here and nowhere else. The `ondisk!` macro
//! turns one table of `offset name: type` lines into a Rust struct, its decoder,
//! its encoder and a compile-time check of the layout, so every offset is written
//! exactly once.
//!
//! Invariants: fields of an `ondisk!` struct are sorted by offset, never overlap,
//! and end within the struct's size (checked by [`check_layout`] at compile time);
//! `decode` never reads and `encode_into` never writes outside `0..SIZE`.

use crate::units::{BlockNo, InodeNo};

/// A byte order.
pub trait Endian {
    fn u16_from(b: [u8; 2]) -> u16;
    fn u32_from(b: [u8; 4]) -> u32;
    fn u64_from(b: [u8; 8]) -> u64;
    fn u16_to(v: u16) -> [u8; 2];
    fn u32_to(v: u32) -> [u8; 4];
    fn u64_to(v: u64) -> [u8; 8];
}

/// Little-endian: every ext2 structure.
pub enum Le {}
/// Big-endian: every JBD2 structure.
pub enum Be {}

impl Endian for Le {
    fn u16_from(b: [u8; 2]) -> u16 {
        u16::from_le_bytes(b)
    }
    fn u32_from(b: [u8; 4]) -> u32 {
        u32::from_le_bytes(b)
    }
    fn u64_from(b: [u8; 8]) -> u64 {
        u64::from_le_bytes(b)
    }
    fn u16_to(v: u16) -> [u8; 2] {
        v.to_le_bytes()
    }
    fn u32_to(v: u32) -> [u8; 4] {
        v.to_le_bytes()
    }
    fn u64_to(v: u64) -> [u8; 8] {
        v.to_le_bytes()
    }
}

impl Endian for Be {
    fn u16_from(b: [u8; 2]) -> u16 {
        u16::from_be_bytes(b)
    }
    fn u32_from(b: [u8; 4]) -> u32 {
        u32::from_be_bytes(b)
    }
    fn u64_from(b: [u8; 8]) -> u64 {
        u64::from_be_bytes(b)
    }
    fn u16_to(v: u16) -> [u8; 2] {
        v.to_be_bytes()
    }
    fn u32_to(v: u32) -> [u8; 4] {
        v.to_be_bytes()
    }
    fn u64_to(v: u64) -> [u8; 8] {
        v.to_be_bytes()
    }
}

/// A value with a fixed on-disk width. `get`/`put` are given a slice of exactly
/// `SIZE` bytes by the `ondisk!` code, so the conversions below cannot fail.
pub trait Field: Sized {
    const SIZE: usize;
    fn get<E: Endian>(b: &[u8]) -> Self;
    fn put<E: Endian>(&self, b: &mut [u8]);
}

fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[..N]);
    out
}

impl Field for u8 {
    const SIZE: usize = 1;
    fn get<E: Endian>(b: &[u8]) -> Self {
        b[0]
    }
    fn put<E: Endian>(&self, b: &mut [u8]) {
        b[0] = *self;
    }
}

impl Field for u16 {
    const SIZE: usize = 2;
    fn get<E: Endian>(b: &[u8]) -> Self {
        E::u16_from(arr(b))
    }
    fn put<E: Endian>(&self, b: &mut [u8]) {
        b[..2].copy_from_slice(&E::u16_to(*self));
    }
}

impl Field for u32 {
    const SIZE: usize = 4;
    fn get<E: Endian>(b: &[u8]) -> Self {
        E::u32_from(arr(b))
    }
    fn put<E: Endian>(&self, b: &mut [u8]) {
        b[..4].copy_from_slice(&E::u32_to(*self));
    }
}

impl Field for u64 {
    const SIZE: usize = 8;
    fn get<E: Endian>(b: &[u8]) -> Self {
        E::u64_from(arr(b))
    }
    fn put<E: Endian>(&self, b: &mut [u8]) {
        b[..8].copy_from_slice(&E::u64_to(*self));
    }
}

impl<const N: usize> Field for [u8; N] {
    const SIZE: usize = N;
    fn get<E: Endian>(b: &[u8]) -> Self {
        arr(b)
    }
    fn put<E: Endian>(&self, b: &mut [u8]) {
        b[..N].copy_from_slice(self);
    }
}

impl<const N: usize> Field for [u32; N] {
    const SIZE: usize = 4 * N;
    fn get<E: Endian>(b: &[u8]) -> Self {
        let mut out = [0u32; N];
        for (i, v) in out.iter_mut().enumerate() {
            *v = u32::get::<E>(&b[4 * i..]);
        }
        out
    }
    fn put<E: Endian>(&self, b: &mut [u8]) {
        for (i, v) in self.iter().enumerate() {
            v.put::<E>(&mut b[4 * i..]);
        }
    }
}

/// ext2 keeps a block number in 32 bits (`64bit` is refused). It is
/// widened at decode and narrowed here at encode, and nowhere else.
impl Field for BlockNo {
    const SIZE: usize = 4;
    fn get<E: Endian>(b: &[u8]) -> Self {
        BlockNo::from(u32::get::<E>(b))
    }
    fn put<E: Endian>(&self, b: &mut [u8]) {
        ondisk_block(*self).put::<E>(b);
    }
}

/// An inode number is 32 bits on disk and in memory alike.
impl Field for InodeNo {
    const SIZE: usize = 4;
    fn get<E: Endian>(b: &[u8]) -> Self {
        InodeNo(u32::get::<E>(b))
    }
    fn put<E: Endian>(&self, b: &mut [u8]) {
        self.0.put::<E>(b);
    }
}

/// The 32 bits ext2 keeps of block number `b`: the one narrowing of a
/// block number to its on-disk form. Every block number written into an
/// ext2 structure names a block of that file system: one decoded from it,
/// or one allocated or laid out below `s_blocks_count`, itself a 32-bit
/// field. So it fits; a number that does not is a bug above, which debug
/// builds stop on.
pub fn ondisk_block(b: BlockNo) -> u32 {
    debug_assert!(b.to_u32().is_some(), "{b} is past ext2's 32 bits");
    b.0 as u32
}

/// Reads one integer at `off` of `buf`, or `None` if it does not fit. For the
/// few values that live outside an `ondisk!` struct (pointer arrays, tags).
pub fn read<T: Field, E: Endian>(buf: &[u8], off: usize) -> Option<T> {
    let end = off.checked_add(T::SIZE)?;
    buf.get(off..end).map(T::get::<E>)
}

/// Writes one integer at `off`; returns `false` (and writes nothing) if it
/// does not fit.
pub fn write<T: Field, E: Endian>(buf: &mut [u8], off: usize, v: T) -> bool {
    match off
        .checked_add(T::SIZE)
        .and_then(|end| buf.get_mut(off..end))
    {
        Some(slot) => {
            v.put::<E>(slot);
            true
        }
        None => false,
    }
}

/// Compile-time layout check for `ondisk!`: `fields` holds `(offset, size)`
/// in declaration order; they must be sorted, disjoint and inside `size`.
pub const fn check_layout(fields: &[(usize, usize)], size: usize) -> bool {
    let mut i = 0;
    let mut end = 0;
    while i < fields.len() {
        let (off, len) = fields[i];
        if off < end || len == 0 {
            return false;
        }
        end = off + len;
        i += 1;
    }
    end <= size
}

/// The offset of field `name` in an `ondisk!` struct's `OFFSETS`, for
/// constants derived from the one table; a name not in it stops the build.
pub const fn offset_of(offsets: &[(&str, usize)], name: &str) -> usize {
    let mut i = 0;
    while i < offsets.len() {
        if const_str_eq(offsets[i].0, name) {
            return offsets[i].1;
        }
        i += 1;
    }
    panic!("no such field in the on-disk table");
}

const fn const_str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Declares an on-disk structure from one table of `offset name: type` lines.
///
/// Generates the struct (all fields `pub`), `SIZE`, `OFFSETS` (name, offset)
/// pairs for tests and tools, `decode_raw` (no validation; `None` if the
/// buffer is short) and `encode_into` (writes only the declared bytes), plus a
/// compile-time assertion that the layout is sorted, disjoint and in bounds.
macro_rules! ondisk {
    (
        $(#[$meta:meta])*
        pub struct $name:ident : $endian:ty, size = $size:expr;
        { $( $(#[$fmeta:meta])* $off:literal $field:ident : $ty:ty ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )+
        }

        const _: () = assert!(
            $crate::codec::check_layout(
                &[$( ($off, <$ty as $crate::codec::Field>::SIZE) ),+],
                $size,
            ),
            concat!("bad on-disk layout of ", stringify!($name)),
        );

        impl Default for $name {
            /// All fields zero (arrays longer than 32 have no derived `Default`).
            fn default() -> Self {
                Self::decode_raw(&[0u8; $size]).expect("a SIZE-byte buffer always decodes")
            }
        }

        impl $name {
            /// Size of the structure on disk, in bytes.
            pub const SIZE: usize = $size;
            /// Each field's name and byte offset, in layout order.
            pub const OFFSETS: &'static [(&'static str, usize)] =
                &[$( (stringify!($field), $off) ),+];

            /// Reads every field from `buf` without validating values;
            /// `None` if `buf` is shorter than [`Self::SIZE`].
            pub fn decode_raw(buf: &[u8]) -> Option<Self> {
                let buf = buf.get(..$size)?;
                Some(Self {
                    $( $field: <$ty as $crate::codec::Field>::get::<$endian>(
                        &buf[$off..$off + <$ty as $crate::codec::Field>::SIZE]), )+
                })
            }

            /// Writes every field into `out[..SIZE]`, leaving bytes no field
            /// covers untouched. A short buffer is a caller bug.
            pub fn encode_into(&self, out: &mut [u8]) {
                assert!(out.len() >= $size, "buffer too short for {}", stringify!($name));
                $( <$ty as $crate::codec::Field>::put::<$endian>(
                    &self.$field,
                    &mut out[$off..$off + <$ty as $crate::codec::Field>::SIZE]); )+
            }

            /// The encoded structure as a fresh buffer (undeclared bytes zero).
            pub fn to_bytes(&self) -> Vec<u8> {
                let mut out = vec![0u8; $size];
                self.encode_into(&mut out);
                out
            }
        }
    };
}
pub(crate) use ondisk;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_check_rejects_overlap_and_overflow() {
        assert!(check_layout(&[(0, 4), (4, 2)], 6));
        assert!(!check_layout(&[(0, 4), (3, 2)], 8), "overlap");
        assert!(!check_layout(&[(4, 4), (0, 2)], 8), "unsorted");
        assert!(!check_layout(&[(0, 4), (6, 4)], 8), "past the end");
    }

    #[test]
    fn endianness() {
        let mut b = [0u8; 4];
        assert!(write::<u32, Be>(&mut b, 0, 0xC03B_3998));
        assert_eq!(b, [0xC0, 0x3B, 0x39, 0x98]);
        assert_eq!(read::<u32, Le>(&b, 0), Some(0x9839_3BC0));
        assert_eq!(read::<u16, Le>(&b, 3), None);
        assert!(!write::<u16, Le>(&mut b, usize::MAX, 1));
    }
}
