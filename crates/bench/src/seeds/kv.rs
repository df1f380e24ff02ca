//! xsyncfs's server experiment in miniature ("Rethink the Sync", §5): a
//! server that makes each request durable before it answers, under load
//! from clients on the same machine. The server is ours, `kvd.py`, a small
//! key-value server that keeps each key as a file on the mount and fsyncs
//! the file and its directory before it answers a PUT (its docstring says
//! the protocol; `test_kvd.py` tests it). The load comes from this process:
//! 1, 4 and 16 clients (the phases of **kv**), each on a connection of its
//! own, sending PUTs of values of 100–1,000 bytes one after another, each
//! waiting for its answer, the phase's requests shared out among them.
//!
//! Each phase has a server of its own over a directory of its own, started
//! before the phase (untimed) once it answers a PING. The phase is the
//! load, from the first connection to the last answer, then the syncfs
//! every phase ends with; its figure is requests a second over that time,
//! with the median and 99th-percentile time from a request's send to its
//! answer beside it. Then the server is stopped (a SHUTDOWN request; it
//! must exit 0) and every key is read back from the mount: a request lost
//! or a value changed fails the phase.
//!
//! Under `stitchfs xsync` the server runs as `stitchfs xsync --proxy
//! FRONT=SERVER --at ROOT -- python3 kvd.py --port SERVER_PORT` and the
//! clients connect to FRONT, where xsync holds each answer until what the
//! server changed before sending it is durable; elsewhere they connect to
//! the server itself.

use super::{log_tail, Prepared, Scale};
use crate::systems::Launch;
use crate::workload::{syncfs, Latency, Run};
use anyhow::{bail, ensure, Context};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// The server, written to the run's inputs directory.
const SERVER: &str = include_str!("kvd.py");

/// The clients of each of the workload's phases, in order.
pub(super) const CLIENTS: [usize; 3] = [1, 4, 16];

/// How long the server may take to answer its first PING, or to stop.
const PATIENCE: Duration = Duration::from_secs(30);

/// kvd running, under the launch of the system; stopped by
/// [`KvServer::stop`], or killed with its process group when dropped.
struct KvServer {
    child: Option<Child>,
    /// Where the clients connect.
    addr: SocketAddr,
    log: PathBuf,
}

/// Two ports of 127.0.0.1 free now (held together, so they differ).
fn free_ports() -> anyhow::Result<(u16, u16)> {
    let a = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let b = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok((a.local_addr()?.port(), b.local_addr()?.port()))
}

impl KvServer {
    /// kvd over `data`, run by `python` as `launch` runs a server on the
    /// mount at `root`, its output in `log`; once it answers a PING where
    /// its clients connect.
    fn start(
        launch: Launch,
        root: &Path,
        python: &Path,
        script: &Path,
        data: &Path,
        log: &Path,
    ) -> anyhow::Result<KvServer> {
        let (front, port) = free_ports()?;
        let local = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let (mut cmd, addr) = launch.server_command(python, root, local(front), local(port))?;
        let out = File::create(log)?;
        let child = cmd
            .arg(script)
            .arg("--port")
            .arg(port.to_string())
            .arg(data)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .current_dir(script.parent().unwrap_or(Path::new("/")))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            // Its own group, so that what the launcher started goes with it.
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting kvd{}", launch.describe()))?;
        let mut server = KvServer {
            child: Some(child),
            addr,
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = server.child_mut().try_wait()? {
                bail!("kvd exited ({status}) before answering{}", server.tail());
            }
            if server.ask("PING").is_ok_and(|a| a == "PONG") {
                return Ok(server);
            }
            if Instant::now() > deadline {
                bail!(
                    "kvd did not answer a PING at {addr} within {} s{}",
                    PATIENCE.as_secs(),
                    server.tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("a server not yet stopped")
    }

    /// One request on a connection of its own, and the answer's line.
    fn ask(&self, request: &str) -> anyhow::Result<String> {
        let mut conn = TcpStream::connect_timeout(&self.addr, PATIENCE)?;
        conn.set_read_timeout(Some(PATIENCE))?;
        conn.write_all(format!("{request}\n").as_bytes())?;
        let mut line = String::new();
        BufReader::new(conn).read_line(&mut line)?;
        Ok(line.trim_end().to_string())
    }

    /// Asks the server to stop; it (and its launcher) must exit 0 soon.
    fn stop(mut self) -> anyhow::Result<()> {
        let answer = self.ask("SHUTDOWN").context("asking kvd to stop")?;
        ensure!(answer == "BYE", "kvd answered SHUTDOWN with {answer:?}");
        let mut child = self.child.take().expect("a server not yet stopped");
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() > deadline {
                self.child = Some(child);
                bail!(
                    "kvd did not exit within {} s of SHUTDOWN{}",
                    PATIENCE.as_secs(),
                    self.tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        ensure!(status.success(), "kvd ended with {status}{}", self.tail());
        Ok(())
    }

    /// The end of the server's output, for messages.
    fn tail(&self) -> String {
        log_tail(&self.log)
    }
}

impl Drop for KvServer {
    fn drop(&mut self) {
        let Some(child) = &mut self.child else {
            return;
        };
        let group = child.id() as i32;
        // SAFETY: kill has no memory effects; the group is our child's,
        // which is not reaped yet.
        unsafe { libc::kill(-group, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above; whatever is left of the group.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        let _ = child.wait();
    }
}

/// What the clients of a phase did.
#[derive(Debug)]
pub(super) struct Load {
    pub requests: usize,
    /// Seconds from each request's send to its answer.
    pub latencies: Vec<f64>,
}

/// The requests client `client` of `clients` sends, of `total`.
fn share(total: usize, clients: usize, client: usize) -> usize {
    total / clients + usize::from(client < total % clients)
}

/// The key of client `client`'s request `i`.
fn key(client: usize, i: usize) -> String {
    format!("c{client}-{i}")
}

/// The value of client `client`'s request `i`: between `min` and `max`
/// bytes (inclusive), the same each time.
fn value(client: usize, i: usize, (min, max): (usize, usize)) -> Vec<u8> {
    let mut x = (((client as u64) << 32) | i as u64) ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let len = min + (next() % (max - min + 1) as u64) as usize;
    (0..len).map(|_| next() as u8).collect()
}

/// `clients` clients at `addr`, each on a connection of its own, sending
/// its share of `total` PUTs of values of `sizes` bytes one after another,
/// each answered before the next; they start together once all are
/// connected.
pub(super) fn drive(
    addr: SocketAddr,
    clients: usize,
    total: usize,
    sizes: (usize, usize),
) -> anyhow::Result<Load> {
    let conns = (0..clients)
        .map(|c| {
            let conn = TcpStream::connect(addr)
                .with_context(|| format!("client {c} connecting to {addr}"))?;
            conn.set_nodelay(true)?;
            Ok(conn)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let start = Barrier::new(clients);
    let per_client = std::thread::scope(|s| {
        let threads: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(c, conn)| {
                let start = &start;
                s.spawn(move || -> anyhow::Result<Vec<f64>> {
                    let n = share(total, clients, c);
                    let mut answers = BufReader::new(conn.try_clone()?);
                    let mut conn = conn;
                    let mut times = Vec::with_capacity(n);
                    let mut line = String::new();
                    start.wait();
                    for i in 0..n {
                        let (k, v) = (key(c, i), value(c, i, sizes));
                        let mut request = format!("PUT {k} {}\n", v.len()).into_bytes();
                        request.extend_from_slice(&v);
                        let t = Instant::now();
                        conn.write_all(&request)
                            .with_context(|| format!("client {c} sending PUT {k}"))?;
                        line.clear();
                        answers
                            .read_line(&mut line)
                            .with_context(|| format!("client {c} reading the answer to PUT {k}"))?;
                        times.push(t.elapsed().as_secs_f64());
                        ensure!(
                            line == "OK\n",
                            "client {c}: PUT {k} answered {:?}",
                            line.trim_end()
                        );
                    }
                    Ok(times)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|_| bail!("a client panicked")))
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let latencies: Vec<f64> = per_client.into_iter().flatten().collect();
    Ok(Load {
        requests: latencies.len(),
        latencies,
    })
}

/// Every key the clients of a phase sent is in `data` with its value, and
/// nothing else is (no key more, no temporary file left).
fn verify(data: &Path, clients: usize, total: usize, sizes: (usize, usize)) -> anyhow::Result<()> {
    let stored = std::fs::read_dir(data)
        .with_context(|| format!("listing {}", data.display()))?
        .count();
    ensure!(
        stored == total,
        "{} holds {stored} files after {total} PUTs were answered",
        data.display()
    );
    for c in 0..clients {
        for i in 0..share(total, clients, c) {
            let k = key(c, i);
            let got = std::fs::read(data.join(&k))
                .with_context(|| format!("key {k}, answered OK, is not stored"))?;
            ensure!(got == value(c, i, sizes), "key {k} holds another value");
        }
    }
    Ok(())
}

/// The workload: one phase per entry of [`CLIENTS`], `phases` in the same
/// order.
pub(super) fn kv(
    run: &mut Run,
    phases: &[usize],
    s: &Scale,
    inputs: &Prepared,
) -> anyhow::Result<()> {
    let script = inputs.dir.join("kvd.py");
    std::fs::write(&script, SERVER)?;
    let launch = run.launch();
    let sizes = (s.kv_min_bytes, s.kv_max_bytes);
    for (&phase, &clients) in phases.iter().zip(&CLIENTS) {
        let dir = format!("kv{clients}");
        let log = inputs.dir.join(format!("kvd-{clients}.log"));
        let mut server = None;
        run.setup(phase, |root| {
            std::fs::create_dir(root.join(&dir))?;
            let data = root.join(&dir).join("data");
            let python = &inputs.interpreter;
            server = Some(KvServer::start(launch, root, python, &script, &data, &log)?);
            Ok(())
        })?;
        let addr = server.as_ref().context("no server")?.addr;
        let mut latencies = Vec::new();
        run.timed(phase, |root| {
            let load = drive(addr, clients, s.kv_requests, sizes)?;
            syncfs(root)?;
            latencies = load.latencies;
            Ok(load.requests as f64)
        })?;
        run.latency(Latency::of(latencies));
        run.check(phase, |root| {
            server.take().context("no server")?.stop()?;
            verify(&root.join(&dir).join("data"), clients, s.kv_requests, sizes)
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Python tests of the server (`test_kvd.py`): the protocol, a PUT
    /// durable before its answer, and the ways it stops.
    #[test]
    fn the_server_passes_its_own_tests() {
        super::super::tests::python_tests("test_kvd.py");
    }

    #[test]
    fn requests_are_shared_out_and_values_fixed() {
        let shares: Vec<usize> = (0..4).map(|c| share(10, 4, c)).collect();
        assert_eq!(shares, [3, 3, 2, 2]);
        assert_eq!((0..16).map(|c| share(2000, 16, c)).sum::<usize>(), 2000);
        assert_eq!(share(3, 16, 15), 0);
        let lens: Vec<usize> = (0..200).map(|i| value(3, i, (100, 1000)).len()).collect();
        assert!(lens.iter().all(|l| (100..=1000).contains(l)), "{lens:?}");
        assert!(lens.iter().any(|&l| l < 300) && lens.iter().any(|&l| l > 800));
        assert_eq!(value(3, 7, (100, 1000)), value(3, 7, (100, 1000)));
        assert_ne!(value(3, 7, (100, 1000)), value(7, 3, (100, 1000)));
        assert_eq!(value(0, 0, (5, 5)).len(), 5);
    }

    /// The server and the clients off a mount, launched as they are: every
    /// PUT answered, counted and stored; a key lost or changed is found.
    #[test]
    fn clients_load_the_server_and_every_put_is_checked() {
        let python = super::super::interpreter();
        if std::process::Command::new(&python)
            .arg("-V")
            .output()
            .is_err()
        {
            eprintln!("skipping: no python3");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("kvd.py");
        std::fs::write(&script, SERVER).unwrap();
        let data = dir.path().join("data");
        let log = dir.path().join("kvd.log");
        let sizes = (100, 1000);
        let server =
            KvServer::start(Launch::Direct, dir.path(), &python, &script, &data, &log).unwrap();
        let load = drive(server.addr, 4, 30, sizes).unwrap();
        assert_eq!((load.requests, load.latencies.len()), (30, 30));
        assert!(load.latencies.iter().all(|&t| t > 0.0));
        assert_eq!(server.ask("COUNT").unwrap(), "COUNT 30");
        server.stop().unwrap();
        verify(&data, 4, 30, sizes).unwrap();
        let e = verify(&data, 4, 31, sizes).unwrap_err();
        assert!(
            format!("{e:#}").contains("holds 30 files after 31 PUTs"),
            "{e:#}"
        );
        std::fs::write(data.join("c2-1"), b"other").unwrap();
        let e = verify(&data, 4, 30, sizes).unwrap_err();
        assert_eq!(format!("{e:#}"), "key c2-1 holds another value");
        std::fs::remove_file(data.join("c2-1")).unwrap();
        std::fs::write(data.join(".c2-1.9"), b"").unwrap();
        let e = verify(&data, 4, 30, sizes).unwrap_err();
        assert!(
            format!("{e:#}").contains("key c2-1, answered OK, is not stored"),
            "{e:#}"
        );
        // A server that cannot start says why.
        std::fs::write(dir.path().join("file"), b"").unwrap();
        let blocked = dir.path().join("file/data");
        let e = KvServer::start(Launch::Direct, dir.path(), &python, &script, &blocked, &log)
            .err()
            .unwrap();
        let e = format!("{e:#}");
        assert!(
            e.contains("kvd exited (exit status: 1) before answering"),
            "{e}"
        );
        assert!(e.contains("NotADirectoryError"), "{e}");
    }
}
