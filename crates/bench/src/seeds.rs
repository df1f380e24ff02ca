//! `stitchfs bench seeds`: the seed papers' experiments through a mount,
//! on every system of [`super::systems`] in one run (stitchfs in each mode,
//! ext4 in each data mode and `-o sync`, ext2, fuse2fs), each on storage
//! made fresh on the same disk with the caches dropped before mount.
//!
//! Workloads (`--workloads`), each the shape of a seed's experiment, driven
//! by the real tools where the paper used one:
//!
//! - Seltzer et al. 2000: **seltzer-micro**, create then delete of files by
//!   size (4 KB, 64 KB, 1 MB; a remount between the two); **seltzer-0len**,
//!   create + close + unlink of an empty file, 50,000 times;
//!   **postmark-small** (10,000 files of 512 B–16 KB, 20,000 transactions)
//!   and **postmark-large** (our sizes: 1,000 files of 16 KB–1 MB, 2,000
//!   transactions), Debian's `postmark` binary.
//! - Featherstitch: **untar** (GNU tar extracts a real source tree) and
//!   delete (`rm -rf`); **postmark-fst** (500 files of 500 B–4 MB, 500
//!   transactions); **andrew**, unpack, `./configure`, `make -j2` of a real
//!   C project (GNU hello 2.10, Debian's upstream tarball, which
//!   scripts/setup-bench.sh fetches with `apt-get source`); **imap**, a
//!   Dovecot server from Debian (`dovecot-imapd`, started for the run on
//!   127.0.0.1, Maildir on the mount, default `mail_fsync=optimized`) and a
//!   Python `imaplib` client: 1,000 messages of 2 KB appended to INBOX
//!   (untimed), then moved one `UID MOVE` at a time to another folder;
//!   **imap-mbox** and **imap-pg**, the paper's own shape of it (§8.5):
//!   an mbox IMAP server of ours (module `mbox`) moving the messages with COPY
//!   and `STORE +FLAGS (\Deleted)` one message at a time, then EXPUNGE and
//!   CHECK, syncing at every operation the protocol needs durable
//!   (imap-mbox, every system) or ordering its commands with patchgroups
//!   and syncing only at CHECK and EXPUNGE (imap-pg, stitchfs systems
//!   alone: elsewhere the calls answer ENOTTY); **imap-nosync**, the same
//!   server syncing nothing at all (unsafe: the floor of the move, which
//!   neither of the other two can beat on a system).
//! - ccfs (§4.4's applications, and §4.2's tests): **sqlite**, 2,000
//!   inserts of 120 random bytes, each its own transaction,
//!   `synchronous=FULL`, rollback journal (`journal_mode=DELETE`), and
//!   **sqlite-wal**, the same in WAL mode, both through Python's `sqlite3`
//!   module; **git**, `git add -A` and `git commit` of the source tree
//!   with `core.fsync=all`, so that Git is correct on a file system that
//!   reorders; **leveldb**, 5,000 synchronous puts (`sync=True`) of 1,000
//!   random bytes under random keys through Python's `plyvel`; **fsync**,
//!   the append, overwrite and truncate fsync-latency tests (4 KiB per
//!   operation, each followed by fsync).
//! - xsyncfs: **postmark-xsyncfs** (10,000 files, 10,000 transactions,
//!   PostMark's default sizes 500 B–10 KB, Debian's `postmark`, which
//!   syncs nothing); **postmark-fsync**, the same sizes through a PostMark
//!   of the applications' driver that, as xsyncfs's did, fsyncs at the end
//!   of each transaction the files it wrote and the directory; **kv**, a key-value
//!   server of ours that stores each value as a file and fsyncs it before
//!   it answers (module `kv`), under 1, 4 and 16 clients of this process
//!   sending 2,000 PUTs of 100–1,000 bytes in all a phase: requests a
//!   second, and the median and 99th-percentile time a PUT waits for its
//!   answer. The Andrew-style build (andrew) and SQLite with each insert
//!   its own transaction (sqlite) are xsyncfs's other applications.
//!
//! McoreFS's workloads are `bench mount`'s. Every timed phase ends with a
//! `syncfs` of the mount (and, since the kernel sends FUSE servers none,
//! stitchfs's sync ioctl, what `stitchfs sync` sends), inside the timing:
//! a phase is done when what it wrote is durable, whatever the system
//! defers; fuse2fs alone cannot be asked. See `workload` for what the
//! counts cover.
//!
//! The workloads done by programs (PostMark, untar, andrew, the ccfs
//! applications and the driver's PostMark, kv's server) also run on the
//! systems that launch programs ([`super::systems::Launch`]):
//! `stitchfs-stream`, the programs in a stream that ignores fsync;
//! `stitchfs-xsync`, each program under `stitchfs xsync` (its fsyncs
//! return at once, its output, and the kv server's answers through xsync's
//! proxy, held until what it changed is durable); and `stitchfs-ceiling`
//! and `fuse-floor-nofsync`, every fsync dropped. The Python drivers of
//! SQLite, LevelDB and PostMark are told of the stream: they call
//! `setstream("bench", IGNORE_FSYNC)` first and `streamsync()` once after
//! their last transaction, the one commit point the benchmark owes (the
//! phase is timed to what it wrote being durable on every system).
//! Other commands run under `stitchfs run --stream bench --ignore-fsync`,
//! which makes the stream durable as each exits. The report measures the
//! stream configuration against the ceiling and ext4 data=ordered
//! (`report`'s goals), and sets stitchfs under xsync beside stitchfs with
//! its fsyncs, ext4 `-o sync` and ext4 data=journal on each phase it ran.

use super::session::{self, Suite};
use super::systems::{Launch, Place, System};
use super::workload::{syncfs, Run};
use anyhow::{ensure, Context};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

mod kv;
mod mbox;
mod report;

pub use report::{known_name, merge, table, Report};

/// Every system but bindfs (a passthrough to the host file system, not an
/// image on the disk), stitchfs-context (a probe of the server's caller
/// lookup, for `bench mount`) and stitchfs-softupdates-stream. Where this
/// binary has no `xsync` subcommand, stitchfs-xsync is skipped, saying so.
pub const DEFAULT_SYSTEMS: &str = "stitchfs-softupdates,stitchfs,stitchfs-precise,\
stitchfs-stream,stitchfs-xsync,stitchfs-data-journal,stitchfs-writeback,stitchfs-async,stitchfs-ceiling,\
ext4-writeback,ext4,ext4-journal,ext4-sync,ext2,fuse2fs,fuse-floor,fuse-floor-nofsync";

/// What a phase's figure is.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Figure {
    /// Operations per second, in this unit.
    Rate(&'static str),
    /// Seconds for the whole phase (its amount is 1).
    Time,
}

/// One row of the results.
#[derive(Debug)]
pub struct Phase {
    /// The seed whose experiment it is.
    pub seed: &'static str,
    pub name: &'static str,
    pub figure: Figure,
    /// fsyncs (at least) per unit of work, for the device floor (0: not
    /// fsync-bound).
    pub fsyncs: f64,
}

const fn rate(seed: &'static str, name: &'static str, unit: &'static str, fsyncs: f64) -> Phase {
    Phase {
        seed,
        name,
        figure: Figure::Rate(unit),
        fsyncs,
    }
}

const fn time(seed: &'static str, name: &'static str) -> Phase {
    Phase {
        seed,
        name,
        figure: Figure::Time,
        fsyncs: 0.0,
    }
}

pub const PHASES: [Phase; 31] = [
    rate("Seltzer", "create 4 KB", "files/s", 0.0),
    rate("Seltzer", "delete 4 KB", "files/s", 0.0),
    rate("Seltzer", "create 64 KB", "files/s", 0.0),
    rate("Seltzer", "delete 64 KB", "files/s", 0.0),
    rate("Seltzer", "create 1 MB", "files/s", 0.0),
    rate("Seltzer", "delete 1 MB", "files/s", 0.0),
    rate("Seltzer", "create+delete 0 B", "files/s", 0.0),
    time("Seltzer", "PostMark small"),
    time("Seltzer", "PostMark large"),
    time("Featherstitch", "untar"),
    time("Featherstitch", "delete tree"),
    time("Featherstitch", "PostMark"),
    time("Featherstitch", "unpack"),
    time("Featherstitch", "configure"),
    time("Featherstitch", "make"),
    // SQLite's rollback journal, synchronous=FULL: at least the journal,
    // and the database, fsynced per transaction.
    rate("ccfs", "SQLite insert (rollback)", "inserts/s", 2.0),
    // WAL, synchronous=FULL: the log fsynced per transaction.
    rate("ccfs", "SQLite insert (WAL)", "inserts/s", 1.0),
    time("ccfs", "git add + commit"),
    // A synchronous put: its log record appended and fdatasynced.
    rate("ccfs", "LevelDB put", "puts/s", 1.0),
    rate("ccfs", "append+fsync", "ops/s", 1.0),
    rate("ccfs", "overwrite+fsync", "ops/s", 1.0),
    rate("ccfs", "truncate+fsync", "ops/s", 1.0),
    time("xsyncfs", "PostMark"),
    time("xsyncfs", "PostMark, fsync each transaction"),
    // kvd fsyncs the value's file and then its directory before it
    // answers a PUT.
    rate("xsyncfs", "KV PUT, 1 client", "requests/s", 2.0),
    rate("xsyncfs", "KV PUT, 4 clients", "requests/s", 2.0),
    rate("xsyncfs", "KV PUT, 16 clients", "requests/s", 2.0),
    rate("Featherstitch", "IMAP move", "messages/s", 0.0),
    // The unmodified mbox server: the destination fsynced after each COPY.
    rate(
        "Featherstitch",
        "IMAP move (mbox, fsync)",
        "messages/s",
        1.0,
    ),
    // Patchgroups: two pg_syncs in all (EXPUNGE, CHECK).
    rate(
        "Featherstitch",
        "IMAP move (mbox, patchgroups)",
        "messages/s",
        0.0,
    ),
    // No durability at all (unsafe): the floor the other two approach.
    rate(
        "Featherstitch",
        "IMAP move (mbox, no sync)",
        "messages/s",
        0.0,
    ),
];

/// The workloads, in order, with the phases each reports.
pub const WORKLOADS: [(&str, &[usize]); 19] = [
    ("seltzer-micro", &[0, 1, 2, 3, 4, 5]),
    ("seltzer-0len", &[6]),
    ("postmark-small", &[7]),
    ("postmark-large", &[8]),
    ("untar", &[9, 10]),
    ("postmark-fst", &[11]),
    ("andrew", &[12, 13, 14]),
    ("sqlite", &[15]),
    ("sqlite-wal", &[16]),
    ("git", &[17]),
    ("leveldb", &[18]),
    ("fsync", &[19, 20, 21]),
    ("postmark-xsyncfs", &[22]),
    ("postmark-fsync", &[23]),
    ("kv", &[24, 25, 26]),
    ("imap", &[27]),
    ("imap-mbox", &[28]),
    ("imap-pg", &[29]),
    ("imap-nosync", &[30]),
];

/// The workloads named by a comma-separated list (`all` for every one),
/// as indices into [`WORKLOADS`].
pub fn select_workloads(list: &str) -> anyhow::Result<Vec<usize>> {
    session::select_workloads(&WORKLOADS, list)
}

/// One PostMark configuration.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PostMark {
    pub files: usize,
    pub transactions: usize,
    pub min_size: u64,
    pub max_size: u64,
}

/// Sizes of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scale {
    pub image_bytes: u64,
    /// seltzer-micro: per size, this many files, at most `micro_bytes` in
    /// all.
    pub micro_files: usize,
    pub micro_bytes: u64,
    pub zero_files: usize,
    pub postmark_small: PostMark,
    pub postmark_large: PostMark,
    pub postmark_fst: PostMark,
    pub postmark_xsyncfs: PostMark,
    /// untar and git: files of the source tree (None: all of it).
    pub tree_files: Option<usize>,
    /// sqlite and sqlite-wal: inserts, and bytes each.
    pub sqlite_inserts: usize,
    pub sqlite_bytes: usize,
    /// leveldb: synchronous puts, and bytes a value.
    pub leveldb_puts: usize,
    pub leveldb_bytes: usize,
    /// imap: messages moved, and their body size.
    pub imap_messages: usize,
    pub imap_bytes: usize,
    /// fsync tests: operations of each kind.
    pub fsync_ops: usize,
    /// kv: PUTs a phase (shared out among its clients), and the least and
    /// most bytes of a value.
    pub kv_requests: usize,
    pub kv_min_bytes: usize,
    pub kv_max_bytes: usize,
    pub probe_samples: usize,
    pub probe_bytes: u64,
}

impl Scale {
    pub const FULL: Scale = Scale {
        image_bytes: 4 << 30,
        micro_files: 10_000,
        micro_bytes: 100 << 20,
        zero_files: 50_000,
        postmark_small: PostMark {
            files: 10_000,
            transactions: 20_000,
            min_size: 512,
            max_size: 16_384,
        },
        postmark_large: PostMark {
            files: 1_000,
            transactions: 2_000,
            min_size: 16_384,
            max_size: 1 << 20,
        },
        postmark_fst: PostMark {
            files: 500,
            transactions: 500,
            min_size: 500,
            max_size: 4 << 20,
        },
        postmark_xsyncfs: PostMark {
            files: 10_000,
            transactions: 10_000,
            min_size: 500,
            max_size: 10_000,
        },
        tree_files: None,
        sqlite_inserts: 2_000,
        sqlite_bytes: 120,
        leveldb_puts: 5_000,
        leveldb_bytes: 1_000,
        imap_messages: 1_000,
        imap_bytes: 2048,
        fsync_ops: 1_000,
        kv_requests: 2_000,
        kv_min_bytes: 100,
        kv_max_bytes: 1_000,
        probe_samples: 200,
        probe_bytes: 256 << 20,
    };

    pub const QUICK: Scale = Scale {
        image_bytes: 256 << 20,
        micro_files: 100,
        micro_bytes: 8 << 20,
        zero_files: 500,
        postmark_small: PostMark {
            files: 100,
            transactions: 200,
            min_size: 512,
            max_size: 16_384,
        },
        postmark_large: PostMark {
            files: 10,
            transactions: 20,
            min_size: 16_384,
            max_size: 1 << 20,
        },
        postmark_fst: PostMark {
            files: 10,
            transactions: 10,
            min_size: 500,
            max_size: 4 << 20,
        },
        postmark_xsyncfs: PostMark {
            files: 100,
            transactions: 100,
            min_size: 500,
            max_size: 10_000,
        },
        tree_files: Some(200),
        sqlite_inserts: 50,
        sqlite_bytes: 120,
        leveldb_puts: 100,
        leveldb_bytes: 1_000,
        imap_messages: 20,
        imap_bytes: 2048,
        fsync_ops: 50,
        kv_requests: 64,
        kv_min_bytes: 100,
        kv_max_bytes: 1_000,
        probe_samples: 20,
        probe_bytes: 32 << 20,
    };
}

/// What a run needs.
pub type Config = session::Config<Scale, Inputs>;

/// What the workloads take from outside.
pub struct Inputs {
    /// The source tree for untar and git.
    pub tree: Option<PathBuf>,
    /// The C project's tarball for andrew.
    pub project: Option<PathBuf>,
}

/// What was run, for the report.
pub type Settings = session::Settings<Scale, Sources>;

/// What the run took from outside, as the report records it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sources {
    /// The source tree: where it came from, files and bytes.
    pub tree: Option<String>,
    pub project: Option<String>,
    /// The tools' versions.
    pub tools: Vec<String>,
}

/// Why a workload cannot run here (a tool or input missing).
fn workload_missing(w: usize, cfg: &Config) -> Option<String> {
    let tool = |bin: &str, package: &str| {
        super::systems::tool(bin).is_none().then(|| {
            format!(
                "{bin} not installed: apt-get install {package} (or run scripts/setup-bench.sh)"
            )
        })
    };
    match WORKLOADS[w].0 {
        "postmark-fsync" => tool("python3", "python3"),
        n if n.starts_with("postmark") => tool("postmark", "postmark"),
        "untar" => tool("tar", "tar").or_else(|| {
            cfg.inputs
                .tree
                .is_none()
                .then(|| "no source tree (give --tree DIR)".into())
        }),
        "git" => tool("git", "git").or_else(|| {
            cfg.inputs
                .tree
                .is_none()
                .then(|| "no source tree (give --tree DIR)".into())
        }),
        "sqlite" | "sqlite-wal" => python_module("sqlite3", "python3"),
        "leveldb" => python_module("plyvel", "python3-plyvel"),
        "imap" => tool("dovecot", "dovecot-imapd")
            .or_else(|| tool("python3", "python3"))
            .or_else(|| {
                mail_user()
                    .is_none()
                    .then(|| "no `mail` user for Dovecot's mail processes".into())
            }),
        "imap-mbox" | "imap-nosync" | "kv" => tool("python3", "python3"),
        "imap-pg" => tool("python3", "python3").or_else(|| {
            (!PYTHON_PACKAGE.contains("def pg_create(")).then(|| {
                "this build's stitchfs Python package has no patchgroups (pg_create)".into()
            })
        }),
        "andrew" => tool("make", "make")
            .or_else(|| tool("cc", "gcc"))
            .or_else(|| match &cfg.inputs.project {
                Some(p) if p.is_file() => None,
                Some(p) => Some(format!(
                    "no C project tarball at {} (run scripts/setup-bench.sh)",
                    p.display()
                )),
                None => Some("no C project tarball (run scripts/setup-bench.sh)".into()),
            }),
        _ => None,
    }
}

/// Why `python3` cannot import `module` here, with the Debian package
/// that provides it; `None` when it can.
fn python_module(module: &str, package: &str) -> Option<String> {
    let imports = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    (!imports).then(|| {
        format!(
            "python3 cannot import {module}: apt-get install {package} (or run scripts/setup.sh)"
        )
    })
}

/// Inputs made once, outside the systems under test.
struct Prepared {
    /// A tar of the source tree, and its size.
    tree_tar: Option<PathBuf>,
    tree_note: Option<String>,
    dir: PathBuf,
    /// The applications' Python driver ([`DRIVER`]), the directory
    /// holding the `stitchfs` Python package it imports, and the
    /// interpreter that runs it.
    driver: PathBuf,
    python: PathBuf,
    interpreter: PathBuf,
}

/// The interpreter `python3` names, resolved once: a shim on PATH (pyenv's
/// is a shell script that starts pyenv first) would otherwise be timed
/// with the work.
fn interpreter() -> PathBuf {
    Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .stdin(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// The Python package `stitchfs` of this build (one module), which the
/// driver imports in a stream: the control calls this binary's server
/// answers, whatever package the machine has installed.
const PYTHON_PACKAGE: &str = include_str!("../../../python/stitchfs/__init__.py");

/// The driver and the package, written in `dir`: the driver's path, and
/// the directory to put on `PYTHONPATH`.
fn driver_files(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let python = dir.join("python");
    std::fs::create_dir_all(python.join("stitchfs"))?;
    std::fs::write(python.join("stitchfs/__init__.py"), PYTHON_PACKAGE)?;
    let driver = dir.join("apps.py");
    std::fs::write(&driver, DRIVER)?;
    Ok((driver, python))
}

fn prepare(cfg: &Config, dir: &Path) -> anyhow::Result<Prepared> {
    let (driver, python) = driver_files(dir)?;
    let mut inputs = Prepared {
        tree_tar: None,
        tree_note: None,
        dir: dir.to_path_buf(),
        driver,
        python,
        interpreter: interpreter(),
    };
    let wants_tree = cfg
        .workloads
        .iter()
        .any(|&w| matches!(WORKLOADS[w].0, "untar" | "git"));
    if let (true, Some(root)) = (wants_tree, &cfg.inputs.tree) {
        let limit = cfg.scale.tree_files.unwrap_or(usize::MAX);
        let t = super::tree::Tree::read(root, limit)
            .with_context(|| format!("reading {}", root.display()))?;
        let list = dir.join("tree.list");
        let mut f = File::create(&list)?;
        for p in t.paths() {
            writeln!(f, "{}", p.display())?;
        }
        drop(f);
        let tar = dir.join("tree.tar");
        run_tool(
            Command::new("tar")
                .arg("-cf")
                .arg(&tar)
                .arg("-C")
                .arg(root)
                .args(["--no-recursion", "-T"])
                .arg(&list),
            "tar -c",
        )?;
        inputs.tree_note = Some(format!(
            "{} ({} files, {:.1} MB)",
            root.display(),
            t.files,
            t.bytes as f64 / 1e6
        ));
        inputs.tree_tar = Some(tar);
    }
    Ok(inputs)
}

/// Runs every workload on every available system `cfg.runs` times,
/// measuring the device before each run.
pub fn run(cfg: &Config, mut progress: impl FnMut(&str)) -> anyhow::Result<Report> {
    let scratch = session::scratch(cfg)?;
    let inputs_dir = scratch.path().join("inputs");
    let fs_dir = scratch.path().join("fs");
    std::fs::create_dir_all(&inputs_dir)?;
    std::fs::create_dir_all(&fs_dir)?;
    let place = Place::new(&fs_dir)?;
    let suite = Seeds {
        cfg,
        inputs: prepare(cfg, &inputs_dir)?,
    };
    let m = session::measure(cfg, &suite, scratch.path(), &place, &mut progress)?;
    let sources = Sources {
        tree: suite.inputs.tree_note.clone(),
        project: cfg.inputs.project.as_ref().map(|p| p.display().to_string()),
        tools: tool_versions(),
    };
    Ok(report::build(Settings::new(cfg, &m, sources), m))
}

/// The suite, as its session runs it.
struct Seeds<'a> {
    cfg: &'a Config,
    inputs: Prepared,
}

impl Suite for Seeds<'_> {
    const WORKLOADS: &'static [(&'static str, &'static [usize])] = &WORKLOADS;

    fn phase_name(p: usize) -> &'static str {
        PHASES[p].name
    }

    fn storage(&self) -> (u64, usize, u64) {
        let s = &self.cfg.scale;
        (s.image_bytes, s.probe_samples, s.probe_bytes)
    }

    fn missing(&self, w: usize) -> Option<String> {
        workload_missing(w, self.cfg)
    }

    /// Not the Seltzer microbenchmarks and fsync tests (done in this
    /// process), nor the IMAP workloads (their servers start before the
    /// phase). kv is: its server, a program, is launched as the system
    /// says, and does all of the file system work.
    fn runs_programs(&self, w: usize) -> bool {
        let name = WORKLOADS[w].0;
        name.starts_with("postmark")
            || matches!(
                name,
                "untar" | "andrew" | "sqlite" | "sqlite-wal" | "git" | "leveldb" | "kv"
            )
    }

    fn unfit(&self, w: usize, sys: &System) -> Option<String> {
        unfit(WORKLOADS[w].0, sys)
    }

    fn workload(&self, w: usize, run: &mut Run) -> anyhow::Result<()> {
        workload(w, run, self.cfg, &self.inputs)
    }
}

/// Why workload `name` does not apply to `sys` (beyond the session's
/// rule for systems that launch programs): imap-pg runs on stitchfs alone,
/// whose control calls patchgroups are.
fn unfit(name: &str, sys: &System) -> Option<String> {
    (name == "imap-pg" && sys.stitchfs_consistency().is_none()).then(|| {
        format!(
            "{}: imap-pg uses patchgroups, which {} does not have",
            session::NOT_APPLICABLE,
            sys.label
        )
    })
}

fn tool_versions() -> Vec<String> {
    let first_line = |cmd: &str, args: &[&str]| -> Option<String> {
        let out = Command::new(cmd).args(args).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && l.chars().any(|c| c.is_ascii_digit()))
            .map(str::to_string)
    };
    let mut v = Vec::new();
    for (cmd, args) in [
        ("tar", &["--version"][..]),
        ("git", &["--version"][..]),
        ("gcc", &["--version"][..]),
        ("fuse2fs", &["-V"][..]),
        ("dovecot", &["--version"][..]),
    ] {
        if let Some(l) = first_line(cmd, args) {
            v.push(format!("{cmd}: {l}"));
        }
    }
    for (module, script) in [
        (
            "python3",
            "import sys, sqlite3; print('Python', sys.version.split()[0], 'SQLite', \
             sqlite3.sqlite_version)",
        ),
        (
            "plyvel",
            "import plyvel; print(plyvel.__version__, 'LevelDB', plyvel.__leveldb_version__)",
        ),
    ] {
        if let Some(l) = first_line("python3", &["-c", script]) {
            v.push(format!("{module}: {l}"));
        }
    }
    for package in ["postmark", "eatmydata"] {
        if let Some(out) = Command::new("dpkg-query")
            .args(["-W", "-f", "${Version}", package])
            .output()
            .ok()
            .filter(|o| o.status.success())
        {
            v.push(format!(
                "{package}: Debian {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
    }
    v
}

fn workload(w: usize, run: &mut Run, cfg: &Config, inputs: &Prepared) -> anyhow::Result<()> {
    let s = &cfg.scale;
    let p = WORKLOADS[w].1;
    match WORKLOADS[w].0 {
        "seltzer-micro" => seltzer_micro(run, s),
        "seltzer-0len" => zero_length(run, p[0], s.zero_files),
        "postmark-small" => postmark(run, p[0], &s.postmark_small, inputs),
        "postmark-large" => postmark(run, p[0], &s.postmark_large, inputs),
        "postmark-fst" => postmark(run, p[0], &s.postmark_fst, inputs),
        "postmark-xsyncfs" => postmark(run, p[0], &s.postmark_xsyncfs, inputs),
        "postmark-fsync" => postmark_fsync(run, p[0], &s.postmark_xsyncfs, inputs),
        "kv" => kv::kv(run, p, s, inputs),
        "untar" => untar(run, p, inputs),
        "andrew" => andrew(run, p, cfg),
        "sqlite" => sqlite(run, p[0], "DELETE", s, inputs),
        "sqlite-wal" => sqlite(run, p[0], "WAL", s, inputs),
        "git" => git(run, p[0], inputs),
        "leveldb" => leveldb(run, p[0], s, inputs),
        "fsync" => fsync_tests(run, p, s.fsync_ops),
        "imap" => imap(run, p[0], s, inputs),
        "imap-mbox" => mbox::imap_mbox(run, p[0], mbox::Durability::Fsync, s, inputs),
        "imap-pg" => mbox::imap_mbox(run, p[0], mbox::Durability::Patchgroups, s, inputs),
        "imap-nosync" => mbox::imap_mbox(run, p[0], mbox::Durability::Nothing, s, inputs),
        other => anyhow::bail!("no workload {other}"),
    }
}

/// Runs a tool to completion; its output in the error if it fails.
fn run_tool(cmd: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {what}"))?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(10)..].join("\n  ");
        anyhow::bail!("{what} failed ({}):\n  {tail}", out.status);
    }
    Ok(text)
}

/// The last lines of a server's output file, each on a line of its own
/// after an indent, for an error message.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = &lines[lines.len().saturating_sub(10)..];
    tail.iter().map(|l| format!("\n  {l}")).collect()
}

/// The file sizes of seltzer-micro, with the phases (create, delete) of each.
const MICRO_SIZES: [(u64, usize, usize); 3] = [(4096, 0, 1), (65_536, 2, 3), (1 << 20, 4, 5)];

/// Seltzer's create and delete microbenchmarks: per size, create N files
/// of that size in one directory (each written in one call and closed),
/// then syncfs; remount (caches dropped); delete them all, then syncfs.
fn seltzer_micro(run: &mut Run, s: &Scale) -> anyhow::Result<()> {
    for (size, create, delete) in MICRO_SIZES {
        let n = s.micro_files.min((s.micro_bytes / size) as usize).max(1);
        let dir = format!("micro{size}");
        let name = |root: &Path, i: usize| root.join(format!("{dir}/f{i}"));
        run.setup(create, |root| Ok(std::fs::create_dir(root.join(&dir))?))?;
        let data = vec![0x53u8; size as usize];
        run.timed(create, |root| {
            for i in 0..n {
                let p = name(root, i);
                let mut f = File::create(&p).with_context(|| format!("create {}", p.display()))?;
                f.write_all(&data)
                    .with_context(|| format!("write {}", p.display()))?;
            }
            syncfs(root)?;
            Ok(n as f64)
        })?;
        run.remount()?;
        run.timed(delete, |root| {
            for i in 0..n {
                let p = name(root, i);
                std::fs::remove_file(&p).with_context(|| format!("unlink {}", p.display()))?;
            }
            syncfs(root)?;
            Ok(n as f64)
        })?;
    }
    Ok(())
}

/// Seltzer's 0-length test: create, close and unlink one empty file, `n`
/// times, in one directory; then syncfs.
fn zero_length(run: &mut Run, phase: usize, n: usize) -> anyhow::Result<()> {
    run.setup(phase, |root| Ok(std::fs::create_dir(root.join("zero"))?))?;
    run.timed(phase, |root| {
        for i in 0..n {
            let p = root.join(format!("zero/f{i}"));
            File::create(&p).with_context(|| format!("create {}", p.display()))?;
            std::fs::remove_file(&p).with_context(|| format!("unlink {}", p.display()))?;
        }
        syncfs(root)?;
        Ok(n as f64)
    })
}

/// The PostMark configuration file for `pm`, running in `dir`.
pub fn postmark_config(pm: &PostMark, dir: &Path) -> String {
    format!(
        "set location {}\nset number {}\nset transactions {}\nset size {} {}\n\
         set seed 42\nrun\nquit\n",
        dir.display(),
        pm.files,
        pm.transactions,
        pm.min_size,
        pm.max_size
    )
}

/// PostMark's own summary line, `N seconds of transactions (M per second)`,
/// as (seconds, transactions per second).
pub fn postmark_transactions(out: &str) -> Option<(f64, f64)> {
    let line = out
        .lines()
        .find(|l| l.contains("seconds of transactions"))?;
    let secs = line.split_whitespace().next()?.parse().ok()?;
    let per = line
        .split('(')
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((secs, per))
}

/// Debian's `postmark` with `pm`, in a directory of the mount; then syncfs.
fn postmark(run: &mut Run, phase: usize, pm: &PostMark, inputs: &Prepared) -> anyhow::Result<()> {
    run.setup(phase, |root| Ok(std::fs::create_dir(root.join("pm"))?))?;
    let cfg_path = inputs.dir.join("postmark.cfg");
    let launch = run.launch();
    run.timed(phase, |root| {
        std::fs::write(&cfg_path, postmark_config(pm, &root.join("pm")))?;
        let out = run_tool(
            launch
                .command("postmark", root)?
                .arg(&cfg_path)
                .current_dir(root),
            &format!("postmark{}", launch.describe()),
        )?;
        ensure!(
            postmark_transactions(&out).is_some(),
            "postmark printed no summary:\n{out}"
        );
        syncfs(root)?;
        Ok(1.0)
    })
}

/// Featherstitch's untar and delete: GNU tar extracts the tree (the tar
/// file is on the host disk, read through its cache), syncfs; remount;
/// `rm -rf` of it, syncfs.
fn untar(run: &mut Run, p: &[usize], inputs: &Prepared) -> anyhow::Result<()> {
    let tar = inputs.tree_tar.as_ref().context("no tree tarball")?;
    // Read the tar once so its reads are not timed on the first system
    // only (drop_caches empties the cache before every mount).
    run.setup(p[0], |root| Ok(std::fs::create_dir(root.join("tree"))?))?;
    let launch = run.launch();
    run.timed(p[0], |root| {
        run_tool(
            launch
                .command("tar", root)?
                .arg("-xf")
                .arg(tar)
                .arg("-C")
                .arg(root.join("tree")),
            &format!("tar -x{}", launch.describe()),
        )?;
        syncfs(root)?;
        Ok(1.0)
    })?;
    run.remount()?;
    run.timed(p[1], |root| {
        run_tool(
            launch
                .command("rm", root)?
                .arg("-rf")
                .arg(root.join("tree")),
            &format!("rm -rf{}", launch.describe()),
        )?;
        syncfs(root)?;
        Ok(1.0)
    })
}

/// The Andrew-style build: unpack the C project's tarball, `./configure`,
/// `make -j2`, each phase ending with syncfs.
fn andrew(run: &mut Run, p: &[usize], cfg: &Config) -> anyhow::Result<()> {
    let tarball = cfg
        .inputs
        .project
        .as_ref()
        .context("no C project tarball")?;
    let launch = run.launch();
    run.timed(p[0], |root| {
        run_tool(
            launch
                .command("tar", root)?
                .arg("-xf")
                .arg(tarball)
                .arg("-C")
                .arg(root),
            &format!("tar -x of the project{}", launch.describe()),
        )?;
        syncfs(root)?;
        Ok(1.0)
    })?;
    let src = |root: &Path| -> anyhow::Result<PathBuf> {
        let dir = std::fs::read_dir(root)?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| p.join("configure").is_file())
            .context("no directory with a configure script in the tarball")?;
        Ok(dir)
    };
    run.timed(p[1], |root| {
        let dir = src(root)?;
        run_tool(
            launch
                .command("./configure", root)?
                .arg("--quiet")
                .current_dir(&dir),
            &format!("configure{}", launch.describe()),
        )?;
        syncfs(root)?;
        Ok(1.0)
    })?;
    run.timed(p[2], |root| {
        let dir = src(root)?;
        run_tool(
            launch
                .command("make", root)?
                .args(["-j2", "--quiet"])
                .current_dir(&dir),
            &format!("make{}", launch.describe()),
        )?;
        syncfs(root)?;
        Ok(1.0)
    })
}

/// The applications' driver (Python): ccfs's SQLite through the `sqlite3`
/// module and LevelDB through `plyvel`, and xsyncfs's PostMark (fsync at
/// each transaction's end), in the working directory. With
/// `--stream` it enters stitchfs stream `bench` with `IGNORE_FSYNC` before
/// its first transaction and calls `streamsync` once after its last (the
/// commit point: the end of the batch), and says plainly when this build
/// or mount refuses either.
pub const DRIVER: &str = r#"import os, random, sys

def enter_stream():
    try:
        import stitchfs
    except ImportError as e:
        sys.exit(f"--stream: the stitchfs Python package cannot be imported: {e}")
    missing = [n for n in ("setstream", "streamsync", "IGNORE_FSYNC") if not hasattr(stitchfs, n)]
    if missing:
        sys.exit("--stream: the stitchfs Python package has no " + ", ".join(missing)
                 + " (this build has no streams)")
    try:
        stitchfs.setstream("bench", stitchfs.IGNORE_FSYNC)
    except OSError as e:
        sys.exit(f"--stream: setstream refused: {e}")
    return stitchfs.streamsync

def sqlite(mode, n, size):
    import sqlite3
    # Autocommit: each INSERT is its own transaction.
    db = sqlite3.connect("bench.db", isolation_level=None)
    got = db.execute(f"PRAGMA journal_mode={mode}").fetchone()[0]
    if got.upper() != mode:
        sys.exit(f"journal_mode is {got}, not {mode}")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
    for _ in range(n):
        db.execute("INSERT INTO t(v) VALUES (randomblob(?))", (size,))
    rows = db.execute("SELECT count(*) FROM t").fetchone()[0]
    db.close()
    return rows

def leveldb(n, size):
    import plyvel
    rng = random.Random(42)
    db = plyvel.DB("db", create_if_missing=True)
    for _ in range(n):
        db.put(rng.randbytes(16), rng.randbytes(size), sync=True)
    rows = sum(1 for _ in db.iterator(include_value=False))
    db.close()
    return rows

def postmark(files, transactions, lo, hi):
    """PostMark's shape with an fsync at the end of each transaction, as
    xsyncfs ran it: a pool of `files` files of lo..hi bytes; transactions
    that each create or delete a file, then read one or append lo..hi
    bytes to one; at each transaction's end the files it wrote are
    fsynced, then the directory; then the pool is deleted. Returns the
    files found before the deletion, which must be the pool's."""
    rng = random.Random(42)
    block = bytes(range(256)) * 64
    def write(name, flags):
        n = rng.randint(lo, hi)
        fd = os.open(name, flags | os.O_WRONLY, 0o644)
        os.write(fd, (block * (n // len(block) + 1))[:n])
        return fd
    names = (f"f{i}" for i in range(files + transactions))
    pool = []
    for _ in range(files):
        pool.append(next(names))
        os.close(write(pool[-1], os.O_CREAT | os.O_EXCL))
    dirfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(transactions):
        written = []
        if rng.random() < 0.5 or not pool:
            pool.append(next(names))
            written.append(write(pool[-1], os.O_CREAT | os.O_EXCL))
        else:
            os.unlink(pool.pop(rng.randrange(len(pool))))
        if pool and rng.random() < 0.5:
            with open(rng.choice(pool), "rb") as f:
                f.read()
        elif pool:
            written.append(write(rng.choice(pool), os.O_APPEND))
        for fd in written:
            os.fsync(fd)
            os.close(fd)
        os.fsync(dirfd)
    found = sum(1 for n in os.listdir(".") if n.startswith("f"))
    for name in pool:
        os.unlink(name)
    os.fsync(dirfd)
    os.close(dirfd)
    return found, len(pool)

args = sys.argv[1:]
commit = None
if args[:1] == ["--stream"]:
    commit = enter_stream()
    args = args[1:]
if args[0] == "sqlite":
    n, rows = int(args[2]), sqlite(args[1], int(args[2]), int(args[3]))
elif args[0] == "leveldb":
    n, rows = int(args[1]), leveldb(int(args[1]), int(args[2]))
elif args[0] == "postmark":
    rows, n = postmark(int(args[1]), int(args[2]), int(args[3]), int(args[4]))
else:
    sys.exit(f"no application {args[0]}")
if rows != n:
    sys.exit(f"{rows} records, not {n}")
if commit:
    try:
        commit()
    except OSError as e:
        sys.exit(f"--stream: streamsync failed: {e}")
"#;

/// One of ccfs's applications as phase `phase`: the driver with `args`
/// (its application first) in a directory of the mount made beforehand,
/// then syncfs; `amount` records written.
fn driven(
    run: &mut Run,
    phase: usize,
    args: &[&str],
    amount: usize,
    inputs: &Prepared,
) -> anyhow::Result<()> {
    run.setup(phase, |root| Ok(std::fs::create_dir(root.join("app"))?))?;
    let launch = run.launch();
    run.timed(phase, |root| {
        let mut cmd = match launch {
            // Told of the stream: it sets it and syncs it itself.
            Launch::Stream => Command::new(&inputs.interpreter),
            other => other.command(&inputs.interpreter, root)?,
        };
        cmd.arg(&inputs.driver);
        if launch == Launch::Stream {
            cmd.arg("--stream");
        }
        run_tool(
            cmd.args(args)
                .current_dir(root.join("app"))
                .env("PYTHONPATH", &inputs.python),
            &format!("the {} driver", args[0]),
        )?;
        syncfs(root)?;
        Ok(amount as f64)
    })
}

/// ccfs's SQLite test in journal mode `mode` (DELETE: the rollback
/// journal; WAL).
fn sqlite(
    run: &mut Run,
    phase: usize,
    mode: &str,
    s: &Scale,
    inputs: &Prepared,
) -> anyhow::Result<()> {
    let (n, bytes) = (s.sqlite_inserts.to_string(), s.sqlite_bytes.to_string());
    driven(
        run,
        phase,
        &["sqlite", mode, &n, &bytes],
        s.sqlite_inserts,
        inputs,
    )
}

/// xsyncfs's PostMark: `pm`'s pool and transactions through the driver's
/// PostMark, which fsyncs what each transaction wrote at its end (Debian's
/// `postmark` fsyncs nothing).
fn postmark_fsync(
    run: &mut Run,
    phase: usize,
    pm: &PostMark,
    inputs: &Prepared,
) -> anyhow::Result<()> {
    let args = [pm.files, pm.transactions].map(|n| n.to_string());
    let sizes = [pm.min_size, pm.max_size].map(|n| n.to_string());
    driven(
        run,
        phase,
        &["postmark", &args[0], &args[1], &sizes[0], &sizes[1]],
        1,
        inputs,
    )
}

/// ccfs's LevelDB test, in the shape of db_bench's fillrandom with
/// synchronous writes.
fn leveldb(run: &mut Run, phase: usize, s: &Scale, inputs: &Prepared) -> anyhow::Result<()> {
    let (n, bytes) = (s.leveldb_puts.to_string(), s.leveldb_bytes.to_string());
    driven(run, phase, &["leveldb", &n, &bytes], s.leveldb_puts, inputs)
}

/// ccfs's git test: the tree is unpacked (untimed, made durable), then
/// `git init`, `git add -A` and `git commit` with `core.fsync=all` and
/// `core.fsyncMethod=fsync` are timed together (in a stream, each its own
/// `stitchfs run`, so the stream is made durable after each).
fn git(run: &mut Run, phase: usize, inputs: &Prepared) -> anyhow::Result<()> {
    let tar = inputs.tree_tar.as_ref().context("no tree tarball")?;
    run.setup(phase, |root| {
        std::fs::create_dir(root.join("repo"))?;
        run_tool(
            Command::new("tar")
                .arg("-xf")
                .arg(tar)
                .arg("-C")
                .arg(root.join("repo")),
            "tar -x",
        )?;
        Ok(())
    })?;
    let launch = run.launch();
    run.timed(phase, |root| {
        let repo = root.join("repo");
        let git = |args: &[&str]| -> anyhow::Result<String> {
            run_tool(
                launch
                    .command("git", root)?
                    .args([
                        "-c",
                        "core.fsync=all",
                        "-c",
                        "core.fsyncMethod=fsync",
                        "-c",
                        "user.name=bench",
                        "-c",
                        "user.email=bench@localhost",
                        "-c",
                        "safe.directory=*",
                        // No detached `gc --auto` left running in the
                        // mount after the commit (13,000 loose objects
                        // pass its threshold); the measurement is add +
                        // commit.
                        "-c",
                        "gc.auto=0",
                        "-c",
                        "maintenance.auto=false",
                    ])
                    .args(args)
                    .current_dir(&repo)
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env("HOME", &repo),
                &format!("git {}{}", args[0], launch.describe()),
            )
        };
        git(&["init", "-q"])?;
        git(&["add", "-A"])?;
        git(&["commit", "-q", "-m", "tree"])?;
        syncfs(root)?;
        Ok(1.0)
    })
}

/// ccfs's fsync-latency tests, 4 KiB an operation, each followed by
/// fsync: append to an empty file; overwrite a random block of a 16 MiB
/// file written and synced beforehand; truncate: shrink a file of `n`
/// blocks by one block at a time.
fn fsync_tests(run: &mut Run, p: &[usize], n: usize) -> anyhow::Result<()> {
    let block = [0x46u8; 4096];
    run.timed(p[0], |root| {
        let mut f = File::create(root.join("append"))?;
        for _ in 0..n {
            f.write_all(&block)?;
            f.sync_all().context("fsync")?;
        }
        Ok(n as f64)
    })?;
    const OVERWRITE_BLOCKS: u64 = 4096;
    run.setup(p[1], |root| {
        filled(&root.join("overwrite"), &block, OVERWRITE_BLOCKS)
    })?;
    run.timed(p[1], |root| {
        let f = File::options().write(true).open(root.join("overwrite"))?;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            f.write_all_at(&block, (x % OVERWRITE_BLOCKS) * 4096)?;
            f.sync_all().context("fsync")?;
        }
        Ok(n as f64)
    })?;
    run.setup(p[2], |root| {
        filled(&root.join("truncate"), &block, n as u64)
    })?;
    run.timed(p[2], |root| {
        let f = File::options().write(true).open(root.join("truncate"))?;
        for i in (0..n as u64).rev() {
            f.set_len(i * 4096)?;
            f.sync_all().context("fsync")?;
        }
        Ok(n as f64)
    })
}

/// A file of `blocks` copies of `block`, written and fsynced.
fn filled(path: &Path, block: &[u8], blocks: u64) -> anyhow::Result<()> {
    let mut f = File::create(path)?;
    for _ in 0..blocks {
        f.write_all(block)?;
    }
    f.sync_all()?;
    Ok(())
}

/// The uid and gid of the `mail` user, which Dovecot's mail processes run
/// as (Dovecot refuses root).
fn mail_user() -> Option<(u32, u32)> {
    // SAFETY: getpwnam returns a pointer into static storage, read at once.
    let pw = unsafe { libc::getpwnam(c"mail".as_ptr()) };
    // SAFETY: non-null, so it points to a passwd entry.
    (!pw.is_null()).then(|| unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

/// The Dovecot configuration: IMAP on 127.0.0.1:`port`, one user `bench`
/// (password `bench`) whose Maildir is under `mail_root`, the server's own
/// files in `run_dir`.
pub fn dovecot_config(port: u16, mail_root: &Path, run_dir: &Path, uid: u32, gid: u32) -> String {
    format!(
        "protocols = imap\nlisten = 127.0.0.1\nbase_dir = {run}/base\n\
         state_dir = {run}/state\nlog_path = {run}/dovecot.log\nssl = no\n\
         disable_plaintext_auth = no\nauth_mechanisms = plain\nfirst_valid_uid = {uid}\n\
         default_internal_user = mail\ndefault_internal_group = mail\n\
         default_login_user = mail\n\
         passdb {{\n  driver = static\n  args = password=bench\n}}\n\
         userdb {{\n  driver = static\n  args = uid={uid} gid={gid} home={mail}/%u\n}}\n\
         mail_location = maildir:~/Maildir\n\
         service imap-login {{\n  chroot =\n  inet_listener imap {{\n    \
         address = 127.0.0.1\n    port = {port}\n  }}\n}}\n\
         service anvil {{\n  chroot =\n}}\n",
        run = run_dir.display(),
        mail = mail_root.display(),
    )
}

/// The IMAP client: `append PORT N BYTES` fills INBOX; `move PORT N`
/// moves every message to `Moved` one `UID MOVE` at a time and checks
/// that `Moved` holds N.
const IMAP_CLIENT: &str = r#"import imaplib, sys
mode, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
m = imaplib.IMAP4("127.0.0.1", port)
m.login("bench", "bench")
if mode == "append":
    m.create("Moved")
    body = ("From: bench@localhost\r\nSubject: m\r\n\r\n" + "x" * int(sys.argv[4])).encode()
    for i in range(n):
        typ, _ = m.append("INBOX", None, None, body)
        assert typ == "OK", typ
else:
    m.select("INBOX")
    typ, data = m.uid("SEARCH", None, "ALL")
    uids = data[0].split()
    assert len(uids) == n, (len(uids), n)
    for uid in uids:
        typ, _ = m.uid("MOVE", uid, "Moved")
        assert typ == "OK", typ
    typ, st = m.status("Moved", "(MESSAGES)")
    assert st[0].split()[-1].rstrip(b")") == str(n).encode(), st
m.logout()
"#;

/// A Dovecot master running in the foreground, stopped when dropped.
struct Dovecot(std::process::Child);

impl Drop for Dovecot {
    fn drop(&mut self) {
        // SAFETY: kill has no memory effects; the pid is our child's.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// Featherstitch's IMAP test: Dovecot with its Maildir on the mount; the
/// messages are appended (untimed, made durable), then moved one by one.
fn imap(run: &mut Run, phase: usize, s: &Scale, inputs: &Prepared) -> anyhow::Result<()> {
    let (uid, gid) = mail_user().context("no mail user")?;
    let run_dir = inputs.dir.join("dovecot");
    let _ = std::fs::remove_dir_all(&run_dir);
    std::fs::create_dir_all(&run_dir)?;
    let client = inputs.dir.join("imap_client.py");
    std::fs::write(&client, IMAP_CLIENT)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let conf = run_dir.join("dovecot.conf");
    let mut server: Option<Dovecot> = None;
    let py = |args: &[String]| -> anyhow::Result<String> {
        run_tool(
            Command::new("python3").arg(&client).args(args),
            "the IMAP client",
        )
    };
    run.setup(phase, |root| {
        let mail = root.join("mail");
        std::fs::create_dir(&mail)?;
        std::os::unix::fs::chown(&mail, Some(uid), Some(gid))?;
        std::fs::write(&conf, dovecot_config(port, &mail, &run_dir, uid, gid))?;
        let log = File::create(run_dir.join("master.out"))?;
        let child = Command::new(super::systems::tool("dovecot").context("no dovecot")?)
            .arg("-F")
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting dovecot")?;
        server = Some(Dovecot(child));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            ensure!(
                std::time::Instant::now() < deadline,
                "dovecot did not listen on port {port} within 30 s: {}",
                std::fs::read_to_string(run_dir.join("dovecot.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        py(&[
            "append".into(),
            port.to_string(),
            s.imap_messages.to_string(),
            s.imap_bytes.to_string(),
        ])?;
        Ok(())
    })?;
    run.timed(phase, |root| {
        py(&["move".into(), port.to_string(), s.imap_messages.to_string()])?;
        syncfs(root)?;
        Ok(s.imap_messages as f64)
    })?;
    drop(server);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the Python unittest file `name` beside this module's servers
    /// (skipped without python3); it must pass.
    pub(super) fn python_tests(name: &str) {
        let test = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/seeds")
            .join(name);
        let out = Command::new("python3")
            .arg(test)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .output();
        let Ok(out) = out else {
            eprintln!("skipping: no python3");
            return;
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(stderr.contains("\nOK"), "{stderr}");
    }

    #[test]
    fn postmark_summary_parses() {
        let out = "Creating files...Done\nTime:\n\t12 seconds total\n\
                   \t10 seconds of transactions (2000 per second)\n";
        assert_eq!(postmark_transactions(out), Some((10.0, 2000.0)));
        assert_eq!(postmark_transactions("nothing"), None);
        let cfg = postmark_config(&Scale::FULL.postmark_small, Path::new("/m/pm"));
        assert!(cfg.contains("set size 512 16384\n"), "{cfg}");
        assert!(cfg.contains("set number 10000\nset transactions 20000\n"));
        assert!(cfg.ends_with("run\nquit\n"));
    }

    #[test]
    fn workloads_and_phases_match() {
        let mut seen = vec![0; PHASES.len()];
        for (_, phases) in WORKLOADS {
            for &p in phases {
                seen[p] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
        assert_eq!(select_workloads("all").unwrap().len(), WORKLOADS.len());
        assert_eq!(select_workloads("sqlite, git").unwrap(), vec![7, 9]);
        assert!(select_workloads("tpc-c").is_err());
        assert_eq!(crate::systems::select(DEFAULT_SYSTEMS).unwrap().len(), 17);
        assert_eq!(WORKLOADS[select_workloads("kv").unwrap()[0]].1.len(), 3);
    }

    /// The driver runs each application off a mount and checks what it
    /// wrote; asked for a stream there (or in a build without streams), it
    /// fails saying so.
    #[test]
    fn the_driver_runs_the_applications_and_refuses_a_stream_plainly() {
        if let Some(why) = python_module("sqlite3", "python3") {
            eprintln!("skipping: {why}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (driver, python) = driver_files(dir.path()).unwrap();
        let drive = |args: &[&str]| {
            let work = tempfile::tempdir_in(dir.path()).unwrap();
            let out = Command::new("python3")
                .arg(&driver)
                .args(args)
                .current_dir(work.path())
                .env("PYTHONPATH", &python)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            (out.status.success(), stderr)
        };
        for mode in ["DELETE", "WAL"] {
            let (ok, stderr) = drive(&["sqlite", mode, "5", "120"]);
            assert!(ok, "{mode}: {stderr}");
        }
        if python_module("plyvel", "python3-plyvel").is_none() {
            let (ok, stderr) = drive(&["leveldb", "5", "100"]);
            assert!(ok, "{stderr}");
        }
        let (ok, stderr) = drive(&["postmark", "20", "50", "500", "10000"]);
        assert!(ok, "{stderr}");
        let (ok, stderr) = drive(&["--stream", "sqlite", "WAL", "5", "120"]);
        assert!(!ok && stderr.contains("--stream: "), "{stderr}");
        let (ok, stderr) = drive(&["sqlite", "BOGUS", "5", "120"]);
        assert!(
            !ok && stderr.contains("journal_mode is delete, not BOGUS"),
            "{stderr}"
        );
    }

    /// imap-pg runs on stitchfs systems alone, imap-mbox on every one.
    #[test]
    fn patchgroups_apply_to_stitchfs_only() {
        let check = |sys: &str, workload: &str, expect: Option<&str>| {
            let sys = crate::systems::select(sys).unwrap()[0];
            assert_eq!(
                unfit(workload, sys).as_deref(),
                expect,
                "{} {workload}",
                sys.id
            );
        };
        for sys in ["stitchfs", "stitchfs-softupdates", "stitchfs-async"] {
            check(sys, "imap-pg", None);
        }
        check(
            "ext4",
            "imap-pg",
            Some("not applicable: imap-pg uses patchgroups, which ext4 data=ordered does not have"),
        );
        check(
            "fuse-floor",
            "imap-pg",
            Some("not applicable: imap-pg uses patchgroups, which FUSE floor does not have"),
        );
        for sys in ["ext4", "fuse2fs", "stitchfs"] {
            check(sys, "imap-mbox", None);
        }
    }

    /// The kv workload end to end on ext4, small: every phase measured,
    /// with its latencies, and its table in the report.
    #[test]
    fn kv_runs_on_a_kernel_file_system() {
        let sys = crate::systems::select("ext4").unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let cfg = Config {
            scale: Scale {
                image_bytes: 64 << 20,
                kv_requests: 40,
                probe_samples: 4,
                probe_bytes: 1 << 20,
                ..Scale::QUICK
            },
            runs: 1,
            systems: sys,
            workloads: select_workloads("kv").unwrap(),
            scratch: scratch.path().to_path_buf(),
            timeout: Duration::from_secs(120),
            inputs: Inputs {
                tree: None,
                project: None,
            },
        };
        let missing = workload_missing(cfg.workloads[0], &cfg);
        if let Some(why) = cfg.systems[0].missing().or(missing) {
            eprintln!("skipping: {why}");
            return;
        }
        let r = run(&cfg, |_| {}).unwrap();
        let phases: Vec<&str> = r.cells.iter().map(|c| c.phase).collect();
        assert_eq!(
            phases,
            [
                "KV PUT, 1 client",
                "KV PUT, 4 clients",
                "KV PUT, 16 clients"
            ]
        );
        for c in &r.cells {
            assert_eq!(c.summary.error, None, "{}", c.phase);
            assert!(c.figure.is_some_and(|x| x > 0.0), "{}", c.phase);
            let (median, p99) = (c.latency_median_s.unwrap(), c.latency_p99_s.unwrap());
            assert!(0.0 < median && median <= p99, "{}: {median} {p99}", c.phase);
        }
        let text = table(&r);
        assert!(
            text.contains("| KV PUT, 16 clients | ext4 data=ordered | "),
            "{text}"
        );
    }

    #[test]
    fn dovecot_listens_on_loopback_only() {
        let c = dovecot_config(14301, Path::new("/m/mail"), Path::new("/r"), 8, 8);
        assert!(c.contains("listen = 127.0.0.1\n"), "{c}");
        assert!(c.contains("address = 127.0.0.1\n    port = 14301\n"), "{c}");
        assert!(c.contains("home=/m/mail/%u\n"), "{c}");
        assert!(c.contains("base_dir = /r/base\n"), "{c}");
    }
}
