//! libstitch: the C library of a stitchfs mount's control interface
//! (`include/stitch.h`). Each call sends one ioctl of the control table
//! (crate `stitch-control`, which documents it) on a descriptor of the
//! mount and returns what the server answered, in C's way: `-1` and
//! `errno` on error. [`stitch_subreaper`] is the one call that is no
//! ioctl: it keeps a program's orphaned descendants in its family.
//!
//! Which mount: the `_at` variants take a descriptor of any file or
//! directory on it; the others open the path in `$STITCHFS_MOUNT` if it is
//! set, else the current directory. A call on a file system that is not
//! stitchfs fails with `ENOTTY`; [`stitch_strerror`] says what each errno
//! means from these calls.
//!
//! Architecture invariant: a thin wrapper over the control table; every
//! decision is the server's.

use std::ffi::{c_char, c_int, CStr, CString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use stitch_control::{
    Call, Context, Stream, Tag, Version, API_VERSION, IOC_CONTEXT, IOC_GET_STREAM, IOC_SET_STREAM,
    IOC_SET_TAG, IOC_STREAM_SYNC, IOC_SYNC, IOC_VERSION, PG_CLOSE, PG_CREATE, PG_DEPEND,
    PG_DISENGAGE, PG_ENGAGE, PG_SYNC,
};

/// The environment variable naming the mount the plain calls act on.
pub const MOUNT_ENV: &str = "STITCHFS_MOUNT";

fn set_errno(e: c_int) {
    // SAFETY: errno is this thread's own.
    unsafe { *libc::__errno_location() = e };
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The mount the plain calls act on: `$STITCHFS_MOUNT`, else `.`.
fn open_mount() -> Result<OwnedFd, c_int> {
    let path = std::env::var_os(MOUNT_ENV).unwrap_or_else(|| ".".into());
    let c = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
        .map_err(|_| libc::EINVAL)?;
    // SAFETY: a valid C path; the descriptor returned is ours alone.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: just opened, owned by no one else.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// Runs `f` on the mount of `fd`, or of the default path when `fd` is
/// `None`; returns its value, or `-1` with `errno` set.
fn on_mount(fd: Option<c_int>, f: impl FnOnce(BorrowedFd<'_>) -> Result<c_int, c_int>) -> c_int {
    let owned;
    let fd = match fd {
        Some(fd) if fd < 0 => {
            set_errno(libc::EBADF);
            return -1;
        }
        // SAFETY: the caller passed an open descriptor it keeps open
        // for the duration of the call.
        Some(fd) => unsafe { BorrowedFd::borrow_raw(fd) },
        None => match open_mount() {
            Ok(o) => {
                owned = o;
                owned.as_fd()
            }
            Err(e) => {
                set_errno(e);
                return -1;
            }
        },
    };
    match f(fd) {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn sync(fd: BorrowedFd<'_>) -> Result<c_int, c_int> {
    // SAFETY: an argument-less ioctl on an open descriptor.
    match unsafe { libc::ioctl(fd.as_raw_fd(), IOC_SYNC as _) } {
        0 => Ok(0),
        _ => Err(errno()),
    }
}

fn version(fd: BorrowedFd<'_>) -> Result<c_int, c_int> {
    let mut v = Version::default();
    // SAFETY: the kernel writes the command's size, size_of::<Version>().
    match unsafe { libc::ioctl(fd.as_raw_fd(), IOC_VERSION as _, &mut v as *mut Version) } {
        0 => Ok(v.api as c_int),
        _ => Err(errno()),
    }
}

fn context(fd: BorrowedFd<'_>, id: u64, out: *mut Context) -> Result<c_int, c_int> {
    if out.is_null() {
        return Err(libc::EINVAL);
    }
    let mut c = Context {
        version: API_VERSION,
        id,
        ..Context::default()
    };
    // SAFETY: the kernel reads and writes the command's size,
    // size_of::<Context>(), in `c`.
    if unsafe { libc::ioctl(fd.as_raw_fd(), IOC_CONTEXT as _, &mut c as *mut Context) } != 0 {
        return Err(errno());
    }
    // SAFETY: the caller passed a pointer to a `struct stitch_context`.
    unsafe { out.write(c) };
    Ok(0)
}

fn set_tag(fd: BorrowedFd<'_>, tag: u64) -> Result<c_int, c_int> {
    let t = Tag {
        version: API_VERSION,
        flags: 0,
        tag,
    };
    // SAFETY: the kernel reads the command's size, size_of::<Tag>().
    match unsafe { libc::ioctl(fd.as_raw_fd(), IOC_SET_TAG as _, &t as *const Tag) } {
        0 => Ok(0),
        _ => Err(errno()),
    }
}

fn set_stream(fd: BorrowedFd<'_>, name: *const c_char, flags: u32) -> Result<c_int, c_int> {
    let name: &[u8] = if name.is_null() {
        b""
    } else {
        // SAFETY: the caller passed a NUL-terminated string.
        unsafe { CStr::from_ptr(name) }.to_bytes()
    };
    let s = Stream::named(name, flags).ok_or(libc::ENAMETOOLONG)?;
    // SAFETY: the kernel reads the command's size, size_of::<Stream>().
    match unsafe { libc::ioctl(fd.as_raw_fd(), IOC_SET_STREAM as _, &s as *const Stream) } {
        0 => Ok(0),
        _ => Err(errno()),
    }
}

fn get_stream(fd: BorrowedFd<'_>, out: *mut Stream) -> Result<c_int, c_int> {
    if out.is_null() {
        return Err(libc::EINVAL);
    }
    let mut s = Stream {
        version: API_VERSION,
        ..Stream::default()
    };
    // SAFETY: the kernel reads and writes the command's size,
    // size_of::<Stream>(), in `s`.
    if unsafe { libc::ioctl(fd.as_raw_fd(), IOC_GET_STREAM as _, &mut s as *mut Stream) } != 0 {
        return Err(errno());
    }
    // SAFETY: the caller passed a pointer to a `struct stitch_stream`.
    unsafe { out.write(s) };
    Ok(0)
}

fn stream_sync(fd: BorrowedFd<'_>) -> Result<c_int, c_int> {
    let c = Call {
        version: API_VERSION,
        flags: 0,
    };
    // SAFETY: the kernel reads the command's size, size_of::<Call>().
    match unsafe { libc::ioctl(fd.as_raw_fd(), IOC_STREAM_SYNC as _, &c as *const Call) } {
        0 => Ok(0),
        _ => Err(errno()),
    }
}

/// Puts the calling thread in the stream `name` (NULL or empty: none).
#[no_mangle]
pub extern "C" fn setstream(name: *const c_char, flags: u32) -> c_int {
    on_mount(None, |fd| set_stream(fd, name, flags))
}

/// [`setstream`] on the mount holding `fd`.
#[no_mangle]
pub extern "C" fn setstream_at(fd: c_int, name: *const c_char, flags: u32) -> c_int {
    on_mount(Some(fd), |fd| set_stream(fd, name, flags))
}

/// The calling thread's stream, into `*out`.
#[no_mangle]
pub extern "C" fn getstream(out: *mut Stream) -> c_int {
    on_mount(None, |fd| get_stream(fd, out))
}

/// [`getstream`] on the mount holding `fd`.
#[no_mangle]
pub extern "C" fn getstream_at(fd: c_int, out: *mut Stream) -> c_int {
    on_mount(Some(fd), |fd| get_stream(fd, out))
}

/// Makes the calling thread's stream durable.
#[no_mangle]
pub extern "C" fn streamsync() -> c_int {
    on_mount(None, stream_sync)
}

/// [`streamsync`] on the mount holding `fd`.
#[no_mangle]
pub extern "C" fn streamsync_at(fd: c_int) -> c_int {
    on_mount(Some(fd), stream_sync)
}

/// One patchgroup call: the group the answer names, or `-1`.
fn patchgroup(fd: Option<c_int>, op: u32, group: i64, on: i64) -> i64 {
    let mut answer: i64 = -1;
    let r = on_mount(fd, |fd| {
        let (Ok(group), Ok(on)) = (u64::try_from(group), u64::try_from(on)) else {
            return Err(libc::EBADF);
        };
        let g = stitch_control::request_patchgroup(&fd, op, group, on)
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
        answer = i64::try_from(g).map_err(|_| libc::EOVERFLOW)?;
        Ok(0)
    });
    if r < 0 {
        -1
    } else {
        answer
    }
}

/// A new patchgroup, held by the calling process: its number (> 0), or
/// `-1`.
#[no_mangle]
pub extern "C" fn pg_create() -> i64 {
    patchgroup(None, PG_CREATE, 0, 0)
}

/// [`pg_create`] on the mount holding `fd`.
#[no_mangle]
pub extern "C" fn pg_create_at(fd: c_int) -> i64 {
    patchgroup(Some(fd), PG_CREATE, 0, 0)
}

/// `q`'s changes reach the disk only after every change of `p`.
#[no_mangle]
pub extern "C" fn pg_depend(q: i64, p: i64) -> c_int {
    ok(patchgroup(None, PG_DEPEND, q, p))
}

/// [`pg_depend`] on the mount holding `fd`.
#[no_mangle]
pub extern "C" fn pg_depend_at(fd: c_int, q: i64, p: i64) -> c_int {
    ok(patchgroup(Some(fd), PG_DEPEND, q, p))
}

/// The calling process's later changes belong to `g` too.
#[no_mangle]
pub extern "C" fn pg_engage(g: i64) -> c_int {
    ok(patchgroup(None, PG_ENGAGE, g, 0))
}

/// [`pg_engage`] on the mount holding `fd`.
#[no_mangle]
pub extern "C" fn pg_engage_at(fd: c_int, g: i64) -> c_int {
    ok(patchgroup(Some(fd), PG_ENGAGE, g, 0))
}

/// The calling process's later changes no longer belong to `g`.
#[no_mangle]
pub extern "C" fn pg_disengage(g: i64) -> c_int {
    ok(patchgroup(None, PG_DISENGAGE, g, 0))
}

/// [`pg_disengage`] on the mount holding `fd`.
#[no_mangle]
pub extern "C" fn pg_disengage_at(fd: c_int, g: i64) -> c_int {
    ok(patchgroup(Some(fd), PG_DISENGAGE, g, 0))
}

/// Makes `g` and what it depends on durable.
#[no_mangle]
pub extern "C" fn pg_sync(g: i64) -> c_int {
    ok(patchgroup(None, PG_SYNC, g, 0))
}

/// [`pg_sync`] on the mount holding `fd`.
#[no_mangle]
pub extern "C" fn pg_sync_at(fd: c_int, g: i64) -> c_int {
    ok(patchgroup(Some(fd), PG_SYNC, g, 0))
}

/// The calling process lets go of `g`.
#[no_mangle]
pub extern "C" fn pg_close(g: i64) -> c_int {
    ok(patchgroup(None, PG_CLOSE, g, 0))
}

/// [`pg_close`] on the mount holding `fd`.
#[no_mangle]
pub extern "C" fn pg_close_at(fd: c_int, g: i64) -> c_int {
    ok(patchgroup(Some(fd), PG_CLOSE, g, 0))
}

fn ok(answer: i64) -> c_int {
    if answer < 0 {
        -1
    } else {
        0
    }
}

/// Makes everything the mount holds durable.
#[no_mangle]
pub extern "C" fn stitch_sync() -> c_int {
    on_mount(None, sync)
}

/// [`stitch_sync`] on the mount holding `fd`.
#[no_mangle]
pub extern "C" fn stitch_sync_at(fd: c_int) -> c_int {
    on_mount(Some(fd), sync)
}

/// The API version the mount's server speaks.
#[no_mangle]
pub extern "C" fn stitch_version() -> c_int {
    on_mount(None, version)
}

/// [`stitch_version`] on the mount holding `fd`.
#[no_mangle]
pub extern "C" fn stitch_version_at(fd: c_int) -> c_int {
    on_mount(Some(fd), version)
}

/// The calling process's context (`id` 0) or the one numbered `id`,
/// into `*out`.
#[no_mangle]
pub extern "C" fn stitch_context(id: u64, out: *mut Context) -> c_int {
    on_mount(None, |fd| context(fd, id, out))
}

/// [`stitch_context`] on the mount holding `fd`.
#[no_mangle]
pub extern "C" fn stitch_context_at(fd: c_int, id: u64, out: *mut Context) -> c_int {
    on_mount(Some(fd), |fd| context(fd, id, out))
}

/// Gives the calling process a context and sets its tag.
#[no_mangle]
pub extern "C" fn stitch_set_tag(tag: u64) -> c_int {
    on_mount(None, |fd| set_tag(fd, tag))
}

/// [`stitch_set_tag`] on the mount holding `fd`.
#[no_mangle]
pub extern "C" fn stitch_set_tag_at(fd: c_int, tag: u64) -> c_int {
    on_mount(Some(fd), |fd| set_tag(fd, tag))
}

/// Makes the calling process a child subreaper, so that an orphaned
/// descendant stays in its family (and inherits from it).
#[no_mangle]
pub extern "C" fn stitch_subreaper() -> c_int {
    // SAFETY: prctl with integer arguments only.
    match unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } {
        0 => 0,
        _ => {
            set_errno(errno());
            -1
        }
    }
}

/// What `err`, an errno set by one of these calls, means. The string is
/// static.
#[no_mangle]
pub extern "C" fn stitch_strerror(err: c_int) -> *const c_char {
    let msg: &'static CStr = match err {
        libc::ENOTTY => c"not a stitchfs mount (or a call this server does not know)",
        libc::EINVAL => c"a structure of the wrong size or version, a bad argument, a stream sync by a thread in no stream, or a patchgroup call the rules forbid (engaging a sealed group, a dependency of a group already engaged or sealed)",
        libc::EPERM => c"the handle, stream or patchgroup belongs to another user",
        libc::EBADF => c"an unknown or closed handle or patchgroup (its process exited, or this process does not hold it), or a bad descriptor",
        libc::EBUSY => c"a dependency on a patchgroup some process has engaged (disengage it first)",
        libc::EIO => c"the mount latched a device error: nothing more is durable",
        libc::EROFS => c"the mount is read-only",
        libc::EAGAIN => c"a limit of the mount is reached; try again once some are released",
        libc::ESRCH => c"the calling process could not be identified (it exited meanwhile)",
        libc::ENOENT => c"no such file or directory (the mount path)",
        libc::EACCES => c"permission denied (the mount path)",
        libc::ENAMETOOLONG => c"a stream name longer than 63 bytes",
        _ => c"unexpected error",
    };
    msg.as_ptr()
}
