//! The rules for workloads whose steps run in streams ("Consistency
//! Without Ordering", §3), stated on the reference model without memfs's
//! closure: a crash image must be the model's tree after some set of the
//! steps that is
//! - a **prefix of every stream**, each step whole: with a step, every
//!   earlier step of its stream;
//! - closed under **related steps**: with a step, every earlier step that
//!   touched an inode it touches (the same file, a directory and an entry
//!   in it, the same name: each touches the directory and the named
//!   inode, as it was and as it became);
//! - **durable where promised**: every step of a stream up to a stream
//!   sync or an fsync in that stream that returned before the crash, and
//!   every step before a `sync`;
//! - made of steps that had **run** when the crash came.
//!
//! One exception, in soft updates only: a rename of a file may show both
//! names, the new one linked and the old not yet removed (soft updates
//! orders the two halves but cannot make them one write; every soft
//! updates file system leaves this state, and the next mount's check
//! fixes nothing in it: both names are valid links). So in soft updates
//! an allowed set may also hold the first half of a rename whose earlier
//! related steps it holds. A directory's rename goes the other way in
//! soft updates (two entries naming one directory would be corruption):
//! its first half removes the old name, and a crash there leaves the
//! directory unconnected until the next check reconnects it, so an
//! allowed set may also lack the moved directory's subtree (link counts
//! of directories aside: the checkers judge those).
//!
//! And one relaxation, in soft updates too: a write is whole per sector,
//! not across its blocks (soft updates has no multi-block atomic write),
//! so an allowed set may also hold a write or append of a file whose
//! earlier steps it holds with each 512-byte sector of the file either as
//! before the write or as after it.
//!
//! The allowed sets and their trees are computed once per workload by
//! replaying each set on a fresh model (the data a write puts is fixed by
//! its place in the workload, as in the run), so judging an image is a
//! lookup. Workloads are short (every set of up to [`MAX_STEPS`] steps is
//! looked at).

use crate::report::{Finding, Kind};
use crate::run::{model_apply, setup_model, setup_model_counting, Recording};
use crate::state::Found;
use crate::workload::{Action, Persist, Step, Workload};
use stitch_diskfs::Consistency;
use stitch_model::{Content, InodeNo, Kind as FileKind, Meta, Model, Op, Outcome, Path, Tree};

/// The longest stream workload judged (its sets are enumerated).
pub const MAX_STEPS: usize = 12;

/// What a stream workload allows.
pub struct Expected {
    /// Each allowed set (a bit per step) and the tree it leaves.
    sets: Vec<(u32, Tree)>,
    /// Soft updates only: an allowed set with the first half of one more
    /// step, a rename of a file (the new name linked, the old kept).
    halves: Vec<(u32, Tree)>,
    /// Soft updates only: an allowed set with the first half of one more
    /// step, a rename of a directory (the old name removed, the new one
    /// not yet there).
    dir_halves: Vec<(u32, Tree)>,
    /// Soft updates only: an allowed set, one more step that writes a
    /// file's data, and the trees before and after it (the image may hold
    /// any sectors of the write).
    partials: Vec<(u32, usize, Tree, Tree)>,
    /// For each step with a persistence point, the steps it makes durable.
    promises: Vec<u32>,
    n: usize,
}

/// What the workload's steps touch and need, from one replay of all of
/// them on the model.
struct Facts {
    /// The writes counted before each step (a write's data depends on it).
    writes_before: Vec<u64>,
    /// For each step, the steps before it that must come with it.
    preds: Vec<u32>,
    /// What the workload's patchgroups say.
    groups: crate::patchgroups::Facts,
}

/// The inode `path` names on the model, with its directory's when `names`
/// (the step changes the name, not only the inode).
fn inodes_of(m: &Model, path: &str, names: bool, out: &mut Vec<InodeNo>) {
    let p = Path::parse(path);
    if let Ok(i) = m.resolve(&p) {
        out.push(i);
    }
    if !names {
        return;
    }
    let dir = match path.rsplit_once('/') {
        Some((d, _)) => d,
        None => "",
    };
    if let Ok(i) = m.resolve(&Path::parse(dir)) {
        out.push(i);
    }
}

pub(crate) fn paths(a: &Action) -> Vec<&str> {
    match a {
        Action::Creat(p)
        | Action::Mkdir(p)
        | Action::Fill(p)
        | Action::Unlink(p)
        | Action::Rmdir(p)
        | Action::Open(p) => vec![p],
        Action::Write { path, .. }
        | Action::Append { path, .. }
        | Action::Truncate { path, .. }
        | Action::Chmod { path, .. }
        | Action::Symlink { path, .. }
        | Action::Mknod { path, .. }
        | Action::Setxattr { path, .. } => vec![path],
        Action::Link { from, to } | Action::Rename { from, to } => vec![from, to],
        Action::WriteFd { .. } | Action::Close(_) => Vec::new(),
    }
}

fn facts(w: &Workload) -> Result<Facts, String> {
    let (mut m, mut writes) = setup_model_counting(&w.setup);
    let mut touched: Vec<Vec<InodeNo>> = Vec::new();
    let mut writes_before = Vec::new();
    for (i, st) in w.steps.iter().enumerate() {
        writes_before.push(writes);
        let mut t = Vec::new();
        let names = !matches!(
            st.action,
            Action::Write { .. }
                | Action::Append { .. }
                | Action::Truncate { .. }
                | Action::Chmod { .. }
                | Action::Setxattr { .. }
        );
        // A link names the inode it links by its old name: that name's
        // directory is not changed.
        let named = |k: usize| names && !(matches!(st.action, Action::Link { .. }) && k == 0);
        for (k, p) in paths(&st.action).into_iter().enumerate() {
            inodes_of(&m, p, named(k), &mut t);
        }
        model_apply(&mut m, &st.action, &mut writes)
            .map_err(|e| format!("step {} ({}) fails on the model: {e:?}", i + 1, st.action))?;
        for (k, p) in paths(&st.action).into_iter().enumerate() {
            inodes_of(&m, p, named(k), &mut t);
        }
        t.sort_unstable();
        t.dedup();
        touched.push(t);
    }
    let related = |a: &[InodeNo], b: &[InodeNo]| a.iter().any(|x| b.contains(x));
    let groups = crate::patchgroups::Facts::of(w)?;
    let preds = (0..w.steps.len())
        .map(|i| {
            (0..i)
                .filter(|&j| {
                    same_stream(&w.steps[i], &w.steps[j]) || related(&touched[i], &touched[j])
                })
                .fold(groups.preds(i), |m, j| m | 1 << j)
        })
        .collect();
    Ok(Facts {
        writes_before,
        preds,
        groups,
    })
}

/// The model after the steps of `set`, in order; `None` if one fails.
fn replay(w: &Workload, f: &Facts, set: u32) -> Option<Model> {
    let mut m = setup_model(&w.setup);
    for i in (0..w.steps.len()).filter(|i| set & (1 << i) != 0) {
        let mut writes = f.writes_before[i];
        model_apply(&mut m, &w.steps[i].action, &mut writes).ok()?;
    }
    Some(m)
}

/// The tree a rename of a file leaves half done on `m`: the new name
/// linked (over the name it replaces), the old one still there.
fn first_half(m: &Model, a: &Action) -> Option<Tree> {
    let Action::Rename { from, to } = a else {
        return None;
    };
    let mut m = m.clone();
    let is_file = |m: &mut Model, p: &str| {
        matches!(
            m.apply(&Op::Stat { path: Path::parse(p) }),
            Ok(Outcome::Stat(meta)) if meta.kind != FileKind::Dir
        )
    };
    if !is_file(&mut m, from) || from == to {
        return None;
    }
    let mut writes = 0;
    if is_file(&mut m, to) {
        model_apply(&mut m, &Action::Unlink(to.clone()), &mut writes).ok()?;
    }
    let link = Action::Link {
        from: from.clone(),
        to: to.clone(),
    };
    model_apply(&mut m, &link, &mut writes).ok()?;
    Some(m.snapshot())
}

/// The tree a rename of a directory leaves half done on `m` (whose tree
/// is `before`): the old name and everything under it gone.
fn dir_first_half(m: &Model, before: &Tree, a: &Action) -> Option<Tree> {
    let Action::Rename { from, to } = a else {
        return None;
    };
    let mut m = m.clone();
    let is_dir = matches!(
        m.apply(&Op::Stat { path: Path::parse(from) }),
        Ok(Outcome::Stat(meta)) if meta.kind == FileKind::Dir
    );
    if !is_dir || from == to {
        return None;
    }
    let from = from.as_bytes();
    let under = |p: &[u8]| p == from || (p.starts_with(from) && p.get(from.len()) == Some(&b'/'));
    let mut t = before.clone();
    t.nodes.retain(|p, _| !under(p));
    // A file with a name inside the moved directory too shows only the
    // names left (the image's link counts are counted from its names),
    // and the first name left leads its group of links.
    let mut leaders: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
    for (path, node) in t.nodes.iter_mut() {
        if let Some(lead) = node.same_as.clone().filter(|l| under(l)) {
            node.same_as = match leaders.get(&lead) {
                Some(new) => Some(new.clone()),
                None => {
                    leaders.insert(lead, path.clone());
                    None
                }
            };
        }
    }
    let mut names: std::collections::BTreeMap<Vec<u8>, u32> = Default::default();
    for (path, node) in &t.nodes {
        *names
            .entry(node.same_as.clone().unwrap_or_else(|| path.clone()))
            .or_default() += 1;
    }
    for (path, node) in t.nodes.iter_mut() {
        if node.meta.kind != FileKind::Dir {
            node.meta.nlink = names[node.same_as.as_ref().unwrap_or(path)];
        }
    }
    Some(t)
}

/// Whether two trees are the same but for directories' link counts.
fn same_but_dir_links(a: &Tree, b: &Tree) -> bool {
    let plain = |t: &Tree| {
        let mut t = t.clone();
        for n in t.nodes.values_mut() {
            if n.meta.kind == FileKind::Dir {
                n.meta.nlink = 0;
            }
        }
        t
    };
    plain(a).diff(&plain(b)).is_empty()
}

fn same_stream(a: &Step, b: &Step) -> bool {
    a.stream.is_some() && a.stream == b.stream
}

impl Expected {
    /// The sets `w` allows, and what each persistence point promises.
    pub fn of(w: &Workload) -> Result<Expected, String> {
        let n = w.steps.len();
        if n > MAX_STEPS {
            return Err(format!(
                "{n} steps: stream workloads hold at most {MAX_STEPS}"
            ));
        }
        let f = facts(w)?;
        let closed = |set: u32| (0..n).all(|i| set & (1 << i) == 0 || f.preds[i] & !set == 0);
        let mut sets = Vec::new();
        let mut halves = Vec::new();
        let mut dir_halves = Vec::new();
        let mut writing = Vec::new();
        for set in (0..1u32 << n).filter(|&s| closed(s)) {
            let Some(m) = replay(w, &f, set) else {
                continue;
            };
            let before = m.snapshot();
            let next = (0..n).filter(|&r| set & (1 << r) == 0 && f.preds[r] & !set == 0);
            for r in next {
                let action = &w.steps[r].action;
                if let Some(t) = first_half(&m, action) {
                    halves.push((set, t));
                }
                if let Some(t) = dir_first_half(&m, &before, action) {
                    dir_halves.push((set, t));
                }
                if matches!(action, Action::Write { .. } | Action::Append { .. }) {
                    // With the write in its place among the steps (a later
                    // rename may have moved the file it names), which is a
                    // closed set too: its tree is looked up below.
                    writing.push((set, r));
                }
            }
            sets.push((set, before));
        }
        let tree_of = |s: u32| {
            sets.binary_search_by_key(&s, |(k, _)| *k)
                .ok()
                .map(|i| &sets[i].1)
        };
        let partials = writing
            .into_iter()
            .filter_map(|(set, r)| {
                let before = tree_of(set)?.clone();
                Some((set, r, before, tree_of(set | 1 << r)?.clone()))
            })
            .collect();
        let promises = (0..n)
            .map(|i| {
                let st = &w.steps[i];
                let upto = (0..=i).fold(0u32, |m, j| m | 1 << j);
                match (&st.persist, st.stream) {
                    (Persist::None, _) => 0,
                    // External synchrony: a member's output promises every
                    // change the group made so far; its fsyncs nothing.
                    (Persist::Output, _) => (0..=i)
                        .filter(|&j| w.steps[j].xsync)
                        .fold(0, |m, j| m | 1 << j),
                    _ if st.xsync => 0,
                    (Persist::PgSync(g), _) => f.groups.synced(*g, i),
                    (Persist::Sync, _) | (_, None) => upto,
                    (_, Some(s)) => (0..=i)
                        .filter(|&j| w.steps[j].stream == Some(s))
                        .fold(0, |m, j| m | 1 << j),
                }
            })
            .collect();
        Ok(Expected {
            sets,
            halves,
            dir_halves,
            partials,
            promises,
            n,
        })
    }

    /// Allowed sets the enumeration found (for reports and tests).
    pub fn len(&self) -> usize {
        self.sets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sets.is_empty()
    }
}

/// Judges an image recovered from a crash at points `a..=b` of `rec`: the
/// same image may come of a crash at any of them, so it must be allowed
/// at each (what is durable and what has run change at step marks only).
pub fn judge(
    exp: &Expected,
    rec: &Recording,
    (a, b): (usize, usize),
    mode: Consistency,
    found: &Found,
) -> Vec<Finding> {
    // Soft updates may leave link counts too high (a leak the next mount
    // repairs); the checkers judge those. Journal modes leave none.
    let links = match mode {
        Consistency::SoftUpdates => None,
        _ => Some(&found.links),
    };
    let tree = found.state.to_tree(links);
    let soft_updates = mode == Consistency::SoftUpdates;
    let halves: &[(u32, Tree)] = if soft_updates { &exp.halves } else { &[] };
    // Each match as the set it makes durable and the set that must have
    // run (a partial write is not durable, but it ran).
    let mut matching: Vec<(u32, u32)> = exp
        .sets
        .iter()
        .chain(halves)
        .filter(|(_, t)| t.diff(&tree).is_empty())
        .map(|(s, _)| (*s, *s))
        .collect();
    if soft_updates {
        matching.extend(
            exp.dir_halves
                .iter()
                .filter(|(_, t)| same_but_dir_links(t, &tree))
                .map(|(s, _)| (*s, *s)),
        );
        matching.extend(
            exp.partials
                .iter()
                .filter(|(_, _, before, after)| partly(before, after, &tree))
                .map(|(s, r, ..)| (*s, *s | 1 << r)),
        );
    }
    if matching.is_empty() {
        return vec![Finding {
            kind: Kind::Ordering,
            message: "the image is no prefix of the streams closed under related steps \
                      (no allowed set of steps leaves this tree)"
                .into(),
        }];
    }
    let marks = rec
        .marks
        .iter()
        .flat_map(|m| [Some(m.acted), m.persisted])
        .chain(rec.flushes.iter().map(|f| Some(f.end)))
        .flatten()
        .filter(|&p| p > a && p <= b);
    for p in std::iter::once(a).chain(marks) {
        let (need, ran) = at_point(exp, rec, p);
        if !matching.iter().any(|&(s, _)| s & need == need) {
            return vec![Finding {
                kind: Kind::Durability,
                message: format!(
                    "at crash point {p} steps {} were durable, but the image holds only {}",
                    show(exp, need),
                    matching
                        .iter()
                        .map(|&(s, _)| show(exp, s))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            }];
        }
        if !matching
            .iter()
            .any(|&(s, r)| s & need == need && r & !ran == 0)
        {
            return vec![Finding {
                kind: Kind::Ordering,
                message: format!(
                    "at crash point {p} the image holds steps that had not run (ran: {})",
                    show(exp, ran)
                ),
            }];
        }
    }
    Vec::new()
}

/// Whether `image` is `before` with a write that leads to `after` partly
/// done: every path as in one of them, and each file that differs as
/// one of them in its attributes and, sector by sector, in its bytes.
fn partly(before: &Tree, after: &Tree, image: &Tree) -> bool {
    const SECTOR: usize = 512;
    if image.nodes.len() != after.nodes.len() || before.nodes.len() != after.nodes.len() {
        return false;
    }
    image.nodes.iter().all(|(path, got)| {
        let (Some(b), Some(a)) = (before.nodes.get(path), after.nodes.get(path)) else {
            return false;
        };
        if got == a || got == b {
            return true;
        }
        let (Content::Bytes(gb), Content::Bytes(bb), Content::Bytes(ab)) =
            (&got.content, &b.content, &a.content)
        else {
            return false;
        };
        let same_but_size = |m: &Meta| {
            Meta {
                size: got.meta.size,
                ..*m
            } == got.meta
        };
        if got.same_as != a.same_as || !(same_but_size(&a.meta) || same_but_size(&b.meta)) {
            return false;
        }
        if gb.len() != ab.len() && gb.len() != bb.len() {
            return false;
        }
        (0..gb.len()).step_by(SECTOR).all(|at| {
            let end = (at + SECTOR).min(gb.len());
            let as_in = |x: &[u8]| x.get(at..end) == Some(&gb[at..end]);
            // Past the old end only the new bytes count.
            let old_part = |x: &[u8]| {
                let cut = x.len().clamp(at, end);
                x.get(at..cut) == Some(&gb[at..cut]) && ab.get(cut..end) == Some(&gb[cut..end])
            };
            as_in(ab) || as_in(bb) || old_part(bb)
        })
    })
}

/// What is durable at crash point `p` (what persistence points that
/// returned by then promised, everything once the final sync did), and
/// which steps had run.
fn at_point(exp: &Expected, rec: &Recording, p: usize) -> (u32, u32) {
    let all = (0..exp.n).fold(0u32, |m, j| m | 1 << j);
    let mut need = rec
        .marks
        .iter()
        .enumerate()
        .filter(|(_, m)| m.persisted.is_some_and(|e| e <= p))
        .fold(0u32, |m, (i, _)| m | exp.promises[i]);
    if rec
        .flushes
        .iter()
        .any(|f| f.label == "final sync" && f.end <= p)
    {
        need |= all;
    }
    let ran = rec
        .marks
        .iter()
        .enumerate()
        .filter(|(_, m)| m.acted <= p)
        .fold(0u32, |m, (i, _)| m | 1 << i);
    (need, ran)
}

/// A set of steps, numbered from 1.
fn show(exp: &Expected, s: u32) -> String {
    let steps: Vec<String> = (0..exp.n)
        .filter(|i| s & (1 << i) != 0)
        .map(|i| (i + 1).to_string())
        .collect();
    format!("{{{}}}", steps.join(","))
}

/// `w` with every step in one stream (stream 0), as the global order runs
/// a workload in no stream; `None` if it holds an operation the model
/// cannot replay alone (handles, fills, attributes it does not keep).
pub fn as_one_stream(w: &Workload) -> Option<Workload> {
    let mut one = w.clone();
    for st in &mut one.steps {
        if !replayable(&st.action) {
            return None;
        }
        st.stream = Some(0);
    }
    Some(one)
}

fn replayable(a: &Action) -> bool {
    !matches!(
        a,
        Action::Fill(_)
            | Action::Open(_)
            | Action::WriteFd { .. }
            | Action::Close(_)
            | Action::Setxattr { .. }
    )
}

/// Stream workloads written for the related-step cases (over the
/// standard setup): a rename over a name another stream wrote, two
/// streams writing one file, a directory another stream moves while
/// entries go into it, an append's size and data against another
/// stream's create; and what soft updates got wrong once: a file changed
/// twice in a stream with changes between (settled, and the last settle
/// writing nothing new), a directory moved into one just made.
pub fn named() -> Vec<Workload> {
    [
        "gen:s1/creat:E,s1/append:E:3000,s2/write:A:0:100,s2/rename:E:A,s1/append:B:100+streamsync",
        "gen:s1/append:A:4000,s2/write:A:0:100,s2/creat:E,s1/truncate:A:1000+streamsync",
        "gen:s1/mkdir:E,s2/creat:E/x,s2/append:E/x:2000,s1/rename:E:D/F,s2/creat:L+streamsync",
        "gen:s1/append:B:6000,s2/creat:E+streamsync,s1/append:D/C:100,s2/unlink:B+fsync:/",
        "gen:s1/rename:A:D/A,s2/chmod:D:700,s2/link:D/C:L,s2/chmod:D:700,s1/chmod:D:700",
        "gen:s1/mkdir:E+fsync:E,s3/rename:D:E/D,s3/chmod:A:600+fsync:A",
    ]
    .into_iter()
    .map(|s| crate::workload::parse(s).expect("a valid stream workload"))
    .collect()
}

/// `count` distinct stream workloads of `len` steps drawn with `seed`:
/// operations of the generated workloads' universe (no handles, fills or
/// attributes the model does not keep) over the standard setup, each in
/// one of three streams, some followed by a stream sync or an fsync in
/// its stream.
pub fn generated(len: usize, count: usize, seed: u64) -> Vec<Workload> {
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    let ops = replayable_ops();
    let len = len.min(MAX_STEPS);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5354_5245_414d);
    distinct(count, || {
        let mut steps: Vec<Step> = Vec::with_capacity(len);
        while steps.len() < len {
            let action = ops.choose(&mut rng).expect("operations").clone();
            let persist = match rng.gen_range(0..10) {
                0 | 1 => Persist::StreamSync,
                2 => match paths(&action).last() {
                    Some(p) => Persist::Fsync(p.to_string()),
                    None => Persist::None,
                },
                _ => Persist::None,
            };
            steps.push(Step {
                action,
                persist,
                stream: Some(rng.gen_range(1..=3)),
                proc: 0,
                pg: Vec::new(),
                xsync: false,
            });
            if !crate::workload::valid(&steps) {
                steps.pop();
                if steps.is_empty() || rng.gen_bool(0.1) {
                    break;
                }
            }
        }
        (steps.len() == len).then_some(steps)
    })
}

/// The operations stream and patchgroup workloads draw from: those the
/// model replays alone.
pub(crate) fn replayable_ops() -> Vec<Action> {
    crate::workload::universe()
        .into_iter()
        .filter(replayable)
        .collect()
}

/// Up to `count` distinct workloads, each drawn by `draw` (`None`: a
/// draw that came to nothing), in at most 200 draws per workload wanted.
pub(crate) fn distinct(count: usize, mut draw: impl FnMut() -> Option<Vec<Step>>) -> Vec<Workload> {
    let mut out: Vec<Workload> = Vec::new();
    for _ in 0..count * 200 {
        if out.len() >= count {
            break;
        }
        if let Some(steps) = draw() {
            let w = crate::workload::gen(steps);
            if !out.iter().any(|o| o.name == w.name) {
                out.push(w);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::parse;

    fn sets(spec: &str) -> Vec<u32> {
        let w = parse(spec).unwrap();
        let e = Expected::of(&w).unwrap();
        e.sets.iter().map(|(s, _)| *s).collect()
    }

    /// Two streams on unrelated files, a step each: any prefix of each,
    /// {}, {1}, {2}, {1,2}.
    #[test]
    fn unrelated_streams_are_free_of_each_other() {
        assert_eq!(
            sets("gen:s1/write:A:0:10,s2/write:B:0:10"),
            vec![0b00, 0b01, 0b10, 0b11]
        );
    }

    /// Within a stream, a prefix only: the second write never without the
    /// first.
    #[test]
    fn a_stream_is_a_prefix() {
        assert_eq!(
            sets("gen:s1/write:A:0:10,s1/write:B:0:10"),
            vec![0b00, 0b01, 0b11]
        );
    }

    /// Related steps keep their order across streams: the same file.
    #[test]
    fn the_same_file_relates_two_streams() {
        assert_eq!(
            sets("gen:s1/write:A:0:10,s2/write:A:5:10"),
            vec![0b00, 0b01, 0b11]
        );
    }

    /// A stream sync promises its stream's prefix, not another stream's.
    #[test]
    fn a_stream_sync_promises_its_own_stream() {
        let w = parse("gen:s1/write:A:0:10,s2/write:B:0:10,s1/write:D/C:0:5+streamsync").unwrap();
        let e = Expected::of(&w).unwrap();
        assert_eq!(e.promises, vec![0, 0, 0b101]);
    }

    /// A write whose directory another stream moves later: the write
    /// partly done beside the move is judged with the file at its new
    /// name (a write replayed after the move would name nothing, and soft
    /// updates' partial writes there were once called violations).
    #[test]
    fn a_partial_write_follows_its_file_moved_later() {
        let w = parse("gen:s1/write:D/C:1000:4000,s2/rename:D:E").unwrap();
        let e = Expected::of(&w).unwrap();
        let (_, _, before, after) = e
            .partials
            .iter()
            .find(|(set, r, ..)| *set == 0b10 && *r == 0)
            .expect("the write partly done after the move");
        let c = |t: &Tree| t.nodes.get(&b"E/C"[..]).map(|n| n.meta.size);
        assert_eq!((c(before), c(after)), (Some(Some(3000)), Some(Some(5000))));
    }

    /// A directory's rename half done (its old name gone) takes with it
    /// the names inside: a file linked there too shows its other names
    /// only, and the first of them leads its links.
    #[test]
    fn a_directory_half_moved_hides_the_links_inside_it() {
        let w = parse("gen:s1/link:D/C:L,s1/link:D/C:M,s1/mkdir:E,s1/rename:D:E/D").unwrap();
        let e = Expected::of(&w).unwrap();
        let (_, t) = e
            .dir_halves
            .iter()
            .find(|(set, _)| *set == 0b0111)
            .expect("the move's first half after the links");
        assert!(!t.nodes.contains_key(&b"D/C"[..]));
        let (l, m) = (&t.nodes[&b"L"[..]], &t.nodes[&b"M"[..]]);
        assert_eq!((l.meta.nlink, l.same_as.as_deref()), (2, None));
        assert_eq!((m.meta.nlink, m.same_as.as_deref()), (2, Some(&b"L"[..])));
    }
}
