//! Data-driven cases for the tricky corners of rename, link, unlink and
//! open-but-unlinked files. Each case is a script of ops, each line with
//! the error it must give (`-> ENOENT`) or none for success, and the tree
//! it must leave. Every script runs on the model *and* on a real directory
//! through the kernel, so a wrong expectation cannot hide a wrong model.

mod common;

use stitch_model::real::RealFs;
use stitch_model::{
    Content, Errno, Fd, Kind, Limits, Model, Op, Path, Rdev, RenameFlags, Special, Tree,
    TreeOptions,
};

/// Parses one script line into an op and its expected error.
fn parse(line: &str) -> (Op, Option<Errno>) {
    let (cmd, expect) = match line.split_once("->") {
        Some((c, e)) => (c.trim(), Some(errno(e.trim()))),
        None => (line.trim(), None),
    };
    let w: Vec<&str> = cmd.split_whitespace().collect();
    let p = |i: usize| Path::parse(w[i]);
    let num = |i: usize| w[i].parse::<u64>().expect("number");
    let op = match w[0] {
        "create" => Op::Create {
            path: p(1),
            perm: 0o644,
        },
        "mkdir" => Op::Mkdir {
            path: p(1),
            perm: 0o755,
        },
        "mkfifo" => Op::Mknod {
            path: p(1),
            kind: Special::Fifo,
            perm: 0o644,
        },
        "mkchr" => {
            let rdev = Rdev { major: 1, minor: 3 };
            Op::Mknod {
                path: p(1),
                kind: Special::Char(rdev),
                perm: 0o644,
            }
        }
        "symlink" => Op::Symlink {
            path: p(1),
            target: w[2].as_bytes().to_vec(),
        },
        "link" => Op::Link {
            from: p(1),
            to: p(2),
        },
        "unlink" => Op::Unlink { path: p(1) },
        "rmdir" => Op::Rmdir { path: p(1) },
        "rename" => Op::Rename {
            from: p(1),
            to: p(2),
            flags: flags(w.get(3).copied()),
        },
        "write" => Op::Write {
            path: p(1),
            offset: num(2),
            data: w.get(3).unwrap_or(&"").as_bytes().to_vec(),
        },
        "truncate" => Op::Truncate {
            path: p(1),
            size: num(2),
        },
        "read" => Op::Read {
            path: p(1),
            offset: num(2),
            len: num(3) as usize,
        },
        "readdir" => Op::Readdir { path: p(1) },
        "chmod" => Op::Chmod {
            path: p(1),
            perm: num(2) as u32,
        },
        "open" => Op::Open { path: p(1) },
        "writefd" => Op::WriteFd {
            fd: Fd(num(1) as u32),
            offset: num(2),
            data: w[3].as_bytes().to_vec(),
        },
        "close" => Op::Close {
            fd: Fd(num(1) as u32),
        },
        other => panic!("unknown command {other}"),
    };
    (op, expect)
}

fn flags(word: Option<&str>) -> RenameFlags {
    match word {
        None => RenameFlags::default(),
        Some("noreplace") => RenameFlags {
            noreplace: true,
            exchange: false,
        },
        Some("exchange") => RenameFlags {
            noreplace: false,
            exchange: true,
        },
        Some("both") => RenameFlags {
            noreplace: true,
            exchange: true,
        },
        Some(w) => panic!("unknown flag {w}"),
    }
}

fn errno(name: &str) -> Errno {
    let all = [
        Errno::Eperm,
        Errno::Enoent,
        Errno::Enxio,
        Errno::Ebadf,
        Errno::Ebusy,
        Errno::Eexist,
        Errno::Enotdir,
        Errno::Eisdir,
        Errno::Einval,
        Errno::Emfile,
        Errno::Efbig,
        Errno::Emlink,
        Errno::Enametoolong,
        Errno::Enotempty,
        Errno::Eloop,
    ];
    let found = all
        .into_iter()
        .find(|e| e.to_string().starts_with(&format!("{name}:")));
    found.unwrap_or_else(|| panic!("unknown errno {name}"))
}

/// One line per path: `/a/b kind nlink [size or target] [=same inode]`.
fn render(tree: &Tree) -> String {
    let mut out = String::new();
    for (key, node) in &tree.nodes {
        let kind = match node.meta.kind {
            Kind::File => "file",
            Kind::Dir => "dir",
            Kind::Symlink => "link",
            Kind::Special(Special::Fifo) => "fifo",
            Kind::Special(_) => "special",
        };
        out += &format!(
            "/{} {kind} {}",
            String::from_utf8_lossy(key),
            node.meta.nlink
        );
        match &node.content {
            Content::Bytes(b) => out += &format!(" {:?}", String::from_utf8_lossy(b)),
            Content::Target(t) => out += &format!(" -> {}", String::from_utf8_lossy(t)),
            Content::None => {}
        }
        if let Some(s) = &node.same_as {
            out += &format!(" =/{}", String::from_utf8_lossy(s));
        }
        out += "\n";
    }
    out
}

/// Runs `script` on the model and on a real directory; each line must give
/// its expected result on both, and both must leave the tree `expect`.
fn check(script: &str, expect: &str) {
    let dir = stitch_testkit::scratch();
    common::set_root_perm(dir.path(), 0o755);
    let mut real = RealFs::new(dir.path());
    let mut model = Model::new(0o755, common::me(), Limits::default());
    for line in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (op, want) = parse(line);
        let got = model.apply(&op).map(|_| ());
        model.check();
        assert_eq!(got.err(), want, "model: {line}");
        let got_real = real.apply(&op).map(|_| ());
        assert_eq!(got_real.err(), want, "kernel: {line}");
    }
    let rendered = render(&model.snapshot());
    let want: String = expect
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(rendered, want, "model tree");
    drop(real);
    let from_real = Tree::from_dir(dir.path(), TreeOptions::default()).unwrap();
    assert_eq!(from_real.diff(&model.snapshot()), Vec::<String>::new());
}

#[test]
fn rename_file_over_file_replaces_it() {
    check(
        "create a\nwrite a 0 new\ncreate b\nwrite b 0 old\nrename a b",
        "/ dir 2\n/b file 1 \"new\"",
    );
}

#[test]
fn rename_onto_itself_and_onto_a_hard_link_changes_nothing() {
    check(
        "create a\nlink a b\nrename a a\nrename a b\nrename b a",
        "/ dir 2\n/a file 2 \"\"\n/b file 2 \"\" =/a",
    );
}

#[test]
fn rename_directory_over_directory_needs_it_empty() {
    check(
        "mkdir a\nmkdir b\nmkdir b/c\nrename a b -> ENOTEMPTY\nrmdir b/c\nmkdir a/x\nrename a b",
        "/ dir 3\n/b dir 3\n/b/x dir 2",
    );
}

#[test]
fn rename_mixes_of_file_and_directory() {
    check(
        "mkdir d\ncreate f\nrename d f -> ENOTDIR\nrename f d -> EISDIR\nrename f d/g\nrename d/g d/g/h -> ENOTDIR",
        "/ dir 3\n/d dir 2\n/d/g file 1 \"\"",
    );
}

#[test]
fn rename_into_own_subtree_is_einval() {
    check(
        "mkdir a\nmkdir a/b\nrename a a/b/c -> EINVAL\nrename a a/c -> EINVAL\nrename a/b a -> ENOTEMPTY",
        "/ dir 3\n/a dir 3\n/a/b dir 2",
    );
}

#[test]
fn rename_directory_to_new_parent_moves_its_link() {
    check(
        "mkdir a\nmkdir b\nmkdir a/x\nrename a/x b/x",
        "/ dir 4\n/a dir 2\n/b dir 3\n/b/x dir 2",
    );
}

#[test]
fn rename_flags() {
    check(
        "create a\nmkdir b\nrename a b noreplace -> EEXIST\nrename a a noreplace -> EEXIST\n\
         rename a c exchange -> ENOENT\nrename a b both -> EINVAL\nrename a b exchange\nmkdir a/s",
        "/ dir 3\n/a dir 3\n/a/s dir 2\n/b file 1 \"\"",
    );
}

#[test]
fn exchange_across_parents_moves_directory_links() {
    check(
        "mkdir p\nmkdir p/d\ncreate f\nrename p p/d exchange -> EINVAL\nrename p/d p exchange -> EINVAL\nrename p/d f exchange",
        "/ dir 4\n/f dir 2\n/p dir 2\n/p/d file 1 \"\"",
    );
}

#[test]
fn missing_and_non_directory_components() {
    check(
        "create f\nmkdir f/x -> ENOTDIR\nmkdir m/x -> ENOENT\nrename m f -> ENOENT\nrename f m/x -> ENOENT\n\
         unlink f/x -> ENOTDIR\nreaddir f -> ENOTDIR",
        "/ dir 2\n/f file 1 \"\"",
    );
}

#[test]
fn names_longer_than_255_bytes() {
    let long = "x".repeat(256);
    check(
        &format!("create {long} -> ENAMETOOLONG\nmkdir a\nrename a {long} -> ENAMETOOLONG\nmkdir {long}/a -> ENAMETOOLONG"),
        "/ dir 3\n/a dir 2",
    );
}

#[test]
fn link_rules() {
    check(
        "mkdir d\ncreate f\nlink d e -> EPERM\nlink f d -> EEXIST\nlink d f -> EEXIST\nlink m n -> ENOENT\n\
         link f d/g\nunlink f\nsymlink s ~t\nlink s t",
        "/ dir 3\n/d dir 2\n/d/g file 1 \"\"\n/s link 2 -> ~t\n/t link 2 -> ~t =/s",
    );
}

#[test]
fn unlink_and_rmdir_pick_their_kind() {
    check(
        "mkdir d\ncreate f\nunlink d -> EISDIR\nrmdir f -> ENOTDIR\nrmdir m -> ENOENT\ncreate d/x\nrmdir d -> ENOTEMPTY\nunlink d/x\nrmdir d",
        "/ dir 2\n/f file 1 \"\"",
    );
}

#[test]
fn unlinked_open_file_lives_until_closed() {
    check(
        "create f\nopen f\nunlink f\nwritefd 0 0 gone\ncreate f\nwrite f 2 x\nclose 0\nclose 0 -> EBADF",
        "/ dir 2\n/f file 1 \"\\0\\0x\"",
    );
}

#[test]
fn sparse_writes_and_truncate() {
    check(
        "create f\nwrite f 3 ab\ntruncate f 4\ntruncate f 6\nwrite f 0 z\nwrite f 9",
        "/ dir 2\n/f file 1 \"z\\0\\0a\\0\\0\"",
    );
}

#[test]
fn symlinks_dangle_and_are_not_followed() {
    check(
        "symlink s ~a\nwrite s 0 x -> ELOOP\ncreate s/x -> ENOENT\nchmod s 0 -> ENOENT\nreaddir s -> ENOENT\nrename s t",
        "/ dir 2\n/t link 1 -> ~a",
    );
}

#[test]
fn special_files_refuse_data_ops() {
    check(
        "mkfifo p\nmkchr c\nwrite p 0 x -> ENXIO\nopen c -> ENXIO\nread c 0 1 -> ENXIO\ntruncate p 0 -> ENXIO\nwrite / 0 x -> EISDIR",
        "/ dir 2\n/c special 1\n/p fifo 1",
    );
}

#[test]
fn empty_symlink_target_is_enoent() {
    let mut model = Model::new(0o755, common::me(), Limits::default());
    let op = Op::Symlink {
        path: Path::parse("e"),
        target: Vec::new(),
    };
    assert_eq!(model.apply(&op), Err(Errno::Enoent));
}

#[test]
fn link_limits_give_emlink() {
    let limits = Limits {
        file_link_max: 3,
        dir_link_max: 4,
        ..Limits::default()
    };
    let mut model = Model::new(0o755, common::me(), limits);
    let ops = [
        "create f",
        "link f g",
        "link f h",
        "link f i",
        "mkdir d",
        "mkdir e",
        "mkdir d/x",
        "mkdir d/y",
        "mkdir d/z",
        "rename e d/e",
        "rename d/x d/w",
        "rename d/x e/x",
    ];
    let e = Some(Errno::Emlink);
    let want = [
        None,
        None,
        None,
        e,
        None,
        None,
        None,
        None,
        e,
        e,
        None,
        Some(Errno::Enoent),
    ];
    for (line, want) in ops.iter().zip(want) {
        assert_eq!(model.apply(&parse(line).0).err(), want, "{line}");
        model.check();
    }
}

#[test]
fn an_empty_read_still_checks_the_file() {
    // pread of 0 bytes on a directory is EISDIR in the kernel, the same as a
    // longer read; on a file it is an empty success, at any offset.
    check(
        "mkdir d\ncreate f\nwrite f 0 abc\nread d 0 0 -> EISDIR\nread d 3056 0 -> EISDIR\nread d 0 10 -> EISDIR\nread f 0 0\nread f 100 0",
        "/ dir 3\n/d dir 2\n/f file 1 \"abc\"",
    );
}
