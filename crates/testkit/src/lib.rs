//! Test support shared by the crates' tests (a dev-dependency only; no
//! library crate depends on it). Today: kernel loop mounts.
//!
//! Invariant: a [`LoopMount`] is unmounted when dropped, or the test fails
//! loudly; a mount left behind makes later `e2fsck` runs warn "is mounted"
//! and fail far from the cause.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Whether the tests run as root (loop mounts need it; CI runs as root).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

/// A kernel loop mount of an image file, unmounted on drop.
pub struct LoopMount {
    mnt: PathBuf,
}

impl LoopMount {
    /// Mounts `image` at `mnt` (created if missing) with `-o loop[,opts]`.
    /// `Err` carries mount's message, so a test can skip where loop devices
    /// are missing.
    pub fn new(image: &Path, mnt: &Path, opts: &str) -> Result<LoopMount, String> {
        std::fs::create_dir_all(mnt).map_err(|e| e.to_string())?;
        let o = if opts.is_empty() {
            "loop".to_string()
        } else {
            format!("loop,{opts}")
        };
        let out = Command::new("mount")
            .args(["-o", &o])
            .arg(image)
            .arg(mnt)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(LoopMount {
            mnt: mnt.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// Unmounts now, failing the test if it can't.
    pub fn unmount(self) {
        drop(self)
    }
}

impl Drop for LoopMount {
    /// `umount` fails with EBUSY for a moment while a sibling test thread
    /// forks a child that still holds descriptors into this mount (they
    /// close at exec), so retry for a while before giving up.
    fn drop(&mut self) {
        for _ in 0..100 {
            if Command::new("umount")
                .arg(&self.mnt)
                .status()
                .is_ok_and(|s| s.success())
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        if !std::thread::panicking() {
            panic!("could not unmount {}", self.mnt.display());
        }
    }
}
