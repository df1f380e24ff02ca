//! `stitchfs fsck --recover` through the real executable: it refuses `-n`,
//! and on an ext3 image whose superblock asks for recovery (an empty
//! journal here; the replay itself is tested in crates/fsck/tests) it
//! clears the flag, says so in its JSON, and a second check has nothing to
//! recover. The replayed-transaction case is `crates/fsck/tests/recovery.rs`.

mod mount_support;

use mount_support::stitchfs;
use std::process::{Command, Output};

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn recover_refuses_n_and_clears_a_needs_recovery_flag() {
    let dir = stitch_testkit::scratch();
    let img = dir.path().join("ext3.img");
    let img_s = img.to_str().unwrap();
    let out = stitchfs(&["mkfs", "--size", "64M", "--journal", img_s]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = stitchfs(&["fsck", "-n", "--recover", img_s]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));

    let out = Command::new("debugfs")
        .args(["-w", "-R", "feature needs_recovery", img_s])
        .output()
        .unwrap();
    assert!(out.status.success(), "debugfs: {out:?}");
    let out = stitchfs(&["fsck", "--json", img_s]);
    let r = json(&out);
    assert_eq!(r["needs_recovery"], true, "{r}");
    assert_eq!(r["recovery"]["applied"], false, "{r}");

    let out = stitchfs(&["fsck", "--recover", "--json", img_s]);
    assert_eq!(out.status.code(), Some(0));
    let r = json(&out);
    assert_eq!(r["needs_recovery"], false, "{r}");
    assert_eq!(r["recovery"]["applied"], true, "{r}");
    assert_eq!(r["recovery"]["transactions"], 0, "{r}");

    let r = json(&stitchfs(&["fsck", "--json", img_s]));
    assert_eq!(
        (&r["needs_recovery"], &r["recovery"]),
        (&false.into(), &serde_json::Value::Null),
        "{r}"
    );
}
