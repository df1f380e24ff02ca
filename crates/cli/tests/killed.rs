//! Real programs with the mount daemon killed mid-work: Git commits in a
//! loop with `core.fsync=all`, the daemon is killed (SIGKILL) at a moment
//! drawn from a seeded generator, the image is mounted again, and Git's own
//! checker judges the repository: `git fsck --strict` clean, `git status`
//! works, and every commit acknowledged before the kill is in `HEAD`'s
//! history.
//!
//! A commit is acknowledged once `git commit` returned and an fsync of a
//! file in the repository returned after it (`sync .git/HEAD`): Git does
//! not fsync the directory its reference is renamed into, so on any file
//! system its last commit may be lost, but a later fsync covers it when an
//! fsync makes every earlier change durable, as stitchfs's default order
//! (and ext4's journal) does. Git's object store is where the default
//! matters most: an object is written and fsynced under a temporary name,
//! linked to its real name, and the temporary unlinked; only the
//! reference's fsync that follows makes the link durable. Under
//! `--order precise` (run these tests with `STITCH_TEST_MOUNT_CMD` naming
//! it) the repository is corrupt after most kills: a reference names an
//! object whose name never reached the disk.
//!
//! The kill loses what the daemon held in memory; what it wrote to the
//! image stays in the host's page cache, so these are crashes of stitchfs,
//! not of the machine (`stitchfs crashtest` simulates the device for
//! those, including the same Git shape as its `git-objects` workload).

mod posix_support;

use posix_support::{require_tool, sh, Mode, Scratch, GIT_ENV, JOURNAL_ORDERED, SOFTUPDATES};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Kills per mode.
const ROUNDS: usize = 5;

/// Commits until killed: each changes a few files, adds a new one, and is
/// acknowledged (its id appended to `acks`, outside the mount) once an
/// fsync after it returned.
const COMMIT_LOOP: &str = r#"
i=0
while :; do
  echo "$i $$" >> "f$((i % 7))"
  echo "$i" > "new-$ROUND-$i"
  git add -A
  git commit -q -m "round $ROUND commit $i"
  sync .git/HEAD
  git rev-parse HEAD >> "$ACKS"
  i=$((i + 1))
done
"#;

fn start_commits(repo: &Path, acks: &Path, round: usize) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(COMMIT_LOOP)
        .current_dir(repo)
        .envs(GIT_ENV.iter().copied())
        .env("ACKS", acks)
        .env("ROUND", round.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The repository after a kill: Git's checker passes, and every
/// acknowledged commit is in `HEAD`'s history.
fn judge(repo: &Path, acks: &Path, what: &str) -> usize {
    let git = |script: &str| sh(what, repo, script, GIT_ENV);
    let fsck = Command::new("git")
        .args(["fsck", "--strict", "--no-dangling"])
        .current_dir(repo)
        .envs(GIT_ENV.iter().copied())
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "{what}: git fsck --strict failed ({}):\n{}{}",
        fsck.status,
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
    git("git status --porcelain >/dev/null");
    let acked = std::fs::read_to_string(acks).unwrap_or_default();
    let ids: Vec<&str> = acked.lines().collect();
    for id in &ids {
        git(&format!("git merge-base --is-ancestor {id} HEAD"));
    }
    ids.len()
}

fn git_survives_kills(mode: Mode, seed: u64) {
    require_tool("git", "git");
    let s = Scratch::new(mode, 256);
    let repo = s.mnt.join("repo");
    let acks = s.dir.path().join("acks");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let m = s.mount();
    sh(
        "git init",
        &s.mnt,
        "mkdir repo && cd repo && git init -q && git config core.fsync all \
         && echo start > f0 && git add -A && git commit -q -m start && sync .git/HEAD",
        GIT_ENV,
    );
    let mut m = Some(m);
    for round in 0..ROUNDS {
        let mut work = start_commits(&repo, &acks, round);
        let run_for = Duration::from_millis(rng.gen_range(300..1500));
        std::thread::sleep(run_for);
        m.take().unwrap().kill();
        let _ = work.kill();
        work.wait().unwrap();
        let remounted = s.mount();
        let what = format!("{} round {round} (killed after {run_for:?})", mode.name());
        let n = judge(&repo, &acks, &what);
        eprintln!("{what}: {n} acknowledged commits, all present");
        m = Some(remounted);
    }
    let acked = judge(&repo, &acks, "before the clean unmount");
    assert!(
        acked >= ROUNDS,
        "only {acked} commits were acknowledged in {ROUNDS} rounds: the loop did not run"
    );
    m.unwrap().unmount().unwrap();
    posix_support::check_image(&s.image, mode);
}

#[test]
fn git_with_fsync_survives_a_killed_daemon_in_journal_mode() {
    git_survives_kills(JOURNAL_ORDERED, 1);
}

#[test]
fn git_with_fsync_survives_a_killed_daemon_in_soft_updates() {
    git_survives_kills(SOFTUPDATES, 2);
}
