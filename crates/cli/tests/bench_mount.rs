//! `stitchfs bench mount --quick` end to end, and the FUSE floor it
//! compares against (`stitchfs bench floor-server`) on its own, through
//! real mounts (needs root, loop devices and FUSE; skipped without them).
//! Checks the report's shape and the floor's answers, never timings.

mod bench_support;

use bench_support::{cannot_mount, run_json};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_stitchfs");

/// Every workload on stitchfs and the floor: each cell has a rate, the
/// floor's column is filled, and the goals carry the floor's figure.
#[test]
fn quick_mount_run_measures_every_workload_on_stitchfs_and_the_floor() {
    if cannot_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (report, stderr) = run_json(
        &[
            "mount",
            "--quick",
            "--runs",
            "1",
            "--systems",
            "stitchfs,fuse-floor",
        ],
        dir.path(),
    );
    let cells = report["cells"].as_array().unwrap();
    // Eight phases on two systems.
    assert_eq!(cells.len(), 16, "{report:#}");
    for c in cells {
        assert!(c["error"].is_null(), "{c:#} {stderr}");
        assert!(c["rate"].as_f64().is_some_and(|r| r > 0.0), "{c:#}");
        assert!(c["vs_floor"].as_f64().is_some(), "{c:#}");
    }
    let goals = report["goals"].as_array().unwrap();
    let smallfile = goals
        .iter()
        .find(|g| g["what"] == "smallfile rate vs ext4 data=ordered")
        .unwrap();
    // No ext4 here: neither stitchfs's ratio nor the floor's.
    assert!(smallfile["measured"].is_null() && smallfile["floor"].is_null());
    let table = fs::read_to_string(dir.path().join("mount.md")).unwrap();
    assert!(table.contains("| vs floor |"), "{table}");
    assert!(table.contains("| smallfile | FUSE floor |"), "{table}");
}

/// A mounted floor server; unmounted (and killed) when dropped, so a
/// failing test leaves no mount behind.
struct Floor {
    child: Child,
    mnt: PathBuf,
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mnt)
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A floor server on `img` at `mnt`, once it is mounted.
fn serve(img: &Path, mnt: &Path) -> Floor {
    let child = Command::new(BIN)
        .args(["bench", "floor-server"])
        .arg(img)
        .arg(mnt)
        .spawn()
        .unwrap();
    let floor = Floor {
        child,
        mnt: mnt.to_path_buf(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !mounted(mnt) {
        assert!(Instant::now() < deadline, "the floor did not mount");
        std::thread::sleep(Duration::from_millis(10));
    }
    floor
}

fn mounted(mnt: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = mnt.to_str().unwrap();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(want) && l.contains(" - fuse.floor "))
}

/// Unmounts and checks that the server exited cleanly (its namespace
/// saved).
fn unmount(mut floor: Floor) {
    let ok = Command::new("fusermount3")
        .arg("-u")
        .arg(&floor.mnt)
        .status()
        .unwrap();
    assert!(ok.success());
    assert!(floor.child.wait().unwrap().success());
}

/// What the workloads do, answered right: names, renames, data across
/// chunk boundaries, holes, truncation, a full image, and all of it again
/// after a remount (the namespace is saved at unmount).
#[test]
fn the_floor_keeps_names_and_data_and_says_when_it_is_full() {
    if cannot_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("floor.img");
    File::create(&img).unwrap().set_len(8 << 20).unwrap();
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mnt = mnt.canonicalize().unwrap();
    let server = serve(&img, &mnt);

    fs::create_dir(mnt.join("a")).unwrap();
    fs::write(mnt.join("a/x"), b"message").unwrap();
    File::open(mnt.join("a/x")).unwrap().sync_all().unwrap();
    fs::rename(mnt.join("a/x"), mnt.join("a/y")).unwrap();
    File::open(mnt.join("a")).unwrap().sync_all().unwrap();
    assert!(!mnt.join("a/x").exists());
    let names: Vec<String> = fs::read_dir(mnt.join("a"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["y"]);
    assert_eq!(
        fs::remove_dir(mnt.join("a")).unwrap_err().raw_os_error(),
        Some(libc::ENOTEMPTY)
    );

    // 300,001 bytes from an odd offset: five 64 KiB chunks, not aligned.
    let data: Vec<u8> = (0..300_001u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let big = mnt.join("big");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&big)
        .unwrap();
    f.write_all_at(&data, 1_000).unwrap();
    f.sync_all().unwrap();
    let back = fs::read(&big).unwrap();
    assert_eq!(back.len(), 301_001);
    assert!(back[..1_000].iter().all(|&b| b == 0));
    assert!(back[1_000..] == data[..]);
    // Cut inside a chunk, then grow past it: the cut-off bytes read zero.
    f.set_len(70_000).unwrap();
    f.write_all_at(b"!", 199_999).unwrap();
    let back = fs::read(&big).unwrap();
    assert_eq!(back.len(), 200_000);
    assert!(back[1_000..70_000] == data[..69_000]);
    assert!(back[70_000..199_999].iter().all(|&b| b == 0));
    drop(f);

    // A full image says ENOSPC; removing the file gives the room back.
    let fill = mnt.join("fill");
    let mut w = File::create(&fill).unwrap();
    let err = (0..16)
        .try_for_each(|_| w.write_all(&[1u8; 1 << 20]))
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    drop(w);
    fs::remove_file(&fill).unwrap();
    fs::write(mnt.join("after"), vec![2u8; 4 << 20]).unwrap();
    assert_eq!(
        fs::metadata(mnt.join("gone")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    unmount(server);

    let server = serve(&img, &mnt);
    assert_eq!(fs::read(mnt.join("a/y")).unwrap(), b"message");
    let back = fs::read(&big).unwrap();
    assert!(back[1_000..70_000] == data[..69_000] && back[199_999] == b'!');
    assert_eq!(fs::read(mnt.join("after")).unwrap(), vec![2u8; 4 << 20]);
    assert!(!mnt.join("fill").exists());
    unmount(server);
}
