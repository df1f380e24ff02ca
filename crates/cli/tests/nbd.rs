//! stitchfs on NBD servers started by the tests: `nbdkit` (memory and file
//! plugins, with its error and delay filters) and `qemu-nbd`.
//!
//! - An export in nbdkit's memory goes through mkfs, mount, work, unmount
//!   and `stitchfs fsck` by URI, then is copied out (`nbdcopy`) for
//!   `e2fsck -fn`.
//! - Faults: the server killed between a write and its flush, in the middle
//!   of an fsync, and in the middle of a run of fsyncs; nbdkit's error
//!   filter failing every request; the server stopped (SIGSTOP) so that it
//!   answers nothing. In each, the fsync that meets the failure, and every
//!   one after, reports EIO; the mount turns read-only and does not hang;
//!   then the server is started again on the same file, the image mounted
//!   again (the journal replayed), and every file whose fsync returned 0 is
//!   there, whole; `e2fsck -fn` finds the file behind the server clean.
//! - A server slower than the timeout (the delay filter): the mount is
//!   refused within seconds, with the reason, not waited for.
//! - TRIM at a clean unmount, and `crashtest --recover-over nbd`.
//!
//! The real programs (git, sqlite3) over nbdkit and qemu-nbd are in
//! programs.rs.

mod mount_support;

use mount_support::{mountpoint, scratch, stitchfs, text, Mounted};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stitch_testkit::nbd::NbdServer;
use stitch_testkit::{assert_e2fsck_clean, e2fsck};

/// What every mount here uses: a silent server counts as lost after 2 s.
const TIMEOUT_SECS: &str = "2";

fn set_timeout() {
    // Every test of this binary sets the same value.
    std::env::set_var("STITCHFS_NBD_TIMEOUT", TIMEOUT_SECS);
}

fn mkfs(uri: &str, size: &str) {
    let out = stitchfs(&["mkfs", "--journal", "--size", size, uri]);
    assert!(out.status.success(), "mkfs {uri}: {}", text(&out.stderr));
}

/// SIGTERM to the daemon and its exit status, with its log.
fn stop(m: &mut Mounted) -> (bool, String) {
    let mut child = m.child.take().unwrap();
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!(
                "the mount did not exit within 60 s of SIGTERM: {}",
                m.stderr()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if mount_support::is_mounted(&m.mnt) {
        let _ = Command::new("umount").arg("-l").arg(&m.mnt).status();
    }
    (status.success(), m.stderr())
}

fn content(i: usize) -> Vec<u8> {
    let mut v = format!("file {i}\n").into_bytes();
    v.resize(3000 + (i * 977) % 20000, b'a' + (i % 26) as u8);
    v
}

/// Writes `f{i}` whole and fsyncs it and the directory; whether the fsyncs
/// returned 0.
fn write_synced(dir: &Path, i: usize) -> std::io::Result<()> {
    let mut f = File::create(dir.join(format!("f{i}")))?;
    f.write_all(&content(i))?;
    f.sync_all()?;
    File::open(dir)?.sync_all()
}

#[test]
fn an_export_in_memory_is_made_mounted_checked_and_copied_out_clean() {
    set_timeout();
    let dir = scratch();
    let server = NbdServer::memory("mem", "256M");
    let uri = server.uri();
    mkfs(&uri, "256M");
    let mnt = mountpoint(dir.path(), "mnt");
    let mut m = Mounted::start(Path::new(&uri), &mnt, &[]);
    for i in 0..200 {
        fs::create_dir_all(m.path(&format!("d{}", i % 10))).unwrap();
        fs::write(m.path(&format!("d{}/f{i}", i % 10)), content(i)).unwrap();
    }
    let big: Vec<u8> = (0..(24 << 20)).map(|i: u32| (i / 4096) as u8).collect();
    fs::write(m.path("big"), &big).unwrap();
    File::open(m.path("big")).unwrap().sync_all().unwrap();
    let (ok, log) = stop(&mut m);
    assert!(ok && log.contains("unmounted cleanly"), "{log}");
    assert!(log.contains("write requests"), "the NBD counters: {log}");

    let out = stitchfs(&["fsck", &uri]);
    assert!(
        out.status.success(),
        "stitchfs fsck {uri}: {}",
        text(&out.stdout)
    );
    let mut m = Mounted::start(Path::new(&uri), &mnt, &[]);
    assert_eq!(fs::read(m.path("big")).unwrap(), big);
    assert_eq!(fs::read(m.path("d7/f77")).unwrap(), content(77));
    let (ok, log) = stop(&mut m);
    assert!(ok, "{log}");
    let copy = dir.path().join("copy.img");
    let st = Command::new("nbdcopy")
        .arg(&uri)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success(), "nbdcopy (libnbd-bin)");
    assert_e2fsck_clean(&copy);
}

#[test]
fn refusals_name_the_reason_and_write_nothing() {
    set_timeout();
    let dir = scratch();
    let mnt = mountpoint(dir.path(), "mnt");
    let img = dir.path().join("ro.img");
    File::create(&img).unwrap().set_len(64 << 20).unwrap();
    let out = stitchfs(&["mkfs", "--journal", img.to_str().unwrap()]);
    assert!(out.status.success());
    let before = fs::read(&img).unwrap();
    let file_arg = format!("file={}", img.display());
    let ro = NbdServer::nbdkit("ro", &["-r", "file", &file_arg]);
    let err = mount_support::mount_refused(Path::new(&ro.uri()), &mnt, &[]);
    assert!(err.contains("read-only"), "{err}");
    let out = stitchfs(&["mkfs", "--force", "--journal", &ro.uri()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("read-only"),
        "{}",
        text(&out.stderr)
    );
    // A read-only export is checked all the same.
    let out = stitchfs(&["fsck", &ro.uri()]);
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(fs::read(&img).unwrap() == before, "nothing was written");

    drop(ro);

    // A damaged image (a group's inode table moved onto the superblock's
    // block, by debugfs) is refused unchanged, pointed to the tools that
    // can reach an export.
    let out = Command::new("debugfs")
        .args(["-w", "-R", "set_bg 0 inode_table 5"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(out.status.success(), "debugfs: {}", text(&out.stderr));
    let damaged = fs::read(&img).unwrap();
    let rw = NbdServer::nbdkit("damaged", &["file", &file_arg]);
    let err = mount_support::mount_refused(Path::new(&rw.uri()), &mnt, &[]);
    assert!(
        err.contains("is damaged") && err.contains("nbdcopy"),
        "{err}"
    );
    assert!(fs::read(&img).unwrap() == damaged, "nothing was written");

    let gone = "nbd+unix:///?socket=/nonexistent/stitch.sock";
    let err = mount_support::mount_refused(Path::new(gone), &mnt, &[]);
    assert!(err.contains(gone), "{err}");
}

/// A scenario's server: nbdkit's file plugin on `image`, behind
/// `filters` (`--filter=NAME`) with their `params`.
fn serve(name: &str, image: &Path, filters: &[&str], params: &[&str]) -> NbdServer {
    let file_arg = format!("file={}", image.display());
    let mut args: Vec<&str> = filters.to_vec();
    args.extend(["file", &file_arg]);
    args.extend_from_slice(params);
    NbdServer::nbdkit(name, &args)
}

/// The image file, made through the server.
fn image_file(dir: &Path) -> PathBuf {
    let img = dir.join("disk.img");
    File::create(&img).unwrap().set_len(256 << 20).unwrap();
    let s = serve("mkfs", &img, &[], &[]);
    mkfs(&s.uri(), "256M");
    img
}

/// After a fault: remount through a new server, find every acknowledged
/// file whole, unmount cleanly, and have e2fsck judge the file.
fn recover_and_check(img: &Path, mnt: &Path, acked: &[usize]) {
    let server = serve("again", img, &[], &[]);
    let mut m = Mounted::start(Path::new(&server.uri()), mnt, &[]);
    for &i in acked {
        let got = fs::read(m.path(&format!("w/f{i}")))
            .unwrap_or_else(|e| panic!("f{i}, whose fsync returned 0: {e}\n{}", m.stderr()));
        assert!(got == content(i), "f{i} differs after recovery");
    }
    let (ok, log) = stop(&mut m);
    assert!(ok, "{log}");
    drop(server);
    assert_e2fsck_clean(img);
}

/// The mount after its device failed: writes refused (EROFS, or EIO from
/// the request that met it), fsync EIO, reads of what memory holds still
/// served, and no call hangs.
fn assert_latched(m: &Mounted) {
    let t0 = Instant::now();
    let e = fs::write(m.path("after"), b"x").unwrap_err();
    assert!(
        matches!(e.raw_os_error(), Some(libc::EROFS | libc::EIO)),
        "write after the failure: {e}"
    );
    let e = File::open(m.path("w")).unwrap().sync_all().unwrap_err();
    assert!(
        matches!(e.raw_os_error(), Some(libc::EIO | libc::EROFS)),
        "fsync after the failure: {e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
}

/// Writes and fsyncs new files in `w/` (numbered from 1000, beside the
/// first 20) until told to stop or a call fails; returns the error that
/// ended the run.
fn fsync_loop(
    w: PathBuf,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<usize>>>,
) -> Option<std::io::Error> {
    for i in 1000.. {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        match write_synced(&w, i) {
            Ok(()) => acked.lock().unwrap().push(i),
            Err(e) => return Some(e),
        }
    }
    None
}

enum Fault {
    /// Killed after writes that no fsync has covered yet.
    KillBetweenWriteAndFlush,
    /// Killed while an fsync of 48 MiB is under way.
    KillMidFsync,
    /// Killed while a loop of write-and-fsync runs.
    KillMidRun,
    /// Every request fails (nbdkit's error filter, switched on mid-run).
    Errors,
    /// The server stops answering (SIGSTOP) mid-run.
    Stall,
}

fn fault(f: Fault) {
    set_timeout();
    let dir = scratch();
    let img = image_file(dir.path());
    let mnt = mountpoint(dir.path(), "mnt");
    let trigger = dir.path().join("fail-now");
    let trigger_arg = format!("error-file={}", trigger.display());
    let (filters, params): (&[&str], Vec<&str>) = match f {
        Fault::Errors => (
            &["--filter=error"],
            vec!["error=EIO", "error-rate=100%", &trigger_arg],
        ),
        _ => (&[], vec![]),
    };
    let mut server = serve("faulty", &img, filters, &params);
    let m = Mounted::start(Path::new(&server.uri()), &mnt, &["--flush-interval", "0"]);
    let w = m.path("w");
    fs::create_dir(&w).unwrap();
    let mut acked: Vec<usize> = Vec::new();
    for i in 0..20 {
        write_synced(&w, i).unwrap();
        acked.push(i);
    }
    match f {
        Fault::KillBetweenWriteAndFlush => {
            fs::write(w.join("unsynced"), content(99)).unwrap();
            server.kill();
            let e = File::open(w.join("unsynced"))
                .unwrap()
                .sync_all()
                .unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
        }
        Fault::KillMidFsync => {
            let data = vec![7u8; 48 << 20];
            let mut big = File::create(w.join("big")).unwrap();
            big.write_all(&data).unwrap();
            let t = std::thread::spawn(move || big.sync_all());
            std::thread::sleep(Duration::from_millis(30));
            server.kill();
            let r = t.join().unwrap();
            // An fsync that returned 0 before the kill counts as acked.
            match r {
                Ok(()) => eprintln!("the fsync finished before the kill"),
                Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}"),
            }
        }
        Fault::KillMidRun | Fault::Errors | Fault::Stall => {
            let stop = Arc::new(AtomicBool::new(false));
            let got = Arc::new(Mutex::new(Vec::new()));
            let (s2, g2, w2) = (stop.clone(), got.clone(), w.clone());
            let worker = std::thread::spawn(move || fsync_loop(w2, s2, g2));
            std::thread::sleep(Duration::from_millis(700));
            let t0 = Instant::now();
            match f {
                Fault::KillMidRun => server.kill(),
                Fault::Errors => fs::write(&trigger, b"").unwrap(),
                _ => server.pause(),
            }
            let err = worker.join().unwrap().expect("the loop ends with an error");
            assert!(
                matches!(err.raw_os_error(), Some(libc::EIO | libc::EROFS)),
                "{err}"
            );
            // Within the timeout and some slack: latched, not hung.
            assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
            let got = got.lock().unwrap().clone();
            assert!(!got.is_empty(), "some fsyncs returned before the fault");
            acked.extend(got);
            if matches!(f, Fault::Errors) {
                fs::remove_file(&trigger).unwrap();
            }
            if matches!(f, Fault::Stall) {
                server.signal(libc::SIGCONT);
            }
        }
    }
    assert_latched(&m);
    let mut m = m;
    let (ok, log) = stop(&mut m);
    assert!(!ok, "a mount whose device failed exits non-zero: {log}");
    eprintln!("--- the daemon said:\n{log}");
    assert!(
        log.contains("stitchfs fsck") || log.contains("device"),
        "{log}"
    );
    server.kill();
    drop(server);
    // The file behind the server is a crash image now: what e2fsck says
    // before the replay is not the judgement; recovery by a new mount is.
    let _ = e2fsck(&img, &["-fn"]);
    recover_and_check(&img, &mnt, &acked);
}

#[test]
fn a_server_killed_between_a_write_and_its_flush() {
    fault(Fault::KillBetweenWriteAndFlush);
}

#[test]
fn a_server_killed_in_the_middle_of_an_fsync() {
    fault(Fault::KillMidFsync);
}

#[test]
fn a_server_killed_in_the_middle_of_a_run() {
    fault(Fault::KillMidRun);
}

#[test]
fn a_server_that_fails_every_request() {
    fault(Fault::Errors);
}

#[test]
fn a_server_that_stops_answering() {
    fault(Fault::Stall);
}

/// `crashtest --recover-over nbd`: every crash state of a real program is
/// recovered by mounting it through nbdkit, and judged consistent.
#[test]
fn crash_states_recover_through_an_nbd_server() {
    set_timeout();
    let dir = scratch();
    let out = Command::new(mount_support::BIN)
        .args([
            "crashtest",
            "--program",
            "replace",
            "--mode",
            "journal",
            "--data",
            "ordered",
            "--sample",
            "6",
            "--seed",
            "3",
            "--recover-over",
            "nbd",
            "--out",
        ])
        .arg(dir.path().join("violations"))
        .output()
        .unwrap();
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{said}");
    let row = said
        .lines()
        .find(|l| l.starts_with("replace"))
        .unwrap_or_else(|| panic!("no row for replace:\n{said}"));
    // program, mode, "6 of N", images, consistent, ...
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[2], "6", "{row}");
    assert_eq!(cols[6], "6", "every state judged consistent: {row}");
}

/// Bytes the file system holding `path` has allocated to it.
fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).unwrap().blocks() * 512
}

/// A clean unmount trims every free block: nbdkit's file plugin punches
/// holes for trims, so deleting a large file gives its space back to the
/// disk under the export, and nothing still in use is lost.
#[test]
fn free_blocks_are_trimmed_at_unmount() {
    set_timeout();
    let dir = scratch();
    let img = image_file(dir.path());
    let mnt = mountpoint(dir.path(), "mnt");
    let server = serve("trim", &img, &[], &[]);
    let uri = server.uri();
    let big: Vec<u8> = (0..(64u32 << 20))
        .map(|i| (i / 4096 % 251) as u8 + 1)
        .collect();
    let mut m = Mounted::start(Path::new(&uri), &mnt, &[]);
    fs::write(m.path("big"), &big).unwrap();
    fs::write(m.path("kept"), content(5)).unwrap();
    let (ok, log) = stop(&mut m);
    assert!(ok, "{log}");
    let full = allocated(&img);
    let mut m = Mounted::start(Path::new(&uri), &mnt, &[]);
    fs::remove_file(m.path("big")).unwrap();
    let (ok, log) = stop(&mut m);
    assert!(ok, "{log}");
    assert!(log.contains("free blocks trimmed"), "{log}");
    let after = allocated(&img);
    assert!(
        after + (60 << 20) <= full,
        "the backing file kept its space: {full} bytes before, {after} after"
    );
    let mut m = Mounted::start(Path::new(&uri), &mnt, &[]);
    assert_eq!(fs::read(m.path("kept")).unwrap(), content(5));
    let (ok, log) = stop(&mut m);
    assert!(ok, "{log}");
    drop(server);
    assert_e2fsck_clean(&img);
}

/// A server slower than the timeout (nbdkit's delay filter holding every
/// write 5 s, the timeout 2 s): the mount is refused with the reason within
/// seconds instead of hanging; through a prompt server the image mounts
/// and unmounts clean.
#[test]
fn a_server_slower_than_the_timeout_is_refused_not_waited_for() {
    set_timeout();
    let dir = scratch();
    let img = image_file(dir.path());
    let mnt = mountpoint(dir.path(), "mnt");
    let slow = serve("slow", &img, &["--filter=delay"], &["delay-write=5"]);
    let t0 = Instant::now();
    let err = mount_support::mount_refused(Path::new(&slow.uri()), &mnt, &[]);
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert!(err.contains("answered nothing"), "{err}");
    drop(slow);
    recover_and_check(&img, &mnt, &[]);
}
