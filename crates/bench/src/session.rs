//! Runs, medians, ratios and report pieces the mount suites share (`bench
//! mount`, `bench seeds`); one workload on one system is
//! [`super::workload`]'s.

use super::systems::{self, System};
use super::workload::Outcome;

/// The median (of an even count, the mean of the middle two).
pub(super) fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// A system of a report, and why it did not run, if it did not.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SystemRow {
    #[serde(deserialize_with = "crate::seeds::known_name")]
    pub id: crate::seeds::Name,
    #[serde(deserialize_with = "crate::seeds::known_name")]
    pub label: crate::seeds::Name,
    pub skipped: Option<String>,
}

impl SystemRow {
    pub(super) fn rows(systems: &[&'static System], skipped: &[Option<String>]) -> Vec<SystemRow> {
        systems
            .iter()
            .zip(skipped)
            .map(|(s, why)| SystemRow {
                id: s.id,
                label: s.label,
                skipped: why.clone(),
            })
            .collect()
    }
}

/// A figure with as many decimals as it needs.
pub(super) fn figure(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// One figure per run: `a, b, c`.
pub(super) fn runs_of(
    d: &[systems::DeviceLimits],
    f: impl Fn(&systems::DeviceLimits) -> String,
) -> String {
    d.iter().map(f).collect::<Vec<_>>().join(", ")
}

pub(super) fn ratio(x: Option<f64>) -> String {
    x.map_or("–".into(), |x| format!("{x:.2}"))
}

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
