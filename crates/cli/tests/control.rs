//! The control interface through a real mount, from each library: the
//! C library (`libstitch`, installed by `scripts/install-libstitch.sh`
//! into a scratch prefix, its example built with the `pkg-config` file it
//! installs) and the Python package (`python/`, installed with `pip`). Each
//! asks the server's API version, syncs, and meets the misuse errnos this
//! interface can: a file system that is not stitchfs (`ENOTTY`), a call of
//! the table sent with another layout (`EINVAL`), an unknown call
//! (`ENOTTY`), a bad descriptor (`EBADF`). The three copies of the table
//! (Rust, `stitch.h`, the Python module) are held equal.

mod posix_support;

use posix_support::{repo_root, require_tool, Scratch, JOURNAL_ORDERED};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn run(what: &str, cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    eprintln!(
        "{what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

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

/// The example program, built with the flags the installed `stitch.pc`
/// gives.
fn c_example() -> PathBuf {
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
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("stitch-example");
    let out = run(
        "cc example.c",
        Command::new("cc")
            .arg(repo_root().join("crates/libstitch/c/example.c"))
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
        assert!(
            text.contains("API version 1") && text.contains("synced"),
            "{text}"
        );
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
    require_tool("python3", "python3");
    static SITE: OnceLock<PathBuf> = OnceLock::new();
    let site = SITE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-site");
        let _ = std::fs::remove_dir_all(&dir);
        let out = run(
            "pip install python/",
            Command::new("python3")
                .args(["-m", "pip", "install", "-q", "--no-build-isolation"])
                .args(["--no-deps", "--target"])
                .arg(&dir)
                .arg(repo_root().join("python")),
        );
        assert!(out.status.success(), "pip install of the package failed");
        dir
    });
    run(
        "python3",
        Command::new("python3")
            .args(["-c", script])
            .env("PYTHONPATH", site)
            .env("STITCHFS_MOUNT", mnt)
            .env("FOREIGN", env!("CARGO_TARGET_TMPDIR")),
    )
}

const PY_CHECKS: &str = r#"
import errno, fcntl, os, stitchfs
assert stitchfs.version() == 1, stitchfs.version()
stitchfs.sync()
with open(os.path.join(os.environ["STITCHFS_MOUNT"], "f"), "wb") as f:
    f.write(b"x")
    stitchfs.sync(f)
def refused(call, want):
    try:
        call()
    except stitchfs.StitchError as e:
        assert e.errno == want, (e.errno, want)
        assert isinstance(e, OSError)
        return str(e)
    raise AssertionError("no error")
msg = refused(lambda: stitchfs.sync(os.environ["FOREIGN"]), errno.ENOTTY)
assert "not a stitchfs mount" in msg, msg
refused(lambda: stitchfs.version(987654), errno.EBADF)
fd = os.open(os.environ["STITCHFS_MOUNT"], os.O_RDONLY)
def raw(cmd, arg):
    try:
        fcntl.ioctl(fd, cmd, arg)
    except OSError as e:
        return e.errno
    return 0
# The version call with a 16-byte layout, and a number of ours unknown.
assert raw(0x8010F502, bytes(16)) == errno.EINVAL
assert raw(0x0000F5F0, 0) == errno.ENOTTY
print("python ok")
"#;

#[test]
fn the_python_package_asks_the_version_syncs_and_refuses_misuse() {
    let s = Scratch::new(JOURNAL_ORDERED, 64);
    s.with_mount(|mnt| {
        let out = python(PY_CHECKS, mnt);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("python ok"));
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
        "#include <stdio.h>\n#include <stitch.h>\nint main(void){printf(\"%u %u %u %zu\\n\", \
         STITCH_IOC_SYNC, STITCH_IOC_VERSION, STITCH_API_VERSION, \
         sizeof(struct stitch_version));return 0;}\n",
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
        "{} {} {} {}\n",
        stitch_control::IOC_SYNC,
        stitch_control::IOC_VERSION,
        stitch_control::API_VERSION,
        std::mem::size_of::<stitch_control::Version>()
    );
    assert_eq!(c, want, "stitch.h");
    let py = run(
        "python3",
        Command::new("python3")
            .args([
                "-c",
                "import stitchfs as s, struct; \
                 print(s.IOC_SYNC, s.IOC_VERSION, s.API_VERSION, s._VERSION.size)",
            ])
            .env("PYTHONPATH", repo_root().join("python")),
    );
    assert_eq!(String::from_utf8(py.stdout).unwrap(), want, "python");
}
