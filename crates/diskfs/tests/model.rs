//! Model-based tests: seeded random operation sequences applied to diskfs
//! and to the reference model (`stitch-model`, itself checked against the
//! kernel). After every operation both must agree on success or errno and
//! on what reads return; at the end, and again after unmount and remount,
//! the trees must be equal; after unmount `e2fsck -fn` must be clean.
//! Only the operations this slice of diskfs offers are generated.

use std::collections::BTreeMap;
use stitch_diskfs::{
    Consistency, DiskError, DiskFs, FileType, InodeNo, RenameFlags, SetAttr, Special,
};
use stitch_model::errno::Errno;
use stitch_model::gen::{ops, GenConfig};
use stitch_model::model::{Limits, Model};
use stitch_model::op::{Op, Outcome};
use stitch_model::tree::{Content, Node, Tree};
use stitch_model::types::{Kind, Meta, Name, Owner, Path, Rdev, Special as ModelSpecial};

mod common;
use common::NOW;

fn image(dir: &std::path::Path) -> Vec<u8> {
    common::fresh_image(dir, 64 << 20)
}

fn mount(image: Vec<u8>) -> (std::sync::Arc<stitch_blockdev::MemDevice>, DiskFs) {
    common::mount(image, Consistency::SoftUpdates)
}

fn errno(e: &DiskError) -> Errno {
    let raw = match e {
        DiskError::NotFound => libc::ENOENT,
        DiskError::Exists => libc::EEXIST,
        DiskError::NotDir => libc::ENOTDIR,
        DiskError::IsDir => libc::EISDIR,
        DiskError::NotEmpty => libc::ENOTEMPTY,
        DiskError::NameTooLong => libc::ENAMETOOLONG,
        DiskError::Invalid("ELOOP") => libc::ELOOP,
        DiskError::NotPermitted("ENXIO") => libc::ENXIO,
        DiskError::Invalid(_) => libc::EINVAL,
        DiskError::NoSpace(_) => libc::ENOSPC,
        DiskError::TooManyLinks => libc::EMLINK,
        DiskError::NotPermitted(_) => libc::EPERM,
        DiskError::TooLarge => libc::EFBIG,
        other => panic!("diskfs failed: {other}"),
    };
    Errno::from_raw(raw)
}

fn supported(op: &Op) -> bool {
    !matches!(op, Op::Open { .. } | Op::WriteFd { .. } | Op::Close { .. })
        && matches!(
            op,
            Op::Link { .. }
                | Op::Rename { .. }
                | Op::Symlink { .. }
                | Op::Mknod { .. }
                | Op::Truncate { .. }
                | Op::Chmod { .. }
                | Op::Chown { .. }
                | Op::SetTimes { .. }
                | Op::Create { .. }
                | Op::Mkdir { .. }
                | Op::Unlink { .. }
                | Op::Rmdir { .. }
                | Op::Write { .. }
                | Op::Read { .. }
                | Op::Readdir { .. }
                | Op::Stat { .. }
        )
}

/// The error of following a symlink, which always dangles here (the
/// generator's targets start with `~`, which no name does): the lookup of
/// the target's first component fails.
fn dangling(fs: &mut DiskFs, ino: InodeNo) -> DiskError {
    let target = fs.readlink(ino).unwrap();
    match target.split(|b| *b == b'/').find(|c| !c.is_empty()) {
        Some(c) if c.len() > 255 => DiskError::NameTooLong,
        _ => DiskError::NotFound,
    }
}

fn kind_of(fs: &mut DiskFs, ino: InodeNo) -> Option<FileType> {
    fs.read_inode(ino).unwrap().file_type()
}

/// Walks the directories of `parts` from the root, as the model does.
fn resolve_dirs(fs: &mut DiskFs, parts: &[Name]) -> Result<InodeNo, DiskError> {
    let mut at = fs.root();
    for name in parts {
        let ino = fs
            .lookup(at, name.as_bytes())?
            .ok_or(DiskError::NotFound)?
            .ino;
        at = match kind_of(fs, ino) {
            Some(FileType::Directory) => ino,
            Some(FileType::Symlink) => return Err(dangling(fs, ino)),
            _ => return Err(DiskError::NotDir),
        };
    }
    Ok(at)
}

/// The inode `path` names, without following a final symlink.
fn resolve(fs: &mut DiskFs, path: &[Name]) -> Result<InodeNo, DiskError> {
    match path.split_last() {
        None => Ok(fs.root()),
        Some((name, dirs)) => {
            let dir = resolve_dirs(fs, dirs)?;
            Ok(fs
                .lookup(dir, name.as_bytes())?
                .ok_or(DiskError::NotFound)?
                .ino)
        }
    }
}

fn parent_of<'a>(fs: &mut DiskFs, path: &'a Path) -> Result<(InodeNo, &'a [u8]), DiskError> {
    let (dirs, last) = path.split_last().ok_or(DiskError::Exists)?;
    Ok((resolve_dirs(fs, dirs)?, last.as_bytes()))
}

/// The inode of a data op: a regular file, else the model's errors.
fn data_inode(fs: &mut DiskFs, path: &Path) -> Result<InodeNo, DiskError> {
    let ino = resolve(fs, &path.0)?;
    match kind_of(fs, ino) {
        Some(FileType::Regular) => Ok(ino),
        Some(FileType::Directory) => Err(DiskError::IsDir),
        Some(FileType::Symlink) => Err(DiskError::Invalid("ELOOP")),
        _ => Err(DiskError::NotPermitted("ENXIO")),
    }
}

/// `chmod` and `readdir` follow a final symlink, which dangles.
fn resolve_follow(fs: &mut DiskFs, path: &Path) -> Result<InodeNo, DiskError> {
    let ino = resolve(fs, &path.0)?;
    if kind_of(fs, ino) == Some(FileType::Symlink) {
        return Err(dangling(fs, ino));
    }
    Ok(ino)
}

fn apply(fs: &mut DiskFs, op: &Op) -> Result<Outcome, DiskError> {
    match op {
        Op::Create { path, perm } => {
            let (dir, name) = parent_of(fs, path)?;
            fs.create(dir, name, *perm as u16, 0, 0, NOW)
                .map(|_| Outcome::Done)
        }
        Op::Mkdir { path, perm } => {
            let (dir, name) = parent_of(fs, path)?;
            fs.mkdir(dir, name, *perm as u16, 0, 0, NOW)
                .map(|_| Outcome::Done)
        }
        Op::Unlink { path } => {
            let (dir, name) = parent_of(fs, path)?;
            fs.unlink(dir, name, NOW).map(|_| Outcome::Done)
        }
        Op::Rmdir { path } => {
            let (dir, name) = parent_of(fs, path)?;
            fs.rmdir(dir, name, NOW).map(|_| Outcome::Done)
        }
        Op::Write { path, offset, data } => {
            let ino = data_inode(fs, path)?;
            fs.write(ino, *offset, data, NOW).map(|_| Outcome::Done)
        }
        Op::Read { path, offset, len } => {
            let ino = data_inode(fs, path)?;
            fs.read(ino, *offset, *len).map(Outcome::Data)
        }
        Op::Readdir { path } => {
            let ino = resolve_follow(fs, path)?;
            let mut names: Vec<Name> = fs
                .readdir(ino)?
                .into_iter()
                .filter(|e| e.name != b"." && e.name != b"..")
                .map(|e| Name(e.name))
                .collect();
            if ino == fs.root() {
                names.retain(|n| n.as_bytes() != b"lost+found");
            }
            names.sort();
            Ok(Outcome::Names(names))
        }
        Op::Stat { path } => {
            let ino = resolve(fs, &path.0)?;
            Ok(Outcome::Stat(meta(fs, ino)?))
        }
        Op::Link { from, to } => {
            let ino = resolve(fs, &from.0)?;
            let (dir, name) = parent_of(fs, to)?;
            fs.link(ino, dir, name, NOW).map(|_| Outcome::Done)
        }
        Op::Symlink { path, target } => {
            if target.is_empty() {
                return Err(DiskError::NotFound);
            }
            if target.len() > 4095 {
                return Err(DiskError::NameTooLong);
            }
            let (dir, name) = parent_of(fs, path)?;
            fs.symlink(dir, name, target, 0, 0, NOW)
                .map(|_| Outcome::Done)
        }
        Op::Mknod { path, kind, perm } => {
            let (dir, name) = parent_of(fs, path)?;
            let special = match kind {
                ModelSpecial::Fifo => Special::Fifo,
                ModelSpecial::Socket => Special::Socket,
                ModelSpecial::Char(r) => Special::Char {
                    major: r.major,
                    minor: r.minor,
                },
                ModelSpecial::Block(r) => Special::Block {
                    major: r.major,
                    minor: r.minor,
                },
            };
            fs.mknod(dir, name, special, *perm as u16, 0, 0, NOW)
                .map(|_| Outcome::Done)
        }
        Op::Rename { from, to, flags } => {
            if flags.noreplace && flags.exchange {
                return Err(DiskError::Invalid("flags"));
            }
            let (sp, sn) = parent_of(fs, from)?;
            let (dp, dn) = parent_of(fs, to)?;
            let f = RenameFlags {
                noreplace: flags.noreplace,
                exchange: flags.exchange,
            };
            fs.rename(sp, sn, dp, dn, f, NOW).map(|_| Outcome::Done)
        }
        Op::Truncate { path, size } => {
            let ino = data_inode(fs, path)?;
            fs.truncate(ino, *size, NOW).map(|_| Outcome::Done)
        }
        Op::Chmod { path, perm } => {
            let ino = resolve_follow(fs, path)?;
            fs.setattr(
                ino,
                SetAttr {
                    perm: Some(*perm as u16),
                    ..SetAttr::default()
                },
                NOW,
            )
            .map(|_| Outcome::Done)
        }
        Op::Chown { path, uid, gid } => {
            let ino = resolve(fs, &path.0)?;
            // Linux clears setuid, and setgid when group-executable, on a
            // chown of a non-directory (the model does the same).
            let a = fs.getattr(ino)?;
            let mut perm = a.perm;
            if a.kind != Some(FileType::Directory) {
                perm &= !0o4000;
                if perm & 0o2010 == 0o2010 {
                    perm &= !0o2000;
                }
            }
            let set = SetAttr {
                perm: Some(perm),
                uid: Some(*uid),
                gid: Some(*gid),
                ..SetAttr::default()
            };
            fs.setattr(ino, set, NOW).map(|_| Outcome::Done)
        }
        Op::SetTimes { path, atime, mtime } => {
            let ino = resolve(fs, &path.0)?;
            fs.setattr(
                ino,
                SetAttr {
                    atime: Some(*atime),
                    mtime: Some(*mtime),
                    ..SetAttr::default()
                },
                NOW,
            )
            .map(|_| Outcome::Done)
        }
        _ => unreachable!("filtered out"),
    }
}

fn meta(fs: &mut DiskFs, ino: InodeNo) -> Result<Meta, DiskError> {
    let a = fs.getattr(ino)?;
    let (major, minor) = fs.read_inode(ino)?.device();
    let rdev = Rdev { major, minor };
    let kind = match a.kind {
        Some(FileType::Directory) => Kind::Dir,
        Some(FileType::Symlink) => Kind::Symlink,
        Some(FileType::Fifo) => Kind::Special(ModelSpecial::Fifo),
        Some(FileType::Socket) => Kind::Special(ModelSpecial::Socket),
        Some(FileType::CharDevice) => Kind::Special(ModelSpecial::Char(rdev)),
        Some(FileType::BlockDevice) => Kind::Special(ModelSpecial::Block(rdev)),
        _ => Kind::File,
    };
    // The model has no lost+found: the root's count leaves its link out.
    let nlink = u32::from(a.nlink) - u32::from(ino == fs.root());
    Ok(Meta {
        kind,
        perm: u32::from(a.perm),
        uid: a.uid,
        gid: a.gid,
        nlink,
        size: (kind != Kind::Dir).then_some(a.size),
    })
}

/// The whole tree as diskfs holds it, in the model's terms.
fn tree(fs: &mut DiskFs) -> Tree {
    let mut nodes = BTreeMap::new();
    let mut paths = Vec::new();
    let mut stack = vec![(Vec::new(), fs.root())];
    while let Some((path, ino)) = stack.pop() {
        let m = meta(fs, ino).unwrap();
        let content = match m.kind {
            Kind::File => Content::Bytes(fs.read(ino, 0, m.size.unwrap() as usize).unwrap()),
            Kind::Symlink => Content::Target(fs.readlink(ino).unwrap()),
            _ => Content::None,
        };
        if m.kind == Kind::Dir {
            for e in fs.readdir(ino).unwrap() {
                if e.name == b"."
                    || e.name == b".."
                    || (ino == fs.root() && e.name == b"lost+found")
                {
                    continue;
                }
                let mut p = path.clone();
                if !p.is_empty() {
                    p.push(b'/');
                }
                p.extend_from_slice(&e.name);
                stack.push((p, e.ino));
            }
        }
        paths.push((path.clone(), ino.0));
        nodes.insert(
            path,
            Node {
                meta: m,
                content,
                same_as: None,
                mtime: None,
            },
        );
    }
    let mut tree = Tree { nodes };
    tree.link_groups(paths.into_iter());
    tree
}

fn run(seed: u64, n: usize) {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (dev, mut fs) = mount(image(tmp.path()));
    let mut model = Model::new(0o755, Owner { uid: 0, gid: 0 }, Limits::default());
    model.set_now(NOW);
    let cfg = GenConfig {
        chown: false,
        max_offset: 1 << 20,
        max_write: 40 << 10,
        ..GenConfig::default()
    };
    for (i, op) in ops(seed, n * 3, &cfg)
        .iter()
        .filter(|op| supported(op))
        .take(n)
        .enumerate()
    {
        let want = model.apply(op);
        let got = apply(&mut fs, op).map_err(|e| errno(&e));
        assert_eq!(got, want, "seed {seed}, op {i}: {op:?}");
    }
    let want = model.snapshot();
    let diff = tree(&mut fs).diff(&want);
    assert!(
        diff.is_empty(),
        "seed {seed}: before unmount:\n{}",
        diff.join("\n")
    );
    fs.unmount(NOW).unwrap();
    let img = dev.snapshot();
    let path = tmp.path().join("after.img");
    std::fs::write(&path, &img).unwrap();
    let e2 = std::process::Command::new("e2fsck")
        .arg("-fn")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        e2.status.code(),
        Some(0),
        "seed {seed}: {}",
        String::from_utf8_lossy(&e2.stdout)
    );
    let ours = stitch_fsck::check(&path, &Default::default(), &mut |_, _, _| {}).unwrap();
    assert!(ours.is_clean(), "seed {seed}: stitchfs fsck:\n{ours}");
    let (_, mut fs) = mount(img);
    let diff = tree(&mut fs).diff(&want);
    assert!(
        diff.is_empty(),
        "seed {seed}: after remount:\n{}",
        diff.join("\n")
    );
}

/// 12 seeds by default; `STITCH_MODEL_SEEDS=N` for a long run.
#[test]
fn random_operations_agree_with_the_model() {
    let seeds = std::env::var("STITCH_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    for seed in 0..seeds {
        run(seed, 250);
    }
}

/// The kernel's view of a mounted tree, in the model's terms: without
/// lost+found (the model has none) and the root's link to it.
fn kernel_tree(mnt: &std::path::Path) -> Tree {
    let mut t = Tree::from_dir(mnt, Default::default()).unwrap();
    t.nodes
        .retain(|k, _| k.as_slice() != b"lost+found" && !k.starts_with(b"lost+found/"));
    if let Some(root) = t.nodes.get_mut(&Vec::new()) {
        root.meta.nlink -= 1;
    }
    t
}

/// The model after `ops`, and those ops, for one seed.
fn model_after(seed: u64, n: usize) -> (Model, Vec<Op>) {
    let mut model = Model::new(0o755, Owner { uid: 0, gid: 0 }, Limits::default());
    model.set_now(NOW);
    let cfg = GenConfig {
        max_offset: 1 << 20,
        max_write: 40 << 10,
        ..GenConfig::default()
    };
    let ops: Vec<Op> = ops(seed, n * 3, &cfg)
        .into_iter()
        .filter(supported)
        .take(n)
        .collect();
    for op in &ops {
        let _ = model.apply(op);
    }
    (model, ops)
}

/// The Linux ext2 driver mounts an image diskfs wrote and sees exactly the
/// model's tree, contents and attributes.
#[test]
fn the_kernel_reads_what_diskfs_wrote() {
    if !stitch_testkit::is_root() {
        println!("SKIPPED the_kernel_reads_what_diskfs_wrote: loop mounts need root");
        return;
    }
    for seed in 100..104 {
        let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let (dev, mut fs) = mount(image(tmp.path()));
        let (model, ops) = model_after(seed, 250);
        for op in &ops {
            let _ = apply(&mut fs, op);
        }
        fs.unmount(NOW).unwrap();
        let img = tmp.path().join("ours.img");
        std::fs::write(&img, dev.snapshot()).unwrap();
        let mnt = tmp.path().join("mnt");
        let m = stitch_testkit::LoopMount::new(&img, &mnt, "ro")
            .unwrap_or_else(|e| panic!("mount: {e}"));
        let diff = kernel_tree(&mnt).diff(&model.snapshot());
        m.unmount();
        assert!(
            diff.is_empty(),
            "seed {seed}: the kernel sees:\n{}",
            diff.join("\n")
        );
    }
}

/// diskfs reads an image made by mke2fs and filled by the kernel.
#[test]
fn diskfs_reads_what_the_kernel_wrote() {
    if !stitch_testkit::is_root() {
        println!("SKIPPED diskfs_reads_what_the_kernel_wrote: loop mounts need root");
        return;
    }
    for seed in 200..204 {
        let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let img = tmp.path().join("kernel.img");
        let out = std::process::Command::new("mke2fs")
            .args(["-q", "-F", "-t", "ext2", "-b", "4096", "-I", "256"])
            .arg(&img)
            .arg("64M")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mke2fs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (model, ops) = model_after(seed, 250);
        let mnt = tmp.path().join("mnt");
        let m =
            stitch_testkit::LoopMount::new(&img, &mnt, "").unwrap_or_else(|e| panic!("mount: {e}"));
        let mut real = stitch_model::real::RealFs::new(&mnt);
        for op in &ops {
            let _ = real.apply(op);
        }
        m.unmount();
        let (_, mut fs) = mount(std::fs::read(&img).unwrap());
        let diff = tree(&mut fs).diff(&model.snapshot());
        assert!(
            diff.is_empty(),
            "seed {seed}: diskfs reads:\n{}",
            diff.join("\n")
        );
    }
}
