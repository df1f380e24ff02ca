//! Model-based tests: seeded random operation sequences applied to diskfs
//! and to the reference model (`stitch-model`, itself checked against the
//! kernel). After every operation both must agree on success or errno and
//! on what reads return; at the end, and again after unmount and remount,
//! the trees must be equal; after unmount `e2fsck -fn` must be clean.
//! Only the operations this slice of diskfs offers are generated.

use stitch_diskfs::Refusal;
use stitch_diskfs::{
    Consistency, DiskError, DiskFs, FileType, InodeNo, RenameFlags, SetAttr, Special,
};
use stitch_model::errno::Errno;
use stitch_model::gen::{ops, GenConfig};
use stitch_model::model::{Limits, Model};
use stitch_model::op::{Op, Outcome};
use stitch_model::tree::Tree;
use stitch_model::types::{Kind, Meta, Name, Owner, Rdev, Special as ModelSpecial};
use stitch_model::view::{self, InodeView};

mod common;
use common::NOW;

fn image() -> Vec<u8> {
    stitch_testkit::fresh_image(64 << 20, None)
}

fn mount(image: Vec<u8>) -> (std::sync::Arc<stitch_blockdev::MemDevice>, DiskFs) {
    common::mount(image, Consistency::SoftUpdates)
}

fn errno(e: DiskError) -> Errno {
    let raw = match e {
        DiskError::Refused(Refusal::NotFound) => libc::ENOENT,
        DiskError::Refused(Refusal::Exists) => libc::EEXIST,
        DiskError::Refused(Refusal::NotDir) => libc::ENOTDIR,
        DiskError::Refused(Refusal::IsDir) => libc::EISDIR,
        DiskError::Refused(Refusal::NotEmpty) => libc::ENOTEMPTY,
        DiskError::Refused(Refusal::NameTooLong) => libc::ENAMETOOLONG,
        DiskError::Refused(Refusal::Invalid(_)) => libc::EINVAL,
        DiskError::NoSpace(_) => libc::ENOSPC,
        DiskError::Refused(Refusal::TooManyLinks) => libc::EMLINK,
        DiskError::Refused(Refusal::NotPermitted(_)) => libc::EPERM,
        DiskError::Refused(Refusal::TooLarge) => libc::EFBIG,
        other => panic!("diskfs failed: {other}"),
    };
    Errno::from_raw(raw)
}

fn supported(op: &Op) -> bool {
    !matches!(op, Op::Open { .. } | Op::WriteFd { .. } | Op::Close { .. })
}

/// diskfs seen by inode, for the model's path walk and trees.
struct View<'a>(&'a mut DiskFs);

impl InodeView for View<'_> {
    type Ino = InodeNo;

    fn root(&self) -> InodeNo {
        self.0.root()
    }

    fn lookup(&mut self, dir: InodeNo, name: &Name) -> Result<Option<InodeNo>, Errno> {
        let e = self.0.lookup(dir, name.as_bytes()).map_err(errno)?;
        Ok(e.map(|e| e.ino))
    }

    fn meta(&mut self, ino: InodeNo) -> Result<Meta, Errno> {
        let a = self.0.getattr(ino).map_err(errno)?;
        let (major, minor) = self.0.read_inode(ino).map_err(errno)?.device();
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
        let nlink = u32::from(a.nlink) - u32::from(ino == self.0.root());
        Ok(Meta {
            kind,
            perm: u32::from(a.perm),
            uid: a.uid,
            gid: a.gid,
            nlink,
            size: (kind != Kind::Dir).then_some(a.size),
        })
    }

    fn readlink(&mut self, ino: InodeNo) -> Result<Vec<u8>, Errno> {
        self.0.readlink(ino).map_err(errno)
    }

    fn contents(&mut self, ino: InodeNo, size: u64) -> Result<Vec<u8>, Errno> {
        self.0.read(ino, 0, size as usize).map_err(errno)
    }

    fn mtime(&mut self, ino: InodeNo) -> Result<stitch_model::Time, Errno> {
        let t = self.0.getattr(ino).map_err(errno)?.mtime;
        Ok(stitch_model::Time {
            secs: t.secs(),
            nsec: t.nsec(),
        })
    }

    fn entries(&mut self, dir: InodeNo) -> Result<Vec<(Name, InodeNo)>, Errno> {
        let root = dir == self.0.root();
        Ok(self
            .0
            .readdir(dir)
            .map_err(errno)?
            .into_iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .filter(|e| !(root && e.name == b"lost+found"))
            .map(|e| (Name(e.name), e.ino))
            .collect())
    }
}

/// A call's success as the model says it, or its errno.
fn done<T>(r: Result<T, DiskError>) -> Result<Outcome, Errno> {
    r.map(|_| Outcome::Done).map_err(errno)
}

fn apply(fs: &mut DiskFs, op: &Op) -> Result<Outcome, Errno> {
    match op {
        Op::Create { path, perm } => {
            let (dir, name) = view::resolve_parent(&mut View(fs), path)?;
            done(fs.create(dir, name, *perm as u16, 0, 0, NOW))
        }
        Op::Mkdir { path, perm } => {
            let (dir, name) = view::resolve_parent(&mut View(fs), path)?;
            done(fs.mkdir(dir, name, *perm as u16, 0, 0, NOW))
        }
        Op::Unlink { path } => {
            let (dir, name) = view::resolve_parent(&mut View(fs), path)?;
            done(fs.unlink(dir, name, NOW))
        }
        Op::Rmdir { path } => {
            let (dir, name) = view::resolve_parent(&mut View(fs), path)?;
            done(fs.rmdir(dir, name, NOW))
        }
        Op::Write { path, offset, data } => {
            let ino = view::resolve_data(&mut View(fs), path)?;
            done(fs.write(ino, *offset, data, NOW))
        }
        Op::Read { path, offset, len } => {
            let ino = view::resolve_data(&mut View(fs), path)?;
            fs.read(ino, *offset, *len)
                .map(Outcome::Data)
                .map_err(errno)
        }
        Op::Readdir { path } => view::readdir(&mut View(fs), path),
        Op::Stat { path } => view::stat(&mut View(fs), path),
        Op::Link { from, to } => {
            let ino = view::resolve(&mut View(fs), from)?;
            let (dir, name) = view::resolve_parent(&mut View(fs), to)?;
            done(fs.link(ino, dir, name, NOW))
        }
        Op::Symlink { path, target } => {
            if target.is_empty() {
                return Err(Errno::Enoent);
            }
            if target.len() > 4095 {
                return Err(Errno::Enametoolong);
            }
            let (dir, name) = view::resolve_parent(&mut View(fs), path)?;
            done(fs.symlink(dir, name, target, 0, 0, NOW))
        }
        Op::Mknod { path, kind, perm } => {
            let (dir, name) = view::resolve_parent(&mut View(fs), path)?;
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
            done(fs.mknod(
                dir,
                name,
                special,
                *perm as u16,
                stitch_diskfs::Owner::default(),
                NOW,
            ))
        }
        Op::Rename { from, to, flags } => {
            if flags.noreplace && flags.exchange {
                return Err(Errno::Einval);
            }
            let (sp, sn) = view::resolve_parent(&mut View(fs), from)?;
            let (dp, dn) = view::resolve_parent(&mut View(fs), to)?;
            let f = RenameFlags {
                noreplace: flags.noreplace,
                exchange: flags.exchange,
            };
            done(fs.rename(sp, sn, dp, dn, f, NOW))
        }
        Op::Truncate { path, size } => {
            let ino = view::resolve_data(&mut View(fs), path)?;
            done(fs.truncate(ino, *size, NOW))
        }
        Op::Chmod { path, perm } => {
            let ino = view::resolve_follow(&mut View(fs), path)?;
            let set = SetAttr {
                perm: Some(*perm as u16),
                ..SetAttr::default()
            };
            done(fs.setattr(ino, set, NOW))
        }
        Op::Chown { path, uid, gid } => {
            let ino = view::resolve(&mut View(fs), path)?;
            let a = fs.getattr(ino).map_err(errno)?;
            let dir = a.kind == Some(FileType::Directory);
            let perm = view::perm_after_chown(u32::from(a.perm), dir);
            let set = SetAttr {
                perm: Some(perm as u16),
                uid: Some(*uid),
                gid: Some(*gid),
                ..SetAttr::default()
            };
            done(fs.setattr(ino, set, NOW))
        }
        Op::SetTimes { path, atime, mtime } => {
            let ino = view::resolve(&mut View(fs), path)?;
            let disk_time = |t: &stitch_model::Time| stitch_diskfs::Timestamp::new(t.secs, t.nsec);
            let set = SetAttr {
                atime: Some(disk_time(atime)),
                mtime: Some(disk_time(mtime)),
                ..SetAttr::default()
            };
            done(fs.setattr(ino, set, NOW))
        }
        _ => unreachable!("filtered out"),
    }
}

/// The whole tree as diskfs holds it, in the model's terms.
fn tree(fs: &mut DiskFs) -> Tree {
    view::tree(&mut View(fs)).unwrap()
}

fn run(seed: u64, n: usize) {
    let tmp = stitch_testkit::scratch();
    let (dev, mut fs) = mount(image());
    let mut model = Model::new(0o755, Owner { uid: 0, gid: 0 }, Limits::default());
    model.set_now(stitch_model::Time::from_secs(NOW.secs()));
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
        let got = apply(&mut fs, op);
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
    let e2 = stitch_testkit::e2fsck(&path, &["-fn"]);
    assert_eq!(e2.code, 0, "seed {seed}: {}", e2.stdout);
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
    model.set_now(stitch_model::Time::from_secs(NOW.secs()));
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
        let tmp = stitch_testkit::scratch();
        let (dev, mut fs) = mount(image());
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
        let tmp = stitch_testkit::scratch();
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
