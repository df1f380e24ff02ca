//! Figure 9's untar and delete rows through diskfs itself, on a real source
//! tree: the tree is replayed as untar does it (directories made, files
//! created and written in 64 KiB pieces, in sorted order), on a fresh
//! 256 MiB image in memory, with a write-back every 500 files; then, after
//! a sync and a remount, deleted. Default tree: the crate sources cargo
//! keeps (`$CARGO_HOME/registry/src`), which every machine that built
//! stitchfs has.

use super::optimizations::{cpu_seconds, row, Row};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use stitch_blockdev::MemDevice;
use stitch_diskfs::{Consistency, DiskFs, InodeNo, StackOptions, Timestamp};
use stitch_patch::{CacheConfig, Optimizations};

pub(super) const NOW: Timestamp = Timestamp::from_secs(1_700_000_000);
const IMAGE: u64 = 256 << 20;

/// The default tree, if there is one.
pub fn default_tree() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let src = home.join("registry/src");
    src.is_dir().then_some(src)
}

/// A tree to replay: directories and files, parents first, sorted.
pub struct Tree {
    entries: Vec<(PathBuf, bool)>,
    pub files: usize,
    pub bytes: u64,
}

impl Tree {
    /// Reads `root`, keeping at most `max_files` files (the first in order).
    pub fn read(root: &Path, max_files: usize) -> anyhow::Result<Tree> {
        let mut t = Tree {
            entries: Vec::new(),
            files: 0,
            bytes: 0,
        };
        walk(root, Path::new(""), max_files, &mut t)?;
        Ok(t)
    }

    /// The entries' paths relative to the root, parents first.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.entries.iter().map(|(p, _)| p.as_path())
    }
}

fn walk(root: &Path, rel: &Path, max_files: usize, t: &mut Tree) -> anyhow::Result<()> {
    let mut names: Vec<_> = std::fs::read_dir(root.join(rel))?
        .filter_map(|e| e.ok())
        .collect();
    names.sort_by_key(|e| e.file_name());
    for e in names {
        if t.files >= max_files {
            return Ok(());
        }
        let path = rel.join(e.file_name());
        let ft = e.file_type()?;
        if ft.is_dir() {
            t.entries.push((path.clone(), true));
            walk(root, &path, max_files, t)?;
        } else if ft.is_file() {
            t.bytes += e.metadata()?.len();
            t.files += 1;
            t.entries.push((path, false));
        }
    }
    Ok(())
}

fn fresh_fs(opts: Optimizations) -> anyhow::Result<(Arc<MemDevice>, DiskFs)> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("fs.img");
    let mk = stitch_mkfs::MkfsOptions {
        size: Some(IMAGE),
        journal: None,
        force: true,
        ..Default::default()
    };
    stitch_mkfs::mkfs(&path, &mk, &mut |_, _| {})?;
    let dev = Arc::new(MemDevice::from_image(4096, std::fs::read(&path)?)?);
    let fs = mount(&dev, opts)?;
    Ok((dev, fs))
}

/// The cache the diskfs benchmarks run on: Featherstitch's 160,000 blocks,
/// all of which may be dirty (write-back is the load's periodic one).
pub(super) fn cache_config(opts: Optimizations) -> CacheConfig {
    CacheConfig {
        optimizations: opts,
        max_blocks: 160_000,
        max_dirty_blocks: 160_000,
        check_invariants: false,
    }
}

fn mount(dev: &Arc<MemDevice>, opts: Optimizations) -> anyhow::Result<DiskFs> {
    let stack = StackOptions::new(Consistency::SoftUpdates).cache(cache_config(opts));
    Ok(DiskFs::mount(dev.clone(), stack, NOW)?)
}

/// The periodic write-back the loads do every 500 files, as a kernel's
/// flusher would: everything ready is written, then flushed.
pub(super) fn writeback(fs: &mut DiskFs) -> anyhow::Result<()> {
    let c = fs.modes_mut().cache_mut();
    c.write_round(usize::MAX)?;
    c.flush()?;
    Ok(())
}

/// Replays the tree; returns the inode of each entry.
pub(super) fn untar(fs: &mut DiskFs, root: &Path, tree: &Tree) -> anyhow::Result<Vec<InodeNo>> {
    let mut inos: std::collections::HashMap<PathBuf, InodeNo> = Default::default();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for (i, (path, is_dir)) in tree.entries.iter().enumerate() {
        let parent = path
            .parent()
            .and_then(|p| inos.get(p).copied())
            .unwrap_or(fs.root());
        let name = path.file_name().unwrap().as_encoded_bytes();
        let ino = if *is_dir {
            fs.mkdir(parent, name, 0o755, 0, 0, NOW)?.0
        } else {
            let ino = fs.create(parent, name, 0o644, 0, 0, NOW)?.0;
            buf.clear();
            std::io::Read::read_to_end(&mut std::fs::File::open(root.join(path))?, &mut buf)?;
            for (k, chunk) in buf.chunks(64 << 10).enumerate() {
                fs.write(ino, (k * (64 << 10)) as u64, chunk, NOW)?;
            }
            ino
        };
        inos.insert(path.clone(), ino);
        out.push(ino);
        if i % 500 == 499 {
            writeback(fs)?;
        }
    }
    fs.sync()?;
    Ok(out)
}

/// Deletes the tree, children before parents.
pub(super) fn delete(fs: &mut DiskFs, tree: &Tree) -> anyhow::Result<()> {
    let mut inos: std::collections::HashMap<PathBuf, InodeNo> = Default::default();
    for (path, _) in &tree.entries {
        let parent = path
            .parent()
            .and_then(|p| inos.get(p).copied())
            .unwrap_or(fs.root());
        let e = fs
            .lookup(parent, path.file_name().unwrap().as_encoded_bytes())?
            .ok_or_else(|| anyhow::anyhow!("{} missing", path.display()))?;
        inos.insert(path.clone(), e.ino);
    }
    for (i, (path, is_dir)) in tree.entries.iter().enumerate().rev() {
        let parent = path
            .parent()
            .and_then(|p| inos.get(p).copied())
            .unwrap_or(fs.root());
        let name = path.file_name().unwrap().as_encoded_bytes();
        if *is_dir {
            fs.rmdir(parent, name, NOW)?;
        } else {
            fs.unlink(parent, name, NOW)?;
        }
        if i % 500 == 0 {
            writeback(fs)?;
        }
    }
    fs.sync()?;
    Ok(())
}

/// The untar and delete rows for one setting.
pub fn rows(
    root: &Path,
    tree: &Tree,
    name: &'static str,
    opts: Optimizations,
) -> anyhow::Result<[Row; 2]> {
    let (dev, mut fs) = fresh_fs(opts)?;
    let untar_row = measured(&mut fs, "untar (diskfs)", name, |fs| {
        untar(fs, root, tree).map(drop)
    })?;
    fs.unmount(NOW)?;
    let mut fs = mount(&dev, opts)?;
    let delete_row = measured(&mut fs, "delete (diskfs)", name, |fs| delete(fs, tree))?;
    fs.unmount(NOW)?;
    Ok([untar_row, delete_row])
}

/// `load` on `fs`, as the row `workload` of setting `name`: the patch
/// cache's counts and the CPU time it took.
fn measured(
    fs: &mut DiskFs,
    workload: &'static str,
    name: &'static str,
    load: impl FnOnce(&mut DiskFs) -> anyhow::Result<()>,
) -> anyhow::Result<Row> {
    let (before, t0) = (fs.modes().cache().stats(), cpu_seconds());
    load(fs)?;
    let after = fs.modes().cache().stats();
    Ok(row(
        workload,
        name,
        &before,
        &after,
        cpu_seconds() - t0,
        0.0,
    ))
}
