//! The pseudo-terminal a command runs on, and our own terminal around it.

use std::fs::{File, OpenOptions};
use std::io::{self, IsTerminal, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;

use nix::fcntl::OFlag;
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg, Termios};

use crate::sys::wait_readable;

/// A pseudo-terminal for the command, and which of our streams is a terminal whose
/// window size it copies.
pub(crate) struct Pty {
    master: Arc<File>,
    slave: Option<File>,
    size_from: Option<File>,
}

impl Pty {
    /// Opens a pseudo-terminal (both sides close-on-exec, so no other child inherits
    /// them) and gives it the window size of the first of `ours` that is a terminal.
    pub(crate) fn open(ours: &[&File]) -> io::Result<Self> {
        let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
        grantpt(&master)?;
        unlockpt(&master)?;
        let name = ptsname_r(&master)?;
        let slave = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(&name)?;
        let size_from = match ours.iter().find(|f| f.is_terminal()) {
            Some(f) => Some(f.try_clone()?),
            None => None,
        };
        let pty = Pty {
            master: Arc::new(File::from(OwnedFd::from(master))),
            slave: Some(slave),
            size_from,
        };
        pty.copy_size();
        Ok(pty)
    }

    pub(crate) fn master(&self) -> &Arc<File> {
        &self.master
    }

    /// Makes the slave the command's standard streams and controlling terminal, in a
    /// session of its own.
    pub(crate) fn attach(&self, cmd: &mut Command) -> io::Result<()> {
        let slave = self
            .slave
            .as_ref()
            .ok_or_else(|| io::Error::other("the terminal's slave side is already closed"))?;
        cmd.stdin(Stdio::from(slave.try_clone()?))
            .stdout(Stdio::from(slave.try_clone()?))
            .stderr(Stdio::from(slave.try_clone()?));
        // SAFETY: runs in the child between fork and exec, and calls only setsid and ioctl,
        // which are async-signal-safe; it touches no memory of the parent's.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// Drops our copy of the slave side once the command has it, so that reading the
    /// master ends when the command's side is closed.
    pub(crate) fn close_slave(&mut self) {
        self.slave = None;
    }

    /// Copies our terminal's window size to the command's (at start and on SIGWINCH).
    pub(crate) fn copy_size(&self) {
        let Some(from) = &self.size_from else {
            return;
        };
        // SAFETY: a zeroed winsize is a valid value; both ioctls take a pointer to one that
        // lives across the call, on descriptors we own.
        unsafe {
            let mut size: libc::winsize = std::mem::zeroed();
            if libc::ioctl(from.as_raw_fd(), libc::TIOCGWINSZ, &mut size) == 0 {
                libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &size);
            }
        }
    }
}

/// Our terminal in raw mode (keys go to the command's terminal as typed), put back as it
/// was when dropped: on return, on error and on unwinding alike.
pub(crate) struct RawMode {
    fd: File,
    saved: Termios,
}

impl RawMode {
    /// Puts `fd` in raw mode if it is a terminal.
    pub(crate) fn enter(fd: &File) -> io::Result<Option<Self>> {
        if !fd.is_terminal() {
            return Ok(None);
        }
        let saved = tcgetattr(fd)?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        let guard = RawMode {
            fd: fd.try_clone()?,
            saved,
        };
        tcsetattr(fd, SetArg::TCSADRAIN, &raw)?;
        Ok(Some(guard))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = tcsetattr(&self.fd, SetArg::TCSADRAIN, &self.saved);
    }
}

/// Passes our input to the command's terminal as it comes (input is not output, so it
/// is never held), until our input ends, the terminal is gone, or `stop` is readable.
pub(crate) fn relay_input(input: &File, master: &File, stop: &io::PipeReader) {
    let mut buf = [0u8; 4096];
    let (mut from, mut to) = (input, master);
    loop {
        match wait_readable(input.as_fd(), stop.as_fd()) {
            Ok(true) => {}
            Ok(false) | Err(_) => return,
        }
        match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) => {}
            Err(_) => return,
        }
    }
}
