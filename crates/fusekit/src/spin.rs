//! Spinning on the FUSE device while requests come close together.
//!
//! A FUSE round trip here is mostly two scheduler wake-ups: the kernel
//! wakes a server thread sleeping in `read` on `/dev/fuse` when a request
//! comes, and the server's reply wakes the caller. While a burst of
//! requests is under way (a `tar`, a `make`, a mail server's queue), the
//! first of the two is avoidable: a server thread that polls the device
//! without sleeping takes the next request as it lands, and the kernel,
//! finding no thread asleep, wakes none.
//!
//! [`Spin`] turns that on and off. Each request served calls
//! [`Spin::served`]; two within [`BUSY_GAP`] make the device non-blocking
//! (`O_NONBLOCK` on the session's own descriptor, so the thread reading it
//! retries at once where it would sleep). A watcher thread turns it off
//! once no request has been served for [`IDLE`], so an idle mount sleeps
//! as before and a spinning thread burns at most `IDLE` of a core past
//! each burst. Blocking is always correct; spinning only changes how soon
//! a request is seen.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Two requests served this close together start spinning.
pub const BUSY_GAP: Duration = Duration::from_micros(200);

/// Spinning stops this long after the last request served.
pub const IDLE: Duration = Duration::from_millis(1);

/// The switch between sleeping and spinning on one FUSE session's device.
pub struct Spin {
    busy_gap: u64,
    idle: Duration,
    /// A duplicate of the session's descriptor (the same open file, whose
    /// flags are shared); unset until [`Spin::attach`].
    fd: OnceLock<OwnedFd>,
    /// Spinning now (the fast path's view; changed under `turn`).
    on: AtomicBool,
    /// When the last request was served, in nanoseconds since `epoch`.
    last: AtomicU64,
    epoch: OnceLock<Instant>,
    /// Held while turning; its value says spinning, for the watcher.
    turn: Mutex<bool>,
    woken: Condvar,
    /// Times spinning started, for statistics.
    bursts: AtomicU64,
}

impl Spin {
    /// A switch with [`BUSY_GAP`] and [`IDLE`].
    pub fn new() -> Arc<Spin> {
        Spin::with(BUSY_GAP, IDLE)
    }

    /// A switch that starts spinning at two requests `busy_gap` apart and
    /// stops after `idle` without one.
    pub fn with(busy_gap: Duration, idle: Duration) -> Arc<Spin> {
        Arc::new(Spin {
            busy_gap: nanos(busy_gap),
            idle,
            fd: OnceLock::new(),
            on: AtomicBool::new(false),
            last: AtomicU64::new(0),
            epoch: OnceLock::new(),
            turn: Mutex::new(false),
            woken: Condvar::new(),
            bursts: AtomicU64::new(0),
        })
    }

    /// Starts watching the session whose device is `fd` (its first
    /// descriptor; threads reading cloned ones sleep as before). Until
    /// this is called, [`Spin::served`] does nothing.
    pub fn attach(self: &Arc<Self>, fd: BorrowedFd<'_>) -> io::Result<()> {
        let owned = fd.try_clone_to_owned()?;
        let _ = self.epoch.set(Instant::now());
        if self.fd.set(owned).is_err() {
            return Err(io::Error::other("a spin switch watches one session"));
        }
        let me = self.clone();
        std::thread::Builder::new()
            .name("fuse-spin".into())
            .spawn(move || me.watch())?;
        Ok(())
    }

    /// Bursts of spinning so far.
    pub fn bursts(&self) -> u64 {
        self.bursts.load(Ordering::Relaxed)
    }

    /// A request has been served.
    pub fn served(&self) {
        self.served_at(Instant::now());
    }

    /// A request has been served, `at` being now (for a caller that has
    /// just read the clock).
    pub fn served_at(&self, at: Instant) {
        let (Some(fd), Some(epoch)) = (self.fd.get(), self.epoch.get()) else {
            return;
        };
        let now = nanos(at.saturating_duration_since(*epoch));
        let before = self.last.swap(now, Ordering::Relaxed);
        // (`before` 0: the first request, with none before it.)
        let far = before == 0 || now.saturating_sub(before) > self.busy_gap;
        if self.on.load(Ordering::Relaxed) || far {
            return;
        }
        let mut spinning = self.turn.lock().unwrap_or_else(|e| e.into_inner());
        if !*spinning && set_nonblocking(fd, true).is_ok() {
            *spinning = true;
            self.on.store(true, Ordering::Relaxed);
            self.bursts.fetch_add(1, Ordering::Relaxed);
            self.woken.notify_one();
        }
    }

    /// The watcher: waits for spinning to start, then ends it once the
    /// mount has been idle for `idle`.
    fn watch(self: Arc<Self>) {
        let (Some(fd), Some(epoch)) = (self.fd.get(), self.epoch.get()) else {
            return;
        };
        loop {
            let mut spinning = self.turn.lock().unwrap_or_else(|e| e.into_inner());
            while !*spinning {
                spinning = self.woken.wait(spinning).unwrap_or_else(|e| e.into_inner());
            }
            drop(spinning);
            loop {
                std::thread::sleep(self.idle);
                let idle = nanos(epoch.elapsed()).saturating_sub(self.last.load(Ordering::Relaxed));
                if idle < nanos(self.idle) {
                    continue;
                }
                let mut spinning = self.turn.lock().unwrap_or_else(|e| e.into_inner());
                // If the device cannot be made blocking again (the session
                // has ended), there is nothing left to spin on either.
                let _ = set_nonblocking(fd, false);
                *spinning = false;
                self.on.store(false, Ordering::Relaxed);
                break;
            }
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn set_nonblocking(fd: &OwnedFd, on: bool) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, reading and setting its flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let want = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    if want != flags && unsafe { libc::fcntl(fd, libc::F_SETFL, want) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn nonblocking(fd: &impl AsRawFd) -> bool {
        // SAFETY: reading a descriptor's flags.
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) & libc::O_NONBLOCK != 0 }
    }

    #[test]
    fn close_requests_spin_and_idleness_sleeps_again() {
        // Wide margins, so a loaded machine's delays do not decide it.
        let (gap, idle) = (Duration::from_millis(100), Duration::from_millis(50));
        let (r, _w) = std::io::pipe().unwrap();
        let spin = Spin::with(gap, idle);
        // Unattached: nothing happens.
        spin.served();
        spin.served();
        assert!(!nonblocking(&r));
        spin.attach(r.as_fd()).unwrap();
        spin.served();
        std::thread::sleep(gap * 2);
        spin.served();
        assert!(!nonblocking(&r), "requests far apart do not spin");
        spin.served();
        assert!(nonblocking(&r), "two close together do");
        assert_eq!(spin.bursts(), 1);
        let deadline = Instant::now() + Duration::from_secs(10);
        while nonblocking(&r) && Instant::now() < deadline {
            std::thread::sleep(idle);
        }
        assert!(!nonblocking(&r), "idle, it sleeps again");
        spin.served();
        spin.served();
        assert!(nonblocking(&r));
        assert_eq!(spin.bursts(), 2);
    }
}
