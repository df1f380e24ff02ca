//! FileDevice tests on real files under the target directory (not tmpfs, so
//! O_DIRECT can work).

use super::*;
use crate::{FaultDevice, FaultKind, MemDevice};
use stitch_testkit::scratch;

fn block(bs: usize, seed: u64) -> Vec<u8> {
    (0..bs)
        .map(|i| (seed as usize * 31 + i * 7) as u8)
        .collect()
}

fn read_block(d: &impl BlockDevice, n: u64) -> Vec<u8> {
    let mut buf = vec![0; d.block_size()];
    d.read(BlockNo(n), &mut buf).unwrap();
    buf
}

#[test]
fn create_write_flush_reopen_roundtrip() {
    let dir = scratch();
    let path = dir.path().join("img");
    let dev = FileDevice::create(&path, 16 * 4096, 4096).unwrap();
    assert_eq!(dev.num_blocks(), 16);
    let a = block(4096, 1);
    dev.write_batch(&[BlockWrite {
        block: BlockNo(5),
        data: &a,
    }])
    .unwrap();
    dev.flush().unwrap();
    assert_eq!(read_block(&dev, 5), a);
    assert_eq!(read_block(&dev, 4), vec![0; 4096]);
    drop(dev);
    let dev = FileDevice::open(
        &path,
        OpenOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(read_block(&dev, 5), a);
    let err = dev
        .write_batch(&[BlockWrite {
            block: BlockNo(5),
            data: &a,
        }])
        .unwrap_err();
    assert!(matches!(err, DevError::ReadOnly { .. }), "{err}");
}

#[test]
fn create_refuses_existing_file_and_ragged_size() {
    let dir = scratch();
    let path = dir.path().join("img");
    FileDevice::create(&path, 4096, 4096).unwrap();
    assert!(matches!(
        FileDevice::create(&path, 4096, 4096),
        Err(DevError::Io { .. })
    ));
    let other = dir.path().join("other");
    assert!(matches!(
        FileDevice::create(&other, 5000, 4096),
        Err(DevError::BadGeometry { .. })
    ));
}

#[test]
fn runs_are_coalesced_and_match_a_memory_device() {
    let dir = scratch();
    let bs = 1024;
    let dev = FileDevice::create(dir.path().join("img"), 64 * bs as u64, bs).unwrap();
    let mem = MemDevice::new(bs, 64).unwrap();
    // Runs 3..=6 and 10..=11, a lone 40, and block 4 again: the later
    // version must win, as it does on the memory device.
    let order = [3u64, 4, 5, 6, 10, 11, 40, 4];
    let datas: Vec<Vec<u8>> = order
        .iter()
        .enumerate()
        .map(|(i, _)| block(bs, i as u64 + 1))
        .collect();
    let batch: Vec<BlockWrite> = order
        .iter()
        .zip(&datas)
        .map(|(&b, d)| BlockWrite {
            block: BlockNo(b),
            data: d,
        })
        .collect();
    dev.write_batch(&batch).unwrap();
    mem.write_batch(&batch).unwrap();
    assert_eq!(
        dev.stats().write_calls,
        4,
        "runs [3..6], [10,11], [40], [4]"
    );
    assert_eq!(dev.stats().blocks_written, 8);
    for n in 0..64 {
        assert_eq!(read_block(&dev, n), read_block(&mem, n), "block {n}");
    }
}

#[test]
fn a_run_longer_than_iov_max_is_written_whole() {
    let dir = scratch();
    let bs = 512;
    let n = 1500u64; // more than one pwritev's worth of iovecs
    let dev = FileDevice::create(dir.path().join("img"), n * bs as u64, bs).unwrap();
    let datas: Vec<Vec<u8>> = (0..n).map(|i| block(bs, i)).collect();
    let batch: Vec<BlockWrite> = datas
        .iter()
        .enumerate()
        .map(|(i, d)| BlockWrite {
            block: BlockNo(i as u64),
            data: d,
        })
        .collect();
    dev.write_batch(&batch).unwrap();
    assert_eq!(dev.stats().write_calls, 1);
    for i in [0, 1023, 1024, 1499] {
        assert_eq!(read_block(&dev, i), datas[i as usize], "block {i}");
    }
}

#[test]
fn out_of_range_is_an_error_that_does_not_latch() {
    let dir = scratch();
    let dev = FileDevice::create(dir.path().join("img"), 4 * 4096, 4096).unwrap();
    let a = block(4096, 1);
    let batch = [
        BlockWrite {
            block: BlockNo(0),
            data: &a,
        },
        BlockWrite {
            block: BlockNo(4),
            data: &a,
        },
    ];
    assert!(matches!(
        dev.write_batch(&batch),
        Err(DevError::OutOfRange { .. })
    ));
    assert_eq!(
        read_block(&dev, 0),
        vec![0; 4096],
        "nothing of a bad batch is written"
    );
    dev.flush().unwrap();
    assert!(dev.failure().is_none());
}

#[test]
fn direct_io_roundtrip() {
    let dir = scratch();
    let path = dir.path().join("img");
    FileDevice::create(&path, 32 * 4096, 4096).unwrap();
    let opts = OpenOptions {
        direct: true,
        ..Default::default()
    };
    let dev = match FileDevice::open(&path, opts) {
        Err(DevError::Io { source, .. }) if source.raw_os_error() == Some(libc::EINVAL) => {
            println!("note: O_DIRECT unsupported on this file system (EINVAL); skipping");
            return;
        }
        other => other.unwrap(),
    };
    // Vec buffers are not page aligned in general: the device must copy.
    let datas: Vec<Vec<u8>> = (0..3).map(|i| block(4096, i + 9)).collect();
    let batch: Vec<BlockWrite> = datas
        .iter()
        .enumerate()
        .map(|(i, d)| BlockWrite {
            block: BlockNo(7 + i as u64),
            data: d,
        })
        .collect();
    dev.write_batch(&batch).unwrap();
    dev.flush().unwrap();
    let mut odd = vec![0u8; 4097];
    dev.read(BlockNo(8), &mut odd[1..]).unwrap(); // deliberately misaligned
    assert_eq!(&odd[1..], &datas[1][..]);
    drop(dev);
    let plain = FileDevice::open(&path, OpenOptions::default()).unwrap();
    assert_eq!(read_block(&plain, 9), datas[2]);
}

#[test]
fn direct_needs_a_sector_multiple() {
    let dir = scratch();
    let path = dir.path().join("img");
    FileDevice::create(&path, 4 * 4096, 4096).unwrap();
    let opts = OpenOptions {
        direct: true,
        block_size: 1000,
        ..Default::default()
    };
    assert!(matches!(
        FileDevice::open(&path, opts),
        Err(DevError::BadGeometry { .. })
    ));
}

#[test]
fn second_read_write_open_is_refused() {
    let dir = scratch();
    let path = dir.path().join("img");
    let first = FileDevice::create(&path, 4 * 4096, 4096).unwrap();
    let err = FileDevice::open(&path, OpenOptions::default()).unwrap_err();
    assert!(matches!(err, DevError::Locked { .. }), "{err}");
    assert!(err.to_string().contains("img"), "{err}");
    let ro = OpenOptions {
        read_only: true,
        ..Default::default()
    };
    assert!(matches!(
        FileDevice::open(&path, ro),
        Err(DevError::Locked { .. })
    ));
    drop(first);
    // Readers share; a writer waits for them all to go.
    let r1 = FileDevice::open(&path, ro).unwrap();
    let _r2 = FileDevice::open(&path, ro).unwrap();
    assert!(matches!(
        FileDevice::open(&path, OpenOptions::default()),
        Err(DevError::Locked { .. })
    ));
    drop(r1);
    drop(_r2);
    FileDevice::open(&path, OpenOptions::default()).unwrap();
}

#[test]
fn injected_failure_latches_over_a_file_device() {
    let dir = scratch();
    let file = FileDevice::create(dir.path().join("img"), 4 * 4096, 4096).unwrap();
    let dev = FaultDevice::new(file).unwrap();
    dev.fail_nth_flush(1, FaultKind::Io);
    let a = block(4096, 3);
    dev.write_batch(&[BlockWrite {
        block: BlockNo(1),
        data: &a,
    }])
    .unwrap();
    assert!(matches!(dev.flush(), Err(DevError::Io { .. })));
    assert!(matches!(dev.flush(), Err(DevError::Latched { .. })));
    assert!(matches!(
        dev.write_batch(&[]),
        Err(DevError::Latched { .. })
    ));
}

/// A long run of page-aligned buffers goes around the page cache; a short
/// or misaligned one does not; and what either wrote reads back, before and
/// after a reopen, whatever order they came in (a streamed run over a block
/// still dirty in the page cache wins, a buffered write after it wins).
#[test]
fn long_aligned_runs_stream_and_stay_coherent_with_buffered_writes() {
    let dir = scratch();
    let path = dir.path().join("img");
    let bs = 4096;
    FileDevice::create(&path, 256 * bs as u64, bs).unwrap();
    let dev = FileDevice::open(&path, OpenOptions::default()).unwrap();
    if dev.stream.is_none() {
        println!("note: O_DIRECT unsupported on this file system; skipping");
        return;
    }
    let mut want: Vec<Vec<u8>> = (0..256).map(|_| vec![0u8; bs]).collect();
    let write = |want: &mut Vec<Vec<u8>>, dev: &FileDevice, first: u64, bufs: &[&[u8]]| {
        let batch: Vec<BlockWrite> = bufs
            .iter()
            .enumerate()
            .map(|(i, d)| BlockWrite {
                block: BlockNo(first + i as u64),
                data: d,
            })
            .collect();
        dev.write_batch(&batch).unwrap();
        for (i, d) in bufs.iter().enumerate() {
            want[first as usize + i] = d.to_vec();
        }
    };
    // Block 10 dirty in the page cache, then a streamed run over it.
    write(&mut want, &dev, 10, &[&block(bs, 1)]);
    let mut run = aligned::AlignedBuf::zeroed(STREAM_RUN * bs).unwrap();
    for (i, chunk) in run.chunks_exact_mut(bs).enumerate() {
        chunk.copy_from_slice(&block(bs, 100 + i as u64));
    }
    let chunks: Vec<&[u8]> = run.chunks_exact(bs).collect();
    write(&mut want, &dev, 0, &chunks);
    assert_eq!(dev.stats().streamed_runs, 1);
    assert_eq!(
        read_block(&dev, 10),
        want[10],
        "the streamed run lost to the cache"
    );
    // A buffered write after it, and a short aligned run: both buffered.
    write(&mut want, &dev, 11, &[&block(bs, 2)]);
    write(&mut want, &dev, 100, &chunks[..STREAM_RUN - 1]);
    // A long run one byte off page alignment: buffered too.
    let mut off = aligned::AlignedBuf::zeroed((STREAM_RUN + 1) * bs).unwrap();
    for (i, b) in off.iter_mut().enumerate() {
        *b = (i % 253) as u8;
    }
    let skewed: Vec<&[u8]> = off[1..1 + STREAM_RUN * bs].chunks_exact(bs).collect();
    write(&mut want, &dev, 170, &skewed);
    assert_eq!(dev.stats().streamed_runs, 1, "{:?}", dev.stats());
    for n in [0, 10, 11, 63, 100, 162, 170, 233] {
        assert_eq!(read_block(&dev, n), want[n as usize], "block {n}");
    }
    dev.flush().unwrap();
    drop(dev);
    let again = FileDevice::open(&path, OpenOptions::default()).unwrap();
    for (n, w) in want.iter().enumerate() {
        assert_eq!(&read_block(&again, n as u64), w, "block {n} after reopen");
    }
}
