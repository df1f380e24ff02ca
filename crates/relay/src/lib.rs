//! The I/O half of external synchrony (`stitchfs xsync`): runs a command and holds
//! every byte of output that leaves it (its standard output and error, and what proxied
//! servers send to their clients) until everything the command did before that byte was
//! written has been made durable.
//!
//! # Architecture invariant
//!
//! This crate knows processes, terminals and sockets, and nothing of file systems: making
//! things durable is a [`Commit`] callback it is handed. It releases a byte of output only
//! after a call of [`Commit::commit`] *that started after the byte was read* has returned
//! `Ok`. A commit that was already running when the byte arrived does not count, since it
//! may have missed the changes that came before the byte.
//!
//! # How it works
//!
//! One thread per source reads chunks into a single queue, each with a sequence number.
//! One committer thread calls `commit` as soon as output is held (and every
//! `commit_interval` even with nothing held), having noted the last sequence number read;
//! on `Ok` it releases every chunk up to that mark, in order, to its destination, where a
//! writer thread per destination writes it. Output read while a commit runs waits for the
//! next one, so many chunks share one commit. Input (our standard input, what clients
//! send) is passed on at once: it is not output.
//!
//! Signal handlers are installed through `signal-hook` for the run's length; like all of
//! that crate's handlers they stay registered (doing nothing) afterwards. Writes to a
//! closed pipe are expected to fail with `EPIPE`, as they do in a Rust program, which
//! ignores `SIGPIPE`.

mod hold;
mod proxy;
mod sys;
mod terminal;

use std::fs::File;
use std::io::{self, IsTerminal};
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{Builder, Scope, ScopedJoinHandle};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::{tcgetpgrp, Pid};
use signal_hook::consts::signal::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH};
use signal_hook::iterator::Signals;

use hold::{committer, feed, Hold, Outbox, Reporter};
use proxy::Proxies;
pub use proxy::{Endpoint, ParseError, Proxy};
use sys::{lock, own_or_dup};
use terminal::{relay_input, Pty, RawMode};

/// Makes the group's changes durable; the relay's only link to a file system.
pub trait Commit: Send + Sync {
    /// Makes durable everything the group did so far; returns when it is.
    /// `held` = bytes currently held (for figures). Called from one committer thread.
    fn commit(&self, held: Held) -> io::Result<()>;
}

/// What is held when a commit starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// Bytes of output held.
    pub bytes: u64,
    /// Chunks (reads) they came in.
    pub chunks: u64,
}

/// How the command's standard streams are connected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Terminal {
    /// A pseudo-terminal when our standard output or error is a terminal, pipes otherwise.
    #[default]
    Auto,
    /// A pseudo-terminal: the command gets it as its standard streams and controlling
    /// terminal, in a session of its own; our terminal (if any) is in raw mode meanwhile.
    Pty,
    /// The command inherits our standard input; its output and error are two pipes
    /// relayed to ours.
    Pipes,
}

/// The default pause between commits when nothing is held.
pub const DEFAULT_COMMIT_INTERVAL: Duration = Duration::from_secs(5);
/// The default number of held bytes past which sources are no longer read.
pub const DEFAULT_BOUND: usize = 4 << 20;

/// How to run.
#[derive(Debug)]
pub struct Options {
    /// Sockets to relay, holding what each server sends to its clients.
    pub proxies: Vec<Proxy>,
    /// A commit is made at least this often, even with nothing held.
    pub commit_interval: Duration,
    /// When more bytes than this are held (in all, or on their way to one destination),
    /// sources stop being read until some are released: writers block, nothing is dropped.
    pub bound: usize,
    pub terminal: Terminal,
    /// Our side's standard streams; `None` means our own (descriptors 0, 1 and 2). Tests
    /// and embedders give others.
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            proxies: Vec::new(),
            commit_interval: DEFAULT_COMMIT_INTERVAL,
            bound: DEFAULT_BOUND,
            terminal: Terminal::Auto,
            stdin: None,
            stdout: None,
            stderr: None,
        }
    }
}

/// How a run ended.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// The command's own exit status.
    pub status: ExitStatus,
    /// Commits that returned `Ok`.
    pub commits: u64,
    /// Bytes of output released.
    pub released_bytes: u64,
    /// The most bytes held at once.
    pub max_held: u64,
}

/// The signals passed on to the command.
const FORWARDED: [i32; 6] = [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2];

/// Starts `cmd`, relays its stdout/stderr (and the proxies) holding every byte until a commit
/// that began after the byte was read returns; returns after CMD exited, its output and every
/// proxy's held bytes were released after a final commit.
///
/// `cmd`'s standard streams are replaced (see [`Terminal`]). Signals in [`FORWARDED`] that
/// reach us are passed to the command (in pty mode to its terminal's foreground process
/// group) and we go on. The command's exit status is returned as it is; if the final
/// commit fails (it is tried a few times), its error is returned instead, after the
/// command has exited, and what was held is dropped.
pub fn run(mut cmd: Command, opts: Options, commit: Arc<dyn Commit>) -> io::Result<Outcome> {
    let Options {
        proxies,
        commit_interval,
        bound,
        terminal,
        stdin,
        stdout,
        stderr,
    } = opts;
    let out = own_or_dup(stdout, io::stdout().as_fd())?;
    let err = own_or_dup(stderr, io::stderr().as_fd())?;
    let use_pty = match terminal {
        Terminal::Pty => true,
        Terminal::Pipes => false,
        Terminal::Auto => out.is_terminal() || err.is_terminal(),
    };
    let hold = Hold::new(bound as u64);
    let proxies = Proxies::bind(&proxies)?;
    let (input_stop, input_stopper) = io::pipe()?;

    let mut signals = if use_pty {
        Signals::new(FORWARDED.iter().chain(&[SIGWINCH]))?
    } else {
        Signals::new(FORWARDED)?
    };
    let signals_handle = signals.handle();

    let mut pty = None;
    let mut input = None;
    let mut raw = None;
    if use_pty {
        // Our input may be closed; then there is just nothing to pass on.
        input = own_or_dup(stdin, io::stdin().as_fd()).ok();
        let mut ours = vec![&out];
        ours.extend(input.as_ref());
        ours.push(&err);
        let p = Pty::open(&ours)?;
        p.attach(&mut cmd)?;
        if let Some(input) = &input {
            raw = RawMode::enter(input)?;
        }
        pty = Some(p);
    } else {
        if let Some(fd) = stdin {
            cmd.stdin(Stdio::from(fd));
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    let report = Reporter::new(err.try_clone()?, raw.is_some());

    let mut child = cmd.spawn()?;
    // The command holds its own copies of its streams now; ours would keep them open.
    drop(cmd);
    if let Some(p) = &mut pty {
        p.close_slave();
    }
    let group = Group {
        pid: Pid::from_raw(child.id() as i32),
        pty_master: pty.as_ref().map(|p| Arc::clone(p.master())),
        reaped: Mutex::new(false),
    };
    let out_box = Arc::new(Outbox::default());
    let err_box = Arc::new(Outbox::default());
    let mut sources: Vec<(Box<dyn io::Read + Send>, Arc<Outbox>)> = Vec::new();
    if let Some(p) = &pty {
        sources.push((
            Box::new(DupRead(Arc::clone(p.master()))),
            Arc::clone(&out_box),
        ));
    }
    if let Some(o) = child.stdout.take() {
        sources.push((Box::new(o), Arc::clone(&out_box)));
    }
    if let Some(e) = child.stderr.take() {
        sources.push((Box::new(e), Arc::clone(&err_box)));
    }
    let has_err_output = sources.len() > 1;

    let result = std::thread::scope(|s| {
        let mut failed: Option<io::Error> = None;
        let mut keep = |r: io::Result<()>| {
            if let Err(e) = r {
                failed.get_or_insert(e);
            }
        };

        let committer = spawn(s, "relay-commit", || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                committer(&hold, &*commit, commit_interval, &report)
            }))
            .unwrap_or_else(|_| Err(io::Error::other("the commit callback panicked")));
            if r.is_err() {
                hold.abort();
            }
            r
        });
        let committer = match committer {
            Ok(h) => Some(h),
            Err(e) => {
                keep(Err(e));
                None
            }
        };
        keep(spawn(s, "relay-out", || out_box.drain(&out)).map(drop));
        if has_err_output {
            keep(spawn(s, "relay-err", || err_box.drain(&err)).map(drop));
        }
        let mut feeders = Vec::new();
        for (src, to) in sources {
            let hold = &hold;
            match spawn(s, "relay-feed", move || feed(src, hold, &to, false)) {
                Ok(h) => feeders.push(h),
                Err(e) => keep(Err(e)),
            }
        }
        if let (Some(p), Some(input)) = (&pty, &input) {
            let master = p.master();
            let stop = &input_stop;
            keep(spawn(s, "relay-input", move || relay_input(input, master, stop)).map(drop));
        }
        let group = &group;
        let pty = &pty;
        keep(
            spawn(s, "relay-signals", move || {
                for sig in signals.forever() {
                    if sig == SIGWINCH {
                        if let Some(p) = pty {
                            p.copy_size();
                        }
                    } else {
                        group.forward(sig);
                    }
                }
            })
            .map(drop),
        );
        keep(proxies.start(s, &hold));

        if failed.is_some() {
            group.forward(libc::SIGKILL);
        }
        let status = group.wait(&mut child);
        for f in feeders {
            let _ = f.join();
        }
        proxies.stop_reading();
        hold.close();
        let committed = match committer {
            Some(c) => c
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the committer panicked"))),
            None => Err(io::Error::other("no committer")),
        };
        if committed.is_ok() {
            out_box.wait_done(None);
            err_box.wait_done(None);
            proxies.wind_up();
        } else {
            hold.abort();
            out_box.abort();
            err_box.abort();
            proxies.cut();
        }
        drop(input_stopper);
        signals_handle.close();
        let status = status?;
        if let Some(e) = failed {
            return Err(e);
        }
        committed?;
        Ok(status)
    });
    drop(raw);
    let status = result?;
    let figures = hold.figures();
    Ok(Outcome {
        status,
        commits: figures.commits,
        released_bytes: figures.released,
        max_held: figures.max_held,
    })
}

fn spawn<'s, 'e, T: Send + 's>(
    scope: &'s Scope<'s, 'e>,
    name: &str,
    f: impl FnOnce() -> T + Send + 's,
) -> io::Result<ScopedJoinHandle<'s, T>> {
    Builder::new().name(name.into()).spawn_scoped(scope, f)
}

/// Reads the terminal's master side, shared with the input relay and the size copier.
struct DupRead(Arc<File>);

impl io::Read for DupRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self.0).read(buf)
    }
}

/// The command, as signals and its exit see it.
struct Group {
    pid: Pid,
    pty_master: Option<Arc<File>>,
    /// Set once the command has exited and is about to be reaped: its process id may then
    /// be reused, so no signal is sent after.
    reaped: Mutex<bool>,
}

impl Group {
    fn forward(&self, sig: i32) {
        let reaped = lock(&self.reaped);
        if *reaped {
            return;
        }
        let Ok(sig) = Signal::try_from(sig) else {
            return;
        };
        let target = match &self.pty_master {
            // The foreground group of the command's terminal (a shell's job, say), else the
            // command's own group: it leads a session of its own.
            Some(master) => match tcgetpgrp(master.as_fd()) {
                Ok(pgrp) if pgrp.as_raw() > 0 => Pid::from_raw(-pgrp.as_raw()),
                _ => Pid::from_raw(-self.pid.as_raw()),
            },
            None => self.pid,
        };
        let _ = kill(target, sig);
    }

    /// Waits for the command to exit, stops signalling it, and reaps it.
    fn wait(&self, child: &mut Child) -> io::Result<ExitStatus> {
        loop {
            match waitid(
                Id::Pid(self.pid),
                WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
            ) {
                Ok(_) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        *lock(&self.reaped) = true;
        child.wait()
    }
}
