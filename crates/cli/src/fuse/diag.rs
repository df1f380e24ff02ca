//! Where the mount's messages go: stderr while attached to a terminal
//! (`--foreground`, or before daemonizing), syslog (facility daemon, tag
//! `stitchfs`) once the daemon has left it. A failed write to stderr is
//! ignored rather than panicking inside a request handler.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

static SYSLOG: AtomicBool = AtomicBool::new(false);

/// From now on, messages go to syslog.
pub fn use_syslog() {
    // SAFETY: the identifier is a static C string that outlives the process.
    unsafe { libc::openlog(c"stitchfs".as_ptr(), libc::LOG_PID, libc::LOG_DAEMON) };
    SYSLOG.store(true, Ordering::SeqCst);
}

fn emit(level: libc::c_int, msg: &str) {
    if SYSLOG.load(Ordering::SeqCst) {
        let c = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: both strings are valid NUL-terminated C strings; "%s"
        // keeps `msg` from being read as a format.
        unsafe { libc::syslog(level, c"%s".as_ptr(), c.as_ptr()) };
    } else {
        let _ = writeln!(std::io::stderr(), "stitchfs: {msg}");
    }
}

pub fn error(msg: &str) {
    emit(libc::LOG_ERR, msg);
}

/// At most this many request errors are logged per second; a device that
/// failed (every write then answers EROFS) must not flood the log.
const REQUEST_ERRORS_PER_SECOND: u32 = 20;

/// The second being counted, errors logged in it, and errors left out.
static LIMIT: Mutex<(u64, u32, u64)> = Mutex::new((0, 0, 0));

/// [`error`] for a failed request, rate-limited; how many were left out is
/// said with the next one logged.
pub fn request_error(msg: &str) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut l = LIMIT.lock().unwrap_or_else(|e| e.into_inner());
    if l.0 != now {
        *l = (now, 0, l.2);
    }
    if l.1 >= REQUEST_ERRORS_PER_SECOND {
        l.2 += 1;
        return;
    }
    l.1 += 1;
    let skipped = std::mem::take(&mut l.2);
    drop(l);
    if skipped > 0 {
        error(&format!("({skipped} more request errors not logged)"));
    }
    error(msg);
}

pub fn info(msg: &str) {
    emit(libc::LOG_INFO, msg);
}

/// Routes panic messages (with their location) through [`error`], so a
/// daemon's panics reach syslog too.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        error(&format!(
            "thread '{}' {info}",
            thread.name().unwrap_or("unnamed")
        ));
    }));
}
