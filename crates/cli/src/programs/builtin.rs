//! The programs `crashtest --program` knows, and programs of one's own.
//!
//! A program is a workload, run in the root of a recording mount, and a
//! checker, run in the root of each recovered crash image with
//! `STITCH_PROMISES` naming a file of the lines the workload printed before
//! the crash. The checker exits 0 for a consistent state and 1 for an
//! inconsistent one, printing `KIND: why` (KIND: durability, atomicity,
//! order or corruption); any other exit is the checker failing, reported
//! as such. The built-in ones are Python scripts compiled into the binary
//! (`crates/cli/programs/`), written out to a scratch directory to run.

use anyhow::Context;
use std::path::{Path, PathBuf};

/// Script files, by name, as the built-in programs import them.
const SCRIPTS: &[(&str, &str)] = &[
    ("witness.py", include_str!("../../programs/witness.py")),
    ("replace.py", include_str!("../../programs/replace.py")),
    ("maildir.py", include_str!("../../programs/maildir.py")),
    ("sqlite.py", include_str!("../../programs/sqlite.py")),
    ("git.py", include_str!("../../programs/git.py")),
    ("leveldb.py", include_str!("../../programs/leveldb.py")),
    ("depend.py", include_str!("../../programs/depend.py")),
    ("xsync.py", include_str!("../../programs/xsync.py")),
];

/// A built-in program: its name, its script and the variant argument.
struct Builtin {
    name: &'static str,
    script: &'static str,
    variant: Option<&'static str>,
    about: &'static str,
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "replace",
        script: "replace.py",
        variant: Some("fsync"),
        about: "write a temporary, fsync, rename over the file, fsync the directory",
    },
    Builtin {
        name: "replace-nofsync",
        script: "replace.py",
        variant: Some("nofsync"),
        about: "write a temporary and rename it over the file, no fsync",
    },
    Builtin {
        name: "maildir",
        script: "maildir.py",
        variant: None,
        about: "Maildir delivery: tmp/, fsync, rename into new/, fsync new/",
    },
    Builtin {
        name: "sqlite-rollback",
        script: "sqlite.py",
        variant: Some("delete"),
        about: "SQLite transactions, rollback journal, synchronous=EXTRA",
    },
    Builtin {
        name: "sqlite-wal",
        script: "sqlite.py",
        variant: Some("wal"),
        about: "SQLite transactions, write-ahead log, synchronous=EXTRA",
    },
    Builtin {
        name: "git",
        script: "git.py",
        variant: Some("default"),
        about: "git add and commit with Git's default settings",
    },
    Builtin {
        name: "git-fsync",
        script: "git.py",
        variant: Some("fsync"),
        about: "git add and commit with core.fsync=all",
    },
    Builtin {
        name: "leveldb",
        script: "leveldb.py",
        variant: None,
        about: "LevelDB (plyvel): synchronous puts of large values, compaction",
    },
    Builtin {
        name: "depend-gzip",
        script: "depend.py",
        variant: Some("depend"),
        about: "stitchfs depend \"gzip -k big\" \"rm big\" (patchgroups), no fsync",
    },
    Builtin {
        name: "gzip-rm",
        script: "depend.py",
        variant: Some("plain"),
        about: "gzip -k big && rm big, no fsync: the control for depend-gzip",
    },
    Builtin {
        name: "xsync-log",
        script: "xsync.py",
        variant: Some("xsync"),
        about: "records written, fsynced, renamed and logged under stitchfs xsync, each \"committed N\" printed after",
    },
    Builtin {
        name: "log-nofsync",
        script: "xsync.py",
        variant: Some("nosync"),
        about: "the same program alone with its fsyncs left out: the control for xsync-log",
    },
];

/// A workload and its checker, as argument vectors.
#[derive(Clone, Debug)]
pub struct Program {
    pub name: String,
    pub workload: Vec<String>,
    pub check: Vec<String>,
}

/// The names and descriptions of the built-in programs.
pub fn list() -> impl Iterator<Item = (&'static str, &'static str)> {
    BUILTINS.iter().map(|b| (b.name, b.about))
}

/// The built-in programs named in `spec` (comma-separated, or `all`),
/// their scripts written into `dir`.
pub fn builtins(spec: &str, dir: &Path) -> anyhow::Result<Vec<Program>> {
    for (name, text) in SCRIPTS {
        std::fs::write(dir.join(name), text).with_context(|| format!("writing {name}"))?;
    }
    let wanted: Vec<&str> = spec.split(',').map(str::trim).collect();
    let chosen: Vec<&Builtin> = if wanted == ["all"] {
        BUILTINS.iter().collect()
    } else {
        wanted
            .iter()
            .map(|w| {
                BUILTINS.iter().find(|b| b.name == *w).ok_or_else(|| {
                    let names: Vec<&str> = BUILTINS.iter().map(|b| b.name).collect();
                    anyhow::anyhow!("no program {w:?}: one of {}, or all", names.join(", "))
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    let python = python()?;
    Ok(chosen
        .into_iter()
        .map(|b| b.program(&python, dir))
        .collect())
}

/// The Python interpreter itself: `python3` on the path may be a shim
/// (pyenv's costs a tenth of a second a start, and a checker starts once
/// per crash image).
fn python() -> anyhow::Result<String> {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .context("running python3 (the built-in programs are Python scripts)")?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || path.is_empty() {
        anyhow::bail!("python3 does not say where it is");
    }
    Ok(path)
}

impl Builtin {
    fn program(&self, python: &str, dir: &Path) -> Program {
        let script = dir.join(self.script).display().to_string();
        let argv = |verb: &str| {
            let mut v = vec![python.to_string(), script.clone(), verb.to_string()];
            v.extend(self.variant.map(String::from));
            v
        };
        Program {
            name: self.name.to_string(),
            workload: argv("workload"),
            check: argv("check"),
        }
    }
}

/// A program of one's own: two executables.
pub fn custom(workload: &Path, checker: &Path) -> anyhow::Result<Program> {
    let abs = |p: &Path| -> anyhow::Result<String> {
        let p: PathBuf = p
            .canonicalize()
            .with_context(|| format!("script {}", p.display()))?;
        Ok(p.display().to_string())
    };
    let name = workload
        .file_stem()
        .map_or("custom".into(), |s| s.to_string_lossy().into_owned());
    Ok(Program {
        name,
        workload: vec![abs(workload)?],
        check: vec![abs(checker)?],
    })
}
