//! Running e2fsprogs' checker, the outside judge of every image the tests
//! make.
//!
//! The tests ask different things of it, and those differences are the
//! caller's: the flags (`-fn` checks without changing anything; `-fy`
//! or `-E journal_only -y` replay a journal first, as a recovery would)
//! and which exit codes pass (0 alone for an image that must be clean; 4,
//! errors left uncorrected, too for a soft-updates crash image, whose
//! leaks e2fsck reports; 1 after a replay that changed the image). So
//! [`e2fsck`] takes the flags and returns the code, and
//! [`assert_e2fsck_clean`] is the one common verdict: `-fn`, exit 0.

use std::path::Path;
use std::process::Command;

/// What one e2fsck run said.
#[derive(Clone, Debug)]
pub struct E2fsck {
    /// The exit code (-1 if e2fsck was killed by a signal): 0 clean, 1
    /// errors corrected, 4 errors left uncorrected, 8 and up its own
    /// failures.
    pub code: i32,
    /// Its report (problems are on standard output).
    pub stdout: String,
    /// What it said on standard error (usage, device trouble).
    pub stderr: String,
}

impl E2fsck {
    /// Whether it exited 0.
    pub fn clean(&self) -> bool {
        self.code == 0
    }

    /// Both outputs, for a failure message.
    pub fn report(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs `e2fsck ARGS IMAGE`. Panics only if e2fsck cannot be started.
pub fn e2fsck(image: &Path, args: &[&str]) -> E2fsck {
    let out = Command::new("e2fsck")
        .args(args)
        .arg(image)
        .output()
        .expect("e2fsck runs (apt-get install e2fsprogs)");
    E2fsck {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `e2fsck -fn` on an image held in memory (written to a scratch file).
pub fn e2fsck_image(image: &[u8]) -> E2fsck {
    let dir = crate::scratch();
    let path = dir.path().join("check.img");
    std::fs::write(&path, image).expect("write the image to check");
    e2fsck(&path, &["-fn"])
}

/// Fails the test with e2fsck's report unless `e2fsck -fn` finds the
/// image clean (exit 0).
pub fn assert_e2fsck_clean(image: &Path) {
    let r = e2fsck(image, &["-fn"]);
    assert!(
        r.clean(),
        "e2fsck -fn {}: exit {}\n{}",
        image.display(),
        r.code,
        r.report()
    );
}
