//! A full disk and a failing device, met through memfs (docs/design.md: "Bad
//! input gets a clear error and loses nothing"). memfs accepts writes into
//! memory and applies them later, so a write it accepts must be one the
//! disk can take: `ENOSPC` comes at the write, never at the flush, and
//! never as data silently gone. A device that fails latches the mount
//! read-only (`EROFS`); what was durable before stays so.

mod common;
use common::*;
use std::sync::Arc;
use stitch_blockdev::{FaultDevice, FaultKind, MemDevice};
use stitch_diskfs::{Consistency, DiskFs};
use stitch_memfs::Refusal;
use stitch_memfs::{InodeNo, Kind, MemError, MemFs, Trouble};

const MIB: usize = 1 << 20;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn new_file(fs: &MemFs, name: &str) -> InodeNo {
    let a = fs
        .mknod(fs.root(), name.as_bytes(), Kind::File, 0o644, (0, 0), 0, 0)
        .unwrap();
    fs.open(a.ino).unwrap();
    a.ino
}

fn read_all(fs: &MemFs, ino: InodeNo) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    let mut out = Vec::new();
    while (out.len() as u64) < size {
        let part = fs.read(ino, out.len() as u64, MIB as u32).unwrap();
        assert!(!part.is_empty(), "read stopped short at {}", out.len());
        out.extend_from_slice(&part);
    }
    out
}

/// Writes `data` at `offset` as a program would: short writes continue,
/// and the first error ends it. Returns how many bytes were taken.
fn write_until_full(
    fs: &MemFs,
    ino: InodeNo,
    offset: u64,
    data: &[u8],
) -> (usize, Option<MemError>) {
    let mut done = 0;
    while done < data.len() {
        match fs.write(ino, offset + done as u64, &data[done..], false) {
            Ok(0) => return (done, None),
            Ok(n) => done += n as usize,
            Err(e) => return (done, Some(e)),
        }
    }
    (done, None)
}

/// The device's image after unmount, mounted again: every file as memfs
/// reads it, and the image judged by e2fsck and our fsck.
fn remount_and_read(dev: &MemDevice, mode: Consistency, names: &[String]) -> Vec<Vec<u8>> {
    check_image(&dev.snapshot(), false).unwrap();
    let fs = mount_on(device(dev.snapshot()), mode, opts());
    names
        .iter()
        .map(|n| {
            let a = fs.lookup(fs.root(), n.as_bytes()).unwrap();
            read_all(&fs, a.ino)
        })
        .collect()
}

/// Files written 1 MiB at a time until the disk is full: the write that
/// does not fit is short or fails with `ENOSPC`, every byte accepted
/// reaches the disk, the flush never fails, and space freed by an unlink
/// can be written again.
#[test]
fn a_full_disk_refuses_writes_and_keeps_every_byte_it_took() {
    for mode in MODES {
        let dev = device(image_for(mode));
        let fs = mount_on(dev.clone(), mode, opts());
        let mut names = Vec::new();
        let mut kept = Vec::new();
        let mut refused = None;
        'fill: for i in 0..64 {
            let name = format!("f{i}");
            let ino = new_file(&fs, &name);
            names.push(name);
            let mut content = Vec::new();
            for chunk in 0..8u64 {
                let data = pattern(MIB, (i << 8) + chunk);
                let (took, err) = write_until_full(&fs, ino, content.len() as u64, &data);
                content.extend_from_slice(&data[..took]);
                if let Some(e) = err {
                    kept.push(content);
                    refused = Some(e);
                    break 'fill;
                }
            }
            kept.push(content);
            fs.release(ino).unwrap();
        }
        assert!(
            matches!(refused, Some(MemError::NoSpace)),
            "{mode:?}: {refused:?} after {} files",
            names.len()
        );
        assert_eq!(MemError::NoSpace.errno(), libc::ENOSPC);
        let st = fs.statfs().unwrap();
        fs.sync()
            .unwrap_or_else(|e| panic!("{mode:?}: the flush of what was taken failed: {e}"));
        // The disk really is full: nearly nothing is left.
        let st2 = fs.statfs().unwrap();
        assert!(
            st2.bfree < st.blocks / 50,
            "{mode:?}: {st2:?} after filling"
        );
        // Every file reads back what was taken, from memory and from disk.
        for (n, want) in names.iter().zip(&kept) {
            let a = fs.lookup(fs.root(), n.as_bytes()).unwrap();
            assert!(read_all(&fs, a.ino) == *want, "{mode:?}: {n} in memory");
        }
        // Calls that need a block of their own: what the disk has left
        // (the slack kept for indirect blocks) goes to slow symlinks and
        // directories until they are refused too; each one taken reaches
        // the disk, and one refused changes nothing.
        let long_target = vec![b't'; 3000];
        let mut made = Vec::new();
        let refused = loop {
            let name = format!("m{}", made.len());
            let r = if made.len() % 2 == 0 {
                fs.symlink(fs.root(), name.as_bytes(), &long_target, 0, 0)
            } else {
                fs.mkdir(fs.root(), name.as_bytes(), 0o755, 0, 0)
            };
            match r {
                Ok(_) if made.len() < 1000 => made.push(name),
                other => break other,
            }
        };
        assert!(
            matches!(refused, Err(MemError::NoSpace)),
            "{mode:?}: {refused:?}"
        );
        let name = format!("m{}", made.len());
        let absent = fs.lookup(fs.root(), name.as_bytes());
        assert!(
            matches!(absent, Err(MemError::Refused(Refusal::NotFound))),
            "{mode:?}: {absent:?}"
        );
        fs.sync()
            .unwrap_or_else(|e| panic!("{mode:?}: flush of {} new inodes: {e}", made.len()));

        // Freeing the first file makes its room writable again.
        let freed = kept[0].len();
        fs.unlink(fs.root(), names[0].as_bytes()).unwrap();
        names.remove(0);
        kept.remove(0);
        let ino = new_file(&fs, "again");
        let again = pattern(freed / 2, 999);
        let (took, err) = write_until_full(&fs, ino, 0, &again);
        assert_eq!(
            (took, err.map(|e| e.to_string())),
            (again.len(), None),
            "{mode:?}"
        );
        fs.release(ino).unwrap();
        names.push("again".into());
        kept.push(again);
        fs.unmount().unwrap();
        let read = remount_and_read(&dev, mode, &names);
        for ((n, want), got) in names.iter().zip(&kept).zip(&read) {
            assert!(
                got == want,
                "{mode:?}: {n} after remount: {} bytes of {}",
                got.len(),
                want.len()
            );
        }
        let fs = mount_on(device(dev.snapshot()), mode, opts());
        for (i, name) in made.iter().enumerate() {
            let a = fs.lookup(fs.root(), name.as_bytes()).unwrap();
            if i % 2 == 0 {
                assert_eq!(fs.readlink(a.ino).unwrap(), long_target, "{mode:?}: {name}");
            } else {
                assert_eq!(a.kind, Kind::Dir, "{mode:?}: {name}");
            }
        }
        eprintln!(
            "{mode:?}: {} files, {} symlinks and directories",
            names.len(),
            made.len()
        );
    }
}

/// A file already on disk is rewritten in place on a full disk: its blocks
/// are its own, so the rewrite needs none (a database updating its pages
/// when the disk has filled must not be refused).
#[test]
fn a_full_disk_still_takes_rewrites_of_allocated_blocks() {
    for mode in MODES {
        let dev = device(image_for(mode));
        let fs = mount_on(dev.clone(), mode, opts());
        let db = new_file(&fs, "db");
        let mut content = pattern(2 * MIB, 1);
        fs.write(db, 0, &content, false).unwrap();
        fs.fsync(db, false).unwrap();
        let filler = new_file(&fs, "filler");
        let mut at = 0u64;
        loop {
            let (took, err) = write_until_full(&fs, filler, at, &pattern(MIB, at));
            at += took as u64;
            if err.is_some() {
                break;
            }
        }
        fs.sync().unwrap();
        // Whole pages and part pages, at the start and in the middle.
        for (i, (off, len)) in [(0usize, 65536usize), (MIB + 100, 10_000), (4096 * 7, 1)]
            .into_iter()
            .enumerate()
        {
            let data = pattern(len, 50 + i as u64);
            let r = fs.write(db, off as u64, &data, false);
            assert_eq!(
                r.map_err(|e| e.to_string()),
                Ok(len as u32),
                "{mode:?}: rewrite {i}"
            );
            content[off..off + len].copy_from_slice(&data);
            fs.fsync(db, false)
                .unwrap_or_else(|e| panic!("{mode:?}: fsync after rewrite {i}: {e}"));
        }
        fs.release(db).unwrap();
        fs.release(filler).unwrap();
        fs.unmount().unwrap();
        let read = remount_and_read(&dev, mode, &["db".to_string()]);
        assert!(read[0] == content, "{mode:?}: db after remount");
    }
}

/// Scattered one-byte writes, each in a different indirect block's range:
/// every page also needs an indirect block. What memfs takes must still
/// fit at the flush.
#[test]
fn sparse_writes_reserve_their_indirect_blocks() {
    for mode in MODES {
        let dev = device(image_for(mode));
        let fs = mount_on(dev.clone(), mode, opts());
        let f = new_file(&fs, "sparse");
        let stride = 4096u64 * 1024;
        let mut taken = Vec::new();
        for i in 0..20_000u64 {
            let off = 12 * 4096 + i * stride;
            match fs.write(f, off, &[(i % 251) as u8 + 1], false) {
                Ok(1) => taken.push(off),
                Ok(n) => panic!("{mode:?}: short write {n}"),
                Err(MemError::NoSpace) => break,
                Err(e) => panic!("{mode:?}: write {i}: {e}"),
            }
        }
        assert!(taken.len() < 20_000, "{mode:?}: never full");
        eprintln!(
            "{mode:?}: {} sparse pages, statfs {:?}",
            taken.len(),
            fs.statfs().unwrap()
        );
        fs.sync()
            .unwrap_or_else(|e| panic!("{mode:?}: flush of {} sparse pages: {e}", taken.len()));
        for (i, off) in taken.iter().enumerate() {
            let b = fs.read(f, *off, 1).unwrap();
            assert_eq!(b, [(i as u64 % 251) as u8 + 1], "{mode:?}: at {off}");
        }
        fs.release(f).unwrap();
        fs.unmount().unwrap();
        check_image(&dev.snapshot(), false).unwrap();
        let again = mount_on(device(dev.snapshot()), mode, opts());
        let f = again.lookup(again.root(), b"sparse").unwrap().ino;
        for (i, off) in taken.iter().enumerate() {
            let b = again.read(f, *off, 1).unwrap();
            assert_eq!(
                b,
                [(i as u64 % 251) as u8 + 1],
                "{mode:?}: at {off} after remount"
            );
        }
    }
}

/// memfs over a device that fails when told to.
fn mount_faulty(mode: Consistency) -> (Arc<FaultDevice<MemDevice>>, MemFs) {
    let inner = MemDevice::from_image(4096, image_for(mode)).unwrap();
    let dev = Arc::new(FaultDevice::new(inner).unwrap());
    (dev.clone(), MemFs::mount_device(dev, mode, opts()).unwrap())
}

/// A write that fails at the device: the fsync says `EIO`, the mount
/// latches read-only (every later change is `EROFS`), reads still answer
/// from memory, and what an earlier fsync made durable is on the device
/// and mounts (after the journal's recovery) as it was.
#[test]
fn a_failing_device_latches_read_only_and_keeps_what_was_durable() {
    for mode in MODES {
        for fail_flush in [false, true] {
            let (dev, fs) = mount_faulty(mode);
            let a = new_file(&fs, "a");
            let a_data = pattern(300_000, 7);
            fs.write(a, 0, &a_data, false).unwrap();
            fs.fsync(a, false).unwrap();
            let b = new_file(&fs, "b");
            fs.write(b, 0, &pattern(100_000, 8), false).unwrap();
            let (_, writes, flushes) = dev.counts();
            if fail_flush {
                dev.fail_nth_flush(flushes + 1, FaultKind::Io);
            } else {
                dev.fail_nth_write(writes + 1, FaultKind::Io);
            }
            let what = format!(
                "{mode:?}, failing the next {}",
                if fail_flush { "flush" } else { "write" }
            );
            // The device's own error, kept whole up to the edge.
            let e = fs.fsync(b, false).expect_err(&what);
            assert!(matches!(e, MemError::Device(_)), "{what}: fsync gave {e:?}");
            assert_eq!(e.errno(), libc::EIO, "{what}");
            assert_eq!(e.trouble(), Some(Trouble::Device), "{what}");
            let os = e.io_error().and_then(|io| io.raw_os_error());
            assert_eq!(os, Some(libc::EIO), "{what}: {e}");
            // Latched: nothing more changes, and it says so.
            let w = fs.write(a, 0, b"x", false);
            assert!(
                matches!(w, Err(MemError::ReadOnly)),
                "{what}: write gave {w:?}"
            );
            assert_eq!(MemError::ReadOnly.errno(), libc::EROFS);
            let m = fs.mkdir(fs.root(), b"d", 0o755, 0, 0);
            assert!(
                matches!(m, Err(MemError::ReadOnly)),
                "{what}: mkdir gave {m:?}"
            );
            let u = fs.unlink(fs.root(), b"a");
            assert!(
                matches!(u, Err(MemError::ReadOnly)),
                "{what}: unlink gave {u:?}"
            );
            // Later flushes say the mount is latched: EIO, and no trouble
            // of their own to log.
            for r in [fs.sync(), fs.fsync(a, false)] {
                let e = r.expect_err(&what);
                assert!(matches!(e, MemError::Latched), "{what}: {e:?}");
                assert_eq!((e.errno(), e.trouble()), (libc::EIO, None), "{what}");
            }
            // Reads still answer.
            assert!(read_all(&fs, a) == a_data, "{what}: a in memory");
            assert!(fs.lookup(fs.root(), b"b").is_ok(), "{what}");
            assert!(fs.unmount().is_err(), "{what}: unmount after the failure");
            // What reached the device is a crash state: after recovery, a
            // is there as fsynced; b may or may not be.
            let img = dev.inner().snapshot();
            check_image(&img, mode == Consistency::SoftUpdates)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let after = mount_on(device(img), mode, opts());
            let a2 = after.lookup(after.root(), b"a").unwrap();
            assert!(
                read_all(&after, a2.ino) == a_data,
                "{what}: a after recovery"
            );
        }
    }
}

/// A device that runs out of room itself (a thin-provisioned store) is a
/// failed device, not a full file system: the fsync says `EIO` and keeps
/// the device's `ENOSPC` for the log, and the mount latches.
#[test]
fn a_device_out_of_room_is_a_device_error() {
    let mode = Consistency::SoftUpdates;
    let (dev, fs) = mount_faulty(mode);
    let a = new_file(&fs, "a");
    fs.write(a, 0, &pattern(100_000, 3), false).unwrap();
    let (_, writes, _) = dev.counts();
    dev.fail_nth_write(writes + 1, FaultKind::NoSpace);
    let e = fs.fsync(a, false).unwrap_err();
    assert!(matches!(e, MemError::Device(_)), "{e:?}");
    assert_eq!(e.errno(), libc::EIO);
    let os = e.io_error().and_then(|io| io.raw_os_error());
    assert_eq!(os, Some(libc::ENOSPC), "{e}");
    let w = fs.write(a, 0, b"x", false).unwrap_err();
    assert!(matches!(w, MemError::ReadOnly), "{w:?}");
}

/// The tree `d/f` on a fresh ext2 image, unmounted; and `d`'s inode.
fn image_with_dir() -> (Vec<u8>, InodeNo) {
    let mode = Consistency::SoftUpdates;
    let dev = device(image_for(mode));
    let fs = mount_on(dev.clone(), mode, opts());
    let d = fs.mkdir(fs.root(), b"d", 0o755, 0, 0).unwrap().ino;
    fs.mknod(d, b"f", Kind::File, 0o644, (0, 0), 0, 0).unwrap();
    fs.unmount().unwrap();
    (dev.snapshot(), d)
}

/// A directory block that does not decode is corruption, kept as such up
/// to the edge (`EIO`, logged there as damage), not a device error.
#[test]
fn a_damaged_directory_block_is_corruption() {
    let (mut image, d) = image_with_dir();
    let block = {
        let mut disk = DiskFs::mount(device(image.clone()), Consistency::SoftUpdates, NOW).unwrap();
        let b = disk.physical_block(d, 0);
        b.unwrap().expect("d has a first block").0 as usize
    };
    image[block * 4096..(block + 1) * 4096].fill(0);
    let fs = mount_on(device(image), Consistency::SoftUpdates, opts());
    let e = fs.lookup(d, b"f").unwrap_err();
    assert!(matches!(e, MemError::Corrupt(_)), "{e:?}");
    assert_eq!(e.errno(), libc::EIO);
    assert_eq!(e.trouble(), Some(Trouble::Corruption));
}

/// A group's directory count that disagrees with its bitmap is found when
/// the flush of an rmdir would take it below zero: the flush fails as
/// corruption, nothing more is written, and the mount latches.
#[test]
fn a_count_out_of_bounds_fails_the_flush_as_corruption() {
    let (mut image, d) = image_with_dir();
    // Group 0's descriptor, in the block after the superblock's: its
    // directory count (bg_used_dirs_count, 16 bits at byte 16) set to 0.
    image[4096 + 16..4096 + 18].fill(0);
    let dev = device(image);
    let fs = mount_on(dev.clone(), Consistency::SoftUpdates, opts());
    let mounted = dev.snapshot();
    fs.unlink(d, b"f").unwrap();
    fs.rmdir(fs.root(), b"d").unwrap();
    let e = fs.sync().unwrap_err();
    assert!(matches!(e, MemError::Corrupt(_)), "{e:?}");
    assert!(e.to_string().contains("directory count 0"), "{e}");
    assert_eq!(e.errno(), libc::EIO);
    assert!(dev.snapshot() == mounted, "written after the count error");
    let m = fs.mkdir(fs.root(), b"e", 0o755, 0, 0).unwrap_err();
    assert!(matches!(m, MemError::ReadOnly), "{m:?}");
    assert!(matches!(fs.sync(), Err(MemError::Latched)));
}

/// A file written and removed before any flush never reaches the disk,
/// and the room its pages held in memory comes back: statfs shows the
/// same free space as before, and the disk can be filled as before.
#[test]
fn files_that_never_reach_the_disk_give_their_room_back() {
    for mode in MODES {
        let fs = mount_on(device(image_for(mode)), mode, opts());
        fs.sync().unwrap();
        let before = fs.statfs().unwrap().bfree;
        for i in 0..40 {
            let name = format!("tmp{i}");
            let ino = new_file(&fs, &name);
            assert_eq!(
                fs.write(ino, 0, &pattern(MIB, i), false).unwrap(),
                MIB as u32
            );
            if i % 2 == 0 {
                fs.release(ino).unwrap();
                fs.unlink(fs.root(), name.as_bytes()).unwrap();
            } else {
                fs.unlink(fs.root(), name.as_bytes()).unwrap();
                fs.release(ino).unwrap();
            }
            if i % 10 == 9 {
                fs.sync().unwrap();
            }
        }
        fs.sync().unwrap();
        assert_eq!(fs.statfs().unwrap().bfree, before, "{mode:?}");
    }
}

/// Two writers fill the disk while a third rewrites a file already on it
/// and the background flusher runs write-behind: near full, writes take
/// the flush locks, and nothing deadlocks; every byte each writer was
/// told it wrote is on disk after a remount.
#[test]
fn writers_racing_to_fill_the_disk_lose_nothing() {
    for mode in MODES {
        let dev = device(image_for(mode));
        let o = stitch_memfs::Options {
            flush_interval: Some(std::time::Duration::from_millis(20)),
            write_behind: 256 << 10,
            memory_limit: 8 << 20,
            ..opts()
        };
        let fs = Arc::new(mount_on(dev.clone(), mode, o));
        let db = new_file(&fs, "db");
        let db_data = pattern(MIB, 77);
        fs.write(db, 0, &db_data, false).unwrap();
        fs.fsync(db, false).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut threads = Vec::new();
        for w in 0..2u64 {
            let (fs, tx) = (fs.clone(), tx.clone());
            threads.push(std::thread::spawn(move || {
                let name = format!("w{w}");
                let ino = new_file(&fs, &name);
                let mut content = Vec::new();
                for chunk in 0..64u64 {
                    let data = pattern(256 << 10, (w << 16) + chunk);
                    let (took, err) = write_until_full(&fs, ino, content.len() as u64, &data);
                    content.extend_from_slice(&data[..took]);
                    if let Some(e) = err {
                        assert!(matches!(e, MemError::NoSpace), "{name}: {e}");
                        break;
                    }
                }
                fs.release(ino).unwrap();
                tx.send((name, content)).unwrap();
            }));
        }
        {
            let (fs, tx) = (fs.clone(), tx.clone());
            threads.push(std::thread::spawn(move || {
                let mut content = pattern(MIB, 77);
                for i in 0..200u64 {
                    let off = (i * 40_961) % (MIB as u64 - 8192);
                    let data = pattern(8192, 1000 + i);
                    let n = fs.write(db, off, &data, false).unwrap();
                    assert_eq!(n, 8192, "rewrite {i}");
                    content[off as usize..off as usize + 8192].copy_from_slice(&data);
                }
                tx.send(("db".to_string(), content)).unwrap();
            }));
        }
        drop(tx);
        let mut results = Vec::new();
        for _ in 0..3 {
            let r = rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("{mode:?}: a writer is stuck"));
            results.push(r);
        }
        for t in threads {
            t.join().unwrap();
        }
        fs.release(db).unwrap();
        fs.sync().unwrap();
        fs.unmount().unwrap();
        let names: Vec<String> = results.iter().map(|(n, _)| n.clone()).collect();
        let read = remount_and_read(&dev, mode, &names);
        for ((n, want), got) in results.iter().zip(&read) {
            assert!(
                got == want,
                "{mode:?}: {n}: {} bytes of {}",
                got.len(),
                want.len()
            );
        }
    }
}
