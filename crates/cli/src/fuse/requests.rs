//! What crosses FUSE: the requests served, by opcode, each counted with
//! its errors and its latency (from the moment the request reaches our
//! handler to its reply) in a histogram, for `stitchfs stats`. Counting
//! is a handful of relaxed atomic adds a request, no lock.
//!
//! The histogram is log-linear: four buckets per power of two of
//! nanoseconds, so a percentile read from it is exact to a quarter of its
//! power of two (it reports the top of its bucket, never less than the
//! truth).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The opcodes counted, as the handlers name them.
pub const OPS: [&str; 28] = [
    "access",
    "create",
    "fsync",
    "fsyncdir",
    "getattr",
    "getxattr",
    "ioctl",
    "link",
    "listxattr",
    "lookup",
    "mkdir",
    "mknod",
    "open",
    "opendir",
    "read",
    "readdir",
    "readdirplus",
    "readlink",
    "release",
    "removexattr",
    "rename",
    "rmdir",
    "setattr",
    "setxattr",
    "statfs",
    "symlink",
    "unlink",
    "write",
];

/// Sub-buckets per power of two.
const SUB: u32 = 4;
/// Buckets: up to 2^47 ns (a day and a half) at four per power of two.
const BUCKETS: usize = 48 * SUB as usize;

/// The bucket a latency of `ns` falls in.
fn bucket(ns: u64) -> usize {
    if ns < u64::from(SUB) {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros(); // 2^e <= ns
    let sub = (ns >> (e - 2)) & u64::from(SUB - 1);
    (((e - 1) * SUB) as usize + sub as usize).min(BUCKETS - 1)
}

/// The largest latency bucket `i` holds (its top), in nanoseconds.
fn bucket_top(i: usize) -> u64 {
    if i < SUB as usize {
        return i as u64;
    }
    let e = (i as u32) / SUB + 1;
    let sub = u64::from((i as u32) % SUB);
    ((SUB as u64 + sub + 1) << (e - 2)) - 1
}

/// One opcode's figures.
struct Figures {
    count: AtomicU64,
    errors: AtomicU64,
    total_ns: AtomicU64,
    max_ns: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl Default for Figures {
    fn default() -> Figures {
        Figures {
            count: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            total_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// The requests of one mount.
pub struct Requests {
    ops: Vec<Figures>,
}

impl Default for Requests {
    fn default() -> Requests {
        Requests {
            ops: OPS.iter().map(|_| Figures::default()).collect(),
        }
    }
}

/// What a snapshot says of one opcode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpSummary {
    pub count: u64,
    pub errors: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    /// Median and 99th percentile (bucket tops, capped at the maximum).
    pub p50_ns: u64,
    pub p99_ns: u64,
}

impl Requests {
    /// Counts one `op` request that took `took`, failed or not.
    pub fn record(&self, op: &str, took: Duration, ok: bool) {
        let Some(i) = OPS.iter().position(|&o| o == op) else {
            return;
        };
        let f = &self.ops[i];
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        f.count.fetch_add(1, Relaxed);
        if !ok {
            f.errors.fetch_add(1, Relaxed);
        }
        f.total_ns.fetch_add(ns, Relaxed);
        f.max_ns.fetch_max(ns, Relaxed);
        f.buckets[bucket(ns)].fetch_add(1, Relaxed);
    }

    /// Every opcode served at least once, with its figures now.
    pub fn summary(&self) -> Vec<(&'static str, OpSummary)> {
        OPS.iter()
            .zip(&self.ops)
            .filter_map(|(&name, f)| {
                let buckets: Vec<u64> = f.buckets.iter().map(|b| b.load(Relaxed)).collect();
                let count: u64 = buckets.iter().sum();
                if count == 0 {
                    return None;
                }
                let max_ns = f.max_ns.load(Relaxed);
                let at = |q: f64| {
                    let rank = ((count as f64) * q).ceil().max(1.0) as u64;
                    let mut seen = 0;
                    for (i, n) in buckets.iter().enumerate() {
                        seen += n;
                        if seen >= rank {
                            return bucket_top(i).min(max_ns);
                        }
                    }
                    max_ns
                };
                Some((
                    name,
                    OpSummary {
                        count: f.count.load(Relaxed).max(count),
                        errors: f.errors.load(Relaxed),
                        total_ns: f.total_ns.load(Relaxed),
                        max_ns,
                        p50_ns: at(0.5),
                        p99_ns: at(0.99),
                    },
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_latency_falls_in_a_bucket_whose_top_bounds_it_within_a_quarter() {
        let mut v = 0u64;
        while v < 1 << 46 {
            let i = bucket(v);
            let top = bucket_top(i);
            assert!(top >= v, "{v} in bucket {i} topped at {top}");
            assert!(
                v >= 4 && top - v <= v / 4 || v < 4 && top == v,
                "{v}: {top}"
            );
            if i > 0 {
                assert!(bucket_top(i - 1) < v, "{v} also fits bucket {}", i - 1);
            }
            v = v * 9 / 8 + 1;
        }
    }

    #[test]
    fn percentiles_come_from_the_histogram_and_unknown_ops_are_not_counted() {
        let r = Requests::default();
        for us in 1..=100 {
            r.record("fsync", Duration::from_micros(us), us != 7);
        }
        r.record("no such op", Duration::from_secs(1), true);
        let s = r.summary();
        assert_eq!(s.len(), 1);
        let (name, f) = &s[0];
        assert_eq!(*name, "fsync");
        assert_eq!((f.count, f.errors, f.max_ns), (100, 1, 100_000));
        assert!((50_000..=62_500).contains(&f.p50_ns), "{}", f.p50_ns);
        assert!((99_000..=100_000).contains(&f.p99_ns), "{}", f.p99_ns);
        assert_eq!(f.total_ns, (1..=100u64).sum::<u64>() * 1000);
    }
}
