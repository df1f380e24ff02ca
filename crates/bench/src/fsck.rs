//! `stitchfs bench fsck`: how long `stitchfs fsck` takes next to
//! `e2fsck -fn` on the same kernel-filled image.
//!
//! Makes an ext2 image with mke2fs (enough inodes for the files), loop-mounts
//! it with the kernel (needs root), creates `files` small files in
//! directories of 1,000, unmounts, then times the library check and
//! `e2fsck -fn` several times each, alternating, and prints the medians and
//! their ratio. A benchmark prints figures; it asserts nothing except that
//! both checkers call the image clean (a timing of a wrong answer is void).

use anyhow::{bail, ensure, Context};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const PER_DIR: u64 = 1000;
const RUNS: usize = 5;

/// Builds the image in `image_dir` and prints the comparison.
pub fn run(image_dir: &Path, files: u64, size_bytes: u64) -> anyhow::Result<()> {
    std::fs::create_dir_all(image_dir).with_context(|| format!("{}", image_dir.display()))?;
    let img = image_dir.join("bench-fsck.img");
    make_image(&img, files, size_bytes)?;
    fill(&img, &image_dir.join("bench-fsck.mnt"), files)?;
    sync_caches();
    let ours = time_runs(|| ours_once(&img))?;
    let theirs = time_runs(|| e2fsck_once(&img))?;
    let (o, t) = (median(ours), median(theirs));
    println!(
        "image: {} ({} MiB, {files} files)",
        img.display(),
        size_bytes >> 20
    );
    println!(
        "stitchfs fsck  median {:>8.3} s over {RUNS} runs",
        o.as_secs_f64()
    );
    println!(
        "e2fsck -fn     median {:>8.3} s over {RUNS} runs",
        t.as_secs_f64()
    );
    println!(
        "ratio stitchfs/e2fsck: {:.2}",
        o.as_secs_f64() / t.as_secs_f64()
    );
    Ok(())
}

fn make_image(img: &Path, files: u64, size_bytes: u64) -> anyhow::Result<()> {
    let f = std::fs::File::create(img).with_context(|| format!("{}", img.display()))?;
    f.set_len(size_bytes)?;
    let inodes = (files + files / PER_DIR + 1024).to_string();
    let status = Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext2", "-b", "4096", "-N", &inodes])
        .arg(img)
        .status()
        .context("running mke2fs")?;
    ensure!(status.success(), "mke2fs failed: {status}");
    Ok(())
}

fn fill(img: &Path, mnt: &Path, files: u64) -> anyhow::Result<()> {
    std::fs::create_dir_all(mnt)?;
    let status = Command::new("mount")
        .args(["-o", "loop"])
        .arg(img)
        .arg(mnt)
        .status()?;
    ensure!(
        status.success(),
        "mount -o loop failed (root needed): {status}"
    );
    let result = create_files(mnt, files);
    let status = Command::new("umount").arg(mnt).status()?;
    result?;
    ensure!(status.success(), "umount failed: {status}");
    Ok(())
}

fn create_files(mnt: &Path, files: u64) -> anyhow::Result<()> {
    for i in 0..files {
        let dir = mnt.join(format!("d{:04}", i / PER_DIR));
        if i % PER_DIR == 0 {
            std::fs::create_dir(&dir)?;
        }
        // Mostly one-block files; every 50th needs an indirect block.
        let len = if i % 50 == 0 {
            60_000
        } else {
            100 + (i % 3) as usize * 1500
        };
        std::fs::write(dir.join(format!("f{i}")), vec![b'x'; len])?;
    }
    Ok(())
}

/// Drops the page cache once so the first runs do not differ from later
/// ones by more than the image build left behind (best effort).
fn sync_caches() {
    let _ = Command::new("sync").status();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

fn ours_once(img: &Path) -> anyhow::Result<()> {
    let r = stitch_fsck::check(
        img,
        &stitch_fsck::CheckOptions::default(),
        &mut |_, _, _| {},
    )?;
    if !r.is_clean() {
        bail!("stitchfs fsck finds problems in the benchmark image:\n{r}");
    }
    Ok(())
}

fn e2fsck_once(img: &Path) -> anyhow::Result<()> {
    let out = Command::new("e2fsck")
        .arg("-fn")
        .arg(img)
        .output()
        .context("running e2fsck")?;
    ensure!(
        out.status.success(),
        "e2fsck -fn: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(())
}

fn time_runs(mut f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Vec<Duration>> {
    (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            f()?;
            Ok(t.elapsed())
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}
