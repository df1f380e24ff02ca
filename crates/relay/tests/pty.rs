//! Pseudo-terminal mode. The test makes a pseudo-terminal of its own to stand for the
//! user's terminal and gives its slave side to the relay as our standard streams.

mod common;

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use common::{join_within, sh, Capture, FakeCommit};
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::pty::{openpty, Winsize};
use nix::sys::termios::{tcgetattr, LocalFlags};
use stitch_relay::{run, Options, Terminal};

/// The user's terminal: its master (the test's side) and slave (the relay's side).
fn user_terminal(rows: u16, cols: u16) -> (File, File) {
    let size = Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = openpty(Some(&size), None).unwrap();
    for fd in [&pty.master, &pty.slave] {
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).unwrap();
    }
    (File::from(pty.master), File::from(pty.slave))
}

fn set_size(fd: &File, rows: u16, cols: u16) {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize through the pointer, which outlives the call.
    let r = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(fd), libc::TIOCSWINSZ, &size) };
    assert_eq!(r, 0);
}

fn streams(slave: &File, terminal: Terminal) -> Options {
    let dup = || -> Option<OwnedFd> { Some(slave.as_fd().try_clone_to_owned().unwrap()) };
    Options {
        terminal,
        commit_interval: Duration::from_secs(60),
        stdin: dup(),
        stdout: dup(),
        stderr: dup(),
        ..Options::default()
    }
}

fn canonical(slave: &File) -> bool {
    tcgetattr(slave)
        .unwrap()
        .local_flags
        .contains(LocalFlags::ICANON)
}

#[test]
fn the_command_gets_a_terminal_with_our_size_our_keys_and_our_resizes() {
    let (master, slave) = user_terminal(37, 101);
    let screen = Capture::reading(master.try_clone().unwrap());
    let script = r#"
        if [ -t 1 ]; then echo tty-yes; else echo tty-no; fi
        stty size
        read line
        echo "got:$line"
        i=0
        while [ $i -lt 200 ]; do
            [ "$(stty size)" = "50 120" ] && { echo resized; exit 5; }
            sleep 0.05; i=$((i+1))
        done
        echo not-resized
    "#;
    let opts = streams(&slave, Terminal::Pty);
    let fake = Arc::new(FakeCommit::new(&[]));
    let runner = std::thread::spawn(move || run(sh(script, &[]), opts, fake));

    assert!(
        screen.wait_for(|t| t.contains("37 101")),
        "{:?}",
        screen.text()
    );
    assert!(screen.text().contains("tty-yes"), "{:?}", screen.text());
    assert!(
        !canonical(&slave),
        "our terminal should be raw while the command runs"
    );

    // A key typed on our terminal reaches the command's (whose line discipline turns the
    // carriage return into a newline).
    (&master).write_all(b"hello\r").unwrap();
    assert!(
        screen.wait_for(|t| t.contains("got:hello")),
        "{:?}",
        screen.text()
    );

    set_size(&master, 50, 120);
    nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGWINCH).unwrap();
    let outcome = join_within(runner).unwrap();
    assert!(
        screen.wait_for(|t| t.contains("resized")),
        "{:?}",
        screen.text()
    );
    assert_eq!(outcome.status.code(), Some(5));
    assert!(canonical(&slave), "our terminal's mode should be put back");
}

#[test]
fn auto_picks_a_terminal_when_our_output_is_one() {
    let (master, slave) = user_terminal(24, 80);
    let screen = Capture::reading(master);
    let opts = streams(&slave, Terminal::Auto);
    let script = "if [ -t 0 ] && [ -t 1 ] && [ -t 2 ]; then echo all-ttys; fi; ps -o tty= -p $$";
    let outcome = run(sh(script, &[]), opts, Arc::new(FakeCommit::new(&[]))).unwrap();
    assert!(outcome.status.success());
    assert!(
        screen.wait_for(|t| t.contains("all-ttys")),
        "{:?}",
        screen.text()
    );
    // Its controlling terminal is the one made for it, not ours.
    let ours = nix::unistd::ttyname(&slave).unwrap();
    let ours = ours
        .to_string_lossy()
        .trim_start_matches("/dev/")
        .to_string();
    assert!(
        screen.wait_for(|t| t.contains("pts/")),
        "{:?}",
        screen.text()
    );
    assert!(
        !screen.text().contains(&format!("{ours}\r")),
        "{:?}",
        screen.text()
    );
}

#[test]
fn pipes_are_chosen_when_our_output_is_not_a_terminal() {
    let (out_fd, out) = Capture::new();
    let (err_fd, _err) = Capture::new();
    let opts = Options {
        stdin: Some(File::open("/dev/null").unwrap().into()),
        stdout: Some(out_fd),
        stderr: Some(err_fd),
        ..Options::default()
    };
    let script = "if [ -t 1 ]; then echo tty; else echo no-tty; fi";
    run(sh(script, &[]), opts, Arc::new(FakeCommit::new(&[]))).unwrap();
    assert_eq!(out.finish(), b"no-tty\n");
}
