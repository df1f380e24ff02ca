//! Crash tests of diskfs on the recording device (docs/design.md "Testing"):
//! a workload of creates, appends, overwrites, unlinks, mkdir and rmdir,
//! renames, and files unlinked while open and later closed (or not) runs
//! with write-back rounds and flushes interleaved; then every crash image the
//! recording allows (exhaustive per epoch up to a bound, sampled beyond) is
//! judged:
//! - soft updates: `stitchfs fsck` finds nothing but soft-updates leaks,
//!   `e2fsck -fn` exits 0 or 4 and is clean whenever ours is, and no file
//!   holds a byte it never wrote (every file's bytes follow its own pattern
//!   or are zero);
//! - async (the control, Featherstitch §8.4): some crash image shows
//!   corruption, so the checkers are known to see damage.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use stitch_blockdev::{MemDevice, RecordingDevice};
use stitch_diskfs::{Consistency, DiskFs, FileType, InodeNo};

mod common;
use common::{byte_of, NOW};

/// The directory among `dirs` that names `d`, and the name.
fn parent_and_name(fs: &mut DiskFs, dirs: &[InodeNo], d: InodeNo) -> Option<(InodeNo, Vec<u8>)> {
    dirs.iter().copied().find_map(|p| {
        let entries = fs.readdir(p).unwrap();
        entries
            .into_iter()
            .find(|e| e.ino == d && e.name != b"." && e.name != b"..")
            .map(|e| (p, e.name))
    })
}

/// Runs the workload; returns the recording.
fn record(image: Vec<u8>, mode: Consistency, seed: u64) -> Arc<RecordingDevice<MemDevice>> {
    let mem = MemDevice::from_image(4096, image.clone()).unwrap();
    let rec = Arc::new(RecordingDevice::with_base(mem, image).unwrap());
    let mut fs = DiskFs::mount(rec.clone(), mode, NOW).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let root = fs.root();
    let mut files: Vec<(InodeNo, InodeNo, String, u32, u64)> = Vec::new();
    let mut dirs = vec![root];
    let mut orphans: Vec<InodeNo> = Vec::new();
    let trace = std::env::var_os("STITCH_TRACE").is_some();
    for step in 0..60u32 {
        let choice = rng.gen_range(0..16);
        if trace {
            eprintln!("step {step}: choice {choice}, log {}", rec.log().len());
        }
        match choice {
            0 => {
                let name = format!("d{step}");
                let (d, _) = fs
                    .mkdir(
                        dirs[rng.gen_range(0..dirs.len())],
                        name.as_bytes(),
                        0o755,
                        0,
                        0,
                        NOW,
                    )
                    .unwrap();
                dirs.push(d);
            }
            1..=3 => {
                let parent = dirs[rng.gen_range(0..dirs.len())];
                let name = format!("f{step}");
                let (ino, _) = fs
                    .create(parent, name.as_bytes(), 0o644, 0, 0, NOW)
                    .unwrap();
                files.push((parent, ino, name, ino.0, 0));
            }
            4..=6 if !files.is_empty() => {
                let k = rng.gen_range(0..files.len());
                let (_, ino, _, f, size) = files[k];
                let len = rng.gen_range(1..20_000u64);
                let data: Vec<u8> = (size..size + len).map(|i| byte_of(f, i)).collect();
                fs.write(ino, size, &data, NOW).unwrap();
                files[k].4 = size + len;
            }
            7 if !files.is_empty() => {
                let (parent, _, name, _, _) = files.swap_remove(rng.gen_range(0..files.len()));
                if trace {
                    eprintln!("  unlink {name} in {}", parent.0);
                }
                fs.unlink(parent, name.as_bytes(), NOW).unwrap();
            }
            8 if dirs.len() > 1 => {
                let d = dirs[dirs.len() - 1];
                if files.iter().all(|f| f.0 != d) && fs.readdir(d).unwrap().len() == 2 {
                    if let Some((p, name)) = parent_and_name(&mut fs, &dirs, d) {
                        if trace {
                            eprintln!(
                                "  rmdir {} in {} (inode {})",
                                String::from_utf8_lossy(&name),
                                p.0,
                                d.0
                            );
                        }
                        fs.rmdir(p, &name, NOW).unwrap();
                        if trace {
                            eprintln!("  rmdir {p:?} {}", String::from_utf8_lossy(&name));
                        }
                        dirs.pop();
                    }
                }
            }
            10 if !files.is_empty() => {
                // Shrink (freeing blocks) or grow (a hole) a file.
                let k = rng.gen_range(0..files.len());
                let (_, ino, _, _, size) = files[k];
                let new = rng.gen_range(0..=size + 10_000);
                fs.truncate(ino, new, NOW).unwrap();
                for f in files.iter_mut().filter(|f| f.1 == ino) {
                    f.4 = new;
                }
            }
            11 if !files.is_empty() => {
                // A second name, in some directory.
                let (_, ino, _, f, size) = files[rng.gen_range(0..files.len())];
                let parent = dirs[rng.gen_range(0..dirs.len())];
                let name = format!("l{step}");
                fs.link(ino, parent, name.as_bytes(), NOW).unwrap();
                files.push((parent, ino, name, f, size));
            }
            12 => {
                // Symlinks, fast (target in the inode) and slow (a block).
                let parent = dirs[rng.gen_range(0..dirs.len())];
                let target = "t".repeat(if rng.gen_bool(0.5) { 20 } else { 300 });
                fs.symlink(
                    parent,
                    format!("s{step}").as_bytes(),
                    target.as_bytes(),
                    0,
                    0,
                    NOW,
                )
                .unwrap();
            }
            13 if !files.is_empty() => {
                // Rename a file: a new name, or over another file's name.
                let k = rng.gen_range(0..files.len());
                let (sp, ino, sn, f, size) = files[k].clone();
                let over = rng
                    .gen_bool(0.4)
                    .then(|| rng.gen_range(0..files.len()))
                    .filter(|&j| files[j].1 != ino);
                let (dp, dn) = match over {
                    Some(j) => (files[j].0, files[j].2.clone()),
                    None => (dirs[rng.gen_range(0..dirs.len())], format!("r{step}")),
                };
                fs.rename(
                    sp,
                    sn.as_bytes(),
                    dp,
                    dn.as_bytes(),
                    Default::default(),
                    NOW,
                )
                .unwrap();
                files.retain(|e| !(e.0 == dp && e.2 == dn));
                if let Some(e) = files.iter_mut().find(|e| e.0 == sp && e.2 == sn) {
                    *e = (dp, ino, dn, f, size);
                }
            }
            14 if dirs.len() > 1 => {
                // Move a directory to the root under a new name.
                let d = dirs[rng.gen_range(1..dirs.len())];
                if let Some((p, name)) = parent_and_name(&mut fs, &dirs, d) {
                    let root = fs.root();
                    fs.rename(
                        p,
                        &name,
                        root,
                        format!("m{step}").as_bytes(),
                        Default::default(),
                        NOW,
                    )
                    .unwrap();
                    for e in files
                        .iter_mut()
                        .filter(|e| e.0 == p && e.2.as_bytes() == name.as_slice())
                    {
                        e.0 = root;
                    }
                }
            }
            15 if !orphans.is_empty() && rng.gen_bool(0.5) => {
                // The last close of one of them: off the orphan list, freed.
                let o = orphans.swap_remove(rng.gen_range(0..orphans.len()));
                fs.release(o, NOW).unwrap();
                if trace {
                    eprintln!("  release {o:?}");
                }
            }
            15 => {
                // A file unlinked while open (closed later, or never).
                let name = format!("o{step}");
                let (ino, _) = fs.create(root, name.as_bytes(), 0o600, 0, 0, NOW).unwrap();
                let data: Vec<u8> = (0..9_000).map(|i| byte_of(ino.0, i)).collect();
                fs.write(ino, 0, &data, NOW).unwrap();
                fs.open(ino).unwrap();
                fs.unlink(root, name.as_bytes(), NOW).unwrap();
                orphans.push(ino);
                if trace {
                    eprintln!("  orphan {ino:?}");
                }
            }
            _ => {
                common::write_back_some(&mut fs, &mut rng);
            }
        }
    }
    rec
}

/// Every regular file's bytes are its own pattern or zero.
fn files_hold_only_their_own_bytes(image: Vec<u8>) -> Result<(), String> {
    let dev = Arc::new(MemDevice::from_image(4096, image).unwrap());
    let mut fs =
        DiskFs::mount(dev, Consistency::SoftUpdates, NOW).map_err(|e| format!("mount: {e}"))?;
    let mut stack = vec![fs.root()];
    while let Some(d) = stack.pop() {
        for e in fs.readdir(d).map_err(|e| e.to_string())? {
            if e.name == b"." || e.name == b".." || e.name == b"lost+found" {
                continue;
            }
            match e.kind {
                Some(FileType::Directory) => stack.push(e.ino),
                Some(FileType::Regular) => {
                    let size = fs.getattr(e.ino).map_err(|e| e.to_string())?.size;
                    let data = fs
                        .read(e.ino, 0, size as usize)
                        .map_err(|e| e.to_string())?;
                    if let Some(i) = (0..data.len())
                        .find(|&i| data[i] != 0 && data[i] != byte_of(e.ino.0, i as u64))
                    {
                        return Err(format!(
                            "inode {} byte {i} is {} which it never wrote",
                            e.ino.0, data[i]
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    // Mounting freed what the crash left on the orphan list.
    if fs.superblock().last_orphan != 0 {
        return Err(format!(
            "orphan list still names inode {} after mount",
            fs.superblock().last_orphan
        ));
    }
    Ok(())
}

struct Verdict {
    images: usize,
    corrupt: usize,
}

fn judge_all(mode: Consistency, seeds: std::ops::Range<u64>, strict: bool) -> Verdict {
    let tmp = stitch_testkit::scratch();
    let base = stitch_testkit::fresh_image(16 << 20, None);
    let path = tmp.path().join("crash.img");
    let mut v = Verdict {
        images: 0,
        corrupt: 0,
    };
    for seed in seeds {
        let rec = record(base.clone(), mode, seed);
        let from = stitch_blockdev::record::CrashPoint(0);
        common::each_crash_image(&rec, from, 6, seed, |state, image| {
            std::fs::write(&path, &image).unwrap();
            let report = stitch_fsck::check(&path, &Default::default(), &mut |_, _, _| {}).unwrap();
            let e2 = stitch_testkit::e2fsck(&path, &["-fn"]);
            let e2_code = e2.code;
            v.images += 1;
            let corrupt = !report.is_clean() && !report.only_leaks();
            v.corrupt += usize::from(corrupt || !matches!(e2_code, 0 | 4));
            if strict {
                let where_ = format!("seed {seed}, state {state:?}");
                assert!(
                    !corrupt,
                    "{where_}: corruption in soft-updates mode:\n{report}"
                );
                assert!(matches!(e2_code, 0 | 4), "{where_}: e2fsck exit {e2_code}");
                if report.is_clean() {
                    assert_eq!(
                        e2_code, 0,
                        "{where_}: ours clean, e2fsck not:\n{}",
                        e2.stdout
                    );
                }
                files_hold_only_their_own_bytes(image).unwrap_or_else(|e| panic!("{where_}: {e}"));
            }
        });
    }
    v
}

/// Workload seeds: 4 by default; `STITCH_CRASH_SEEDS=N` for a long run.
/// `STITCH_CRASH_SEED=S` runs one seed (to replay a failure).
fn seeds() -> std::ops::Range<u64> {
    let var = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    match var("STITCH_CRASH_SEED") {
        Some(s) => s..s + 1,
        None => 0..var("STITCH_CRASH_SEEDS").unwrap_or(4),
    }
}

#[test]
fn soft_updates_crash_images_show_only_leaks() {
    let v = judge_all(Consistency::SoftUpdates, seeds(), true);
    println!(
        "soft updates: {} crash images checked, none corrupt",
        v.images
    );
    assert!(v.images > 50, "too few crash images: {}", v.images);
}

#[test]
fn async_crash_images_show_corruption() {
    let v = judge_all(Consistency::Async, 0..4, false);
    println!("async: {} crash images, {} corrupt", v.images, v.corrupt);
    assert!(
        v.corrupt > 0,
        "async mode never produced a corrupt image: the checker may be blind"
    );
}
