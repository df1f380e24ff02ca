//! Model-based tests: seeded random operation sequences applied to diskfs
//! and to the reference model (`stitch-model`, itself checked against the
//! kernel). After every operation both must agree on success or errno and
//! on what reads return; at the end, and again after unmount and remount,
//! the trees must be equal; after unmount `e2fsck -fn` must be clean.
//! Only the operations this slice of diskfs offers are generated.

use std::collections::BTreeMap;
use stitch_diskfs::{Consistency, DiskError, DiskFs, FileType, InodeNo};
use stitch_model::errno::Errno;
use stitch_model::gen::{ops, GenConfig};
use stitch_model::model::{Limits, Model};
use stitch_model::op::{Op, Outcome};
use stitch_model::tree::{Content, Node, Tree};
use stitch_model::types::{Kind, Meta, Name, Owner, Path};

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
        DiskError::Invalid(_) => libc::EINVAL,
        DiskError::NoSpace(_) => libc::ENOSPC,
        DiskError::TooManyLinks => libc::EMLINK,
        DiskError::TooLarge => libc::EFBIG,
        other => panic!("diskfs failed: {other}"),
    };
    Errno::from_raw(raw)
}

fn supported(op: &Op) -> bool {
    matches!(
        op,
        Op::Create { .. }
            | Op::Mkdir { .. }
            | Op::Unlink { .. }
            | Op::Rmdir { .. }
            | Op::Write { .. }
            | Op::Read { .. }
            | Op::Readdir { .. }
            | Op::Stat { .. }
    )
}

/// Walks `path` from the root.
fn resolve(fs: &mut DiskFs, path: &[Name]) -> Result<InodeNo, DiskError> {
    let mut at = fs.root();
    for name in path {
        if !fs.read_inode(at)?.is_dir() {
            return Err(DiskError::NotDir);
        }
        at = fs
            .lookup(at, name.as_bytes())?
            .ok_or(DiskError::NotFound)?
            .ino;
    }
    Ok(at)
}

fn parent_of<'a>(fs: &mut DiskFs, path: &'a Path) -> Result<(InodeNo, &'a [u8]), DiskError> {
    let (dirs, last) = path.split_last().ok_or(DiskError::Exists)?;
    let dir = resolve(fs, dirs)?;
    if !fs.read_inode(dir)?.is_dir() {
        return Err(DiskError::NotDir);
    }
    Ok((dir, last.as_bytes()))
}

fn data_inode(fs: &mut DiskFs, path: &Path) -> Result<InodeNo, DiskError> {
    let ino = resolve(fs, &path.0)?;
    if fs.read_inode(ino)?.is_dir() {
        return Err(DiskError::IsDir);
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
            let ino = resolve(fs, &path.0)?;
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
        _ => unreachable!("filtered out"),
    }
}

fn meta(fs: &mut DiskFs, ino: InodeNo) -> Result<Meta, DiskError> {
    let a = fs.getattr(ino)?;
    let dir = a.kind == Some(FileType::Directory);
    // The model has no lost+found: the root's count leaves its link out.
    let nlink = u32::from(a.nlink) - u32::from(ino == fs.root());
    Ok(Meta {
        kind: if dir { Kind::Dir } else { Kind::File },
        perm: u32::from(a.perm),
        uid: a.uid,
        gid: a.gid,
        nlink,
        size: (!dir).then_some(a.size),
    })
}

/// The whole tree as diskfs holds it, in the model's terms.
fn tree(fs: &mut DiskFs) -> Tree {
    let mut nodes = BTreeMap::new();
    let mut stack = vec![(Vec::new(), fs.root())];
    while let Some((path, ino)) = stack.pop() {
        let m = meta(fs, ino).unwrap();
        let content = match m.kind {
            Kind::File => Content::Bytes(fs.read(ino, 0, m.size.unwrap() as usize).unwrap()),
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
    Tree { nodes }
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
