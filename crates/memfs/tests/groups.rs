//! Patchgroups ("Generalized File System Dependencies", §5): what a
//! group's sync and a dependent's flush take, and the rules of a group's
//! life. The device image right after a flush is what a crash then would
//! leave, so each test mounts a copy of it and looks; crash states inside
//! flushes are `stitchfs crashtest --workload patchgroups`' business.

mod common;
use common::*;
use stitch_memfs::{in_domains, Domains, GroupError, Held, Kind, Order};

/// Runs `f` with the changes in what `h` has engaged.
fn under<R>(h: &Held, f: impl FnOnce() -> R) -> R {
    let d = Domains {
        groups: h.engaged(),
        ..Domains::default()
    };
    in_domains(d, f)
}

const UID: u32 = 1000;

/// The paper's `depend "sort <in >out" "rm in"`: a flush that takes the
/// removal (here, an fsync of the directory under the mount's precise
/// order, which would otherwise take the removal alone) takes everything
/// the sort wrote first; a sync of the first group leaves the second in
/// memory.
#[test]
fn a_dependent_groups_change_brings_the_group_it_depends_on() {
    for mode in MODES {
        let fs = mount_on(
            device(image_for(mode)),
            mode,
            stitch_memfs::Options {
                order: Order::Precise,
                ..opts()
            },
        );
        let r = fs.root();
        let dir = fs.mkdir(r, b"d", 0o755, 0, 0).unwrap().ino;
        file(&fs, dir, b"in", b"unsorted");
        fs.sync().unwrap();
        let mut h = fs.new_held();
        let p = h.create(UID).unwrap();
        h.engage(p, UID).unwrap();
        let out = under(&h, || file(&fs, r, b"out", b"sorted"));
        h.disengage(p, UID).unwrap();
        let q = h.create(UID).unwrap();
        fs.pg_depend(&h, q, p, UID).unwrap();
        h.engage(q, UID).unwrap();
        under(&h, || fs.unlink(dir, b"in").unwrap());
        h.disengage(q, UID).unwrap();
        fs.fsync(dir, false).unwrap();
        let after = crash_copy(&fs, mode);
        assert!(
            !exists(&after, dir, b"in"),
            "{mode:?}: the removal is durable"
        );
        assert_eq!(
            after.read(out, 0, 10).unwrap(),
            b"sorted",
            "{mode:?}: the group it depends on came first"
        );
    }
}

#[test]
fn a_groups_sync_takes_it_and_its_dependencies_not_its_dependents_nor_others() {
    for mode in MODES {
        let fs = mount_on(device(image_for(mode)), mode, opts());
        let r = fs.root();
        let mut h = fs.new_held();
        let (a, b, c) = (
            h.create(UID).unwrap(),
            h.create(UID).unwrap(),
            h.create(UID).unwrap(),
        );
        h.engage(a, UID).unwrap();
        under(&h, || file(&fs, r, b"a", b"A"));
        h.disengage(a, UID).unwrap();
        fs.pg_depend(&h, b, a, UID).unwrap();
        h.engage(b, UID).unwrap();
        let fb = under(&h, || file(&fs, r, b"b", b"B"));
        h.disengage(b, UID).unwrap();
        fs.pg_depend(&h, c, b, UID).unwrap();
        h.engage(c, UID).unwrap();
        let fc = under(&h, || {
            let f = fs
                .mknod(r, b"c", Kind::File, 0o644, (0, 0), 0, 0)
                .unwrap()
                .ino;
            fs.write(f, 0, b"C", false).unwrap();
            f
        });
        h.disengage(c, UID).unwrap();
        let other = file(&fs, r, b"other", b"unrelated");
        // Group b depends on a: both durable; c (which depends on b) and
        // the change in no group stay in memory.
        fs.pg_sync(&h, b, UID).unwrap();
        let after = crash_copy(&fs, mode);
        assert!(
            exists(&after, r, b"a") && exists(&after, r, b"b"),
            "{mode:?}"
        );
        assert_eq!(after.read(fb, 0, 4).unwrap(), b"B", "{mode:?}");
        assert!(!exists(&after, r, b"c"), "{mode:?}: a dependent stays");
        assert!(!exists(&after, r, b"other"), "{mode:?}: no group's stays");
        let pending = fs.pending();
        assert!(pending.changes > 0);
        fs.pg_sync(&h, c, UID).unwrap();
        let after = crash_copy(&fs, mode);
        assert_eq!(after.read(fc, 0, 4).unwrap(), b"C", "{mode:?}");
        let _ = other;
    }
}

/// The rules of Figure 5, each refusal with its error.
#[test]
fn the_rules_of_a_groups_life_refuse_what_could_build_a_cycle_or_hold_changes_forever() {
    let mode = MODES[0];
    let fs = mount_on(device(image_for(mode)), mode, opts());
    let mut h = fs.new_held();
    let p = h.create(UID).unwrap();
    let q = h.create(UID).unwrap();
    assert!(matches!(
        fs.pg_depend(&h, p, p, UID),
        Err(GroupError::Forbidden(_))
    ));
    h.engage(p, UID).unwrap();
    // p is engaged: not all of its changes are made.
    assert_eq!(fs.pg_depend(&h, q, p, UID), Err(GroupError::Busy));
    h.disengage(p, UID).unwrap();
    assert!(matches!(h.disengage(p, UID), Err(GroupError::Forbidden(_))));
    fs.pg_depend(&h, q, p, UID).unwrap();
    // Once again is nothing new.
    fs.pg_depend(&h, q, p, UID).unwrap();
    // p is sealed: never engaged again, and gains no dependencies (the
    // edge q -> p with p -> q would be a cycle).
    assert!(matches!(h.engage(p, UID), Err(GroupError::Forbidden(_))));
    assert!(matches!(
        fs.pg_depend(&h, p, q, UID),
        Err(GroupError::Forbidden(_))
    ));
    // A group already engaged gains no dependencies.
    let r = h.create(UID).unwrap();
    h.engage(q, UID).unwrap();
    assert!(matches!(
        fs.pg_depend(&h, q, r, UID),
        Err(GroupError::Forbidden(_))
    ));
    // Another user's group, a group never made, a closed one.
    assert_eq!(h.engage(r, UID + 1), Err(GroupError::NotOwner));
    assert_eq!(h.engage(9999, UID), Err(GroupError::Unknown));
    h.close(r, UID).unwrap();
    assert_eq!(h.engage(r, UID), Err(GroupError::Unknown));
    assert_eq!(h.close(r, UID), Err(GroupError::Unknown));
    // Another process of the same user does not hold it.
    let stranger = fs.new_held();
    assert_eq!(stranger.check(q, UID), Err(GroupError::Unknown));
    assert_eq!(stranger.check(q, UID + 1), Err(GroupError::NotOwner));
}

/// Holdings are copied to a child with what the parent engaged, and let
/// go when a process's state is dropped (its exit): a group lives while
/// some process holds it, and is engaged while some process engages it.
#[test]
fn a_child_copies_the_holdings_and_an_exit_lets_them_go() {
    let mode = MODES[0];
    let fs = mount_on(device(image_for(mode)), mode, opts());
    let table = fs.group_table().clone();
    let mut parent = fs.new_held();
    let p = parent.create(UID).unwrap();
    let q = parent.create(UID).unwrap();
    parent.engage(p, UID).unwrap();
    let child = parent.clone();
    assert_eq!(child.engaged(), parent.engaged());
    parent.disengage(p, UID).unwrap();
    // The child still has p engaged: p cannot be depended on yet.
    assert_eq!(fs.pg_depend(&parent, q, p, UID), Err(GroupError::Busy));
    drop(child); // the child exits
    fs.pg_depend(&parent, q, p, UID).unwrap();
    let live = table.list();
    assert_eq!(live.len(), 2);
    assert!(live.iter().all(|g| g.holders == 1 && g.engaged == 0));
    assert!(live.iter().any(|g| g.id == p && g.sealed));
    drop(parent);
    assert!(table.list().is_empty(), "every holder gone: the groups are");
}
