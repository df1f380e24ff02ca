//! [`AlignedBuf`]: a heap buffer aligned for `O_DIRECT`.
//!
//! `O_DIRECT` transfers bypass the page cache and need the user buffer, the
//! file offset and the length aligned to the device's logical block size
//! (Linux `open(2)`, "O_DIRECT"). Offsets and lengths are whole stitchfs
//! blocks; this type supplies the buffer alignment, which `Vec<u8>` does not
//! promise.
//!
//! Invariant: `ptr` is a live allocation of `layout`, zero-initialised, owned
//! by this value alone, with `layout.size() > 0`.

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Page alignment: a multiple of every logical block size Linux supports.
pub const DIRECT_ALIGN: usize = 4096;

pub struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer is plain bytes owned uniquely by this value.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes aligned to [`DIRECT_ALIGN`]; `None` if
    /// `len` is zero or too large to allocate.
    pub fn zeroed(len: usize) -> Option<Self> {
        if len == 0 {
            return None;
        }
        let layout = Layout::from_size_align(len, DIRECT_ALIGN).ok()?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        NonNull::new(raw).map(|ptr| AlignedBuf { ptr, layout })
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: by the invariant, `ptr` is valid, initialised memory of
        // `layout.size()` bytes that nobody else aliases mutably.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` was allocated with exactly `layout` and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_writable() {
        let mut buf = AlignedBuf::zeroed(3 * 4096).unwrap();
        assert_eq!(buf.as_ptr() as usize % DIRECT_ALIGN, 0);
        assert!(buf.iter().all(|&b| b == 0));
        buf[5] = 7;
        assert_eq!(buf[5], 7);
        assert!(AlignedBuf::zeroed(0).is_none());
    }
}
