//! Workloads of patchgroups ("Generalized File System Dependencies",
//! §5): simulated processes make, engage, depend on, sync and close
//! groups, fork and exit, between the standard file operations.
//!
//! The rules here are the judge's own statement of a group's life (the
//! paper's Figure 5), written apart from memfs's table: the generator
//! makes only calls they allow, the run makes them on memfs's table, and
//! a call the table answers otherwise is a finding (`StepError::Patchgroup`).
//!
//! Every step of these workloads runs while its process has some group
//! engaged. A flush holding changes in no domain is not ordered (in soft
//! updates its patches reach the disk in any order their own rules allow,
//! and in data=writeback a file's data may land without its size), so
//! whole steps and related steps in order, which the judge below builds
//! on, hold only for changes in some domain; changes in none are judged
//! by the ordinary workloads, against the oracle.
//!
//! What the judge holds a crash image to (with `streams`' machinery of
//! allowed sets, related steps and soft updates' partial steps): a set of
//! steps is allowed only if, with any step made while its process had a
//! group Q engaged, it holds every earlier step made under a group Q
//! depends on, directly or through others; and a `pg_sync` of a group
//! that returned promises every step made under it or under what it
//! depends on up to then.

use crate::workload::{Persist, PgCall, Step, Workload};
use std::collections::BTreeMap;

/// Slots a workload names groups in (1..=MAX_SLOT).
pub const MAX_SLOT: u8 = 8;

/// A set of slots, a bit per slot.
pub type Slots = u16;

fn bit(slot: u8) -> Slots {
    1 << slot
}

#[derive(Clone, Debug, Default)]
struct Group {
    ever_engaged: bool,
    sealed: bool,
    deps: Slots,
}

/// The rules of groups and processes, as a workload's calls go.
#[derive(Clone, Debug)]
pub struct Rules {
    /// Each live process: the slots it holds, each engaged or not.
    procs: BTreeMap<u8, BTreeMap<u8, bool>>,
    /// Every process number ever used (a number is not reused).
    used: Vec<u8>,
    /// Groups alive (held by some process), by slot.
    groups: BTreeMap<u8, Group>,
    /// Slots ever made (a slot is made once).
    made: Slots,
}

impl Default for Rules {
    fn default() -> Rules {
        Rules {
            procs: BTreeMap::from([(0, BTreeMap::new())]),
            used: vec![0],
            groups: BTreeMap::new(),
            made: 0,
        }
    }
}

impl Rules {
    /// Makes `call` as process `proc`, if the rules allow it.
    pub fn apply(&mut self, proc: u8, call: PgCall) -> Result<(), &'static str> {
        let held = self.procs.get(&proc).ok_or("no such process")?;
        let holds = |g: u8| held.contains_key(&g);
        match call {
            PgCall::Create(g) => {
                if g == 0 || g > MAX_SLOT || self.made & bit(g) != 0 {
                    return Err("a slot made before");
                }
                self.made |= bit(g);
                self.groups.insert(g, Group::default());
                self.procs.get_mut(&proc).expect("live").insert(g, false);
            }
            PgCall::Depend(q, p) => {
                if !holds(q) || !holds(p) {
                    return Err("a group the process does not hold");
                }
                if q == p {
                    return Err("a group depending on itself");
                }
                let gq = &self.groups[&q];
                if gq.deps & bit(p) != 0 {
                    return Ok(());
                }
                if gq.ever_engaged || gq.sealed {
                    return Err("a dependency of a group engaged before, or sealed");
                }
                if self.engaged_anywhere(p) {
                    return Err("a dependency on a group engaged now");
                }
                self.groups.get_mut(&p).expect("held").sealed = true;
                self.groups.get_mut(&q).expect("held").deps |= bit(p);
            }
            PgCall::Engage(g) => {
                if !holds(g) {
                    return Err("a group the process does not hold");
                }
                let gr = self.groups.get_mut(&g).expect("held");
                if gr.sealed {
                    return Err("a sealed group");
                }
                gr.ever_engaged = true;
                self.procs.get_mut(&proc).expect("live").insert(g, true);
            }
            PgCall::Disengage(g) => {
                if held.get(&g) != Some(&true) {
                    return Err("a group the process has not engaged");
                }
                self.procs.get_mut(&proc).expect("live").insert(g, false);
            }
            PgCall::Close(g) => {
                if !holds(g) {
                    return Err("a group the process does not hold");
                }
                self.procs.get_mut(&proc).expect("live").remove(&g);
                self.forget_unheld();
            }
            PgCall::Fork(child) => {
                if self.used.contains(&child) {
                    return Err("a process number used before");
                }
                let copy = held.clone();
                self.used.push(child);
                self.procs.insert(child, copy);
            }
            PgCall::Exit(p) => {
                if p == 0 || p == proc || !self.procs.contains_key(&p) {
                    return Err("an exit of process 0, of the caller or of none");
                }
                self.procs.remove(&p);
                self.forget_unheld();
            }
        }
        Ok(())
    }

    fn engaged_anywhere(&self, g: u8) -> bool {
        self.procs.values().any(|h| h.get(&g) == Some(&true))
    }

    fn forget_unheld(&mut self) {
        let procs = &self.procs;
        self.groups
            .retain(|g, _| procs.values().any(|h| h.contains_key(g)));
    }

    /// The slots process `proc` has engaged now.
    pub fn engaged(&self, proc: u8) -> Slots {
        self.procs.get(&proc).map_or(0, |h| {
            h.iter()
                .filter(|(_, &e)| e)
                .fold(0, |m, (&g, _)| m | bit(g))
        })
    }

    /// Whether process `proc` lives and holds `g`.
    pub fn holds(&self, proc: u8, g: u8) -> bool {
        self.procs.get(&proc).is_some_and(|h| h.contains_key(&g))
    }
}

/// What a workload's groups say of its steps.
pub struct Facts {
    /// For each step, the slots its process had engaged at its operation.
    pub engaged: Vec<Slots>,
    /// For each slot, every slot it depends on, directly or not.
    pub depends: [Slots; MAX_SLOT as usize + 1],
}

impl Facts {
    /// The facts of `w`, whose calls must follow the rules.
    pub fn of(w: &Workload) -> Result<Facts, String> {
        let mut rules = Rules::default();
        let mut direct = [0 as Slots; MAX_SLOT as usize + 1];
        let mut engaged = Vec::with_capacity(w.steps.len());
        for (i, st) in w.steps.iter().enumerate() {
            for &c in &st.pg {
                rules
                    .apply(st.proc, c)
                    .map_err(|why| format!("step {} ({c}): {why}", i + 1))?;
                if let PgCall::Depend(q, p) = c {
                    direct[q as usize] |= bit(p);
                }
            }
            if let Persist::PgSync(g) = st.persist {
                if !rules.holds(st.proc, g) {
                    return Err(format!("step {}: pg_sync of a group not held", i + 1));
                }
            }
            engaged.push(rules.engaged(st.proc));
        }
        // Transitive closure (slots are few).
        let mut depends = direct;
        for _ in 0..MAX_SLOT {
            for g in 1..=MAX_SLOT as usize {
                let mut d = depends[g];
                for p in 1..=MAX_SLOT {
                    if depends[g] & bit(p) != 0 {
                        d |= depends[p as usize];
                    }
                }
                depends[g] = d;
            }
        }
        Ok(Facts { engaged, depends })
    }

    /// The slots any of `slots` depends on.
    fn deps_of(&self, slots: Slots) -> Slots {
        (1..=MAX_SLOT)
            .filter(|&g| slots & bit(g) != 0)
            .fold(0, |m, g| m | self.depends[g as usize])
    }

    /// The earlier steps step `i` must come with: those made under a
    /// group that a group engaged at step `i` depends on.
    pub fn preds(&self, i: usize) -> u32 {
        let wanted = self.deps_of(self.engaged[i]);
        (0..i)
            .filter(|&j| self.engaged[j] & wanted != 0)
            .fold(0, |m, j| m | 1 << j)
    }

    /// The steps a `pg_sync` of `slot` after step `i` makes durable.
    pub fn synced(&self, slot: u8, i: usize) -> u32 {
        let wanted = bit(slot) | self.depends[slot as usize];
        (0..=i)
            .filter(|&j| self.engaged[j] & wanted != 0)
            .fold(0, |m, j| m | 1 << j)
    }
}

/// Patchgroup workloads written for the paper's cases (over the standard
/// setup): gzip's output before the input's removal; a dependency on a
/// group a child made changes under; a chain of three groups synced in
/// the middle; a group engaged by two processes; and two whose groups
/// touch unrelated files, so that only the dependency (not a shared
/// directory or file) brings one group's changes with another's sync:
/// directly, and through a chain of three.
pub fn named() -> Vec<Workload> {
    [
        "gen:p0.c1.e1/append:B:2000,p0.x1.c2.d2>1.e2/chmod:D/C:600+pgsync:2",
        "gen:p0.c1.e1/write:A:0:100,p0.x1.c2.d2>1.e2/append:B:3000,p0.x2.c3.d3>2.e3/chmod:D/C:600+pgsync:3",
        "gen:p0.c1.e1/creat:E,p0/append:E:3000,p0.x1.c2.d2>1.e2/unlink:A+pgsync:2",
        "gen:p0.c1.e1.f1/append:B:2000,p1/creat:E,p0.q1.x1.c2.d2>1.e2/rename:E:D/E,p0/chmod:D:700",
        "gen:p0.c1.e1/mkdir:E,p0.x1.c2.d2>1.e2/creat:E/x,p0.x2.c3.d3>2.e3/append:E/x:5000+pgsync:2,p0/unlink:B",
        "gen:p0.c1.e1.f2/creat:E,p2/append:E:100,p0/write:A:0:100,p0.x1.q2.c3.d3>1.e3/unlink:E+pgsync:3",
    ]
    .into_iter()
    .map(|s| crate::workload::parse(s).expect("a valid patchgroup workload"))
    .collect()
}

/// `count` distinct patchgroup workloads of `len` steps drawn with
/// `seed`: the generated workloads' file operations, each by one of the
/// live simulated processes after zero to three calls the rules allow
/// (create, depend, engage, disengage, close, fork, exit), and one more
/// engage (of a new group if need be) when the process would otherwise
/// have none engaged; some followed by a `pg_sync` of a group the
/// process holds, or a `sync`.
pub fn generated(len: usize, count: usize, seed: u64) -> Vec<Workload> {
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    let ops = crate::streams::replayable_ops();
    let len = len.min(crate::streams::MAX_STEPS);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5047_524f_5550);
    crate::streams::distinct(count, || {
        let mut steps: Vec<Step> = Vec::with_capacity(len);
        let mut rules = Rules::default();
        let mut next_slot = 1u8;
        let mut next_proc = 1u8;
        while steps.len() < len {
            let procs: Vec<u8> = rules.procs.keys().copied().collect();
            let proc = *procs.choose(&mut rng).expect("process 0 lives");
            let mut trial = rules.clone();
            let mut calls = Vec::new();
            for _ in 0..rng.gen_range(0..=3) {
                let held: Vec<u8> = trial.procs[&proc].keys().copied().collect();
                let any = |rng: &mut rand_chacha::ChaCha8Rng| held.choose(rng).copied();
                let call = match rng.gen_range(0..10) {
                    0 | 1 if next_slot <= MAX_SLOT => Some(PgCall::Create(next_slot)),
                    2 | 3 => any(&mut rng)
                        .zip(any(&mut rng))
                        .map(|(q, p)| PgCall::Depend(q, p)),
                    4 | 5 => any(&mut rng).map(PgCall::Engage),
                    6 => any(&mut rng).map(PgCall::Disengage),
                    7 => any(&mut rng).map(PgCall::Close),
                    8 if next_proc < 4 => Some(PgCall::Fork(next_proc)),
                    9 => procs
                        .iter()
                        .copied()
                        .filter(|&p| p != 0 && p != proc)
                        .collect::<Vec<_>>()
                        .choose(&mut rng)
                        .map(|&p| PgCall::Exit(p)),
                    _ => None,
                };
                let Some(call) = call else { continue };
                if trial.apply(proc, call).is_ok() {
                    match call {
                        PgCall::Create(_) => next_slot += 1,
                        PgCall::Fork(_) => next_proc += 1,
                        _ => {}
                    }
                    calls.push(call);
                }
            }
            // Every step runs under some group (see the module's note).
            if trial.engaged(proc) == 0 {
                let open = trial.procs[&proc]
                    .keys()
                    .copied()
                    .find(|g| !trial.groups[g].sealed);
                let g = match open {
                    Some(g) => g,
                    None if next_slot <= MAX_SLOT => {
                        trial
                            .apply(proc, PgCall::Create(next_slot))
                            .expect("a fresh slot");
                        calls.push(PgCall::Create(next_slot));
                        next_slot += 1;
                        next_slot - 1
                    }
                    None => break,
                };
                trial.apply(proc, PgCall::Engage(g)).expect("an open group");
                calls.push(PgCall::Engage(g));
            }
            let action = ops.choose(&mut rng).expect("operations").clone();
            let held: Vec<u8> = trial.procs[&proc].keys().copied().collect();
            let persist = match (rng.gen_range(0..10), held.choose(&mut rng)) {
                (0..=2, Some(&g)) => Persist::PgSync(g),
                (3, _) => Persist::Sync,
                _ => Persist::None,
            };
            steps.push(Step {
                action,
                persist,
                stream: None,
                proc,
                pg: calls,
                xsync: false,
            });
            if crate::workload::valid(&steps) {
                rules = trial;
            } else {
                // Slots and process numbers taken by the dropped calls
                // stay taken: the next step's calls use fresh ones.
                steps.pop();
                if steps.is_empty() || rng.gen_bool(0.1) {
                    break;
                }
            }
        }
        let calls = steps.iter().filter(|s| !s.pg.is_empty()).count();
        (steps.len() == len && calls >= 2).then_some(steps)
    })
}

/// Streams and patchgroups together: workloads whose steps run in a
/// stream (one of two) and under groups at once, so each change has both
/// orders. Two named cases, where a stream's sync must bring a group
/// another stream's step depends on, and where a group's sync must bring
/// the stream prefix before its step; then `generated` workloads with
/// each step put in a stream, some of their persistence points made
/// stream syncs.
pub fn with_streams(len: usize, count: usize, seed: u64) -> Vec<Workload> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5354_5047);
    let mut out: Vec<Workload> = [
        "gen:p0.c1.e1/s1/append:B:2000,p0.x1.c2.d2>1.e2/s2/chmod:D/C:600+streamsync",
        "gen:p0.c1.e1/s1/write:A:0:100,p0/s1/append:B:3000,p0.x1.c2.e2/s1/chmod:D/C:600+pgsync:2",
    ]
    .into_iter()
    .map(|s| crate::workload::parse(s).expect("a valid workload"))
    .collect();
    for w in generated(len, count, seed) {
        let mut steps = w.steps;
        for st in &mut steps {
            st.stream = Some(rng.gen_range(1..=2));
            if st.persist == Persist::None && rng.gen_bool(0.15) {
                st.persist = Persist::StreamSync;
            }
        }
        out.push(crate::workload::gen(steps));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::parse;

    #[test]
    fn the_rules_refuse_what_the_paper_forbids() {
        let mut r = Rules::default();
        r.apply(0, PgCall::Create(1)).unwrap();
        r.apply(0, PgCall::Create(2)).unwrap();
        assert!(r.apply(0, PgCall::Create(1)).is_err(), "a slot made twice");
        assert!(r.apply(0, PgCall::Depend(1, 1)).is_err());
        r.apply(0, PgCall::Engage(1)).unwrap();
        assert!(r.apply(0, PgCall::Depend(2, 1)).is_err(), "1 is engaged");
        r.apply(0, PgCall::Fork(1)).unwrap();
        r.apply(0, PgCall::Disengage(1)).unwrap();
        assert!(
            r.apply(0, PgCall::Depend(2, 1)).is_err(),
            "the child has 1 engaged"
        );
        r.apply(0, PgCall::Exit(1)).unwrap();
        r.apply(0, PgCall::Depend(2, 1)).unwrap();
        assert!(r.apply(0, PgCall::Engage(1)).is_err(), "sealed");
        assert!(r.apply(0, PgCall::Depend(1, 2)).is_err(), "sealed: a cycle");
        r.apply(0, PgCall::Engage(2)).unwrap();
        r.apply(0, PgCall::Create(3)).unwrap();
        assert!(r.apply(0, PgCall::Depend(2, 3)).is_err(), "engaged before");
        r.apply(0, PgCall::Close(3)).unwrap();
        assert!(r.apply(0, PgCall::Engage(3)).is_err(), "closed");
        assert!(r.apply(5, PgCall::Create(4)).is_err(), "no process 5");
    }

    #[test]
    fn a_step_under_a_dependent_group_needs_the_steps_of_its_dependencies() {
        let w = parse(
            "gen:p0.c1.e1/creat:E,p0/chmod:A:600,p0.x1/chmod:B:600,\
             p0.c2.d2>1.e2/unlink:C+pgsync:2,p0.c3.e3/chmod:D:700",
        )
        .unwrap();
        let f = Facts::of(&w).unwrap();
        assert_eq!(f.engaged, vec![0b10, 0b10, 0, 0b100, 0b1100]);
        // Step 4 (under 2, which depends on 1) needs steps 1 and 2.
        assert_eq!(f.preds(3), 0b11);
        // Step 5 is under 2 and 3: it needs 1's too; 3 depends on none.
        assert_eq!(f.preds(4), 0b11);
        assert_eq!(f.preds(2), 0, "a step in no group needs none");
        assert_eq!(f.synced(2, 3), 0b1011);
    }

    #[test]
    fn generated_workloads_follow_the_rules_and_read_back() {
        let ws = generated(8, 20, 3);
        assert_eq!(ws.len(), 20);
        for w in &ws {
            let f = Facts::of(w).unwrap();
            assert!(f.engaged.iter().all(|&e| e != 0), "a step in no group");
            assert_eq!(&parse(&w.name).unwrap(), w);
        }
        for w in named().into_iter().chain(with_streams(8, 10, 3)) {
            let f = Facts::of(&w).unwrap();
            assert!(f.engaged.iter().all(|&e| e != 0), "{}", w.name);
            assert_eq!(parse(&w.name).unwrap(), w);
        }
    }
}
