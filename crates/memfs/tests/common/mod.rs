//! Helpers of the memfs tests: images in memory, mounts, remounts, image
//! checks, and memfs seen by inode in the model's terms ([`View`]).
#![allow(dead_code)]

use std::sync::Arc;
use stitch_blockdev::MemDevice;
use stitch_diskfs::Consistency;
use stitch_memfs::Refusal;
use stitch_memfs::{Attr, InodeNo, Kind as MemKind, MemError, MemFs, Options};
use stitch_model::types::{Kind, Meta, Name, Rdev, Special};
use stitch_model::view::{self, InodeView};
use stitch_model::Errno;
#[allow(unused_imports)] // each test binary uses some
pub use stitch_testkit::{e2fsck, e2fsck_image, fresh_image, E2fsck, JournalSize};

/// A time as the model keeps it.
pub fn model_time(t: stitch_memfs::Timestamp) -> stitch_model::Time {
    stitch_model::Time {
        secs: t.secs(),
        nsec: t.nsec(),
    }
}

/// A model time as memfs keeps it.
pub fn mem_time(t: stitch_model::Time) -> stitch_memfs::Timestamp {
    stitch_memfs::Timestamp::new(t.secs, t.nsec)
}

pub const NOW: stitch_memfs::Timestamp = stitch_memfs::Timestamp::from_secs(1_700_000_000);

pub fn opts() -> Options {
    Options {
        flush_interval: None,
        fixed_time: Some(NOW),
        ..Options::default()
    }
}

/// [`opts`] with McoreFS's precise fsync (`--order precise`).
pub fn precise() -> Options {
    Options {
        order: stitch_memfs::Order::Precise,
        ..opts()
    }
}

/// memfs over diskfs over a memory device holding `image`.
pub fn mount_on(dev: Arc<MemDevice>, mode: Consistency, opts: Options) -> MemFs {
    MemFs::mount_device(dev, mode, opts).unwrap()
}

/// A fresh 64 MiB ext3 image on a memory device, mounted in `mode` with
/// the tests' options; the device too, for its statistics and snapshots.
pub fn mount_fresh(mode: Consistency) -> (Arc<MemDevice>, MemFs) {
    let dev = device(fresh_image(64 << 20, Some(JournalSize::Default)));
    let fs = mount_on(dev.clone(), mode, opts());
    (dev, fs)
}

pub fn device(image: Vec<u8>) -> Arc<MemDevice> {
    Arc::new(MemDevice::from_image(4096, image).unwrap())
}

pub const MODES: [Consistency; 3] = [
    Consistency::SoftUpdates,
    Consistency::Journal(stitch_diskfs::DataMode::Ordered),
    Consistency::Journal(stitch_diskfs::DataMode::Journal),
];

/// A fresh 32 MiB image for `mode`: ext3 with a journal for the journal modes,
/// plain ext2 for soft updates.
pub fn image_for(mode: Consistency) -> Vec<u8> {
    let journal = matches!(mode, Consistency::Journal(_)).then_some(JournalSize::Default);
    fresh_image(32 << 20, journal)
}

/// The verdicts of e2fsck -fn and of our fsck on `image`: `Err` with both
/// reports unless e2fsck exits 0 and ours finds nothing. `leaks_ok` takes
/// soft updates' leaks (our fsck's `only_leaks`; e2fsck exit 4) as clean,
/// for crash images. An image whose journal needs recovery is replayed by
/// e2fsck itself first (`-E journal_only`), so its recovery, not ours,
/// decides what the log holds; ours checks the image as it would replay it.
pub fn check_image(image: &[u8], leaks_ok: bool) -> Result<(), String> {
    let dir = stitch_testkit::scratch();
    let path = dir.path().join("check.img");
    std::fs::write(&path, image).unwrap();
    let ours = stitch_fsck::check(&path, &Default::default(), &mut |_, _, _| {})
        .map_err(|e| format!("stitch fsck failed: {e}"))?;
    let ours_ok = ours.is_clean() || (leaks_ok && ours.only_leaks());
    let mut replay = String::new();
    if ours.needs_recovery {
        let out = e2fsck(&path, &["-E", "journal_only", "-y"]);
        replay = out.stdout.clone();
        // 0 or 1 (the journal replayed); anything else is a complaint.
        if !matches!(out.code, 0 | 1) {
            return Err(format!(
                "e2fsck's journal replay exit {}:\n{}",
                out.code,
                out.report()
            ));
        }
    }
    let out = e2fsck(&path, &["-fn"]);
    let code = out.code;
    let e2_ok = code == 0 || (leaks_ok && code == 4);
    if ours_ok && e2_ok {
        return Ok(());
    }
    Err(format!(
        "e2fsck exit {code}:\n{replay}{}\nstitch fsck:\n{ours}",
        out.stdout
    ))
}

/// The model's errno of a memfs error.
pub fn errno(e: MemError) -> Errno {
    Errno::from_raw(e.errno())
}

/// memfs seen by inode, for the model's path walk and trees.
pub struct View<'a>(pub &'a MemFs);

/// An attribute record in the model's terms.
pub fn meta_of(fs: &MemFs, a: &Attr) -> Meta {
    let rdev = Rdev {
        major: a.rdev.0,
        minor: a.rdev.1,
    };
    let kind = match a.kind {
        MemKind::File => Kind::File,
        MemKind::Dir => Kind::Dir,
        MemKind::Symlink => Kind::Symlink,
        MemKind::Fifo => Kind::Special(Special::Fifo),
        MemKind::Socket => Kind::Special(Special::Socket),
        MemKind::CharDev => Kind::Special(Special::Char(rdev)),
        MemKind::BlockDev => Kind::Special(Special::Block(rdev)),
    };
    Meta {
        kind,
        perm: u32::from(a.perm),
        uid: a.uid,
        gid: a.gid,
        // The model has no lost+found.
        nlink: a.nlink - u32::from(a.ino == fs.root()),
        size: (kind != Kind::Dir).then_some(a.size),
    }
}

impl InodeView for View<'_> {
    type Ino = InodeNo;

    fn root(&self) -> InodeNo {
        self.0.root()
    }

    fn lookup(&mut self, dir: InodeNo, name: &Name) -> Result<Option<InodeNo>, Errno> {
        match self.0.lookup(dir, name.as_bytes()) {
            Ok(a) => Ok(Some(a.ino)),
            Err(MemError::Refused(Refusal::NotFound)) => Ok(None),
            Err(e) => Err(errno(e)),
        }
    }

    fn meta(&mut self, ino: InodeNo) -> Result<Meta, Errno> {
        let a = self.0.getattr(ino).map_err(errno)?;
        Ok(meta_of(self.0, &a))
    }

    fn readlink(&mut self, ino: InodeNo) -> Result<Vec<u8>, Errno> {
        self.0.readlink(ino).map_err(errno)
    }

    fn contents(&mut self, ino: InodeNo, size: u64) -> Result<Vec<u8>, Errno> {
        let size = u32::try_from(size).expect("test files stay small");
        self.0.read(ino, 0, size).map_err(errno)
    }

    fn mtime(&mut self, ino: InodeNo) -> Result<stitch_model::Time, Errno> {
        Ok(model_time(self.0.getattr(ino).map_err(errno)?.mtime))
    }

    fn entries(&mut self, dir: InodeNo) -> Result<Vec<(Name, InodeNo)>, Errno> {
        let root = dir == self.0.root();
        Ok(self
            .0
            .readdir(dir)
            .map_err(errno)?
            .into_iter()
            .filter(|e| !(root && e.name == b"lost+found"))
            .map(|e| (Name(e.name), e.ino))
            .collect())
    }
}

/// The whole tree memfs shows, in the model's terms, with modification
/// times.
pub fn tree(fs: &MemFs) -> stitch_model::Tree {
    let opts = stitch_model::TreeOptions { mtime: true };
    view::tree_with(&mut View(fs), opts).expect("walk of the whole tree")
}

/// Runs `f` on a thread of its own and waits at most `limit` for it:
/// `None` if it is not done by then (a memfs deadlock fails a test instead
/// of hanging it; the stuck thread is left behind). A panic in `f` goes on
/// in the caller.
pub fn bounded<T: Send + 'static>(
    limit: std::time::Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    let (tx, rx) = channel();
    let h = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            h.join().unwrap();
            Some(v)
        }
        Err(RecvTimeoutError::Disconnected) => match h.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("sent nothing and did not panic"),
        },
        Err(RecvTimeoutError::Timeout) => None,
    }
}

/// A device whose flushes take `delay` before reaching `inner`. A memory
/// device's flush is instant, so another thread rarely writes while one
/// runs; a real disk's cache flush takes 0.1–10 ms, and the disk lock is
/// dropped around it, so there the next commit's writes routinely land
/// while the previous flush is still running. Under a recording device,
/// those writes are logged in flight, uncovered by that flush.
pub struct SlowFlush<D> {
    pub inner: D,
    pub delay: std::time::Duration,
}

impl<D: stitch_blockdev::BlockDevice> stitch_blockdev::BlockDevice for SlowFlush<D> {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }

    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }

    fn read(
        &self,
        block: stitch_blockdev::BlockNo,
        buf: &mut [u8],
    ) -> Result<(), stitch_blockdev::DevError> {
        self.inner.read(block, buf)
    }

    fn write_batch(
        &self,
        writes: &[stitch_blockdev::BlockWrite<'_>],
    ) -> Result<(), stitch_blockdev::DevError> {
        self.inner.write_batch(writes)
    }

    fn flush(&self) -> Result<(), stitch_blockdev::DevError> {
        std::thread::sleep(self.delay);
        self.inner.flush()
    }
}

/// The device under [`recorded_mount`]: every write and flush recorded, on
/// a memory device whose flushes take `delay`.
pub type Recorded = stitch_blockdev::record::RecordingDevice<SlowFlush<MemDevice>>;

/// A fresh 16 MiB ext3 image mounted in `mode` on a recording device whose
/// flushes take `flush_delay`; with `pages`, memfs flushes on its own every
/// 2 ms and holds at most that many file pages. Every flush memfs makes on
/// its own is told to the returned list.
pub fn recorded_mount(
    mode: Consistency,
    flush_delay: std::time::Duration,
    pages: Option<u64>,
) -> (
    Arc<Recorded>,
    MemFs,
    Arc<std::sync::Mutex<Vec<stitch_memfs::FlushCause>>>,
) {
    let image = fresh_image(16 << 20, Some(JournalSize::Default));
    let mem = MemDevice::from_image(4096, image.clone()).unwrap();
    let slow = SlowFlush {
        inner: mem,
        delay: flush_delay,
    };
    let dev = Arc::new(stitch_blockdev::record::RecordingDevice::with_base(slow, image).unwrap());
    let o = match pages {
        Some(pages) => Options {
            flush_interval: Some(std::time::Duration::from_millis(2)),
            memory_limit: pages << 12,
            ..opts()
        },
        None => opts(),
    };
    let fs = MemFs::mount_device(dev.clone(), mode, o).unwrap();
    let causes: Arc<std::sync::Mutex<Vec<stitch_memfs::FlushCause>>> = Arc::default();
    let seen = causes.clone();
    fs.on_own_flush(move |c| seen.lock().unwrap().push(c));
    (dev, fs, causes)
}

/// memfs over a copy of what the device holds now, after journal replay.
pub fn crash_copy(fs: &MemFs, mode: Consistency) -> MemFs {
    mount_on(device(disk_image(fs)), mode, opts())
}

/// What the device holds now, read under the disk lock, so between
/// flushes: the image a crash now would leave.
pub fn disk_image(fs: &MemFs) -> Vec<u8> {
    fs.with_disk(|d| {
        let dev = d.modes().cache().device().clone();
        let mut img = Vec::new();
        let bs = 4096;
        let mut buf = vec![0; bs];
        let blocks = d.layout().blocks_count as u64;
        for b in 0..blocks {
            dev.read(stitch_blockdev::BlockNo(b), &mut buf).unwrap();
            img.extend_from_slice(&buf);
        }
        img
    })
    .unwrap()
}

/// A new file `name` in `dir` holding `data`.
pub fn file(fs: &MemFs, dir: InodeNo, name: &[u8], data: &[u8]) -> InodeNo {
    let f = fs
        .mknod(dir, name, MemKind::File, 0o644, (0, 0), 0, 0)
        .unwrap();
    fs.write(f.ino, 0, data, false).unwrap();
    f.ino
}

/// Whether `dir` holds `name`.
pub fn exists(fs: &MemFs, dir: InodeNo, name: &[u8]) -> bool {
    fs.lookup(dir, name).is_ok()
}
