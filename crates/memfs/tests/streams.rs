//! Streams ("Consistency Without Ordering"): what an fsync in a stream
//! takes, and what it leaves in memory. The device image right after an
//! fsync is what a crash then would leave (nothing else was applied to
//! diskfs), so each test mounts a copy of it and looks. Crash states
//! inside flushes are `stitchfs crashtest --streams`' business.

mod common;
use common::*;
use stitch_memfs::{in_domains, Domains, Options, Order};

fn stream(n: u64) -> Domains {
    Domains {
        stream: Some(n),
        ..Domains::default()
    }
}

fn in_order(order: Order) -> Options {
    Options { order, ..opts() }
}

/// Whatever the mount's order, an fsync in a stream takes the stream's
/// changes and what they depend on, and leaves another stream's
/// unrelated changes in memory.
#[test]
fn an_fsync_in_a_stream_takes_its_stream_and_not_another() {
    for mode in MODES {
        for order in [Order::Sequential, Order::Precise, Order::Global] {
            let fs = mount_on(device(image_for(mode)), mode, in_order(order));
            let r = fs.root();
            let top = in_domains(stream(1), || fs.mkdir(r, b"top", 0o755, 0, 0).unwrap().ino);
            let a = in_domains(stream(1), || file(&fs, r, b"a", b"one"));
            in_domains(stream(2), || file(&fs, r, b"b", b"two"));
            let d = in_domains(stream(1), || fs.mkdir(top, b"d", 0o755, 0, 0).unwrap().ino);
            in_domains(stream(1), || {
                file(&fs, d, b"a2", b"one more");
                fs.fsync(a, false).unwrap();
            });
            let after = crash_copy(&fs, mode);
            let why = format!("{mode:?} {order}");
            assert_eq!(after.read(a, 0, 10).unwrap(), b"one", "{why}");
            // The stream's later changes came too: a stream is taken whole
            // up to the cut.
            assert!(exists(&after, d, b"a2"), "{why}");
            // b's create shares the root with a's, but came after it, and
            // nothing of stream 1 touched the root since.
            assert!(!exists(&after, r, b"b"), "{why}: b is another stream's");
        }
    }
}

/// Related changes keep their order across streams: a create in a
/// directory another stream made brings that directory, and with it that
/// stream's earlier changes (its prefix).
#[test]
fn a_related_change_brings_the_other_streams_prefix() {
    for mode in MODES {
        let fs = mount_on(device(image_for(mode)), mode, in_order(Order::Precise));
        let r = fs.root();
        // early is in a directory of its own: nothing but the stream
        // relates it to d.
        let (e, d) = in_domains(stream(2), || {
            let e = fs.mkdir(r, b"e", 0o755, 0, 0).unwrap().ino;
            file(&fs, e, b"early", b"2's first");
            (e, fs.mkdir(r, b"d", 0o755, 0, 0).unwrap().ino)
        });
        in_domains(stream(1), || {
            let x = file(&fs, d, b"x", b"1's");
            fs.fsync(x, false).unwrap();
        });
        let after = crash_copy(&fs, mode);
        assert!(exists(&after, d, b"x"), "{mode:?}");
        assert!(exists(&after, e, b"early"), "{mode:?}: stream 2's prefix");
    }
}

/// A file's state is written whole at the cut, with every stream's
/// writes in it: a flush that writes it takes the prefix of every stream
/// that wrote it.
#[test]
fn a_file_another_stream_wrote_brings_that_streams_prefix() {
    for mode in MODES {
        let fs = mount_on(device(image_for(mode)), mode, in_order(Order::Precise));
        let r = fs.root();
        let f = in_domains(stream(1), || file(&fs, r, b"f", b"aaaa"));
        in_domains(stream(2), || {
            file(&fs, r, b"g", b"before");
            fs.write(f, 2, b"BB", false).unwrap();
        });
        in_domains(stream(1), || fs.fsync(f, false).unwrap());
        let after = crash_copy(&fs, mode);
        assert_eq!(after.read(f, 0, 10).unwrap(), b"aaBB", "{mode:?}");
        assert!(exists(&after, r, b"g"), "{mode:?}: stream 2 wrote g first");
    }
}

/// With `ignore_fsync` an fsync returns at once and writes nothing; a
/// stream sync then makes the stream durable.
#[test]
fn ignoring_fsyncs_orders_only_and_a_stream_sync_makes_it_durable() {
    for mode in MODES {
        let fs = mount_on(device(image_for(mode)), mode, opts());
        let r = fs.root();
        let quiet = Domains {
            stream: Some(5),
            ignore_fsync: true,
            ..Domains::default()
        };
        let before = disk_image(&fs);
        let f = in_domains(quiet, || {
            let f = file(&fs, r, b"f", b"data");
            fs.fsync(f, false).unwrap();
            f
        });
        assert_eq!(fs.stats().fsyncs_ignored, 1, "{mode:?}");
        assert!(disk_image(&fs) == before, "{mode:?}: the fsync wrote");
        fs.sync_stream(5).unwrap();
        let after = crash_copy(&fs, mode);
        assert_eq!(after.read(f, 0, 10).unwrap(), b"data", "{mode:?}");
    }
}

/// Under `Order::Global` threads in no stream share one: an fsync takes
/// all of their changes before it, and none of a stream's of its own.
#[test]
fn global_order_puts_every_thread_without_a_stream_in_one() {
    for mode in MODES {
        let fs = mount_on(device(image_for(mode)), mode, in_order(Order::Global));
        let r = fs.root();
        let mine = in_domains(stream(9), || file(&fs, r, b"own", b"own"));
        let other = std::thread::scope(|s| {
            s.spawn(|| file(&fs, r, b"other", b"other thread"))
                .join()
                .unwrap()
        });
        let f = file(&fs, r, b"f", b"f");
        fs.fsync(f, false).unwrap();
        let after = crash_copy(&fs, mode);
        assert_eq!(
            after.read(other, 0, 20).unwrap(),
            b"other thread",
            "{mode:?}"
        );
        // The own stream's create came first in the root: it goes too (the
        // directory relates them), but its data stays.
        assert!(exists(&after, r, b"own"), "{mode:?}");
        let _ = mine;
    }
}

/// A stream is taken whole up to the cut, however a flush reaches it: an
/// fsync from elsewhere that writes a file's state (with the stream's
/// latest write in it) brings the stream's changes made between its first
/// and latest writes too.
#[test]
fn a_flush_that_reaches_a_stream_takes_it_up_to_the_cut() {
    for mode in MODES {
        let fs = mount_on(device(image_for(mode)), mode, in_order(Order::Precise));
        let r = fs.root();
        let f = in_domains(stream(1), || {
            let f = file(&fs, r, b"f", b"v1");
            file(&fs, r, b"y", b"between");
            fs.write(f, 0, b"v3", false).unwrap();
            f
        });
        in_domains(stream(2), || fs.fsync(f, false).unwrap());
        let after = crash_copy(&fs, mode);
        assert_eq!(after.read(f, 0, 10).unwrap(), b"v3", "{mode:?}");
        assert!(exists(&after, r, b"y"), "{mode:?}: y came between");
    }
}
