//! Small helpers over file descriptors and locks.

use std::fs::File;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// Locks `m`, taking the data as it is if another thread panicked while holding it:
/// every structure kept under these locks stays consistent between statements.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `cond` until woken (or spuriously), tolerating a poisoned lock.
pub(crate) fn wait<'a, T>(cond: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cond.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `cond` until woken or `deadline` passes; `None` waits without end.
pub(crate) fn wait_until<'a, T>(
    cond: &Condvar,
    guard: MutexGuard<'a, T>,
    deadline: Option<Instant>,
) -> MutexGuard<'a, T> {
    match deadline {
        None => wait(cond, guard),
        Some(at) => {
            let left = at.saturating_duration_since(Instant::now());
            cond.wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0
        }
    }
}

/// The caller's descriptor if given, else a duplicate of `ours` (one of our standard
/// streams), so that the relay owns every descriptor it writes to.
pub(crate) fn own_or_dup(given: Option<OwnedFd>, ours: BorrowedFd<'_>) -> io::Result<File> {
    match given {
        Some(fd) => Ok(File::from(fd)),
        None => Ok(File::from(ours.try_clone_to_owned()?)),
    }
}

/// Blocks until `fd` is readable (or at its end, or in error: a read will tell which),
/// returning true, or until `stop` becomes readable, returning false. `stop` is the read
/// end of a pipe whose write end is dropped to stop every waiter at once.
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, stop: BorrowedFd<'_>) -> io::Result<bool> {
    loop {
        let mut fds = [
            PollFd::new(fd, PollFlags::POLLIN),
            PollFd::new(stop, PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            return Ok(false);
        }
        if fds[0].revents().is_some_and(|r| !r.is_empty()) {
            return Ok(true);
        }
    }
}
