//! TEMPORARY: memfs's API over one locked `DiskFs`, so the frontend builds
//! and its tests run before stitch-memfs lands. Deleted after the merge.
#![allow(dead_code)]

use parking_lot::Mutex;
use std::sync::Arc;
use stitch_diskfs::{DiskError, DiskFs, FileType, InodeNo, SetAttr, Special};
use stitch_memfs::{
    Attr, DirEntry, Kind, MemError, Options, RenameFlags, Result, SetAttrs, StatFs, Stats,
};
use stitch_patch::PatchCache;

#[derive(Clone)]
pub struct MemFs {
    disk: Arc<Mutex<Option<DiskFs>>>,
}

pub fn mount(disk: DiskFs, _opts: Options) -> Result<MemFs> {
    Ok(MemFs {
        disk: Arc::new(Mutex::new(Some(disk))),
    })
}

fn now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

fn kind(ft: Option<FileType>) -> Kind {
    match ft {
        Some(FileType::Directory) => Kind::Dir,
        Some(FileType::Symlink) => Kind::Symlink,
        Some(FileType::Fifo) => Kind::Fifo,
        Some(FileType::Socket) => Kind::Socket,
        Some(FileType::CharDevice) => Kind::CharDev,
        Some(FileType::BlockDevice) => Kind::BlockDev,
        _ => Kind::File,
    }
}

impl MemFs {
    fn with<T>(&self, f: impl FnOnce(&mut DiskFs) -> stitch_diskfs::Result<T>) -> Result<T> {
        let mut g = self.disk.lock();
        let d = g.as_mut().ok_or(MemError::Io("unmounted".into()))?;
        f(d).map_err(MemError::from)
    }

    pub fn unmount(&self) -> Result<PatchCache> {
        let d = self
            .disk
            .lock()
            .take()
            .ok_or(MemError::Io("unmounted".into()))?;
        d.unmount(now()).map_err(MemError::from)
    }

    pub fn root(&self) -> u64 {
        2
    }

    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        let e = self
            .with(|d| d.lookup(InodeNo(parent as u32), name))?
            .ok_or(MemError::NotFound)?;
        self.getattr(u64::from(e.ino.0))
    }

    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        let a = self.with(|d| d.getattr(InodeNo(ino as u32)))?;
        Ok(Attr {
            ino,
            kind: kind(a.kind),
            perm: a.perm,
            nlink: u32::from(a.nlink),
            uid: a.uid,
            gid: a.gid,
            size: a.size,
            blocks: u64::from(a.sectors),
            atime: a.atime,
            mtime: a.mtime,
            ctime: a.ctime,
            rdev: a.rdev.unwrap_or((0, 0)),
        })
    }

    pub fn setattr(&self, ino: u64, set: SetAttrs) -> Result<Attr> {
        let i = InodeNo(ino as u32);
        self.with(|d| {
            if let Some(size) = set.size {
                d.truncate(i, size, now())?;
            }
            let s = SetAttr {
                perm: set.perm,
                uid: set.uid,
                gid: set.gid,
                atime: set.atime,
                mtime: set.mtime,
                ctime: None,
            };
            d.setattr(i, s, now())
        })?;
        self.getattr(ino)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn mknod(
        &self,
        parent: u64,
        name: &[u8],
        kind: Kind,
        perm: u16,
        rdev: (u32, u32),
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        let p = InodeNo(parent as u32);
        let (major, minor) = rdev;
        let ino = self.with(|d| {
            let special = match kind {
                Kind::File => return d.create(p, name, perm, uid, gid, now()),
                Kind::Fifo => Special::Fifo,
                Kind::Socket => Special::Socket,
                Kind::CharDev => Special::Char { major, minor },
                Kind::BlockDev => Special::Block { major, minor },
                _ => return Err(DiskError::Invalid("mknod kind")),
            };
            d.mknod(p, name, special, perm, uid, gid, now())
        })?;
        self.getattr(u64::from(ino.0 .0))
    }

    pub fn mkdir(&self, parent: u64, name: &[u8], perm: u16, uid: u32, gid: u32) -> Result<Attr> {
        let (ino, _) =
            self.with(|d| d.mkdir(InodeNo(parent as u32), name, perm, uid, gid, now()))?;
        self.getattr(u64::from(ino.0))
    }

    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        let (ino, _) =
            self.with(|d| d.symlink(InodeNo(parent as u32), name, target, uid, gid, now()))?;
        self.getattr(u64::from(ino.0))
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        self.with(|d| d.readlink(InodeNo(ino as u32)))
    }

    pub fn link(&self, ino: u64, newparent: u64, newname: &[u8]) -> Result<Attr> {
        self.with(|d| {
            d.link(
                InodeNo(ino as u32),
                InodeNo(newparent as u32),
                newname,
                now(),
            )
        })?;
        self.getattr(ino)
    }

    pub fn unlink(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.with(|d| d.unlink(InodeNo(parent as u32), name, now()).map(drop))
    }

    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.with(|d| d.rmdir(InodeNo(parent as u32), name, now()).map(drop))
    }

    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        self.with(|d| {
            d.rename(
                InodeNo(parent as u32),
                name,
                InodeNo(newparent as u32),
                newname,
                flags,
                now(),
            )
            .map(drop)
        })
    }

    pub fn open(&self, ino: u64) -> Result<()> {
        self.with(|d| d.open(InodeNo(ino as u32)))
    }

    pub fn release(&self, ino: u64) -> Result<()> {
        self.with(|d| d.release(InodeNo(ino as u32), now()).map(drop))
    }

    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>> {
        self.with(|d| d.read(InodeNo(ino as u32), offset, size as usize))
    }

    pub fn write(&self, ino: u64, offset: u64, data: &[u8], append: bool) -> Result<u32> {
        let i = InodeNo(ino as u32);
        self.with(|d| {
            let off = if append { d.getattr(i)?.size } else { offset };
            d.write(i, off, data, now()).map(|(n, _)| n as u32)
        })
    }

    pub fn readdir(&self, dir: u64) -> Result<Vec<DirEntry>> {
        let es = self.with(|d| d.readdir(InodeNo(dir as u32)))?;
        Ok(es
            .into_iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .map(|e| DirEntry {
                name: e.name,
                ino: u64::from(e.ino.0),
                kind: kind(e.kind),
            })
            .collect())
    }

    pub fn parent(&self, dir: u64) -> Result<u64> {
        let e = self
            .with(|d| d.lookup(InodeNo(dir as u32), b".."))?
            .ok_or(MemError::NotFound)?;
        Ok(u64::from(e.ino.0))
    }

    pub fn fsync(&self, _ino: u64, _datasync: bool) -> Result<()> {
        self.with(|d| d.sync())
    }

    pub fn sync(&self) -> Result<()> {
        self.with(|d| d.sync())
    }

    pub fn statfs(&self) -> Result<StatFs> {
        self.with(|d| {
            let sb = d.superblock();
            Ok(StatFs {
                blocks: u64::from(sb.blocks_count()),
                bfree: u64::from(sb.free_blocks_count_lo),
                bavail: u64::from(sb.free_blocks_count_lo.saturating_sub(sb.r_blocks_count_lo)),
                files: u64::from(sb.inodes_count),
                ffree: u64::from(sb.free_inodes_count),
                bsize: d.block_size() as u32,
                namelen: 255,
            })
        })
    }

    pub fn stats(&self) -> Stats {
        Stats::default()
    }
}
