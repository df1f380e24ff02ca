//! The rules a recovered crash image is held to.
//!
//! A crash lands during device writes, and the only writes are those of
//! the flushes the workload triggers (mount, each persistence point, the
//! final sync, unmount; background flushes are off). A crash state can
//! arise at a range of crash points; each point is
//! either *quiet* (between two flushes: the flush before it returned) or
//! *busy* (inside a flush). The image must be acceptable at every point of
//! its range:
//!
//! - **quiet after flush f**: the tree is exactly the oracle's state after
//!   f (everything flushed so far durable, nothing else), data included, in
//!   every mode. This is where fsync's promises are checked: McoreFS's
//!   rules are in the oracle's closure, so a missing partner directory, an
//!   uninitialized inode, an orphan directory or a loop all show up as a
//!   difference. One exception, in `softupdates` only: a link count may be
//!   too high (a rename's count coming down follows its old entry's
//!   removal, and the sync does not wait for it); the checkers call it a
//!   leak. Too low is still a finding.
//! - **busy in flush f** (states S₀ … Sₖ: before, after each namespace
//!   operation taken, after the file states):
//!   - `journal`, data `journal`: exactly S₀ or Sₖ (the flush is one
//!     transaction: atomic).
//!   - data `ordered`: metadata exactly S₀ and every byte of a file old,
//!     new or zero; or everything exactly Sₖ (the commit waits for the
//!     data).
//!   - data `writeback`: metadata exactly S₀ or Sₖ; data not judged.
//!   - `softupdates` (and `async`, which must fail it): each fact on its
//!     own: a directory entry names what it named in some Sⱼ (or is absent
//!     if it was in some Sⱼ); an inode's kind, permissions, owner as in
//!     some Sⱼ; a file's size between the smallest it had since its last
//!     flush and the largest; every byte old, new or zero (no data it never
//!     wrote); a file the flush does not write is exactly as before. Link
//!     counts are left to the checkers (too high is a leak).
//!
//! And whatever the point: in journal modes e2fsck -fn exits 0 and our
//! fsck is clean; otherwise our fsck finds only leaks, e2fsck exits 0 or 4,
//! and the two agree (clean exactly when e2fsck exits 0).

use crate::check::Facts;
use crate::report::{Finding, Kind};
use crate::run::{FlushRec, Recording};
use crate::state::{cells, show_opt, Cell, Cells, FileKind, Found, State, Value};
use std::collections::BTreeSet;
use stitch_blockdev::record::CrashPoint;
use stitch_diskfs::{Consistency, DataMode};

/// Where a crash point falls.
#[derive(Clone, Copy, Debug)]
pub enum Situation<'a> {
    /// Between flushes: `state` complete, `prev` the state before the last
    /// flush (to tell lost durability from changes beyond).
    Quiet {
        state: &'a State,
        prev: &'a State,
        after: &'a str,
    },
    /// Inside a flush.
    Busy(&'a FlushRec),
}

impl Situation<'_> {
    /// What the image should be, for reports.
    pub fn expected(&self) -> String {
        match self {
            Situation::Quiet { state, after, .. } => {
                format!("after \"{after}\" returned, exactly:\n{}", state.show(None))
            }
            Situation::Busy(f) => {
                let mut s = format!(
                    "during \"{}\" (log entries {}..{}), which writes:\n",
                    f.label, f.start, f.end
                );
                for op in &f.flush.ops {
                    s.push_str(&format!("  {op}\n"));
                }
                let n = f.flush.states.len();
                for (j, st) in f.flush.states.iter().enumerate() {
                    let what = if j == 0 {
                        "before".to_string()
                    } else if j + 1 == n {
                        "after (with file states)".to_string()
                    } else {
                        format!("after operation {j}")
                    };
                    s.push_str(&format!("state S{j} ({what}):\n{}", st.show(None)));
                }
                s
            }
        }
    }
}

impl Situation<'_> {
    /// `Tree::diff` lines between `found` and the state(s) expected.
    pub fn diffs(&self, found: &Found) -> String {
        let got = found.state.to_tree(Some(&found.links));
        let against = |name: &str, want: &State| {
            let d = got.diff(&want.to_tree(None));
            let mut s = format!("found vs {name}: {} difference(s)\n", d.len());
            for line in d {
                s.push_str(&format!("  {line}\n"));
            }
            s
        };
        match self {
            Situation::Quiet { state, after, .. } => against(&format!("after \"{after}\""), state),
            Situation::Busy(f) => {
                against(&format!("before \"{}\"", f.label), f.flush.before())
                    + &against(&format!("after \"{}\"", f.label), f.flush.after())
            }
        }
    }
}

/// The situations of the crash points `a..=b`.
pub fn situations(rec: &Recording, a: CrashPoint, b: CrashPoint) -> Vec<Situation<'_>> {
    let (a, b) = (a.0, b.0);
    let mut out = Vec::new();
    let fl = &rec.flushes;
    if let Some(first) = fl.first() {
        if a <= first.start {
            out.push(Situation::Quiet {
                state: first.flush.before(),
                prev: first.flush.before(),
                after: "start",
            });
        }
    }
    for (i, f) in fl.iter().enumerate() {
        if f.end >= f.start + 2 && a < f.end && b > f.start {
            out.push(Situation::Busy(f));
        }
        let next = fl.get(i + 1).map_or(rec.log.len(), |n| n.start);
        if a <= next && b >= f.end {
            out.push(Situation::Quiet {
                state: f.flush.after(),
                prev: f.flush.before(),
                after: &f.label,
            });
        }
    }
    out
}

/// Everything wrong with an image whose facts are `facts`, in `mode`, for
/// a crash in `sits`.
pub fn judge(mode: Consistency, facts: &Facts, sits: &[Situation<'_>]) -> Vec<Finding> {
    let mut out = checkers(mode, facts);
    let found = match &facts.tree {
        Ok(f) => f,
        Err(e) => {
            out.push(Finding {
                kind: Kind::Recovery,
                message: format!("stitchfs could not recover the image: {e}"),
            });
            return out;
        }
    };
    for p in &found.problems {
        out.push(Finding {
            kind: Kind::Corruption,
            message: p.clone(),
        });
    }
    for s in sits {
        match s {
            Situation::Quiet { state, prev, after } => {
                let counts_may_lag = matches!(mode, Consistency::SoftUpdates);
                exact(found, state, prev, after, counts_may_lag, &mut out)
            }
            Situation::Busy(f) => busy(mode, found, f, &mut out),
        }
    }
    out
}

/// What e2fsck and our fsck say of the image, held to the mode.
pub fn checkers(mode: Consistency, facts: &Facts) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut push = |kind, message: String| out.push(Finding { kind, message });
    let journal = matches!(mode, Consistency::Journal(_));
    let (v, e2) = match (&facts.fsck, &facts.e2fsck) {
        (Ok(v), Ok(e2)) => (v, e2),
        (Err(e), _) => {
            push(
                Kind::Recovery,
                format!("stitchfs fsck could not check: {e}"),
            );
            return out;
        }
        (_, Err(e)) => {
            push(Kind::Harness, format!("e2fsck could not run: {e}"));
            return out;
        }
    };
    let clean = v.corruptions == 0 && v.leaks == 0;
    let code = e2.0;
    if v.corruptions > 0 {
        push(
            Kind::Corruption,
            format!("stitchfs fsck finds {} corruption(s)", v.corruptions),
        );
    }
    if journal {
        if v.corruptions == 0 && v.leaks > 0 {
            push(
                Kind::Leak,
                format!("stitchfs fsck finds {} leak(s) in a journal mode", v.leaks),
            );
        }
        if code != 0 {
            push(Kind::Corruption, format!("e2fsck -fn exits {code}"));
        }
    } else if code != 0 && code != 4 {
        push(Kind::Corruption, format!("e2fsck -fn exits {code}"));
    }
    if clean && code != 0 {
        push(
            Kind::CheckersDisagree,
            format!("stitchfs fsck is clean, e2fsck -fn exits {code}"),
        );
    }
    if v.corruptions > 0 && code == 0 {
        push(
            Kind::CheckersDisagree,
            "stitchfs fsck finds corruption, e2fsck -fn exits 0".to_string(),
        );
    }
    out
}

/// The facts of `found` and of `want` that can be compared: entries of
/// directories both hold, attributes of inodes both hold (an inode or
/// directory one side lacks shows as the entry naming it).
fn compare(found: &Found, want: &State) -> Vec<(Cell, Option<Value>, Option<Value>)> {
    let a = cells(&found.state, &found.links);
    let b = cells(want, &want.links());
    let both =
        |c: &Cell| found.state.inodes.contains_key(&c.ino()) && want.inodes.contains_key(&c.ino());
    let keys: BTreeSet<&Cell> = a.keys().chain(b.keys()).filter(|c| both(c)).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| (k.clone(), a.get(k).cloned(), b.get(k).cloned()))
        .collect()
}

/// Whether `bytes` (an image file's) has a byte that is neither zero nor
/// the byte at that offset in one of `sources`.
fn never_written(bytes: &[u8], sources: &[&[u8]]) -> Option<usize> {
    (0..bytes.len()).find(|&i| {
        let b = bytes[i];
        b != 0 && !sources.iter().any(|s| s.get(i) == Some(&b))
    })
}

fn bytes_of(v: Option<&Value>) -> &[u8] {
    match v {
        Some(Value::Bytes(b)) => b,
        _ => &[],
    }
}

/// `counts_may_lag`: a link count above the expected one is not a finding.
fn exact(
    found: &Found,
    want: &State,
    prev: &State,
    after: &str,
    counts_may_lag: bool,
    out: &mut Vec<Finding>,
) {
    let prev_cells = cells(prev, &prev.links());
    for (cell, got, exp) in compare(found, want) {
        let too_high = matches!(
            (&cell, &got, &exp),
            (Cell::Links(_), Some(Value::Num(g)), Some(Value::Num(e))) if g > e
        );
        if counts_may_lag && too_high {
            continue;
        }
        let was = prev_cells.get(&cell);
        let kind = match &cell {
            Cell::Bytes(_) => {
                let sources = [bytes_of(exp.as_ref()), bytes_of(was)];
                if never_written(bytes_of(got.as_ref()), &sources).is_some() {
                    Kind::Data
                } else {
                    Kind::Durability
                }
            }
            _ if exp.as_ref() == was || got.as_ref() == was => Kind::Durability,
            _ => Kind::Ordering,
        };
        out.push(Finding {
            kind,
            message: format!(
                "after \"{after}\" returned: {} is {}, expected {}",
                cell.show(),
                show_opt(got.as_ref()),
                show_opt(exp.as_ref())
            ),
        });
    }
}

/// The differences of `found` from `want`, metadata only or all.
fn differs(found: &Found, want: &State, data: bool) -> Vec<(Cell, Option<Value>, Option<Value>)> {
    compare(found, want)
        .into_iter()
        .filter(|(c, _, _)| data || !matches!(c, Cell::Bytes(_)))
        .collect()
}

fn show_diffs(d: &[(Cell, Option<Value>, Option<Value>)]) -> String {
    let mut s: Vec<String> = d
        .iter()
        .take(6)
        .map(|(c, g, e)| {
            format!(
                "{} is {} not {}",
                c.show(),
                show_opt(g.as_ref()),
                show_opt(e.as_ref())
            )
        })
        .collect();
    if d.len() > 6 {
        s.push(format!("{} more", d.len() - 6));
    }
    s.join("; ")
}

fn busy(mode: Consistency, found: &Found, f: &FlushRec, out: &mut Vec<Finding>) {
    let before = f.flush.before();
    let after = f.flush.after();
    let during = &f.label;
    let neither = |what: &str, d0: &[_], d1: &[_]| Finding {
        kind: Kind::Ordering,
        message: format!(
            "during \"{during}\": the {what} is neither the state before nor after the flush \
             (vs before: {}) (vs after: {})",
            show_diffs(d0),
            show_diffs(d1)
        ),
    };
    let neither_end =
        || !differs(found, before, true).is_empty() && !differs(found, after, true).is_empty();
    if f.commits > 1 && neither_end() {
        // A flush split across transactions (ARCHITECTURE.md "One
        // unit"): between its commits the disk holds a prefix of its
        // operations and of its files' runs. Each fact as in one of the
        // flush's states, and (where data is ordered or journaled) no
        // byte a file never held.
        facts_each(found, f, out);
        if mode != Consistency::Journal(DataMode::Writeback) {
            data_rule(found, f, out);
        }
        return;
    }
    match mode {
        Consistency::Journal(DataMode::Journal) => {
            let d0 = differs(found, before, true);
            let d1 = differs(found, after, true);
            if !d0.is_empty() && !d1.is_empty() {
                out.push(neither("tree (data included)", &d0, &d1));
            }
        }
        Consistency::Journal(DataMode::Ordered) => {
            let d0 = differs(found, before, false);
            if d0.is_empty() {
                // The commit is not on disk; data written in place may be.
                data_rule(found, f, out);
                return;
            }
            let d1 = differs(found, after, true);
            if !d1.is_empty() {
                out.push(neither("tree", &d0, &d1));
            }
        }
        Consistency::Journal(DataMode::Writeback) => {
            let d0 = differs(found, before, false);
            let d1 = differs(found, after, false);
            if !d0.is_empty() && !d1.is_empty() {
                out.push(neither("metadata", &d0, &d1));
            }
        }
        Consistency::SoftUpdates | Consistency::Async => {
            facts_each(found, f, out);
            data_rule(found, f, out);
        }
    }
}

/// No file shows bytes it never wrote: each byte of a file in `found` is
/// zero or the byte at its offset in one of the flush's states; a file
/// whose bytes the flush does not change is exactly as before.
fn data_rule(found: &Found, f: &FlushRec, out: &mut Vec<Finding>) {
    for (&ino, i) in &found.state.inodes {
        if i.kind != FileKind::File {
            continue;
        }
        let versions: Vec<&[u8]> = f
            .flush
            .states
            .iter()
            .filter_map(|s| s.inodes.get(&ino))
            .filter(|x| x.kind == FileKind::File)
            .map(|x| x.bytes.as_slice())
            .collect();
        if versions.is_empty() {
            continue; // an inode from nowhere: its entry is reported
        }
        let unchanged = versions.windows(2).all(|w| w[0] == w[1]);
        if unchanged {
            if i.bytes != versions[0] {
                let kind = match never_written(&i.bytes, &versions) {
                    Some(_) => Kind::Data,
                    None => Kind::Durability,
                };
                out.push(Finding {
                    kind,
                    message: format!(
                        "during \"{}\": inode {ino}, which the flush does not write, holds {} instead of {}",
                        f.label,
                        crate::state::digest(&i.bytes),
                        crate::state::digest(versions[0])
                    ),
                });
            }
            continue;
        }
        if let Some(at) = never_written(&i.bytes, &versions) {
            out.push(Finding {
                kind: Kind::Data,
                message: format!(
                    "during \"{}\": inode {ino} byte {at} is {:#04x}, which it never held there",
                    f.label, i.bytes[at]
                ),
            });
        }
    }
}

/// A wrong fact the flush does not change lost durability; one it changes
/// shows an order the flush does not allow.
fn lost_or_disordered(unchanged: bool) -> Kind {
    if unchanged {
        Kind::Durability
    } else {
        Kind::Ordering
    }
}

/// Soft updates: each fact as in one of the flush's states.
fn facts_each(found: &Found, f: &FlushRec, out: &mut Vec<Finding>) {
    let states = &f.flush.states;
    let all: Vec<Cells> = states.iter().map(|s| cells(s, &s.links())).collect();
    let mine = cells(&found.state, &found.links);
    let mut keys: BTreeSet<Cell> = mine.keys().cloned().collect();
    for c in &all {
        keys.extend(
            c.keys()
                // Facts a found inode may lack: its entries, and its
                // extended attributes.
                .filter(|k| matches!(k, Cell::Entry(..) | Cell::Xattr(..)))
                .filter(|k| found.state.inodes.contains_key(&k.ino()))
                .cloned(),
        );
    }
    for cell in keys {
        if matches!(cell, Cell::Links(_) | Cell::Bytes(_)) {
            continue;
        }
        let ino = cell.ino();
        // The states in which the inode (or directory) exists.
        let having: Vec<usize> = (0..states.len())
            .filter(|&j| states[j].inodes.contains_key(&ino))
            .collect();
        if having.is_empty() {
            continue; // reported through the entry naming it
        }
        let got = mine.get(&cell);
        let allowed: Vec<Option<&Value>> = having.iter().map(|&j| all[j].get(&cell)).collect();
        if let Cell::Size(_) = cell {
            let sizes: Vec<u64> = allowed
                .iter()
                .filter_map(|v| match v {
                    Some(Value::Num(n)) => Some(*n),
                    _ => None,
                })
                .collect();
            let lo = sizes
                .iter()
                .copied()
                .chain(f.flush.min_sizes.get(&ino).copied())
                .min();
            let hi = sizes.iter().copied().max();
            let unchanged =
                sizes.windows(2).all(|w| w[0] == w[1]) && !f.flush.min_sizes.contains_key(&ino);
            if let (Some(Value::Num(n)), Some(lo), Some(hi)) = (got, lo, hi) {
                if *n < lo || *n > hi {
                    out.push(Finding {
                        kind: lost_or_disordered(unchanged),
                        message: format!(
                            "during \"{}\": size of inode {ino} is {n}, outside {lo}..={hi}",
                            f.label
                        ),
                    });
                }
            }
            continue;
        }
        if allowed.contains(&got) {
            continue;
        }
        let unchanged = allowed.windows(2).all(|w| w[0] == w[1]);
        let shown: BTreeSet<String> = allowed.iter().map(|v| show_opt(*v)).collect();
        out.push(Finding {
            kind: lost_or_disordered(unchanged),
            message: format!(
                "during \"{}\": {} is {}, allowed: {}",
                f.label,
                cell.show(),
                show_opt(got),
                shown.into_iter().collect::<Vec<_>>().join(" or ")
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Verdict;
    use crate::oracle::Flush;
    use crate::state::{Inode, ROOT};
    use stitch_diskfs::InodeNo;

    fn dir(entries: &[(&str, u32)]) -> Inode {
        let mut d = Inode::new(FileKind::Dir, 0o755, 0, 0);
        for (n, i) in entries {
            d.entries.insert(n.as_bytes().to_vec(), InodeNo(*i));
        }
        d
    }

    fn file(bytes: &[u8]) -> Inode {
        let mut f = Inode::new(FileKind::File, 0o644, 0, 0);
        f.bytes = bytes.to_vec();
        f
    }

    /// `/a` (12) holding `x`; with `b` (13) when `with_b`.
    fn state(a: &[u8], with_b: bool) -> State {
        let mut s = State::default();
        let mut root = vec![("a", 12)];
        if with_b {
            root.push(("b", 13));
            s.inodes.insert(InodeNo(13), file(b"bb"));
        }
        s.inodes.insert(ROOT, dir(&root));
        s.inodes.insert(InodeNo(12), file(a));
        s
    }

    fn found(s: &State) -> Found {
        Found {
            state: s.clone(),
            links: s.links(),
            problems: Vec::new(),
        }
    }

    fn facts(s: &State) -> Facts {
        Facts {
            tree: Ok(found(s)),
            replayed: 0,
            fsck: Ok(Verdict {
                corruptions: 0,
                leaks: 0,
                text: String::new(),
            }),
            e2fsck: Ok((0, String::new())),
            checked: true,
        }
    }

    /// A flush from `before` to `after` through `mid`.
    fn flush(states: Vec<State>) -> FlushRec {
        FlushRec {
            label: "step 1: test".into(),
            start: 10,
            end: 20,
            flush: Flush {
                states,
                min_sizes: Default::default(),
                ops: Vec::new(),
            },
            commits: 1,
        }
    }

    fn kinds(f: &[Finding]) -> Vec<Kind> {
        let mut k: Vec<Kind> = f.iter().map(|f| f.kind).collect();
        k.sort();
        k.dedup();
        k
    }

    const SU: Consistency = Consistency::SoftUpdates;

    /// `s` with `b` naming another inode than in any state.
    fn misnamed(s: &State) -> State {
        let mut bad = s.clone();
        bad.inodes
            .get_mut(&ROOT)
            .unwrap()
            .entries
            .insert(b"b".to_vec(), InodeNo(12));
        bad.inodes.remove(&InodeNo(13));
        bad
    }

    #[test]
    fn a_quiet_point_wants_exactly_the_flushed_state() {
        let (before, after) = (state(b"old", false), state(b"new", true));
        let quiet = [Situation::Quiet {
            state: &after,
            prev: &before,
            after: "fsync",
        }];
        assert!(judge(SU, &facts(&after), &quiet).is_empty());
        // Not made durable: b missing, a's bytes old.
        let f = judge(SU, &facts(&before), &quiet);
        assert_eq!(kinds(&f), vec![Kind::Durability], "{f:?}");
        // Bytes a never held.
        let f = judge(SU, &facts(&state(b"zzz", true)), &quiet);
        assert_eq!(kinds(&f), vec![Kind::Data], "{f:?}");
    }

    /// A rename's sync does not wait for its count to come down: soft
    /// updates may show a count too high after it, never too low, and a
    /// journal mode neither.
    #[test]
    fn only_soft_updates_may_show_a_link_count_too_high_when_quiet() {
        let s = state(b"x", true);
        let quiet = [Situation::Quiet {
            state: &s,
            prev: &s,
            after: "fsync",
        }];
        let with_count = |n: u32| {
            let mut f = facts(&s);
            if let Ok(t) = &mut f.tree {
                t.links.insert(InodeNo(12), n);
            }
            f
        };
        let ord = Consistency::Journal(DataMode::Ordered);
        assert!(judge(SU, &with_count(2), &quiet).is_empty());
        assert_eq!(
            kinds(&judge(ord, &with_count(2), &quiet)),
            vec![Kind::Durability]
        );
        assert_eq!(
            kinds(&judge(SU, &with_count(0), &quiet)),
            vec![Kind::Durability]
        );
    }

    #[test]
    fn soft_updates_take_each_fact_from_some_state_of_the_flush() {
        let (before, after) = (state(b"old", false), state(b"new", true));
        let f = flush(vec![before.clone(), state(b"old", true), after.clone()]);
        let busy = [Situation::Busy(&f)];
        for ok in [
            &before,
            &after,
            &state(b"o\0w", true),
            &state(b"nld", false),
        ] {
            let r = judge(SU, &facts(ok), &busy);
            assert!(r.is_empty(), "{ok:?}: {r:?}");
        }
        let bad = misnamed(&after);
        assert_eq!(kinds(&judge(SU, &facts(&bad), &busy)), vec![Kind::Ordering]);
        // a, untouched by the flush, lost.
        let g = flush(vec![before.clone(), state(b"old", true)]);
        let mut lost = state(b"old", true);
        lost.inodes
            .get_mut(&ROOT)
            .unwrap()
            .entries
            .remove(b"a".as_slice());
        let r = judge(SU, &facts(&lost), &[Situation::Busy(&g)]);
        assert_eq!(kinds(&r), vec![Kind::Durability], "{r:?}");
    }

    #[test]
    fn journal_flushes_are_all_or_nothing() {
        let (before, after) = (state(b"old", false), state(b"new", true));
        let f = flush(vec![before.clone(), state(b"old", true), after.clone()]);
        let busy = [Situation::Busy(&f)];
        let jj = Consistency::Journal(DataMode::Journal);
        let ord = Consistency::Journal(DataMode::Ordered);
        let wb = Consistency::Journal(DataMode::Writeback);
        for m in [jj, ord, wb] {
            assert!(judge(m, &facts(&before), &busy).is_empty());
            assert!(judge(m, &facts(&after), &busy).is_empty());
            // Half the flush: b there, a's data not yet.
            let half = state(b"old", true);
            let want = if m == wb {
                vec![]
            } else {
                vec![Kind::Ordering]
            };
            assert_eq!(kinds(&judge(m, &facts(&half), &busy)), want, "{m}");
        }
        // Ordered: new data in place under the old metadata is fine.
        assert!(judge(ord, &facts(&state(b"nld", false)), &busy).is_empty());
        assert!(!judge(jj, &facts(&state(b"nld", false)), &busy).is_empty());
    }

    /// A flush split across commits shows its intermediate states in every
    /// journal mode, but still no fact from outside its states and (but
    /// for writeback) no byte a file never held.
    #[test]
    fn a_flush_split_across_commits_may_show_its_middle() {
        let (before, after) = (state(b"old", false), state(b"new", true));
        let mut f = flush(vec![before.clone(), state(b"old", true), after.clone()]);
        f.commits = 2;
        let busy = [Situation::Busy(&f)];
        let jj = Consistency::Journal(DataMode::Journal);
        let ord = Consistency::Journal(DataMode::Ordered);
        let wb = Consistency::Journal(DataMode::Writeback);
        for m in [jj, ord, wb] {
            for ok in [&before, &after, &state(b"old", true), &state(b"nld", true)] {
                let r = judge(m, &facts(ok), &busy);
                assert!(r.is_empty(), "{m}: {ok:?}: {r:?}");
            }
            let r = judge(m, &facts(&state(b"zzz", true)), &busy);
            let want = if m == wb { vec![] } else { vec![Kind::Data] };
            assert_eq!(kinds(&r), want, "{m}: {r:?}");
            let bad = misnamed(&after);
            assert_eq!(
                kinds(&judge(m, &facts(&bad), &busy)),
                vec![Kind::Ordering],
                "{m}"
            );
        }
    }

    #[test]
    fn checkers_must_agree_and_fit_the_mode() {
        let s = state(b"x", false);
        let quiet = [Situation::Quiet {
            state: &s,
            prev: &s,
            after: "x",
        }];
        let mut leak = facts(&s);
        leak.fsck = Ok(Verdict {
            corruptions: 0,
            leaks: 1,
            text: String::new(),
        });
        leak.e2fsck = Ok((4, String::new()));
        assert!(judge(SU, &leak, &quiet).is_empty());
        let ord = Consistency::Journal(DataMode::Ordered);
        assert_eq!(
            kinds(&judge(ord, &leak, &quiet)),
            vec![Kind::Corruption, Kind::Leak]
        );
        let mut disagree = facts(&s);
        disagree.e2fsck = Ok((4, String::new()));
        assert_eq!(
            kinds(&judge(SU, &disagree, &quiet)),
            vec![Kind::CheckersDisagree]
        );
    }
}
