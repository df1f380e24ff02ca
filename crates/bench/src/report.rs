//! Medians, ratios and report pieces the mount suites share (`bench
//! mount`, `bench seeds`).

use super::systems::{self, System};

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
