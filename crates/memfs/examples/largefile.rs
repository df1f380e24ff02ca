//! Largefile probe (McoreFS's: write 100 MB in 1 MiB calls, fsync) on an
//! image file, in-process (no FUSE): MB/s and device writes per mode, with
//! the raw file's sequential write rate measured beside it.
//! `largefile DIR [MB]`.
use std::io::Write;
use std::time::Instant;

mod probe;
use stitch_memfs::Kind;

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("DIR"));
    let mb: usize = std::env::args().nth(2).map_or(100, |s| s.parse().unwrap());
    let chunk = vec![0x5au8; 1 << 20];
    {
        let p = dir.join("raw.bin");
        let t = Instant::now();
        let mut f = std::fs::File::create(&p).unwrap();
        for _ in 0..mb {
            f.write_all(&chunk).unwrap();
        }
        f.sync_all().unwrap();
        println!(
            "raw file: {:.0} MB/s",
            mb as f64 / t.elapsed().as_secs_f64()
        );
        std::fs::remove_file(p).unwrap();
    }
    for mode in probe::MODES {
        let (dev, fs) = probe::mount(&dir, "largefile.img", mode);
        let r = fs.root();
        let a = fs
            .mknod(r, b"big", Kind::File, 0o644, (0, 0), 0, 0)
            .unwrap();
        fs.sync().unwrap();
        let before = dev.stats();
        let t = Instant::now();
        for i in 0..mb {
            fs.write(a.ino, (i << 20) as u64, &chunk, false).unwrap();
        }
        let w = t.elapsed();
        fs.fsync(a.ino, false).unwrap();
        let el = t.elapsed();
        let after = dev.stats();
        println!(
            "{mode}: {:.0} MB/s (writes {:.2} s, fsync {:.2} s), {} flushes, {} write calls, {} blocks",
            mb as f64 / el.as_secs_f64(),
            w.as_secs_f64(),
            (el - w).as_secs_f64(),
            after.flushes - before.flushes,
            after.write_calls - before.write_calls,
            after.blocks_written - before.blocks_written,
        );
        fs.unmount().unwrap();
    }
}
