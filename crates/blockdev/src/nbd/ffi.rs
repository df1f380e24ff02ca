//! The part of libnbd's C interface (`libnbd.h`, Debian's libnbd-dev) that
//! [`super::conn`] uses. libnbd's own Rust bindings are not published on
//! crates.io and need a newer libnbd than Debian stable ships, so these few
//! declarations are written here, checked against libnbd 1.14's header.
//!
//! Every function takes the handle first; a handle may be used from any
//! thread but [`super::conn`] only ever uses it under one lock. Errors are
//! thread-local: `nbd_get_error`/`nbd_get_errno` describe the last failed
//! call made by the calling thread.

use std::ffi::{c_char, c_int, c_void};

/// libnbd's opaque handle.
#[repr(C)]
pub struct Handle {
    _private: [u8; 0],
}

/// `nbd_completion_callback`, passed by value; all null is
/// `NBD_NULL_COMPLETION` (no callback: the caller polls with
/// `nbd_aio_command_completed`).
#[repr(C)]
pub struct Completion {
    pub callback: Option<unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int>,
    pub user_data: *mut c_void,
    pub free: Option<unsafe extern "C" fn(*mut c_void)>,
}

impl Completion {
    pub const NONE: Completion = Completion {
        callback: None,
        user_data: std::ptr::null_mut(),
        free: None,
    };
}

/// `LIBNBD_CMD_FLAG_FUA`: the write is durable when its reply arrives.
pub const CMD_FLAG_FUA: u32 = 0x01;
/// `LIBNBD_SIZE_MINIMUM` for `nbd_get_block_size`.
pub const SIZE_MINIMUM: c_int = 0;

#[link(name = "nbd")]
extern "C" {
    pub fn nbd_create() -> *mut Handle;
    pub fn nbd_close(h: *mut Handle);
    pub fn nbd_get_error() -> *const c_char;
    pub fn nbd_get_errno() -> c_int;
    pub fn nbd_set_uri_allow_local_file(h: *mut Handle, allow: bool) -> c_int;
    pub fn nbd_aio_connect_uri(h: *mut Handle, uri: *const c_char) -> c_int;
    pub fn nbd_poll(h: *mut Handle, timeout: c_int) -> c_int;
    pub fn nbd_aio_is_ready(h: *mut Handle) -> c_int;
    pub fn nbd_aio_is_dead(h: *mut Handle) -> c_int;
    pub fn nbd_aio_is_closed(h: *mut Handle) -> c_int;
    pub fn nbd_get_size(h: *mut Handle) -> i64;
    pub fn nbd_get_block_size(h: *mut Handle, size_type: c_int) -> i64;
    pub fn nbd_is_read_only(h: *mut Handle) -> c_int;
    pub fn nbd_can_flush(h: *mut Handle) -> c_int;
    pub fn nbd_can_fua(h: *mut Handle) -> c_int;
    pub fn nbd_can_trim(h: *mut Handle) -> c_int;
    pub fn nbd_can_zero(h: *mut Handle) -> c_int;
    pub fn nbd_aio_pread(
        h: *mut Handle,
        buf: *mut c_void,
        count: usize,
        offset: u64,
        completion: Completion,
        flags: u32,
    ) -> i64;
    pub fn nbd_aio_pwrite(
        h: *mut Handle,
        buf: *const c_void,
        count: usize,
        offset: u64,
        completion: Completion,
        flags: u32,
    ) -> i64;
    pub fn nbd_aio_flush(h: *mut Handle, completion: Completion, flags: u32) -> i64;
    pub fn nbd_aio_trim(
        h: *mut Handle,
        count: u64,
        offset: u64,
        completion: Completion,
        flags: u32,
    ) -> i64;
    pub fn nbd_aio_zero(
        h: *mut Handle,
        count: u64,
        offset: u64,
        completion: Completion,
        flags: u32,
    ) -> i64;
    pub fn nbd_aio_command_completed(h: *mut Handle, cookie: u64) -> c_int;
    pub fn nbd_aio_disconnect(h: *mut Handle, flags: u32) -> c_int;
}
