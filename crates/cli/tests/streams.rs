//! Streams through a real mount: the Python package's test of the calls
//! and their misuse (`python/tests/streams.py`), and `stitchfs run
//! --stream`: the program's exit status comes back, and what it wrote is
//! durable when `run` returns (the server killed outright right after,
//! with no background flush, keeps it; a program run without `run` in the
//! same way loses it, which shows the kill loses what was not flushed).

mod posix_support;

use posix_support::{python_test, run_logged as run, Scratch, JOURNAL_ORDERED, SOFTUPDATES};
use std::path::Path;
use std::process::{Command, Output};

#[test]
fn the_python_package_joins_asks_and_leaves_streams_and_refuses_misuse() {
    let s = Scratch::new(JOURNAL_ORDERED, 64);
    s.with_mount(|mnt| {
        let text = python_test("streams", mnt, "python streams ok");
        assert!(text.contains("in no stream"), "the EINVAL message: {text}");
    });
}

/// `stitchfs run` with `args`, running `script` under sh in `mnt`.
fn stitchfs_run(mnt: &Path, args: &[&str], script: &str) -> Output {
    run(
        "stitchfs run",
        Command::new(env!("CARGO_BIN_EXE_stitchfs"))
            .arg("run")
            .args(args)
            .args(["--", "sh", "-c", script])
            .current_dir(mnt),
    )
}

#[test]
fn run_returns_the_status_with_the_stream_durable() {
    for mode in [JOURNAL_ORDERED, SOFTUPDATES] {
        let mut s = Scratch::new(mode, 64);
        // No background flush: only what run makes durable is.
        s.mount_args = vec!["--flush-interval".into(), "0".into()];
        let m = s.mount();
        let mnt = m.path().to_path_buf();
        let script = "mkdir d && echo one > d/a && echo two > d/b && \
                      python3 -c 'import os; f=os.open(\"d/b\", os.O_RDONLY); os.fsync(f)' && \
                      exit 3";
        let out = stitchfs_run(&mnt, &["--stream", "job", "--ignore-fsync"], script);
        assert_eq!(out.status.code(), Some(3), "{}: CMD's status", mode.name());
        // Outside any stream and with no sync, the same kind of change
        // stays in memory.
        let out = Command::new("sh")
            .args(["-c", "echo lost > c"])
            .current_dir(&mnt)
            .status()
            .unwrap();
        assert!(out.success());
        m.kill();
        s.with_mount(|mnt| {
            let read = |p: &str| std::fs::read_to_string(mnt.join(p)).ok();
            assert_eq!(read("d/a").as_deref(), Some("one\n"), "{}", mode.name());
            assert_eq!(read("d/b").as_deref(), Some("two\n"), "{}", mode.name());
            assert_eq!(read("c"), None, "{}: the kill kept c", mode.name());
        });
    }
}

#[test]
fn run_refuses_a_path_off_the_mount_and_a_name_too_long() {
    let tmp = tempfile::tempdir().unwrap();
    let out = stitchfs_run(tmp.path(), &["--stream", "x"], "true");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not on a stitchfs mount"));
    let s = Scratch::new(JOURNAL_ORDERED, 64);
    s.with_mount(|mnt| {
        let long = "n".repeat(64);
        let out = stitchfs_run(mnt, &["--stream", &long], "true");
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("joining stream"), "{err}");
    });
}
