//! Process plumbing around a mount: leaving the terminal (the parent exits
//! only once the mount works, with the child's error otherwise), and
//! ending on SIGINT, SIGTERM or SIGHUP by unmounting, so that the session
//! loop returns and memfs is unmounted cleanly.

use super::diag;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// The daemon's end of the pipe its parent waits on.
pub struct Ready(OwnedFd);

/// Forks. The parent waits until the child reports the mount ready and
/// exits 0, or exits with the child's status (the child has printed its
/// error) when it fails first. The child returns, in a new session.
///
/// Must be called while the process has one thread: nothing but the
/// calling thread survives `fork`.
pub fn daemonize() -> io::Result<Ready> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 returned two fresh descriptors that nothing else owns.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the process is single-threaded here (see above).
    let pid = cvt(unsafe { libc::fork() })?;
    if pid > 0 {
        drop(wr);
        std::process::exit(wait_for_child(rd, pid));
    }
    drop(rd);
    // SAFETY: setsid has no memory effects; it fails only for a group leader,
    // which a fresh child is not.
    unsafe { libc::setsid() };
    Ok(Ready(wr))
}

/// The parent: 0 once the child says ready; else the child's exit code.
fn wait_for_child(rd: OwnedFd, pid: libc::pid_t) -> i32 {
    let mut byte = 0u8;
    let n = loop {
        // SAFETY: reads at most one byte into `byte`.
        let n = unsafe { libc::read(rd.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        break n;
    };
    if n == 1 && byte == b'R' {
        return 0;
    }
    let mut status = 0;
    // SAFETY: waits for our own child and writes its status into `status`.
    if unsafe { libc::waitpid(pid, &mut status, 0) } == pid && libc::WIFEXITED(status) {
        return libc::WEXITSTATUS(status).max(1);
    }
    1
}

impl Ready {
    /// Tells the parent the mount works, and leaves the terminal: stdio
    /// goes to /dev/null, messages to syslog, the working directory to /.
    pub fn ready(self) -> io::Result<()> {
        // SAFETY: writes one byte from a static.
        cvt(unsafe { libc::write(self.0.as_raw_fd(), b"R".as_ptr().cast(), 1) } as i32)?;
        drop(self);
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        for fd in 0..=2 {
            // SAFETY: dup2 onto the standard descriptors, which we own.
            cvt(unsafe { libc::dup2(null.as_raw_fd(), fd) })?;
        }
        diag::use_syslog();
        std::env::set_current_dir("/")
    }
}

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialize and fill the set we own.
    unsafe {
        let mut set = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread and every thread it
/// starts later, so only [`on_signal`]'s thread takes them. Call before
/// starting any thread.
pub fn block_signals() -> io::Result<()> {
    let set = signal_set();
    // SAFETY: changes this thread's mask with a valid set.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Starts a thread that waits for the blocked signals and calls `first`
/// on the first one and `again` on each later one.
pub fn on_signal(
    first: impl FnOnce(&str) + Send + 'static,
    again: impl Fn(&str) + Send + 'static,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("stitchfs-signals".into())
        .spawn(move || {
            let set = signal_set();
            let mut first = Some(first);
            loop {
                let mut sig = 0;
                // SAFETY: waits on a valid set; writes the signal number.
                if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                    continue;
                }
                let name = match sig {
                    libc::SIGINT => "SIGINT",
                    libc::SIGTERM => "SIGTERM",
                    _ => "SIGHUP",
                };
                match first.take() {
                    Some(f) => f(name),
                    None => again(name),
                }
            }
        })?;
    Ok(())
}

/// Set once the mount has been asked to go (by us), so that the end of the
/// session loop is expected.
pub static UNMOUNT_ASKED: AtomicBool = AtomicBool::new(false);

/// Takes the mount at `mountpoint` away: a plain unmount, or when files are
/// still open on it (`EBUSY`), a lazy one, after which the session ends as
/// soon as the last of them is closed.
pub fn unmount(mountpoint: &Path, session: &mut fuser::SessionUnmounter) -> io::Result<()> {
    UNMOUNT_ASKED.store(true, Ordering::SeqCst);
    match session.unmount() {
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            diag::info(&format!(
                "{} is busy: detached it; stitchfs finishes when the last file open on it \
                 is closed (signal again to finish now)",
                mountpoint.display()
            ));
            detach(mountpoint)
        }
        other => other,
    }
}

/// A lazy unmount (`umount -l`), through fusermount3 when we may not.
fn detach(mountpoint: &Path) -> io::Result<()> {
    let c = CString::new(mountpoint.as_os_str().as_bytes())?;
    // SAFETY: a valid C path and constant flags.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(());
    }
    let status = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg("-z")
        .arg(mountpoint)
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("fusermount3 -u -z: {status}")))
    }
}
