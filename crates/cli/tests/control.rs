//! The control interface through a real mount, from each library: the
//! C library (`libstitch`, installed by `scripts/install-libstitch.sh`
//! into a scratch prefix, its example built with the `pkg-config` file it
//! installs) and the Python package (`python/`, installed with `pip`). Each
//! asks the server's API version, syncs, and meets the misuse errnos this
//! interface can: a file system that is not stitchfs (`ENOTTY`), a call of
//! the table sent with another layout (`EINVAL`), an unknown call
//! (`ENOTTY`), a bad descriptor (`EBADF`). The three copies of the table
//! (Rust, `stitch.h`, the Python module) are held equal.
//!
//! Contexts, each library's own test program run as root on a fresh
//! mount (`crates/libstitch/tests/contexts.c`, `python/tests/control.py`,
//! each saying what it checks): both check what a process, a child, a
//! thread and a program after exec see, and every misuse errno, user
//! nobody's included; the Python one also an orphaned grandchild, a
//! process on a reused pid and writes with no caller. And the bound on
//! contexts through both, reached (`EAGAIN`) and freed by an exit.
//!
//! Patchgroups: libstitch's test program of them on a fresh mount, and a
//! C program using them crash-tested through a recording mount.

mod posix_support;

use posix_support::{
    python_site, repo_root, require_tool, run_logged as run, Scratch, JOURNAL_ORDERED,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// libstitch installed once for this test binary, by the documented
/// command, under a scratch prefix.
fn prefix() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("libstitch-prefix");
        let out = run(
            "install-libstitch.sh",
            Command::new(repo_root().join("scripts/install-libstitch.sh"))
                .arg(&dir)
                .env("CARGO", env!("CARGO")),
        );
        assert!(out.status.success(), "installing libstitch failed");
        dir
    })
}

/// The example program.
fn c_example() -> PathBuf {
    c_program(
        "stitch-example",
        &repo_root().join("crates/libstitch/c/example.c"),
    )
}

/// libstitch's test program of contexts, built once for this binary.
fn c_contexts() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    let src = repo_root().join("crates/libstitch/tests/contexts.c");
    EXE.get_or_init(|| c_program("contexts", &src)).clone()
}

/// A C program built from `src` with the flags the installed `stitch.pc`
/// gives (and `-pthread`).
fn c_program(name: &str, src: &Path) -> PathBuf {
    require_tool("cc", "gcc");
    require_tool("pkg-config", "pkgconf");
    let prefix = prefix();
    let pc = prefix.join("lib/pkgconfig");
    let flags = run(
        "pkg-config",
        Command::new("pkg-config")
            .args(["--cflags", "--libs", "stitch"])
            .env("PKG_CONFIG_PATH", &pc),
    );
    assert!(flags.status.success());
    let flags = String::from_utf8(flags.stdout).unwrap();
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let out = run(
        &format!("cc {}", src.display()),
        Command::new("cc")
            .args(["-Wall", "-Werror", "-pthread"])
            .arg(src)
            .args(flags.split_whitespace())
            .arg("-o")
            .arg(&exe),
    );
    assert!(out.status.success());
    exe
}

fn example_on(exe: &Path, path: &Path) -> Output {
    run(
        "stitch-example",
        Command::new(exe)
            .arg(path)
            .env("LD_LIBRARY_PATH", prefix().join("lib")),
    )
}

#[test]
fn the_c_library_asks_the_version_syncs_and_names_a_foreign_file_system() {
    let exe = c_example();
    let s = Scratch::new(JOURNAL_ORDERED, 64);
    s.with_mount(|mnt| {
        std::fs::write(mnt.join("f"), b"data").unwrap();
        let out = example_on(&exe, mnt);
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let version = format!("API version {}", stitch_control::API_VERSION);
        assert!(text.contains(&version) && text.contains("synced"), "{text}");
        // A file on the mount works as well as its root.
        assert!(example_on(&exe, &mnt.join("f")).status.success());
    });
    let out = example_on(&exe, Path::new(env!("CARGO_TARGET_TMPDIR")));
    assert_eq!(out.status.code(), Some(3), "ENOTTY off a stitchfs mount");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a stitchfs mount"));
}

/// Runs `script` with the Python package installed by pip into a scratch
/// directory (`--no-build-isolation`: setuptools from the machine).
fn python(script: &str, mnt: &Path) -> Output {
    python_with(&["-c", script], mnt)
}

/// Runs python3 with `args` as [`python`] does.
fn python_with(args: &[&str], mnt: &Path) -> Output {
    let site = python_site();
    run(
        "python3",
        Command::new("python3")
            .args(args)
            .env("PYTHONPATH", site)
            .env("STITCHFS_MOUNT", mnt)
            .env("FOREIGN", env!("CARGO_TARGET_TMPDIR")),
    )
}

/// libstitch's context test program (`crates/libstitch/tests/contexts.c`)
/// on a fresh mount, as root.
#[test]
fn contexts_through_the_c_library() {
    let exe = c_contexts();
    let s = Scratch::new(JOURNAL_ORDERED, 64);
    s.with_mount(|mnt| {
        let out = run(
            "contexts",
            Command::new(&exe)
                .arg(mnt)
                .arg(env!("CARGO_TARGET_TMPDIR"))
                .env("LD_LIBRARY_PATH", prefix().join("lib")),
        );
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("c ok"));
    });
}

/// libstitch's streams test program (`crates/libstitch/tests/streams.c`)
/// on a fresh mount, as root (the Python package's is in
/// `tests/streams.rs`).
#[test]
fn streams_through_the_c_library() {
    let exe = c_program(
        "streams",
        &repo_root().join("crates/libstitch/tests/streams.c"),
    );
    let s = Scratch::new(JOURNAL_ORDERED, 64);
    s.with_mount(|mnt| {
        let out = run(
            "streams",
            Command::new(&exe)
                .env("STITCHFS_MOUNT", mnt)
                .env("LD_LIBRARY_PATH", prefix().join("lib")),
        );
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("c streams ok"));
    });
}

/// libstitch's patchgroup test program
/// (`crates/libstitch/tests/patchgroups.c`) on a fresh mount, as root (the
/// Python package's and `stitchfs depend` are in `tests/patchgroups.rs`).
#[test]
fn patchgroups_through_the_c_library() {
    let exe = c_program(
        "patchgroups",
        &repo_root().join("crates/libstitch/tests/patchgroups.c"),
    );
    let s = Scratch::new(JOURNAL_ORDERED, 64);
    s.with_mount(|mnt| {
        let out = run(
            "patchgroups",
            Command::new(&exe)
                .arg(mnt)
                .env("LD_LIBRARY_PATH", prefix().join("lib")),
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("c patchgroups ok"),
            "{text}"
        );
        // Each misuse said what it was.
        assert!(text.contains("a sealed group, engaged: "), "{text}");
        assert!(text.contains("belongs to another user"), "{text}");
    });
}

/// A C program using libstitch's patchgroups, crash-tested through a
/// recording mount (`crashtest --workload-script`): each file copied and
/// its original removed in a group depending on the copy's never loses
/// both in soft updates; the same program without groups (the control)
/// does (`crates/libstitch/tests/pgcopy.c`).
#[test]
fn a_c_program_with_patchgroups_survives_every_sampled_crash() {
    let exe = c_program(
        "pgcopy",
        &repo_root().join("crates/libstitch/tests/pgcopy.c"),
    );
    let dir = tempfile::tempdir().unwrap();
    let lib = prefix().join("lib");
    let script = |name: &str, args: &str| {
        let p = dir.path().join(name);
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\nLD_LIBRARY_PATH={} exec {} {args}\n",
                lib.display(),
                exe.display()
            ),
        )
        .unwrap();
        Command::new("chmod").arg("+x").arg(&p).status().unwrap();
        p
    };
    let check = script("check.sh", "check");
    let inconsistent = |variant: &str| {
        let work = script(&format!("{variant}.sh"), &format!("workload {variant}"));
        let out = dir.path().join(format!("out-{variant}"));
        let o = run(
            "crashtest --workload-script",
            Command::new(env!("CARGO_BIN_EXE_stitchfs"))
                .args(["crashtest", "--workload-script"])
                .arg(&work)
                .arg("--checker-script")
                .arg(&check)
                .args(["--mode", "softupdates", "--sample", "40", "--seed", "1"])
                .arg("--out")
                .arg(&out),
        );
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        let row = &report[0];
        assert_eq!(row["states"].as_u64(), Some(40), "{row}");
        assert_eq!(row["checker_failed"].as_u64().unwrap_or(0), 0, "{row}");
        (
            o.status.code(),
            row["inconsistent"]["order"].as_u64().unwrap_or(0),
        )
    };
    assert_eq!(inconsistent("pg"), (Some(0), 0), "with patchgroups");
    let (code, lost) = inconsistent("plain");
    assert!(lost > 0 && code == Some(1), "the control lost nothing");
}

/// The Python package's test (`python/tests/control.py`) on a fresh
/// mount, as root; then what it wrote through a shared mapping (requests
/// with no caller) is read back after a remount.
#[test]
fn the_python_package_serves_the_table_and_refuses_misuse() {
    let s = Scratch::new(JOURNAL_ORDERED, 64);
    let script = repo_root().join("python/tests/control.py");
    s.with_mount(|mnt| {
        let out = python_with(&[script.to_str().unwrap()], mnt);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("python ok"));
    });
    s.with_mount(|mnt| {
        let data = std::fs::read(mnt.join("mapped")).unwrap();
        let (hello, world) = (&data[..5], &data[4096..4101]);
        assert_eq!((hello, world), (&b"hello"[..], &b"world"[..]));
    });
}

const PY_BOUND: &str = r#"
import errno, os, stitchfs
fd = os.open(os.environ["STITCHFS_MOUNT"], os.O_RDONLY)
stitchfs.set_tag(1, fd)
# A child takes the second context, inherited at its first request.
r, w = os.pipe()
go_r, go_w = os.pipe()
a = os.fork()
if a == 0:
    assert stitchfs.context(fd).inherited
    os.write(w, b"x")
    os.read(go_r, 1)
    os._exit(0)
os.read(r, 1)
def second_child():
    pid = os.fork()
    if pid == 0:
        try:
            c = stitchfs.context(fd)
            stitchfs.set_tag(2, fd)
        except stitchfs.StitchError as e:
            print(e)
            os._exit(0 if e.errno == errno.EAGAIN and not c.held else 1)
        os._exit(2 if stitchfs.context(fd).tag == 2 else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
assert second_child() == 0, "a third context past the bound of two"
os.write(go_w, b"x")
os.waitpid(a, 0)
assert second_child() == 2, "the exited child's context was not freed"
print("bound ok")
"#;

/// A mount bounded to two contexts refuses a third with `EAGAIN` (no
/// inheritance either, at the bound) and has room again once a process
/// holding one exits: from Python, then from C once the Python processes
/// are gone.
#[test]
fn a_mount_refuses_contexts_past_its_bound() {
    let exe = c_contexts();
    let mut s = Scratch::new(JOURNAL_ORDERED, 64);
    s.mount_args = vec!["--contexts".into(), "2".into()];
    s.with_mount(|mnt| {
        let out = python(PY_BOUND, mnt);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("bound ok"), "{text}");
        assert!(text.contains("limit of the mount"), "{text}");
        let out = run(
            "contexts --bound",
            Command::new(&exe)
                .arg("--bound")
                .arg(mnt)
                .env("LD_LIBRARY_PATH", prefix().join("lib")),
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("c bound ok"),
            "{text}"
        );
        assert!(text.contains("limit of the mount"), "{text}");
    });
}

/// The C header's and the Python module's numbers are the table's.
#[test]
fn the_three_copies_of_the_table_agree() {
    require_tool("cc", "gcc");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("numbers.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <stitch.h>\nint main(void){printf(\"%u %u %u %u %u %u %u %u %u %u %zu %zu %zu %zu %zu %zu %u %zu %u %u %u %u %u %u %u %zu %u %u %u\\n\", \
         STITCH_IOC_SYNC, STITCH_IOC_VERSION, STITCH_IOC_CONTEXT, STITCH_IOC_SET_TAG, \
         STITCH_IOC_SET_STREAM, STITCH_IOC_GET_STREAM, STITCH_IOC_STREAM_SYNC, STITCH_IOC_STATS, STITCH_IOC_GRAPH, \
         STITCH_API_VERSION, sizeof(struct stitch_version), sizeof(struct stitch_context), \
         sizeof(struct stitch_tag), sizeof(struct stitch_stream), sizeof(struct stitch_call), \
         sizeof(struct stitch_text), STITCH_IOC_PATCHGROUP, sizeof(struct stitch_group), \
         STITCH_PG_CREATE, STITCH_PG_DEPEND, STITCH_PG_ENGAGE, STITCH_PG_DISENGAGE, STITCH_PG_SYNC, \
         STITCH_PG_CLOSE, STITCH_IOC_XSYNC, sizeof(struct stitch_xsync), STITCH_XS_JOIN, \
         STITCH_XS_COMMIT, STITCH_XS_LEAVE);return 0;}\n",
    )
    .unwrap();
    let exe = dir.path().join("numbers");
    let out = run(
        "cc numbers.c",
        Command::new("cc")
            .arg(&src)
            .arg("-I")
            .arg(repo_root().join("crates/libstitch/include"))
            .arg("-o")
            .arg(&exe),
    );
    assert!(out.status.success());
    let c = String::from_utf8(run("numbers", &mut Command::new(&exe)).stdout).unwrap();
    let want = format!(
        "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}\n",
        stitch_control::IOC_SYNC,
        stitch_control::IOC_VERSION,
        stitch_control::IOC_CONTEXT,
        stitch_control::IOC_SET_TAG,
        stitch_control::IOC_SET_STREAM,
        stitch_control::IOC_GET_STREAM,
        stitch_control::IOC_STREAM_SYNC,
        stitch_control::IOC_STATS,
        stitch_control::IOC_GRAPH,
        stitch_control::API_VERSION,
        std::mem::size_of::<stitch_control::Version>(),
        std::mem::size_of::<stitch_control::Context>(),
        std::mem::size_of::<stitch_control::Tag>(),
        std::mem::size_of::<stitch_control::Stream>(),
        std::mem::size_of::<stitch_control::Call>(),
        std::mem::size_of::<stitch_control::Text>(),
        stitch_control::IOC_PATCHGROUP,
        std::mem::size_of::<stitch_control::Group>(),
        stitch_control::PG_CREATE,
        stitch_control::PG_DEPEND,
        stitch_control::PG_ENGAGE,
        stitch_control::PG_DISENGAGE,
        stitch_control::PG_SYNC,
        stitch_control::PG_CLOSE,
        stitch_control::IOC_XSYNC,
        std::mem::size_of::<stitch_control::Xsync>(),
        stitch_control::XS_JOIN,
        stitch_control::XS_COMMIT,
        stitch_control::XS_LEAVE,
    );
    assert_eq!(c, want, "stitch.h");
    let py = run(
        "python3",
        Command::new("python3")
            .args([
                "-c",
                "import stitchfs as s; \
                 print(s.IOC_SYNC, s.IOC_VERSION, s.IOC_CONTEXT, s.IOC_SET_TAG, \
                 s.IOC_SET_STREAM, s.IOC_GET_STREAM, s.IOC_STREAM_SYNC, s.IOC_STATS, s.IOC_GRAPH, \
                 s.API_VERSION, s._VERSION.size, s._CONTEXT.size, s._TAG.size, \
                 s._STREAM.size, s._CALL.size, s._TEXT.size, s.IOC_PATCHGROUP, s._GROUP.size, \
                 s.PG_CREATE, s.PG_DEPEND, s.PG_ENGAGE, s.PG_DISENGAGE, s.PG_SYNC, s.PG_CLOSE, \
                 s.IOC_XSYNC, s._XSYNC.size, s.XS_JOIN, s.XS_COMMIT, s.XS_LEAVE)",
            ])
            .env("PYTHONPATH", repo_root().join("python")),
    );
    assert_eq!(String::from_utf8(py.stdout).unwrap(), want, "python");
}
