//! `stitchfs bench mount`: McoreFS §6's workloads through a mounted file
//! system, stitchfs beside the kernel's ext4, fuse2fs, bindfs and the FUSE
//! floor ([`super::systems`], [`stitch_floor`]). The workloads run in this process with `std::fs`
//! on the mount point, so every system is driven by the same system calls:
//!
//! - **smallfile** (McoreFS): per file, create, write 1 KB, fsync, close,
//!   unlink; the files spread over 100 directories made beforehand. Files/s.
//! - **largefile** (McoreFS, after LFS): write one 100 MB file sequentially
//!   in 1 MiB writes, then fsync. MB/s, the fsync included.
//! - **mailbench** (McoreFS's qmail-like mailbench-p, 6 fsyncs a message),
//!   on two threads, each with its own spool and mailbox. Per message M:
//!   1. write `spool/tmp/M` (the 2 KiB message), fsync it;
//!   2. rename it to `spool/mess/M`, fsync `spool/mess`;
//!   3. write the envelope `spool/tmp/eM`, fsync it;
//!   4. rename it to `spool/todo/M`, fsync `spool/todo`;
//!   5. deliver: read both back, write `mail/tmp/M`, fsync it;
//!   6. rename it to `mail/new/M`, fsync `mail/new`;
//!
//!   then dequeue: unlink `spool/todo/M` and `spool/mess/M` (no fsync).
//!   Messages/s over both threads.
//! - **mailbox**: mailbench again, after each thread's `mail/cur` has been
//!   filled with messages already read (untimed, made durable). A mail
//!   server's file system holds many files besides the few it is writing;
//!   this is where a cost that grows with the files held (in memory or in
//!   a directory) shows.
//! - **create / stat / unlink**: N empty files in one directory: create
//!   all; unmount, drop caches and mount again; stat all (cold), stat all
//!   again (warm); unlink all. Operations/s per phase.
//!
//! Each workload runs on storage formatted fresh, with the caches dropped
//! before mount. A phase's rate is its operations over its own wall time.
//! Its counts (CPU, bytes written, flushes) run from its start to the start
//! of the next phase, or to the end of the unmount that follows it, so the
//! write-back a phase leaves behind is charged to it. Runs repeat the whole
//! set (each workload's systems back to back); a cell is the median of its
//! runs, and a ratio is the median of the per-run ratios.

use super::session::{self, Suite};
use super::systems::Place;
use super::workload::{write_synced, Run};
use anyhow::Context;
use serde::Serialize;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

mod report;

pub use report::{table, Report};

/// The systems the suite compares by default (`--systems` picks others).
pub const DEFAULT_SYSTEMS: &str = "stitchfs,stitchfs-softupdates,ext4,fuse2fs,bindfs,fuse-floor";

/// One row of the results: a workload, or a phase of one.
pub struct Phase {
    pub name: &'static str,
    pub unit: &'static str,
    /// fsyncs per operation, for the device floor (0: not fsync-bound).
    pub fsyncs: f64,
}

pub const PHASES: [Phase; 8] = [
    Phase {
        name: "smallfile",
        unit: "files/s",
        fsyncs: 1.0,
    },
    Phase {
        name: "largefile",
        unit: "MB/s",
        fsyncs: 0.0,
    },
    Phase {
        name: "mailbench",
        unit: "messages/s",
        fsyncs: 6.0,
    },
    Phase {
        name: "create",
        unit: "files/s",
        fsyncs: 0.0,
    },
    Phase {
        name: "stat (cold)",
        unit: "stats/s",
        fsyncs: 0.0,
    },
    Phase {
        name: "stat (warm)",
        unit: "stats/s",
        fsyncs: 0.0,
    },
    Phase {
        name: "unlink",
        unit: "files/s",
        fsyncs: 0.0,
    },
    Phase {
        name: "mailbench (full mailbox)",
        unit: "messages/s",
        fsyncs: 6.0,
    },
];

const SMALLFILE: usize = 0;
const LARGEFILE: usize = 1;
const MAILBENCH: usize = 2;
const CREATE: usize = 3;
const STAT_COLD: usize = 4;
const STAT_WARM: usize = 5;
const UNLINK: usize = 6;
const MAILBOX: usize = 7;

/// The workloads, in order, with the phases each reports.
pub const WORKLOADS: [(&str, &[usize]); 5] = [
    ("smallfile", &[SMALLFILE]),
    ("largefile", &[LARGEFILE]),
    ("mailbench", &[MAILBENCH]),
    ("metadata", &[CREATE, STAT_COLD, STAT_WARM, UNLINK]),
    ("mailbox", &[MAILBOX]),
];

/// The workloads named by a comma-separated list (`all` for every one),
/// as indices into [`WORKLOADS`].
pub fn select_workloads(list: &str) -> anyhow::Result<Vec<usize>> {
    session::select_workloads(&WORKLOADS, list)
}

/// Sizes of one run.
#[derive(Clone, Debug, Serialize)]
pub struct Scale {
    pub image_bytes: u64,
    pub smallfile_files: usize,
    pub smallfile_dirs: usize,
    pub largefile_bytes: u64,
    pub mail_threads: usize,
    /// Messages per thread.
    pub mail_messages: usize,
    pub message_bytes: usize,
    /// Messages already in each thread's mailbox before mailbox's run.
    pub mailbox_messages: usize,
    pub meta_files: usize,
    /// The device probe: latency samples and sequential bytes.
    pub probe_samples: usize,
    pub probe_bytes: u64,
}

impl Scale {
    pub const FULL: Scale = Scale {
        image_bytes: 2 << 30,
        smallfile_files: 2_000,
        smallfile_dirs: 100,
        largefile_bytes: 100_000_000,
        mail_threads: 2,
        mail_messages: 150,
        message_bytes: 2048,
        mailbox_messages: 10_000,
        meta_files: 10_000,
        probe_samples: 200,
        probe_bytes: 256 << 20,
    };

    pub const QUICK: Scale = Scale {
        image_bytes: 256 << 20,
        smallfile_files: 50,
        smallfile_dirs: 10,
        largefile_bytes: 16_000_000,
        mail_threads: 2,
        mail_messages: 5,
        message_bytes: 2048,
        mailbox_messages: 100,
        meta_files: 300,
        probe_samples: 20,
        probe_bytes: 32 << 20,
    };
}

/// What a run needs.
pub type Config = session::Config<Scale>;

/// What was run, for the report.
pub type Settings = session::Settings<Scale>;

/// Runs every workload on every available system `cfg.runs` times,
/// measuring the device before each run.
pub fn run(cfg: &Config, mut progress: impl FnMut(&str)) -> anyhow::Result<Report> {
    let scratch = session::scratch(cfg)?;
    let place = Place::new(scratch.path())?;
    let m = session::measure(
        cfg,
        &Mount(&cfg.scale),
        scratch.path(),
        &place,
        &mut progress,
    )?;
    Ok(report::build(Settings::new(cfg, &m, ()), m))
}

/// The suite, as its session runs it.
struct Mount<'a>(&'a Scale);

impl Suite for Mount<'_> {
    const WORKLOADS: &'static [(&'static str, &'static [usize])] = &WORKLOADS;

    fn phase_name(p: usize) -> &'static str {
        PHASES[p].name
    }

    fn storage(&self) -> (u64, usize, u64) {
        let s = self.0;
        (s.image_bytes, s.probe_samples, s.probe_bytes)
    }

    fn workload(&self, w: usize, run: &mut Run) -> anyhow::Result<()> {
        let s = self.0;
        match w {
            0 => smallfile(run, s),
            1 => largefile(run, s),
            2 => mailbench(run, s, MAILBENCH, 0),
            3 => metadata(run, s),
            _ => mailbench(run, s, MAILBOX, s.mailbox_messages),
        }
    }
}

fn at(root: &Path, what: impl AsRef<Path>) -> PathBuf {
    root.join(what)
}

fn smallfile(run: &mut Run, s: &Scale) -> anyhow::Result<()> {
    let dirs = s.smallfile_dirs.max(1);
    run.setup(SMALLFILE, |root| {
        for d in 0..dirs {
            std::fs::create_dir(at(root, format!("d{d}")))?;
        }
        Ok(())
    })?;
    let kb = [0x6bu8; 1024];
    run.timed(SMALLFILE, |root| {
        for i in 0..s.smallfile_files {
            let p = at(root, format!("d{}/f{i}", i % dirs));
            write_synced(&p, &kb)?;
            std::fs::remove_file(&p).with_context(|| format!("unlink {}", p.display()))?;
        }
        Ok(s.smallfile_files as f64)
    })
}

fn largefile(run: &mut Run, s: &Scale) -> anyhow::Result<()> {
    run.timed(LARGEFILE, |root| {
        let p = at(root, "large");
        let mut f = File::create(&p).with_context(|| format!("create {}", p.display()))?;
        let chunk = vec![0x4cu8; 1 << 20];
        let mut left = s.largefile_bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            f.write_all(&chunk[..n]).context("write")?;
            left -= n as u64;
        }
        f.sync_all().context("fsync")?;
        Ok(s.largefile_bytes as f64 / 1e6)
    })
}

const SPOOL_DIRS: [&str; 3] = ["tmp", "mess", "todo"];
const MAIL_DIRS: [&str; 3] = ["tmp", "new", "cur"];

/// mailbench as `phase`, each thread's `mail/cur` holding `held` messages.
fn mailbench(run: &mut Run, s: &Scale, phase: usize, held: usize) -> anyhow::Result<()> {
    run.setup(phase, |root| {
        let body = vec![b'o'; s.message_bytes];
        for t in 0..s.mail_threads {
            for d in SPOOL_DIRS {
                std::fs::create_dir_all(at(root, format!("spool{t}/{d}")))?;
            }
            for d in MAIL_DIRS {
                std::fs::create_dir_all(at(root, format!("mail{t}/{d}")))?;
            }
            for m in 0..held {
                let p = at(root, format!("mail{t}/cur/old{m}:2,S"));
                std::fs::write(&p, &body).with_context(|| format!("write {}", p.display()))?;
            }
        }
        Ok(())
    })?;
    run.timed(phase, |root| {
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..s.mail_threads)
                .map(|t| scope.spawn(move || deliver_all(root, t, s)))
                .collect();
            for w in workers {
                w.join().expect("mailbench worker panicked")?;
            }
            Ok((s.mail_threads * s.mail_messages) as f64)
        })
    })
}

/// One mailbench worker: its messages, 6 fsyncs each (see the module doc).
fn deliver_all(root: &Path, t: usize, s: &Scale) -> anyhow::Result<()> {
    let spool = at(root, format!("spool{t}"));
    let mail = at(root, format!("mail{t}"));
    let open = |p: PathBuf| File::open(&p).with_context(|| format!("open {}", p.display()));
    let (mess, todo, new) = (
        open(spool.join("mess"))?,
        open(spool.join("todo"))?,
        open(mail.join("new"))?,
    );
    let dir_sync = |d: &File, what: &str| d.sync_all().with_context(|| format!("fsync {what}"));
    let rename = |a: &PathBuf, b: &PathBuf| {
        std::fs::rename(a, b).with_context(|| format!("rename {} to {}", a.display(), b.display()))
    };
    let body = vec![b'm'; s.message_bytes];
    for m in 0..s.mail_messages {
        let tmp = spool.join(format!("tmp/{m}"));
        let queued = spool.join(format!("mess/{m}"));
        write_synced(&tmp, &body)?;
        rename(&tmp, &queued)?;
        dir_sync(&mess, "spool/mess")?;
        let env_tmp = spool.join(format!("tmp/e{m}"));
        let env = spool.join(format!("todo/{m}"));
        write_synced(
            &env_tmp,
            format!("F<bench@localhost>\nTu{t}@localhost\n").as_bytes(),
        )?;
        rename(&env_tmp, &env)?;
        dir_sync(&todo, "spool/todo")?;
        // Delivery, as the queue manager does it.
        let rcpt = std::fs::read(&env).context("read envelope")?;
        anyhow::ensure!(!rcpt.is_empty(), "empty envelope {}", env.display());
        let msg = std::fs::read(&queued).context("read message")?;
        let delivered_tmp = mail.join(format!("tmp/{m}"));
        write_synced(&delivered_tmp, &msg)?;
        rename(&delivered_tmp, &mail.join(format!("new/{m}")))?;
        dir_sync(&new, "mail/new")?;
        std::fs::remove_file(&env).context("dequeue envelope")?;
        std::fs::remove_file(&queued).context("dequeue message")?;
    }
    Ok(())
}

fn metadata(run: &mut Run, s: &Scale) -> anyhow::Result<()> {
    let n = s.meta_files;
    let name = |root: &Path, i: usize| at(root, format!("meta/f{i}"));
    run.setup(CREATE, |root| Ok(std::fs::create_dir(at(root, "meta"))?))?;
    run.timed(CREATE, |root| {
        for i in 0..n {
            let p = name(root, i);
            File::create(&p).with_context(|| format!("create {}", p.display()))?;
        }
        Ok(n as f64)
    })?;
    run.remount()?;
    let stat_all = |root: &Path| -> anyhow::Result<f64> {
        for i in 0..n {
            let p = name(root, i);
            let m = std::fs::metadata(&p).with_context(|| format!("stat {}", p.display()))?;
            anyhow::ensure!(m.len() == 0, "{} has {} bytes", p.display(), m.len());
        }
        Ok(n as f64)
    };
    run.timed(STAT_COLD, stat_all)?;
    run.timed(STAT_WARM, stat_all)?;
    run.timed(UNLINK, |root| {
        for i in 0..n {
            let p = name(root, i);
            std::fs::remove_file(&p).with_context(|| format!("unlink {}", p.display()))?;
        }
        Ok(n as f64)
    })
}
