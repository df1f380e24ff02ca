//! The held queue, the destinations' outboxes and the committer.
//!
//! Bytes move in three steps. A *feeder* (one thread per source) reads a chunk and
//! pushes it into the [`Hold`] with the next sequence number. The *committer* notes the
//! last sequence number pushed, calls [`Commit::commit`], and on success moves every
//! chunk up to that mark, in order, into its destination's [`Outbox`]. A *drainer* (one
//! thread per destination) writes what its outbox was given. Nothing leaves the hold
//! except through a commit that started after the chunk was pushed.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::sys::{lock, wait, wait_until};
use crate::{Commit, Held};

/// How much a feeder reads at once.
const CHUNK: usize = 64 * 1024;
/// The first wait after a failed commit; it doubles after each failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait between two tries of a failing commit.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How many times the final commit is tried before `run` gives up with its error.
const FINAL_TRIES: u32 = 3;

/// What a source hands to its destination.
pub(crate) enum Item {
    /// Bytes, in the order read.
    Data(Vec<u8>),
    /// The source ended: the destination is finished (a socket's write side is shut down).
    Close,
}

impl Item {
    fn len(&self) -> u64 {
        match self {
            Item::Data(bytes) => bytes.len() as u64,
            Item::Close => 0,
        }
    }
}

/// A chunk waiting for a commit.
struct Chunk {
    seq: u64,
    to: Arc<Outbox>,
    item: Item,
    /// Whether this chunk alone calls for a commit now (output, or the end of a socket
    /// that a client sees) rather than riding along with the next one.
    urgent: bool,
}

struct HoldState {
    /// The sequence number the next chunk gets.
    next_seq: u64,
    queue: VecDeque<Chunk>,
    /// Data bytes and data chunks held.
    bytes: u64,
    chunks: u64,
    /// Chunks held that call for a commit now.
    urgent: u64,
    max_bytes: u64,
    released: u64,
    commits: u64,
    /// Every source has ended: the committer makes its final commit.
    closing: bool,
    /// The committer is gone: feeders stop waiting for room and drop what they read.
    aborted: bool,
}

/// The chunks read and not yet released, shared by the feeders and the committer.
pub(crate) struct Hold {
    state: Mutex<HoldState>,
    changed: Condvar,
    bound: u64,
}

/// Figures about one run, for its outcome.
pub(crate) struct Figures {
    pub commits: u64,
    pub released: u64,
    pub max_held: u64,
}

impl Hold {
    pub(crate) fn new(bound: u64) -> Self {
        Hold {
            state: Mutex::new(HoldState {
                next_seq: 0,
                queue: VecDeque::new(),
                bytes: 0,
                chunks: 0,
                urgent: 0,
                max_bytes: 0,
                released: 0,
                commits: 0,
                closing: false,
                aborted: false,
            }),
            changed: Condvar::new(),
            bound: bound.max(1),
        }
    }

    /// Blocks while `to` has too many bytes on their way or the hold as a whole is over
    /// its bound, so that a source is not read while its bytes cannot be taken.
    pub(crate) fn wait_room(&self, to: &Outbox) {
        to.wait_room(self.bound);
        let mut st = lock(&self.state);
        while st.bytes >= self.bound && !st.aborted {
            st = wait(&self.changed, st);
        }
    }

    /// Holds `item` for `to` until a commit that starts from now on has returned Ok.
    pub(crate) fn push(&self, to: &Arc<Outbox>, item: Item, urgent: bool) {
        let len = item.len();
        let mut st = lock(&self.state);
        if st.aborted {
            return;
        }
        to.add_in_flight(len);
        let seq = st.next_seq;
        st.next_seq += 1;
        if let Item::Data(_) = item {
            st.chunks += 1;
        }
        st.bytes += len;
        st.max_bytes = st.max_bytes.max(st.bytes);
        if urgent {
            st.urgent += 1;
        }
        st.queue.push_back(Chunk {
            seq,
            to: Arc::clone(to),
            item,
            urgent,
        });
        self.changed.notify_all();
    }

    /// Every source has ended: the committer makes its final commit and returns.
    pub(crate) fn close(&self) {
        lock(&self.state).closing = true;
        self.changed.notify_all();
    }

    /// The committer is gone: nothing will be released any more.
    pub(crate) fn abort(&self) {
        lock(&self.state).aborted = true;
        self.changed.notify_all();
    }

    pub(crate) fn figures(&self) -> Figures {
        let st = lock(&self.state);
        Figures {
            commits: st.commits,
            released: st.released,
            max_held: st.max_bytes,
        }
    }

    /// Waits until a commit is due; returns the mark (every chunk below it is covered by
    /// the commit about to start), what is held, and whether this is the final commit.
    fn next_commit(
        &self,
        last: Instant,
        interval: Duration,
        retry_at: Option<Instant>,
    ) -> (u64, Held, bool) {
        let mut st = lock(&self.state);
        loop {
            let due = match retry_at {
                Some(at) => at,
                None if st.urgent > 0 || st.closing => break,
                None => last + interval,
            };
            if Instant::now() >= due {
                break;
            }
            st = wait_until(&self.changed, st, Some(due));
        }
        let held = Held {
            bytes: st.bytes,
            chunks: st.chunks,
        };
        (st.next_seq, held, st.closing)
    }

    /// A commit that started when `mark` was the next sequence number returned Ok:
    /// every chunk below the mark goes, in order, to its destination.
    fn release(&self, mark: u64) {
        let mut st = lock(&self.state);
        st.commits += 1;
        while st.queue.front().is_some_and(|c| c.seq < mark) {
            let Some(chunk) = st.queue.pop_front() else {
                break;
            };
            let len = chunk.item.len();
            st.bytes -= len;
            st.released += len;
            if let Item::Data(_) = chunk.item {
                st.chunks -= 1;
            }
            if chunk.urgent {
                st.urgent -= 1;
            }
            chunk.to.deliver(chunk.item);
        }
        self.changed.notify_all();
    }
}

/// Reads `src` to its end (or first error; a terminal's master reports the end of its
/// other side as an error), holding each chunk for `to`, and then holds the end itself.
/// `close_is_output` tells whether the destination's end is seen by someone (a socket
/// shut down) and so calls for a commit of its own.
pub(crate) fn feed(mut src: impl Read, hold: &Hold, to: &Arc<Outbox>, close_is_output: bool) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        hold.wait_room(to);
        match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => hold.push(to, Item::Data(buf[..n].to_vec()), true),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    hold.push(to, Item::Close, close_is_output);
}

/// Where a drainer writes.
pub(crate) trait Sink {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// The source ended and everything before was written.
    fn finish(&mut self) {}
    /// A write failed: later bytes are dropped.
    fn broken(&mut self) {}
}

impl Sink for &File {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        Write::write_all(self, bytes)
    }
}

#[derive(Default)]
struct OutState {
    queue: VecDeque<Item>,
    /// Bytes pushed for this destination and not yet written (held or released).
    in_flight: u64,
    /// Feeders no longer wait for this destination to take its bytes.
    unbounded: bool,
    /// Nothing more will be written: the drainer stops and drops what it was given.
    aborted: bool,
    /// The drainer has stopped.
    done: bool,
}

/// The released bytes of one destination, on their way to its drainer.
#[derive(Default)]
pub(crate) struct Outbox {
    state: Mutex<OutState>,
    changed: Condvar,
}

impl Outbox {
    fn wait_room(&self, bound: u64) {
        let mut st = lock(&self.state);
        while st.in_flight >= bound && !st.unbounded && !st.aborted && !st.done {
            st = wait(&self.changed, st);
        }
    }

    fn add_in_flight(&self, len: u64) {
        lock(&self.state).in_flight += len;
    }

    fn deliver(&self, item: Item) {
        let mut st = lock(&self.state);
        if st.aborted || st.done {
            st.in_flight -= item.len();
        } else {
            st.queue.push_back(item);
        }
        self.changed.notify_all();
    }

    /// Feeders stop waiting for this destination (it is being wound up).
    pub(crate) fn unbound(&self) {
        lock(&self.state).unbounded = true;
        self.changed.notify_all();
    }

    /// Stops the drainer and drops whatever it has not written.
    pub(crate) fn abort(&self) {
        lock(&self.state).aborted = true;
        self.changed.notify_all();
    }

    /// Waits until the drainer has stopped or `deadline` has passed; tells which.
    pub(crate) fn wait_done(&self, deadline: Option<Instant>) -> bool {
        let mut st = lock(&self.state);
        while !st.done {
            if deadline.is_some_and(|at| Instant::now() >= at) {
                return false;
            }
            st = wait_until(&self.changed, st, deadline);
        }
        true
    }

    /// The drainer: writes what is released, in order, until the source's end is
    /// released or the outbox is aborted. After a failed write, later bytes are dropped
    /// quietly (a reader gone is not our failure).
    pub(crate) fn drain(&self, mut sink: impl Sink) {
        let mut broken = false;
        loop {
            let item = {
                let mut st = lock(&self.state);
                loop {
                    if st.aborted {
                        st.done = true;
                        self.changed.notify_all();
                        return;
                    }
                    if let Some(item) = st.queue.pop_front() {
                        break item;
                    }
                    st = wait(&self.changed, st);
                }
            };
            match item {
                Item::Data(bytes) => {
                    if !broken && sink.put(&bytes).is_err() {
                        broken = true;
                        sink.broken();
                    }
                    lock(&self.state).in_flight -= bytes.len() as u64;
                    self.changed.notify_all();
                }
                Item::Close => {
                    if !broken {
                        sink.finish();
                    }
                    let mut st = lock(&self.state);
                    st.done = true;
                    st.in_flight = 0;
                    self.changed.notify_all();
                    return;
                }
            }
        }
    }
}

/// Writes the relay's own messages (not the group's output, so never held).
pub(crate) struct Reporter {
    to: File,
    /// Our terminal is in raw mode: lines need a carriage return.
    raw: bool,
}

impl Reporter {
    pub(crate) fn new(to: File, raw: bool) -> Self {
        Reporter { to, raw }
    }

    pub(crate) fn say(&self, line: &str) {
        let end = if self.raw { "\r\n" } else { "\n" };
        let _ = (&self.to).write_all(format!("stitchfs xsync: {line}{end}").as_bytes());
    }
}

/// The committer: commits when output is held (at once), when `interval` has passed since
/// the last commit, and once more when every source has ended; releases on success. A
/// failed commit holds everything and is retried with a growing pause; each distinct
/// error is reported once. Returns when the final commit has succeeded, or with its error.
pub(crate) fn committer(
    hold: &Hold,
    commit: &dyn Commit,
    interval: Duration,
    report: &Reporter,
) -> io::Result<()> {
    let mut last = Instant::now();
    let mut retry: Option<(Instant, Duration)> = None;
    let mut reported: Option<String> = None;
    let mut final_failures = 0;
    loop {
        let (mark, held, last_one) = hold.next_commit(last, interval, retry.map(|(at, _)| at));
        last = Instant::now();
        match commit.commit(held) {
            Ok(()) => {
                hold.release(mark);
                if last_one {
                    return Ok(());
                }
                if reported.take().is_some() {
                    report.say("commit succeeded again; held output released");
                }
                retry = None;
            }
            Err(e) => {
                if last_one {
                    final_failures += 1;
                    if final_failures >= FINAL_TRIES {
                        return Err(io::Error::new(
                            e.kind(),
                            format!("final commit failed: {e}"),
                        ));
                    }
                }
                let text = e.to_string();
                if reported.as_deref() != Some(text.as_str()) {
                    report.say(&format!(
                        "commit failed: {text}; holding {} bytes of output and retrying",
                        held.bytes
                    ));
                    reported = Some(text);
                }
                let pause = retry.map_or(FIRST_BACKOFF, |(_, p)| (p * 2).min(MAX_BACKOFF));
                retry = Some((Instant::now() + pause, pause));
            }
        }
    }
}
