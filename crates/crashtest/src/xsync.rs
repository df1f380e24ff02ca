//! Workloads with external synchrony ("Rethink the Sync"): some steps run
//! in the group (`x/` in a spec), whose fsyncs and syncs return at once,
//! and whose output (`+output`) is released only after a commit. Other
//! steps are an outside process's, with fsyncs that mean what they say.
//!
//! Without streams they are judged as any workload is: each crash image
//! against the oracle's states, where an output is a whole flush (what
//! the mount's commit is, `MemFs::sync_through`) and a member's fsync is
//! nothing. A commit that skipped a flush it owed, or a point taken
//! before the change, shows as an image after the output that lacks a
//! change the oracle made durable. With [`with_streams`] the group is
//! also stream 1 (`stitchfs xsync --stream`) and the outside process
//! stream 2, and the streams judge holds every crash to the streams'
//! prefixes and to the group's promise: after a released output, every
//! change the group made before it is on disk; a member's fsync promises
//! nothing.

use crate::streams::{distinct, replayable_ops};
use crate::workload::{Persist, Step, Workload};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Workloads written for the cases that matter: an output after fsyncs
/// that returned at once, an outside fsync between a member's changes, a
/// member's rename of a file an outsider wrote, a member's removal
/// released before an outsider's create in the same directory.
pub fn named() -> Vec<Workload> {
    [
        "gen:x/creat:E,x/append:E:3000+fsync:E,x/rename:E:A+output,x/append:B:100+fsync:B",
        "gen:x/append:A:4000+fsync:A,append:B:100+fsync:B,x/truncate:A:1000,x/creat:E+output",
        "gen:append:B:6000,x/rename:B:D/B+sync,creat:E+fsync:E,x/chmod:A:600+output",
        "gen:x/unlink:A+output,creat:F+fsync:/,x/mkdir:E,x/rename:D/C:E/C+output",
    ]
    .into_iter()
    .map(|s| crate::workload::parse(s).expect("a valid external-synchrony workload"))
    .collect()
}

/// `count` distinct workloads of `len` steps drawn with `seed`, each step
/// the group's (six in ten) or an outsider's. A member's step is followed
/// by an output, an fsync or a sync (both returning at once) or nothing;
/// an outsider's by an fsync, a sync or nothing. Each workload has an
/// output.
pub fn generated(len: usize, count: usize, seed: u64) -> Vec<Workload> {
    draw(len, count, seed, false)
}

/// As [`generated`], with the group in stream 1 and the outside process
/// in stream 2.
pub fn with_streams(len: usize, count: usize, seed: u64) -> Vec<Workload> {
    draw(len, count, seed ^ 0x5354, true)
}

fn draw(len: usize, count: usize, seed: u64, stream: bool) -> Vec<Workload> {
    let ops = replayable_ops();
    let len = len.min(crate::streams::MAX_STEPS);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x0058_5359_4e43);
    distinct(count, || {
        let mut steps: Vec<Step> = Vec::with_capacity(len);
        while steps.len() < len {
            let action = ops.choose(&mut rng).expect("operations").clone();
            let member = rng.gen_bool(0.6);
            let fsync = || match crate::streams::paths(&action).last() {
                Some(p) => Persist::Fsync(p.to_string()),
                None => Persist::None,
            };
            let persist = match (member, rng.gen_range(0..10)) {
                (true, 0..=2) => Persist::Output,
                (_, 3) => fsync(),
                (_, 4) => Persist::Sync,
                _ => Persist::None,
            };
            steps.push(Step {
                action,
                persist,
                stream: stream.then_some(if member { 1 } else { 2 }),
                proc: 0,
                pg: Vec::new(),
                xsync: member,
            });
            if !crate::workload::valid(&steps) {
                steps.pop();
                if steps.is_empty() || rng.gen_bool(0.1) {
                    break;
                }
            }
        }
        let output = steps.iter().any(|s| s.persist == Persist::Output);
        (steps.len() == len && output).then_some(steps)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_round_trip_and_every_draw_has_an_output() {
        for w in named()
            .into_iter()
            .chain(generated(8, 20, 3))
            .chain(with_streams(8, 20, 3))
        {
            assert_eq!(crate::workload::parse(&w.name).unwrap(), w);
            assert!(
                w.steps.iter().any(|s| s.persist == Persist::Output),
                "{}",
                w.name
            );
        }
        let s = with_streams(8, 5, 1);
        assert!(s
            .iter()
            .flat_map(|w| &w.steps)
            .all(|st| st.xsync == (st.stream == Some(1))));
    }
}
