//! The layers hold: each crate depends only on the stitch crates that
//! ARCHITECTURE.md's "Allowed dependencies" table lists for it, both in its
//! `[dependencies]` and in the code itself (every `stitch_*` path its
//! sources name), so the document, the manifests and the code cannot
//! drift apart. A crate missing from the table fails too. Dev-dependencies
//! (tests, examples) are free.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
}

/// Parses the table: crate name → allowed stitch dependencies.
fn allowed() -> BTreeMap<String, BTreeSet<String>> {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let section = doc
        .split("## Allowed dependencies")
        .nth(1)
        .expect("section in ARCHITECTURE.md");
    let mut table = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() != 3 || cells[0] == "crate" || cells[0].starts_with("---") {
            continue;
        }
        let deps = cells[2]
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from);
        table.insert(cells[0].to_string(), deps.collect());
    }
    table
}

/// A workspace crate: its package name, its directory, and the library
/// name each `[dependencies]` stitch crate is used by in code.
struct Crate {
    name: String,
    dir: PathBuf,
    deps: BTreeSet<String>,
}

fn crates() -> Vec<Crate> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(text) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let doc: toml::Table = text.parse().unwrap();
        let name = doc["package"]["name"].as_str().unwrap().to_string();
        let deps = doc
            .get("dependencies")
            .and_then(|d| d.as_table())
            .map(|d| {
                d.keys()
                    .filter(|k| k.starts_with("stitch"))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        out.push(Crate { name, dir, deps });
    }
    out
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The stitch crates the code of `dir/src` names (`stitch_memfs::…`,
/// `use stitch_patch::{…}`), as package names; comments are skipped, and
/// so are unit tests kept in their own `tests.rs` (compiled only under
/// `cfg(test)`, they may use dev-dependencies, as tests may).
fn named_in_code(dir: &Path) -> BTreeSet<String> {
    let mut files = Vec::new();
    sources(&dir.join("src"), &mut files);
    files.retain(|f| !f.ends_with("tests.rs"));
    let mut named = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            let mut rest = code;
            while let Some(at) = rest.find("stitch_") {
                let word: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let preceded = at > 0 && {
                    let c = rest.as_bytes()[at - 1];
                    c.is_ascii_alphanumeric() || c == b'_' || c == b'"'
                };
                if !preceded && rest[at + word.len()..].starts_with("::") {
                    named.insert(word.replace('_', "-"));
                }
                rest = &rest[at + word.len()..];
            }
        }
    }
    named
}

#[test]
fn crates_depend_only_on_what_architecture_md_allows() {
    let allowed = allowed();
    assert!(allowed.len() >= 6, "table not parsed: {allowed:?}");
    for c in crates() {
        let ok = allowed
            .get(&c.name)
            .unwrap_or_else(|| panic!("{} is missing from ARCHITECTURE.md's table", c.name));
        let extra: Vec<_> = c.deps.difference(ok).collect();
        assert!(
            extra.is_empty(),
            "{} depends on {extra:?}, which ARCHITECTURE.md does not allow",
            c.name
        );
    }
}

/// The manifest could list a layer only to satisfy this test while the
/// code reaches another through a re-export; the code's own names count.
#[test]
fn code_names_only_the_crates_architecture_md_allows() {
    let allowed = allowed();
    for c in crates() {
        let ok = &allowed[&c.name];
        let named = named_in_code(&c.dir);
        let extra: Vec<_> = named
            .iter()
            .filter(|n| **n != c.name && !ok.contains(*n))
            .collect();
        assert!(
            extra.is_empty(),
            "the code of {} names {extra:?}, which ARCHITECTURE.md does not allow it",
            c.name
        );
    }
}

#[test]
fn the_table_rejects_an_upward_dependency() {
    // The check itself works: the block layer may not use the patch layer.
    assert!(!allowed()["stitch-blockdev"].contains("stitch-patch"));
    // The checker stays an independent judge: the format, and the block
    // layer's byte access (images on NBD servers), nothing that modifies
    // file systems.
    assert!(!allowed()["stitch-fsck"]
        .iter()
        .any(|d| d != "stitch-format" && d != "stitch-blockdev"));
}

#[test]
fn names_in_code_are_found_and_comments_and_strings_skipped() {
    let dir = tempfile_dir();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("src/lib.rs"),
        "use stitch_patch::{PatchId};\n// stitch_modes::Modes in a comment\n\
         fn f() { stitch_diskfs::mount(); let s = \"stitch_memfs::x\"; my_stitch_x::y(); }\n",
    )
    .unwrap();
    let named = named_in_code(&dir);
    assert_eq!(
        named.into_iter().collect::<Vec<_>>(),
        ["stitch-diskfs", "stitch-patch"]
    );
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("layers-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}
