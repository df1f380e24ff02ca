//! Patchgroups through a real mount: the Python package's test of the
//! calls and their misuse (`python/tests/patchgroups.py`; the C library's
//! is in `tests/control.rs`), and `stitchfs depend`: the exit statuses it
//! returns, and the order it gives unmodified programs, seen after the
//! server is killed outright. Under the mount's precise fsync order an
//! fsync of a directory takes a removal in it without the data of a file
//! another command wrote; run under `depend`, the removal brings that data
//! with it. (Crash states inside flushes are judged by `crashtest
//! --workload patchgroups` and `crashtest --program depend-gzip`.)

mod posix_support;

use posix_support::{python_test, run_logged as run, Mode, Scratch, JOURNAL_ORDERED, SOFTUPDATES};
use std::path::Path;
use std::process::{Command, Output};

#[test]
fn the_python_package_makes_engages_depends_and_syncs_groups_and_refuses_misuse() {
    let mut s = Scratch::new(JOURNAL_ORDERED, 64);
    // No background flush: what a pg_sync leaves in memory stays there.
    s.mount_args = vec!["--flush-interval".into(), "0".into()];
    s.with_mount(|mnt| {
        let text = python_test("patchgroups", mnt, "python patchgroups ok");
        assert!(text.contains("rules forbid"), "the EINVAL message: {text}");
    });
}

fn depend(mnt: &Path, first: &str, second: &str) -> Output {
    run(
        "stitchfs depend",
        Command::new(env!("CARGO_BIN_EXE_stitchfs"))
            .args(["depend", first, second])
            .current_dir(mnt),
    )
}

#[test]
fn depend_returns_the_second_commands_status_or_the_first_failure() {
    let s = Scratch::new(JOURNAL_ORDERED, 64);
    s.with_mount(|mnt| {
        let out = depend(mnt, "echo a > a", "echo b > b; exit 5");
        assert_eq!(out.status.code(), Some(5));
        assert!(mnt.join("a").exists() && mnt.join("b").exists());
        let out = depend(mnt, "exit 3", "touch never");
        assert_eq!(out.status.code(), Some(3), "CMD1's failure");
        assert!(!mnt.join("never").exists(), "CMD2 ran after CMD1 failed");
        let out = depend(mnt, "kill -TERM $$", "touch never");
        assert_eq!(out.status.code(), Some(128 + 15), "killed by a signal");
    });
    let tmp = tempfile::tempdir().unwrap();
    let out = depend(tmp.path(), "true", "true");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not on a stitchfs mount"), "{err}");
}

/// Copies `big` to `copy` and removes `big` (under `depend` or as one
/// shell line), fsyncs the directory, kills the server: what survives.
fn copy_then_remove(mode: Mode, with_depend: bool) -> (Option<usize>, bool) {
    let mut s = Scratch::new(mode, 64);
    s.mount_args = ["--flush-interval", "0", "--order", "precise"]
        .map(String::from)
        .to_vec();
    let data = vec![b'x'; 300_000];
    s.with_mount(|mnt| {
        std::fs::create_dir(mnt.join("d")).unwrap();
        std::fs::write(mnt.join("d/big"), &data).unwrap();
    });
    let m = s.mount();
    let mnt = m.path().to_path_buf();
    let (first, second) = ("cat d/big > d/copy", "rm d/big");
    if with_depend {
        assert!(depend(&mnt, first, second).status.success());
    } else {
        let line = format!("{first} && {second}");
        assert!(Command::new("sh")
            .args(["-c", &line])
            .current_dir(&mnt)
            .status()
            .unwrap()
            .success());
    }
    let fsync_dir = "import os; f = os.open('d', os.O_RDONLY); os.fsync(f)";
    assert!(Command::new("python3")
        .args(["-c", fsync_dir])
        .current_dir(&mnt)
        .status()
        .unwrap()
        .success());
    m.kill();
    s.with_mount(|mnt| {
        let copy = std::fs::read(mnt.join("d/copy")).ok().map(|c| {
            assert!(c.iter().all(|&b| b == b'x'), "copy holds other bytes");
            c.len()
        });
        (copy, mnt.join("d/big").exists())
    })
}

#[test]
fn depend_keeps_the_second_commands_changes_behind_the_firsts() {
    for mode in [JOURNAL_ORDERED, SOFTUPDATES] {
        // The control: the fsync took the removal and the copy's name,
        // not its data (the mount's precise order allows it).
        let (copy, big) = copy_then_remove(mode, false);
        assert!(!big, "{}: the removal was fsynced", mode.name());
        assert_ne!(
            copy,
            Some(300_000),
            "{}: the control lost nothing",
            mode.name()
        );
        // Under depend the removal brings everything the copy did.
        let (copy, big) = copy_then_remove(mode, true);
        assert!(!big, "{}: the removal was fsynced", mode.name());
        assert_eq!(copy, Some(300_000), "{}: the copy is whole", mode.name());
    }
}
