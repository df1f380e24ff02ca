//! Proxied sockets: what a server sends its clients is held like output; what clients
//! send passes at once; connections end cleanly and one's trouble is not another's.

mod common;

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{sh, Answer, Capture, FakeCommit, PATIENCE, QUIET};
use stitch_relay::{run, Commit, Endpoint, Options, Outcome, Proxy, Terminal};

/// What the test server does with each connection.
#[derive(Clone, Copy)]
enum Mode {
    /// Sends back what it reads; at the client's end writes "<bye>" and closes.
    Echo,
    /// Sends "partial" after the first read and closes at once.
    CloseEarly,
}

/// A server on a thread; tells on `ended` when a connection's client side ended.
fn server(mode: Mode) -> (String, Receiver<&'static str>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (ended, ends) = channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let ended: Sender<&'static str> = ended.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                loop {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => {
                            if let Mode::Echo = mode {
                                let _ = conn.write_all(b"<bye>");
                            }
                            let _ = ended.send("eof");
                            return;
                        }
                        Ok(n) => match mode {
                            Mode::Echo => {
                                if conn.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                            Mode::CloseEarly => {
                                let _ = conn.write_all(b"partial");
                                let _ = ended.send("closed");
                                return;
                            }
                        },
                    }
                }
            });
        }
    });
    (addr, ends)
}

fn free_port() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// Runs a command that lasts until `stop` exists, proxying `listen` to `target`.
fn start(
    listen: &str,
    target: &str,
    stop: &Path,
    commit: Arc<dyn Commit>,
) -> JoinHandle<io::Result<Outcome>> {
    let (out_fd, _out) = Capture::new();
    let (err_fd, _err) = Capture::new();
    let opts = Options {
        proxies: vec![format!("{listen}={target}").parse().unwrap()],
        commit_interval: Duration::from_secs(60),
        terminal: Terminal::Pipes,
        stdin: Some(std::fs::File::open("/dev/null").unwrap().into()),
        stdout: Some(out_fd),
        stderr: Some(err_fd),
        ..Options::default()
    };
    let cmd = sh(
        r#"while [ ! -e "$1" ]; do sleep 0.02; done"#,
        &[stop.to_str().unwrap()],
    );
    std::thread::spawn(move || run(cmd, opts, commit))
}

fn connect(addr: &str) -> TcpStream {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => {
                s.set_read_timeout(Some(PATIENCE)).unwrap();
                return s;
            }
            Err(e) if Instant::now() > deadline => panic!("cannot connect to {addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn read_to_end(s: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    all
}

#[test]
fn endpoints_parse() {
    let p: Proxy = "0.0.0.0:80=/run/app.sock".parse().unwrap();
    assert_eq!(p.listen, Endpoint::Tcp("0.0.0.0:80".into()));
    assert_eq!(p.target, Endpoint::Unix("/run/app.sock".into()));
    assert_eq!(p.to_string(), "0.0.0.0:80=/run/app.sock");
    assert!("[::1]:8080".parse::<Endpoint>().is_ok());
    for bad in [
        "",
        "80",
        ":80",
        "host:port",
        "host:70000",
        "a:1",
        "=",
        "a:1=",
        "1.2.3.4:5",
    ] {
        assert!(bad.parse::<Proxy>().is_err(), "{bad:?} parsed");
    }
}

#[test]
fn a_listener_that_cannot_bind_fails_before_the_command_starts() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let opts = Options {
        proxies: vec![format!("{addr}=127.0.0.1:1").parse().unwrap()],
        terminal: Terminal::Pipes,
        ..Options::default()
    };
    let cmd = sh(r#"touch "$1""#, &[marker.to_str().unwrap()]);
    let e = run(cmd, opts, Arc::new(FakeCommit::new(&[]))).unwrap_err();
    assert!(e.to_string().contains("cannot listen"), "{e}");
    assert!(!marker.exists());
}

#[test]
fn a_reply_waits_for_a_commit_and_the_end_follows_it() {
    let (target, _ends) = server(Mode::Echo);
    let listen = free_port();
    let dir = tempfile::tempdir().unwrap();
    let stop = dir.path().join("stop");
    let (fake, gate) = FakeCommit::new(&[]).gated();
    let runner = start(&listen, &target, &stop, Arc::new(fake));

    let mut client = connect(&listen);
    client.write_all(b"ping").unwrap();
    assert_eq!(gate.started(), 1);
    client.set_read_timeout(Some(QUIET)).unwrap();
    let mut buf = [0u8; 16];
    let early = client.read(&mut buf);
    assert!(
        early.is_err(),
        "the reply showed during the commit: {early:?}"
    );
    gate.answer(Answer::Open);
    client.set_read_timeout(Some(PATIENCE)).unwrap();
    client.read_exact(&mut buf[..4]).unwrap();
    assert_eq!(&buf[..4], b"ping");
    // Our end reaches the server, its "<bye>" and its close come back.
    client.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_end(&mut client), b"<bye>");

    std::fs::write(&stop, b"").unwrap();
    let outcome = runner.join().unwrap().unwrap();
    assert!(outcome.status.success());
    assert_eq!(outcome.released_bytes, 9);
}

#[test]
fn sixteen_clients_at_once_each_get_their_own_bytes_in_order() {
    let (target, _ends) = server(Mode::Echo);
    let listen = free_port();
    let dir = tempfile::tempdir().unwrap();
    let stop = dir.path().join("stop");
    let fake = Arc::new(FakeCommit::new(&[]).pausing(Duration::from_millis(2)));
    let runner = start(&listen, &target, &stop, fake.clone());

    let clients: Vec<_> = (0..16)
        .map(|c| {
            let listen = listen.clone();
            std::thread::spawn(move || {
                let mut s = connect(&listen);
                let mut lines = BufReader::new(s.try_clone().unwrap());
                let mut got = String::new();
                for i in 0..200 {
                    let line = format!("client {c} line {i} {}\n", "x".repeat(i % 50));
                    s.write_all(line.as_bytes()).unwrap();
                    got.clear();
                    lines.read_line(&mut got).unwrap();
                    assert_eq!(got, line);
                }
                s.shutdown(Shutdown::Write).unwrap();
                let mut rest = Vec::new();
                lines.read_to_end(&mut rest).unwrap();
                assert_eq!(rest, b"<bye>");
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    std::fs::write(&stop, b"").unwrap();
    let outcome = runner.join().unwrap().unwrap();
    assert!(outcome.status.success());
    // No byte shown before its commit: each reply needed one, so each client waited for
    // at least 200 of them, shared among the clients.
    assert!(outcome.commits >= 200, "{outcome:?}");
}

#[test]
fn a_server_that_closes_mid_stream_closes_its_client_after_what_it_sent() {
    let (target, ends) = server(Mode::CloseEarly);
    let listen = free_port();
    let dir = tempfile::tempdir().unwrap();
    let stop = dir.path().join("stop");
    let runner = start(&listen, &target, &stop, Arc::new(FakeCommit::new(&[])));

    let mut client = connect(&listen);
    client.write_all(b"hello").unwrap();
    assert_eq!(ends.recv_timeout(PATIENCE).unwrap(), "closed");
    assert_eq!(read_to_end(&mut client), b"partial");
    // The proxy is still there for others.
    let mut other = connect(&listen);
    other.write_all(b"again").unwrap();
    assert_eq!(read_to_end(&mut other), b"partial");

    std::fs::write(&stop, b"").unwrap();
    assert!(runner.join().unwrap().unwrap().status.success());
}

#[test]
fn a_client_that_disconnects_closes_its_server_side_and_no_other() {
    let (target, ends) = server(Mode::Echo);
    let listen = free_port();
    let dir = tempfile::tempdir().unwrap();
    let stop = dir.path().join("stop");
    let runner = start(&listen, &target, &stop, Arc::new(FakeCommit::new(&[])));

    let mut stays = connect(&listen);
    stays.write_all(b"one").unwrap();
    let mut buf = [0u8; 3];
    stays.read_exact(&mut buf).unwrap();

    let mut leaves = connect(&listen);
    leaves.write_all(b"two").unwrap();
    leaves.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"two");
    drop(leaves);
    assert_eq!(ends.recv_timeout(PATIENCE).unwrap(), "eof");

    stays.write_all(b"three").unwrap();
    let mut buf = [0u8; 5];
    stays.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"three");

    std::fs::write(&stop, b"").unwrap();
    assert!(runner.join().unwrap().unwrap().status.success());
    // The command is gone: the connection left open is wound up, and the listener too.
    stays.shutdown(Shutdown::Write).unwrap();
    let _ = read_to_end(&mut stays);
    assert!(TcpStream::connect(&listen).is_err());
}

#[test]
fn a_unix_socket_listener_proxies_and_is_removed_after() {
    let (target, _ends) = server(Mode::Echo);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("front.sock");
    let stop = dir.path().join("stop");
    let runner = start(
        path.to_str().unwrap(),
        &target,
        &stop,
        Arc::new(FakeCommit::new(&[])),
    );
    let deadline = Instant::now() + PATIENCE;
    let mut client = loop {
        match std::os::unix::net::UnixStream::connect(&path) {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => panic!("{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    client.write_all(b"via unix").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    let mut all = String::new();
    client.read_to_string(&mut all).unwrap();
    assert_eq!(all, "via unix<bye>");
    std::fs::write(&stop, b"").unwrap();
    assert!(runner.join().unwrap().unwrap().status.success());
    assert!(!path.exists());
}
