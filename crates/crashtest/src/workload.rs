//! Workloads: a setup made durable before recording starts, then steps,
//! each an operation by path followed by a persistence point.
//!
//! Named workloads come from the seeds; generated ones follow ACE/B3
//! (Mohan et al., OSDI '18): every sequence of up to N operations over a
//! small fixed tree (files `A`, `B`, directory `D` with file `D/C`), each
//! followed by a persistence point on something the operation touched.
//!
//! A workload has a textual spec that the CLI takes back (`--workload`),
//! so a reported violation names its workload exactly: a named workload
//! is its name; a generated one is `gen:` and its steps, e.g.
//! `gen:rename:A:D/A+fsync:D,unlink:B+sync`.

use crate::error::SpecError;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::fmt;
use stitch_model::{Rdev, Special};

/// One operation, by path (`D/C`; the root is `/` where a path may name it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Creat(String),
    Mkdir(String),
    /// Overwrite (or extend) `len` bytes at `offset`.
    Write {
        path: String,
        offset: u64,
        len: u64,
    },
    Append {
        path: String,
        len: u64,
    },
    /// Appends to a file until the disk refuses (`ENOSPC`): the length is
    /// what memfs takes, and the model and the oracle are told it. The
    /// flushes memfs makes on the way to find room are persistence points
    /// of their own (`sync`s).
    Fill(String),
    Truncate {
        path: String,
        size: u64,
    },
    Chmod {
        path: String,
        perm: u16,
    },
    Link {
        from: String,
        to: String,
    },
    Unlink(String),
    Rmdir(String),
    Rename {
        from: String,
        to: String,
    },
    Symlink {
        path: String,
        target: String,
    },
    /// A special file (no data): a named pipe, a socket, or a character
    /// or block device node with its device number.
    Mknod {
        path: String,
        kind: Special,
    },
    /// Sets the extended attribute `name` (`user.k`) to `value`.
    Setxattr {
        path: String,
        name: String,
        value: String,
    },
    /// `open(O_RDWR)` of a regular file: the handle takes the lowest free
    /// slot, and keeps the file alive if its last name goes (an orphan).
    Open(String),
    /// Overwrites (or extends) `len` bytes at `offset` through the handle
    /// in slot `fd`, which may name an orphan.
    WriteFd {
        fd: u32,
        offset: u64,
        len: u64,
    },
    /// Closes the handle in this slot. Handles still open after the last
    /// step are closed before the final sync, as a program's are when it
    /// exits.
    Close(u32),
}

/// What follows an operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Persist {
    None,
    /// `fsync` of a file or directory (`/` is the root).
    Fsync(String),
    /// `fsync` through the handle in this slot (of an orphan, perhaps).
    FsyncFd(u32),
    Sync,
    /// A stream sync: every change of the step's stream, durable.
    StreamSync,
    /// A patchgroup's sync (the group in this slot, by the step's
    /// process): it and what it depends on, durable.
    PgSync(u8),
    /// Output released by a member of the external-synchrony group (a
    /// step with `xsync`): the group's commit, after which every change
    /// the group made so far is durable.
    Output,
}

/// A patchgroup call a simulated process makes before its step's
/// operation (module `patchgroups`). Groups are named by slot (1..=8), a
/// slot made once per workload; processes by number (0 is the first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PgCall {
    /// `pg_create` into the slot.
    Create(u8),
    /// `pg_depend(q, p)`.
    Depend(u8, u8),
    Engage(u8),
    Disengage(u8),
    Close(u8),
    /// The process forks: the child, numbered so, holds its groups.
    Fork(u8),
    /// The process numbered so exits: it lets go of its groups.
    Exit(u8),
}

impl fmt::Display for PgCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgCall::Create(g) => write!(f, "c{g}"),
            PgCall::Depend(q, p) => write!(f, "d{q}>{p}"),
            PgCall::Engage(g) => write!(f, "e{g}"),
            PgCall::Disengage(g) => write!(f, "x{g}"),
            PgCall::Close(g) => write!(f, "k{g}"),
            PgCall::Fork(c) => write!(f, "f{c}"),
            PgCall::Exit(c) => write!(f, "q{c}"),
        }
    }
}

impl std::str::FromStr for PgCall {
    type Err = ();

    fn from_str(s: &str) -> Result<PgCall, ()> {
        let num = |t: &str| t.parse::<u8>().map_err(|_| ());
        let (k, rest) = s.split_at(s.len().min(1));
        Ok(match k {
            "c" => PgCall::Create(num(rest)?),
            "d" => {
                let (q, p) = rest.split_once('>').ok_or(())?;
                PgCall::Depend(num(q)?, num(p)?)
            }
            "e" => PgCall::Engage(num(rest)?),
            "x" => PgCall::Disengage(num(rest)?),
            "k" => PgCall::Close(num(rest)?),
            "f" => PgCall::Fork(num(rest)?),
            "q" => PgCall::Exit(num(rest)?),
            _ => return Err(()),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Step {
    pub action: Action,
    pub persist: Persist,
    /// The stream the step runs in (`sN/` in a spec), if any: its
    /// operation and its persistence point.
    pub stream: Option<u8>,
    /// The simulated process the step runs in (`pN.calls/` in a spec;
    /// 0 unless a workload of patchgroups says otherwise).
    pub proc: u8,
    /// Patchgroup calls the process makes first, in order.
    pub pg: Vec<PgCall>,
    /// The step runs in the external-synchrony group (`x/` in a spec):
    /// its fsyncs and syncs return at once, and an [`Persist::Output`]
    /// commits the group.
    pub xsync: bool,
}

/// A workload: what is on disk before recording, then the steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// The spec the CLI takes back.
    pub name: String,
    pub setup: Vec<Action>,
    pub steps: Vec<Step>,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Creat(p) => write!(f, "creat {p}"),
            Action::Mkdir(p) => write!(f, "mkdir {p}"),
            Action::Write { path, offset, len } => write!(f, "write {path} {offset}+{len}"),
            Action::Append { path, len } => write!(f, "append {path} {len}"),
            Action::Fill(p) => write!(f, "fill {p}"),
            Action::Truncate { path, size } => write!(f, "truncate {path} {size}"),
            Action::Chmod { path, perm } => write!(f, "chmod {path} {perm:o}"),
            Action::Link { from, to } => write!(f, "link {from} {to}"),
            Action::Unlink(p) => write!(f, "unlink {p}"),
            Action::Rmdir(p) => write!(f, "rmdir {p}"),
            Action::Rename { from, to } => write!(f, "rename {from} {to}"),
            Action::Symlink { path, target } => write!(f, "symlink {path} -> {target}"),
            Action::Mknod { path, kind } => match kind {
                Special::Fifo => write!(f, "mkfifo {path}"),
                Special::Socket => write!(f, "mknod {path} socket"),
                Special::Char(r) => write!(f, "mknod {path} char {}:{}", r.major, r.minor),
                Special::Block(r) => write!(f, "mknod {path} block {}:{}", r.major, r.minor),
            },
            Action::Setxattr { path, name, value } => write!(f, "setxattr {path} {name}={value}"),
            Action::Open(p) => write!(f, "open {p}"),
            Action::WriteFd { fd, offset, len } => write!(f, "write fd{fd} {offset}+{len}"),
            Action::Close(fd) => write!(f, "close fd{fd}"),
        }
    }
}

impl fmt::Display for Persist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Persist::None => f.write_str("-"),
            Persist::Fsync(p) => write!(f, "fsync({p})"),
            Persist::FsyncFd(fd) => write!(f, "fsync(fd{fd})"),
            Persist::Sync => f.write_str("sync"),
            Persist::StreamSync => f.write_str("streamsync"),
            Persist::PgSync(g) => write!(f, "pg_sync(g{g})"),
            Persist::Output => f.write_str("output"),
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.xsync {
            write!(f, "[xsync] ")?;
        }
        if let Some(n) = self.stream {
            write!(f, "[stream {n}] ")?;
        }
        if self.proc != 0 || !self.pg.is_empty() {
            write!(f, "[process {}", self.proc)?;
            for c in &self.pg {
                write!(f, " {c}")?;
            }
            write!(f, "] ")?;
        }
        match &self.persist {
            Persist::None => write!(f, "{}", self.action),
            p => write!(f, "{}; {p}", self.action),
        }
    }
}

impl Workload {
    /// Whether some step runs in a stream: the workload is judged by
    /// `streams`' rules (prefixes and related changes).
    pub fn streams(&self) -> bool {
        self.steps.iter().any(|s| s.stream.is_some())
    }

    /// Whether some step makes a patchgroup call or runs in a process but
    /// the first: judged by `streams`' rules with the groups' dependencies.
    pub fn patchgroups(&self) -> bool {
        self.steps
            .iter()
            .any(|s| s.proc != 0 || !s.pg.is_empty() || matches!(s.persist, Persist::PgSync(_)))
    }

    /// A listing for reports.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "workload {}\nsetup (durable before recording):\n",
            self.name
        );
        for a in &self.setup {
            s.push_str(&format!("  {a}\n"));
        }
        s.push_str("steps:\n");
        for (i, st) in self.steps.iter().enumerate() {
            s.push_str(&format!("  {}: {st}\n", i + 1));
        }
        s.push_str("then: sync; unmount\n");
        s
    }
}

// ---- specs ------------------------------------------------------------

fn action_spec(a: &Action) -> String {
    match a {
        Action::Creat(p) => format!("creat:{p}"),
        Action::Mkdir(p) => format!("mkdir:{p}"),
        Action::Write { path, offset, len } => format!("write:{path}:{offset}:{len}"),
        Action::Append { path, len } => format!("append:{path}:{len}"),
        Action::Fill(p) => format!("fill:{p}"),
        Action::Truncate { path, size } => format!("truncate:{path}:{size}"),
        Action::Chmod { path, perm } => format!("chmod:{path}:{perm:o}"),
        Action::Link { from, to } => format!("link:{from}:{to}"),
        Action::Unlink(p) => format!("unlink:{p}"),
        Action::Rmdir(p) => format!("rmdir:{p}"),
        Action::Rename { from, to } => format!("rename:{from}:{to}"),
        Action::Symlink { path, target } => format!("symlink:{path}:{target}"),
        Action::Mknod { path, kind } => match kind {
            Special::Fifo => format!("mkfifo:{path}"),
            Special::Socket => format!("mknod:{path}:s"),
            Special::Char(r) => format!("mknod:{path}:c:{}:{}", r.major, r.minor),
            Special::Block(r) => format!("mknod:{path}:b:{}:{}", r.major, r.minor),
        },
        Action::Setxattr { path, name, value } => format!("setxattr:{path}:{name}:{value}"),
        Action::Open(p) => format!("open:{p}"),
        Action::WriteFd { fd, offset, len } => format!("writefd:{fd}:{offset}:{len}"),
        Action::Close(fd) => format!("close:{fd}"),
    }
}

fn step_spec(s: &Step) -> String {
    let a = action_spec(&s.action);
    let a = match s.stream {
        Some(n) => format!("s{n}/{a}"),
        None => a,
    };
    let a = if s.xsync { format!("x/{a}") } else { a };
    let a = if s.proc != 0 || !s.pg.is_empty() {
        let calls: String = s.pg.iter().map(|c| format!(".{c}")).collect();
        format!("p{}{calls}/{a}", s.proc)
    } else {
        a
    };
    match &s.persist {
        Persist::None => a,
        Persist::Fsync(p) => format!("{a}+fsync:{p}"),
        Persist::FsyncFd(fd) => format!("{a}+fsyncfd:{fd}"),
        Persist::Sync => format!("{a}+sync"),
        Persist::StreamSync => format!("{a}+streamsync"),
        Persist::PgSync(g) => format!("{a}+pgsync:{g}"),
        Persist::Output => format!("{a}+output"),
    }
}

/// The spec of a generated workload with these steps.
pub fn generated_spec(steps: &[Step]) -> String {
    let parts: Vec<String> = steps.iter().map(step_spec).collect();
    format!("gen:{}", parts.join(","))
}

/// The `:`-separated fields of one step's operation.
struct Fields<'a> {
    step: &'a str,
    f: Vec<&'a str>,
}

impl Fields<'_> {
    fn number(&self, error: std::num::ParseIntError) -> SpecError {
        SpecError::Number {
            step: self.step.to_string(),
            error,
        }
    }

    fn num(&self, i: usize) -> Result<u64, SpecError> {
        let field = self.f.get(i).ok_or_else(|| SpecError::MissingField {
            step: self.step.to_string(),
            index: i,
        })?;
        field.parse().map_err(|e| self.number(e))
    }

    fn path(&self, i: usize) -> Result<String, SpecError> {
        self.f
            .get(i)
            .map(|p| p.to_string())
            .ok_or_else(|| SpecError::MissingPath {
                step: self.step.to_string(),
            })
    }

    /// `mknod:PATH:p|s|c:MAJ:MIN|b:MAJ:MIN`'s kind.
    fn special(&self) -> Result<Special, SpecError> {
        let rdev = || -> Result<Rdev, SpecError> {
            Ok(Rdev {
                major: self.num(3)? as u32,
                minor: self.num(4)? as u32,
            })
        };
        Ok(match self.f.get(2).copied() {
            Some("p") => Special::Fifo,
            Some("s") => Special::Socket,
            Some("c") => Special::Char(rdev()?),
            Some("b") => Special::Block(rdev()?),
            _ => {
                return Err(SpecError::Mknod {
                    step: self.step.to_string(),
                })
            }
        })
    }
}

/// One operation of a step spec: one arm per operation, as the table of
/// them reads.
fn parse_action(s: &str) -> Result<Action, SpecError> {
    let f = Fields {
        step: s,
        f: s.split(':').collect(),
    };
    let (num, path) = (|i| f.num(i), |i| f.path(i));
    Ok(match f.f[0] {
        "creat" => Action::Creat(path(1)?),
        "mkdir" => Action::Mkdir(path(1)?),
        "write" => Action::Write {
            path: path(1)?,
            offset: num(2)?,
            len: num(3)?,
        },
        "append" => Action::Append {
            path: path(1)?,
            len: num(2)?,
        },
        "fill" => Action::Fill(path(1)?),
        "truncate" => Action::Truncate {
            path: path(1)?,
            size: num(2)?,
        },
        "chmod" => Action::Chmod {
            path: path(1)?,
            perm: u16::from_str_radix(&path(2)?, 8).map_err(|e| f.number(e))?,
        },
        "link" => Action::Link {
            from: path(1)?,
            to: path(2)?,
        },
        "unlink" => Action::Unlink(path(1)?),
        "rmdir" => Action::Rmdir(path(1)?),
        "rename" => Action::Rename {
            from: path(1)?,
            to: path(2)?,
        },
        "symlink" => Action::Symlink {
            path: path(1)?,
            target: path(2)?,
        },
        "mkfifo" => Action::Mknod {
            path: path(1)?,
            kind: Special::Fifo,
        },
        "mknod" => Action::Mknod {
            path: path(1)?,
            kind: f.special()?,
        },
        "setxattr" => Action::Setxattr {
            path: path(1)?,
            name: path(2)?,
            value: path(3)?,
        },
        "open" => Action::Open(path(1)?),
        "writefd" => Action::WriteFd {
            fd: num(1)? as u32,
            offset: num(2)?,
            len: num(3)?,
        },
        "close" => Action::Close(num(1)? as u32),
        other => {
            return Err(SpecError::UnknownOperation {
                op: other.to_string(),
                step: s.to_string(),
            })
        }
    })
}

fn parse_step(s: &str) -> Result<Step, SpecError> {
    // `pN.call.call/`: the process and its patchgroup calls.
    let (proc, pg, s) = match s.split_once('/') {
        Some((head, rest)) if head.starts_with('p') && !head.contains(':') => {
            let mut parts = head[1..].split('.');
            let bad = || SpecError::UnknownPoint(head.to_string());
            let proc = parts
                .next()
                .and_then(|n| n.parse::<u8>().ok())
                .ok_or_else(bad)?;
            let pg = parts
                .map(|c| c.parse::<PgCall>().map_err(|_| bad()))
                .collect::<Result<Vec<_>, _>>()?;
            (proc, pg, rest)
        }
        _ => (0, Vec::new(), s),
    };
    // `x/`: in the external-synchrony group.
    let (xsync, s) = match s.strip_prefix("x/") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (stream, s) = match s.split_once('/') {
        Some((n, rest)) if n.starts_with('s') && n[1..].parse::<u8>().is_ok() => {
            (n[1..].parse::<u8>().ok(), rest)
        }
        _ => (None, s),
    };
    let (a, p) = match s.split_once('+') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let persist = match p {
        None => Persist::None,
        Some("sync") => Persist::Sync,
        Some("streamsync") => Persist::StreamSync,
        Some("output") => Persist::Output,
        Some(p) if p.starts_with("pgsync:") => Persist::PgSync(
            p["pgsync:".len()..]
                .parse()
                .map_err(|error| SpecError::Number {
                    step: p.to_string(),
                    error,
                })?,
        ),
        Some(p) => match (p.strip_prefix("fsync:"), p.strip_prefix("fsyncfd:")) {
            (Some(path), _) => Persist::Fsync(path.to_string()),
            (_, Some(fd)) => Persist::FsyncFd(fd.parse().map_err(|error| SpecError::Number {
                step: p.to_string(),
                error,
            })?),
            _ => return Err(SpecError::UnknownPoint(p.to_string())),
        },
    };
    Ok(Step {
        action: parse_action(a)?,
        persist,
        stream,
        proc,
        pg,
        xsync,
    })
}

/// The workload a spec names: a named workload, or `gen:` steps over the
/// standard setup.
pub fn parse(spec: &str) -> Result<Workload, SpecError> {
    if let Some(steps) = spec.strip_prefix("gen:") {
        let steps = steps
            .split(',')
            .filter(|s| !s.is_empty())
            .map(parse_step)
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Workload {
            name: generated_spec(&steps),
            setup: standard_setup(),
            steps,
        });
    }
    named()
        .into_iter()
        .find(|w| w.name == spec)
        .ok_or_else(|| SpecError::UnknownWorkload {
            spec: spec.to_string(),
            named: named().into_iter().map(|w| w.name).collect(),
        })
}

// ---- named workloads ---------------------------------------------------

fn s(p: &str) -> String {
    p.to_string()
}

fn step(action: Action, persist: Persist) -> Step {
    Step {
        action,
        persist,
        stream: None,
        proc: 0,
        pg: Vec::new(),
        xsync: false,
    }
}

fn fsync(p: &str) -> Persist {
    Persist::Fsync(s(p))
}

/// The workloads of the seeds.
pub fn named() -> Vec<Workload> {
    vec![
        featherstitch(),
        mcorefs_rename(),
        mcorefs_loop(),
        mcorefs_rmrf(),
        ccfs_journal_update(),
        maildelivery(),
        large_write(),
        orphans(),
        full(),
        git_objects(),
    ]
}

/// Git's commit with `core.fsync=all`, twice: an object written and
/// fsynced under a temporary name, linked to its real name, the temporary
/// unlinked; the reference's lock file written and fsynced, renamed over
/// the reference; a log file written and fsynced. The last fsync covers
/// the link in sequential order (every change before it), so no crash
/// state shows the new reference without its object; in precise order it
/// does not, and only what each fsync's closure holds is promised.
fn git_objects() -> Workload {
    let append = |p: &str, len: u64| Action::Append { path: s(p), len };
    let mut steps = Vec::new();
    for (i, dir) in ["objects/ab", "objects/cd"].into_iter().enumerate() {
        let tmp = format!("{dir}/tmp_obj_{i}");
        let obj = format!("{dir}/obj{i}");
        steps.extend([
            step(Action::Creat(tmp.clone()), Persist::None),
            step(append(&tmp, 300 + 100 * i as u64), fsync(&tmp)),
            step(
                Action::Link {
                    from: tmp.clone(),
                    to: obj,
                },
                Persist::None,
            ),
            step(Action::Unlink(tmp), Persist::None),
            step(Action::Creat(s("refs/master.lock")), Persist::None),
            step(append("refs/master.lock", 41), fsync("refs/master.lock")),
            step(
                Action::Rename {
                    from: s("refs/master.lock"),
                    to: s("refs/master"),
                },
                Persist::None,
            ),
            step(append("logs", 90), fsync("logs")),
        ]);
    }
    Workload {
        name: s("git-objects"),
        setup: vec![
            Action::Mkdir(s("objects")),
            Action::Mkdir(s("objects/ab")),
            Action::Mkdir(s("objects/cd")),
            Action::Mkdir(s("refs")),
            Action::Creat(s("refs/master")),
            append("refs/master", 41),
            Action::Creat(s("logs")),
        ],
        steps,
    }
}

/// A disk filled to `ENOSPC` and freed again. A fill takes what memfs
/// accepts; memfs flushes everything to find room before refusing, and
/// those flushes are persistence points of their own (a flush larger than
/// half these small logs is split across transactions, so crash states
/// fall between them). Then room freed by an unlink and a truncate, not
/// yet on disk, is found by the next change's flush and written again:
/// nothing fsynced is lost, no file shows another's bytes, and every
/// image is consistent.
fn full() -> Workload {
    let append = |p: &str, len: u64| Action::Append { path: s(p), len };
    Workload {
        name: s("full"),
        setup: vec![
            Action::Creat(s("old")),
            append("old", 1 << 20),
            Action::Mkdir(s("D")),
            Action::Creat(s("D/keep")),
            append("D/keep", 5000),
        ],
        steps: vec![
            step(Action::Creat(s("big")), Persist::None),
            step(Action::Fill(s("big")), fsync("big")),
            step(Action::Unlink(s("old")), Persist::None),
            step(Action::Creat(s("D/new")), fsync("D")),
            step(Action::Fill(s("D/new")), fsync("D/new")),
            step(
                Action::Truncate {
                    path: s("big"),
                    size: 300_000,
                },
                Persist::None,
            ),
            step(append("D/keep", 200_000), fsync("D/keep")),
            step(Action::Unlink(s("big")), Persist::Sync),
            step(Action::Fill(s("D/keep")), Persist::Sync),
        ],
    }
}

/// Open-unlinked files (a mail reader holding a message its server
/// deletes, a database's unlinked scratch file). The orphan list must hold
/// each until its last close, mount must free what a crash left on it, and
/// bytes written after an unlink must never show under the old name:
/// an orphan closed from behind another, once while its own link drop is
/// not yet on disk and once while the list's new head is not; an orphan
/// made by a rename over an open file; an unlink and a write through the
/// handle in one flush, then an fsync through it; then a new file reusing
/// the freed inodes and blocks.
fn orphans() -> Workload {
    let write = |fd, offset, len| Action::WriteFd { fd, offset, len };
    // A new file with `len` bytes, fsynced.
    let durable = |p: &str, len| {
        [
            step(Action::Creat(s(p)), Persist::None),
            step(Action::Append { path: s(p), len }, fsync(p)),
        ]
    };
    let mut steps = vec![
        step(Action::Open(s("A")), Persist::None),
        step(Action::Unlink(s("A")), Persist::Sync),
        step(Action::Open(s("B")), Persist::None),
        step(Action::Unlink(s("B")), Persist::Sync),
        step(Action::Close(0), Persist::Sync),
        step(Action::Open(s("D/C")), Persist::None),
        step(Action::Creat(s("E")), Persist::None),
        step(
            Action::Rename {
                from: s("E"),
                to: s("D/C"),
            },
            Persist::Sync,
        ),
        step(Action::Close(1), Persist::Sync),
    ];
    steps.extend(durable("A", 8192));
    steps.extend([
        step(Action::Open(s("A")), Persist::None),
        step(Action::Unlink(s("A")), Persist::None),
        step(write(1, 1000, 5000), Persist::Sync),
        step(write(1, 6000, 14000), Persist::FsyncFd(1)),
        step(Action::Close(0), Persist::Sync),
    ]);
    steps.extend(durable("B", 9000));
    // fd1 stays open to the end: closed before the final sync.
    Workload {
        name: s("orphans"),
        setup: standard_setup(),
        steps,
    }
}

/// Featherstitch §8 (and its Subversion case): files written by appends,
/// put in place by rename over the old one, old ones deleted; cycles with
/// and without syncs between.
fn featherstitch() -> Workload {
    let mut steps = Vec::new();
    for (i, persist) in [Persist::None, fsync("/"), Persist::Sync]
        .into_iter()
        .enumerate()
    {
        let tmp = format!("tmp{i}");
        steps.push(step(Action::Creat(tmp.clone()), Persist::None));
        for _ in 0..3 {
            steps.push(step(
                Action::Append {
                    path: tmp.clone(),
                    len: 4096,
                },
                Persist::None,
            ));
        }
        steps.push(step(
            Action::Append {
                path: s("log"),
                len: 700,
            },
            Persist::None,
        ));
        steps.push(step(
            Action::Rename {
                from: tmp,
                to: s("live"),
            },
            persist,
        ));
        if i == 1 {
            steps.push(step(Action::Unlink(s("old")), fsync("log")));
        }
    }
    Workload {
        name: s("featherstitch"),
        setup: vec![
            Action::Creat(s("live")),
            Action::Append {
                path: s("live"),
                len: 6000,
            },
            Action::Creat(s("old")),
            Action::Append {
                path: s("old"),
                len: 3000,
            },
            Action::Creat(s("log")),
        ],
        steps,
    }
}

/// McoreFS §3/§4.3: cross-directory renames, then fsync of one of the two
/// directories (the other must be durable up to the rename: the file is in
/// exactly one of them, never lost), in both directions.
fn mcorefs_rename() -> Workload {
    Workload {
        name: s("mcorefs-rename"),
        setup: vec![
            Action::Mkdir(s("X")),
            Action::Mkdir(s("Y")),
            Action::Creat(s("X/f")),
            Action::Append {
                path: s("X/f"),
                len: 5000,
            },
            Action::Creat(s("X/g")),
            Action::Creat(s("Y/h")),
        ],
        steps: vec![
            step(Action::Creat(s("X/new")), Persist::None),
            step(
                Action::Rename {
                    from: s("X/f"),
                    to: s("Y/f"),
                },
                Persist::None,
            ),
            step(Action::Creat(s("X/after")), fsync("Y")),
            step(
                Action::Rename {
                    from: s("Y/h"),
                    to: s("X/h"),
                },
                Persist::None,
            ),
            step(Action::Unlink(s("Y/f")), Persist::None),
            step(
                Action::Append {
                    path: s("X/h"),
                    len: 3000,
                },
                fsync("X"),
            ),
            step(
                Action::Rename {
                    from: s("X/g"),
                    to: s("Y/g"),
                },
                fsync("Y/g"),
            ),
        ],
    }
}

/// McoreFS Figure 4-3: /A/B/C/D on disk; `mv A/B/C C`, `mv A/B C/D/B`,
/// `fsync(D)`. Flushing only D and A would leave the loop B-C-D-B on disk.
fn mcorefs_loop() -> Workload {
    Workload {
        name: s("mcorefs-loop"),
        setup: vec![
            Action::Mkdir(s("A")),
            Action::Mkdir(s("A/B")),
            Action::Mkdir(s("A/B/C")),
            Action::Mkdir(s("A/B/C/D")),
            Action::Creat(s("A/B/C/D/f")),
        ],
        steps: vec![
            step(
                Action::Rename {
                    from: s("A/B/C"),
                    to: s("C"),
                },
                Persist::None,
            ),
            step(
                Action::Rename {
                    from: s("A/B"),
                    to: s("C/D/B"),
                },
                fsync("C/D"),
            ),
            step(
                Action::Rename {
                    from: s("C/D/B"),
                    to: s("A/B2"),
                },
                fsync("A"),
            ),
        ],
    }
}

/// McoreFS §4.3: a recursive delete, then fsync of the parent: deletions
/// inside the removed subdirectories reach the disk before its removal
/// (no orphan directory).
fn mcorefs_rmrf() -> Workload {
    let setup = vec![
        Action::Mkdir(s("P")),
        Action::Mkdir(s("P/T")),
        Action::Mkdir(s("P/T/U")),
        Action::Creat(s("P/T/U/f")),
        Action::Append {
            path: s("P/T/U/f"),
            len: 5000,
        },
        Action::Creat(s("P/T/g")),
        Action::Creat(s("P/keep")),
    ];
    let none = |a| step(a, Persist::None);
    Workload {
        name: s("mcorefs-rmrf"),
        setup,
        steps: vec![
            none(Action::Unlink(s("P/T/U/f"))),
            none(Action::Rmdir(s("P/T/U"))),
            none(Action::Unlink(s("P/T/g"))),
            step(Action::Rmdir(s("P/T")), fsync("P")),
            none(Action::Creat(s("P/T"))),
            step(
                Action::Rename {
                    from: s("P/keep"),
                    to: s("P/T"),
                },
                fsync("P"),
            ),
        ],
    }
}

/// ccfs §2 (the application journal-update protocol): write the intended
/// change to a journal, fsync it, overwrite the file in place, fsync it,
/// delete the journal.
fn ccfs_journal_update() -> Workload {
    let mut steps = Vec::new();
    for round in 0..2 {
        steps.push(step(Action::Creat(s("db.journal")), Persist::None));
        steps.push(step(
            Action::Append {
                path: s("db.journal"),
                len: 4096 + 512,
            },
            fsync("db.journal"),
        ));
        steps.push(step(
            Action::Write {
                path: s("db"),
                offset: 2048 + round * 4096,
                len: 4096,
            },
            fsync("db"),
        ));
        steps.push(step(
            Action::Unlink(s("db.journal")),
            if round == 0 {
                Persist::None
            } else {
                fsync("/")
            },
        ));
    }
    Workload {
        name: s("ccfs-journal-update"),
        setup: vec![
            Action::Creat(s("db")),
            Action::Append {
                path: s("db"),
                len: 12288,
            },
        ],
        steps,
    }
}

/// Maildir delivery (qmail): write the message in tmp/, fsync it, link it
/// into new/, unlink the tmp/ name, fsync new/; the second one by rename.
fn maildelivery() -> Workload {
    let mut steps = Vec::new();
    for (i, by_rename) in [false, true].into_iter().enumerate() {
        let tmp = format!("tmp/m{i}");
        let new = format!("new/m{i}");
        steps.push(step(Action::Creat(tmp.clone()), Persist::None));
        steps.push(step(
            Action::Append {
                path: tmp.clone(),
                len: 5000,
            },
            fsync(&tmp),
        ));
        if by_rename {
            steps.push(step(Action::Rename { from: tmp, to: new }, fsync("new")));
        } else {
            steps.push(step(
                Action::Link {
                    from: tmp.clone(),
                    to: new,
                },
                Persist::None,
            ));
            steps.push(step(Action::Unlink(tmp), fsync("new")));
        }
    }
    // The reader moves a message to cur/.
    steps.push(step(
        Action::Rename {
            from: s("new/m0"),
            to: s("cur/m0"),
        },
        fsync("cur"),
    ));
    Workload {
        name: s("maildelivery"),
        setup: vec![
            Action::Mkdir(s("tmp")),
            Action::Mkdir(s("new")),
            Action::Mkdir(s("cur")),
        ],
        steps,
    }
}

/// A file larger than the dirty bound of one flush (`Modes::split_point`
/// writes back past an eighth of these small images): its fsync streams it
/// to the device in slices with flushes between, so crash states fall in
/// the middle of one fsync's data. Then an overwrite in place of part of
/// it, and a sync; then a truncate into the indirect map, and an fsync.
fn large_write() -> Workload {
    Workload {
        name: s("large-write"),
        setup: vec![
            Action::Creat(s("small")),
            Action::Append {
                path: s("small"),
                len: 3000,
            },
        ],
        steps: vec![
            step(Action::Creat(s("big")), Persist::None),
            step(
                Action::Append {
                    path: s("big"),
                    len: 1536 << 10,
                },
                fsync("big"),
            ),
            step(
                Action::Append {
                    path: s("small"),
                    len: 2000,
                },
                Persist::None,
            ),
            step(
                Action::Write {
                    path: s("big"),
                    offset: 100_000,
                    len: 600_000,
                },
                Persist::Sync,
            ),
            // A cut inside the indirect map: the truncate copies the kept
            // part of the indirect block, switches the inode to it and
            // frees the old blocks, three soft-updates steps in one fsync.
            step(
                Action::Truncate {
                    path: s("big"),
                    size: 1_000_000,
                },
                fsync("big"),
            ),
        ],
    }
}

// ---- regressions ---------------------------------------------------------

/// The specs of [`regressions`].
const REGRESSIONS: &[&str] = &[
    "gen:open:A,unlink:A+sync,open:B,unlink:B+sync,close:0+sync",
    "gen:open:A,unlink:A,writefd:0:1000:5000+sync",
    "gen:mkdir:E+sync,rename:E:D/E,rmdir:D/E+sync",
    // Soft updates: `B` made again landed in its old slot over the removed
    // entry's leftovers, so its add covered only the bytes that differed
    // and the rename's removal of `D` (lengthening `B`) did not wait for
    // it; written with the add rolled back, `A` skipped `B` on disk and
    // `D` showed again beside `E`, one directory with two names.
    "gen:mkdir:E+sync,unlink:B,creat:B,rename:D:E",
];

/// Generated workloads longer than the exhaustive lengths that once showed
/// a violation (docs/crashtest.md says what each found), run with the
/// short set so the fix stays.
pub fn regressions() -> Vec<Workload> {
    REGRESSIONS
        .iter()
        .map(|s| parse(s).expect("a regression's spec parses"))
        .collect()
}

// ---- generated workloads -------------------------------------------------

/// The tree every generated workload starts from (durable): `A` with two
/// blocks of data, empty `B`, directory `D` holding `D/C`.
pub fn standard_setup() -> Vec<Action> {
    vec![
        Action::Creat(s("A")),
        Action::Append {
            path: s("A"),
            len: 8192,
        },
        Action::Creat(s("B")),
        Action::Mkdir(s("D")),
        Action::Creat(s("D/C")),
        Action::Append {
            path: s("D/C"),
            len: 3000,
        },
    ]
}

/// The operations generated workloads are made of: a list, long because
/// it spells out every path each operation may take.
pub fn universe() -> Vec<Action> {
    let mut v = Vec::new();
    for p in ["A", "B", "D/C", "D/A", "E"] {
        v.push(Action::Creat(s(p)));
    }
    for p in ["E", "D/F"] {
        v.push(Action::Mkdir(s(p)));
    }
    for (p, offset, len) in [("A", 2000, 6000), ("B", 0, 5000), ("D/C", 1000, 4000)] {
        v.push(Action::Write {
            path: s(p),
            offset,
            len,
        });
    }
    for p in ["A", "B", "D/C"] {
        v.push(Action::Append {
            path: s(p),
            len: 5000,
        });
    }
    for (p, size) in [("A", 1000), ("B", 9000), ("D/C", 0)] {
        v.push(Action::Truncate { path: s(p), size });
    }
    for (p, perm) in [("A", 0o600), ("D", 0o700)] {
        v.push(Action::Chmod { path: s(p), perm });
    }
    for (from, to) in [("A", "D/L"), ("D/C", "B"), ("D/C", "L")] {
        v.push(Action::Link {
            from: s(from),
            to: s(to),
        });
    }
    for p in ["A", "B", "D/C"] {
        v.push(Action::Unlink(s(p)));
    }
    for (from, to) in [
        ("A", "B"),
        ("A", "D/A"),
        ("D/C", "C"),
        ("D/C", "A"),
        ("B", "D/C"),
        ("D", "E"),
        ("D", "E/D"),
        ("E", "D/E"),
    ] {
        v.push(Action::Rename {
            from: s(from),
            to: s(to),
        });
    }
    for p in ["D", "E", "D/F"] {
        v.push(Action::Rmdir(s(p)));
    }
    // A fast symlink (the target in the inode) and a slow one (the target
    // in a block of its own, 100 bytes here: ext2 keeps up to 60 inline).
    for (path, target) in [("S", s("A")), ("D/T", format!("../{}", "t".repeat(97)))] {
        v.push(Action::Symlink {
            path: s(path),
            target,
        });
        v.push(Action::Unlink(s(path)));
    }
    // Open handles: with a later unlink or rename over the file they make
    // an orphan, alive with no name until it is closed.
    for p in ["A", "D/C"] {
        v.push(Action::Open(s(p)));
    }
    v.push(Action::WriteFd {
        fd: 0,
        offset: 1000,
        len: 5000,
    });
    v.push(Action::Close(0));
    // Special files: no data, but a type and, for a device, a number the
    // inode must keep (in `i_block`, where a file has its map).
    for (path, kind) in [
        ("D/P", Special::Fifo),
        ("D/N", Special::Char(Rdev { major: 1, minor: 3 })),
        (
            "Q",
            Special::Block(Rdev {
                major: 8,
                minor: 17,
            }),
        ),
        ("D/K", Special::Socket),
    ] {
        v.push(Action::Mknod {
            path: s(path),
            kind,
        });
        v.push(Action::Unlink(s(path)));
    }
    // Extended attributes, of a file and of a directory (ext2 keeps a
    // file's set in a block of its own, which the inode points to).
    for (path, value) in [("A", "one"), ("D", "two")] {
        v.push(Action::Setxattr {
            path: s(path),
            name: s("user.k"),
            value: s(value),
        });
    }
    v
}

/// The paths an operation names, for the persistence points after it: the
/// names it leaves behind and the directories holding both ends.
fn touched(a: &Action) -> (Vec<String>, Vec<String>) {
    let parent = |p: &str| match p.rsplit_once('/') {
        Some((d, _)) => d.to_string(),
        None => s("/"),
    };
    match a {
        Action::Creat(p) | Action::Mkdir(p) => (vec![p.clone()], vec![parent(p)]),
        // A program cannot fsync a symlink (opening one follows it, and a
        // descriptor from `O_PATH` refuses fsync) or a special file (its
        // descriptor is the pipe's, socket's or device's, not the
        // inode's): only their directory.
        Action::Symlink { path, .. } | Action::Mknod { path, .. } => (vec![], vec![parent(path)]),
        Action::Write { path, .. }
        | Action::Append { path, .. }
        | Action::Fill(path)
        | Action::Truncate { path, .. }
        | Action::Chmod { path, .. }
        | Action::Setxattr { path, .. } => (vec![path.clone()], vec![parent(path)]),
        Action::Link { from, to } => (vec![to.clone()], vec![parent(from), parent(to)]),
        Action::Unlink(p) | Action::Rmdir(p) => (vec![], vec![parent(p)]),
        Action::Rename { from, to } => (vec![to.clone()], vec![parent(from), parent(to)]),
        // Opening changes nothing; an fsync of the file is what a program
        // holding the handle might do.
        Action::Open(p) => (vec![p.clone()], vec![]),
        Action::WriteFd { .. } | Action::Close(_) => (vec![], vec![]),
    }
}

/// The persistence points offered after `a`: none, sync, fsync of what it
/// left behind, fsync of the directories it changed.
pub fn persist_options(a: &Action) -> Vec<Persist> {
    let (names, dirs) = touched(a);
    let mut v = vec![Persist::None, Persist::Sync];
    if let Action::WriteFd { fd, .. } = a {
        v.push(Persist::FsyncFd(*fd));
    }
    for p in names.into_iter().chain(dirs) {
        let p = Persist::Fsync(p);
        if !v.contains(&p) {
            v.push(p);
        }
    }
    v
}

/// Every (operation, persistence point) pair.
pub fn steps() -> Vec<Step> {
    let mut v = Vec::new();
    for a in universe() {
        for p in persist_options(&a) {
            v.push(step(a.clone(), p));
        }
    }
    v
}

/// Whether every step of `steps` succeeds on the reference model from the
/// standard setup (sequences with a failing operation are not generated).
pub fn valid(steps: &[Step]) -> bool {
    let mut m = crate::run::setup_model(&standard_setup());
    let mut writes = 0;
    steps.iter().all(|st| {
        crate::run::model_apply(&mut m, &st.action, &mut writes).is_ok()
            && match &st.persist {
                Persist::Fsync(p) => m.resolve(&stitch_model::Path::parse(p)).is_ok(),
                Persist::FsyncFd(fd) => m.fd_inode(stitch_model::Fd(*fd)).is_ok(),
                _ => true,
            }
    })
}

/// Every valid workload of exactly `len` steps, in a stable order.
pub fn exhaustive(len: usize) -> Vec<Workload> {
    let all = steps();
    let mut out = Vec::new();
    let mut prefix: Vec<Step> = Vec::new();
    extend(&all, len, &mut prefix, &mut out);
    out
}

fn extend(all: &[Step], len: usize, prefix: &mut Vec<Step>, out: &mut Vec<Workload>) {
    if prefix.len() == len {
        out.push(gen(prefix.clone()));
        return;
    }
    for st in all {
        prefix.push(st.clone());
        if valid(prefix) {
            extend(all, len, prefix, out);
        }
        prefix.pop();
    }
}

pub(crate) fn gen(steps: Vec<Step>) -> Workload {
    Workload {
        name: generated_spec(&steps),
        setup: standard_setup(),
        steps,
    }
}

/// `count` distinct valid workloads of `len` steps drawn with `seed`.
pub fn sampled(len: usize, count: usize, seed: u64) -> Vec<Workload> {
    let all = steps();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (len as u64) << 32);
    let mut out: Vec<Workload> = Vec::new();
    let mut tries = 0;
    while out.len() < count && tries < count * 200 {
        tries += 1;
        let mut steps = Vec::with_capacity(len);
        while steps.len() < len {
            let st = all.choose(&mut rng).expect("steps").clone();
            steps.push(st);
            if !valid(&steps) {
                steps.pop();
                if steps.is_empty() || rand::Rng::gen_bool(&mut rng, 0.1) {
                    break;
                }
            }
        }
        if steps.len() == len {
            let w = gen(steps);
            if !out.iter().any(|o| o.name == w.name) {
                out.push(w);
            }
        }
    }
    out
}

/// Generated workloads: every valid sequence of up to `min(max_len, 2)`
/// steps, then `samples` drawn with `seed` for each longer length up to
/// `max_len`.
pub fn generated(max_len: usize, samples: usize, seed: u64) -> Vec<Workload> {
    let mut out = Vec::new();
    for len in 1..=max_len {
        if len <= 2 {
            out.extend(exhaustive(len));
        } else {
            out.extend(sampled(len, samples, seed));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_round_trip() {
        for w in exhaustive(1) {
            assert_eq!(parse(&w.name).unwrap(), w);
        }
        for w in named() {
            assert_eq!(parse(&w.name).unwrap().name, w.name);
        }
        for w in regressions() {
            assert_eq!(w.name, generated_spec(&w.steps));
            assert!(valid(&w.steps), "{}", w.name);
        }
        assert!(matches!(
            parse("nope"),
            Err(SpecError::UnknownWorkload { .. })
        ));
        assert!(matches!(
            parse("gen:write:a:x:1"),
            Err(SpecError::Number { .. })
        ));
        assert!(matches!(
            parse("gen:creat:a+flush"),
            Err(SpecError::UnknownPoint(_))
        ));
    }

    #[test]
    fn generation_is_stable_and_valid() {
        let one = exhaustive(1);
        assert!(one.len() > 60, "{}", one.len());
        assert!(one.iter().all(|w| valid(&w.steps)));
        let a = sampled(3, 10, 7);
        assert_eq!(a, sampled(3, 10, 7));
        assert_eq!(a.len(), 10);
        assert!(a.iter().all(|w| w.steps.len() == 3));
    }
}
