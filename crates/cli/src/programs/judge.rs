//! Judging one crash image: mounted as a user mounts it (`stitchfs mount`,
//! which replays the journal or checks an unclean image and refuses
//! corruption), the program's checker run in its root with the promises
//! the crash owes, unmounted cleanly, then checked by our fsck. With
//! `over_nbd`, the image is served by nbdkit for the mount and its checker,
//! and mounted by URI: recovery through the NBD device.

use super::builtin::Program;
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use stitch_diskfs::Consistency;

/// How long a checker may run before it counts as hung.
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// What a crash state was found to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Consistent,
    /// `kind`: durability, atomicity, order, corruption (the checker's),
    /// mount (the file system refused the image) or fsck (our checker
    /// found damage after the program's checker ran).
    Inconsistent {
        kind: String,
        why: String,
    },
    /// The checker itself failed (not exit 0 or 1, or a hang).
    CheckerFailed(String),
}

/// Where the images go and where they are mounted.
pub struct Bench {
    pub image: PathBuf,
    pub mnt: PathBuf,
    pub promises: PathBuf,
    pub over_nbd: bool,
}

impl Bench {
    pub fn new(scratch: &Path, over_nbd: bool) -> anyhow::Result<Self> {
        let mnt = scratch.join("crashed");
        std::fs::create_dir_all(&mnt)?;
        Ok(Bench {
            image: scratch.join("crash.img"),
            mnt,
            promises: scratch.join("promises"),
            over_nbd,
        })
    }
}

/// nbdkit serving a crash image on a Unix socket while it is judged;
/// killed when dropped.
struct Served {
    child: std::process::Child,
    uri: String,
}

impl Served {
    fn start(image: &Path) -> anyhow::Result<Served> {
        let socket = image.with_extension("sock");
        let _ = std::fs::remove_file(&socket);
        let child = Command::new("nbdkit")
            .args(["--foreground", "--exit-with-parent", "--unix"])
            .arg(&socket)
            .arg("file")
            .arg(format!("file={}", image.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("starting nbdkit (scripts/setup.sh installs it)")?;
        let served = Served {
            child,
            uri: format!("nbd+unix:///?socket={}", socket.display()),
        };
        let t0 = Instant::now();
        while !socket.exists() {
            anyhow::ensure!(
                t0.elapsed() < Duration::from_secs(20),
                "nbdkit did not open {} within 20 s",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(served)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Judges `image` in `mode`, the crash owing `promises`.
pub fn judge(
    bench: &Bench,
    program: &Program,
    mode: Consistency,
    image: &[u8],
    promises: &[String],
) -> anyhow::Result<Verdict> {
    std::fs::write(&bench.image, image).context("writing the crash image")?;
    let mut text = promises.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    std::fs::write(&bench.promises, text)?;
    let served = bench
        .over_nbd
        .then(|| Served::start(&bench.image))
        .transpose()?;
    let source = match &served {
        Some(s) => s.uri.clone(),
        None => bench.image.display().to_string(),
    };
    let mounted = stitchfs(&mount_args(&source, &bench.mnt, mode))?;
    if !mounted.status.success() {
        return Ok(Verdict::Inconsistent {
            kind: "mount".into(),
            why: first_lines(&String::from_utf8_lossy(&mounted.stderr)),
        });
    }
    let checked = run_checker(bench, program);
    let unmounted = stitchfs(&["umount".into(), bench.mnt.display().to_string()]);
    if !matches!(&unmounted, Ok(o) if o.status.success()) {
        // Never leave a mount behind (a lazy unmount: something holds it),
        // and never judge on while it may still write the image.
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(&bench.mnt)
            .status();
        let said = match &unmounted {
            Ok(o) => first_lines(&String::from_utf8_lossy(&o.stderr)),
            Err(e) => format!("{e:#}"),
        };
        anyhow::bail!(
            "could not unmount the judged image at {} (is something else using it?): {said}",
            bench.mnt.display()
        );
    }
    drop(served);
    let verdict = checked?;
    if verdict != Verdict::Consistent {
        return Ok(verdict);
    }
    let report = stitch_fsck::check(&bench.image, &Default::default(), &mut |_, _, _| {})
        .context("checking the image after the checker")?;
    if !report.is_clean() && !report.only_leaks() {
        return Ok(Verdict::Inconsistent {
            kind: "fsck".into(),
            why: first_lines(&report.to_string()),
        });
    }
    Ok(Verdict::Consistent)
}

fn mount_args(image: &str, mnt: &Path, mode: Consistency) -> Vec<String> {
    let mut v = vec![
        "mount".to_string(),
        image.to_string(),
        mnt.display().to_string(),
        "--flush-interval".into(),
        "0".into(),
    ];
    match mode {
        Consistency::Journal(d) => {
            v.extend(["--consistency".into(), "journal".into()]);
            v.extend(["--data".into(), d.to_string()]);
        }
        other => v.extend(["--consistency".into(), other.to_string()]),
    }
    v
}

/// Runs this binary with `args`, capturing its output.
fn stitchfs(args: &[String]) -> anyhow::Result<std::process::Output> {
    let exe = std::env::current_exe().context("finding this binary")?;
    Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running stitchfs {}", args.join(" ")))
}

fn run_checker(bench: &Bench, program: &Program) -> anyhow::Result<Verdict> {
    let (cmd, args) = program.check.split_first().context("an empty checker")?;
    let mut child = Command::new(cmd)
        .args(args)
        .current_dir(&bench.mnt)
        .env("STITCH_PROMISES", &bench.promises)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", program.check.join(" ")))?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if started.elapsed() > CHECK_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Verdict::CheckerFailed(format!(
                "no answer in {} s",
                CHECK_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    Ok(match status.code() {
        Some(0) => Verdict::Consistent,
        Some(1) => {
            let line = stdout.lines().next().unwrap_or("").trim();
            let (kind, why) = line.split_once(": ").unwrap_or(("unspecified", line));
            Verdict::Inconsistent {
                kind: kind.to_string(),
                why: why.to_string(),
            }
        }
        _ => Verdict::CheckerFailed(format!(
            "{status}: {}",
            first_lines(&format!("{stdout}{stderr}"))
        )),
    })
}

/// The first few lines of `text`, for a report.
fn first_lines(text: &str) -> String {
    text.lines().take(6).collect::<Vec<_>>().join(" | ")
}

/// Reads a child's pipe to its end on a thread of its own, so a chatty
/// child never blocks on a full pipe while we wait for it.
fn drain(pipe: Option<impl std::io::Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        pipe.map(|p| std::io::read_to_string(p).unwrap_or_default())
            .unwrap_or_default()
    })
}
