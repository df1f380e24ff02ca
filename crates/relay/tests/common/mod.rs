//! What the relay's tests share: destinations whose bytes can be watched, and a fake
//! commit that records what was visible when it ran and can be held back or made to fail.

#![allow(dead_code)]

use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use stitch_relay::{Commit, Held};

/// Long enough for anything that should happen to happen on a loaded machine.
pub const PATIENCE: Duration = Duration::from_secs(10);
/// How long to watch for something that must not happen.
pub const QUIET: Duration = Duration::from_millis(300);

/// A pipe whose read end is collected by a thread: what a destination shows.
pub struct Capture {
    buf: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
}

impl Capture {
    /// The write end goes to the relay as a destination.
    pub fn new() -> (OwnedFd, Capture) {
        let (mut r, w) = io::pipe().expect("pipe");
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buf);
        let reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n) = r.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        (
            w.into(),
            Capture {
                buf,
                reader: Some(reader),
            },
        )
    }

    pub fn shared(&self) -> Arc<Mutex<Vec<u8>>> {
        Arc::clone(&self.buf)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf.lock().unwrap()).into_owned()
    }

    /// Waits until the text shown satisfies `pred`; tells whether it did in time.
    pub fn wait_for(&self, pred: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if pred(&self.text()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Everything, once the relay has closed its end.
    pub fn finish(mut self) -> Vec<u8> {
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        self.buf.lock().unwrap().clone()
    }
}

/// What a held-back commit is told to do.
pub enum Answer {
    /// Return this, and hold back the next call too.
    Once(io::Result<()>),
    /// Return Ok, and let every later call through at once.
    Open,
}

/// One call of the fake commit.
#[derive(Clone, Debug)]
pub struct Call {
    pub start: Instant,
    pub held: Held,
    /// What each watched destination showed when the call started and when it returned.
    pub seen_at_start: Vec<Vec<u8>>,
    pub seen_at_end: Vec<Vec<u8>>,
    pub ok: bool,
}

/// The test's side of a held-back commit.
pub struct Gate {
    started: Receiver<usize>,
    answers: Sender<Answer>,
}

impl Gate {
    /// Waits for the next call to start; returns its number (from 1).
    pub fn started(&self) -> usize {
        self.started
            .recv_timeout(PATIENCE)
            .expect("a commit should have started")
    }

    pub fn answer(&self, answer: Answer) {
        self.answers.send(answer).unwrap();
    }
}

/// The commit's side of a gate: where it tells that it started, where it hears back.
type GateEnds = (Mutex<Sender<usize>>, Mutex<Receiver<Answer>>);

pub struct FakeCommit {
    pub calls: Mutex<Vec<Call>>,
    watched: Vec<Arc<Mutex<Vec<u8>>>>,
    /// Calls left to fail.
    failures: AtomicU64,
    always_fail: bool,
    gate: Option<GateEnds>,
    open: AtomicBool,
    pause: Duration,
}

impl FakeCommit {
    pub fn new(watched: &[&Capture]) -> Self {
        FakeCommit {
            calls: Mutex::new(Vec::new()),
            watched: watched.iter().map(|c| c.shared()).collect(),
            failures: AtomicU64::new(0),
            always_fail: false,
            gate: None,
            open: AtomicBool::new(false),
            pause: Duration::ZERO,
        }
    }

    /// Fails the first `n` calls with the same error.
    pub fn failing(mut self, n: u64) -> Self {
        self.failures = AtomicU64::new(n);
        self
    }

    pub fn always_failing(mut self) -> Self {
        self.always_fail = true;
        self
    }

    /// Each call takes this long.
    pub fn pausing(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }

    /// Each call waits for the test's answer until the test opens the gate.
    pub fn gated(mut self) -> (Self, Gate) {
        let (started_tx, started) = channel();
        let (answers, answers_rx) = channel();
        self.gate = Some((Mutex::new(started_tx), Mutex::new(answers_rx)));
        (self, Gate { started, answers })
    }

    fn seen(&self) -> Vec<Vec<u8>> {
        self.watched
            .iter()
            .map(|w| w.lock().unwrap().clone())
            .collect()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

impl Commit for FakeCommit {
    fn commit(&self, held: Held) -> io::Result<()> {
        let start = Instant::now();
        let seen_at_start = self.seen();
        let number = self.calls.lock().unwrap().len() + 1;
        let mut result = Ok(());
        if let Some((started, answers)) = &self.gate {
            if !self.open.load(Ordering::SeqCst) {
                let _ = started.lock().unwrap().send(number);
                match answers.lock().unwrap().recv() {
                    Ok(Answer::Once(r)) => result = r,
                    Ok(Answer::Open) | Err(_) => self.open.store(true, Ordering::SeqCst),
                }
            }
        }
        std::thread::sleep(self.pause);
        if self.always_fail
            || self
                .failures
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            result = Err(io::Error::other("disk on fire"));
        }
        let call = Call {
            start,
            held,
            seen_at_start,
            seen_at_end: self.seen(),
            ok: result.is_ok(),
        };
        self.calls.lock().unwrap().push(call);
        result
    }
}

/// `sh -c SCRIPT sh ARGS...`
pub fn sh(script: &str, args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c").arg(script).arg("sh").args(args);
    cmd
}
