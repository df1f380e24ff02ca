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
    /// For a phase of requests and answers, how long the clients waited
    /// for each.
    pub latency: Option<Latency>,
}

/// The time from a request's send to its whole answer, over a phase's
/// requests.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Latency {
    /// The median (of an even count, the mean of the middle two).
    pub median_s: f64,
    /// The 99th percentile by nearest rank: the smallest time that at
    /// least 99% of the requests took no longer than.
    pub p99_s: f64,
}

impl Latency {
    /// Of these times, in seconds; `None` for none.
    pub fn of(mut times: Vec<f64>) -> Option<Latency> {
        times.sort_by(f64::total_cmp);
        let n = times.len();
        // Nearest rank: ceil(0.99 n), counted from 1.
        let rank = (n * 99).div_ceil(100).max(1);
        let p99_s = *times.get(rank - 1)?;
        Some(Latency {
            median_s: super::report::median(times)?,
            p99_s,
        })
    }
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
            latency: None,
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
    latency: Option<Latency>,
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
                    latency: o.latency,
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
            latency: None,
        });
        Ok(())
    }

    /// The request latency of the phase just timed, for its sample.
    pub fn latency(&mut self, latency: Option<Latency>) {
        if let Some(o) = &mut self.open {
            o.latency = latency;
        }
    }

    /// Checks what phase `phase`, just timed, left on the mount, untimed
    /// (its counts closed first); a failure fails the phase.
    pub fn check(
        &mut self,
        phase: usize,
        f: impl FnOnce(&Path) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let now = self.mounted().counters();
        self.close(&now);
        self.blame = phase;
        self.mounted().watched(self.ctx.timeout, f)
    }

    /// Setup for `phase`, untimed, made durable (syncfs) before the phase.
    pub fn setup(
        &mut self,
        phase: usize,
        f: impl FnOnce(&Path) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        self.check(phase, |root| {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_median_and_99th_percentile() {
        let of = |v: &[f64]| Latency::of(v.to_vec()).map(|l| (l.median_s, l.p99_s));
        assert_eq!(of(&[]), None);
        assert_eq!(of(&[5.0]), Some((5.0, 5.0)));
        // Unsorted; an even count's median is the mean of the middle two;
        // with fewer than 100 times the 99th percentile is the largest.
        assert_eq!(of(&[4.0, 1.0, 3.0, 2.0]), Some((2.5, 4.0)));
        // 1..=100: rank 99 is 99; 1..=200: rank 198 is 198; 1..=101: rank
        // ceil(99.99) = 100 is 100.
        let upto = |n: usize| (1..=n).rev().map(|x| x as f64).collect::<Vec<_>>();
        assert_eq!(of(&upto(100)), Some((50.5, 99.0)));
        assert_eq!(of(&upto(200)), Some((100.5, 198.0)));
        assert_eq!(of(&upto(101)), Some((51.0, 100.0)));
        // Ten slow requests in a thousand stay out of the 99th percentile;
        // eleven do not.
        let mut v = vec![0.001; 1000];
        v[17] = 1.0;
        v[..9].fill(1.0);
        assert_eq!(of(&v), Some((0.001, 0.001)));
        v[9] = 1.0;
        assert_eq!(of(&v), Some((0.001, 1.0)));
    }
}
