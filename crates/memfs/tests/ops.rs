//! memfs operations end to end: through memfs, flushed to diskfs, judged
//! by e2fsck after unmount and read back after a remount.

mod common;
use common::*;
use stitch_memfs::Refusal;
use stitch_memfs::{Kind, MemError, RenameFlags, SetAttrs};

#[test]
fn files_survive_a_remount_with_their_inode_numbers() {
    for mode in MODES {
        let (dev, fs) = mount_fresh(mode);
        let r = fs.root();
        let d = fs.mkdir(r, b"dir", 0o755, 0, 0).unwrap();
        let f = fs
            .mknod(d.ino, b"file", Kind::File, 0o644, (0, 0), 1000, 100)
            .unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(fs.write(f.ino, 0, &data, false).unwrap(), 100_000);
        fs.symlink(r, b"link", b"dir/file", 0, 0).unwrap();
        fs.link(f.ino, r, b"hard").unwrap();
        fs.mknod(r, b"fifo", Kind::Fifo, 0o600, (0, 0), 0, 0)
            .unwrap();
        fs.mknod(r, b"dev", Kind::CharDev, 0o600, (4, 5), 0, 0)
            .unwrap();
        let sparse = fs
            .mknod(r, b"sparse", Kind::File, 0o644, (0, 0), 0, 0)
            .unwrap();
        fs.write(sparse.ino, 10 << 20, b"end", false).unwrap();
        fs.unmount().unwrap();
        let E2fsck {
            code, stdout: out, ..
        } = e2fsck_image(&dev.snapshot());
        assert_eq!(code, 0, "{mode:?}: {out}");

        let fs = mount_on(dev.clone(), mode, opts());
        let d2 = fs.lookup(r, b"dir").unwrap();
        assert_eq!(d2.ino, d.ino);
        let f2 = fs.lookup(d.ino, b"file").unwrap();
        assert_eq!(
            (f2.ino, f2.nlink, f2.uid, f2.gid, f2.size),
            (f.ino, 2, 1000, 100, 100_000)
        );
        assert_eq!(fs.read(f.ino, 0, 200_000).unwrap(), data);
        assert_eq!(
            fs.readlink(fs.lookup(r, b"link").unwrap().ino).unwrap(),
            b"dir/file"
        );
        assert_eq!(fs.lookup(r, b"dev").unwrap().rdev, (4, 5));
        let s = fs.lookup(r, b"sparse").unwrap();
        assert_eq!(s.size, (10 << 20) + 3);
        assert_eq!(fs.read(s.ino, 0, 4096).unwrap(), vec![0; 4096]);
        assert_eq!(fs.read(s.ino, 10 << 20, 10).unwrap(), b"end");
        let names: Vec<_> = fs.readdir(r).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names.len(), 7, "{names:?}"); // lost+found too
        fs.unmount().unwrap();
    }
}

#[test]
fn a_created_and_removed_file_never_reaches_the_disk() {
    let (dev, fs) = mount_fresh(MODES[1]);
    let r = fs.root();
    fs.sync().unwrap();
    let before = dev.snapshot();
    let f = fs
        .mknod(r, b"tmp", Kind::File, 0o644, (0, 0), 0, 0)
        .unwrap();
    fs.write(f.ino, 0, &[7; 10_000], false).unwrap();
    fs.rename(r, b"tmp", r, b"tmp2", RenameFlags::default())
        .unwrap();
    fs.unlink(r, b"tmp2").unwrap();
    let d = fs.mkdir(r, b"d", 0o755, 0, 0).unwrap();
    let x = fs
        .mknod(d.ino, b"x", Kind::File, 0o644, (0, 0), 0, 0)
        .unwrap();
    fs.unlink(d.ino, b"x").unwrap();
    fs.rmdir(r, b"d").unwrap();
    fs.sync().unwrap();
    let st = fs.stats();
    assert_eq!(st.ops_applied, 0, "{st:?}");
    assert!(st.ops_absorbed >= 7, "{st:?}");
    assert_eq!(
        dev.snapshot(),
        before,
        "an absorbed create changed the disk"
    );
    // The number comes back for the next file.
    let g = fs
        .mknod(r, b"next", Kind::File, 0o644, (0, 0), 0, 0)
        .unwrap();
    assert!(g.ino == f.ino || g.ino == x.ino, "{} not recycled", g.ino);
    fs.unmount().unwrap();
    assert_eq!(e2fsck_image(&dev.snapshot()).code, 0);
}

#[test]
fn an_open_unlinked_file_keeps_its_data_until_release() {
    for mode in MODES {
        let (dev, fs) = mount_fresh(mode);
        let r = fs.root();
        let f = fs.mknod(r, b"f", Kind::File, 0o644, (0, 0), 0, 0).unwrap();
        fs.write(f.ino, 0, &[9; 50_000], false).unwrap();
        fs.fsync(f.ino, false).unwrap();
        fs.open(f.ino).unwrap();
        fs.unlink(r, b"f").unwrap();
        fs.sync().unwrap();
        // Evicted pages must come back from the orphan on disk.
        assert_eq!(fs.read(f.ino, 0, 50_000).unwrap(), vec![9; 50_000]);
        assert!(matches!(
            fs.lookup(r, b"f"),
            Err(MemError::Refused(Refusal::NotFound))
        ));
        fs.release(f.ino).unwrap();
        fs.unmount().unwrap();
        let E2fsck {
            code, stdout: out, ..
        } = e2fsck_image(&dev.snapshot());
        assert_eq!(code, 0, "{mode:?}: {out}");
    }
}

#[test]
fn truncate_then_grow_shows_zeros() {
    let (dev, fs) = mount_fresh(MODES[1]);
    let r = fs.root();
    let f = fs.mknod(r, b"f", Kind::File, 0o644, (0, 0), 0, 0).unwrap();
    fs.write(f.ino, 0, &[1; 100_000], false).unwrap();
    fs.sync().unwrap();
    fs.setattr(
        f.ino,
        SetAttrs {
            size: Some(5_000),
            ..Default::default()
        },
    )
    .unwrap();
    fs.write(f.ino, 80_000, b"tail", false).unwrap();
    let want = {
        let mut v = vec![1u8; 5_000];
        v.resize(80_000, 0);
        v.extend_from_slice(b"tail");
        v
    };
    assert_eq!(fs.read(f.ino, 0, 200_000).unwrap(), want);
    fs.sync().unwrap();
    fs.unmount().unwrap();
    let fs = mount_on(dev.clone(), MODES[1], opts());
    assert_eq!(fs.read(f.ino, 0, 200_000).unwrap(), want);
    fs.unmount().unwrap();
    assert_eq!(e2fsck_image(&dev.snapshot()).code, 0);
}

#[test]
fn rename_refuses_a_loop_and_handles_flags() {
    let (dev, fs) = mount_fresh(MODES[0]);
    let r = fs.root();
    let a = fs.mkdir(r, b"a", 0o755, 0, 0).unwrap();
    let b = fs.mkdir(a.ino, b"b", 0o755, 0, 0).unwrap();
    assert!(matches!(
        fs.rename(r, b"a", b.ino, b"x", RenameFlags::default()),
        Err(MemError::Refused(Refusal::Invalid(_)))
    ));
    fs.mknod(r, b"f", Kind::File, 0o644, (0, 0), 0, 0).unwrap();
    fs.mknod(r, b"g", Kind::File, 0o644, (0, 0), 0, 0).unwrap();
    let noreplace = RenameFlags {
        noreplace: true,
        exchange: false,
    };
    assert!(matches!(
        fs.rename(r, b"f", r, b"g", noreplace),
        Err(MemError::Refused(Refusal::Exists))
    ));
    let exchange = RenameFlags {
        noreplace: false,
        exchange: true,
    };
    fs.rename(r, b"f", a.ino, b"b", exchange).unwrap();
    assert_eq!(fs.lookup(r, b"f").unwrap().kind, Kind::Dir);
    assert_eq!(fs.parent(b.ino).unwrap(), r);
    fs.unmount().unwrap();
    assert_eq!(
        e2fsck_image(&dev.snapshot()).code,
        0,
        "{}",
        e2fsck_image(&dev.snapshot()).stdout
    );
}

#[test]
fn a_file_replaced_by_rename_leaves_no_blocks_behind() {
    for mode in MODES {
        let (dev, fs) = mount_fresh(mode);
        let r = fs.root();
        // Replaced after reaching the disk, and within one flush.
        for synced in [true, false] {
            let (a, b) = (format!("a{synced}"), format!("b{synced}"));
            let b_ino = fs
                .mknod(r, b.as_bytes(), Kind::File, 0o644, (0, 0), 0, 0)
                .unwrap()
                .ino;
            if synced {
                fs.sync().unwrap();
            }
            fs.write(b_ino, 0, &[2; 20_000], false).unwrap();
            let a_ino = fs
                .mknod(r, a.as_bytes(), Kind::File, 0o644, (0, 0), 0, 0)
                .unwrap()
                .ino;
            fs.write(a_ino, 0, &[1; 20_000], false).unwrap();
            fs.rename(r, a.as_bytes(), r, b.as_bytes(), RenameFlags::default())
                .unwrap();
        }
        fs.unmount().unwrap();
        let E2fsck {
            code, stdout: out, ..
        } = e2fsck_image(&dev.snapshot());
        assert_eq!(code, 0, "{mode:?}: {out}");
    }
}

#[test]
fn an_unlinked_open_file_keeps_unflushed_data_after_eviction() {
    let dev = device(fresh_image(64 << 20, Some(JournalSize::Default)));
    let mut o = opts();
    o.memory_limit = 64 << 10; // 16 pages: everything clean gets evicted
    let fs = mount_on(dev.clone(), MODES[1], o);
    let r = fs.root();
    let f = fs.mknod(r, b"f", Kind::File, 0o644, (0, 0), 0, 0).unwrap();
    fs.open(f.ino).unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    fs.write(f.ino, 0, &data, false).unwrap();
    fs.unlink(r, b"f").unwrap();
    fs.sync().unwrap();
    let g = fs.mknod(r, b"g", Kind::File, 0o644, (0, 0), 0, 0).unwrap();
    fs.write(g.ino, 0, &[5; 400_000], false).unwrap(); // pressure: evicts f's pages
    assert!(fs.stats().pages_evicted > 0);
    assert_eq!(fs.read(f.ino, 0, 300_000).unwrap(), data);
    fs.release(f.ino).unwrap();
    fs.unmount().unwrap();
    let E2fsck {
        code, stdout: out, ..
    } = e2fsck_image(&dev.snapshot());
    assert_eq!(code, 0, "{out}");
}

/// A file with a second name is renamed, loses the second name while open
/// for an fsync, then is replaced by a rename: its inode and blocks must be
/// freed (the open during the fsync must not leave it marked open on disk).
#[test]
fn a_replaced_file_that_was_open_during_an_fsync_is_freed() {
    for mode in MODES {
        let dev = device(image_for(mode));
        let fs = mount_on(dev.clone(), mode, opts());
        let r = fs.root();
        let a = fs.mknod(r, b"a", Kind::File, 0o644, (0, 0), 0, 0).unwrap();
        fs.write(a.ino, 0, &[1; 4096], false).unwrap();
        let d = fs.mkdir(r, b"d", 0o755, 0, 0).unwrap();
        fs.link(a.ino, d.ino, b"c").unwrap();
        fs.rename(r, b"a", d.ino, b"b", RenameFlags::default())
            .unwrap();
        fs.unlink(d.ino, b"c").unwrap();
        let c = fs
            .mknod(d.ino, b"c", Kind::File, 0o644, (0, 0), 0, 0)
            .unwrap();
        fs.write(c.ino, 4095, &[2; 4096], false).unwrap();
        fs.open(a.ino).unwrap();
        fs.fsync(a.ino, false).unwrap();
        fs.release(a.ino).unwrap();
        fs.rename(d.ino, b"c", d.ino, b"b", RenameFlags::default())
            .unwrap();
        fs.unmount().unwrap();
        let E2fsck {
            code, stdout: out, ..
        } = e2fsck_image(&dev.snapshot());
        assert_eq!(code, 0, "{mode:?}: {out}");
    }
}

/// An image without the `ext_attr` feature takes no attributes (and says
/// so), and nothing about the file changes.
#[test]
fn an_image_without_ext_attr_refuses_attributes() {
    let mut image = fresh_image(64 << 20, None);
    // s_feature_compat, at byte 0x5C of the superblock (which starts at 1024).
    let at = 1024 + 0x5C;
    let compat = u32::from_le_bytes(image[at..at + 4].try_into().unwrap());
    assert_ne!(compat & 0x8, 0, "our mkfs sets ext_attr");
    image[at..at + 4].copy_from_slice(&(compat & !0x8).to_le_bytes());
    let fs = mount_on(
        device(image),
        stitch_diskfs::Consistency::SoftUpdates,
        opts(),
    );
    let f = fs
        .mknod(
            fs.root(),
            b"f",
            stitch_memfs::Kind::File,
            0o644,
            (0, 0),
            0,
            0,
        )
        .unwrap()
        .ino;
    let r = fs.set_xattr(f, b"user.a", Some(b"1"), stitch_memfs::XattrSet::Either);
    assert!(
        matches!(r, Err(stitch_memfs::MemError::Unsupported(_))),
        "{r:?}"
    );
    assert!(fs.xattrs(f).unwrap().is_empty());
}

/// `statfs` counts what memory will take (an unflushed file's inode and
/// block) and answers while the disk is held, as a long flush holds it: a
/// `df` must not stall behind someone's 100 MB fsync.
#[test]
fn statfs_counts_unflushed_files_and_does_not_wait_for_the_disk() {
    let fs = mount_on(
        device(fresh_image(64 << 20, Some(JournalSize::Default))),
        MODES[0],
        opts(),
    );
    let r = fs.root();
    let empty = fs.statfs().unwrap();
    let f = fs.mknod(r, b"a", Kind::File, 0o644, (0, 0), 0, 0).unwrap();
    fs.write(f.ino, 0, &[1; 4096], false).unwrap();
    let unflushed = fs.statfs().unwrap();
    assert_eq!(unflushed.ffree, empty.ffree - 1);
    assert!(unflushed.bfree < empty.bfree);
    fs.sync().unwrap();
    let flushed = fs.statfs().unwrap();
    assert_eq!(flushed.ffree, empty.ffree - 1);
    let fs2 = fs.clone();
    let during = fs
        .with_disk(move |_| bounded(std::time::Duration::from_secs(20), move || fs2.statfs()))
        .unwrap()
        .expect("statfs waited for the disk")
        .unwrap();
    assert_eq!(during, flushed);
}

/// Free space counts what memory will need: a rename to a new name may need
/// a directory block, one over an existing name or an exchange rewrites
/// entries in place and needs none. (Counting every rename made a write
/// fail with ENOSPC on a small disk while a fast renamer ran between
/// flushes.)
#[test]
fn renames_in_place_reserve_no_space() {
    let fs = mount_on(
        device(fresh_image(64 << 20, Some(JournalSize::Default))),
        MODES[0],
        opts(),
    );
    let r = fs.root();
    for n in [&b"a"[..], b"b", b"c"] {
        fs.mknod(r, n, Kind::File, 0o644, (0, 0), 0, 0).unwrap();
    }
    fs.sync().unwrap();
    let before = fs.statfs().unwrap().bfree;
    let exchange = RenameFlags {
        exchange: true,
        ..Default::default()
    };
    for _ in 0..100 {
        fs.rename(r, b"a", r, b"b", exchange).unwrap();
    }
    fs.rename(r, b"a", r, b"c", RenameFlags::default()).unwrap();
    assert_eq!(fs.statfs().unwrap().bfree, before, "in place");
    fs.rename(r, b"b", r, b"d", RenameFlags::default()).unwrap();
    assert_eq!(fs.statfs().unwrap().bfree, before - 1, "a new name");
    fs.sync().unwrap();
    assert_eq!(fs.statfs().unwrap().bfree, before, "after the flush");
}

/// A directory's size and blocks in `stat` are what the disk holds once its
/// entries are flushed (diskfs decides when a directory grows a block), as
/// they are after a remount.
#[test]
fn directory_size_follows_the_disk_after_a_flush() {
    let (dev, fs) = mount_fresh(MODES[0]);
    let d = fs.mkdir(fs.root(), b"d", 0o755, 0, 0).unwrap();
    assert_eq!(fs.getattr(d.ino).unwrap().size, 4096);
    for i in 0..500 {
        let name = format!("a-name-long-enough-to-fill-blocks-{i}");
        fs.mknod(d.ino, name.as_bytes(), Kind::File, 0o644, (0, 0), 0, 0)
            .unwrap();
    }
    fs.sync().unwrap();
    let live = fs.getattr(d.ino).unwrap();
    assert!(live.size > 4096, "{live:?}");
    fs.unmount().unwrap();
    let again = mount_on(dev, MODES[0], opts());
    let remounted = again.getattr(d.ino).unwrap();
    assert_eq!((live.size, live.blocks), (remounted.size, remounted.blocks));
}

/// A write that drops set-ID bits says so to the attribute hook (the
/// kernel caches the mode, and a write's reply does not carry it); one
/// that drops nothing, or is not asked to, says nothing.
#[test]
fn a_write_that_drops_set_id_bits_tells_the_attribute_hook() {
    use std::sync::{Arc, Mutex};
    use stitch_memfs::DropSetId;
    let dev = device(fresh_image(16 << 20, Some(JournalSize::Default)));
    let fs = mount_on(dev, MODES[0], opts());
    let told = Arc::new(Mutex::new(Vec::new()));
    let t = told.clone();
    fs.on_attr_change(move |ino| t.lock().unwrap().push(ino));
    let r = fs.root();
    let f = fs
        .mknod(r, b"prog", Kind::File, 0o6755, (0, 0), 0, 0)
        .unwrap();
    let caller = |gid| DropSetId {
        gid,
        privileged: false,
    };
    let nobody = caller(65534);
    fs.write_as(f.ino, 0, b"a", false, None).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().perm, 0o6755);
    assert!(told.lock().unwrap().is_empty());
    fs.write_as(f.ino, 1, b"b", false, Some(nobody)).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().perm, 0o755);
    assert_eq!(*told.lock().unwrap(), vec![f.ino]);
    fs.write_as(f.ino, 2, b"c", false, Some(nobody)).unwrap();
    assert_eq!(told.lock().unwrap().len(), 1, "nothing left to drop");
    // Set-group-ID without group execute: a caller in the group keeps it.
    let g = fs
        .mknod(r, b"locked", Kind::File, 0o2666, (0, 0), 0, 100)
        .unwrap();
    fs.write_as(g.ino, 0, b"a", false, Some(caller(100)))
        .unwrap();
    assert_eq!(fs.getattr(g.ino).unwrap().perm, 0o2666);
    fs.write_as(g.ino, 0, b"a", false, Some(nobody)).unwrap();
    assert_eq!(fs.getattr(g.ino).unwrap().perm, 0o666);
    fs.unmount().unwrap();
}

/// A change of owner by the owner takes the set-user-ID bit of every type
/// but a directory, and the set-group-ID bit where the group may execute
/// (the caller is in the file's group here): what the kernel's tmpfs and
/// ext4 do on `chown` (`chown_common`). A directory keeps both.
#[test]
fn a_change_of_owner_drops_set_id_bits_of_every_type_but_a_directory() {
    use stitch_memfs::DropSetId;
    let dev = device(fresh_image(16 << 20, Some(JournalSize::Default)));
    let fs = mount_on(dev, MODES[0], opts());
    let r = fs.root();
    // (name, kind, mode made with, mode after the change of owner)
    let cases = [
        ("file", Kind::File, 0o6755, 0o755),
        ("fifo", Kind::Fifo, 0o6755, 0o755),
        ("sock", Kind::Socket, 0o6744, 0o2744),
        ("chr", Kind::CharDev, 0o6755, 0o755),
        ("blk", Kind::BlockDev, 0o4755, 0o755),
        ("dir", Kind::Dir, 0o6755, 0o6755),
    ];
    let owner = DropSetId {
        gid: 65534,
        privileged: false,
    };
    for (name, kind, made, want) in cases {
        let a = match kind {
            Kind::Dir => fs.mkdir(r, name.as_bytes(), made, 65534, 65534),
            _ => fs.mknod(r, name.as_bytes(), kind, made, (1, 3), 65534, 65534),
        }
        .unwrap();
        assert_eq!(a.perm, made, "{name}");
        let chown = SetAttrs {
            uid: Some(65534),
            drop_setid: Some(owner),
            ..Default::default()
        };
        assert_eq!(fs.setattr(a.ino, chown).unwrap().perm, want, "{name}");
    }
    fs.unmount().unwrap();
}

/// The flushes memfs makes with nobody asking, as `on_own_flush` tells
/// them: a write past the memory bound, one that finds too little room,
/// the periodic flush and write-behind. A flush a caller asks for is not
/// told.
#[test]
fn memfs_tells_each_flush_it_makes_on_its_own() {
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    use stitch_memfs::{FlushCause, MemFs, Options};
    let mode = MODES[1];
    let watch = |fs: &MemFs| {
        let seen: Arc<Mutex<Vec<FlushCause>>> = Arc::default();
        let s = seen.clone();
        fs.on_own_flush(move |c| s.lock().unwrap().push(c));
        seen
    };
    let file = |fs: &MemFs, name: &[u8]| {
        fs.mknod(fs.root(), name, Kind::File, 0o644, (0, 0), 0, 0)
            .unwrap()
            .ino
    };
    let chunk = vec![7u8; 1 << 20];

    // Pressure: 16 pages, then a 128 KiB write; asked-for syncs are not told.
    let fs = mount_on(
        device(image_for(mode)),
        mode,
        Options {
            memory_limit: 16 << 12,
            ..opts()
        },
    );
    let seen = watch(&fs);
    let f = file(&fs, b"f");
    fs.sync().unwrap();
    fs.fsync(f, false).unwrap();
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
    fs.write(f, 0, &chunk[..128 << 10], false).unwrap();
    assert_eq!(*seen.lock().unwrap(), [FlushCause::Pressure]);
    let counted = fs.stats().own_flushes;
    assert_eq!(
        (counted.pressure, counted.room, counted.periodic),
        (1, 0, 0)
    );
    fs.unmount().unwrap();

    // Room: 20 MiB of new pages on a 32 MiB image, then 20 MiB more: the
    // second write flushes to count again before it is refused.
    let fs = mount_on(device(image_for(mode)), mode, opts());
    let seen = watch(&fs);
    let (a, b) = (file(&fs, b"a"), file(&fs, b"b"));
    for i in 0..20u64 {
        fs.write(a, i << 20, &chunk, false).unwrap();
    }
    assert!(seen.lock().unwrap().is_empty());
    let mut refused = false;
    for i in 0..20u64 {
        match fs.write(b, i << 20, &chunk, false) {
            Ok(_) => {}
            Err(MemError::NoSpace) => {
                refused = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused, "40 MiB fit on a 32 MiB image");
    let got = seen.lock().unwrap().clone();
    assert!(
        !got.is_empty() && got.iter().all(|c| *c == FlushCause::Room),
        "{got:?}"
    );
    fs.unmount().unwrap();

    // The background flusher: write-behind of the file past 1 MiB, then the
    // periodic flush.
    let fs = mount_on(
        device(image_for(mode)),
        mode,
        Options {
            flush_interval: Some(Duration::from_millis(300)),
            write_behind: 1 << 20,
            ..opts()
        },
    );
    let seen = watch(&fs);
    let big = file(&fs, b"big");
    fs.write(big, 0, &chunk, false).unwrap();
    fs.write(big, 1 << 20, &chunk, false).unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    let both = || {
        let got = seen.lock().unwrap();
        got.contains(&FlushCause::WriteBehind(big)) && got.contains(&FlushCause::Periodic)
    };
    while !both() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(both(), "{:?}", seen.lock().unwrap());
    fs.unmount().unwrap();
}
