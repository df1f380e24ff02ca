//! One NBD connection through libnbd, with the two things libnbd leaves to
//! its caller: a bound on how long the server may stay silent, and several
//! commands in flight at once.
//!
//! Every command runs under the connection's lock: a call issues its
//! commands (at most `depth` unanswered at a time), polls until each is
//! answered, and returns. So buffers lent to libnbd outlive every command
//! that uses them: a call returns only once its commands are answered, or
//! once the handle is closed, after which libnbd touches nothing.
//!
//! Two kinds of failure (see [`ConnError`]): the server answered a command
//! with an error, and the connection is fine; or the connection is lost (the
//! server went away, broke the protocol, or sent nothing for `timeout` while
//! commands waited). The second closes the handle for good: nothing is
//! retried and no later call reaches the server. Reconnecting is left to
//! whoever opens the device again, after recovery.

use std::ffi::{CStr, CString};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::ffi;

/// What the server said it can do, read once after the handshake.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Caps {
    pub size: u64,
    pub read_only: bool,
    pub flush: bool,
    pub fua: bool,
    pub trim: bool,
    pub zero: bool,
    /// Smallest request the server accepts, in bytes (1 if it says none).
    pub min_block: u64,
}

#[derive(Debug, Clone)]
pub enum ConnError {
    /// Connecting or the handshake failed (no server, export refused, TLS).
    Refused(String),
    /// The server answered a command with an error; the connection lives.
    Command { errno: i32, message: String },
    /// The connection is gone; the handle is closed.
    Lost(String),
}

impl std::fmt::Display for ConnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnError::Refused(m) | ConnError::Lost(m) => f.write_str(m),
            ConnError::Command { message, .. } => f.write_str(message),
        }
    }
}

/// One command to issue. Pointers come from the safe methods below, whose
/// borrows outlive [`Conn::run`].
#[derive(Copy, Clone)]
pub(super) enum Cmd {
    Read {
        buf: *mut u8,
        len: usize,
        off: u64,
    },
    Write {
        buf: *const u8,
        len: usize,
        off: u64,
        fua: bool,
    },
    Flush,
    Zero {
        len: u64,
        off: u64,
    },
    Trim {
        len: u64,
        off: u64,
    },
}

/// The raw handle; closed on drop.
struct Raw(*mut ffi::Handle);

// SAFETY: libnbd handles may be used from any thread; `Conn` only uses
// this one under its mutex.
unsafe impl Send for Raw {}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: the handle is valid until nbd_close, called once here.
        unsafe {
            // A polite NBD_CMD_DISC if the connection still works, waiting
            // at most a moment for the server to close its end.
            if ffi::nbd_aio_is_ready(self.0) == 1 && ffi::nbd_aio_disconnect(self.0, 0) == 0 {
                let until = Instant::now() + Duration::from_millis(500);
                while ffi::nbd_aio_is_closed(self.0) != 1
                    && ffi::nbd_aio_is_dead(self.0) != 1
                    && Instant::now() < until
                    && ffi::nbd_poll(self.0, 100) >= 0
                {}
            }
            ffi::nbd_close(self.0);
        }
    }
}

pub struct Conn {
    raw: Mutex<Option<Raw>>,
    caps: Caps,
    timeout: Duration,
    depth: usize,
}

/// libnbd's description of the calling thread's last error.
fn last_error() -> String {
    // SAFETY: nbd_get_error returns a thread-local string or null.
    let p = unsafe { ffi::nbd_get_error() };
    if p.is_null() {
        return "unknown libnbd error".into();
    }
    // SAFETY: non-null, NUL-terminated, valid until the next libnbd call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn last_errno() -> i32 {
    // SAFETY: reads a thread-local.
    unsafe { ffi::nbd_get_errno() }
}

fn millis(d: Duration) -> i32 {
    d.as_millis().clamp(1, i32::MAX as u128) as i32
}

impl Conn {
    /// Connects to `uri` and completes the handshake within `timeout`.
    pub fn connect(uri: &str, timeout: Duration, depth: usize) -> Result<Conn, ConnError> {
        let c_uri = CString::new(uri)
            .map_err(|_| ConnError::Refused(format!("{uri:?} holds a NUL byte")))?;
        // SAFETY: nbd_create has no preconditions; null means failure.
        let h = unsafe { ffi::nbd_create() };
        if h.is_null() {
            return Err(ConnError::Refused(last_error()));
        }
        let raw = Raw(h);
        let connecting = |e: String| {
            ConnError::Refused(format!(
                "cannot connect (is the NBD server running, and the URI right?): {e}"
            ))
        };
        // The URI is the user's own, from the command line: let it name
        // local files (`tls-psk-file`, `tls-certificates`), as libnbd's own
        // tools do.
        // SAFETY: valid handle.
        if unsafe { ffi::nbd_set_uri_allow_local_file(h, true) } == -1 {
            return Err(ConnError::Refused(last_error()));
        }
        // SAFETY: valid handle and C string.
        if unsafe { ffi::nbd_aio_connect_uri(h, c_uri.as_ptr()) } == -1 {
            return Err(connecting(last_error()));
        }
        let until = Instant::now() + timeout;
        // SAFETY (whole loop): valid handle.
        while unsafe { ffi::nbd_aio_is_ready(h) } != 1 {
            if unsafe { ffi::nbd_aio_is_dead(h) } == 1 || unsafe { ffi::nbd_aio_is_closed(h) } == 1
            {
                return Err(connecting(last_error()));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ConnError::Refused(format!(
                    "no answer to the handshake within {} s",
                    timeout.as_secs_f64()
                )));
            }
            if unsafe { ffi::nbd_poll(h, millis(left)) } == -1 {
                return Err(connecting(last_error()));
            }
        }
        let flag = |v: i32| v == 1;
        // SAFETY: valid, connected handle.
        let caps = unsafe {
            let size = ffi::nbd_get_size(h);
            if size < 0 {
                return Err(ConnError::Refused(last_error()));
            }
            Caps {
                size: size as u64,
                read_only: flag(ffi::nbd_is_read_only(h)),
                flush: flag(ffi::nbd_can_flush(h)),
                fua: flag(ffi::nbd_can_fua(h)),
                trim: flag(ffi::nbd_can_trim(h)),
                zero: flag(ffi::nbd_can_zero(h)),
                min_block: ffi::nbd_get_block_size(h, ffi::SIZE_MINIMUM).max(1) as u64,
            }
        };
        Ok(Conn {
            raw: Mutex::new(Some(raw)),
            caps,
            timeout,
            depth: depth.max(1),
        })
    }

    pub fn caps(&self) -> Caps {
        self.caps
    }

    /// Whether the connection was lost (and closed).
    pub fn is_lost(&self) -> bool {
        self.lock().is_none()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Raw>> {
        self.raw.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), ConnError> {
        let cmd = Cmd::Read {
            buf: buf.as_mut_ptr(),
            len: buf.len(),
            off,
        };
        self.run(&[cmd])
    }

    /// Writes each `(offset, bytes)`, up to `depth` at a time.
    pub fn write(&self, writes: &[(u64, &[u8])], fua: bool) -> Result<(), ConnError> {
        let cmds: Vec<Cmd> = writes
            .iter()
            .map(|&(off, data)| Cmd::Write {
                buf: data.as_ptr(),
                len: data.len(),
                off,
                fua,
            })
            .collect();
        self.run(&cmds)
    }

    pub fn flush(&self) -> Result<(), ConnError> {
        self.run(&[Cmd::Flush])
    }

    /// Makes `len` bytes at `off` read as zeros (NBD_CMD_WRITE_ZEROES).
    pub fn zero(&self, off: u64, len: u64) -> Result<(), ConnError> {
        self.run(&[Cmd::Zero { len, off }])
    }

    /// Tells the server `len` bytes at `off` are unused (NBD_CMD_TRIM), in
    /// requests of at most 1 GiB (NBD lengths are 32 bits).
    pub fn trim(&self, off: u64, len: u64) -> Result<(), ConnError> {
        const STEP: u64 = 1 << 30;
        let cmds: Vec<Cmd> = (0..len.div_ceil(STEP))
            .map(|i| Cmd::Trim {
                off: off + i * STEP,
                len: STEP.min(len - i * STEP),
            })
            .collect();
        self.run(&cmds)
    }

    /// Issues `cmds`, at most `depth` unanswered at a time, and waits for
    /// every answer. The first failure is returned once nothing issued is
    /// still waiting; after a command error no further command is issued.
    /// Every pointer in `cmds` must stay valid until this returns.
    fn run(&self, cmds: &[Cmd]) -> Result<(), ConnError> {
        let mut next = cmds.iter().copied().peekable();
        let mut guard = self.lock();
        let Some(raw) = guard.as_ref() else {
            return Err(ConnError::Lost("the connection was lost earlier".into()));
        };
        let h = raw.0;
        let mut waiting: Vec<u64> = Vec::with_capacity(self.depth);
        let mut failed: Option<ConnError> = None;
        let mut last_answer = Instant::now();
        let lost = |guard: &mut Option<Raw>, why: String| {
            // Dropping the handle closes it: libnbd lets go of every buffer.
            *guard = None;
            Err(ConnError::Lost(why))
        };
        loop {
            while failed.is_none() && waiting.len() < self.depth {
                let Some(cmd) = next.next() else { break };
                // SAFETY: valid handle; the caller keeps buffers alive.
                let cookie = unsafe { issue(h, cmd) };
                if cookie == -1 {
                    failed = Some(self.classify(h));
                } else {
                    waiting.push(cookie as u64);
                }
            }
            let mut i = 0;
            while i < waiting.len() {
                // SAFETY: valid handle and a cookie it gave.
                match unsafe { ffi::nbd_aio_command_completed(h, waiting[i]) } {
                    0 => i += 1,
                    done => {
                        waiting.swap_remove(i);
                        last_answer = Instant::now();
                        if done == -1 && failed.is_none() {
                            failed = Some(self.classify(h));
                        }
                    }
                }
            }
            if let Some(ConnError::Lost(why)) = &failed {
                return lost(&mut guard, why.clone());
            }
            if waiting.is_empty() && (failed.is_some() || next.peek().is_none()) {
                return failed.map_or(Ok(()), Err);
            }
            if waiting.is_empty() {
                continue;
            }
            let left = self.timeout.saturating_sub(last_answer.elapsed());
            if left.is_zero() {
                let why = format!(
                    "the server answered nothing for {} s with {} command(s) waiting",
                    self.timeout.as_secs_f64(),
                    waiting.len()
                );
                return lost(&mut guard, why);
            }
            // SAFETY: valid handle.
            if unsafe { ffi::nbd_poll(h, millis(left)) } == -1 {
                return lost(&mut guard, last_error());
            }
        }
    }

    /// After a failed libnbd call: a command error, or a lost connection.
    fn classify(&self, h: *mut ffi::Handle) -> ConnError {
        let (errno, message) = (last_errno(), last_error());
        // SAFETY: valid handle.
        let dead = unsafe { ffi::nbd_aio_is_dead(h) == 1 || ffi::nbd_aio_is_closed(h) == 1 };
        if dead || errno == libc::ENOTCONN {
            ConnError::Lost(message)
        } else {
            ConnError::Command { errno, message }
        }
    }
}

/// Issues one command; the cookie, or -1.
///
/// # Safety
/// `h` is a valid handle and `cmd`'s buffer stays valid until the command
/// is answered or the handle closed.
unsafe fn issue(h: *mut ffi::Handle, cmd: Cmd) -> i64 {
    let none = || ffi::Completion::NONE;
    match cmd {
        Cmd::Read { buf, len, off } => ffi::nbd_aio_pread(h, buf.cast(), len, off, none(), 0),
        Cmd::Write { buf, len, off, fua } => {
            let flags = if fua { ffi::CMD_FLAG_FUA } else { 0 };
            ffi::nbd_aio_pwrite(h, buf.cast(), len, off, none(), flags)
        }
        Cmd::Flush => ffi::nbd_aio_flush(h, none(), 0),
        Cmd::Zero { len, off } => ffi::nbd_aio_zero(h, len, off, none(), 0),
        Cmd::Trim { len, off } => ffi::nbd_aio_trim(h, len, off, none(), 0),
    }
}
