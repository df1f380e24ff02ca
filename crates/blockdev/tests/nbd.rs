//! The NBD device against real `nbdkit` servers: data round trips, requests
//! in flight, FUA in place of a flush, and every failure the module promises
//! to latch or refuse.
//!
//! A test binary of its own: starting a server forks, and a child holds
//! the parent's descriptors until it execs, which would keep the image
//! lock of a unit test beside it (file/tests.rs reopens its image).

use std::time::Duration;
use stitch_blockdev::{BlockDevice, BlockNo, BlockWrite, DevError, NbdDevice, NbdOptions};
use stitch_testkit::nbd::NbdServer;

const BS: usize = 4096;

fn opts() -> NbdOptions {
    NbdOptions {
        timeout: Duration::from_secs(2),
        ..NbdOptions::default()
    }
}

fn block(fill: u8) -> Vec<u8> {
    vec![fill; BS]
}

fn read(dev: &NbdDevice, b: u64) -> Vec<u8> {
    let mut buf = block(0);
    dev.read(BlockNo(b), &mut buf).unwrap();
    buf
}

/// Writes `data` to each of `blocks` in one batch.
fn write(dev: &NbdDevice, blocks: &[u64], data: &[u8]) -> Result<(), DevError> {
    let writes: Vec<BlockWrite<'_>> = blocks
        .iter()
        .map(|&b| BlockWrite {
            block: BlockNo(b),
            data,
        })
        .collect();
    dev.write_batch(&writes)
}

fn assert_latched(dev: &NbdDevice) {
    let mut buf = block(0);
    assert!(matches!(
        dev.read(BlockNo(0), &mut buf),
        Err(DevError::Latched { .. })
    ));
    assert!(matches!(dev.flush(), Err(DevError::Latched { .. })));
    assert!(dev.failure().is_some());
}

#[test]
fn writes_flush_and_read_back_in_few_requests() {
    let server = NbdServer::memory("rt", "64M");
    let dev = NbdDevice::open(&server.uri(), opts()).unwrap();
    assert_eq!(dev.num_blocks(), (64 << 20) / BS as u64);
    let data: Vec<Vec<u8>> = (0..600).map(|i| block(i as u8)).collect();
    // 512 consecutive blocks (two 1 MiB requests), then 88 scattered.
    let writes: Vec<BlockWrite<'_>> = data
        .iter()
        .enumerate()
        .map(|(i, d)| BlockWrite {
            block: BlockNo(if i < 512 {
                100 + i as u64
            } else {
                2000 + 2 * i as u64
            }),
            data: d,
        })
        .collect();
    dev.write_batch(&writes).unwrap();
    dev.flush().unwrap();
    let s = dev.stats();
    assert_eq!(s.write_requests, 2 + 88);
    assert_eq!((s.blocks_written, s.flushes), (600, 1));
    for w in &writes {
        assert_eq!(read(&dev, w.block.0), w.data, "{}", w.block);
    }
    // Nothing written since: a flush has nothing to send.
    dev.flush().unwrap();
    assert_eq!(dev.stats().flushes, 1);
}

#[test]
fn a_lone_block_goes_with_fua_instead_of_a_flush() {
    let server = NbdServer::memory("fua", "16M");
    let dev = NbdDevice::open(&server.uri(), opts()).unwrap();
    assert!(dev.caps().fua, "nbdkit's memory plugin offers FUA");
    let one = block(7);
    write(&dev, &[3], &one).unwrap();
    assert_eq!(read(&dev, 3), one, "a held block reads back");
    dev.flush().unwrap();
    let s = dev.stats();
    assert_eq!((s.fua_writes, s.flushes, s.write_requests), (1, 0, 1));
    // With another write unflushed, the lone block cannot stand for the
    // flush: it is sent plain and the flush is sent.
    let two = block(8);
    write(&dev, &[4, 9], &two).unwrap();
    write(&dev, &[5], &two).unwrap();
    dev.flush().unwrap();
    let s = dev.stats();
    assert_eq!((s.fua_writes, s.flushes), (1, 1));
    // A new connection sees it all.
    drop(dev);
    let again = NbdDevice::open(&server.uri(), opts()).unwrap();
    assert_eq!((read(&again, 3), read(&again, 5)), (one, two));
}

#[test]
fn one_request_in_flight_still_writes_everything() {
    let server = NbdServer::memory("depth1", "16M");
    let dev = NbdDevice::open(&server.uri(), NbdOptions { depth: 1, ..opts() }).unwrap();
    let data: Vec<Vec<u8>> = (0..40).map(block).collect();
    let writes: Vec<BlockWrite<'_>> = data
        .iter()
        .enumerate()
        .map(|(i, d)| BlockWrite {
            block: BlockNo(3 * i as u64),
            data: d,
        })
        .collect();
    dev.write_batch(&writes).unwrap();
    dev.flush().unwrap();
    for w in &writes {
        assert_eq!(read(&dev, w.block.0), w.data);
    }
}

#[test]
fn a_server_killed_between_write_and_flush_latches_the_device() {
    let mut server = NbdServer::memory("killed", "16M");
    let dev = NbdDevice::open(&server.uri(), opts()).unwrap();
    let d = block(1);
    write(&dev, &[1, 2], &d).unwrap();
    server.kill();
    let err = dev.flush().unwrap_err();
    assert!(matches!(err, DevError::Io { .. }), "{err}");
    assert_latched(&dev);
}

#[test]
fn a_silent_server_latches_after_the_timeout_instead_of_hanging() {
    let server = NbdServer::memory("stalled", "16M");
    let dev = NbdDevice::open(
        &server.uri(),
        NbdOptions {
            timeout: Duration::from_millis(500),
            ..opts()
        },
    )
    .unwrap();
    server.pause();
    let d = block(1);
    let started = std::time::Instant::now();
    let err = write(&dev, &[1, 2], &d)
        .and_then(|()| dev.flush())
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("answered nothing"), "{err}");
    server.signal(libc::SIGCONT);
    // Even with the server back, the device stays latched: what was in
    // flight on the lost connection is unknown.
    assert_latched(&dev);
}

#[test]
fn a_write_error_latches_and_a_read_error_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let trigger = dir.path().join("fail");
    let file_arg = format!("error-file={}", trigger.display());
    let server = NbdServer::nbdkit(
        "errors",
        &[
            "--filter=error",
            "memory",
            "16M",
            "error=EIO",
            "error-rate=100%",
            &file_arg,
        ],
    );
    let dev = NbdDevice::open(&server.uri(), opts()).unwrap();
    let d = block(5);
    write(&dev, &[0, 1], &d).unwrap();
    dev.flush().unwrap();
    std::fs::write(&trigger, b"").unwrap();
    let mut buf = block(0);
    let err = dev.read(BlockNo(0), &mut buf).unwrap_err();
    assert!(matches!(err, DevError::Io { .. }), "{err}");
    assert!(dev.failure().is_none(), "a read error does not latch");
    let err = write(&dev, &[0, 7], &d).unwrap_err();
    assert!(err.to_string().contains("Input/output error"), "{err}");
    std::fs::remove_file(&trigger).unwrap();
    // The server works again, but nothing is retried.
    assert_latched(&dev);
}

#[test]
fn servers_that_cannot_hold_an_image_are_refused_with_the_reason() {
    let ro = NbdServer::nbdkit("ro", &["-r", "memory", "16M"]);
    let err = NbdDevice::open(&ro.uri(), opts()).unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
    NbdDevice::open(
        &ro.uri(),
        NbdOptions {
            read_only: true,
            ..opts()
        },
    )
    .unwrap();

    let no_flush = NbdServer::nbdkit(
        "noflush",
        &[
            "eval",
            "get_size=echo 16777216",
            "pread=dd if=/dev/zero count=$3 iflag=count_bytes status=none",
            "pwrite=cat >/dev/null",
            "can_write=exit 0",
            "can_flush=exit 3",
        ],
    );
    let err = NbdDevice::open(&no_flush.uri(), opts()).unwrap_err();
    assert!(err.to_string().contains("does not support FLUSH"), "{err}");

    let named = NbdServer::nbdkit(
        "named",
        &[
            "--filter=exportname",
            "memory",
            "16M",
            "exportname=disk",
            "exportname-strict=true",
        ],
    );
    let wrong = named.uri().replacen(":///", ":///other", 1);
    let err = NbdDevice::open(&wrong, opts()).unwrap_err();
    assert!(matches!(err, DevError::Refused { .. }), "{err}");

    let err = NbdDevice::open("nbd+unix:///?socket=/nonexistent/stitch.sock", opts()).unwrap_err();
    assert!(matches!(err, DevError::Refused { .. }), "{err}");
}

#[test]
fn discard_trims_where_the_server_offers_it() {
    let server = NbdServer::memory("trim", "16M");
    let dev = NbdDevice::open(&server.uri(), opts()).unwrap();
    assert!(dev.caps().trim && dev.discards());
    let d = block(9);
    let writes: Vec<BlockWrite<'_>> = (10..20)
        .map(|b| BlockWrite {
            block: BlockNo(b),
            data: &d,
        })
        .collect();
    dev.write_batch(&writes).unwrap();
    dev.flush().unwrap();
    assert_eq!(dev.discard(BlockNo(12), 5).unwrap(), 5);
    // nbdkit's memory plugin reads trimmed blocks as zeros.
    assert_eq!(read(&dev, 12), block(0));
    assert_eq!(read(&dev, 16), block(0));
    assert_eq!(read(&dev, 17), d, "past the range: kept");
    assert_eq!(dev.stats().trimmed_blocks, 5);
    assert!(matches!(
        dev.discard(BlockNo(dev.num_blocks() - 1), 2),
        Err(DevError::OutOfRange { .. })
    ));

    let dev = NbdDevice::open(
        &server.uri(),
        NbdOptions {
            read_only: true,
            ..opts()
        },
    )
    .unwrap();
    assert!(!dev.discards(), "a read-only open never discards");
}

/// A TCP port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn round_trip(uri: &str) {
    let dev = NbdDevice::open(uri, opts()).unwrap();
    let d = block(3);
    write(&dev, &[8, 9], &d).unwrap();
    dev.flush().unwrap();
    assert_eq!(read(&dev, 9), d);
}

#[test]
fn tcp_and_tls_reach_the_server() {
    let port = free_port().to_string();
    let tcp = NbdServer::nbdkit_tcp("tcp", &port, &["memory", "16M"]);
    round_trip(&format!("nbd://127.0.0.1:{port}/"));
    drop(tcp);

    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.psk");
    std::fs::write(
        &keys,
        "alice:5d3a7f0e9b1c2d4e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6\n",
    )
    .unwrap();
    let psk = format!("--tls-psk={}", keys.display());
    let tls = NbdServer::nbdkit("tls", &["--tls=require", &psk, "memory", "16M"]);
    let socket = tls.uri().replacen("nbd+unix:///?socket=", "", 1);
    // In the clear, the server refuses: said, not hung.
    let err = NbdDevice::open(&tls.uri(), opts()).unwrap_err();
    assert!(err.to_string().contains("TLS"), "{err}");
    round_trip(&format!(
        "nbds+unix://alice@/?socket={socket}&tls-psk-file={}",
        keys.display()
    ));
}
