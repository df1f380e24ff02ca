//! Signals sent to us reach the command, and we stay to release its output. Alone in
//! its test program: it signals the whole process.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{join_within, sh, Capture, FakeCommit};
use nix::sys::signal::{kill, Signal};
use nix::unistd::getpid;
use stitch_relay::{run, Options, Terminal};

#[test]
fn a_terminating_signal_goes_to_the_command_and_we_finish_releasing() {
    let (out_fd, out) = Capture::new();
    let (err_fd, _err) = Capture::new();
    let opts = Options {
        terminal: Terminal::Pipes,
        commit_interval: Duration::from_secs(60),
        stdin: Some(std::fs::File::open("/dev/null").unwrap().into()),
        stdout: Some(out_fd),
        stderr: Some(err_fd),
        ..Options::default()
    };
    let script = r#"trap 'echo got-term; exit 7' TERM; trap 'echo got-usr1' USR1
        echo ready; while :; do sleep 0.05; done"#;
    let runner =
        std::thread::spawn(move || run(sh(script, &[]), opts, Arc::new(FakeCommit::new(&[]))));
    assert!(out.wait_for(|t| t.contains("ready")));
    kill(getpid(), Signal::SIGUSR1).unwrap();
    assert!(out.wait_for(|t| t.contains("got-usr1")), "{:?}", out.text());
    kill(getpid(), Signal::SIGTERM).unwrap();
    let outcome = join_within(runner).unwrap();
    assert_eq!(outcome.status.code(), Some(7));
    assert_eq!(out.finish(), b"ready\ngot-usr1\ngot-term\n");
}
