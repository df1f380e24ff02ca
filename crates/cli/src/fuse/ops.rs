//! The `fuser::Filesystem` methods: each unpacks its request, calls memfs
//! through [`serve`], and packs the answer.

use super::dirs::{self, Listing, Slot};
use super::{
    check_name, diag, entry_attr, file_type, ids, serve, stat_attr, xsync, ErrorReply, Failure,
    OpResult, StitchFuse, MAX_WRITE, TTL,
};
use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags as FuseRenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use stitch_memfs::Refusal;
use stitch_memfs::{
    in_domains, Attr, DropSetId, InodeNo, Kind, MemError, RenameFlags, SetAttrs, SetTime,
    Timestamp, XattrSet, Xattrs,
};

/// Open files keep the kernel's page cache across opens: every change goes
/// through this mount, so the cache is never stale.
const OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_KEEP_CACHE;

/// Capabilities asked of the kernel when it offers them: `ls -l` in one
/// round trip per buffer, lookups in one directory in parallel (memfs is
/// concurrent), symlink targets cached. Not the writeback cache, nor
/// atomic `O_TRUNC` (the kernel truncates through `setattr`).
///
/// And `HANDLE_KILLPRIV_V2`: without it the kernel asks for
/// `security.capability` before every write (FUSE mounts are never
/// `SB_NOSEC`), one more round trip per write: 4 KiB writes ran at
/// 45,000/s with it and 76,000/s without. With it the kernel still strips
/// a file's capabilities itself (it checks once per inode it holds, and a
/// `security.` xattr set through it makes it check again), but leaves the
/// set-ID bits to us: [`DropSetId`] on a write it flags, a truncate and a
/// change of owner.
///
/// And `HAS_IOCTL_DIR`: the control table is sent on directories too
/// (the mount's root is what a program most often holds). The kernel
/// offers it from protocol 7.18 on, and from then on its directory ioctl
/// checks only the protocol version, not our answer; asking records the
/// need where the capabilities are chosen, and `tests/control.rs` sends
/// every call on a directory.
const WANTED: InitFlags = InitFlags::FUSE_DO_READDIRPLUS
    .union(InitFlags::FUSE_READDIRPLUS_AUTO)
    .union(InitFlags::FUSE_PARALLEL_DIROPS)
    .union(InitFlags::FUSE_CACHE_SYMLINKS)
    .union(InitFlags::FUSE_HANDLE_KILLPRIV_V2)
    .union(InitFlags::FUSE_HAS_IOCTL_DIR);

/// The entry of a name that does not exist: node id 0.
const NEGATIVE: FileAttr = FileAttr {
    ino: INodeNo(0),
    size: 0,
    blocks: 0,
    atime: UNIX_EPOCH,
    mtime: UNIX_EPOCH,
    ctime: UNIX_EPOCH,
    crtime: UNIX_EPOCH,
    kind: FileType::RegularFile,
    perm: 0,
    nlink: 0,
    uid: 0,
    gid: 0,
    rdev: 0,
    blksize: 0,
    flags: 0,
};

fn ok(reply: ReplyEmpty, _: ()) {
    reply.ok();
}

/// A time `setattr` sets: memfs's clock for `UTIME_NOW` (the same reading
/// as the change time), else the time sent, which memfs stores as ext2
/// holds it (clamped to its range, as the kernel's own ext2 would).
fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::Now => SetTime::Now,
        TimeOrNow::SpecificTime(t) => SetTime::At(sent_time(t)),
    }
}

/// The `timespec` the kernel sent, from the `SystemTime` fuser 0.18 (the
/// version Cargo.lock pins) made of it: for seconds below zero fuser
/// subtracts the nanoseconds rather than adding them (`UNIX_EPOCH -
/// Duration::new(-secs, nsec)`), so such a time is taken apart the same
/// way instead of normalized. `mount.rs` sets 1969-12-31 23:59:58.5
/// through a mount and reads it back, which catches a fuser that changes.
fn sent_time(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(_) => Timestamp::from_system_time(t),
        Err(before) => {
            let d = before.duration();
            let secs = i64::try_from(d.as_secs()).map_or(i64::MIN, |s| -s);
            Timestamp::new(secs, d.subsec_nanos())
        }
    }
}

/// The kind `mknod`'s mode asks for.
fn node_kind(mode: u32) -> OpResult<Kind> {
    Ok(match mode & libc::S_IFMT {
        0 | libc::S_IFREG => Kind::File,
        libc::S_IFIFO => Kind::Fifo,
        libc::S_IFSOCK => Kind::Socket,
        libc::S_IFCHR => Kind::CharDev,
        libc::S_IFBLK => Kind::BlockDev,
        libc::S_IFDIR => return Err(Errno::EPERM.into()),
        _ => return Err(Errno::EINVAL.into()),
    })
}

fn perm(mode: u32) -> u16 {
    (mode & 0o7777) as u16
}

impl StitchFuse {
    /// Answers with an entry the kernel will hold (`fresh`: a new inode).
    fn entry(&self, reply: ReplyEntry, a: Attr, fresh: bool) {
        let g = self.hold(ids::node_of(a.ino), a.kind == Kind::Dir, fresh);
        reply.entry(&self.ttl(a.ino), &entry_attr(&a), Generation(g));
    }

    /// One more lookup of `node` for the kernel to hold (`nodes.rs`);
    /// returns the generation to send. When the kernel opens files
    /// without asking, the first pins a file (not a directory: memfs
    /// keeps no removed directory for its handles) with a memfs open.
    fn hold(&self, node: INodeNo, dir: bool, fresh: bool) -> u64 {
        let pin =
            || self.no_open && !dir && ids::ino_of(node).is_ok_and(|i| self.fs.open(i).is_ok());
        self.nodes.hold(node.0, fresh, pin)
    }

    /// The kernel dropped `n` lookups of `node`; after the last, a pinned
    /// file's memfs open goes (and with it an unlinked file).
    fn let_go(&self, node: INodeNo, n: u64) {
        self.nodes.forget(node.0, n, || self.unpin(node.0));
    }

    fn unpin(&self, node: u64) {
        if let Ok(i) = ids::ino_of(INodeNo(node)) {
            let _ = self.fs.release(i);
        }
    }

    /// What `name` in `dir` names before a removal, looked up where
    /// [`Self::removed`] needs it (or `also`, for a caller's own use).
    fn named(&self, dir: InodeNo, name: &[u8], also: bool) -> Option<Attr> {
        (self.no_open || also).then(|| self.fs.lookup(dir, name).ok())?
    }

    /// After a removal of what was `named`: a file whose pin outlasts its
    /// last name is freed by the kernel's forget, which `statfs` waits
    /// for (`nodes.rs`).
    fn removed(&self, named: Option<Attr>) {
        let file = named.filter(|a| self.no_open && a.kind != Kind::Dir);
        if let Some(a) = file.filter(|a| self.fs.getattr(a.ino).is_ok_and(|now| now.nlink == 0)) {
            self.nodes.await_forget(ids::node_of(a.ino).0);
        }
    }

    /// The attributes of `name` in `dir`; `.` and `..` too (the kernel
    /// resolves them itself, but an exported or stacked mount may ask).
    fn lookup_name(&self, dir: InodeNo, name: &[u8]) -> OpResult<Attr> {
        Ok(match name {
            b"." => self.fs.getattr(dir)?,
            b".." => self.fs.getattr(self.fs.parent(dir)?)?,
            _ => self.fs.lookup(dir, name)?,
        })
    }

    /// The listing of `dir` with `.` and `..` first.
    fn snapshot(&self, dir: InodeNo) -> OpResult<Vec<Slot>> {
        let entries = self.fs.readdir(dir)?;
        let parent = self.fs.parent(dir)?;
        let mut out = Vec::with_capacity(entries.len() + 2);
        for (name, ino) in [(&b"."[..], dir), (&b".."[..], parent)] {
            out.push(Slot {
                name: name.to_vec(),
                ino,
                kind: Kind::Dir,
            });
        }
        out.extend(entries.into_iter().map(|e| Slot {
            name: e.name,
            ino: e.ino,
            kind: e.kind,
        }));
        Ok(out)
    }

    /// The listing an open directory reads at `offset` (see [`dirs`]).
    fn listing(&self, dir: InodeNo, fh: FileHandle, offset: u64) -> OpResult<Listing> {
        let got = self.dirs.listing(fh.0, offset, || self.snapshot(dir));
        got.unwrap_or(Err(Failure::Errno(Errno::EBADF)))
    }
}

// Every request that reaches memfs or the control table enters through
// `on_inode` or `on_name`, which resolve its caller (`see`) once.
impl StitchFuse {
    /// Serves `req` on one inode (`node` is the FUSE node id).
    fn on_inode<R: ErrorReply, T, E: Into<Failure>>(
        &self,
        req: &Request,
        op: &'static str,
        node: INodeNo,
        reply: R,
        work: impl FnOnce(InodeNo) -> Result<T, E>,
        answer: impl FnOnce(R, T),
    ) {
        let began = Instant::now();
        let caller = self.see(req, op);
        let domains = self.domains(caller.as_ref());
        let group = xsync::group_of(caller.as_ref());
        let ok = match ids::ino_of(node) {
            Ok(ino) => xsync::in_group(group, || {
                in_domains(domains, || {
                    let work = || {
                        self.xsync_observe(req, op, group, caller.is_some(), &[ino])?;
                        let done = work(ino).map_err(Into::into);
                        if xsync::changes(op) {
                            self.xsync_touch(&[ino]);
                        }
                        done
                    };
                    serve(op, ino, reply, work, answer)
                })
            }),
            Err(e) => {
                unknown_node(op, node, reply, e);
                false
            }
        };
        self.served(op, began, ok);
    }

    /// Counts a request served, and tells the spin switch.
    fn served(&self, op: &'static str, began: Instant, ok: bool) {
        let now = Instant::now();
        self.requests.record(op, now - began, ok);
        self.spin.served_at(now);
    }

    /// Serves `req` on `name` in directory `parent`, refusing first a name
    /// ext2 cannot hold.
    #[allow(clippy::too_many_arguments)] // as fuser's own methods
    fn on_name<R: ErrorReply, T, E: Into<Failure>>(
        &self,
        req: &Request,
        op: &'static str,
        parent: INodeNo,
        name: &OsStr,
        reply: R,
        work: impl FnOnce(InodeNo, &[u8]) -> Result<T, E>,
        answer: impl FnOnce(R, T),
    ) {
        let began = Instant::now();
        let caller = self.see(req, op);
        let domains = self.domains(caller.as_ref());
        let group = xsync::group_of(caller.as_ref());
        let dir = match ids::ino_of(parent) {
            Ok(dir) => dir,
            Err(e) => {
                unknown_node(op, parent, reply, e);
                return self.served(op, began, false);
            }
        };
        let name = name.as_bytes();
        let ok = xsync::in_group(group, || {
            in_domains(domains, || {
                serve(
                    op,
                    dir,
                    reply,
                    || {
                        check_name(name)?;
                        // The name's inode before and after: what an
                        // observer would learn of, what a member changed.
                        // Looked up only while external synchrony needs it.
                        let child = |d: InodeNo| self.fs.lookup(d, name).ok().map(|a| a.ino);
                        let watched = group.is_some() || self.xsync_watching();
                        let before = if watched { child(dir) } else { None };
                        let observed: Vec<InodeNo> = std::iter::once(dir).chain(before).collect();
                        self.xsync_observe(req, op, group, caller.is_some(), &observed)?;
                        let done = work(dir, name).map_err(Into::into);
                        if group.is_some() && xsync::changes(op) {
                            let after = child(dir);
                            let touched: Vec<InodeNo> = observed.into_iter().chain(after).collect();
                            self.xsync_touch(&touched);
                        }
                        done
                    },
                    answer,
                )
            })
        });
        self.served(op, began, ok);
    }
}

/// Answers a request on a node id that names no inode (see [`ids`]).
fn unknown_node<R: ErrorReply>(op: &str, node: INodeNo, reply: R, e: Errno) {
    diag::request_error(&format!("{op} (node {}): no inode has it", node.0));
    reply.fail(e);
}

impl StitchFuse {
    fn attr(&self, reply: ReplyAttr, a: Attr) {
        reply.attr(&self.ttl(a.ino), &stat_attr(&a));
    }

    /// An fsync: at once for a member of an external-synchrony group
    /// (its output waits instead), memfs's otherwise.
    fn fsync_or_not(&self, ino: InodeNo, datasync: bool) -> Result<(), MemError> {
        if xsync::current().is_some() {
            self.xsync.sync_returned();
            return Ok(());
        }
        self.fs.fsync(ino, datasync)
    }
}

impl fuser::Filesystem for StitchFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(max) = config.set_max_write(MAX_WRITE) {
            let _ = config.set_max_write(max);
        }
        // What the image's inodes hold: nanoseconds, or whole seconds with
        // 128-byte inodes. The kernel cuts the times it makes to this.
        let step = Duration::from_nanos(self.fs.time_range().granularity().into());
        let _ = config.set_time_granularity(step);
        let granted = WANTED & config.capabilities();
        if config.add_capabilities(granted).is_ok() {
            self.drops_setid = granted.contains(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        }
        Ok(())
    }

    /// A name that is not there is answered as a negative entry (node id
    /// 0) the kernel may cache for `TTL`, as it caches names that are:
    /// every create, link and rename reaches memfs through this kernel,
    /// which turns the cached absence into the new entry itself. A `git
    /// add` looks each object's name up twice before writing it, and each
    /// new fan-out directory three times.
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.on_name(
            req,
            "lookup",
            parent,
            name,
            reply,
            |d, n| match self.lookup_name(d, n) {
                Ok(a) => Ok(Some(a)),
                Err(Failure::Mem(MemError::Refused(Refusal::NotFound))) => Ok(None),
                Err(e) => Err(e),
            },
            |r, a| match a {
                Some(a) => self.entry(r, a, false),
                None => {
                    let ttl = ids::ino_of(parent).map_or(TTL, |d| self.ttl(d));
                    r.entry(&ttl, &NEGATIVE, Generation(0))
                }
            },
        );
    }

    /// The kernel dropped `nlookup` of the entries it was sent for `ino`.
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.let_go(ino, nlookup);
    }

    /// The session is over: the kernel need not send forgets for what it
    /// still holds as its mount goes, so every pin goes here, and a file
    /// that is unlinked and still pinned (its forget never read) is freed
    /// by the unmount's last flush rather than left on the disk's orphans.
    fn destroy(&mut self) {
        self.nodes.drain(|node| self.unpin(node));
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.on_inode(
            req,
            "getattr",
            ino,
            reply,
            |i| self.fs.getattr(i),
            |r, a| self.attr(r, a),
        );
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // The kernel marks a truncate by a caller without CAP_FSETID, and
        // every change of owner, for the set-ID bits to go; fuser does not
        // pass the mark on, so root stands for CAP_FSETID here.
        let privileged = req.uid() == 0;
        let drop_setid = (self.drops_setid
            && ((size.is_some() && !privileged) || uid.is_some() || gid.is_some()))
        .then_some(DropSetId {
            gid: req.gid(),
            privileged,
        });
        let work = |i| -> OpResult<Attr> {
            let set = SetAttrs {
                perm: mode.map(perm),
                uid,
                gid,
                size,
                atime: atime.map(set_time),
                mtime: mtime.map(set_time),
                drop_setid,
            };
            // Nothing memfs keeps (a change time alone, or a handle):
            // answer without touching the inode.
            if set == SetAttrs::default() {
                return Ok(self.fs.getattr(i)?);
            }
            Ok(self.fs.setattr(i, set)?)
        };
        self.on_inode(req, "setattr", ino, reply, work, |r, a| self.attr(r, a));
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.on_inode(
            req,
            "readlink",
            ino,
            reply,
            |i| self.fs.readlink(i),
            |r, t| r.data(&t),
        );
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let work = |d, n: &[u8]| -> OpResult<Attr> {
            let kind = node_kind(mode)?;
            let dev = match kind {
                Kind::CharDev | Kind::BlockDev => {
                    (libc::major(rdev.into()), libc::minor(rdev.into()))
                }
                _ => (0, 0),
            };
            let (uid, gid) = (req.uid(), req.gid());
            Ok(self.fs.mknod(d, n, kind, perm(mode), dev, uid, gid)?)
        };
        self.on_name(req, "mknod", parent, name, reply, work, |r, a| {
            self.entry(r, a, true)
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let (uid, gid) = (req.uid(), req.gid());
        let work = |d, n: &[u8]| self.fs.mkdir(d, n, perm(mode), uid, gid);
        self.on_name(req, "mkdir", parent, name, reply, work, |r, a| {
            self.entry(r, a, true)
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.on_name(
            req,
            "unlink",
            parent,
            name,
            reply,
            |d, n| -> OpResult<()> {
                let named = self.named(d, n, false);
                self.fs.unlink(d, n)?;
                self.removed(named);
                Ok(())
            },
            ok,
        );
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.on_name(
            req,
            "rmdir",
            parent,
            name,
            reply,
            |d, n| self.fs.rmdir(d, n),
            ok,
        );
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (uid, gid) = (req.uid(), req.gid());
        let target = target.as_os_str().as_bytes();
        let work = |d, n: &[u8]| self.fs.symlink(d, n, target, uid, gid);
        self.on_name(req, "symlink", parent, link_name, reply, work, |r, a| {
            self.entry(r, a, true)
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: FuseRenameFlags,
        reply: ReplyEmpty,
    ) {
        let work = |from, name: &[u8]| -> OpResult<()> {
            let to = ids::ino_of(newparent)?;
            let newname = newname.as_bytes();
            check_name(newname)?;
            let known = FuseRenameFlags::RENAME_NOREPLACE | FuseRenameFlags::RENAME_EXCHANGE;
            if !known.contains(flags) {
                return Err(Errno::EINVAL.into());
            }
            let flags = RenameFlags {
                noreplace: flags.contains(FuseRenameFlags::RENAME_NOREPLACE),
                exchange: flags.contains(FuseRenameFlags::RENAME_EXCHANGE),
            };
            // What the new name names: the other side of the move, for
            // external synchrony, and what the move may leave nameless.
            let watched = xsync::current().is_some() || self.xsync_watching();
            let target = self.named(to, newname, watched);
            let other: Vec<InodeNo> = if watched {
                std::iter::once(to)
                    .chain(target.as_ref().map(|a| a.ino))
                    .collect()
            } else {
                Vec::new()
            };
            self.xsync_observe(req, "rename", xsync::current(), true, &other)?;
            self.fs.rename(from, name, to, newname, flags)?;
            self.removed(target.filter(|_| !flags.exchange));
            self.xsync_touch(&other);
            Ok(())
        };
        self.on_name(req, "rename", parent, name, reply, work, ok);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let work = |d, n: &[u8]| -> OpResult<Attr> { Ok(self.fs.link(ids::ino_of(ino)?, d, n)?) };
        self.on_name(req, "link", newparent, newname, reply, work, |r, a| {
            self.entry(r, a, false)
        });
    }

    /// Unless the mount counts opens (`--open-requests on`), `ENOSYS`:
    /// the kernel then opens and closes files without a round trip (no
    /// `open`, no `release`), with `FOPEN_KEEP_CACHE` as we would answer,
    /// and a file is held open in memfs by its lookups instead
    /// (`nodes.rs`).
    fn open(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let work = |i| -> OpResult<()> {
            if self.no_open {
                return Err(Errno::ENOSYS.into());
            }
            Ok(self.fs.open(i)?)
        };
        self.on_inode(req, "open", ino, reply, work, |r, ()| {
            r.opened(FileHandle(0), OPEN_FLAGS)
        });
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let work = |i| self.fs.read(i, offset, size);
        self.on_inode(req, "read", ino, reply, work, |r, d| r.data(&d));
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // The file's current flags (fcntl may have changed them since open).
        let append = flags.0 & libc::O_APPEND != 0;
        // Flagged by the kernel for a writer without CAP_FSETID.
        let drop_setid = (self.drops_setid
            && write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID))
        .then_some(DropSetId {
            gid: req.gid(),
            privileged: false,
        });
        let work = |i| self.fs.write_as(i, offset, data, append, drop_setid);
        self.on_inode(req, "write", ino, reply, work, |r, n| r.written(n));
    }

    /// Sent at `close`, with nothing to do: there is no kernel writeback
    /// cache, so every write already reached memfs and its errors were
    /// answered, and durability is fsync's job. `ENOSYS` tells the kernel
    /// so once; it then stops sending FLUSH and `close` returns 0 without a
    /// round trip (one of smallfile's seven requests per file).
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Without opens no `create` is served, so no `release` is sent
        // (none can reach here but from a kernel that breaks that).
        let work = |i| -> OpResult<()> {
            if self.no_open {
                return Ok(());
            }
            Ok(self.fs.release(i)?)
        };
        self.on_inode(req, "release", ino, reply, work, ok);
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.on_inode(
            req,
            "fsync",
            ino,
            reply,
            |i| self.fsync_or_not(i, datasync),
            ok,
        );
    }

    /// The control table (`control.rs`), on any open file or directory
    /// of the mount.
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        self.on_inode(
            req,
            "ioctl",
            ino,
            reply,
            |_| self.control(req, cmd, in_data),
            |r, out| r.ioctl(0, &out),
        );
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // The listing waits for the first readdir, and so do its errors.
        // The kernel opens only what it knows as a directory.
        let work = |_| Ok::<_, Failure>(self.dirs.open());
        self.on_inode(req, "opendir", ino, reply, work, |r, fh| {
            r.opened(FileHandle(fh), FopenFlags::empty())
        });
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.on_inode(
            req,
            "readdir",
            ino,
            reply,
            |dir| self.listing(dir, fh, offset),
            |mut r, listing| {
                for (next, s) in dirs::after(&listing, offset) {
                    let name = OsStr::from_bytes(&s.name);
                    if r.add(ids::shown_ino(s.ino), next, file_type(s.kind), name) {
                        break;
                    }
                }
                r.ok();
            },
        );
    }

    /// As `readdir`, with each entry's attributes so that `ls -l` needs no
    /// lookups. The attributes are those of the name now: a name removed
    /// since `opendir` is left out (so the kernel caches no stale name),
    /// one replaced shows its new inode. The kernel links no `.` or `..`.
    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let answer = |mut r: ReplyDirectoryPlus, (dir, listing): (InodeNo, Listing)| {
            for (next, s) in dirs::after(&listing, offset) {
                let attr = match s.name.as_slice() {
                    b"." | b".." => self.fs.getattr(s.ino).map(|a| stat_attr(&a)),
                    name => self.fs.lookup(dir, name).map(|a| entry_attr(&a)),
                };
                let Ok(attr) = attr else { continue };
                let name = OsStr::from_bytes(&s.name);
                // The kernel holds every entry it is sent but `.` and `..`.
                let counted = !matches!(s.name.as_slice(), b"." | b"..");
                let dir = attr.kind == FileType::Directory;
                let g = if counted {
                    self.hold(attr.ino, dir, false)
                } else {
                    self.nodes.generation(attr.ino.0)
                };
                let ttl = self.ttl(s.ino);
                if r.add(attr.ino, next, name, &ttl, &attr, Generation(g)) {
                    if counted {
                        self.let_go(attr.ino, 1); // not sent
                    }
                    break;
                }
            }
            r.ok();
        };
        let work = |dir| self.listing(dir, fh, offset).map(|l| (dir, l));
        self.on_inode(req, "readdirplus", ino, reply, work, answer);
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.remove(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.on_inode(
            req,
            "fsyncdir",
            ino,
            reply,
            |i| self.fsync_or_not(i, datasync),
            ok,
        );
    }

    /// The room counts every file removed before it was asked for that
    /// nothing holds open: its forget, which frees it, is waited for
    /// (`Nodes::settle`).
    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.on_inode(
            req,
            "statfs",
            ino,
            reply,
            |_| {
                self.nodes.settle();
                self.fs.statfs()
            },
            |r, s| {
                r.statfs(
                    s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize,
                )
            },
        );
    }

    /// The kernel checks permissions itself (`default_permissions`) and
    /// does not ask; should it, every existing inode is accessible.
    fn access(&self, req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        self.on_inode(
            req,
            "access",
            ino,
            reply,
            |i| self.fs.getattr(i).map(drop),
            ok,
        );
    }

    /// Unless the mount counts opens, `ENOSYS`: the kernel then makes
    /// every new file with `mknod` and opens it as any other, without a
    /// round trip. A `create` opens the file in the kernel's eyes, so a
    /// `release` would follow every one; `mknod` needs none.
    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let (uid, gid) = (req.uid(), req.gid());
        let work = |d, n: &[u8]| -> OpResult<Attr> {
            if self.no_open {
                return Err(Errno::ENOSYS.into());
            }
            if node_kind(mode)? != Kind::File {
                return Err(Errno::EINVAL.into());
            }
            let a = self
                .fs
                .mknod(d, n, Kind::File, perm(mode), (0, 0), uid, gid)?;
            self.fs.open(a.ino)?;
            Ok(a)
        };
        self.on_name(req, "create", parent, name, reply, work, |r, a| {
            let g = self.hold(ids::node_of(a.ino), false, true);
            r.created(
                &self.ttl(a.ino),
                &entry_attr(&a),
                Generation(g),
                FileHandle(0),
                OPEN_FLAGS,
            )
        });
    }

    /// ext2 in Linux has no fallocate.
    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EOPNOTSUPP);
    }

    // Extended attributes, as ext2 keeps them: `user.`, `trusted.` and
    // `security.` names, all of a file's in one block. POSIX ACLs stay
    // hidden and cannot be set, as on an ext2 mount without `acl`: the
    // kernel would not enforce them for us. (The kernel checks who may
    // touch which namespace before the request reaches us.)

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let name = name.as_bytes();
        self.on_inode(
            req,
            "setxattr",
            ino,
            reply,
            |i| -> OpResult<()> {
                check_xattr(name, Some(value), self.fs.block_size())?;
                let how = match flags {
                    0 => XattrSet::Either,
                    libc::XATTR_CREATE => XattrSet::Create,
                    libc::XATTR_REPLACE => XattrSet::Replace,
                    _ => return Err(Errno::EINVAL.into()),
                };
                Ok(self.fs.set_xattr(i, name, Some(value), how)?)
            },
            |r, ()| r.ok(),
        );
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let name = name.as_bytes();
        self.on_inode(
            req,
            "getxattr",
            ino,
            reply,
            |i| -> OpResult<Vec<u8>> {
                if is_acl(name) {
                    return Err(Errno::EOPNOTSUPP.into());
                }
                let x = self.fs.xattrs(i)?;
                match x.iter().find(|(n, _)| n.as_slice() == name) {
                    Some((_, v)) => Ok(v.clone()),
                    None => Err(Errno::ENODATA.into()),
                }
            },
            |r, v| sized_reply(r, size, &v),
        );
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let privileged = req.uid() == 0;
        self.on_inode(
            req,
            "listxattr",
            ino,
            reply,
            |i| self.fs.xattrs(i).map(|x| xattr_names(&x, privileged)),
            |r, names| sized_reply(r, size, &names),
        );
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name.as_bytes();
        self.on_inode(
            req,
            "removexattr",
            ino,
            reply,
            |i| -> OpResult<()> {
                check_xattr(name, None, self.fs.block_size())?;
                Ok(self.fs.set_xattr(i, name, None, XattrSet::Either)?)
            },
            |r, ()| r.ok(),
        );
    }
}

/// Refuses what ext2's setxattr refuses before looking at the file: a
/// namespace it does not store (`system.`, ACLs, unknown prefixes:
/// EOPNOTSUPP), a name past 255 bytes after its prefix or a value longer
/// than a block (ERANGE).
fn check_xattr(name: &[u8], value: Option<&[u8]>, block_size: u64) -> OpResult<()> {
    const STORED: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];
    let Some(prefix) = STORED.iter().find(|p| name.starts_with(p)) else {
        return Err(Errno::EOPNOTSUPP.into());
    };
    let rest = name.len() - prefix.len();
    if rest == 0 {
        return Err(Errno::EINVAL.into());
    }
    if rest > 255 || value.is_some_and(|v| v.len() as u64 > block_size) {
        return Err(Errno::ERANGE.into());
    }
    Ok(())
}

/// Is `name` a POSIX ACL (`system.posix_acl_access` or `_default`)?
fn is_acl(name: &[u8]) -> bool {
    name.starts_with(b"system.posix_acl_")
}

/// The names `listxattr` shows, each ended by a NUL: not ACLs (hidden,
/// see above), and `trusted.` names only to root (as ext2 shows them only
/// to CAP_SYS_ADMIN).
fn xattr_names(x: &Xattrs, privileged: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, _) in x {
        if is_acl(n) || (!privileged && n.starts_with(b"trusted.")) {
            continue;
        }
        out.extend_from_slice(n);
        out.push(0);
    }
    out
}

/// Answers an xattr request the way the kernel asks: size 0 wants the
/// length; a buffer too small for the bytes is ERANGE.
fn sized_reply(r: ReplyXattr, size: u32, bytes: &[u8]) {
    if size == 0 {
        r.size(bytes.len() as u32)
    } else if bytes.len() > size as usize {
        r.error(Errno::ERANGE)
    } else {
        r.data(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_ext2_stores_can_be_set() {
        let errno = |r: OpResult<()>| r.map_err(|f| f.errno());
        assert_eq!(errno(check_xattr(b"user.k", Some(b"v"), 4096)), Ok(()));
        assert_eq!(errno(check_xattr(b"security.selinux", None, 4096)), Ok(()));
        for bad in [
            &b"system.posix_acl_access"[..],
            b"system.x",
            b"other.k",
            b"user",
        ] {
            assert_eq!(
                errno(check_xattr(bad, None, 4096)),
                Err(Errno::EOPNOTSUPP),
                "{bad:?}"
            );
        }
        assert_eq!(errno(check_xattr(b"user.", None, 4096)), Err(Errno::EINVAL));
        let long = [b"user.".to_vec(), vec![b'n'; 256]].concat();
        assert_eq!(errno(check_xattr(&long, None, 4096)), Err(Errno::ERANGE));
        assert_eq!(
            errno(check_xattr(b"user.k", Some(&[0; 4097]), 4096)),
            Err(Errno::ERANGE)
        );
    }

    #[test]
    fn xattr_lists_hide_acls_and_show_trusted_names_to_root() {
        let x: Xattrs = vec![
            (b"user.a".to_vec(), b"1".to_vec()),
            (b"system.posix_acl_access".to_vec(), vec![2, 0, 0, 0]),
            (b"trusted.t".to_vec(), vec![]),
            (b"security.selinux".to_vec(), b"l".to_vec()),
        ];
        assert_eq!(xattr_names(&x, false), b"user.a\0security.selinux\0");
        assert_eq!(
            xattr_names(&x, true),
            b"user.a\0trusted.t\0security.selinux\0"
        );
        assert!(is_acl(b"system.posix_acl_default") && !is_acl(b"system.data"));
    }

    #[test]
    fn mknod_modes_map_to_kinds() {
        assert_eq!(node_kind(libc::S_IFREG | 0o644).unwrap(), Kind::File);
        assert_eq!(node_kind(0o644).unwrap(), Kind::File);
        assert_eq!(node_kind(libc::S_IFIFO | 0o600).unwrap(), Kind::Fifo);
        assert_eq!(node_kind(libc::S_IFSOCK).unwrap(), Kind::Socket);
        assert_eq!(node_kind(libc::S_IFCHR).unwrap(), Kind::CharDev);
        assert_eq!(node_kind(libc::S_IFBLK).unwrap(), Kind::BlockDev);
        assert_eq!(node_kind(libc::S_IFDIR).unwrap_err().errno(), Errno::EPERM);
        assert_eq!(perm(libc::S_IFREG | 0o4755), 0o4755);
    }

    /// Every time the kernel may send comes back as sent (memfs clamps
    /// later, to what the image holds): what fuser 0.18 makes of a raw
    /// `(secs, nsec)` is undone, before the epoch too.
    #[test]
    fn times_sent_are_taken_as_the_kernel_sent_them() {
        // fuser 0.18's `system_time_from_time`.
        let fuser = |secs: i64, nsec: u32| {
            let d = Duration::new(secs.unsigned_abs(), nsec);
            if secs >= 0 {
                UNIX_EPOCH + d
            } else {
                UNIX_EPOCH - d
            }
        };
        for (secs, nsec) in [
            (1_700_000_000, 5),
            (1 << 31, 0),
            ((1 << 32) + 5, 999_999_999),
            (-1, 0),
            (-2, 500_000_000),
            (-(1 << 31), 1),
            (1 << 40, 7),
        ] {
            let got = set_time(TimeOrNow::SpecificTime(fuser(secs, nsec)));
            assert_eq!(
                got,
                SetTime::At(Timestamp::new(secs, nsec)),
                "{secs} {nsec}"
            );
        }
        assert_eq!(set_time(TimeOrNow::Now), SetTime::Now);
    }
}
