//! The command's output through pipes: held until a commit that started after it was
//! read has returned, in order, bounded, through failing commits.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::time::Duration;

use common::{sh, Answer, Capture, FakeCommit, QUIET};
use stitch_relay::{run, Options, Terminal};

fn options(out: std::os::fd::OwnedFd, err: std::os::fd::OwnedFd) -> Options {
    Options {
        commit_interval: Duration::from_secs(60),
        terminal: Terminal::Pipes,
        stdin: Some(std::fs::File::open("/dev/null").unwrap().into()),
        stdout: Some(out),
        stderr: Some(err),
        ..Options::default()
    }
}

#[test]
fn output_waits_for_a_commit_that_started_after_it_was_read() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let (out_fd, out) = Capture::new();
    let (err_fd, err) = Capture::new();
    let (fake, gate) = FakeCommit::new(&[&out, &err]).gated();
    let fake = Arc::new(fake);
    let script =
        r#"printf one; while [ ! -e "$1" ]; do sleep 0.01; done; printf two >&2; printf three"#;
    let cmd = sh(script, &[go.to_str().unwrap()]);
    let commit: Arc<dyn stitch_relay::Commit> = fake.clone();
    let runner = std::thread::spawn(move || run(cmd, options(out_fd, err_fd), commit));

    // "one" was read, so a commit started; while it runs, nothing may show.
    assert_eq!(gate.started(), 1);
    std::thread::sleep(QUIET);
    assert_eq!(out.text(), "");
    // More output arrives during that commit: it must wait for the next one.
    std::fs::write(&go, b"").unwrap();
    std::thread::sleep(QUIET);
    assert_eq!((out.text(), err.text()), (String::new(), String::new()));

    gate.answer(Answer::Once(Ok(())));
    assert_eq!(gate.started(), 2);
    assert!(
        out.wait_for(|t| t == "one"),
        "first commit released {:?}",
        out.text()
    );
    std::thread::sleep(QUIET);
    assert_eq!(
        out.text(),
        "one",
        "bytes read during commit 1 leaked before commit 2 returned"
    );
    assert_eq!(err.text(), "");
    gate.answer(Answer::Open);

    let outcome = runner.join().unwrap().expect("run");
    assert!(outcome.status.success());
    assert_eq!(out.finish(), b"onethree");
    assert_eq!(err.finish(), b"two");
    assert_eq!(outcome.released_bytes, 11);
    let calls = fake.calls();
    // The second may be the final one, if the command was gone by then.
    assert!(
        outcome.commits >= 2 && outcome.commits == calls.len() as u64,
        "{outcome:?}"
    );
    // The first commit saw "one" held and nothing shown.
    assert_eq!(calls[0].held.bytes, 3);
    assert!(calls[0].seen_at_end.iter().all(|s| s.is_empty()));
}

#[test]
fn stdout_and_stderr_each_keep_their_order() {
    let (out_fd, out) = Capture::new();
    let (err_fd, err) = Capture::new();
    let fake = Arc::new(FakeCommit::new(&[&out, &err]).pausing(Duration::from_millis(3)));
    let script = "i=0; while [ $i -lt 300 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done";
    let outcome = run(sh(script, &[]), options(out_fd, err_fd), fake.clone()).unwrap();
    let want = |tag: &str| (0..300).map(|i| format!("{tag}{i}\n")).collect::<String>();
    assert_eq!(String::from_utf8(out.finish()).unwrap(), want("out"));
    assert_eq!(String::from_utf8(err.finish()).unwrap(), want("err"));
    assert!(outcome.status.success());
    // Every byte shown at a commit's start had been released by an earlier commit.
    let calls = fake.calls();
    for pair in calls.windows(2) {
        for (before, after) in pair[0].seen_at_end.iter().zip(&pair[1].seen_at_start) {
            assert!(after.len() >= before.len());
        }
    }
}

#[test]
fn exit_status_is_the_commands_own() {
    let (out_fd, _out) = Capture::new();
    let (err_fd, _err) = Capture::new();
    let fake = Arc::new(FakeCommit::new(&[]));
    let outcome = run(
        sh("echo bye; exit 3", &[]),
        options(out_fd, err_fd),
        fake.clone(),
    )
    .unwrap();
    assert_eq!(outcome.status.code(), Some(3));

    let (out_fd, out) = Capture::new();
    let (err_fd, _err) = Capture::new();
    let outcome = run(
        sh("echo dying; kill -9 $$", &[]),
        options(out_fd, err_fd),
        fake,
    )
    .unwrap();
    assert_eq!(outcome.status.signal(), Some(9));
    assert_eq!(out.finish(), b"dying\n");
}

#[test]
fn a_writer_past_the_bound_is_blocked_until_release() {
    let dir = tempfile::tempdir().unwrap();
    let progress = dir.path().join("progress");
    let (out_fd, out) = Capture::new();
    let (err_fd, _err) = Capture::new();
    let (fake, gate) = FakeCommit::new(&[&out]).gated();
    let fake = Arc::new(fake);
    let bound = 64 * 1024;
    let rounds = 100;
    let script = r#"i=0; while [ $i -lt 100 ]; do head -c 16384 /dev/zero; i=$((i+1)); echo $i > "$1"; done"#;
    let cmd = sh(script, &[progress.to_str().unwrap()]);
    let opts = Options {
        bound,
        ..options(out_fd, err_fd)
    };
    let commit: Arc<dyn stitch_relay::Commit> = fake.clone();
    let runner = std::thread::spawn(move || run(cmd, opts, commit));

    gate.started();
    let read = || {
        std::fs::read_to_string(&progress)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(0)
    };
    std::thread::sleep(Duration::from_millis(500));
    let stalled_at = read();
    std::thread::sleep(QUIET);
    assert_eq!(
        read(),
        stalled_at,
        "the writer went on while the hold was full"
    );
    // The bound, a chunk read past it and the pipe's buffer: far from all of it.
    assert!(
        stalled_at < rounds / 2,
        "writer got to {stalled_at} of {rounds}"
    );
    assert_eq!(out.text(), "");

    gate.answer(Answer::Open);
    let outcome = runner.join().unwrap().unwrap();
    assert!(outcome.status.success());
    assert_eq!(out.finish().len(), 16384 * rounds as usize);
    assert!(outcome.max_held < (bound + 64 * 1024) as u64, "{outcome:?}");
}

#[test]
fn a_failing_commit_holds_everything_reports_once_and_recovers() {
    let (out_fd, out) = Capture::new();
    let (err_fd, err) = Capture::new();
    // Three failures (50, 100, 200 ms of pauses) while the command still runs.
    let fake = Arc::new(FakeCommit::new(&[&out]).failing(3));
    let outcome = run(
        sh("printf hello; sleep 1", &[]),
        options(out_fd, err_fd),
        fake.clone(),
    )
    .unwrap();
    assert!(outcome.status.success());
    assert_eq!(out.finish(), b"hello");
    let report = String::from_utf8(err.finish()).unwrap();
    assert_eq!(report.matches("disk on fire").count(), 1, "{report}");
    let calls = fake.calls();
    assert!(calls.len() >= 4);
    for call in calls.iter().filter(|c| !c.ok) {
        assert!(
            call.seen_at_end[0].is_empty(),
            "released through a failed commit"
        );
    }
    assert_eq!(
        outcome.commits,
        calls.iter().filter(|c| c.ok).count() as u64
    );
}

#[test]
fn a_final_commit_that_fails_is_the_error_and_nothing_is_released() {
    let (out_fd, out) = Capture::new();
    let (err_fd, _err) = Capture::new();
    let fake = Arc::new(FakeCommit::new(&[&out]).always_failing());
    let e = run(sh("printf secret", &[]), options(out_fd, err_fd), fake).unwrap_err();
    assert!(e.to_string().contains("final commit failed"), "{e}");
    assert_eq!(out.finish(), b"");
}

#[test]
fn commits_come_periodically_with_nothing_held() {
    let (out_fd, _out) = Capture::new();
    let (err_fd, _err) = Capture::new();
    let fake = Arc::new(FakeCommit::new(&[]));
    let opts = Options {
        commit_interval: Duration::from_millis(100),
        ..options(out_fd, err_fd)
    };
    let outcome = run(sh("sleep 1", &[]), opts, fake.clone()).unwrap();
    let calls = fake.calls();
    assert!(
        calls.len() >= 6,
        "{} commits in a second at 100 ms",
        calls.len()
    );
    assert!(calls.iter().all(|c| c.held.bytes == 0));
    assert_eq!(outcome.commits, calls.len() as u64);
    // Spaced by the interval, not back to back.
    for pair in calls.windows(2).take(calls.len().saturating_sub(2)) {
        assert!(pair[1].start - pair[0].start >= Duration::from_millis(90));
    }
}

#[test]
fn a_closed_destination_drops_quietly() {
    let (r, w) = std::io::pipe().unwrap();
    drop(r);
    let (err_fd, _err) = Capture::new();
    let fake = Arc::new(FakeCommit::new(&[]));
    let outcome = run(
        sh("echo a; echo b; exit 4", &[]),
        options(w.into(), err_fd),
        fake,
    )
    .unwrap();
    assert_eq!(outcome.status.code(), Some(4));
}
