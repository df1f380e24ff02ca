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
