//! Proxied sockets: clients connect to a listening endpoint, each is joined to a new
//! connection to the target, and what the target sends back is held like the command's
//! output (what clients send passes at once).

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{Builder, Scope};
use std::time::{Duration, Instant};

use crate::hold::{feed, Hold, Outbox, Sink};
use crate::sys::{lock, wait, wait_readable};

/// How long, after the final commit, clients get to take the bytes released to them
/// before their connections are cut.
const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// Where to listen or connect: a TCP `HOST:PORT`, or a Unix socket path (any text with a
/// `/` in it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `HOST:PORT`, resolved when used (`[::1]:80` for IPv6 addresses).
    Tcp(String),
    /// A Unix stream socket's path.
    Unix(PathBuf),
}

/// One `--proxy LISTEN=TARGET`: clients accepted on `listen` are joined to `target`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Proxy {
    pub listen: Endpoint,
    pub target: Endpoint,
}

/// Why an endpoint or proxy could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad {what} {text:?}: {why}")]
pub struct ParseError {
    what: &'static str,
    text: String,
    why: &'static str,
}

impl FromStr for Endpoint {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        let bad = |why| ParseError {
            what: "endpoint",
            text: s.to_string(),
            why,
        };
        if s.contains('/') {
            return Ok(Endpoint::Unix(PathBuf::from(s)));
        }
        let Some((host, port)) = s.rsplit_once(':') else {
            return Err(bad("expected HOST:PORT, or a socket path with a '/'"));
        };
        if host.is_empty() {
            return Err(bad("the host is missing (use 0.0.0.0 or 127.0.0.1)"));
        }
        if port.parse::<u16>().is_err() {
            return Err(bad("the port is not a number from 0 to 65535"));
        }
        Ok(Endpoint::Tcp(s.to_string()))
    }
}

impl FromStr for Proxy {
    type Err = ParseError;

    /// `LISTEN=TARGET`, split at the first `=`.
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let Some((listen, target)) = s.split_once('=') else {
            return Err(ParseError {
                what: "proxy",
                text: s.to_string(),
                why: "expected LISTEN=TARGET",
            });
        };
        Ok(Proxy {
            listen: listen.parse()?,
            target: target.parse()?,
        })
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(addr) => f.write_str(addr),
            Endpoint::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

impl fmt::Display for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.listen, self.target)
    }
}

/// Adds what was being done to an error.
fn context(e: io::Error, doing: impl fmt::Display) -> io::Error {
    io::Error::new(e.kind(), format!("{doing}: {e}"))
}

impl Endpoint {
    fn bind(&self) -> io::Result<Listener> {
        let listener = match self {
            Endpoint::Tcp(addr) => TcpListener::bind(addr.as_str()).map(Listener::Tcp),
            Endpoint::Unix(path) => {
                UnixListener::bind(path).map(|l| Listener::Unix(l, path.clone()))
            }
        };
        let listener = listener.map_err(|e| context(e, format_args!("cannot listen on {self}")))?;
        listener.set_nonblocking()?;
        Ok(listener)
    }

    fn connect(&self) -> io::Result<Stream> {
        match self {
            Endpoint::Tcp(addr) => TcpStream::connect(addr.as_str()).map(Stream::Tcp),
            Endpoint::Unix(path) => UnixStream::connect(path).map(Stream::Unix),
        }
    }
}

enum Listener {
    Tcp(TcpListener),
    /// The path is removed when the listener is dropped (we made it).
    Unix(UnixListener, PathBuf),
}

impl Listener {
    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Listener::Tcp(l) => l.set_nonblocking(true),
            Listener::Unix(l, _) => l.set_nonblocking(true),
        }
    }

    /// Accepts one client; the accepted socket blocks (it does not inherit the listener's
    /// non-blocking mode).
    fn accept(&self) -> io::Result<Stream> {
        let stream = match self {
            Listener::Tcp(l) => Stream::Tcp(l.accept()?.0),
            Listener::Unix(l, _) => Stream::Unix(l.accept()?.0),
        };
        match &stream {
            Stream::Tcp(s) => s.set_nonblocking(false)?,
            Stream::Unix(s) => s.set_nonblocking(false)?,
        }
        Ok(stream)
    }
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Listener::Tcp(l) => l.as_fd(),
            Listener::Unix(l, _) => l.as_fd(),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn shutdown(&self, how: Shutdown) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(how),
            Stream::Unix(s) => s.shutdown(how),
        };
    }
}

impl Read for &Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).read(buf),
            Stream::Unix(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => (&*s).write(buf),
            Stream::Unix(s) => (&*s).write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Where the bytes released for one client go; a failed write (the client is gone)
/// closes the server side too.
struct ClientSink {
    client: Arc<Stream>,
    server: Arc<Stream>,
}

impl Sink for ClientSink {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        (&*self.client).write_all(bytes)
    }

    fn finish(&mut self) {
        self.client.shutdown(Shutdown::Write);
    }

    fn broken(&mut self) {
        self.server.shutdown(Shutdown::Both);
    }
}

struct Conn {
    client: Arc<Stream>,
    server: Arc<Stream>,
    outbox: Arc<Outbox>,
}

#[derive(Default)]
struct Conns {
    /// The command has exited: no new connection is taken on.
    closing: bool,
    next_id: u64,
    live: HashMap<u64, Conn>,
    /// Connections whose server side is still being read.
    feeders: usize,
}

/// Every proxy of one run: its listeners and live connections.
pub(crate) struct Proxies {
    listeners: Vec<(Listener, Endpoint)>,
    stop: io::PipeReader,
    stopper: Mutex<Option<io::PipeWriter>>,
    conns: Mutex<Conns>,
    changed: Condvar,
}

impl Proxies {
    /// Binds every listener (so that a bad address fails before the command starts).
    pub(crate) fn bind(proxies: &[crate::Proxy]) -> io::Result<Self> {
        let listeners = proxies
            .iter()
            .map(|p| Ok((p.listen.bind()?, p.target.clone())))
            .collect::<io::Result<Vec<_>>>()?;
        let (stop, stopper) = io::pipe()?;
        Ok(Proxies {
            listeners,
            stop,
            stopper: Mutex::new(Some(stopper)),
            conns: Mutex::default(),
            changed: Condvar::new(),
        })
    }

    /// Starts a thread per listener in `scope`; each accepted client gets its own threads.
    pub(crate) fn start<'s>(&'s self, scope: &'s Scope<'s, '_>, hold: &'s Hold) -> io::Result<()> {
        for (listener, target) in &self.listeners {
            Builder::new()
                .name("relay-accept".into())
                .spawn_scoped(scope, move || {
                    self.accept_loop(scope, hold, listener, target)
                })?;
        }
        Ok(())
    }

    fn accept_loop<'s>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        hold: &'s Hold,
        listener: &Listener,
        target: &'s Endpoint,
    ) {
        loop {
            match wait_readable(listener.as_fd(), self.stop.as_fd()) {
                Ok(true) => {}
                Ok(false) | Err(_) => return,
            }
            match listener.accept() {
                Ok(client) => {
                    // Without a thread the client is dropped, which closes it.
                    let _ = Builder::new()
                        .name("relay-conn".into())
                        .spawn_scoped(scope, move || self.serve(scope, hold, client, target));
                }
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted => {}
                // Out of descriptors or the like: pause rather than spin.
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// One client: joins it to a new connection to `target` and relays both ways.
    fn serve<'s>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        hold: &'s Hold,
        client: Stream,
        target: &Endpoint,
    ) {
        let Ok(server) = target.connect() else {
            return;
        };
        let client = Arc::new(client);
        let server = Arc::new(server);
        let outbox = Arc::new(Outbox::default());
        let Some(id) = self.register(&client, &server, &outbox) else {
            return;
        };
        let feeder = {
            let (server, outbox) = (Arc::clone(&server), Arc::clone(&outbox));
            Builder::new()
                .name("relay-server".into())
                .spawn_scoped(scope, move || {
                    feed(&*server, hold, &outbox, true);
                    self.feeder_done();
                })
        };
        if feeder.is_err() {
            self.feeder_done();
            self.deregister(id);
            return;
        }
        let sink = ClientSink {
            client: Arc::clone(&client),
            server: Arc::clone(&server),
        };
        let drainer = {
            let outbox = Arc::clone(&outbox);
            Builder::new()
                .name("relay-client".into())
                .spawn_scoped(scope, move || outbox.drain(sink))
        };
        if drainer.is_err() {
            outbox.abort();
            server.shutdown(Shutdown::Both);
        }
        pump(&client, &server);
        if let Ok(feeder) = feeder {
            let _ = feeder.join();
        }
        if let Ok(drainer) = drainer {
            let _ = drainer.join();
        }
        self.deregister(id);
    }

    fn register(
        &self,
        client: &Arc<Stream>,
        server: &Arc<Stream>,
        outbox: &Arc<Outbox>,
    ) -> Option<u64> {
        let mut conns = lock(&self.conns);
        if conns.closing {
            return None;
        }
        let id = conns.next_id;
        conns.next_id += 1;
        conns.feeders += 1;
        let conn = Conn {
            client: Arc::clone(client),
            server: Arc::clone(server),
            outbox: Arc::clone(outbox),
        };
        conns.live.insert(id, conn);
        Some(id)
    }

    fn deregister(&self, id: u64) {
        lock(&self.conns).live.remove(&id);
        self.changed.notify_all();
    }

    fn feeder_done(&self) {
        lock(&self.conns).feeders -= 1;
        self.changed.notify_all();
    }

    /// The command has exited: stops accepting, stops reading every server (what was
    /// read stays held) and waits until each connection's end is in the hold.
    pub(crate) fn stop_reading(&self) {
        lock(&self.stopper).take();
        let mut conns = lock(&self.conns);
        conns.closing = true;
        for conn in conns.live.values() {
            conn.server.shutdown(Shutdown::Read);
            conn.outbox.unbound();
        }
        while conns.feeders > 0 {
            conns = wait(&self.changed, conns);
        }
    }

    /// After the final commit: gives clients [`DRAIN_GRACE`] to take what was released
    /// to them, then cuts every connection left.
    pub(crate) fn wind_up(&self) {
        let deadline = Instant::now() + DRAIN_GRACE;
        let outboxes: Vec<_> = lock(&self.conns)
            .live
            .values()
            .map(|c| Arc::clone(&c.outbox))
            .collect();
        for outbox in outboxes {
            if !outbox.wait_done(Some(deadline)) {
                outbox.abort();
            }
        }
        self.cut();
    }

    /// Drops everything not yet written and closes every connection.
    pub(crate) fn cut(&self) {
        lock(&self.stopper).take();
        let mut conns = lock(&self.conns);
        conns.closing = true;
        for conn in conns.live.values() {
            conn.outbox.abort();
            conn.client.shutdown(Shutdown::Both);
            conn.server.shutdown(Shutdown::Both);
        }
    }
}

/// Client to server, passed at once (input is not output). The client's end becomes the
/// server's end of input; a client that fails closes the server side.
fn pump(client: &Stream, server: &Stream) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut from = client;
    let mut to = server;
    loop {
        match from.read(&mut buf) {
            Ok(0) => {
                server.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                server.shutdown(Shutdown::Both);
                return;
            }
        }
    }
}
