//! Real programs on a real stitchfs mount (`stitchfs mount IMG MNT
//! --foreground`): git, sqlite3, tar and a parallel C build, each in
//! journal mode (data=ordered), git and tar in soft-updates mode too.
//!
//! Every workload checks its own result (git fsck, PRAGMA integrity_check,
//! sha256 of every file, the built program's output), then the image is
//! unmounted and judged (`e2fsck -fn` clean in journal mode, no corruption
//! by `stitchfs fsck` in soft updates), mounted again and the result checked
//! once more, so what the program saw is what reached the disk.
//!
//! A missing tool fails the test naming its Debian package (CI runs
//! scripts/setup.sh, which installs them). `STITCH_TEST_MOUNT_CMD` and
//! `STITCH_TEST_MKFS_CMD` run the same tests on another file system (see
//! posix_support).

mod posix_support;

use posix_support::{
    checked, require_tool, sh, write_file, Mode, Nbd, Scratch, GIT_ENV, JOURNAL_ORDERED,
    SOFTUPDATES,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fs;
use std::path::Path;

const IMAGE_MB: u64 = 1024;

/// Lines of text, like source files: `n` bytes or a little more.
fn text(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "patch", "depend", "block", "inode", "journal", "commit", "flush", "stream", "soft",
        "update", "write", "before", "after", "disk", "cache", "group", "order",
    ];
    let mut out = Vec::with_capacity(n + 80);
    while out.len() < n {
        let words = rng.gen_range(1..12);
        for w in 0..words {
            if w > 0 {
                out.push(b' ');
            }
            out.extend_from_slice(WORDS[rng.gen_range(0..WORDS.len())].as_bytes());
        }
        out.push(b'\n');
    }
    out
}

/// 20 × 10 directories of 15 files: 3,000 small text files under `root`.
fn source_tree(root: &Path, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for a in 0..20 {
        for b in 0..10 {
            for f in 0..15 {
                let n = rng.gen_range(50..3000);
                let path = root.join(format!("mod{a:02}/sub{b}/file{f:02}.txt"));
                write_file(&path, &text(&mut rng, n));
            }
        }
    }
}

/// git init/add/commit on 3,000 files, a second commit that modifies,
/// deletes and adds files, log, gc (packs and prunes), fsck; after a
/// remount fsck again, the same HEAD and a clean work tree.
fn git(s: Scratch) {
    require_tool("git", "git");
    let head = s.with_mount(|mnt| {
        let repo = mnt.join("repo");
        source_tree(&repo, 1);
        sh(
            "git first commit",
            &repo,
            "git init -q -b main . && git add -A && git commit -q -m initial",
            GIT_ENV,
        );
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        for i in 0..300 {
            let p = repo.join(format!(
                "mod{:02}/sub{}/file{:02}.txt",
                i % 20,
                i % 10,
                i % 15
            ));
            // The 300 steps visit 60 files, each always the same way:
            // 20 are deleted, 40 rewritten (some several times).
            match i % 3 {
                0 if p.exists() => fs::remove_file(&p).unwrap(),
                0 => {}
                _ => write_file(&p, &text(&mut rng, 500)),
            }
            write_file(&repo.join(format!("new/n{i}.txt")), &text(&mut rng, 200));
        }
        sh(
            "git second commit",
            &repo,
            "git add -A && git commit -q -m second",
            GIT_ENV,
        );
        let log = sh("git log", &repo, "git log --oneline", GIT_ENV);
        assert_eq!(log.lines().count(), 2, "git log:\n{log}");
        let files = sh("git ls-files", &repo, "git ls-files | wc -l", GIT_ENV);
        assert_eq!(files.trim(), "3280", "files in HEAD: 3000 - 20 + 300");
        sh(
            "git fsck",
            &repo,
            "git fsck --full --strict --no-progress",
            GIT_ENV,
        );
        sh("git gc", &repo, "git gc -q --prune=now", GIT_ENV);
        sh(
            "git fsck after gc",
            &repo,
            "git fsck --full --strict --no-progress",
            GIT_ENV,
        );
        let status = sh("git status", &repo, "git status --porcelain", GIT_ENV);
        assert_eq!(status, "", "work tree differs from HEAD");
        sh("git rev-parse", &repo, "git rev-parse HEAD", GIT_ENV)
    });
    s.with_mount(|mnt| {
        let repo = mnt.join("repo");
        sh(
            "git fsck after remount",
            &repo,
            "git fsck --full --strict --no-progress",
            GIT_ENV,
        );
        let again = sh("git rev-parse", &repo, "git rev-parse HEAD", GIT_ENV);
        assert_eq!(again, head, "HEAD after remount");
        let status = sh("git status", &repo, "git status --porcelain", GIT_ENV);
        assert_eq!(status, "", "work tree differs from HEAD after remount");
    });
}

#[test]
fn git_journal_ordered() {
    git(Scratch::new(JOURNAL_ORDERED, IMAGE_MB));
}

/// The image on nbdkit's file plugin, mkfs'd and mounted by URI; e2fsck
/// judges the file behind the server.
#[test]
fn git_journal_ordered_over_nbdkit() {
    git(Scratch::over_nbd(JOURNAL_ORDERED, IMAGE_MB, Nbd::Nbdkit));
}

#[test]
fn git_softupdates() {
    git(Scratch::new(SOFTUPDATES, IMAGE_MB));
}

/// Runs `sqlite3 test.db` in `dir` with `sql` on its standard input; it
/// must exit 0 and print no error.
fn sqlite3(dir: &Path, sql: &str) -> String {
    let mut cmd = std::process::Command::new("sqlite3");
    cmd.arg("test.db").current_dir(dir);
    let out = checked("sqlite3", cmd, sql.as_bytes());
    assert!(
        out.stderr.is_empty(),
        "sqlite3:\n{sql}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// sqlite3 with its rollback journal: 40 transactions of 100 rows, each in
/// its own sqlite3 process, then updates and deletes, a transaction rolled
/// back, integrity_check; again after a remount.
fn sqlite(s: Scratch) {
    require_tool("sqlite3", "sqlite3");
    let check = "PRAGMA integrity_check; SELECT count(*), sum(length(v)) FROM t;";
    let seen = s.with_mount(|mnt| {
        let dir = mnt.join("db");
        fs::create_dir(&dir).unwrap();
        let mode = sqlite3(
            &dir,
            "PRAGMA journal_mode=DELETE;
             CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT NOT NULL, v BLOB NOT NULL);
             CREATE INDEX t_k ON t(k);",
        );
        assert_eq!(mode.trim(), "delete");
        for _ in 0..40 {
            sqlite3(
                &dir,
                "BEGIN;
                 WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100)
                 INSERT INTO t(k, v)
                   SELECT hex(randomblob(8)), randomblob(100 + abs(random()) % 1900) FROM c;
                 COMMIT;",
            );
        }
        sqlite3(
            &dir,
            "BEGIN; DELETE FROM t WHERE id % 7 = 0;
             UPDATE t SET v = randomblob(3000) WHERE id % 5 = 0; COMMIT;",
        );
        // A transaction that rewrites most pages, rolled back from the journal.
        sqlite3(
            &dir,
            "BEGIN; DELETE FROM t WHERE id % 2 = 0; UPDATE t SET k = 'x'; ROLLBACK;",
        );
        assert!(
            !dir.join("test.db-journal").exists(),
            "the rollback journal outlived its transaction"
        );
        let out = sqlite3(&dir, check);
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("ok"), "integrity_check:\n{out}");
        let counts = lines.next().unwrap().to_string();
        assert!(
            counts.starts_with("3429|"),
            "rows: want 4000 - 571 deleted: {counts}"
        );
        counts
    });
    s.with_mount(|mnt| {
        let out = sqlite3(&mnt.join("db"), check);
        assert_eq!(out, format!("ok\n{seen}\n"), "after remount");
    });
}

#[test]
fn sqlite_journal_ordered() {
    sqlite(Scratch::new(JOURNAL_ORDERED, IMAGE_MB));
}

/// The image on qemu-nbd (one client at a time: mkfs, then each mount).
#[test]
fn sqlite_journal_ordered_over_qemu_nbd() {
    sqlite(Scratch::over_nbd(JOURNAL_ORDERED, IMAGE_MB, Nbd::QemuNbd));
}

/// A tree worth archiving: 1,200 files from empty to 9 MiB (the large
/// ones reach ext2's double-indirect blocks), symlinks, hard links, empty
/// directories, odd modes, a 255-byte name, 24 levels of nesting.
fn archive_tree(root: &Path) {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    for i in 0..1200 {
        let dir = root.join(format!("d{}/e{}", i % 12, i % 7));
        let size = match i % 100 {
            0 => 0,
            1..=4 => rng.gen_range(100_000..1_000_000),
            _ => rng.gen_range(1..20_000),
        };
        let mut data = vec![0u8; size];
        rng.fill(&mut data[..]);
        write_file(&dir.join(format!("f{i}.bin")), &data);
    }
    for (i, size) in [5 << 20, (9 << 20) + 12345, 4096 * 1036]
        .into_iter()
        .enumerate()
    {
        let mut data = vec![0u8; size];
        rng.fill(&mut data[..]);
        write_file(&root.join(format!("big/big{i}")), &data);
    }
    let deep: String = (0..24).map(|i| format!("level{i}/")).collect();
    write_file(&root.join(&deep).join("bottom"), b"deep\n");
    write_file(&root.join("n".repeat(255)), b"long name\n");
    for i in 0..5 {
        fs::create_dir_all(root.join(format!("empty{i}"))).unwrap();
    }
    for i in 0..20 {
        std::os::unix::fs::symlink(
            format!("../d{}/e{}/f{i}.bin", i % 12, i % 7),
            root.join(format!("d0/link{i}")),
        )
        .unwrap();
        fs::hard_link(
            root.join(format!("d{}/e{}/f{i}.bin", i % 12, i % 7)),
            root.join(format!("d1/hard{i}")),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink("nowhere/at/all", root.join("dangling")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for (n, mode) in [
        (30, 0o600),
        (31, 0o755),
        (32, 0o444),
        (33, 0o640),
        (34, 0o4755),
    ] {
        fs::set_permissions(
            root.join(format!("d{}/e{}/f{n}.bin", n % 12, n % 7)),
            fs::Permissions::from_mode(mode),
        )
        .unwrap();
    }
}

/// What must survive an archive round trip: every entry's type, mode,
/// link count, size (not for directories) and mtime, symlink targets, and
/// the sha256 of every file.
fn manifest(dir: &Path) -> String {
    sh(
        "manifest",
        dir,
        "find . ! -type d -printf '%y %m %n %s %Ts %p %l\\n' | LC_ALL=C sort && \
         find . -type d -printf '%y %m %Ts %p\\n' | LC_ALL=C sort && \
         find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum",
        &[],
    )
}

/// tar: extract a tarball onto the mount, archive the result again on the
/// mount and extract that; all three trees must match the source exactly,
/// and still do after a remount.
fn tar(mode: Mode) {
    require_tool("tar", "tar");
    let s = Scratch::new(mode, IMAGE_MB);
    let src = s.dir.path().join("src");
    archive_tree(&src);
    let want = manifest(&src);
    assert!(want.lines().count() > 2400, "manifest too small:\n{want}");
    let tarball = s.dir.path().join("src.tar");
    sh(
        "tar create (source)",
        s.dir.path(),
        &format!("tar -cf {} -C src .", tarball.display()),
        &[],
    );
    s.with_mount(|mnt| {
        sh(
            "tar extract",
            mnt,
            &format!("mkdir x && tar -xpf {} -C x", tarball.display()),
            &[],
        );
        assert_eq!(manifest(&mnt.join("x")), want, "extracted tree differs");
        sh(
            "tar re-create and extract",
            mnt,
            "tar -cf again.tar -C x . && mkdir y && tar -xpf again.tar -C y",
            &[],
        );
        assert_eq!(manifest(&mnt.join("y")), want, "re-archived tree differs");
    });
    s.with_mount(|mnt| {
        assert_eq!(
            manifest(&mnt.join("x")),
            want,
            "extracted tree after remount"
        );
        assert_eq!(
            manifest(&mnt.join("y")),
            want,
            "re-archived tree after remount"
        );
        let listed = sh("tar list", mnt, "tar -tf again.tar | wc -l", &[]);
        let entries: usize = listed.trim().parse().unwrap();
        assert!(entries > 1200, "again.tar lists {entries} entries");
    });
}

#[test]
fn tar_journal_ordered() {
    tar(JOURNAL_ORDERED);
}

#[test]
fn tar_softupdates() {
    tar(SOFTUPDATES);
}

const MODULES: u32 = 48;

/// The value module `i` computes, as the generated C does (`k` is its
/// constant).
fn module_value(i: u32, k: u32) -> u64 {
    let mut acc: u64 = u64::from(i);
    for j in 0..1000u64 {
        acc = (acc * 31 + j * u64::from(k)) % 1_000_003;
    }
    acc
}

fn module_source(i: u32, k: u32) -> String {
    format!(
        "#include \"mods.h\"\n\
         unsigned long long mod_{i}(void) {{\n\
         \x20   unsigned long long acc = {i}ULL;\n\
         \x20   for (unsigned long long j = 0; j < 1000; j++)\n\
         \x20       acc = (acc * 31 + j * {k}ULL) % 1000003ULL;\n\
         \x20   return acc;\n\
         }}\n"
    )
}

const MAKEFILE: &str = "\
CC ?= cc
CFLAGS = -O1 -Wall -Werror -Iinclude
MODS = $(wildcard src/mod_*.c)
OBJS = $(MODS:src/%.c=build/%.o)

prog: build/main.o build/libmods.a
\t$(CC) -o $@ build/main.o build/libmods.a

build/libmods.a: $(OBJS)
\tar rcs $@ $^

build/%.o: src/%.c include/mods.h | build
\t$(CC) $(CFLAGS) -c $< -o $@

build:
\tmkdir -p build
";

/// A generated 49-file C project built with `make -j2` on the mount; the
/// program's output is checked, `make -q` must find it up to date, one
/// changed module rebuilds only itself, and after a remount the program
/// still runs and is still up to date.
fn make(mode: Mode) {
    require_tool("make", "make");
    require_tool("cc", "gcc");
    require_tool("ar", "binutils");
    let s = Scratch::new(mode, IMAGE_MB);
    let expect = |ks: &[u32]| -> String {
        let sum: u64 = (0..MODULES).map(|i| module_value(i, ks[i as usize])).sum();
        format!("{sum}\n")
    };
    let mut ks: Vec<u32> = (0..MODULES).map(|i| 7 + i).collect();
    s.with_mount(|mnt| {
        let p = mnt.join("proj");
        let decls: String = (0..MODULES)
            .map(|i| format!("unsigned long long mod_{i}(void);\n"))
            .collect();
        write_file(&p.join("include/mods.h"), decls.as_bytes());
        for i in 0..MODULES {
            write_file(
                &p.join(format!("src/mod_{i}.c")),
                module_source(i, ks[i as usize]).as_bytes(),
            );
        }
        let calls: String = (0..MODULES)
            .map(|i| format!("    s += mod_{i}();\n"))
            .collect();
        write_file(
            &p.join("src/main.c"),
            format!(
                "#include <stdio.h>\n#include \"mods.h\"\nint main(void) {{\n\
                 \x20   unsigned long long s = 0;\n{calls}    printf(\"%llu\\n\", s);\n\
                 \x20   return 0;\n}}\n"
            )
            .as_bytes(),
        );
        write_file(&p.join("Makefile"), MAKEFILE.as_bytes());
        let log = sh("make -j2", &p, "make -j2 2>&1", &[]);
        assert_eq!(
            log.matches(" -c src/").count(),
            MODULES as usize + 1,
            "{log}"
        );
        assert_eq!(sh("run prog", &p, "./prog", &[]), expect(&ks));
        sh("make -q (up to date)", &p, "make -q prog", &[]);
        // mtimes are whole seconds on ext2 with 128-byte inodes (one of
        // the file systems this harness takes): let the clock move on first.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        ks[7] = 1234;
        write_file(&p.join("src/mod_7.c"), module_source(7, ks[7]).as_bytes());
        let log = sh("make -j2 (one module changed)", &p, "make -j2 2>&1", &[]);
        assert_eq!(
            log.matches(" -c src/").count(),
            1,
            "rebuilt more than mod_7:\n{log}"
        );
        assert!(log.contains("src/mod_7.c"), "{log}");
        assert_eq!(sh("run prog", &p, "./prog", &[]), expect(&ks));
    });
    s.with_mount(|mnt| {
        let p = mnt.join("proj");
        assert_eq!(sh("run prog after remount", &p, "./prog", &[]), expect(&ks));
        sh("make -q after remount", &p, "make -q prog", &[]);
    });
}

#[test]
fn make_journal_ordered() {
    make(JOURNAL_ORDERED);
}
