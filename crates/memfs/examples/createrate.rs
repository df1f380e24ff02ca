//! Create-rate probe: creates files in one directory with no flush and
//! prints the time of each 5,000 (to see whether cost grows with the
//! number of unflushed operations).
use std::sync::Arc;
use std::time::Instant;
use stitch_blockdev::MemDevice;
use stitch_diskfs::{Consistency, DataMode, DiskFs};
use stitch_memfs::{Kind, MemFs, Options};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(20_000, |s| s.parse().unwrap());
    let image = stitch_testkit::fresh_image(512 << 20, Some(stitch_testkit::JournalSize::Default));
    let dev = Arc::new(MemDevice::from_image(4096, image).unwrap());
    let disk = DiskFs::mount(
        dev,
        Consistency::Journal(DataMode::Ordered),
        stitch_diskfs::Timestamp::from_secs(1),
    )
    .unwrap();
    let fs = MemFs::mount(
        disk,
        Options {
            flush_interval: None,
            ..Options::default()
        },
    )
    .unwrap();
    let r = fs.root();
    let mut t = Instant::now();
    for i in 0..n {
        let a = fs
            .mknod(
                r,
                format!("f{i}").as_bytes(),
                Kind::File,
                0o644,
                (0, 0),
                0,
                0,
            )
            .unwrap();
        fs.write(a.ino, 0, &[1; 1024], false).unwrap();
        if (i + 1) % 5000 == 0 {
            println!("creates {}..{}: {:?}", i + 1 - 5000, i + 1, t.elapsed());
            t = Instant::now();
        }
    }
    let t = Instant::now();
    fs.sync().unwrap();
    println!("sync: {:?}", t.elapsed());
    let t = Instant::now();
    for i in 0..n {
        fs.unlink(r, format!("f{i}").as_bytes()).unwrap();
    }
    println!("unlink all: {:?}", t.elapsed());
    let t = Instant::now();
    fs.sync().unwrap();
    println!("sync: {:?}", t.elapsed());
    fs.unmount().unwrap();
}
