//! `stitchfs mount` end to end, through the real binary and the kernel's
//! FUSE: file operations through `std::fs` and libc, every way of
//! unmounting (SIGTERM, `fusermount3 -u`, the daemon's), `e2fsck -fn` after
//! each, and a remount that must show the same data under the same inode
//! numbers. Needs root and /dev/fuse (and `fusermount3`, from fuse3).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

mod mount_support;

use mount_support::*;
use stitch_testkit::e2fsck;

fn ino(p: &Path) -> u64 {
    fs::symlink_metadata(p).unwrap().ino()
}

fn errno_of(rc: libc::c_int) -> i32 {
    assert_eq!(rc, -1, "expected the call to fail");
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Bytes that differ with position, to catch misplaced blocks.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}

/// What a remount must show again: contents by path, and inode numbers.
struct Expect {
    files: BTreeMap<&'static str, Vec<u8>>,
    inodes: BTreeMap<&'static str, u64>,
}

impl Expect {
    fn check(&self, m: &Mounted) {
        for (rel, data) in &self.files {
            let got = fs::read(m.path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
            assert!(
                got == *data,
                "{rel}: {} bytes, want {}",
                got.len(),
                data.len()
            );
        }
        for (rel, n) in &self.inodes {
            assert_eq!(ino(&m.path(rel)), *n, "inode of {rel}");
        }
    }
}

/// The common POSIX operations through `std::fs`, each checked as it
/// goes; returns what must survive a remount.
fn posix_workload(m: &Mounted) -> Expect {
    // create, write, read
    fs::write(m.path("a.txt"), b"hello").unwrap();
    assert_eq!(fs::read(m.path("a.txt")).unwrap(), b"hello");
    // mkdir, rename across directories
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/b"), b"bee").unwrap();
    fs::rename(m.path("a.txt"), m.path("d/a2.txt")).unwrap();
    assert!(!m.path("a.txt").exists());
    // symlink
    std::os::unix::fs::symlink("d/a2.txt", m.path("link")).unwrap();
    assert_eq!(
        fs::read_link(m.path("link")).unwrap(),
        Path::new("d/a2.txt")
    );
    assert_eq!(fs::read(m.path("link")).unwrap(), b"hello");
    // hard link
    fs::hard_link(m.path("d/a2.txt"), m.path("hl")).unwrap();
    let md = fs::metadata(m.path("hl")).unwrap();
    assert_eq!(md.nlink(), 2);
    assert_eq!(md.ino(), ino(&m.path("d/a2.txt")));
    // chmod
    fs::set_permissions(m.path("d/b"), fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(fs::metadata(m.path("d/b")).unwrap().mode() & 0o7777, 0o640);
    // truncate by path (shrink, grow) and by handle
    fs::write(m.path("t"), b"truncate me").unwrap();
    File::options()
        .write(true)
        .open(m.path("t"))
        .unwrap()
        .set_len(3)
        .unwrap();
    assert_eq!(fs::read(m.path("t")).unwrap(), b"tru");
    let c = cpath(&m.path("t"));
    // SAFETY: a valid C path.
    assert_eq!(unsafe { libc::truncate(c.as_ptr(), 6) }, 0);
    assert_eq!(fs::read(m.path("t")).unwrap(), b"tru\0\0\0");
    // O_TRUNC
    File::create(m.path("d/b"))
        .unwrap()
        .write_all(b"B")
        .unwrap();
    // O_APPEND from two handles
    let mut x = OpenOptions::new()
        .append(true)
        .create(true)
        .open(m.path("log"))
        .unwrap();
    let mut y = OpenOptions::new().append(true).open(m.path("log")).unwrap();
    for i in 0..5 {
        x.write_all(format!("x{i}").as_bytes()).unwrap();
        y.write_all(format!("y{i}").as_bytes()).unwrap();
    }
    drop((x, y));
    assert_eq!(fs::read(m.path("log")).unwrap(), b"x0y0x1y1x2y2x3y3x4y4");
    // a sparse file: one byte 8 MiB in
    let f = File::create(m.path("sparse")).unwrap();
    f.write_all_at(b"Z", 8 << 20).unwrap();
    drop(f);
    let md = fs::metadata(m.path("sparse")).unwrap();
    assert_eq!(md.len(), (8 << 20) + 1);
    assert!(
        md.blocks() < 64,
        "{} sectors for a sparse file",
        md.blocks()
    );
    let mut buf = vec![1u8; 4096];
    File::open(m.path("sparse"))
        .unwrap()
        .read_exact_at(&mut buf, 1 << 20)
        .unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    // a file larger than one write request
    let big = pattern(3 << 20, 7);
    fs::write(m.path("big"), &big).unwrap();
    assert!(fs::read(m.path("big")).unwrap() == big);
    // open, unlink, still readable and writable through the handle
    let mut ghost = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("ghost"))
        .unwrap();
    ghost.write_all(b"boo").unwrap();
    fs::remove_file(m.path("ghost")).unwrap();
    assert!(!m.path("ghost").exists());
    ghost.write_all(b"!").unwrap();
    let mut b = [0u8; 4];
    ghost.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"boo!");
    // A second open of the unlinked inode, through /proc.
    let mut s = String::new();
    File::open(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&ghost)
    ))
    .unwrap()
    .read_to_string(&mut s)
    .unwrap();
    assert_eq!(s, "boo!");
    drop(ghost);
    // unlink and rmdir
    fs::create_dir(m.path("gone")).unwrap();
    fs::write(m.path("gone/f"), b"x").unwrap();
    assert!(fs::remove_dir(m.path("gone")).is_err());
    fs::remove_file(m.path("gone/f")).unwrap();
    fs::remove_dir(m.path("gone")).unwrap();
    // readdir
    let mut names: Vec<String> = fs::read_dir(m.path("."))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["big", "d", "hl", "link", "log", "lost+found", "sparse", "t"]
    );
    // the root is ext2 inode 2
    assert_eq!(ino(&m.mnt), 2);

    let mut sparse = vec![0u8; (8 << 20) + 1];
    sparse[8 << 20] = b'Z';
    let files = BTreeMap::from([
        ("d/a2.txt", b"hello".to_vec()),
        ("hl", b"hello".to_vec()),
        ("link", b"hello".to_vec()),
        ("d/b", b"B".to_vec()),
        ("t", b"tru\0\0\0".to_vec()),
        ("log", b"x0y0x1y1x2y2x3y3x4y4".to_vec()),
        ("big", big),
        ("sparse", sparse),
    ]);
    let inodes = ["d", "d/a2.txt", "d/b", "link", "t", "log", "big", "sparse"]
        .into_iter()
        .map(|rel| (rel, ino(&m.path(rel))))
        .collect();
    Expect { files, inodes }
}

#[test]
fn posix_operations_survive_sigterm_and_fusermount_with_a_clean_image() {
    let (_dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &[]);
    assert!(
        m.stderr().contains("journal (data=ordered)"),
        "{}",
        m.stderr()
    );
    let expect = posix_workload(&m);
    m.stop(Stop::Sigterm);

    let m = Mounted::start(&img, &mnt, &[]);
    expect.check(&m);
    assert_eq!(
        fs::read_link(m.path("link")).unwrap(),
        Path::new("d/a2.txt")
    );
    assert_eq!(fs::metadata(m.path("hl")).unwrap().nlink(), 2);
    assert_eq!(fs::metadata(m.path("d/b")).unwrap().mode() & 0o7777, 0o640);
    fs::write(m.path("after"), b"second mount").unwrap();
    m.stop(Stop::Fusermount);

    let m = Mounted::start(&img, &mnt, &[]);
    expect.check(&m);
    assert_eq!(fs::read(m.path("after")).unwrap(), b"second mount");
    m.stop(Stop::Sigterm);
}

#[test]
fn an_image_without_a_journal_runs_soft_updates_and_journal_mode_is_refused() {
    let (_dir, img, mnt) = fresh(false);
    let out = stitchfs(&[
        "mount",
        img.to_str().unwrap(),
        mnt.to_str().unwrap(),
        "--consistency",
        "journal",
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("has no journal") && err.contains("mkfs --journal"),
        "{err}"
    );
    assert!(!is_mounted(&mnt));

    let m = Mounted::start(&img, &mnt, &[]);
    assert!(m.stderr().contains("using soft updates"), "{}", m.stderr());
    fs::write(m.path("f"), b"soft").unwrap();
    let n = ino(&m.path("f"));
    m.stop(Stop::Fusermount);
    let m = Mounted::start(&img, &mnt, &["--consistency", "softupdates"]);
    assert_eq!(fs::read(m.path("f")).unwrap(), b"soft");
    assert_eq!(ino(&m.path("f")), n);
    m.stop(Stop::Sigterm);
}

#[test]
fn a_second_mount_of_the_same_image_is_refused() {
    let (dir, img, mnt) = fresh(true);
    let other = mountpoint(dir.path(), "other");
    let m = Mounted::start(&img, &mnt, &[]);
    for fg in [true, false] {
        let mut args = vec!["mount", img.to_str().unwrap(), other.to_str().unwrap()];
        if fg {
            args.push("--foreground");
        }
        let out = stitchfs(&args);
        assert!(!out.status.success(), "second mount succeeded");
        let err = text(&out.stderr);
        assert!(err.contains("already mounted"), "{err}");
        assert!(!is_mounted(&other));
    }
    // The first mount is untouched.
    fs::write(m.path("still"), b"here").unwrap();
    m.stop(Stop::Sigterm);
}

#[test]
fn what_is_not_an_image_is_refused_clearly() {
    let dir = scratch();
    let mnt = mountpoint(dir.path(), "mnt");
    let junk = dir.path().join("junk.img");
    fs::write(&junk, pattern(1 << 20, 3)).unwrap();
    let tiny = dir.path().join("tiny.img");
    fs::write(&tiny, b"tiny").unwrap();
    for (img, want) in [
        (&junk, "is not an ext2/ext3 image"),
        (&tiny, "is not an ext2/ext3 image"),
        (&dir.path().join("missing.img"), "no such image"),
    ] {
        for fg in [true, false] {
            let mut args = vec!["mount", img.to_str().unwrap(), mnt.to_str().unwrap()];
            if fg {
                args.push("-f");
            }
            let out = stitchfs(&args);
            let err = text(&out.stderr);
            assert!(!out.status.success(), "{}: mounted", img.display());
            assert!(err.contains(want), "{}: {err}", img.display());
        }
    }
    assert!(!is_mounted(&mnt));
    assert_eq!(
        fs::read(&junk).unwrap(),
        pattern(1 << 20, 3),
        "junk was written"
    );
}

/// `fusermount3 -u` returns before the server has written what memory
/// holds; `stitchfs umount` returns after, so the image is clean and a new
/// mount can take it at once. Here 12.5 MiB wait in memory (no background
/// flush) for the unmount to write them.
#[test]
fn umount_returns_once_the_server_is_done_with_the_image() {
    let (_dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &["--flush-interval", "0"]);
    for i in 0..200u8 {
        fs::write(m.path(&format!("f{i}")), pattern(64 << 10, i)).unwrap();
    }
    m.stop(Stop::Umount);
    let again = Mounted::start(&img, &mnt, &[]);
    assert_eq!(
        fs::read(again.path("f199")).unwrap(),
        pattern(64 << 10, 199)
    );
    again.stop(Stop::Umount);
    let out = Command::new(BIN).arg("umount").arg(&mnt).output().unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("is not a stitchfs mount"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_daemon_returns_once_mounted_and_unmounts_cleanly() {
    let (_dir, img, mnt) = fresh(true);
    let out = stitchfs(&["mount", img.to_str().unwrap(), mnt.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        is_mounted(&mnt),
        "the parent exited before the mount was up"
    );
    fs::write(mnt.join("daemon"), b"served").unwrap();
    fusermount_u(&mnt);
    // The daemon holds the image's lock until it has unmounted cleanly.
    let f = File::open(&img).unwrap();
    wait_until(
        "the daemon releases the image",
        Duration::from_secs(15),
        || {
            // SAFETY: flock on a descriptor we own.
            unsafe {
                libc::flock(
                    std::os::fd::AsRawFd::as_raw_fd(&f),
                    libc::LOCK_EX | libc::LOCK_NB,
                ) == 0
            }
        },
    );
    drop(f);
    assert_e2fsck_clean(&img);
    let m = Mounted::start(&img, &mnt, &[]);
    assert_eq!(fs::read(m.path("daemon")).unwrap(), b"served");
    m.stop(Stop::Sigterm);
}

#[test]
fn without_an_image_it_makes_stitchfs_img_in_the_current_directory() {
    let dir = scratch();
    let mnt = mountpoint(dir.path(), "mnt");
    let img = dir.path().join("stitchfs.img");
    let m = Mounted::start_in(Some(dir.path()), &img, &mnt, &[]);
    assert!(m.stderr().contains("making a 4 GiB"), "{}", m.stderr());
    assert!(
        m.stderr().contains("journal (data=ordered)"),
        "{}",
        m.stderr()
    );
    assert_eq!(fs::metadata(&img).unwrap().len(), 4 << 30);
    fs::write(m.path("f"), b"default").unwrap();
    m.stop(Stop::Sigterm);
    // The second time it is used as it is.
    let m = Mounted::start_in(Some(dir.path()), &img, &mnt, &[]);
    assert!(!m.stderr().contains("making"), "{}", m.stderr());
    assert_eq!(fs::read(m.path("f")).unwrap(), b"default");
    m.stop(Stop::Fusermount);
}

#[test]
fn special_files_rename_flags_times_and_unsupported_calls() {
    let (_dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &[]);
    // SAFETY (all libc calls below): valid C paths and plain values.
    let fifo = cpath(&m.path("fifo"));
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let dev = cpath(&m.path("null"));
    let rdev = libc::makedev(1, 3);
    assert_eq!(
        unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o666, rdev) },
        0
    );
    let blk = cpath(&m.path("blk"));
    let brdev = libc::makedev(7, 300);
    assert_eq!(
        unsafe { libc::mknod(blk.as_ptr(), libc::S_IFBLK | 0o600, brdev) },
        0
    );
    let sock = std::os::unix::net::UnixListener::bind(m.path("sock")).unwrap();
    drop(sock);
    let mnt2 = m.mnt.clone();
    let t = |rel: &str| fs::symlink_metadata(mnt2.join(rel)).unwrap();
    assert!(t("fifo").file_type().is_fifo());
    assert!(t("null").file_type().is_char_device());
    assert_eq!(t("null").rdev(), rdev);
    assert!(t("blk").file_type().is_block_device());
    assert_eq!(t("blk").rdev(), brdev);
    assert!(t("sock").file_type().is_socket());

    // renameat2: NOREPLACE refuses, EXCHANGE swaps, others are invalid.
    fs::write(m.path("x"), b"x").unwrap();
    fs::write(m.path("y"), b"y").unwrap();
    let (x, y) = (cpath(&m.path("x")), cpath(&m.path("y")));
    let rename2 = |flags| unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            x.as_ptr(),
            libc::AT_FDCWD,
            y.as_ptr(),
            flags,
        )
    };
    assert_eq!(errno_of(rename2(libc::RENAME_NOREPLACE)), libc::EEXIST);
    assert_eq!(rename2(libc::RENAME_EXCHANGE), 0);
    assert_eq!(fs::read(m.path("x")).unwrap(), b"y");
    assert_eq!(fs::read(m.path("y")).unwrap(), b"x");
    assert_eq!(errno_of(rename2(libc::RENAME_WHITEOUT)), libc::EINVAL);

    // utimensat: an explicit mtime with UTIME_OMIT for atime, then UTIME_NOW.
    let atime = t("x").atime();
    let times = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 0,
        },
    ];
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, x.as_ptr(), times.as_ptr(), 0) },
        0
    );
    assert_eq!(t("x").mtime(), 1_000_000_000);
    assert_eq!(t("x").atime(), atime);
    let now = [libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_NOW,
    }; 2];
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, x.as_ptr(), now.as_ptr(), 0) },
        0
    );
    assert!(t("x").mtime() > 1_000_000_000);
    // UTIME_NOW sets both to one reading of the clock, the change time's.
    let md = t("x");
    let now = (md.mtime(), md.mtime_nsec());
    assert_eq!((md.atime(), md.atime_nsec()), now);
    assert_eq!((md.ctime(), md.ctime_nsec()), now);

    // No xattrs yet, no ACLs, no fallocate, ext2's name limit.
    let name = c"user.test";
    let mut buf = [0u8; 64];
    let rc = unsafe { libc::getxattr(x.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    assert_eq!(errno_of(rc as i32), libc::ENODATA);
    let n = unsafe { libc::listxattr(x.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    assert_eq!(n, 0);
    let acl = c"system.posix_acl_access";
    let rc = unsafe {
        libc::setxattr(
            x.as_ptr(),
            acl.as_ptr(),
            [2u8, 0, 0, 0].as_ptr().cast(),
            4,
            0,
        )
    };
    assert_eq!(errno_of(rc), libc::EOPNOTSUPP);
    let f = File::options().write(true).open(m.path("x")).unwrap();
    let rc = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, 4096) };
    assert_eq!(errno_of(rc), libc::EOPNOTSUPP);
    drop(f);
    let long = m.path(&"n".repeat(256));
    let e = File::create(&long).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENAMETOOLONG));
    fs::write(m.path(&"n".repeat(255)), b"ok").unwrap();

    // statfs
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let root = cpath(&m.mnt);
    assert_eq!(unsafe { libc::statvfs(root.as_ptr(), &mut st) }, 0);
    assert_eq!(st.f_bsize, 4096);
    assert_eq!(st.f_namemax, 255);
    assert_eq!(st.f_blocks, (128 << 20) / 4096);
    assert!(st.f_bfree > 0 && st.f_bfree < st.f_blocks);

    // O_DIRECTORY on a file, fsync on a directory.
    let e = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(m.path("x"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR));
    File::open(&m.mnt).unwrap().sync_all().unwrap();

    let kinds = ["fifo", "null", "blk", "sock"].map(|r| (r, ino(&m.path(r))));
    m.stop(Stop::Sigterm);
    let m = Mounted::start(&img, &mnt, &[]);
    for (rel, n) in kinds {
        assert_eq!(ino(&m.path(rel)), n, "{rel}");
    }
    assert_eq!(t("blk").rdev(), brdev);
    assert!(t("sock").file_type().is_socket());
    m.stop(Stop::Fusermount);
}

/// A time as `stat` shows it: seconds (negative before 1970), nanoseconds.
type Stamp = (i64, i64);

/// atime, mtime and ctime of `p`.
fn stamps(p: &Path) -> [Stamp; 3] {
    let m = fs::symlink_metadata(p).unwrap();
    [
        (m.atime(), m.atime_nsec()),
        (m.mtime(), m.mtime_nsec()),
        (m.ctime(), m.ctime_nsec()),
    ]
}

/// `utimensat` of `p` to `atime` and `mtime`.
fn set_stamps(p: &Path, atime: Stamp, mtime: Stamp) {
    let ts = |(tv_sec, tv_nsec): Stamp| libc::timespec { tv_sec, tv_nsec };
    let times = [ts(atime), ts(mtime)];
    // SAFETY: a valid C path and a two-element array.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, cpath(p).as_ptr(), times.as_ptr(), 0) };
    let err = std::io::Error::last_os_error();
    assert_eq!(
        rc,
        0,
        "utimensat {} {atime:?} {mtime:?}: {err}",
        p.display()
    );
}

/// `debugfs -R stat` of `/name`, dates in UTC.
fn debugfs_stat(img: &Path, name: &str) -> String {
    let out = Command::new("debugfs")
        .env("TZ", "GMT")
        .args(["-R", &format!("stat /{name}")])
        .arg(img)
        .output()
        .unwrap();
    text(&out.stdout)
}

/// One time of `/name` in `debugfs_stat`'s `all`: the base and `_extra`
/// words, and the date it decodes (asctime's format).
fn debugfs_stamp(all: &str, name: &str, field: &str) -> (u32, u32, String) {
    let line = all
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(&format!("{field}: 0x")))
        .unwrap_or_else(|| panic!("no {field} for {name} in:\n{all}"));
    // "atime: 0x80000000:00000001 -- Tue Jan 19 03:14:08 2038"
    let (words, date) = line[field.len() + 2..].split_once(" -- ").unwrap();
    let (base, extra) = words.split_once(':').unwrap();
    let hex = |w: &str| u32::from_str_radix(w.trim_start_matches("0x"), 16).unwrap();
    (hex(base), hex(extra), date.trim().to_string())
}

/// The date `debugfs` prints for `secs` (asctime of gmtime), from date(1).
fn asctime(secs: i64) -> String {
    let out = Command::new("date")
        .args(["-u", "-d", &format!("@{secs}"), "+%a %b %e %H:%M:%S %Y"])
        .output()
        .unwrap();
    text(&out.stdout).trim().to_string()
}

/// Times set through a mount are kept as the kernel's own ext2 driver
/// keeps them, and it reads them back: nanoseconds, 2^31 and past 2^32
/// (epoch bits in the `_extra` words), before 1970 (signed seconds, a
/// fraction too), the ends of the range the format holds, and times past
/// them clamped to those ends (the kernel's `timestamp_truncate`). The
/// image is then loop-mounted by the kernel, which must show the same
/// times, and `debugfs` must find the words ext4 writes and decode the
/// same dates. The other way, times the kernel set are read back the same
/// by stitchfs.
#[test]
fn times_are_kept_as_the_kernels_ext2_keeps_them() {
    if !stitch_testkit::is_root() {
        println!("SKIPPED: loop mounts need root");
        return;
    }
    const MIN: i64 = -(1 << 31);
    const MAX: i64 = (1 << 34) - 1 + MIN; // 2446-05-10
                                          // (name, time set, time kept)
    let cases: [(&str, Stamp, Stamp); 8] = [
        (
            "subsecond",
            (1_700_000_000, 123_456_789),
            (1_700_000_000, 123_456_789),
        ),
        ("y2038", (1 << 31, 0), (1 << 31, 0)),
        (
            "y2106",
            ((1 << 32) + 5, 999_999_999),
            ((1 << 32) + 5, 999_999_999),
        ),
        ("pre1970", (-2, 500_000_000), (-2, 500_000_000)),
        ("min", (MIN, 0), (MIN, 0)),
        ("max", (MAX, 0), (MAX, 0)),
        ("past-max", (1 << 40, 5), (MAX, 0)),
        ("before-min", (-(1 << 40), 5), (MIN, 0)),
    ];
    // Each time is one file's atime and the next file's mtime.
    let pair = |i: usize, col: fn(&(&str, Stamp, Stamp)) -> Stamp| {
        (col(&cases[i]), col(&cases[(i + 1) % cases.len()]))
    };
    let (dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &[]);
    let mut seen = BTreeMap::new();
    for (i, (name, ..)) in cases.iter().enumerate() {
        let p = m.path(name);
        fs::write(&p, b"t").unwrap();
        let (atime, mtime) = pair(i, |c| c.1);
        set_stamps(&p, atime, mtime);
        let [a, mt, c] = stamps(&p);
        assert_eq!((a, mt), pair(i, |c| c.2), "{name} through the mount");
        seen.insert(name.to_string(), [a, mt, c]);
    }
    m.stop(Stop::Umount);

    let kmnt = dir.path().join("kernel");
    let k = stitch_testkit::LoopMount::new(&img, &kmnt, "").unwrap();
    for (name, want) in &seen {
        assert_eq!(
            &stamps(&kmnt.join(name)),
            want,
            "{name} as the kernel reads it"
        );
    }
    // The other way: the kernel sets the same times (and a ctime of its
    // own clock) on new files.
    for (i, (name, ..)) in cases.iter().enumerate() {
        let p = kmnt.join(format!("k-{name}"));
        fs::write(&p, b"k").unwrap();
        let (atime, mtime) = pair(i, |c| c.1);
        set_stamps(&p, atime, mtime);
        let st = stamps(&p);
        assert_eq!((st[0], st[1]), pair(i, |c| c.2), "{name} set by the kernel");
        seen.insert(format!("k-{name}"), st);
    }
    k.unmount();

    for (name, [a, mt, c]) in &seen {
        // New inodes have the extension mke2fs and the kernel give them.
        let stat = debugfs_stat(&img, name);
        assert!(stat.contains("Size of extra inode fields: 32"), "{stat}");
        for (field, (secs, nsec)) in [("atime", a), ("mtime", mt), ("ctime", c)] {
            let epoch = ((secs - i64::from(*secs as i32)) >> 32) as u32 & 3;
            let words = (*secs as i32 as u32, epoch | (*nsec as u32) << 2);
            let (base, extra, date) = debugfs_stamp(&stat, name, field);
            assert_eq!((base, extra), words, "debugfs: {name} {field}");
            assert_eq!(date, asctime(*secs), "debugfs: {name} {field}");
        }
    }
    let m = Mounted::start(&img, &mnt, &[]);
    for (name, want) in &seen {
        assert_eq!(&stamps(&m.path(name)), want, "{name} read back by stitchfs");
    }
    m.stop(Stop::Sigterm);
}

/// `getxattr` into a buffer of `cap` bytes: the value, or the errno.
fn get_xattr(p: &Path, name: &str, cap: usize) -> Result<Vec<u8>, i32> {
    let (p, n) = (cpath(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; cap];
    // SAFETY: valid C strings and a buffer of `cap` bytes (NULL-free when 0).
    let rc = unsafe {
        libc::getxattr(
            p.as_ptr(),
            n.as_ptr(),
            if cap == 0 {
                std::ptr::null_mut()
            } else {
                buf.as_mut_ptr().cast()
            },
            cap,
        )
    };
    if rc < 0 {
        return Err(errno_of(rc as i32));
    }
    buf.truncate(if cap == 0 { 0 } else { rc as usize });
    if cap == 0 {
        buf = rc.to_string().into_bytes();
    }
    Ok(buf)
}

/// `listxattr`'s names, NUL-separated.
fn list_xattr(p: &Path) -> Vec<u8> {
    let p = cpath(p);
    let mut buf = vec![0u8; 4096];
    // SAFETY: a valid C string and a 4096-byte buffer.
    let n = unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "listxattr: {}", std::io::Error::last_os_error());
    buf.truncate(n as usize);
    buf
}

#[test]
fn extended_attributes_read_set_and_removed_as_ext2_keeps_them() {
    if !stitch_testkit::is_root() {
        println!("SKIPPED: needs root for mount -o loop");
        return;
    }
    let dir = scratch();
    let img = stitch_testkit::kernel_attribute_image(dir.path());
    let m = Mounted::start(&img, &mountpoint(dir.path(), "m"), &[]);
    let (small, big, d) = (m.path("small"), m.path("big"), m.path("d"));
    // In the inode, in a block (user.big is too big for the inode), on a
    // directory.
    assert_eq!(get_xattr(&small, "user.k", 64), Ok(b"inode".to_vec()));
    assert_eq!(get_xattr(&big, "user.big", 300), Ok(vec![b'x'; 300]));
    assert_eq!(get_xattr(&big, "user.k2", 64), Ok(b"two".to_vec()));
    assert_eq!(get_xattr(&big, "trusted.t", 64), Ok(b"tt".to_vec()));
    assert_eq!(get_xattr(&d, "user.dir", 64), Ok(b"yes".to_vec()));
    // The size question, a buffer too small, a name that is not there.
    assert_eq!(get_xattr(&big, "user.big", 0), Ok(b"300".to_vec()));
    assert_eq!(get_xattr(&big, "user.big", 299), Err(libc::ERANGE));
    assert_eq!(get_xattr(&small, "user.k2", 64), Err(libc::ENODATA));
    // ACLs stay hidden (not enforced through FUSE): listed never, read as
    // unsupported, so getfacl falls back to the mode.
    assert_eq!(
        get_xattr(&small, "system.posix_acl_access", 64),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(list_xattr(&small), b"user.k\0");
    // (The kernel put user.big in a block, the others in the inode; the
    // order is theirs.)
    let mut names: Vec<Vec<u8>> = list_xattr(&big)
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    names.sort();
    assert_eq!(names, [&b"trusted.t"[..], b"user.big", b"user.k2"]);
    assert_eq!(list_xattr(&d), b"user.dir\0");
    // Set, replace, remove, with setxattr's flags; the kernel's shared
    // block stays theirs (small's set moves to a block of its own).
    let set = |p: &Path, n: &str, v: &[u8], flags: i32| {
        let (p, n) = (cpath(p), CString::new(n).unwrap());
        // SAFETY: valid C strings and a value of `v.len()` bytes.
        let rc =
            unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), flags) };
        if rc == 0 {
            Ok(())
        } else {
            Err(errno_of(rc))
        }
    };
    let remove = |p: &Path, n: &str| {
        let (p, n) = (cpath(p), CString::new(n).unwrap());
        // SAFETY: valid C strings.
        let rc = unsafe { libc::removexattr(p.as_ptr(), n.as_ptr()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(errno_of(rc))
        }
    };
    assert_eq!(
        set(&small, "user.k", b"v", libc::XATTR_CREATE),
        Err(libc::EEXIST)
    );
    assert_eq!(
        set(&small, "user.new", b"v", libc::XATTR_REPLACE),
        Err(libc::ENODATA)
    );
    assert_eq!(
        set(&small, "user.k", b"changed", libc::XATTR_REPLACE),
        Ok(())
    );
    assert_eq!(set(&small, "user.new", b"n", libc::XATTR_CREATE), Ok(()));
    assert_eq!(remove(&big, "user.k2"), Ok(()));
    assert_eq!(remove(&big, "user.k2"), Err(libc::ENODATA));
    assert_eq!(set(&d, "security.s", b"", 0), Ok(()));
    assert_eq!(set(&small, "system.other", b"v", 0), Err(libc::EOPNOTSUPP));
    assert_eq!(set(&small, "user.big", &[1u8; 4097], 0), Err(libc::ERANGE));
    assert_eq!(set(&small, "user.b1", &[1u8; 3000], 0), Ok(()));
    assert_eq!(set(&small, "user.b2", &[1u8; 3000], 0), Err(libc::ENOSPC));
    assert_eq!(remove(&small, "user.b1"), Ok(()));
    // A file made on the mount has none, and can have some.
    fs::write(m.path("new"), b"n").unwrap();
    assert_eq!(list_xattr(&m.path("new")), b"");
    assert_eq!(set(&m.path("new"), "user.n", b"1", 0), Ok(()));
    let img = m.img.clone();
    m.stop(Stop::Sigterm);
    // The kernel reads what the mount left (and e2fsck found it clean).
    let k = stitch_testkit::LoopMount::new(&img, &dir.path().join("k"), "ro").unwrap();
    let got = |n: &str| stitch_testkit::all_xattrs(&k.path().join(n));
    let kv = |pairs: &[(&str, &[u8])]| -> Vec<(String, Vec<u8>)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_vec()))
            .collect()
    };
    // small's ACL, hidden from the mount, went with its set unchanged.
    let small_now = got("small");
    assert_eq!(small_now[0].0, "system.posix_acl_access");
    assert_eq!(
        &small_now[1..],
        kv(&[("user.k", b"changed"), ("user.new", b"n")])
    );
    assert_eq!(
        got("big"),
        kv(&[("trusted.t", b"tt"), ("user.big", &[b'x'; 300])])
    );
    assert_eq!(got("d"), kv(&[("security.s", b""), ("user.dir", b"yes")]));
    assert_eq!(got("new"), kv(&[("user.n", b"1")]));
    k.unmount();
}

#[test]
fn readdir_offsets_stay_stable_while_the_directory_changes() {
    let (_dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &[]);
    fs::create_dir(m.path("d")).unwrap();
    for i in 0..300 {
        File::create(m.path(&format!("d/f{i:03}"))).unwrap();
    }
    let d = cpath(&m.path("d"));
    // SAFETY: opendir/readdir/closedir on a stream we own.
    let mut seen = Vec::new();
    unsafe {
        let stream = libc::opendir(d.as_ptr());
        assert!(!stream.is_null());
        let next = || next_name(stream);
        for _ in 0..20 {
            seen.push(next().unwrap());
        }
        for i in 150..300 {
            fs::remove_file(m.path(&format!("d/f{i:03}"))).unwrap();
        }
        for i in 0..100 {
            File::create(m.path(&format!("d/g{i:03}"))).unwrap();
        }
        while let Some(name) = next() {
            seen.push(name);
        }
        libc::closedir(stream);
    }
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "an entry was listed twice");
    assert!(
        seen.iter().all(|n| !n.starts_with('g')),
        "a new entry leaked in"
    );
    for i in 0..150 {
        let name = format!("f{i:03}");
        assert!(seen.contains(&name), "{name} was skipped");
    }
    assert!(seen.contains(&".".to_string()) && seen.contains(&"..".to_string()));
    // A new listing shows the directory as it is now.
    assert_eq!(fs::read_dir(m.path("d")).unwrap().count(), 250);
    m.stop(Stop::Sigterm);
}

/// The next name of a directory stream, `None` at its end.
///
/// # Safety
/// `stream` is an open stream from `opendir`.
unsafe fn next_name(stream: *mut libc::DIR) -> Option<String> {
    // SAFETY: the caller's stream; the entry is copied before the next call.
    unsafe {
        let e = libc::readdir(stream);
        (!e.is_null()).then(|| {
            std::ffi::CStr::from_ptr((*e).d_name.as_ptr())
                .to_string_lossy()
                .into_owned()
        })
    }
}

/// An open directory is listed at its first read, not at open (a directory
/// opened to be fsynced is never listed, whatever its size), and listed
/// again after a rewind.
#[test]
fn a_directory_is_listed_at_its_first_read_and_again_at_a_rewind() {
    let (_dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &[]);
    fs::create_dir(m.path("d")).unwrap();
    File::create(m.path("d/a")).unwrap();
    let d = cpath(&m.path("d"));
    // SAFETY: opendir/readdir/rewinddir/closedir on a stream we own.
    unsafe {
        let stream = libc::opendir(d.as_ptr());
        assert!(!stream.is_null());
        let all = || {
            let mut v: Vec<String> = std::iter::from_fn(|| next_name(stream)).collect();
            v.sort();
            v
        };
        File::create(m.path("d/b")).unwrap();
        assert_eq!(
            all(),
            [".", "..", "a", "b"],
            "made after opendir, before the first read"
        );
        File::create(m.path("d/c")).unwrap();
        fs::remove_file(m.path("d/a")).unwrap();
        assert!(all().is_empty(), "the stream is at its end");
        libc::rewinddir(stream);
        assert_eq!(all(), [".", "..", "b", "c"], "after rewinddir");
        libc::closedir(stream);
    }
    m.stop(Stop::Sigterm);
}

/// A shell whose working directory was removed (by `rm -r` elsewhere) can
/// still stat and list it, as on ext4: no links, no entries, also once the
/// removal is on disk. Nothing can be made in it; its mode and times can
/// be changed (in memory: its inode is freed), and the image stays clean.
#[test]
fn a_removed_working_directory_lists_empty() {
    let (_dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &[]);
    fs::create_dir(m.path("d")).unwrap();
    File::create(m.path("d/x")).unwrap();
    // `sync` flushes the removal first: the answer must outlive it.
    let script = "cd d && rm x && rmdir ../d && sync && ls -a . && echo listed \
        && stat -c '%h %F' . && ! touch y 2>/dev/null && echo refused \
        && chmod 700 . && touch -d @1577836800 . && stat -c '%a %Y' . && sync";
    let out = Command::new("sh")
        .args(["-c", script])
        .current_dir(m.path("."))
        .output()
        .unwrap();
    assert_eq!(
        text(&out.stdout),
        "listed\n0 directory\nrefused\n700 1577836800\n",
        "stderr: {}",
        text(&out.stderr)
    );
    m.stop(Stop::Fusermount);
    assert_e2fsck_clean(&img);
}

/// The kernel may cache that a name is absent (negative entries); every
/// way of making the name, right after the failed lookup, still shows it.
#[test]
fn a_name_looked_up_absent_appears_once_made() {
    let (_dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &[]);
    fs::write(m.path("src"), b"x").unwrap();
    let absent = |name: &str| {
        let err = fs::symlink_metadata(m.path(name)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{name}");
        // Twice: the second may be answered from the kernel's cache.
        assert!(fs::symlink_metadata(m.path(name)).is_err(), "{name}");
    };
    absent("created");
    fs::write(m.path("created"), b"made").unwrap();
    assert_eq!(fs::read(m.path("created")).unwrap(), b"made");
    absent("dir");
    fs::create_dir(m.path("dir")).unwrap();
    assert!(m.path("dir").is_dir());
    absent("linked");
    fs::hard_link(m.path("src"), m.path("linked")).unwrap();
    assert_eq!(fs::read(m.path("linked")).unwrap(), b"x");
    absent("sym");
    std::os::unix::fs::symlink("src", m.path("sym")).unwrap();
    assert_eq!(fs::read(m.path("sym")).unwrap(), b"x");
    absent("renamed");
    fs::rename(m.path("created"), m.path("renamed")).unwrap();
    assert_eq!(fs::read(m.path("renamed")).unwrap(), b"made");
    absent("created");
    absent("dir/inside");
    fs::write(m.path("dir/inside"), b"in").unwrap();
    assert_eq!(fs::read_dir(m.path("dir")).unwrap().count(), 1);
    assert_eq!(fs::read(m.path("dir/inside")).unwrap(), b"in");
    m.stop(Stop::Sigterm);
}

/// The kernel caches attributes for long (`TTL`), so what a flush changes
/// on its own (blocks read back from the disk, a directory grown by a
/// block) must reach it: `stat` after an fsync shows what a remount shows.
#[test]
fn stat_after_a_flush_shows_what_the_disk_holds() {
    let (_dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &[]);
    fs::create_dir(m.path("d")).unwrap();
    for i in 0..500 {
        File::create(m.path(&format!("d/a-name-long-enough-to-fill-blocks-{i}"))).unwrap();
    }
    fs::write(m.path("big"), pattern(1 << 20, 3)).unwrap();
    // Cached before the flush: the directory's first block, the file's
    // data blocks without the indirect block the disk will add.
    let (d0, f0) = (
        fs::metadata(m.path("d")).unwrap(),
        fs::metadata(m.path("big")).unwrap(),
    );
    // A flush that applies both (the kernel sends no syncfs to FUSE).
    File::open(m.path("big")).unwrap().sync_all().unwrap();
    File::open(m.path("d")).unwrap().sync_all().unwrap();
    let (d1, f1) = (
        fs::metadata(m.path("d")).unwrap(),
        fs::metadata(m.path("big")).unwrap(),
    );
    m.stop(Stop::Fusermount);
    let m = Mounted::start(&img, &mnt, &[]);
    let (d2, f2) = (
        fs::metadata(m.path("d")).unwrap(),
        fs::metadata(m.path("big")).unwrap(),
    );
    assert_eq!(
        (d1.size(), d1.blocks()),
        (d2.size(), d2.blocks()),
        "directory"
    );
    assert_eq!(f1.blocks(), f2.blocks(), "file");
    assert!(
        d2.size() > d0.size() && f2.blocks() > f0.blocks(),
        "the flush changed both"
    );
    m.stop(Stop::Sigterm);
}

/// `stitchfs sync` makes what the mount holds durable (the kernel's
/// `sync(1)` never reaches a FUSE server): a file written without fsync is
/// in the image after it, not before; a path elsewhere is refused.
#[test]
fn stitchfs_sync_makes_the_mount_durable() {
    let (dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &["--flush-interval", "3600"]);
    fs::write(m.path("f"), b"written, not fsynced").unwrap();
    let cat = |copy: &Path| -> String {
        // Replay the journal as a recovery would, then read the file.
        e2fsck(copy, &["-fy"]);
        let out = Command::new("debugfs")
            .args(["-R", "cat /f"])
            .arg(copy)
            .output()
            .unwrap();
        text(&out.stdout)
    };
    let before = dir.path().join("before.img");
    fs::copy(&img, &before).unwrap();
    let out = stitchfs(&["sync", m.path("").to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let after = dir.path().join("after.img");
    fs::copy(&img, &after).unwrap();
    assert_eq!(cat(&before), "", "the write was on disk before the sync");
    assert_eq!(cat(&after), "written, not fsynced");
    let out = stitchfs(&["sync", dir.path().to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not on a stitchfs mount"),
        "{}",
        text(&out.stderr)
    );
    m.stop(Stop::Sigterm);
}

#[test]
fn parallel_writers_on_many_threads() {
    let (_dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &["--threads", "4"]);
    std::thread::scope(|s| {
        for t in 0..8u8 {
            let m = &m;
            s.spawn(move || {
                let d = m.path(&format!("t{t}"));
                fs::create_dir(&d).unwrap();
                for i in 0..40 {
                    fs::write(d.join(format!("{i}")), pattern(5000 + i, t)).unwrap();
                }
            });
        }
    });
    m.stop(Stop::Sigterm);
    let m = Mounted::start(&img, &mnt, &[]);
    for t in 0..8u8 {
        for i in 0..40 {
            let got = fs::read(m.path(&format!("t{t}/{i}"))).unwrap();
            assert!(got == pattern(5000 + i, t), "t{t}/{i}");
        }
    }
    m.stop(Stop::Fusermount);
}

/// Runs `script` with sh as user and group nobody (65534), no other groups.
fn as_nobody(script: &str) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(["sh", "-c", script])
        .output()
        .unwrap()
}

/// A journaled image and a mount point user nobody can reach: under the
/// system's temporary directory, not the checkout (which may sit in a
/// private directory).
fn reachable_by_nobody() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let img = mkfs(dir.path(), true);
    let mnt = mountpoint(dir.path(), "mnt");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    (dir, img, mnt)
}

/// Permission denied, as `sh` reports it.
fn denied(out: &Output) -> bool {
    !out.status.success() && text(&out.stderr).contains("Permission denied")
}

/// A mount by root serves every user, as a kernel mount does, with the
/// kernel checking permissions; `-o private` keeps everyone but root out.
#[test]
fn a_mount_by_root_serves_every_user_unless_private() {
    let (dir, img, mnt) = reachable_by_nobody();
    let m = Mounted::start(&img, &mnt, &[]);
    for (name, mode) in [("public", 0o644), ("secret", 0o600)] {
        fs::write(m.path(name), name).unwrap();
        fs::set_permissions(m.path(name), fs::Permissions::from_mode(mode)).unwrap();
    }
    let out = as_nobody(&format!("cat {}/public", mnt.display()));
    assert_eq!(text(&out.stdout), "public", "{}", text(&out.stderr));
    let out = as_nobody(&format!("cat {}/secret", mnt.display()));
    assert!(denied(&out), "another user read a 0600 file");
    m.stop(Stop::Sigterm);

    let m = Mounted::start(&img, &mnt, &["-o", "private"]);
    assert_eq!(fs::read(m.path("secret")).unwrap(), b"secret");
    for cmd in ["ls", "stat", "cat {}/public", "touch {}/new"] {
        let cmd = match cmd.contains("{}") {
            true => cmd.replace("{}", &mnt.display().to_string()),
            false => format!("{cmd} {}", mnt.display()),
        };
        assert!(denied(&as_nobody(&cmd)), "{cmd} in a private mount");
    }
    m.stop(Stop::Sigterm);

    // Another user may not let others in without root's leave, and is told
    // where it is given (unless this machine gives it).
    let conf = fs::read_to_string("/etc/fuse.conf").unwrap_or_default();
    if !conf.lines().any(|l| l.trim() == "user_allow_other") {
        // The binary as well, copied beside the image: the checkout
        // (and so target/) may sit in a directory only root can enter.
        let bin = dir.path().join("stitchfs");
        fs::copy(BIN, &bin).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        let cmd = format!(
            "{} mount {} {} --foreground -o allow_other",
            bin.display(),
            img.display(),
            mnt.display()
        );
        let out = as_nobody(&cmd);
        assert!(!out.status.success() && !is_mounted(&mnt));
        let err = text(&out.stderr);
        assert!(
            err.contains("user_allow_other") && err.contains("/etc/fuse.conf"),
            "{err}"
        );
    }
}

#[test]
fn the_kernel_checks_permissions_and_new_files_belong_to_the_caller() {
    let (_dir, img, mnt) = reachable_by_nobody();
    let m = Mounted::start(&img, &mnt, &[]);
    for (d, mode) in [("open", 0o777), ("private", 0o700)] {
        fs::create_dir(m.path(d)).unwrap();
        fs::set_permissions(m.path(d), fs::Permissions::from_mode(mode)).unwrap();
    }
    fs::write(m.path("suid"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(m.path("suid"), fs::Permissions::from_mode(0o4777)).unwrap();
    let out = as_nobody(&format!(
        "cd {} && touch open/mine && mkdir open/sub && echo x >> suid",
        mnt.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    for rel in ["open/mine", "open/sub"] {
        let md = fs::metadata(m.path(rel)).unwrap();
        assert_eq!((md.uid(), md.gid()), (65534, 65534), "{rel}");
    }
    // The kernel asks for the setuid bit to go when another user writes.
    assert_eq!(fs::metadata(m.path("suid")).unwrap().mode() & 0o7777, 0o777);
    // A setgid directory gives its group to what is made in it, and its
    // setgid bit to subdirectories (memfs's ext2 semantics).
    fs::create_dir(m.path("open/sg")).unwrap();
    std::os::unix::fs::chown(m.path("open/sg"), None, Some(100)).unwrap();
    fs::set_permissions(m.path("open/sg"), fs::Permissions::from_mode(0o2777)).unwrap();
    let out = as_nobody(&format!(
        "cd {}/open/sg && touch f && mkdir sub",
        mnt.display()
    ));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let md = |rel: &str| fs::metadata(m.path(rel)).unwrap();
    assert_eq!((md("open/sg/f").uid(), md("open/sg/f").gid()), (65534, 100));
    assert_eq!(md("open/sg/sub").gid(), 100);
    assert_eq!(md("open/sg/sub").mode() & 0o2000, 0o2000);
    let out = as_nobody(&format!("touch {}/private/x", mnt.display()));
    assert!(!out.status.success(), "wrote into a 0700 directory");
    assert!(
        text(&out.stderr).contains("Permission denied"),
        "{}",
        text(&out.stderr)
    );
    let out = as_nobody(&format!("chmod 777 {}/private", mnt.display()));
    assert!(!out.status.success(), "chmod of another user's directory");
    m.stop(Stop::Fusermount);
}

/// The set-ID bits go as on a local file system when another user writes
/// or truncates a file, and at every change of owner of anything but a
/// directory (fifos, sockets and device nodes too); root's own writes
/// and truncates keep them. The kernel leaves this to us (we take FUSE's
/// `HANDLE_KILLPRIV_V2`, so that it stops asking for `security.capability`
/// before every write). Every expected mode is what ext4 (and tmpfs) gave
/// for the same steps on this kernel; FUSE's own handling (without the
/// flag) kept `w-sgid-nox`'s set-group-ID bit, as kernels before 6.2 did.
#[test]
fn set_id_bits_go_on_another_users_write_truncate_and_on_chown() {
    let (_dir, img, mnt) = reachable_by_nobody();
    let m = Mounted::start(&img, &mnt, &["-o", "allow_other"]);
    // (name, mode made with, who changes it how, mode expected after).
    // `n-*` belong to nobody, who gives them to itself.
    let cases: [(&str, u32, &str, u32); 15] = [
        ("w-suid", 0o4777, "nobody-append", 0o777),
        ("w-sgid-x", 0o2777, "nobody-append", 0o777),
        // Group may not execute: a caller outside the group drops it.
        ("w-sgid-nox", 0o2766, "nobody-append", 0o766),
        ("w-root", 0o6777, "root-append", 0o6777),
        ("t-nobody", 0o6777, "nobody-truncate", 0o777),
        ("t-root", 0o6777, "root-truncate", 0o6777),
        ("c-root", 0o6755, "root-chown", 0o755),
        // Root may keep set-group-ID of a file its group may not execute.
        ("c-root-nox", 0o2744, "root-chown", 0o2744),
        ("c-group", 0o6755, "root-chgrp", 0o755),
        ("dir", 0o2777, "nobody-mkdir", 0o2777),
        ("n-fifo", 0o6755, "nobody-chown", 0o755),
        // nobody is in the group, which may not execute: it keeps that bit.
        ("n-sock", 0o6744, "nobody-chown", 0o2744),
        ("n-chr", 0o6755, "nobody-chown", 0o755),
        ("n-blk", 0o4755, "nobody-chown", 0o755),
        ("n-dir", 0o6755, "nobody-chown", 0o6755),
    ];
    for (name, mode, _, _) in cases {
        let p = m.path(name);
        let node = |kind: libc::mode_t, dev: libc::dev_t| {
            // SAFETY: mknod on a valid C path.
            let rc = unsafe { libc::mknod(cpath(&p).as_ptr(), kind | 0o600, dev) };
            assert_eq!(rc, 0, "{name}: {}", std::io::Error::last_os_error());
        };
        match name {
            "dir" | "n-dir" => fs::create_dir(&p).unwrap(),
            "n-fifo" => node(libc::S_IFIFO, 0),
            "n-sock" => node(libc::S_IFSOCK, 0),
            "n-chr" => node(libc::S_IFCHR, libc::makedev(1, 3)),
            "n-blk" => node(libc::S_IFBLK, libc::makedev(7, 0)),
            _ => fs::write(&p, b"#!/bin/sh\n").unwrap(),
        }
        if name.starts_with("n-") {
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        }
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(fs::metadata(m.path(name)).unwrap().mode() & 0o7777, mode);
    }
    for (name, _, how, _) in cases {
        let p = m.path(name);
        let q = p.display();
        match how {
            "nobody-append" | "nobody-truncate" | "nobody-mkdir" | "nobody-chown" => {
                let script = match how {
                    "nobody-append" => format!("echo x >> {q}"),
                    "nobody-truncate" => format!("truncate -s 1 {q}"),
                    "nobody-chown" => format!("chown 65534 {q}"),
                    _ => format!("mkdir {q}/sub"),
                };
                let out = as_nobody(&script);
                assert!(out.status.success(), "{name}: {}", text(&out.stderr));
            }
            "root-append" => {
                let mut f = OpenOptions::new().append(true).open(&p).unwrap();
                f.write_all(b"x\n").unwrap();
            }
            "root-truncate" => {
                OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .unwrap()
                    .set_len(1)
                    .unwrap();
            }
            "root-chown" => std::os::unix::fs::chown(&p, Some(65534), None).unwrap(),
            "root-chgrp" => std::os::unix::fs::chown(&p, None, Some(65534)).unwrap(),
            other => unreachable!("{other}"),
        }
    }
    let modes = |m: &Mounted| -> Vec<(String, u32)> {
        cases
            .iter()
            .map(|(name, ..)| {
                let md = fs::metadata(m.path(name)).unwrap();
                (name.to_string(), md.mode() & 0o7777)
            })
            .collect()
    };
    let want: Vec<(String, u32)> = cases.iter().map(|c| (c.0.to_string(), c.3)).collect();
    assert_eq!(modes(&m), want, "as the kernel sees them");
    m.stop(Stop::Fusermount);
    // And as the disk keeps them.
    let m = Mounted::start(&img, &mnt, &[]);
    assert_eq!(modes(&m), want, "after a remount");
    m.stop(Stop::Fusermount);
}

/// Free blocks as `df` reads them.
fn bfree(p: &Path) -> u64 {
    // SAFETY: statvfs into a zeroed struct, on a valid C path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(cpath(p).as_ptr(), &mut st) }, 0);
    st.f_bfree
}

/// `df` shows a removed file's room at once, not at the next flush, and
/// the flush that frees it leaves the figure where it was (a file without
/// holes: its data and indirect blocks are counted exactly). The kernel's
/// forget, which frees a file nobody has open, may be served by the other
/// thread after the `statfs`: the mount waits for it.
#[test]
fn df_shows_a_removed_files_room_at_once() {
    let (_dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &["--flush-interval", "0"]);
    let sync = || assert!(stitchfs(&["sync", mnt.to_str().unwrap()]).status.success());
    fs::write(m.path("big"), pattern(20 << 20, 3)).unwrap();
    sync();
    let blocks = fs::metadata(m.path("big")).unwrap().blocks() / 8;
    assert_eq!(
        blocks,
        5120 + 1 + 1 + 4,
        "20 MiB: data, single, double and 4 below it"
    );
    let before = bfree(&mnt);
    fs::remove_file(m.path("big")).unwrap();
    let at_once = bfree(&mnt);
    assert_eq!(at_once - before, blocks);
    sync();
    assert_eq!(bfree(&mnt), at_once, "after the flush");
    // A version renamed over is removed too, and its room shows at once.
    fs::write(m.path("old"), pattern(4 << 20, 5)).unwrap();
    fs::write(m.path("new"), b"new version").unwrap();
    sync();
    let old = fs::metadata(m.path("old")).unwrap().blocks() / 8;
    let before = bfree(&mnt);
    fs::rename(m.path("new"), m.path("old")).unwrap();
    assert_eq!(bfree(&mnt) - before, old, "renamed over");
    m.stop(Stop::Umount);
}

/// A counter of `stitchfs stats --json` (`a.b.c`), 0 if absent.
fn figure(mnt: &Path, path: &str) -> u64 {
    let out = stitchfs(&["stats", "--json", mnt.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    path.split('.')
        .try_fold(&v, |v, k| v.get(k))
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0)
}

/// The requests of opcode `op` the mount has served.
fn served(mnt: &Path, op: &str) -> u64 {
    figure(mnt, &format!("requests.{op}.count"))
}

/// The kernel opens and closes files without a round trip (its no-open
/// support; `--open-requests on` brings OPEN and RELEASE back): reading
/// ten files sends no `open` and no `release`, and a new file is made by
/// `mknod`. Either way a file unlinked while open keeps its data for its
/// handle, through a flush (on disk it is an orphan), read back from the
/// server rather than the kernel's cache; its room stays taken while it
/// is open, and it is freed once closed, not at the unmount: the image is
/// clean after.
#[test]
fn files_open_and_close_without_a_round_trip_and_an_unlinked_one_lives_while_open() {
    for open_requests in ["off", "on"] {
        let (_dir, img, mnt) = fresh(true);
        let m = Mounted::start(
            &img,
            &mnt,
            &["--open-requests", open_requests, "--flush-interval", "0"],
        );
        let sync = || assert!(stitchfs(&["sync", mnt.to_str().unwrap()]).status.success());
        let made = (served(&mnt, "create"), served(&mnt, "mknod"));
        for i in 0..10u8 {
            fs::write(m.path(&format!("f{i}")), pattern(4096, i)).unwrap();
        }
        let made = (
            served(&mnt, "create") - made.0,
            served(&mnt, "mknod") - made.1,
        );
        let opened = (served(&mnt, "open"), served(&mnt, "release"));
        for i in 0..10u8 {
            assert_eq!(
                fs::read(m.path(&format!("f{i}"))).unwrap(),
                pattern(4096, i)
            );
        }
        let opened = (
            served(&mnt, "open") - opened.0,
            served(&mnt, "release") - opened.1,
        );
        match open_requests {
            // The first create is answered ENOSYS (counted), then mknod.
            "off" => {
                assert!(made.0 <= 1 && made.1 == 10, "create, mknod: {made:?}");
                assert!(opened.0 <= 1 && opened.1 == 0, "open, release: {opened:?}");
            }
            _ => {
                assert_eq!(made, (10, 0), "create, mknod");
                assert_eq!(opened, (10, 10), "open, release");
            }
        }

        sync();
        let free = bfree(&mnt);
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(m.path("held"))
            .unwrap();
        f.write_all(&pattern(8 << 20, 9)).unwrap();
        sync(); // on disk, so that its removal cannot be absorbed
        fs::remove_file(m.path("held")).unwrap();
        sync(); // the unlink reaches the disk while the file is open
                // Its blocks are still its own, as `df` says.
        let held = bfree(&mnt);
        assert!(free - held >= 2048, "{open_requests}: {free} -> {held}");
        f.write_all_at(b"after", 8 << 20).unwrap();
        // Not from the kernel's page cache: from the server.
        // SAFETY: fadvise on a descriptor we own.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        let mut whole = vec![0u8; (8 << 20) + 5];
        f.read_exact_at(&mut whole, 0).unwrap();
        let mut want = pattern(8 << 20, 9);
        want.extend_from_slice(b"after");
        assert!(whole == want, "{open_requests}: the unlinked file's data");
        // Closed, it is freed while mounted (the disk releases the orphan),
        // and the unmount leaves no leak.
        let released = figure(&mnt, "memfs.applied.release");
        drop(f);
        wait_until("the closed file's release", Duration::from_secs(10), || {
            sync();
            figure(&mnt, "memfs.applied.release") > released
        });
        assert!(bfree(&mnt) >= free, "{open_requests}: the room came back");
        m.stop(Stop::Umount);
    }
}

/// A file unlinked and still open when the mount is detached (`umount
/// -l`): the server serves its handle until it is closed, then unmounts,
/// and the image is left clean, the file freed rather than left on the
/// disk's list of orphans.
#[test]
fn a_file_unlinked_and_open_across_a_lazy_unmount_is_freed_when_closed() {
    let (_dir, img, mnt) = fresh(true);
    let mut m = Mounted::start(&img, &mnt, &[]);
    fs::write(m.path("keep"), b"kept").unwrap();
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(m.path("gone"))
        .unwrap();
    f.write_all(&pattern(1 << 20, 5)).unwrap();
    fs::remove_file(m.path("gone")).unwrap();
    assert!(stitchfs(&["sync", mnt.to_str().unwrap()]).status.success());
    let out = Command::new("umount").arg("-l").arg(&mnt).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut whole = vec![0u8; 1 << 20];
    f.read_exact_at(&mut whole, 0).unwrap();
    assert!(whole == pattern(1 << 20, 5), "served after the detach");
    drop(f);
    let mut child = m.child.take().unwrap();
    wait_until("the server to exit", Duration::from_secs(15), || {
        child.try_wait().unwrap().is_some()
    });
    assert!(child.wait().unwrap().success(), "{}", m.stderr());
    assert!(m.stderr().contains("unmounted cleanly"), "{}", m.stderr());
    assert_e2fsck_clean(&img);
    let sb = Command::new("dumpe2fs")
        .arg("-h")
        .arg(&img)
        .output()
        .unwrap();
    let sb = text(&sb.stdout);
    assert!(!sb.contains("First orphan inode"), "{sb}");
    let m = Mounted::start(&img, &mnt, &[]);
    assert_eq!(fs::read(m.path("keep")).unwrap(), b"kept");
    assert!(!m.path("gone").exists());
    m.stop(Stop::Fusermount);
}

/// What editors and git do: write a new version beside the file, rename
/// it over the old one. The old version's blocks must be freed.
#[test]

fn renaming_over_a_file_frees_the_old_version() {
    let (_dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &[]);
    fs::write(m.path("x"), b"old version").unwrap();
    fs::write(m.path("x.tmp"), b"new version").unwrap();
    fs::rename(m.path("x.tmp"), m.path("x")).unwrap();
    assert_eq!(fs::read(m.path("x")).unwrap(), b"new version");
    m.stop(Stop::Fusermount);
}

/// The reference model's seeded op sequences (every kind: data at odd
/// offsets, holes, truncates, hard links, renames over names, open
/// handles to unlinked files, special files, chmod and chown) run through
/// the mount: after each op the result must be the model's, and the tree
/// must equal the model's snapshot at the end, again after an unmount
/// (judged clean by e2fsck) and a remount.
fn model_case(seed: u64, ops: usize) {
    use stitch_model::real::RealFs;
    use stitch_model::{GenConfig, Limits, Model, Owner, Tree};
    let (_dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &[]);
    // A directory of the mount stands for the model's root, so the mount's
    // own lost+found stays out of the comparison.
    let root = m.path("model");
    let mut model = Model::new(0o755, Owner { uid: 0, gid: 0 }, Limits::default());
    let mut real = RealFs::new(&root);
    fs::create_dir(&root).unwrap();
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = GenConfig {
        max_offset: 1 << 20,
        ..GenConfig::default()
    };
    for (step, op) in stitch_model::ops(seed, ops, &cfg).iter().enumerate() {
        let want = model.apply(op);
        let got = real.apply(op);
        assert_eq!(got, want, "seed {seed} step {step}: {op:?}");
    }
    drop(real);
    let same = |m: &Mounted, when: &str| {
        let tree = Tree::from_dir(&m.path("model"), Default::default()).unwrap();
        let diff = tree.diff(&model.snapshot());
        assert!(diff.is_empty(), "seed {seed} {when}:\n{}", diff.join("\n"));
    };
    same(&m, "at the end");
    m.stop(Stop::Fusermount);
    let m = Mounted::start(&img, &mnt, &[]);
    same(&m, "after a remount");
    m.stop(Stop::Sigterm);
}

/// A few seeds each run; `STITCH_MOUNT_SEEDS=N` runs N more.
#[test]
fn model_sequences_through_the_mount() {
    let extra: u64 = std::env::var("STITCH_MOUNT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for seed in (0..4).chain(1000..1000 + extra) {
        model_case(seed, 300);
    }
}

/// Found by a random workload against a reference directory: a file with
/// a second name, renamed, its second name unlinked, fsynced, then
/// replaced by a rename. Its inode and blocks must be freed.
#[test]
fn renaming_over_an_fsynced_file_that_had_a_second_name_frees_it() {
    let (_dir, img, mnt) = fresh(true);
    let m = Mounted::start(&img, &mnt, &[]);
    fs::write(m.path("a"), [1u8; 4096]).unwrap();
    fs::create_dir(m.path("d")).unwrap();
    fs::hard_link(m.path("a"), m.path("d/c")).unwrap();
    fs::rename(m.path("a"), m.path("d/b")).unwrap();
    fs::remove_file(m.path("d/c")).unwrap();
    File::create(m.path("d/c"))
        .unwrap()
        .write_all_at(&[2u8; 4096], 4095)
        .unwrap();
    File::open(m.path("d/b")).unwrap().sync_all().unwrap();
    fs::rename(m.path("d/c"), m.path("d/b")).unwrap();
    assert_eq!(fs::metadata(m.path("d/b")).unwrap().len(), 4095 + 4096);
    m.stop(Stop::Fusermount);
}

/// What fsync returned for survives the daemon being killed outright:
/// the next mount replays the journal (and needs no check: see
/// `unclean_mount.rs`), and the image is clean after it.
#[test]
fn fsynced_data_survives_a_killed_daemon() {
    let (_dir, img, mnt) = fresh(true);
    let mut m = Mounted::start(&img, &mnt, &["--flush-interval", "0"]);
    let data = pattern(100_000, 9);
    let mut f = File::create(m.path("synced")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // A new name needs its directory synced (POSIX).
    fs::create_dir(m.path("dir")).unwrap();
    File::open(&m.mnt).unwrap().sync_all().unwrap();
    let mut f = File::create(m.path("dir/f")).unwrap();
    f.write_all(b"named").unwrap();
    f.sync_data().unwrap();
    File::open(m.path("dir")).unwrap().sync_all().unwrap();
    drop(f);
    let n = ino(&m.path("synced"));
    let mut child = m.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    // The kernel mount is left without its server.
    fusermount_u(&mnt);
    let m = Mounted::start(&img, &mnt, &[]);
    // The journal's replay leaves descriptors and bitmaps in step (both
    // change in one transaction): no check is needed.
    assert!(
        !m.stderr().contains("was not unmounted cleanly"),
        "{}",
        m.stderr()
    );
    assert!(fs::read(m.path("synced")).unwrap() == data);
    assert_eq!(ino(&m.path("synced")), n);
    assert_eq!(fs::read(m.path("dir/f")).unwrap(), b"named");
    m.stop(Stop::Sigterm);
}

/// A file unlinked while open reaches the disk unlinked and still held;
/// the daemon is killed with it still open. In journal mode it is on
/// ext3's orphan list, and the next mount finishes it: gone, its room
/// back. Soft updates keep no orphan list (as the kernel's ext2): the
/// check before the next mount finds an inode no name reaches and
/// reconnects it to lost+found whole, as e2fsck would. Either way what
/// was synced beside it is there and e2fsck finds the image clean after.
#[test]
fn a_file_unlinked_while_open_is_finished_after_a_killed_daemon() {
    for journal in [true, false] {
        let (_dir, img, mnt) = fresh(journal);
        let mut m = Mounted::start(&img, &mnt, &["--flush-interval", "0"]);
        let sync = || assert!(stitchfs(&["sync", mnt.to_str().unwrap()]).status.success());
        fs::write(m.path("kept"), b"kept").unwrap();
        sync();
        let free = bfree(&mnt);
        fs::write(m.path("big"), pattern(8 << 20, 4)).unwrap();
        sync();
        let held = File::open(m.path("big")).unwrap();
        fs::remove_file(m.path("big")).unwrap();
        sync();
        assert!(
            free - bfree(&mnt) >= 2048,
            "journal {journal}: held while open"
        );
        let mut child = m.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        drop(held);
        fusermount_u(&mnt);
        let m = Mounted::start(&img, &mnt, &[]);
        assert_eq!(fs::read(m.path("kept")).unwrap(), b"kept");
        assert!(!m.path("big").exists());
        let found: Vec<PathBuf> = fs::read_dir(m.path("lost+found"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        if journal {
            assert!(found.is_empty(), "{found:?}");
            let back = bfree(&mnt);
            assert!(back >= free, "the room came back: {free} then {back}");
        } else {
            assert_eq!(found.len(), 1, "{found:?}\n{}", m.stderr());
            assert!(fs::read(&found[0]).unwrap() == pattern(8 << 20, 4));
        }
        m.stop(Stop::Umount);
    }
}

/// Write-behind: a file past the bound reaches the image while it is still
/// open and unsynced, so a daemon killed then leaves a whole prefix of it,
/// never bytes it did not write, on an image e2fsck passes.
#[test]
fn written_behind_data_survives_a_killed_daemon() {
    let (_dir, img, mnt) = fresh(true);
    let allocated = || fs::metadata(&img).unwrap().blocks() * 512;
    let before = allocated();
    let mut m = Mounted::start(
        &img,
        &mnt,
        &["--flush-interval", "3600", "--write-behind", "1"],
    );
    let data = pattern(8 << 20, 3);
    let mut f = File::create(m.path("big")).unwrap();
    f.write_all(&data).unwrap();
    // No fsync: only write-behind can put the data in the image.
    wait_until(
        "write-behind to reach the image",
        Duration::from_secs(60),
        || allocated() >= before + (4 << 20),
    );
    let mut child = m.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    drop(f);
    fusermount_u(&mnt);
    let m = Mounted::start(&img, &mnt, &[]);
    let found = fs::read(m.path("big")).unwrap();
    assert!(
        found.len() >= 1 << 20,
        "only {} bytes survived",
        found.len()
    );
    assert!(found == data[..found.len()], "bytes the file never held");
    // Stopping judges the image with e2fsck.
    m.stop(Stop::Sigterm);
}

/// Writes `data` to `path` until the first error, as `dd` would: returns
/// the bytes taken and the error.
fn write_until_error(path: &Path, data: &[u8]) -> (Vec<u8>, Option<std::io::Error>) {
    let mut f = File::create(path).unwrap();
    let mut taken = 0;
    while taken < data.len() {
        let end = (taken + (1 << 20)).min(data.len());
        match f.write(&data[taken..end]) {
            Ok(0) => break,
            Ok(n) => taken += n,
            Err(e) => return (data[..taken].to_vec(), Some(e)),
        }
    }
    f.sync_all().unwrap();
    (data[..taken].to_vec(), None)
}

/// A disk filled through the mount, in both consistency modes: the write
/// that does not fit fails with ENOSPC, what was taken is fsynced and
/// stays, the room a removed file frees is writable again, and the image
/// is clean at unmount with every accepted byte on it.
#[test]
fn a_full_disk_says_enospc_and_keeps_every_byte_it_took() {
    for journal in [true, false] {
        let (_dir, img, mnt) = fresh(journal);
        let m = Mounted::start(&img, &mnt, &[]);
        let first = pattern(20 << 20, 1);
        fs::write(m.path("first"), &first).unwrap();
        let (big, err) = write_until_error(&m.path("big"), &pattern(200 << 20, 2));
        let err = err.expect("a 128 MiB image took 220 MiB");
        assert_eq!(
            err.raw_os_error(),
            Some(libc::ENOSPC),
            "journal {journal}: {err}"
        );
        File::open(m.path("big")).unwrap().sync_all().unwrap();
        assert!(fs::read(m.path("big")).unwrap() == big);
        let (_, err) = write_until_error(&m.path("more"), &pattern(1 << 20, 3));
        let err = err.expect("a full disk took another MiB");
        assert_eq!(
            err.raw_os_error(),
            Some(libc::ENOSPC),
            "journal {journal}: {err}"
        );
        fs::remove_file(m.path("more")).unwrap();

        fs::remove_file(m.path("first")).unwrap();
        Command::new("sync").arg("-f").arg(&m.mnt).status().unwrap();
        let again = pattern(16 << 20, 4);
        let (taken, err) = write_until_error(&m.path("again"), &again);
        assert!(
            err.is_none(),
            "journal {journal}: after freeing 20 MiB: {err:?}"
        );
        assert_eq!(taken.len(), again.len());
        m.stop(Stop::Umount);

        let m = Mounted::start(&img, &mnt, &[]);
        assert!(
            fs::read(m.path("big")).unwrap() == big,
            "journal {journal}: big"
        );
        assert!(
            fs::read(m.path("again")).unwrap() == again,
            "journal {journal}: again"
        );
        assert!(!m.path("first").exists());
        m.stop(Stop::Fusermount);
    }
}

/// The image's own storage fails under the mount (a sparse image on a
/// tmpfs too small for it, as a thin-provisioned volume runs out): the
/// fsync that meets the failure reports EIO, the mount turns read-only
/// (EROFS) and still reads, the daemon says the image needs a check, and
/// once the storage has room again the image recovers with what was
/// fsynced before, e2fsck finding it clean.
#[test]
fn a_failing_backing_store_turns_the_mount_read_only() {
    for journal in [true, false] {
        let dir = scratch();
        let store = mountpoint(dir.path(), "store");
        let tmpfs = |opts: &str| {
            let st = Command::new("mount")
                .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
                .arg(&store)
                .status()
                .unwrap();
            assert!(st.success(), "mount -t tmpfs -o {opts} (needs root)");
        };
        tmpfs("size=40M");
        struct Unmount(PathBuf);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = Command::new("umount").arg("-l").arg(&self.0).status();
            }
        }
        let _store = Unmount(store.clone());
        let img = mkfs(&store, journal);
        let mnt = mountpoint(dir.path(), "mnt");
        let mut m = Mounted::start(&img, &mnt, &["--flush-interval", "0"]);
        let kept = pattern(8 << 20, 5);
        let mut f = File::create(m.path("kept")).unwrap();
        f.write_all(&kept).unwrap();
        f.sync_all().unwrap();
        drop(f);
        File::open(&m.mnt).unwrap().sync_all().unwrap();

        // More than the store has left: the writes land in memory, the
        // fsync meets the device's ENOSPC.
        let mut f = File::create(m.path("lost")).unwrap();
        let chunk = pattern(1 << 20, 6);
        let mut failed = None;
        for _ in 0..64 {
            if let Err(e) = f.write_all(&chunk) {
                failed = Some(e);
                break;
            }
        }
        let synced = f.sync_all();
        let err = failed.or(synced.err()).expect("64 MiB fit a 40 MiB store");
        assert!(
            matches!(err.raw_os_error(), Some(libc::EIO | libc::EROFS)),
            "journal {journal}: {err}"
        );
        drop(f);
        let e = fs::write(m.path("after"), b"x").unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::EROFS),
            "journal {journal}: {e}"
        );
        let e = fs::create_dir(m.path("d")).unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::EROFS),
            "journal {journal}: {e}"
        );
        assert!(fs::read(m.path("kept")).unwrap() == kept);

        fusermount_u(&mnt);
        let mut child = m.child.take().unwrap();
        let status = child.wait().unwrap();
        let log = m.stderr();
        assert!(!status.success(), "journal {journal}: exit {status}: {log}");
        assert!(log.contains("stitchfs fsck"), "journal {journal}: {log}");
        // The request that met the failure is logged as a device error,
        // with the device's own (the errno the kernel got is EIO).
        assert!(
            log.contains("device error") && log.contains("No space left on device"),
            "journal {journal}: {log}"
        );

        // The store grows again; the image is a crash image now.
        tmpfs("remount,size=400M");
        if journal {
            let r = e2fsck(&img, &["-E", "journal_only", "-y"]);
            assert!(matches!(r.code, 0 | 1), "replay {}\n{}", r.code, r.stdout);
        }
        // Soft updates may leak what was in flight (exit 4, blocks or
        // inodes marked used that nothing reaches); nothing else.
        let r = e2fsck(&img, &["-fn"]);
        assert!(
            r.code == 0 || (!journal && r.code == 4),
            "journal {journal}: e2fsck -fn {}\n{}",
            r.code,
            r.stdout
        );
        if r.code == 4 {
            let r = e2fsck(&img, &["-fy"]);
            assert!(
                matches!(r.code, 0 | 1),
                "e2fsck -fy {}\n{}",
                r.code,
                r.stdout
            );
        }
        let m = Mounted::start(&img, &mnt, &[]);
        assert!(
            fs::read(m.path("kept")).unwrap() == kept,
            "journal {journal}"
        );
        m.stop(Stop::Umount);
    }
}

/// A mount whose memory bound (`--memory 1`, MiB) a file passes flushes
/// and evicts as it is written, with no periodic flush to do it
/// (`--flush-interval 0`): with the kernel's cached copy dropped, the file
/// reads back whole from the server, which loads its evicted pages again;
/// it survives a remount, and the unmount line counts the flushes under
/// memory pressure (none on a mount that never reached its bound).
#[test]
fn a_mount_past_its_memory_bound_flushes_evicts_and_says_so() {
    let under_pressure = |err: &str| -> u64 {
        let line = err
            .lines()
            .find(|l| l.contains("unmounted cleanly"))
            .unwrap_or_else(|| panic!("no unmount line: {err}"));
        let before = line
            .split(" under memory pressure")
            .next()
            .and_then(|s| s.rsplit(' ').next())
            .unwrap_or_else(|| panic!("no pressure count: {line}"));
        before
            .parse()
            .unwrap_or_else(|e| panic!("{before:?} in {line}: {e}"))
    };
    let (_dir, img, mnt) = fresh(true);
    let data = pattern(6 << 20, 11);
    let m = Mounted::start(&img, &mnt, &["--memory", "1", "--flush-interval", "0"]);
    fs::write(m.path("big"), &data).unwrap();
    let f = File::open(m.path("big")).unwrap();
    // SAFETY: an advice call on a valid descriptor.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
    drop(f);
    assert!(
        fs::read(m.path("big")).unwrap() == data,
        "read back before unmount"
    );
    let err = m.stop(Stop::Sigterm);
    println!("{err}");
    assert!(under_pressure(&err) > 0, "{err}");
    let m = Mounted::start(&img, &mnt, &[]);
    assert!(
        fs::read(m.path("big")).unwrap() == data,
        "read back after remount"
    );
    let err = m.stop(Stop::Sigterm);
    assert_eq!(under_pressure(&err), 0, "{err}");
}
