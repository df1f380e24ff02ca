//! `stitchfs stats` on a real mount: the figures move as operations
//! happen (a create counts as a create, an fsync adds to the fsync
//! latency count, a flush to the flushes and the blocks written), the
//! JSON's fields are exactly those `docs/stats.md` documents, and a path
//! off any stitchfs mount is a clear error. The same figures through the
//! Python package.

mod posix_support;

use posix_support::{repo_root, run_logged as run, Scratch, JOURNAL_ORDERED, SOFTUPDATES};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::Command;

fn stats(mnt: &Path) -> Value {
    let out = run(
        "stitchfs stats --json",
        Command::new(env!("CARGO_BIN_EXE_stitchfs"))
            .args(["stats", "--json"])
            .arg(mnt),
    );
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).expect("stats --json prints JSON")
}

fn num(v: &Value, path: &str) -> u64 {
    path.split('.')
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

fn count(v: &Value, op: &str) -> u64 {
    v["requests"].get(op).map_or(0, |r| num(r, "count"))
}

#[test]
fn the_figures_move_as_operations_happen() {
    for mode in [JOURNAL_ORDERED, SOFTUPDATES] {
        let mut s = Scratch::new(mode, 64);
        // No periodic flush: what is dirty stays so until the test syncs.
        s.mount_args = vec!["--flush-interval".into(), "0".into()];
        s.with_mount(|mnt| {
            let before = stats(mnt);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(mnt.join("f"))
                .unwrap();
            let created = stats(mnt);
            // The kernel makes files with `mknod` (the mount answers its
            // first `create` ENOSYS: see `open` in `fuse/ops.rs`).
            assert_eq!(
                count(&created, "mknod"),
                count(&before, "mknod") + 1,
                "{}: {created}",
                mode.name()
            );
            f.write_all(&[7u8; 10_000]).unwrap();
            f.sync_all().unwrap();
            let synced = stats(mnt);
            let name = mode.name();
            assert_eq!(
                num(&synced, "fsync.count"),
                num(&before, "fsync.count") + 1,
                "{name}"
            );
            assert_eq!(
                count(&synced, "write"),
                count(&before, "write") + 1,
                "{name}"
            );
            assert!(num(&synced, "fsync.max_us") >= num(&synced, "fsync.p50_us"));
            assert!(
                num(&synced, "memfs.flushes") > num(&before, "memfs.flushes"),
                "{name}"
            );
            // The flush applied a create and a change (f's state), and the
            // kinds add up to the operations applied.
            let kind = |v: &Value, k: &str| num(v, &format!("memfs.applied.{k}"));
            assert!(kind(&synced, "create") > kind(&before, "create"), "{name}");
            assert!(kind(&synced, "change") > kind(&before, "change"), "{name}");
            let by_kind: u64 = synced["memfs"]["applied"]
                .as_object()
                .unwrap()
                .values()
                .map(|n| n.as_u64().unwrap())
                .sum();
            assert_eq!(
                by_kind,
                num(&synced, "memfs.ops_applied"),
                "{name}: {synced}"
            );
            assert!(num(&synced, "memfs.pages_written") >= num(&before, "memfs.pages_written") + 3);
            assert!(
                num(&synced, "patches.blocks_written") > num(&before, "patches.blocks_written"),
                "{name}"
            );
            assert!(
                num(&synced, "patches.device_flushes") > num(&before, "patches.device_flushes")
            );
            match mode.journal() {
                true => assert!(num(&synced, "journal.commits") > num(&before, "journal.commits")),
                false => assert!(synced["journal"].is_null(), "{synced}"),
            }
            // Written and not synced: dirty, until a sync takes it.
            f.write_all(&[8u8; 8192]).unwrap();
            let dirty = stats(mnt);
            assert!(num(&dirty, "memfs.dirty_pages") >= 2, "{name}: {dirty}");
            assert_eq!(
                num(&dirty, "memfs.dirty_bytes"),
                num(&dirty, "memfs.dirty_pages") * 4096
            );
            // A request answered with an error counts as one of its
            // opcode: removing a directory that is not empty.
            std::fs::create_dir(mnt.join("d")).unwrap();
            std::fs::write(mnt.join("d/x"), b"x").unwrap();
            assert!(std::fs::remove_dir(mnt.join("d")).is_err());
            let after = stats(mnt);
            let rmdir = |v: &Value, k: &str| v["requests"]["rmdir"][k].as_u64().unwrap_or(0);
            assert_eq!(
                (rmdir(&after, "count"), rmdir(&after, "errors")),
                (1, 1),
                "{name}"
            );
        });
    }
}

#[test]
fn streams_and_contexts_show_as_domains() {
    let mut s = Scratch::new(JOURNAL_ORDERED, 64);
    s.mount_args = vec!["--flush-interval".into(), "0".into()];
    s.with_mount(|mnt| {
        assert_eq!(num(&stats(mnt), "domains.streams"), 0);
        // A stream with two changes not yet flushed, and a context.
        let py = run(
            "python3 setstream",
            Command::new("python3")
                .args([
                    "-c",
                    "import sys, stitchfs; stitchfs.setstream('s2', target=sys.argv[1]); \
                     open(sys.argv[1] + '/g', 'w').write('x'); \
                     print(stitchfs.stats(sys.argv[1])['domains']['contexts'])",
                ])
                .arg(mnt)
                .env("PYTHONPATH", repo_root().join("python")),
        );
        assert!(py.status.success());
        // While it ran, it held a context; once it exited, none is left.
        let held: u64 = String::from_utf8_lossy(&py.stdout).trim().parse().unwrap();
        assert!(held >= 1, "contexts while alive: {held}");
        let v = stats(mnt);
        assert_eq!(num(&v, "domains.contexts"), 0, "{v}");
        let s2 = &v["domains"]["by_stream"][0];
        assert_eq!(s2["name"], "s2", "{v}");
        assert!(num(s2, "pending_changes") >= 2, "{v}");
        assert!(num(&v, "domains.pending_changes") >= num(s2, "pending_changes"));
        let out = run(
            "stitchfs run --stream",
            Command::new(env!("CARGO_BIN_EXE_stitchfs"))
                .args(["run", "--stream", "s1", "--at"])
                .arg(mnt)
                .args(["--", "sh", "-c", "echo x > f"])
                .current_dir(mnt),
        );
        assert!(out.status.success());
        let v = stats(mnt);
        assert_eq!(num(&v, "domains.streams"), 2);
        // run made its stream durable when the program exited.
        let s1 = &v["domains"]["by_stream"][1];
        assert_eq!(
            (s1["name"].as_str(), num(s1, "pending_changes")),
            (Some("s1"), 0),
            "{v}"
        );
    });
}

/// Patchgroups show in the figures: alive, engaged, sealed, their
/// pending changes, the dependency applied; a group lets go at its
/// process's exit.
#[test]
fn patchgroups_show_as_domains() {
    let mut s = Scratch::new(JOURNAL_ORDERED, 64);
    s.mount_args = vec!["--flush-interval".into(), "0".into()];
    s.with_mount(|mnt| {
        let v = stats(mnt);
        assert_eq!(num(&v, "domains.patchgroups"), 0, "{v}");
        // A process holds two groups, the second depending on the first,
        // engaged, with a change in it; it reports the figures while alive.
        let script = "import json, sys, stitchfs as s; m = sys.argv[1]\n\
             p = s.pg_create(m); s.pg_engage(p, m); open(m + '/a', 'w').write('a')\n\
             s.pg_disengage(p, m); q = s.pg_create(m); s.pg_depend(q, p, m)\n\
             s.pg_engage(q, m); open(m + '/b', 'w').write('b')\n\
             print(json.dumps(s.stats(m)['domains']))\n\
             s.pg_sync(q, m)\n\
             print(json.dumps(s.stats(m)))";
        let py = run(
            "python3 patchgroups",
            Command::new("python3")
                .args(["-c", script])
                .arg(mnt)
                .env("PYTHONPATH", repo_root().join("python")),
        );
        assert!(py.status.success());
        let text = String::from_utf8(py.stdout).unwrap();
        let mut lines = text.lines();
        let d: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!(num(&d, "patchgroups"), 2, "{d}");
        assert_eq!(num(&d, "patchgroups_made"), 2, "{d}");
        assert_eq!(num(&d, "patchgroups_engaged"), 1, "{d}");
        assert_eq!(num(&d, "patchgroups_sealed"), 1, "{d}");
        assert!(num(&d, "patchgroup_pending_changes") >= 3, "{d}");
        let after: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!(
            num(&after, "domains.patchgroup_pending_changes"),
            0,
            "{after}"
        );
        assert!(num(&after, "memfs.applied.depend") >= 1, "{after}");
        // The process exited: its groups are gone.
        let v = stats(mnt);
        assert_eq!(num(&v, "domains.patchgroups"), 0, "{v}");
        assert_eq!(num(&v, "domains.patchgroups_made"), 2, "{v}");
    });
}

/// Every dotted path of `v`, with the opcodes of `requests` as `OPCODE`.
fn fields(v: &Value, at: &str, out: &mut BTreeSet<String>) {
    if !v.is_object() {
        out.insert(at.to_string());
    }
    if let Value::Object(m) = v {
        for (k, child) in m {
            let k = if at == "requests" {
                "OPCODE"
            } else {
                k.as_str()
            };
            let path = if at.is_empty() {
                k.to_string()
            } else {
                format!("{at}.{k}")
            };
            fields(child, &path, out);
        }
    }
}

#[test]
fn the_json_fields_are_the_documented_ones() {
    let doc = std::fs::read_to_string(repo_root().join("docs/stats.md")).unwrap();
    let documented: BTreeSet<String> = doc
        .lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| {
            let first = l.split('|').nth(1).unwrap_or("");
            first
                .split(',')
                .map(|f| f.trim().trim_matches('`').to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    for mode in [JOURNAL_ORDERED, SOFTUPDATES] {
        let s = Scratch::new(mode, 64);
        s.with_mount(|mnt| {
            std::fs::write(mnt.join("f"), b"x").unwrap();
            let v = stats(mnt);
            let mut got = BTreeSet::new();
            fields(&v, "", &mut got);
            // Without a journal the field is null and has no members.
            let here: Vec<&String> = documented
                .iter()
                .filter(|f| mode.journal() || !f.starts_with("journal."))
                .collect();
            // The leaves: a documented object (`journal`, `fsync`) stands
            // for its members.
            let want: BTreeSet<String> = here
                .iter()
                .filter(|f| !here.iter().any(|g| g.starts_with(&format!("{f}."))))
                .map(|f| f.to_string())
                .collect();
            assert_eq!(got, want, "{}: the JSON against docs/stats.md", mode.name());
        });
    }
}

#[test]
fn the_text_shows_the_figures_and_a_foreign_path_is_refused() {
    let s = Scratch::new(JOURNAL_ORDERED, 64);
    s.with_mount(|mnt| {
        std::fs::write(mnt.join("f"), b"x").unwrap();
        let out = run(
            "stitchfs stats",
            Command::new(env!("CARGO_BIN_EXE_stitchfs"))
                .arg("stats")
                .arg(mnt),
        );
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        for want in [
            "fsync latency",
            "dirty bytes",
            "device flushes",
            "journal",
            "mknod",
        ] {
            assert!(text.contains(want), "{want} missing:\n{text}");
        }
        let py = run(
            "python3 stitchfs.stats",
            Command::new("python3")
                .args([
                    "-c",
                    "import sys, stitchfs; s = stitchfs.stats(sys.argv[1]); \
                     print(s['api'], s['requests']['mknod']['count'])",
                ])
                .arg(mnt)
                .env("PYTHONPATH", repo_root().join("python")),
        );
        assert_eq!(
            String::from_utf8_lossy(&py.stdout).trim(),
            format!("{} 1", stitch_control::API_VERSION)
        );
    });
    let out = run(
        "stitchfs stats off a mount",
        Command::new(env!("CARGO_BIN_EXE_stitchfs"))
            .arg("stats")
            .arg(env!("CARGO_TARGET_TMPDIR")),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not on a stitchfs mount"));
}

fn graph(mnt: &Path) -> String {
    let out = run(
        "stitchfs graph",
        Command::new(env!("CARGO_BIN_EXE_stitchfs"))
            .arg("graph")
            .arg(mnt),
    );
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// `dot` accepts `text` (drawing it as SVG).
fn dot_accepts(text: &str, dir: &Path) {
    posix_support::require_tool("dot", "graphviz");
    let file = dir.join("g.dot");
    std::fs::write(&file, text).unwrap();
    let out = run(
        "dot -Tsvg",
        Command::new("dot")
            .arg("-Tsvg")
            .arg(&file)
            .arg("-o")
            .arg(dir.join("g.svg")),
    );
    assert!(out.status.success(), "dot refused:\n{text}");
}

/// After an fsync in journal mode the checkpoint's patches are live: the
/// graph holds each (as many as the figures count) in its block's box,
/// with their dependencies (the known ones of the file's creation among
/// them), and Graphviz draws it; through `-o FILE.png` too. A graph too
/// large to send whole comes summarised by block.
#[test]
fn the_graph_is_the_live_patches_and_graphviz_draws_it() {
    let mut s = Scratch::new(JOURNAL_ORDERED, 64);
    s.mount_args = vec!["--flush-interval".into(), "0".into()];
    s.with_mount(|mnt| {
        let mut f = std::fs::File::create(mnt.join("f")).unwrap();
        f.write_all(&[1u8; 8192]).unwrap();
        f.sync_all().unwrap();
        let dot = graph(mnt);
        let live = num(&stats(mnt), "patches.live_patches");
        assert!(live > 0, "nothing live after an fsync in journal mode");
        let nodes = dot
            .lines()
            .filter(|l| l.contains("\" [") && !l.contains("->"))
            .count() as u64;
        assert_eq!(nodes, live, "{dot}");
        let edges: Vec<&str> = dot.lines().filter(|l| l.contains("->")).collect();
        assert!(!edges.is_empty(), "{dot}");
        // Every arrow joins two patches of the graph.
        for e in &edges {
            for end in e.split("->") {
                let id = end.trim().trim_end_matches(';').trim();
                assert!(
                    dot.contains(&format!("{id} [")),
                    "{id} of {e} is no node:\n{dot}"
                );
            }
        }
        assert!(dot.contains("subgraph cluster_"), "{dot}");
        // The known edges: the transaction that created f is committed and
        // its home writes wait for the checkpoint, all of them under one
        // empty patch, among them f's inode (in an inode-table block) and
        // its name (in the root directory's block), where debugfs finds
        // them on the image.
        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata(mnt.join("f")).unwrap().ino();
        let debugfs = |req: &str| {
            let out = run(
                "debugfs",
                Command::new("debugfs").arg("-R").arg(req).arg(&s.image),
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let imap = debugfs(&format!("imap <{ino}>"));
        let inode_block: u64 = imap
            .split("located at block ")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("imap: {imap}"));
        let root_block: u64 = debugfs("blocks /")
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .expect("the root directory's block");
        let patches_in = |block: u64| -> Vec<String> {
            let head = format!("subgraph cluster_{block} {{");
            let from = dot
                .find(&head)
                .unwrap_or_else(|| panic!("no block {block}:\n{dot}"));
            dot[from..]
                .lines()
                .skip(2)
                .take_while(|l| l.trim() != "}")
                .filter_map(|l| l.trim().split('"').nth(1).map(str::to_string))
                .collect()
        };
        let (inode_patches, dir_patches) = (patches_in(inode_block), patches_in(root_block));
        let depends_on = |from: &str, on: &[String]| {
            on.iter()
                .any(|p| dot.contains(&format!("\"{from}\" -> \"{p}\";")))
        };
        let empties: Vec<&str> = dot
            .lines()
            .filter(|l| l.contains("shape=circle"))
            .filter_map(|l| l.trim().split('"').nth(1))
            .collect();
        assert!(
            empties
                .iter()
                .any(|e| depends_on(e, &inode_patches) && depends_on(e, &dir_patches)),
            "no empty patch over block {inode_block} ({inode_patches:?}) and block \
             {root_block} ({dir_patches:?}):\n{dot}"
        );
        dot_accepts(&dot, s.dir.path());
        let png = s.dir.path().join("g.png");
        let out = run(
            "stitchfs graph -o g.png",
            Command::new(env!("CARGO_BIN_EXE_stitchfs"))
                .arg("graph")
                .arg(mnt)
                .arg("-o")
                .arg(&png),
        );
        assert!(out.status.success());
        assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
        // Many files at once: too many patches to send whole.
        for i in 0..400 {
            std::fs::write(mnt.join(format!("m{i}")), [2u8; 100]).unwrap();
        }
        run(
            "stitchfs sync",
            Command::new(env!("CARGO_BIN_EXE_stitchfs"))
                .arg("sync")
                .arg(mnt),
        );
        let big = graph(mnt);
        assert!(
            big.starts_with("digraph blocks"),
            "{}",
            &big[..200.min(big.len())]
        );
        assert!(big.contains("patches,"), "{big}");
        dot_accepts(&big, s.dir.path());
    });
}

/// `--metrics 127.0.0.1:0`: the figures in the Prometheus text format, as
/// Prometheus's own client library parses it, moving with the mount.
#[test]
fn the_metrics_endpoint_speaks_prometheus() {
    let mut s = Scratch::new(JOURNAL_ORDERED, 64);
    s.mount_args = vec!["--metrics".into(), "127.0.0.1:0".into()];
    let m = s.mount();
    let log = m.log();
    let url = log
        .split_whitespace()
        .find(|w| w.starts_with("http://") && w.ends_with("/metrics"))
        .unwrap_or_else(|| panic!("no metrics address in the mount's log:\n{log}"))
        .to_string();
    std::fs::write(s.mnt.join("f"), b"x").unwrap();
    std::fs::File::open(s.mnt.join("f"))
        .unwrap()
        .sync_all()
        .unwrap();
    let script = r#"
import sys, urllib.request, urllib.error
from prometheus_client.parser import text_string_to_metric_families
body = urllib.request.urlopen(sys.argv[1]).read().decode()
fams = {f.name: f for f in text_string_to_metric_families(body)}
def value(name, **labels):
    for s in fams[name].samples:
        if s.name in (name, name + "_total") and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise SystemExit(f"{name} {labels} missing")
print(fams["stitchfs_requests"].type, int(value("stitchfs_requests", op="mknod")),
      int(value("stitchfs_requests", op="fsync")), fams["stitchfs_memfs_dirty_bytes"].type,
      value("stitchfs_journal_commits") >= 1,
      fams["stitchfs_request_latency_seconds"].type)
try:
    urllib.request.urlopen(sys.argv[1].replace("/metrics", "/other"))
except urllib.error.HTTPError as e:
    print(e.code)
"#;
    let out = run(
        "python3 prometheus parser",
        Command::new("python3").args(["-c", script, &url]),
    );
    let unmounted = m.unmount();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "counter 1 1 gauge True summary\n404\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    unmounted.unwrap();
}

/// `stitchfs top` in a terminal (a tmux pane): its screen shows the
/// figures of a known workload (three creates, two fsyncs), `s` changes
/// the table's order, `q` quits with status 0. Off a terminal it refuses.
#[test]
fn top_shows_the_figures_in_a_terminal_and_q_quits() {
    posix_support::require_tool("tmux", "tmux");
    let mut s = Scratch::new(JOURNAL_ORDERED, 64);
    s.mount_args = vec!["--flush-interval".into(), "0".into()];
    s.with_mount(|mnt| {
        for name in ["a", "b", "c"] {
            std::fs::write(mnt.join(name), b"x").unwrap();
        }
        for name in ["a", "b"] {
            std::fs::File::open(mnt.join(name))
                .unwrap()
                .sync_all()
                .unwrap();
        }
        let socket = format!("stitchfs-test-{}", std::process::id());
        let rc = s.dir.path().join("top.rc");
        let tmux = |args: &[&str]| {
            let out = Command::new("tmux")
                .args(["-L", &socket])
                .args(args)
                .output()
                .expect("tmux runs");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let cmd = format!(
            "{} top {}; echo $? > {}",
            env!("CARGO_BIN_EXE_stitchfs"),
            mnt.display(),
            rc.display()
        );
        tmux(&[
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "110",
            "-y",
            "30",
            &cmd,
        ]);
        let screen_with = |want: &str| {
            let waited = std::time::Instant::now();
            loop {
                let screen = tmux(&["capture-pane", "-t", "top", "-p"]);
                if screen.contains(want) {
                    return screen;
                }
                assert!(
                    waited.elapsed().as_secs() < 20,
                    "no {want:?} on the screen:\n{screen}"
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        };
        let screen = screen_with("sort: rate");
        let row = |op: &str| -> Vec<String> {
            screen
                .lines()
                .find(|l| l.trim_start_matches('│').split_whitespace().next() == Some(op))
                .unwrap_or_else(|| panic!("no {op} row:\n{screen}"))
                .trim_matches(|c| c == '│' || c == ' ')
                .split_whitespace()
                .map(str::to_string)
                .collect()
        };
        // opcode, rate, count, errors: three files made (by mknod: the
        // mount answers `create` ENOSYS), two fsyncs.
        assert_eq!(row("mknod")[2], "3", "{screen}");
        assert_eq!(row("fsync")[2], "2", "{screen}");
        assert!(screen.contains("fsyncs     2"), "{screen}");
        assert!(screen.contains("journal tx"), "{screen}");
        tmux(&["send-keys", "-t", "top", "s"]);
        screen_with("sort: count");
        tmux(&["send-keys", "-t", "top", "q"]);
        let waited = std::time::Instant::now();
        while !rc.exists() {
            assert!(waited.elapsed().as_secs() < 20, "top did not quit on q");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(std::fs::read_to_string(&rc).unwrap().trim(), "0");
        tmux(&["kill-server"]);
        let out = run(
            "stitchfs top off a terminal",
            Command::new(env!("CARGO_BIN_EXE_stitchfs"))
                .arg("top")
                .arg(mnt)
                .stdout(std::process::Stdio::piped()),
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("needs a terminal"));
    });
}
