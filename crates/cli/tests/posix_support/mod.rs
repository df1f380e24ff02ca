//! Shared by `programs.rs` and `conformance.rs`: make an image, mount it
//! (by default with `stitchfs mount ... --foreground`, a child process),
//! unmount it, and judge the image afterwards.
//!
//! The mount and mkfs commands are templates, so the same tests run
//! against another implementation of the same semantics (this is how the
//! harness was proven before the stitchfs mount existed):
//!
//! - `STITCH_TEST_MOUNT_CMD`, e.g. `mount -o loop {image} {mnt}` (the
//!   kernel's ext2/ext3) or `fuse2fs -f -o {opts},default_permissions
//!   {image} {mnt}`. Default: [`DEFAULT_MOUNT`].
//! - `STITCH_TEST_MKFS_CMD`, e.g. `mke2fs -q -F -t {ext} -b 4096 -I 128
//!   {image} {size_mb}M`. Default: [`DEFAULT_MKFS`].
//!
//! Tokens: `{stitchfs}` the binary under test, `{image}`, `{mnt}`,
//! `{consistency}`, `{data}` (`--data MODE` in journal modes, else
//! nothing), `{opts}` (FUSE options, `allow_other`), `{ext}` (ext2 or
//! ext3), `{journal}` (`--journal` or nothing), `{size_mb}`. The result is
//! split on whitespace and run without a shell.
//!
//! A command that keeps running is a FUSE daemon in the foreground: it is
//! unmounted with SIGTERM and must exit 0 with the mount gone. A command
//! that exits 0 at once (the kernel's mount, a daemonizing FUSE server)
//! is unmounted with `umount`.

#![allow(dead_code)] // each test crate uses its own part

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const DEFAULT_MOUNT: &str =
    "{stitchfs} mount {image} {mnt} --consistency {consistency} {data} -o {opts} --foreground";
pub const DEFAULT_MKFS: &str = "{stitchfs} mkfs --size {size_mb}M {journal} {image}";

/// The repository's root (scripts live there).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A consistency mode and, in journal mode, its data mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mode {
    pub consistency: &'static str,
    pub data: Option<&'static str>,
}

pub const ASYNC: Mode = Mode {
    consistency: "async",
    data: None,
};
pub const SOFTUPDATES: Mode = Mode {
    consistency: "softupdates",
    data: None,
};
pub const JOURNAL_WRITEBACK: Mode = Mode {
    consistency: "journal",
    data: Some("writeback"),
};
pub const JOURNAL_ORDERED: Mode = Mode {
    consistency: "journal",
    data: Some("ordered"),
};
pub const JOURNAL_DATA: Mode = Mode {
    consistency: "journal",
    data: Some("journal"),
};

impl Mode {
    pub fn journal(&self) -> bool {
        self.data.is_some()
    }

    pub fn name(&self) -> String {
        match self.data {
            Some(d) => format!("{}-{d}", self.consistency),
            None => self.consistency.to_string(),
        }
    }
}

/// Git run from the tests: no system or user configuration, a fixed
/// identity and fixed dates.
pub const GIT_ENV: &[(&str, &str)] = &[
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_AUTHOR_NAME", "stitchfs test"),
    ("GIT_AUTHOR_EMAIL", "test@stitchfs.invalid"),
    ("GIT_COMMITTER_NAME", "stitchfs test"),
    ("GIT_COMMITTER_EMAIL", "test@stitchfs.invalid"),
    ("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z"),
    ("GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z"),
];

/// Fails the test, naming the Debian package, if `tool` is not on PATH.
pub fn require_tool(tool: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "`{tool}` is not installed: install the Debian package `{package}` \
         (scripts/setup.sh does)"
    );
}

fn expand(template: &str, vars: &[(&str, String)]) -> Vec<String> {
    let mut s = template.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("{{{k}}}"), v);
    }
    assert!(
        !s.contains('{'),
        "unknown token left in command template: {s}"
    );
    s.split_whitespace().map(str::to_string).collect()
}

/// Runs `cmd` with `stdin` as its standard input; panics with `what`, the
/// exit status and both outputs unless it exits 0.
pub fn checked(what: &str, mut cmd: Command, stdin: &[u8]) -> Output {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    // Written from a thread, so a command that answers before it has read
    // everything cannot deadlock against us.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd` to its end and prints its status and output (to show in a
/// failing test's log); the caller judges it.
pub fn run_logged(what: &str, cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    eprintln!(
        "{what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The Python package (`python/`), installed once per test binary by
/// pip into a scratch directory (`--no-build-isolation`: setuptools from
/// the machine); put it on `PYTHONPATH`.
pub fn python_site() -> &'static Path {
    static SITE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SITE.get_or_init(|| {
        require_tool("python3", "python3");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("python-site-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = run_logged(
            "pip install python/",
            Command::new("python3")
                .args(["-m", "pip", "install", "-q", "--no-build-isolation"])
                .args(["--no-deps", "--target"])
                .arg(&dir)
                .arg(repo_root().join("python")),
        );
        assert!(out.status.success(), "pip install of the package failed");
        dir
    })
}

/// Runs the package's test program `python/tests/NAME.py` on the mount
/// `mnt` (`STITCHFS_MOUNT`), with the package installed: its stdout,
/// checked to end well with the line it prints when all held (`ok`).
#[allow(dead_code)] // not every test binary runs one
pub fn python_test(name: &str, mnt: &Path, ok: &str) -> String {
    let script = repo_root().join(format!("python/tests/{name}.py"));
    let out = run_logged(
        name,
        Command::new("python3")
            .arg(&script)
            .env("PYTHONPATH", python_site())
            .env("STITCHFS_MOUNT", mnt),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success() && text.contains(ok), "{text}");
    text
}

/// Runs `argv` (no shell), panicking with its output if it fails.
pub fn run_ok(argv: &[String]) -> Output {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    checked(&format!("{argv:?}"), cmd, b"")
}

/// A scratch directory with an image of the given mode and a mount point.
pub struct Scratch {
    pub dir: tempfile::TempDir,
    /// Holds the mount point: short, under /tmp, because pjdfstest binds
    /// unix sockets deep below it and sun_path holds only 108 bytes.
    _mnt_dir: tempfile::TempDir,
    pub image: PathBuf,
    pub mnt: PathBuf,
    pub mode: Mode,
    /// Arguments added to the mount command (none by default).
    pub mount_args: Vec<String>,
    /// The server that exports `image` when mkfs and mount reach it by
    /// NBD URI ([`Scratch::over_nbd`]).
    server: Option<stitch_testkit::nbd::NbdServer>,
}

/// Which NBD server exports the image in [`Scratch::over_nbd`].
#[derive(Clone, Copy, Debug)]
pub enum Nbd {
    Nbdkit,
    QemuNbd,
}

impl Scratch {
    /// Makes an image of `size_mb` MiB (ext3 in journal modes).
    pub fn new(mode: Mode, size_mb: u64) -> Scratch {
        Scratch::make(mode, size_mb, None)
    }

    /// [`Scratch::new`] with the image file exported by an NBD server:
    /// mkfs and every mount reach it by URI; [`check_image`] reads the file.
    pub fn over_nbd(mode: Mode, size_mb: u64, server: Nbd) -> Scratch {
        Scratch::make(mode, size_mb, Some(server))
    }

    /// What mkfs and mount are given: the image's path or the server's URI.
    pub fn target(&self) -> String {
        match &self.server {
            Some(s) => s.uri(),
            None => self.image.display().to_string(),
        }
    }

    fn make(mode: Mode, size_mb: u64, nbd: Option<Nbd>) -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix(&format!("posix-{}-", mode.name()))
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let image = dir.path().join("fs.img");
        let mnt_dir = tempfile::Builder::new()
            .prefix("st")
            .tempdir_in("/tmp")
            .unwrap();
        let mnt = mnt_dir.path().join("m");
        fs::create_dir(&mnt).unwrap();
        let server = nbd.map(|kind| {
            use stitch_testkit::nbd::NbdServer;
            fs::File::create(&image)
                .unwrap()
                .set_len(size_mb << 20)
                .unwrap();
            match kind {
                Nbd::Nbdkit => NbdServer::file("programs", &image),
                Nbd::QemuNbd => NbdServer::qemu_nbd("programs", &image),
            }
        });
        let target = server
            .as_ref()
            .map_or_else(|| image.display().to_string(), |s| s.uri());
        let template =
            std::env::var("STITCH_TEST_MKFS_CMD").unwrap_or_else(|_| DEFAULT_MKFS.to_string());
        let argv = expand(
            &template,
            &[
                ("stitchfs", env!("CARGO_BIN_EXE_stitchfs").to_string()),
                ("image", target),
                ("size_mb", size_mb.to_string()),
                ("ext", if mode.journal() { "ext3" } else { "ext2" }.into()),
                (
                    "journal",
                    if mode.journal() { "--journal" } else { "" }.into(),
                ),
            ],
        );
        run_ok(&argv);
        Scratch {
            dir,
            _mnt_dir: mnt_dir,
            image,
            mnt,
            mode,
            mount_args: Vec::new(),
            server,
        }
    }

    /// Mounts the image on `self.mnt`.
    pub fn mount(&self) -> Mounted {
        let dir = self.dir.path();
        let target = PathBuf::from(self.target());
        Mounted::new(&target, &self.mnt, self.mode, dir, &self.mount_args)
    }

    /// Mounts, runs `f` on the mount point, unmounts (checking the
    /// unmount), then checks the image; `f`'s panic is re-raised after
    /// the unmount so a failing workload never leaves a mount behind.
    pub fn with_mount<T>(&self, f: impl FnOnce(&Path) -> T) -> T {
        let m = self.mount();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&self.mnt)));
        let unmounted = m.unmount();
        let v = match r {
            Ok(v) => v,
            Err(p) => {
                if let Err(e) = unmounted {
                    eprintln!("unmount after the failure: {e}");
                }
                std::panic::resume_unwind(p)
            }
        };
        unmounted.unwrap_or_else(|e| panic!("unmount: {e}"));
        check_image(&self.image, self.mode);
        v
    }
}

impl Drop for Scratch {
    /// A failing test keeps its directory (image, logs) for a look.
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!("kept for inspection: {}", self.dir.path().display());
        }
    }
}

/// Is `mnt` a mount point now (of any file system)?
pub fn is_mounted(mnt: &Path) -> bool {
    stitch_testkit::mount_type(mnt).is_some()
}

/// A mounted image; unmounts on drop if `unmount` was not called.
pub struct Mounted {
    mnt: PathBuf,
    /// The foreground daemon, if the mount command kept running.
    child: Option<Child>,
    log: PathBuf,
    done: bool,
}

const MOUNT_WAIT: Duration = Duration::from_secs(60);
const DAEMON_GRACE: Duration = Duration::from_millis(1000);
/// A clean unmount makes everything durable first; in journal=data mode
/// after a big workload that can take a while on a slow disk.
const UNMOUNT_WAIT: Duration = Duration::from_secs(180);

impl Mounted {
    pub fn new(image: &Path, mnt: &Path, mode: Mode, logdir: &Path, extra: &[String]) -> Mounted {
        assert!(!is_mounted(mnt), "{} is already mounted", mnt.display());
        let template =
            std::env::var("STITCH_TEST_MOUNT_CMD").unwrap_or_else(|_| DEFAULT_MOUNT.to_string());
        let opts = std::env::var("STITCH_TEST_MOUNT_OPTS").unwrap_or_else(|_| "allow_other".into());
        let mut argv = expand(
            &template,
            &[
                ("stitchfs", env!("CARGO_BIN_EXE_stitchfs").to_string()),
                ("image", image.display().to_string()),
                ("mnt", mnt.display().to_string()),
                ("consistency", mode.consistency.to_string()),
                (
                    "data",
                    mode.data.map(|d| format!("--data {d}")).unwrap_or_default(),
                ),
                ("opts", opts),
            ],
        );
        argv.extend_from_slice(extra);
        let mut n = 0;
        let log = loop {
            let p = logdir.join(format!("mount{n}.log"));
            if !p.exists() {
                break p;
            }
            n += 1;
        };
        let logf = fs::File::create(&log).unwrap();
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {argv:?}: {e}"));
        let start = Instant::now();
        let mut exited = None;
        while !is_mounted(mnt) {
            if exited.is_none() {
                if let Some(st) = child.try_wait().unwrap() {
                    if !st.success() {
                        panic!("{argv:?} exited {st} before mounting:\n{}", read(&log));
                    }
                    exited = Some(st);
                }
            }
            if start.elapsed() > MOUNT_WAIT {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{argv:?}: {} not mounted after {MOUNT_WAIT:?}:\n{}",
                    mnt.display(),
                    read(&log)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // A command that exits once the mount is there (mount(8) does, a
        // moment after the mount appears) leaves a mount `umount` ends; one
        // still running after a grace period is a foreground daemon.
        let grace = Instant::now();
        while exited.is_none() && grace.elapsed() < DAEMON_GRACE {
            if let Some(st) = child.try_wait().unwrap() {
                assert!(st.success(), "{argv:?} exited {st}:\n{}", read(&log));
                exited = Some(st);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let keep = exited.is_none();
        Mounted {
            mnt: mnt.to_path_buf(),
            child: keep.then_some(child),
            log,
            done: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// The mount daemon's output so far.
    pub fn log(&self) -> String {
        read(&self.log)
    }

    /// Kills a foreground daemon outright (SIGKILL), as a crash of the
    /// server would, and takes the dead mount away. What it had not yet
    /// written to the image is lost; what it wrote stays in the host's
    /// page cache, so this is a crash of stitchfs, not of the machine.
    pub fn kill(mut self) {
        self.done = true;
        let mut child = self
            .child
            .take()
            .expect("kill needs a foreground daemon (the default mount command)");
        child.kill().unwrap();
        child.wait().unwrap();
        lazy_unmount(&self.mnt);
    }

    /// Unmounts: SIGTERM to a foreground daemon (which must exit 0 and
    /// leave no mount), else `umount`. Errors say what went wrong and
    /// include the daemon's log.
    pub fn unmount(mut self) -> Result<(), String> {
        self.done = true;
        self.unmount_inner()
    }

    fn unmount_inner(&mut self) -> Result<(), String> {
        let mnt = self.mnt.clone();
        match self.child.take() {
            Some(mut child) => {
                let pid = child.id() as libc::pid_t;
                // SAFETY: kill(2) on our own child's pid.
                unsafe { libc::kill(pid, libc::SIGTERM) };
                let start = Instant::now();
                let status = loop {
                    if let Some(st) = child.try_wait().unwrap() {
                        break st;
                    }
                    if start.elapsed() > UNMOUNT_WAIT {
                        let _ = child.kill();
                        let _ = child.wait();
                        lazy_unmount(&mnt);
                        return Err(format!(
                            "the mount daemon did not exit within {UNMOUNT_WAIT:?} of SIGTERM; \
                             killed.\n{}",
                            read(&self.log)
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                };
                if is_mounted(&mnt) {
                    lazy_unmount(&mnt);
                    return Err(format!(
                        "the mount daemon exited ({status}) but {} is still mounted:\n{}",
                        mnt.display(),
                        read(&self.log)
                    ));
                }
                if !status.success() {
                    return Err(format!(
                        "the mount daemon exited {status} after SIGTERM:\n{}",
                        read(&self.log)
                    ));
                }
                Ok(())
            }
            None => {
                let out = Command::new("umount").arg(&mnt).output().unwrap();
                if !out.status.success() {
                    lazy_unmount(&mnt);
                    return Err(format!(
                        "umount {}: {}",
                        mnt.display(),
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
                // A daemonized FUSE server finishes after the kernel lets go.
                std::thread::sleep(Duration::from_millis(200));
                Ok(())
            }
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            if let Err(e) = self.unmount_inner() {
                eprintln!("unmounting {} on drop: {e}", self.mnt.display());
            }
        }
    }
}

fn lazy_unmount(mnt: &Path) {
    let _ = Command::new("umount").arg("-l").arg(mnt).output();
}

fn read(p: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = fs::File::open(p) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

/// Judges an unmounted image: in journal modes `e2fsck -fn` must exit 0
/// (and our checker agree); otherwise our checker (`stitchfs fsck --json`)
/// may find soft-updates leaks but no corruption. Leaks are printed.
pub fn check_image(image: &Path, mode: Mode) {
    let img = image.to_str().unwrap();
    let fsck = Command::new(env!("CARGO_BIN_EXE_stitchfs"))
        .args(["fsck", "--json", img])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&fsck.stdout).into_owned();
    let report: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "stitchfs fsck --json {img} (exit {}): no JSON ({e}):\n{text}{}",
            fsck.status,
            String::from_utf8_lossy(&fsck.stderr)
        )
    });
    let corruptions = report["summary"]["corruptions"].as_u64().unwrap();
    let leaks = report["summary"]["leaks"].as_u64().unwrap();
    assert_eq!(
        corruptions,
        0,
        "stitchfs fsck found corruption in {img} after a clean unmount ({}):\n{text}",
        mode.name()
    );
    let e2 = stitch_testkit::e2fsck(image, &["-fn"]);
    let e2text = e2.report();
    if mode.journal() {
        assert_eq!(
            e2.code,
            0,
            "e2fsck -fn {img} after a clean unmount ({}):\n{e2text}",
            mode.name()
        );
        assert_eq!(
            fsck.status.code(),
            Some(0),
            "stitchfs fsck {img} after a clean unmount ({}):\n{text}",
            mode.name()
        );
    } else if leaks > 0 {
        eprintln!(
            "note: {leaks} soft-updates leak(s) in {img} after a clean unmount ({}):\n{text}\n{e2text}",
            mode.name()
        );
    }
}

/// Runs `sh -c script` in `cwd` with `envs`; panics with its output (and
/// `what`) if it fails; returns stdout.
pub fn sh(what: &str, cwd: &Path, script: &str, envs: &[(&str, &str)]) -> String {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .current_dir(cwd)
        .envs(envs.iter().copied());
    let out = checked(&format!("{what} ($ {script})"), cmd, b"");
    String::from_utf8(out.stdout).unwrap()
}

/// Writes `data` to `path`, creating parent directories.
pub fn write_file(path: &Path, data: &[u8]) {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p).unwrap();
    }
    let mut f = fs::File::create(path).unwrap();
    f.write_all(data).unwrap();
}
