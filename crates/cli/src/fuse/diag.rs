//! Where the mount's messages go: stderr while attached to a terminal
//! (`--foreground`, or before daemonizing), syslog (facility daemon, tag
//! `stitchfs`) once the daemon has left it. A failed write to stderr is
//! ignored rather than panicking inside a request handler.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

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
