//! What the registry asks of the operating system about a thread or a
//! process ([`Procs`]), and Linux's answers ([`ProcFs`]): `/proc` for a
//! thread's process, parent and start time, pidfds to learn that a thread
//! or process is gone without polling `/proc`.

use crate::{Pid, ProcKey, Tid};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A thread, as the registry needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadInfo {
    /// The process the thread belongs to.
    pub process: ProcKey,
    /// That process's parent (0 for none).
    pub parent: Pid,
    /// The user the process runs as (real uid).
    pub uid: u32,
}

/// A handle that says when a thread or a process has exited.
pub trait Watch: Send + Sync {
    fn exited(&self) -> bool;
}

/// The operating system's view of processes.
pub trait Procs: Send + Sync {
    /// The thread `tid` and its process, or `None` if it is gone.
    fn thread(&self, tid: Tid) -> Option<ThreadInfo>;
    /// A process by pid, as `thread` describes a thread (a process's first
    /// thread has its pid); `None` if it is gone.
    fn process(&self, pid: Pid) -> Option<ThreadInfo> {
        self.thread(Tid(pid.0))
    }
    /// A watch on the thread `tid`; `None` when the system cannot watch
    /// threads (then every use of a cached thread asks `thread` again).
    fn watch_thread(&self, tid: Tid) -> Option<Box<dyn Watch>>;
    /// A watch on the process `key`, opened only if `key` is still that
    /// process; `None` if it is gone or cannot be watched.
    fn watch_process(&self, key: ProcKey) -> Option<Box<dyn Watch>>;
}

/// Linux: `/proc` and pidfds.
pub struct ProcFs;

impl Procs for ProcFs {
    fn thread(&self, tid: Tid) -> Option<ThreadInfo> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", tid.0)).ok()?;
        let field = |name: &str| -> Option<u32> {
            let line = status.lines().find(|l| l.starts_with(name))?;
            line[name.len()..].split_whitespace().next()?.parse().ok()
        };
        let pid = Pid(field("Tgid:")?);
        let parent = Pid(field("PPid:")?);
        let uid = field("Uid:")?;
        let start = start_time(pid)?;
        Some(ThreadInfo {
            process: ProcKey { pid, start },
            parent,
            uid,
        })
    }

    fn watch_thread(&self, tid: Tid) -> Option<Box<dyn Watch>> {
        let fd = pidfd_open(tid.0, libc::PIDFD_THREAD)?;
        Some(Box::new(PidFd(fd)))
    }

    fn watch_process(&self, key: ProcKey) -> Option<Box<dyn Watch>> {
        let fd = pidfd_open(key.pid.0, 0)?;
        // Opened after the start time was read: if the pid was reused in
        // between, the start time tells.
        (start_time(key.pid)? == key.start).then(|| Box::new(PidFd(fd)) as Box<dyn Watch>)
    }
}

/// A process's start time, in clock ticks since boot: field 22 of
/// `/proc/PID/stat`, counted after the command name's closing parenthesis
/// (the name may hold spaces and parentheses).
fn start_time(pid: Pid) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.0)).ok()?;
    parse_start_time(&stat)
}

pub(crate) fn parse_start_time(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Fields 3 onwards follow the name; the start time is field 22.
    after.split_whitespace().nth(22 - 3)?.parse().ok()
}

fn pidfd_open(pid: u32, flags: libc::c_uint) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new
    // descriptor or -1; nothing is borrowed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, flags) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just returned this descriptor to us alone.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A pidfd: readable once its thread or process has exited.
struct PidFd(OwnedFd);

impl Watch for PidFd {
    fn exited(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n > 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_found_after_a_name_with_parentheses() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200";
        assert_eq!(parse_start_time(stat), Some(987_654));
        assert_eq!(parse_start_time("42 (x) S 1"), None);
    }

    #[test]
    fn this_thread_is_seen_in_this_process() {
        let me = std::process::id();
        let info = ProcFs.thread(Tid(me)).unwrap();
        assert_eq!(info.process.pid, Pid(me));
        // SAFETY: getppid and getuid cannot fail.
        assert_eq!(info.parent, Pid(unsafe { libc::getppid() } as u32));
        assert_eq!(info.uid, unsafe { libc::getuid() });
        let other = std::thread::spawn(|| {
            // SAFETY: gettid cannot fail.
            let tid = unsafe { libc::gettid() } as u32;
            ProcFs.thread(Tid(tid)).unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(other.process, info.process);
    }

    #[test]
    fn a_watch_tells_when_a_thread_exits() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid cannot fail.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            wait.recv().unwrap();
        });
        let tid = Tid(rx.recv().unwrap());
        let w = ProcFs
            .watch_thread(tid)
            .expect("pidfd of a thread (Linux 6.9)");
        assert!(!w.exited());
        go.send(()).unwrap();
        t.join().unwrap();
        let t0 = std::time::Instant::now();
        while !w.exited() {
            assert!(t0.elapsed().as_secs() < 5, "the exit was never seen");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
