//! One workload on one mounted system, timed phase by phase: what a mount
//! suite (`bench mount`, `bench seeds`) writes its workloads against.
//!
//! A workload runs on storage formatted fresh, with the caches dropped
//! before mount. A phase's figure is its amount of work over its own wall
//! time. Its counts (CPU, bytes written, flushes) run from its start to the
//! start of the next phase, or to the end of the unmount that follows it,
//! so the write-back a phase leaves behind is charged to it.

use super::systems::{self, Launch, Mounted, Place, System, Usage};
use anyhow::Context;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// One run of one phase on one system.
#[derive(Clone, Debug)]
pub(super) struct Sample {
    /// Operations (MB, transactions, …: the phase's unit).
    pub amount: f64,
    pub seconds: f64,
    pub usage: Usage,
}

impl Sample {
    pub fn rate(&self) -> f64 {
        self.amount / self.seconds
    }
}

#[cfg(test)]
impl Sample {
    /// `amount` of work in `seconds`, with no counts (for the reports'
    /// tests).
    pub fn ran(amount: f64, seconds: f64) -> Sample {
        Sample {
            amount,
            seconds,
            usage: Usage::default(),
        }
    }
}

/// A run's sample, or why it failed.
pub(super) type Outcome = Result<Sample, String>;

/// Where and how a workload runs.
pub(super) struct Ctx<'a> {
    pub sys: &'static System,
    pub place: &'a Place,
    pub image_bytes: u64,
    /// A phase taking longer than this counts as hung.
    pub timeout: Duration,
}

impl Ctx<'_> {
    /// Runs `body` on fresh storage: an outcome for each of `phases`, and
    /// whether the caches were dropped. A failure is charged to the phase
    /// running then (`name` names phases in messages); phases after it
    /// are "not run".
    pub fn workload(
        &self,
        phases: &[usize],
        name: impl Fn(usize) -> String,
        body: impl FnOnce(&mut Run) -> anyhow::Result<()>,
    ) -> (Vec<(usize, Outcome)>, bool) {
        let mut run = Run {
            ctx: self,
            mounted: None,
            open: None,
            blame: phases[0],
            done: Vec::new(),
            dropped: true,
        };
        let result = run.start().and_then(|()| {
            body(&mut run)?;
            run.unmount()
        });
        let mut out = std::mem::take(&mut run.done);
        let failed = match result {
            Ok(()) => None,
            Err(e) => {
                out.retain(|(p, _)| *p != run.blame);
                out.push((run.blame, Err(format!("{e:#}"))));
                Some(name(run.blame))
            }
        };
        for &p in phases {
            if !out.iter().any(|(q, _)| *q == p) {
                let why = failed.clone().unwrap_or_else(|| "an earlier phase".into());
                out.push((p, Err(format!("not run: {why} failed"))));
            }
        }
        out.sort_by_key(|(p, _)| *p);
        (out, run.dropped)
    }
}

/// One workload on one system: the mount, the phase whose counts are still
/// running, and what is done.
pub(super) struct Run<'a> {
    ctx: &'a Ctx<'a>,
    mounted: Option<Mounted>,
    open: Option<Open>,
    /// The phase an error now would belong to.
    blame: usize,
    done: Vec<(usize, Outcome)>,
    dropped: bool,
}

/// A timed phase whose counts have not been closed yet.
struct Open {
    phase: usize,
    before: systems::Counters,
    amount: f64,
    seconds: f64,
}

impl Run<'_> {
    fn mounted(&self) -> &Mounted {
        self.mounted
            .as_ref()
            .expect("mounted between start and finish")
    }

    /// Fresh storage, caches dropped, mounted.
    fn start(&mut self) -> anyhow::Result<()> {
        let c = self.ctx;
        c.sys.format(c.place, c.image_bytes).context("format")?;
        self.mount()
    }

    fn mount(&mut self) -> anyhow::Result<()> {
        self.dropped &= systems::drop_caches();
        self.mounted = Some(self.ctx.sys.mount(self.ctx.place).context("mount")?);
        Ok(())
    }

    /// Closes the open phase's counts at `after`.
    fn close(&mut self, after: &systems::Counters) {
        if let Some(o) = self.open.take() {
            let usage = after.since(&o.before);
            self.done.push((
                o.phase,
                Ok(Sample {
                    amount: o.amount,
                    seconds: o.seconds,
                    usage,
                }),
            ));
        }
    }

    /// How the system runs the workload's programs.
    pub fn launch(&self) -> Launch {
        self.ctx.sys.launch()
    }

    /// Runs `f` on the mount as phase `phase`; `f` returns its amount of
    /// work (the phase's unit).
    pub fn timed(
        &mut self,
        phase: usize,
        f: impl FnOnce(&Path) -> anyhow::Result<f64>,
    ) -> anyhow::Result<()> {
        let before = self.mounted().counters();
        self.close(&before);
        self.blame = phase;
        let t = Instant::now();
        let amount = self.mounted().watched(self.ctx.timeout, f)?;
        let seconds = t.elapsed().as_secs_f64();
        self.open = Some(Open {
            phase,
            before,
            amount,
            seconds,
        });
        Ok(())
    }

    /// Setup for `phase`, untimed, made durable (syncfs) before the phase.
    pub fn setup(
        &mut self,
        phase: usize,
        f: impl FnOnce(&Path) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let now = self.mounted().counters();
        self.close(&now);
        self.blame = phase;
        self.mounted().watched(self.ctx.timeout, |root| {
            f(root)?;
            syncfs(root)
        })
    }

    fn unmount(&mut self) -> anyhow::Result<()> {
        if let Some(o) = &self.open {
            self.blame = o.phase;
        }
        let after = self.mounted.take().expect("mounted").unmount()?;
        self.close(&after);
        Ok(())
    }

    /// Unmounts (closing the open phase's counts after it), drops caches,
    /// mounts again.
    pub fn remount(&mut self) -> anyhow::Result<()> {
        self.unmount()?;
        self.mount()
    }
}

pub(super) fn syncfs(dir: &Path) -> anyhow::Result<()> {
    let f = File::open(dir)?;
    // SAFETY: syncfs on a descriptor we own.
    if unsafe { libc::syncfs(f.as_raw_fd()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("syncfs");
    }
    // The kernel sends no syncfs to a FUSE server: stitchfs is asked
    // directly (other systems answer ENOTTY and have nothing more to do,
    // or, like fuse2fs, no way to be asked).
    stitch_control::request_sync(&f).context("stitchfs sync ioctl")?;
    Ok(())
}

/// A file written with `data`, then fsynced, and closed.
pub(super) fn write_synced(path: &Path, data: &[u8]) -> anyhow::Result<()> {
    let mut f = File::create(path).with_context(|| format!("create {}", path.display()))?;
    f.write_all(data)
        .with_context(|| format!("write {}", path.display()))?;
    f.sync_all()
        .with_context(|| format!("fsync {}", path.display()))
}
