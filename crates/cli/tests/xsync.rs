//! External synchrony through a real mount: the Python package's test of
//! the mount's side (`python/tests/xsync.py`: members' fsyncs return at
//! once, commits, outside observers waiting, misuse), and `stitchfs xsync`
//! as its users run it, with the server killed outright (a crash of
//! stitchfs) at the moment output is seen:
//! - CMD's status comes back, with everything CMD did durable;
//! - a line CMD printed is seen only once what CMD did before it is
//!   durable (the same program without xsync loses what it printed);
//! - through `--proxy`, a reply reaches a client only once the request's
//!   changes are durable, for 16 clients at once, each in order, with a
//!   client that leaves and a server that closes;
//! - a pseudo-terminal when ours is one (the window size too), pipes
//!   otherwise; a refusal off any stitchfs mount.
//!
//! Each mount runs with no background flush, so what survives a kill is
//! only what a commit (or fsync) made durable.

mod posix_support;

use posix_support::{python_test, run_logged as run, Scratch, JOURNAL_ORDERED, SOFTUPDATES};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn scratch(mode: posix_support::Mode) -> Scratch {
    let mut s = Scratch::new(mode, 64);
    s.mount_args = vec!["--flush-interval".into(), "0".into()];
    s
}

/// `stitchfs xsync` on `mnt` only (tests run beside each other's mounts,
/// which they kill).
fn xsync(mnt: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stitchfs"));
    c.arg("xsync")
        .arg("--at")
        .arg(mnt)
        .args(args)
        .current_dir(mnt);
    c
}

/// A running `stitchfs xsync`, stopped when dropped (a failing test
/// leaves no server behind): SIGTERM, which it passes to CMD, and a wait
/// until it exits once CMD has.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

fn stop(child: Child) {
    drop(Running(child));
}

#[test]
fn members_sync_at_once_commits_make_durable_and_outsiders_wait() {
    for mode in [JOURNAL_ORDERED, SOFTUPDATES] {
        let s = scratch(mode);
        s.with_mount(|mnt| {
            let text = python_test("xsync", mnt, "python xsync ok");
            assert!(text.contains("commit outside:"), "{text}");
        });
    }
}

#[test]
fn xsync_returns_the_status_with_everything_durable() {
    for mode in [JOURNAL_ORDERED, SOFTUPDATES] {
        let s = scratch(mode);
        let m = s.mount();
        let mnt = m.path().to_path_buf();
        let script = "mkdir d && echo one > d/a && echo two > d/b && sync d/b && exit 3";
        let out = run("xsync", &mut xsync(&mnt, &["--", "sh", "-c", script]));
        assert_eq!(out.status.code(), Some(3), "{}: CMD's status", mode.name());
        let out = run(
            "xsync",
            &mut xsync(&mnt, &["--", "sh", "-c", "kill -TERM $$"]),
        );
        assert_eq!(out.status.code(), Some(128 + 15), "killed by a signal");
        // The mount's figures show the group's syncs and commits.
        let out = run(
            "stats",
            Command::new(env!("CARGO_BIN_EXE_stitchfs"))
                .arg("stats")
                .arg(&mnt),
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("external synchrony"), "{text}");
        let shown = |label: &str| {
            let l = text.lines().find(|l| l.trim_start().starts_with(label));
            let n = l.and_then(|l| l.split_whitespace().find_map(|w| w.parse::<u64>().ok()));
            n.unwrap_or_else(|| panic!("no {label} in {text}"))
        };
        assert!(shown("syncs returned at once") >= 1, "{text}");
        assert!(shown("commits") >= 2, "{text}");
        // Outside xsync and with no sync, the same kind of change stays in
        // memory: the kill below loses it.
        std::fs::write(mnt.join("c"), "lost").unwrap();
        m.kill();
        s.with_mount(|mnt| {
            let read = |p: &str| std::fs::read_to_string(mnt.join(p)).ok();
            assert_eq!(read("d/a").as_deref(), Some("one\n"), "{}", mode.name());
            assert_eq!(read("d/b").as_deref(), Some("two\n"), "{}", mode.name());
            assert_eq!(read("c"), None, "{}: the kill kept c", mode.name());
        });
    }
}

/// A program that writes file N (no fsync) and prints "wrote N", for N
/// in 1..=5, pausing between.
const WRITER: &str = "for i in 1 2 3 4 5; do echo data$i > f$i; echo wrote $i; sleep 0.2; done";

/// Runs `cmd`, reads its output until "wrote 3", kills the server then:
/// which of f1..f5 survive.
fn kill_after_line_3(s: &Scratch, mut cmd: Command) -> Vec<bool> {
    let m = s.mount();
    let mut child: Child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("output ended early").unwrap();
        if line == "wrote 3" {
            break;
        }
    }
    m.kill();
    stop(child);
    s.with_mount(|mnt| {
        (1..=5)
            .map(|i| {
                std::fs::read_to_string(mnt.join(format!("f{i}")))
                    .is_ok_and(|d| d == format!("data{i}\n"))
            })
            .collect()
    })
}

#[test]
fn a_line_is_seen_only_once_what_came_before_it_is_durable() {
    for mode in [JOURNAL_ORDERED, SOFTUPDATES] {
        let s = scratch(mode);
        let under = kill_after_line_3(&s, xsync(&s.mnt, &["--", "sh", "-c", WRITER]));
        assert!(under[..3].iter().all(|&k| k), "{}: {under:?}", mode.name());
        // The control: the same program alone. Its lines promise nothing,
        // and the kill shows it.
        let s = scratch(mode);
        let mut plain = Command::new("sh");
        plain.args(["-c", WRITER]).current_dir(&s.mnt);
        let alone = kill_after_line_3(&s, plain);
        assert!(!alone[2], "{}: the control kept f3: {alone:?}", mode.name());
    }
}

/// A free TCP port on the loopback (free when asked).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server that, per line "K V" from a client, writes file K holding V,
/// fsyncs it and answers "ok K"; "bye" closes the connection from its
/// side. One thread per client.
const SERVER: &str = r#"
import os, socket, sys, threading
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1])))
srv.listen(64)
def serve(c):
    f = c.makefile("rwb")
    for line in f:
        words = line.decode().split()
        if words == ["bye"]:
            break
        k, v = words
        with open(k, "w") as out:
            out.write(v)
            out.flush()
            os.fsync(out.fileno())
        f.write(f"ok {k}\n".encode())
        f.flush()
    c.close()
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

fn connect(port: u16) -> TcpStream {
    for _ in 0..200 {
        if let Ok(c) = TcpStream::connect(("127.0.0.1", port)) {
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            return c;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listens on port {port}");
}

/// Sends "K V" and reads one answer line.
fn put(c: &mut BufReader<TcpStream>, k: &str, v: &str) -> String {
    c.get_mut()
        .write_all(format!("{k} {v}\n").as_bytes())
        .unwrap();
    let mut answer = String::new();
    c.read_line(&mut answer).unwrap();
    answer
}

#[test]
fn a_proxied_reply_comes_only_once_the_request_is_durable() {
    let s = scratch(JOURNAL_ORDERED);
    let m = s.mount();
    let (front, back) = (free_port(), free_port());
    let proxy = format!("127.0.0.1:{front}=127.0.0.1:{back}");
    let server = Running(
        xsync(
            m.path(),
            &[
                "--proxy",
                &proxy,
                "--",
                "python3",
                "-c",
                SERVER,
                &back.to_string(),
            ],
        )
        .spawn()
        .unwrap(),
    );
    // The server is up once it answers directly (the proxy listens at
    // once, and closes a client it cannot join to the server).
    drop(connect(back));
    // Sixteen clients at once, five requests each, every answer in order.
    let clients: Vec<_> = (0..16)
        .map(|n| {
            std::thread::spawn(move || {
                let mut c = BufReader::new(connect(front));
                for i in 0..5 {
                    let k = format!("c{n}-{i}");
                    assert_eq!(put(&mut c, &k, "v"), format!("ok {k}\n"));
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    // A client that leaves without reading its answer harms no one.
    let mut gone = connect(front);
    gone.write_all(b"left v\n").unwrap();
    drop(gone);
    // A server that closes: the client reads its last answer, then EOF.
    let mut c = BufReader::new(connect(front));
    assert_eq!(put(&mut c, "last", "v"), "ok last\n");
    c.get_mut().write_all(b"bye\n").unwrap();
    let mut rest = String::new();
    c.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "", "after the server closed");
    // The answer to "last" was seen: kill the file system now.
    m.kill();
    drop(server);
    s.with_mount(|mnt| {
        for n in 0..16 {
            for i in 0..5 {
                assert!(mnt.join(format!("c{n}-{i}")).exists(), "c{n}-{i} lost");
            }
        }
        assert_eq!(std::fs::read_to_string(mnt.join("last")).unwrap(), "v");
    });
}

#[test]
fn a_terminal_when_ours_is_one_pipes_otherwise() {
    let s = scratch(JOURNAL_ORDERED);
    s.with_mount(|mnt| {
        let exe = env!("CARGO_BIN_EXE_stitchfs");
        let inner = format!(
            "stty rows 33 cols 77; {exe} xsync --at . -- sh -c 'test -t 0 && test -t 1 && echo tty; stty size'"
        );
        let out = run(
            "script",
            Command::new("script")
                .args(["-qec", &inner, "/dev/null"])
                .current_dir(mnt)
                .stdin(Stdio::null()),
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("tty"), "no terminal: {text}");
        assert!(text.contains("33 77"), "the window size: {text}");
        let out = run("xsync", &mut xsync(mnt, &["--", "sh", "-c", "test -t 1 || echo pipe"]));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "pipe\n");
    });
}

#[test]
fn xsync_refuses_a_path_off_the_mount() {
    let s = scratch(JOURNAL_ORDERED);
    s.with_mount(|_mount_elsewhere| {
        let tmp = tempfile::tempdir().unwrap();
        let out = run("xsync", &mut xsync(tmp.path(), &["--", "true"]));
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not on a stitchfs mount"), "{err}");
    });
}

/// xsync holds no mount open while CMD runs: a mount it joined can be
/// unmounted meanwhile, and then leaves the group (a clean unmount made
/// everything durable). One whose server dies and is taken away holds
/// CMD's output from then on, and xsync fails: what CMD changed there
/// may be lost. The same for a mount of an image on an NBD server, whose
/// superblock xsync reads through a connection of its own.
#[test]
fn a_joined_mount_may_go_away_cleanly_but_not_by_a_crash() {
    let a = scratch(JOURNAL_ORDERED);
    let _ma = a.mount();
    for (clean, nbd) in [(true, false), (false, false), (true, true), (false, true)] {
        let mut b = match nbd {
            false => scratch(SOFTUPDATES),
            true => Scratch::over_nbd(SOFTUPDATES, 64, posix_support::Nbd::Nbdkit),
        };
        b.mount_args = vec!["--flush-interval".into(), "0".into()];
        let mb = b.mount();
        // A go-file of this round's own (the first round's stays on a).
        let go = format!("go-{clean}-{nbd}");
        let script = format!(
            "echo x > {}/f; echo started; while [ ! -e {go} ]; do sleep 0.05; done; echo after",
            b.mnt.display()
        );
        let bmnt = b.mnt.to_str().unwrap();
        let mut child = xsync(&a.mnt, &["--at", bmnt, "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "started\n");
        if clean {
            mb.unmount().expect("a mount xsync joined unmounts");
        } else {
            mb.kill();
        }
        std::fs::write(a.mnt.join(&go), "").unwrap();
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        if clean {
            assert!(status.success(), "{status}: {err}");
            assert_eq!(rest, "after\n", "{err}");
            assert!(err.contains("unmounted cleanly"), "{err}");
        } else {
            assert!(!status.success(), "a crash went unseen: {err}");
            assert_eq!(rest, "", "output released after a crash: {err}");
            assert!(err.contains("was not left clean"), "{err}");
        }
    }
}
