//! Runs of a mount suite (`bench mount`, `bench seeds`) over its systems;
//! one workload on one system is [`super::workload`]'s, what the runs come
//! to is [`super::report`]'s.

use super::systems::System;
use super::workload::Outcome;

/// The systems that cannot run here, each with why (`None`: it can); said
/// on stderr.
pub(super) fn unavailable(systems: &[&'static System]) -> Vec<Option<String>> {
    let skipped: Vec<Option<String>> = systems.iter().map(|sys| sys.missing()).collect();
    for (sys, why) in systems.iter().zip(&skipped) {
        if let Some(why) = why {
            eprintln!("skipping {}: {why}", sys.label);
        }
    }
    skipped
}

/// Run `r` of one workload (`phases`) on every system: each phase's outcome
/// goes to `samples[system][phase]` (`None` for a skipped system), failures
/// are said on stderr too. Returns whether every run dropped the caches.
#[allow(clippy::too_many_arguments)]
pub(super) fn on_every_system(
    r: usize,
    wname: &str,
    phases: &[usize],
    phase_name: impl Fn(usize) -> &'static str,
    systems: &[&'static System],
    skipped: &[Option<String>],
    samples: &mut [Vec<Vec<Option<Outcome>>>],
    progress: &mut impl FnMut(&str),
    mut run: impl FnMut(&'static System) -> (Vec<(usize, Outcome)>, bool),
) -> bool {
    let mut caches_dropped = true;
    for (i, &sys) in systems.iter().enumerate() {
        progress(&format!("run {r}: {wname} / {}", sys.label));
        if skipped[i].is_some() {
            for &p in phases {
                samples[i][p].push(None);
            }
            continue;
        }
        let (out, dropped) = run(sys);
        caches_dropped &= dropped;
        for (p, o) in out {
            if let Err(e) = &o {
                if !e.starts_with("not run") {
                    eprintln!("{} on {}, run {r}: {e}", phase_name(p), sys.label);
                }
            }
            samples[i][p].push(Some(o));
        }
    }
    caches_dropped
}
