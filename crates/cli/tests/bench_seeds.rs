//! `stitchfs bench seeds --quick` end to end on two tiny workloads, ext4
//! beside stitchfs, through real mounts (needs root, loop devices and
//! FUSE; skipped without them). Checks the report's shape, never timings.

mod bench_support;

use bench_support::{cannot_mount, run_json};

#[test]
fn quick_seeds_run_reports_every_phase() {
    if cannot_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (report, stderr) = run_json(
        &[
            "seeds",
            "--quick",
            "--systems",
            "ext4,stitchfs",
            "--workloads",
            "seltzer-0len,fsync",
        ],
        dir.path(),
    );
    let cells = report["cells"].as_array().unwrap();
    // One phase of seltzer-0len and three of fsync, on two systems.
    assert_eq!(cells.len(), 8, "{report:#}");
    for c in cells {
        assert!(c["figure"].as_f64().is_some(), "{c:#} {stderr}");
    }
    let ext4 = cells
        .iter()
        .find(|c| c["system"] == "ext4" && c["phase"] == "append+fsync")
        .unwrap();
    assert_eq!(ext4["vs_ext4"].as_f64(), Some(1.0));
    assert!(
        ext4["usage"]["fs_flushes"].as_u64().unwrap() > 0,
        "{ext4:#}"
    );
    assert!(ext4["vs_device"].as_f64().is_some());
    let md = std::fs::read_to_string(dir.path().join("seeds.md")).unwrap();
    assert!(
        md.contains("| ccfs | truncate+fsync | stitchfs journal |"),
        "{md}"
    );
    assert!(dir.path().join("seeds.json").exists());
}

/// ccfs's applications at `--quick` scale on ext4, stitchfs, precise fsync
/// and the ceiling, each cell measured (a workload or system whose tool is
/// missing here is skipped, naming it), and in the stream configuration,
/// whose cells are measured or fail saying the stream was refused (a build
/// without streams). The stream's goals are reported either way.
#[test]
fn quick_applications_run_in_every_configuration() {
    if cannot_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tree = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let (report, stderr) = run_json(
        &[
            "seeds",
            "--quick",
            "--systems",
            "ext4,stitchfs,stitchfs-precise,stitchfs-ceiling,stitchfs-stream",
            "--workloads",
            "sqlite,sqlite-wal,git,leveldb",
            "--tree",
            tree,
        ],
        dir.path(),
    );
    let cells = report["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4 * 5, "{report:#}");
    for c in cells {
        let (figure, skipped, error) = (&c["figure"], &c["skipped"], &c["error"]);
        let why = skipped.as_str().or(error.as_str()).unwrap_or("");
        let measured = figure.as_f64().is_some();
        let ok = if c["system"] == "stitchfs-stream" {
            measured || why.contains("stream")
        } else {
            measured || why.contains("plyvel") || why.contains("eatmydata")
        };
        assert!(ok, "{c:#}\n{stderr}");
    }
    let phases: Vec<&str> = cells.iter().filter_map(|c| c["phase"].as_str()).collect();
    for p in [
        "SQLite insert (rollback)",
        "SQLite insert (WAL)",
        "git add + commit",
        "LevelDB put",
    ] {
        assert!(phases.contains(&p), "{p} not in {phases:?}");
    }
    // Against the ceiling and against ext4, on each application.
    let goals = report["goals"].as_array().unwrap();
    assert_eq!(goals.len(), 8, "{goals:#?}");
    assert!(goals.iter().all(|g| g["system"] == "stitchfs-stream"));
    let md = std::fs::read_to_string(dir.path().join("seeds.md")).unwrap();
    assert!(
        md.contains("| ccfs | SQLite insert (WAL) | stitchfs async, fsyncs dropped |"),
        "{md}"
    );
    assert!(md.contains("\nGoals:\n"), "{md}");
}
