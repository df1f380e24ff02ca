//! Shared by the mount tests (`mount.rs`, `unclean_mount.rs`,
//! `damaged_mount.rs`): scratch images, a `stitchfs mount --foreground`
//! child that is unmounted and killed if a test fails half-way, the ways
//! of unmounting it, and the judgement of the image afterwards.

#![allow(dead_code)] // each test crate uses its own part

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use stitch_testkit::{assert_e2fsck_clean, scratch};

pub const BIN: &str = env!("CARGO_BIN_EXE_stitchfs");

pub fn stitchfs(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh 128 MiB image, ext3 or ext2.
pub fn mkfs(dir: &Path, journal: bool) -> PathBuf {
    let img = dir.join(if journal { "ext3.img" } else { "ext2.img" });
    let mut args = vec!["mkfs", "--size", "128M"];
    if journal {
        args.push("--journal");
    }
    args.push(img.to_str().unwrap());
    let out = stitchfs(&args);
    assert!(out.status.success(), "mkfs: {}", text(&out.stderr));
    img
}

/// A scratch directory with a fresh image and an empty mount point.
pub fn fresh(journal: bool) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = scratch();
    let img = mkfs(dir.path(), journal);
    let mnt = mountpoint(dir.path(), "mnt");
    (dir, img, mnt)
}

pub fn mountpoint(dir: &Path, name: &str) -> PathBuf {
    let m = dir.join(name);
    fs::create_dir_all(&m).unwrap();
    m.canonicalize().unwrap()
}

/// Whether a stitchfs FUSE mount sits on `mnt` (another file system
/// mounted there does not count).
pub fn is_mounted(mnt: &Path) -> bool {
    stitch_testkit::mount_type(mnt).as_deref() == Some("fuse.stitchfs")
}

/// `fusermount3 -u`. Another test's fork may hold a descriptor of ours for
/// a moment before its exec closes it, so busy is retried.
pub fn fusermount_u(mnt: &Path) {
    unmount_retrying_busy(mnt, "fusermount3", &["-u"]);
}

/// `stitchfs umount`, busy retried as in [`fusermount_u`].
pub fn stitchfs_umount(mnt: &Path) {
    unmount_retrying_busy(mnt, BIN, &["umount"]);
}

pub fn unmount_retrying_busy(mnt: &Path, program: &str, args: &[&str]) {
    for _ in 0..50 {
        let out = Command::new(program).args(args).arg(mnt).output().unwrap();
        let err = text(&out.stderr);
        if out.status.success() {
            return;
        }
        assert!(err.contains("busy"), "{program} {args:?}: {err}");
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{program} {args:?} {}: still busy", mnt.display());
}

pub fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < limit, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `stitchfs mount --foreground` child; unmounted and killed on drop if
/// a test fails half-way.
pub struct Mounted {
    pub child: Option<Child>,
    pub img: PathBuf,
    pub mnt: PathBuf,
    pub log: PathBuf,
}

pub enum Stop {
    Sigterm,
    Fusermount,
    /// `stitchfs umount`, after which the image must be clean at once.
    Umount,
}

impl Mounted {
    pub fn start(img: &Path, mnt: &Path, extra: &[&str]) -> Mounted {
        Self::start_in(None, img, mnt, extra)
    }

    /// Mounts `img`, or with `cwd` the default image there (no IMAGE
    /// argument, run from `cwd`).
    pub fn start_in(cwd: Option<&Path>, img: &Path, mnt: &Path, extra: &[&str]) -> Mounted {
        let log = mnt.with_extension("log");
        let mut cmd = Command::new(BIN);
        cmd.arg("mount");
        if cwd.is_none() {
            cmd.arg(img);
        }
        cmd.arg(mnt)
            .arg("--foreground")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(File::create(mnt.with_extension("out")).unwrap())
            .stderr(File::create(&log).unwrap());
        if let Some(cwd) = cwd {
            cmd.current_dir(cwd);
        }
        let mut m = Mounted {
            child: Some(cmd.spawn().unwrap()),
            img: img.to_path_buf(),
            mnt: mnt.to_path_buf(),
            log,
        };
        let t0 = Instant::now();
        while !is_mounted(mnt) {
            if let Some(status) = m.child.as_mut().unwrap().try_wait().unwrap() {
                m.child = None;
                panic!("mount exited with {status}: {}", m.stderr());
            }
            assert!(t0.elapsed() < Duration::from_secs(15), "mount timed out");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The daemon says what it mounted just after the kernel shows the
        // mount: tests read that line.
        wait_until("the daemon's mounted line", Duration::from_secs(15), || {
            m.stderr().contains("stitchfs: mounted ")
        });
        m
    }

    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Unmounts `how`, waits for the process, and requires that it exits
    /// 0 having said it unmounted cleanly, and that `e2fsck -fn` finds the
    /// image clean; returns its stderr.
    pub fn stop(mut self, how: Stop) -> String {
        let mut child = self.child.take().unwrap();
        match how {
            Stop::Sigterm => {
                // SAFETY: signals our own child.
                assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
            }
            Stop::Fusermount => fusermount_u(&self.mnt),
            Stop::Umount => {
                stitchfs_umount(&self.mnt);
                // Before this waits for the process: the command returned
                // only once the server was done with the image, so no one
                // holds its lock and e2fsck finds it clean.
                let f = File::open(&self.img).unwrap();
                // SAFETY: flock on a valid descriptor.
                let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
                assert_eq!(rc, 0, "the image is still locked after stitchfs umount");
                drop(f);
                assert_e2fsck_clean(&self.img);
            }
        }
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if t0.elapsed() > Duration::from_secs(15) {
                let _ = child.kill();
                panic!("mount did not exit after unmounting: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = self.stderr();
        assert!(status.success(), "mount exited with {status}: {err}");
        assert!(err.contains("unmounted cleanly"), "{err}");
        assert!(!is_mounted(&self.mnt));
        assert_e2fsck_clean(&self.img);
        err
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(&self.mnt)
                .output();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `stitchfs mount IMG MNT [extra]`, which must fail: returns its stderr.
/// A mount that works instead is taken away and fails the test (rather
/// than hang it, in the foreground).
pub fn mount_refused(img: &Path, mnt: &Path, extra: &[&str]) -> String {
    let mut child = Command::new(BIN)
        .arg("mount")
        .arg(img)
        .arg(mnt)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if is_mounted(mnt) || t0.elapsed() > Duration::from_secs(30) {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(mnt)
                .output();
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} was mounted", img.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    if out.status.success() || is_mounted(mnt) {
        // A daemon that mounted: its parent returned 0.
        let _ = Command::new(BIN).arg("umount").arg(mnt).output();
        panic!("{} was mounted: {}", img.display(), text(&out.stderr));
    }
    text(&out.stderr)
}
