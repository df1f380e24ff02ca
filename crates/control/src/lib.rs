//! The control interface of a stitchfs mount, from the caller's side: the
//! ioctls a program sends on any file or directory of a mount, and how to
//! find a stitchfs mount in the mount table. The server answers them in
//! the FUSE frontend; `stitchfs sync`, the benchmarks and (later) the C and
//! Python libraries call them through here, so their numbers live in one
//! place.
//!
//! Architecture invariant: knows the ioctl numbers and the mount table,
//! nothing of how a mount serves them; no other stitch crate.

pub mod mounts;

use std::os::fd::AsRawFd;

/// Makes everything the mount holds durable, as `sync(2)` would if the
/// kernel sent `syncfs` to FUSE servers (it does not): `_IO(0xF5, 1)`, no
/// argument.
pub const IOC_SYNC: u32 = 0xF501;

/// Sends [`IOC_SYNC`] through `f`: `Ok(true)` once everything its stitchfs
/// mount holds is durable, `Ok(false)` if `f` is on another file system
/// (which does not know the ioctl).
pub fn request_sync(f: &impl AsRawFd) -> std::io::Result<bool> {
    // SAFETY: an argument-less ioctl on a descriptor the caller owns.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_SYNC as _) } == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ENOTTY | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP) => Ok(false),
        _ => Err(err),
    }
}
