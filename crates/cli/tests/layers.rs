//! Checks that each crate's `[dependencies]` stay within the "Allowed
//! dependencies" table of ARCHITECTURE.md, so the document and the code
//! cannot drift apart. A crate missing from the table fails too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

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

/// Each workspace crate's name and the stitch crates its `[dependencies]` name.
fn actual() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let manifest = entry.unwrap().path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let doc: toml::Table = text.parse().unwrap();
        let name = doc["package"]["name"].as_str().unwrap().to_string();
        let deps = doc
            .get("dependencies")
            .and_then(|d| d.as_table())
            .cloned()
            .unwrap_or_default();
        let stitch = deps
            .keys()
            .filter(|k| k.starts_with("stitch"))
            .cloned()
            .collect();
        out.insert(name, stitch);
    }
    out
}

#[test]
fn crates_depend_only_on_what_architecture_md_allows() {
    let allowed = allowed();
    assert!(allowed.len() >= 6, "table not parsed: {allowed:?}");
    for (name, deps) in actual() {
        let ok = allowed
            .get(&name)
            .unwrap_or_else(|| panic!("{name} is missing from ARCHITECTURE.md's table"));
        let extra: Vec<_> = deps.difference(ok).collect();
        assert!(
            extra.is_empty(),
            "{name} depends on {extra:?}, which ARCHITECTURE.md does not allow"
        );
    }
}

#[test]
fn the_table_rejects_an_upward_dependency() {
    // The check itself works: the block layer may not use the patch layer.
    assert!(!allowed()["stitch-blockdev"].contains("stitch-patch"));
    assert!(!allowed()["stitch-fsck"]
        .iter()
        .any(|d| d != "stitch-format"));
}
