//! What the checkers and stitchfs say about one crash image ([`Facts`]):
//! stitchfs recovers it (`DiskFs::mount`, which replays the journal) and
//! the tree is read back; `e2fsck -fn` and our fsck judge it, on the
//! recovered image in journal modes (e2fsck -n does not replay) and on the
//! crash image as it stands otherwise.
//!
//! Facts depend only on the image bytes and the mode, so they are cached
//! by a hash of the blocks that differ from the base image: identical
//! images (common across crash states and across workloads, e.g. every
//! mount) are checked once. In journal modes the checkers' verdicts are
//! cached a second time, by the recovered image: many crash images (any
//! subset of an uncommitted transaction's log writes) recover to the
//! same file system. That key leaves out the log blocks of a journal
//! recovery left empty (`s_start` 0): neither checker reads them.

use crate::error::{CheckError, RecoverError};
use crate::run::{journaled, Base, BS, NOW};
use crate::state::{read_tree, Found};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use stitch_blockdev::{BlockDevice, BlockNo, BlockWrite, DevError, Geometry};
use stitch_diskfs::{Consistency, DiskFs};

/// Our fsck's verdict.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub corruptions: usize,
    pub leaks: usize,
    pub text: String,
}

/// What stitchfs and the checkers make of one image.
#[derive(Clone, Debug)]
pub struct Facts {
    /// The tree after recovery.
    pub tree: Result<Found, RecoverError>,
    /// Journal transactions the recovery replayed.
    pub replayed: u32,
    pub fsck: Result<Verdict, CheckError>,
    /// e2fsck's exit code and output.
    pub e2fsck: Result<(i32, String), CheckError>,
    /// Whether the checkers ran on this image (rather than their verdict
    /// on the same recovered file system being reused).
    pub checked: bool,
}

/// Both checkers' verdicts on one image.
type Verdicts = (
    Result<Verdict, CheckError>,
    Result<(i32, String), CheckError>,
);

impl Facts {
    /// The checkers' output, for reports.
    pub fn checkers(&self) -> String {
        let fsck = match &self.fsck {
            Ok(v) => v.text.clone(),
            Err(e) => format!("could not check: {e}\n"),
        };
        let e2 = match &self.e2fsck {
            Ok((c, out)) => format!("exit {c}\n{out}"),
            Err(e) => format!("could not run: {e}\n"),
        };
        format!(
            "journal transactions replayed by stitchfs: {}\n\n== stitchfs fsck ==\n{fsck}\n== e2fsck -fn ==\n{e2}",
            self.replayed
        )
    }
}

impl Facts {
    /// About how many bytes the facts hold (for the cache's budget).
    fn weight(&self) -> usize {
        let tree = self.tree.as_ref().map_or(0, |f| {
            f.state
                .inodes
                .values()
                .map(|i| 96 + i.bytes.len() + i.entries.keys().map(|n| 48 + n.len()).sum::<usize>())
                .sum()
        });
        let fsck = self.fsck.as_ref().map_or(0, |v| v.text.len());
        let e2 = self.e2fsck.as_ref().map_or(0, |e| e.1.len());
        256 + tree + fsck + e2
    }
}

/// Facts shared by every worker of a run, within a memory budget: when
/// it is spent the cache starts over (a long run meets most repeats soon
/// after the first time: the same setup, the same first steps).
pub struct Cache {
    facts: Budgeted<Arc<Facts>>,
    /// Journal modes: the checkers' verdicts by recovered image.
    verdicts: Budgeted<Arc<Verdicts>>,
}

impl Default for Cache {
    fn default() -> Self {
        Cache::with_budget(1 << 30)
    }
}

impl Cache {
    /// A cache holding about `budget` bytes of facts.
    pub fn with_budget(budget: usize) -> Cache {
        Cache {
            facts: Budgeted::new(budget / 4 * 3),
            verdicts: Budgeted::new(budget / 4),
        }
    }
}

/// A map of hashes to values that starts over when the values' weight
/// passes the budget.
struct Budgeted<V> {
    map: Mutex<(HashMap<u128, V>, usize)>,
    budget: usize,
}

impl<V: Clone> Budgeted<V> {
    fn new(budget: usize) -> Self {
        Budgeted {
            map: Mutex::new((HashMap::new(), 0)),
            budget,
        }
    }

    fn get(&self, k: u128) -> Option<V> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .get(&k)
            .cloned()
    }

    fn put(&self, k: u128, v: V, weight: usize) {
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if m.1 + weight > self.budget {
            m.0.clear();
            m.1 = 0;
        }
        if m.0.insert(k, v).is_none() {
            m.1 += weight;
        }
    }
}

fn verdicts_weight(v: &Verdicts) -> usize {
    let fsck = v.0.as_ref().map_or(0, |v| v.text.len());
    let e2 = v.1.as_ref().map_or(0, |e| e.1.len());
    128 + fsck + e2
}

/// The cache key of an image in `mode` over `base`, given by `blocks`:
/// the contents of every block where it may differ from the base.
pub fn key(mode: Consistency, base: &Base, blocks: &[(usize, &[u8])]) -> u128 {
    key_skipping(mode, base, blocks, &[])
}

/// [`key`], leaving out the blocks in `skip` (sorted).
fn key_skipping(mode: Consistency, base: &Base, blocks: &[(usize, &[u8])], skip: &[usize]) -> u128 {
    let mut h1 = DefaultHasher::new();
    let mut h2 = DefaultHasher::new();
    0x5eed_u32.hash(&mut h2);
    for h in [&mut h1, &mut h2] {
        mode.to_string().hash(h);
        base.id.hash(h);
    }
    for &(i, a) in blocks {
        if a != &base.image[i * BS..(i + 1) * BS] && skip.binary_search(&i).is_err() {
            for h in [&mut h1, &mut h2] {
                i.hash(h);
                a.hash(h);
            }
        }
    }
    (u128::from(h1.finish()) << 64) | u128::from(h2.finish())
}

/// The key of a recovered ext3 image for the checkers' verdicts: as
/// [`key`], without the log blocks if the journal is empty (its
/// superblock's `s_start`, big-endian at byte 28, is 0), since then
/// neither checker reads them. With no journal, or one still holding
/// transactions, every block counts.
fn recovered_key(mode: Consistency, base: &Base, blocks: &[(usize, &[u8])]) -> u128 {
    let Some((sb, log)) = &base.journal else {
        return key(mode, base, blocks);
    };
    let jsb = blocks
        .iter()
        .find(|b| b.0 == *sb)
        .map_or(&base.image[sb * BS..(sb + 1) * BS], |b| b.1);
    let empty = jsb[28..32] == [0; 4];
    key_skipping(mode, base, blocks, if empty { log } else { &[] })
}

/// The crash image as a device: the base image with the blocks that
/// differ laid over it (no copy of the whole image per crash state), and
/// recovery's writes kept in the overlay, whose block numbers tell what
/// recovery changed.
struct Overlay {
    base: Arc<[u8]>,
    geometry: Geometry,
    blocks: Mutex<HashMap<usize, Vec<u8>>>,
    written: Mutex<BTreeSet<usize>>,
}

impl Overlay {
    fn new(base: &Base, blocks: &[(usize, &[u8])]) -> Overlay {
        let n = (base.image.len() / BS) as u64;
        Overlay {
            base: base.image.clone(),
            geometry: Geometry::new(BS, n).expect("a whole number of blocks"),
            blocks: Mutex::new(blocks.iter().map(|&(i, d)| (i, d.to_vec())).collect()),
            written: Mutex::new(BTreeSet::new()),
        }
    }
}

impl BlockDevice for Overlay {
    fn block_size(&self) -> usize {
        BS
    }

    fn num_blocks(&self) -> u64 {
        self.geometry.num_blocks()
    }

    fn read(&self, block: BlockNo, buf: &mut [u8]) -> Result<(), DevError> {
        self.geometry.check(block, buf.len())?;
        let i = block.0 as usize;
        match self
            .blocks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&i)
        {
            Some(d) => buf.copy_from_slice(d),
            None => buf.copy_from_slice(&self.base[i * BS..(i + 1) * BS]),
        }
        Ok(())
    }

    fn write_batch(&self, writes: &[BlockWrite<'_>]) -> Result<(), DevError> {
        self.geometry.check_batch(writes)?;
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        for w in writes {
            blocks.insert(w.block.0 as usize, w.data.to_vec());
            written.insert(w.block.0 as usize);
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DevError> {
        Ok(())
    }
}

/// One worker's checker: a scratch image file kept equal to the base but
/// for the blocks the last image changed, so each check writes a few
/// blocks rather than the whole image.
pub struct Checker {
    _dir: tempfile::TempDir,
    path: PathBuf,
    file: std::fs::File,
    base_id: u64,
    dirty: Vec<usize>,
}

impl Checker {
    pub fn new() -> std::io::Result<Checker> {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm).or_else(|_| tempfile::tempdir())?
        } else {
            tempfile::tempdir()?
        };
        let path = dir.path().join("image");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        Ok(Checker {
            _dir: dir,
            path,
            file,
            base_id: u64::MAX,
            dirty: Vec::new(),
        })
    }

    /// Makes the scratch file hold the base with `blocks` (block number
    /// and contents; every block that may differ from the base) over it.
    fn put<'b>(
        &mut self,
        base: &Base,
        blocks: impl Iterator<Item = (usize, &'b [u8])>,
    ) -> std::io::Result<PathBuf> {
        if self.base_id != base.id {
            self.file.set_len(0)?;
            self.file.write_all_at(&base.image, 0)?;
            self.base_id = base.id;
            self.dirty.clear();
        }
        let old = std::mem::take(&mut self.dirty);
        for (i, data) in blocks {
            if data != &base.image[i * BS..(i + 1) * BS] {
                self.file.write_all_at(data, (i * BS) as u64)?;
                self.dirty.push(i);
            }
        }
        self.dirty.sort_unstable();
        for i in old {
            if self.dirty.binary_search(&i).is_err() {
                self.file
                    .write_all_at(&base.image[i * BS..(i + 1) * BS], (i * BS) as u64)?;
            }
        }
        Ok(self.path.clone())
    }

    /// The facts of the image whose blocks that may differ from the base
    /// are `blocks`, from the cache or computed. The flag says whether
    /// they were computed.
    pub fn facts(
        &mut self,
        cache: &Cache,
        mode: Consistency,
        base: &Base,
        blocks: &[(usize, &[u8])],
    ) -> (Arc<Facts>, bool) {
        let k = key(mode, base, blocks);
        if let Some(f) = cache.facts.get(k) {
            return (f, false);
        }
        let f = Arc::new(self.compute(cache, mode, base, blocks));
        cache.facts.put(k, f.clone(), f.weight());
        (f, true)
    }

    fn compute(
        &mut self,
        cache: &Cache,
        mode: Consistency,
        base: &Base,
        blocks: &[(usize, &[u8])],
    ) -> Facts {
        let checks = |me: &mut Checker, blocks: &[(usize, &[u8])]| match me
            .put(base, blocks.iter().copied())
        {
            Ok(path) => (fsck(&path), e2fsck(&path)),
            Err(e) => {
                let e = CheckError::Scratch(Arc::new(e));
                (Err(e.clone()), Err(e))
            }
        };
        if !journaled(mode) {
            // Judged as the crash left it: mounting frees orphans.
            let (fsck, e2fsck) = checks(self, blocks);
            let (tree, replayed, _) = recover(mode, base, blocks, false);
            return Facts {
                tree,
                replayed,
                fsck,
                e2fsck,
                checked: true,
            };
        }
        // Judged as recovered: e2fsck -n does not replay.
        let (tree, replayed, dev) = recover(mode, base, blocks, true);
        let mut changed: BTreeSet<usize> = blocks.iter().map(|b| b.0).collect();
        changed.extend(dev.written.lock().unwrap_or_else(|p| p.into_inner()).iter());
        let contents: Vec<(usize, Vec<u8>)> = changed
            .into_iter()
            .map(|i| {
                let mut buf = vec![0; BS];
                let _ = dev.read(BlockNo(i as u64), &mut buf);
                (i, buf)
            })
            .collect();
        let refs: Vec<(usize, &[u8])> = contents.iter().map(|(i, b)| (*i, b.as_slice())).collect();
        let k = recovered_key(mode, base, &refs);
        let (verdicts, checked) = match cache.verdicts.get(k) {
            Some(v) => (v, false),
            None => {
                let v = Arc::new(checks(self, &refs));
                cache.verdicts.put(k, v.clone(), verdicts_weight(&v));
                (v, true)
            }
        };
        let (fsck, e2fsck) = (*verdicts).clone();
        Facts {
            tree,
            replayed,
            fsck,
            e2fsck,
            checked,
        }
    }
}

/// Mounts the image of `blocks` over `base` with stitchfs (replaying the
/// journal), reads the tree,
/// and, if `unmount`, unmounts. Returns the device, holding the image as
/// recovery left it. Panics are caught: a crash image must never panic
/// the mount, and an async one may be garbage.
fn recover(
    mode: Consistency,
    base: &Base,
    blocks: &[(usize, &[u8])],
    unmount: bool,
) -> (Result<Found, RecoverError>, u32, Arc<Overlay>) {
    let dev = Arc::new(Overlay::new(base, blocks));
    let run = || -> Result<(Found, u32), RecoverError> {
        let mut fs =
            DiskFs::mount(dev.clone(), mode, NOW).map_err(|e| RecoverError::Mount(Arc::new(e)))?;
        let replayed = fs.replayed().map_or(0, |r| r.transactions);
        let found = read_tree(&mut fs).map_err(|e| RecoverError::Read(Arc::new(e)))?;
        if unmount {
            fs.unmount(NOW)
                .map_err(|e| RecoverError::Unmount(Arc::new(e)))?;
        }
        Ok((found, replayed))
    };
    match catching(run) {
        Ok(Ok((found, replayed))) => (Ok(found), replayed, dev),
        Ok(Err(e)) => (Err(e), 0, dev),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            (Err(RecoverError::Panicked(msg)), 0, dev)
        }
    }
}

thread_local! {
    /// Set while a panic is caught and reported as a finding.
    static CATCHING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, catching a panic without printing it (it becomes a finding).
fn catching<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CATCHING.with(|c| c.get()) {
                previous(info);
            }
        }));
    });
    CATCHING.with(|c| c.set(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(false));
    r
}

fn fsck(path: &Path) -> Result<Verdict, CheckError> {
    let r = catching(|| stitch_fsck::check(path, &Default::default(), &mut |_, _, _| {}))
        .map_err(|_| CheckError::FsckPanicked)?
        .map_err(|e| CheckError::Fsck(Arc::new(e)))?;
    // A clean report says nothing worth its memory in the cache.
    let text = if r.is_clean() {
        "clean\n".to_string()
    } else {
        r.to_string()
    };
    Ok(Verdict {
        corruptions: r.summary.corruptions,
        leaks: r.summary.leaks,
        text,
    })
}

fn e2fsck(path: &Path) -> Result<(i32, String), CheckError> {
    let out = std::process::Command::new("e2fsck")
        .arg("-fn")
        .arg(path)
        .output()
        .map_err(|e| CheckError::E2fsck(Arc::new(e)))?;
    let code = out.status.code().unwrap_or(-1);
    let text = if code == 0 {
        "clean\n".to_string()
    } else {
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    Ok((code, text))
}

/// Whether `e2fsck` can be run.
pub fn have_e2fsck() -> bool {
    std::process::Command::new("e2fsck")
        .arg("-V")
        .output()
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use stitch_diskfs::DataMode;

    #[test]
    fn log_blocks_count_only_while_the_journal_holds_transactions() {
        let base = crate::run::base(true, &[]).unwrap();
        let mode = Consistency::Journal(DataMode::Ordered);
        let (sb, log) = base.journal.clone().unwrap();
        assert!(log.len() > 100 && !log.contains(&sb));
        let garbage = vec![0xa5u8; BS];
        let mut jsb = base.image[sb * BS..(sb + 1) * BS].to_vec();
        assert_eq!(jsb[28..32], [0; 4], "the base's journal is empty");
        let empty = recovered_key(mode, &base, &[]);
        // A dead log block does not matter while the journal is empty...
        assert_eq!(recovered_key(mode, &base, &[(log[3], &garbage)]), empty);
        // ...any other block does...
        let other = (sb + log.len() + 40).min(base.image.len() / BS - 1);
        assert!(!log.contains(&other));
        assert_ne!(recovered_key(mode, &base, &[(other, &garbage)]), empty);
        // ...and so does every log block once s_start says it is live.
        jsb[28..32].copy_from_slice(&1u32.to_be_bytes());
        let live = recovered_key(mode, &base, &[(sb, &jsb)]);
        assert_ne!(live, empty);
        assert_ne!(
            recovered_key(mode, &base, &[(sb, &jsb), (log[3], &garbage)]),
            live
        );
    }
}
