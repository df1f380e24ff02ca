//! What an fsync covers under each `Order`, on the shape Git gives its
//! object store with `core.fsync=all`: an object written and fsynced under
//! a temporary name, linked to its real name, the temporary unlinked; then
//! a reference written and fsynced, renamed over the old one, and another
//! file fsynced. In sequential order (the default) the last fsync makes
//! every earlier change durable, so the reference never names an object
//! the disk lacks. Precise order (McoreFS's closure) makes the reference
//! durable without the link, the crash state that broke repositories: the
//! test shows that too, so it can tell the two apart.

mod common;
use common::*;
use stitch_diskfs::Consistency;
use stitch_memfs::{InodeNo, Kind, MemFs, Options, Order, RenameFlags};

const NONE: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: false,
};

/// A new file `name` in `dir` holding `data`, fsynced.
fn durable_file(fs: &MemFs, dir: InodeNo, name: &[u8], data: &[u8]) -> InodeNo {
    let f = fs
        .mknod(dir, name, Kind::File, 0o644, (0, 0), 0, 0)
        .unwrap()
        .ino;
    fs.write(f, 0, data, false).unwrap();
    fs.fsync(f, false).unwrap();
    f
}

/// Runs the shape in `mode` and `order` and returns memfs over the image a
/// crash right after the last fsync leaves (nothing else was applied).
fn crash_after_git_commit(mode: Consistency, order: Order) -> MemFs {
    let dev = device(fresh_image(64 << 20, Some(JournalSize::Default)));
    let fs = mount_on(dev.clone(), mode, Options { order, ..opts() });
    let r = fs.root();
    let objects = fs.mkdir(r, b"objects", 0o755, 0, 0).unwrap().ino;
    let refs = fs.mkdir(r, b"refs", 0o755, 0, 0).unwrap().ino;
    durable_file(&fs, refs, b"master", b"old");
    fs.sync().unwrap();

    durable_file(&fs, objects, b"tmp_obj_1", b"object");
    let obj = fs.lookup(objects, b"tmp_obj_1").unwrap().ino;
    fs.link(obj, objects, b"obj1").unwrap();
    fs.unlink(objects, b"tmp_obj_1").unwrap();
    durable_file(&fs, refs, b"master.lock", b"obj1");
    fs.rename(refs, b"master.lock", refs, b"master", NONE)
        .unwrap();
    durable_file(&fs, refs, b"new", b"x");

    mount_on(device(dev.snapshot()), mode, opts())
}

fn read_named(fs: &MemFs, path: &[&[u8]]) -> Option<Vec<u8>> {
    let mut at = fs.root();
    for name in path {
        at = fs.lookup(at, name).ok()?.ino;
    }
    Some(fs.read(at, 0, 4096).unwrap())
}

#[test]
fn in_sequential_order_a_reference_never_outlives_its_object() {
    for mode in MODES {
        let after = crash_after_git_commit(mode, Order::Sequential);
        let object = |n: &[u8]| read_named(&after, &[b"objects", n]);
        assert_eq!(
            read_named(&after, &[b"refs", b"master"]).as_deref(),
            Some(&b"obj1"[..]),
            "{mode:?}"
        );
        assert_eq!(object(b"obj1").as_deref(), Some(&b"object"[..]), "{mode:?}");
        assert_eq!(
            object(b"tmp_obj_1"),
            None,
            "{mode:?}: the unlink was before"
        );
    }
}

#[test]
fn in_precise_order_the_reference_may_outlive_its_objects_name() {
    for mode in MODES {
        let after = crash_after_git_commit(mode, Order::Precise);
        let object = |n: &[u8]| read_named(&after, &[b"objects", n]);
        // The reference and the object's bytes are durable (each was
        // fsynced), the link to the object's real name is not.
        assert_eq!(
            read_named(&after, &[b"refs", b"master"]).as_deref(),
            Some(&b"obj1"[..]),
            "{mode:?}"
        );
        assert_eq!(object(b"obj1"), None, "{mode:?}");
        assert_eq!(
            object(b"tmp_obj_1").as_deref(),
            Some(&b"object"[..]),
            "{mode:?}"
        );
    }
}
