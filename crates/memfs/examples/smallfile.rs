//! Smallfile probe (McoreFS's: create, write 1 KB, fsync, unlink) on an
//! image file, in-process (no FUSE): time per file and device writes and
//! flushes per fsync, per consistency mode. `smallfile DIR [FILES]`.
use std::time::Instant;

mod probe;
use stitch_memfs::Kind;

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("DIR"));
    let n: usize = std::env::args().nth(2).map_or(2000, |s| s.parse().unwrap());
    for mode in probe::MODES {
        let (dev, fs) = probe::mount(&dir, "smallfile.img", mode);
        let r = fs.root();
        let d = fs.mkdir(r, b"d", 0o755, 0, 0).unwrap();
        fs.sync().unwrap();
        let before = dev.stats();
        let t = Instant::now();
        for i in 0..n {
            let name = format!("f{i}");
            let a = fs
                .mknod(d.ino, name.as_bytes(), Kind::File, 0o644, (0, 0), 0, 0)
                .unwrap();
            fs.open(a.ino).unwrap();
            fs.write(a.ino, 0, &[7; 1024], false).unwrap();
            fs.fsync(a.ino, false).unwrap();
            fs.release(a.ino).unwrap();
            fs.unlink(d.ino, name.as_bytes()).unwrap();
        }
        let el = t.elapsed();
        let after = dev.stats();
        println!(
            "{mode}: {:.1} us/file, {:.2} flushes, {:.2} write calls, {:.2} blocks per fsync",
            el.as_secs_f64() * 1e6 / n as f64,
            (after.flushes - before.flushes) as f64 / n as f64,
            (after.write_calls - before.write_calls) as f64 / n as f64,
            (after.blocks_written - before.blocks_written) as f64 / n as f64,
        );
        fs.unmount().unwrap();
    }
}
