//! Thin wrappers over the Linux calls `std` does not offer: `flock`,
//! `BLKGETSIZE64` and `pwritev`. Each returns `io::Result` and owns the
//! `unsafe` it needs; policy (latching, error text) lives in the caller.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;

/// How many iovecs one `pwritev` may take (Linux `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// `BLKGETSIZE64` from `<linux/fs.h>`: `_IOR(0x12, 114, size_t)`. The libc
/// crate has no constant for it; `_IOR` encodes it per architecture.
const BLKGETSIZE64: libc::Ioctl = libc::_IOR::<u64>(0x12, 114);

/// Which `flock` to take.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LockKind {
    Shared,
    Exclusive,
}

/// Tries to take an advisory lock without blocking. `Ok(false)` means another
/// open file description holds a conflicting lock.
pub fn try_lock(file: &File, kind: LockKind) -> io::Result<bool> {
    flock(file, kind, libc::LOCK_NB)
}

/// Takes an advisory lock, waiting while another open file description
/// holds a conflicting one.
pub fn lock(file: &File, kind: LockKind) -> io::Result<()> {
    flock(file, kind, 0).map(|_| ())
}

fn flock(file: &File, kind: LockKind, flags: libc::c_int) -> io::Result<bool> {
    let op = match kind {
        LockKind::Shared => libc::LOCK_SH,
        LockKind::Exclusive => libc::LOCK_EX,
    };
    loop {
        // SAFETY: flock on a valid fd with constant flags has no memory effects.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op | flags) };
        if rc == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}

/// Size in bytes of a regular file or a block device.
pub fn size_of(file: &File) -> io::Result<u64> {
    let meta = file.metadata()?;
    if !meta.file_type().is_block_device() {
        return Ok(meta.len());
    }
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points
    // at a live, writable u64.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

/// Writes all of `bufs`, back to back, at `offset`: one `pwritev` per
/// [`IOV_MAX`] buffers, continuing after short writes. `EINTR` is not a
/// failure and is reissued; any real error is returned at once.
pub fn pwritev_all(file: &File, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
    let mut first = 0; // index of the first buffer not fully written
    let mut skip = 0; // bytes of bufs[first] already written
    while first < bufs.len() {
        let iov = iovecs(&bufs[first..], skip);
        let off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset beyond off_t"))?;
        // SAFETY: every iovec points into a live slice of `bufs`, and the
        // kernel only reads from them.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                off,
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "pwritev wrote nothing",
            ));
        }
        offset += n as u64;
        (first, skip) = advance(bufs, first, skip, n as usize);
    }
    Ok(())
}

/// At most [`IOV_MAX`] iovecs for `bufs`, the first one starting `skip` bytes in.
fn iovecs(bufs: &[&[u8]], skip: usize) -> Vec<libc::iovec> {
    bufs.iter()
        .take(IOV_MAX)
        .enumerate()
        .map(|(i, b)| {
            let b = if i == 0 { &b[skip..] } else { b };
            libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            }
        })
        .collect()
}

/// The (buffer, offset) position after `n` more bytes were written.
fn advance(bufs: &[&[u8]], mut first: usize, mut skip: usize, mut n: usize) -> (usize, usize) {
    while n > 0 && first < bufs.len() {
        let left = bufs[first].len() - skip;
        if n < left {
            return (first, skip + n);
        }
        n -= left;
        first += 1;
        skip = 0;
    }
    (first, skip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_walks_across_buffers() {
        let a = [0u8; 4];
        let b = [0u8; 4];
        let bufs: [&[u8]; 2] = [&a, &b];
        assert_eq!(advance(&bufs, 0, 0, 3), (0, 3));
        assert_eq!(advance(&bufs, 0, 3, 1), (1, 0));
        assert_eq!(advance(&bufs, 0, 0, 6), (1, 2));
        assert_eq!(advance(&bufs, 1, 2, 2), (2, 0));
    }

    #[test]
    #[allow(clippy::unnecessary_cast)] // `Ioctl` is u64 on glibc but i32 on musl
    fn blkgetsize64_has_the_kernel_value() {
        // On the common architectures (x86, arm, riscv) the kernel header
        // expands _IOR(0x12, 114, size_t) to 0x80081272.
        #[cfg(any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "riscv64"
        ))]
        assert_eq!(BLKGETSIZE64 as u64, 0x8008_1272);
    }
}
