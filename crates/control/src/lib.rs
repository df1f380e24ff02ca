//! The control interface of a stitchfs mount: the table of ioctls a
//! program sends on any file or directory of a mount, with their fixed-size
//! argument structures, and the caller's side of each call. The server
//! answers the same table in the FUSE frontend; `stitchfs sync`, the
//! benchmarks, the C library (`libstitch`, `stitch.h`) and the Python
//! package call it, so the numbers and layouts live here once (the C
//! header and the Python module restate them, and tests hold them equal).
//!
//! Transport: FUSE's restricted ioctls. The kernel copies `_IOC_SIZE(cmd)`
//! bytes in for a `_IOW` command and out for a `_IOR` one, so every
//! argument is a fixed-size `#[repr(C)]` structure whose size is part of
//! its command number: a caller built against another layout sends
//! another number, which the server refuses (`EINVAL` for a number it
//! knows with another size, `ENOTTY` for one it does not know; a file
//! system that is not stitchfs answers `ENOTTY` too).
//!
//! | number | name | argument | what |
//! |---|---|---|---|
//! | `_IO(0xF5, 1)` | [`IOC_SYNC`] | none | everything the mount holds, durable when it returns |
//! | `_IOR(0xF5, 2, Version)` | [`IOC_VERSION`] | [`Version`] out | the API version the server speaks |
//!
//! Architecture invariant: knows the table and the mount table, nothing of
//! how a mount serves the calls; no other stitch crate.

pub mod mounts;

use std::os::fd::AsRawFd;

/// The ioctl "type" byte of every stitchfs call.
pub const MAGIC: u32 = 0xF5;

/// The API version this table describes. A server answers calls of its
/// own version and older; a caller can ask with [`IOC_VERSION`].
pub const API_VERSION: u32 = 1;

const NONE: u32 = 0;
const READ: u32 = 2;

/// Linux's `_IOC(dir, type, nr, size)`.
const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | (MAGIC << 8) | nr
}

/// The call number's `nr` and argument size (`_IOC_NR`, `_IOC_SIZE`).
pub const fn decode(cmd: u32) -> (u32, usize) {
    (cmd & 0xFF, ((cmd >> 16) & 0x3FFF) as usize)
}

/// Whether `cmd` carries stitchfs's type byte.
pub const fn is_ours(cmd: u32) -> bool {
    (cmd >> 8) & 0xFF == MAGIC
}

/// Makes everything the mount holds durable, as `sync(2)` would if the
/// kernel sent `syncfs` to FUSE servers (it does not): `_IO(0xF5, 1)`.
pub const IOC_SYNC: u32 = ioc(NONE, 1, 0);

/// The server's API version: `_IOR(0xF5, 2, Version)`.
pub const IOC_VERSION: u32 = ioc(READ, 2, std::mem::size_of::<Version>());

/// What [`IOC_VERSION`] answers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Version {
    /// The API version the server speaks ([`API_VERSION`]).
    pub api: u32,
    /// Reserved, 0.
    pub flags: u32,
}

const _: () = assert!(std::mem::size_of::<Version>() == 8);

/// A structure sent through the table: plain bytes in both directions.
pub trait Wire: Copy + Default {
    /// Its bytes, as the kernel copies them.
    fn to_bytes(&self) -> Vec<u8>;
    /// From the bytes the kernel copied; `None` if there are too few.
    fn from_bytes(b: &[u8]) -> Option<Self>;
}

impl Wire for Version {
    fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(8);
        v.extend_from_slice(&self.api.to_ne_bytes());
        v.extend_from_slice(&self.flags.to_ne_bytes());
        v
    }

    fn from_bytes(b: &[u8]) -> Option<Self> {
        Some(Version {
            api: u32::from_ne_bytes(b.get(0..4)?.try_into().ok()?),
            flags: u32::from_ne_bytes(b.get(4..8)?.try_into().ok()?),
        })
    }
}

/// Every call the table holds: (number, name), for the server's dispatch
/// and the tests that hold the C and Python copies equal.
pub const TABLE: [(u32, &str); 2] = [(IOC_SYNC, "sync"), (IOC_VERSION, "version")];

/// Sends [`IOC_SYNC`] through `f`: `Ok(true)` once everything its stitchfs
/// mount holds is durable, `Ok(false)` if `f` is on another file system
/// (which does not know the ioctl).
pub fn request_sync(f: &impl AsRawFd) -> std::io::Result<bool> {
    // SAFETY: an argument-less ioctl on a descriptor the caller owns.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_SYNC as _) } == 0 {
        return Ok(true);
    }
    not_ours(std::io::Error::last_os_error())
}

/// Asks the server behind `f` for its API version: `Ok(None)` if `f` is
/// on another file system.
pub fn request_version(f: &impl AsRawFd) -> std::io::Result<Option<Version>> {
    let mut v = Version::default();
    // SAFETY: the kernel writes size_of::<Version>() bytes, the size the
    // command number carries, into `v`.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_VERSION as _, &mut v as *mut Version) } == 0 {
        return Ok(Some(v));
    }
    not_ours(std::io::Error::last_os_error()).map(|_| None)
}

/// The errors a file system that is not stitchfs answers an unknown
/// ioctl with are `Ok(false)`; others stay errors.
fn not_ours(err: std::io::Error) -> std::io::Result<bool> {
    match err.raw_os_error() {
        Some(libc::ENOTTY | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP) => Ok(false),
        _ => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_linuxs_encoding() {
        // _IO(0xF5, 1) and _IOR(0xF5, 2, 8 bytes), as the C macros give.
        assert_eq!(IOC_SYNC, 0x0000_F501);
        assert_eq!(IOC_VERSION, 0x8008_F502);
        assert_eq!(decode(IOC_VERSION), (2, 8));
        assert!(is_ours(IOC_SYNC) && !is_ours(0x5401));
    }

    #[test]
    fn a_version_crosses_the_wire_unchanged() {
        let v = Version { api: 3, flags: 0 };
        assert_eq!(Version::from_bytes(&v.to_bytes()), Some(v));
        assert_eq!(Version::from_bytes(&[1, 2]), None);
    }

    #[test]
    fn every_number_in_the_table_is_unique_and_ours() {
        for (i, (n, name)) in TABLE.iter().enumerate() {
            assert!(is_ours(*n), "{name}");
            assert!(TABLE[i + 1..].iter().all(|(m, _)| m != n), "{name}");
        }
    }
}
