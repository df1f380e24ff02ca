//! File systems to benchmark side by side, each on storage made fresh for
//! every run in one scratch directory (so on the disk being measured):
//!
//! - the kernel's ext4 (each data mode, and `-o sync`) and ext2, on a loop
//!   device over an image file;
//! - `fuse2fs` over an ext4 image file (e2fsprogs' FUSE server; it does not
//!   write the journal);
//! - `bindfs`, a FUSE passthrough over a directory of the host file system;
//! - `fuse-floor`, the least a durable FUSE file system over an image does
//!   (`stitchfs bench floor-server`, [`stitch_floor`]): what any of them
//!   could reach on this machine, mounted as stitchfs is;
//! - stitchfs itself: `stitchfs mount IMAGE MNT --foreground` run as a child
//!   of this binary.
//!
//! A system also says how a workload's programs run on it ([`Launch`]): as
//! they are, with their fsyncs; in a stitchfs stream that ignores fsync
//! (`stitchfs run --stream`); under external synchrony (`stitchfs xsync`:
//! their fsyncs return at once, what they show the outside world is held
//! until it is durable); or with every fsync dropped (Debian's
//! `eatmydata`). Work the benchmark process does itself cannot be launched
//! so; a suite runs only its programs' workloads on such a system.
//!
//! A [`Mounted`] system gives [`Counters`]: this process's CPU time (the
//! workloads run in it, so a kernel file system's work shows here), the CPU
//! time of the FUSE server (`/proc/PID/stat`), what the file system wrote
//! (the loop device's `/sys/block/loopN/stat`, or the server's
//! `/proc/PID/io` `write_bytes`), and the host disk's writes and flushes
//! (its `/sys/dev/block/M:m/stat`, device-wide, so other activity on the
//! machine shows there too). Unmounting returns the final counts: for a
//! server, taken when it is reaped (`wait4`), after its last write.

use anyhow::{bail, ensure, Context};
use serde::Serialize;
use std::ffi::OsStr;
use std::fs::File;
use std::net::SocketAddr;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use stitch_control::mounts::unescape_mount_field;
use stitch_mkfs::{JournalSize, MkfsOptions, Preallocate};

/// One file system configuration.
#[derive(Debug)]
pub struct System {
    /// What `--systems` names it.
    pub id: &'static str,
    /// What tables call it.
    pub label: &'static str,
    kind: Kind,
    launch: Launch,
}

/// How a workload's programs run on a system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// As they are, with their fsyncs.
    Direct,
    /// In stitchfs stream [`STREAM`] with fsync ignoring: a command under
    /// `stitchfs run --stream bench --ignore-fsync`, which makes the stream
    /// durable when it exits; a program that can be told (the benchmarks'
    /// Python scripts) calls `setstream` and `streamsync` itself. Its
    /// fsyncs, fdatasyncs and `O_SYNC` writes only order.
    Stream,
    /// Under `stitchfs xsync --at ROOT`: the command and its descendants
    /// are one group on the mount; their fsyncs, fdatasyncs and `O_SYNC`
    /// writes return at once, while their stdout and stderr (and, for a
    /// server behind `--proxy`, the bytes it sends its clients) are held
    /// until everything the group changed before them is durable. The
    /// wrapper exits with the command's status once all of it is.
    Xsync,
    /// Under Debian's `eatmydata` (an `LD_PRELOAD` library that makes
    /// fsync, fdatasync, sync and `O_SYNC` no-ops): no durability and no
    /// order until the phase's final sync.
    NoFsync,
}

/// The stream a [`Launch::Stream`] system's programs run in.
pub const STREAM: &str = "bench";

impl Launch {
    /// A command running `program` as this launch does, on the mount whose
    /// root is `root` (its arguments follow).
    pub fn command(self, program: impl AsRef<OsStr>, root: &Path) -> anyhow::Result<Command> {
        Ok(match self {
            Launch::Direct => Command::new(program),
            Launch::Stream => {
                let mut cmd = Command::new(std::env::current_exe()?);
                cmd.args(["run", "--stream", STREAM, "--ignore-fsync", "--at"])
                    .arg(root)
                    .arg("--")
                    .arg(program);
                cmd
            }
            Launch::Xsync => xsync(program, root, None)?,
            Launch::NoFsync => {
                let mut cmd = Command::new(tool_path("eatmydata"));
                cmd.arg("--").arg(program);
                cmd
            }
        })
    }

    /// A command running the server `program` as this launch does, when
    /// it listens on `server`: the command, and the address its clients
    /// connect to. Under [`Launch::Xsync`] they connect to `front`, where
    /// xsync's proxy holds what the server sends until what it changed
    /// before sending is durable; otherwise straight to `server`.
    pub fn server_command(
        self,
        program: impl AsRef<OsStr>,
        root: &Path,
        front: SocketAddr,
        server: SocketAddr,
    ) -> anyhow::Result<(Command, SocketAddr)> {
        match self {
            Launch::Xsync => Ok((xsync(program, root, Some((front, server)))?, front)),
            other => Ok((other.command(program, root)?, server)),
        }
    }

    /// How a program ran, for messages: empty, or what wrapped it.
    pub fn describe(self) -> &'static str {
        match self {
            Launch::Direct => "",
            Launch::Stream => " (in stream `bench` under `stitchfs run --ignore-fsync`)",
            Launch::Xsync => " (under `stitchfs xsync`)",
            Launch::NoFsync => " (under eatmydata)",
        }
    }
}

/// `stitchfs xsync` (this binary's) running `program` in a group on the
/// mount at `root`, with a proxy from `proxy.0` to a server at `proxy.1`
/// if given; the program's arguments follow.
fn xsync(
    program: impl AsRef<OsStr>,
    root: &Path,
    proxy: Option<(SocketAddr, SocketAddr)>,
) -> anyhow::Result<Command> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("xsync");
    if let Some((front, server)) = proxy {
        cmd.arg("--proxy").arg(format!("{front}={server}"));
    }
    cmd.arg("--at").arg(root).arg("--").arg(program);
    Ok(cmd)
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// The kernel's driver on a loop device: the type (`mkfs.TYPE` makes
    /// it) and the mount options.
    Kernel {
        fstype: &'static str,
        options: &'static str,
    },
    Fuse2fs,
    Bindfs,
    /// The FUSE floor server.
    Floor {
        serving: Serving,
    },
    Stitchfs {
        consistency: &'static str,
        data: Option<&'static str>,
        /// `--order`, when not the default.
        order: Option<&'static str>,
        /// This process takes a context on the mount once it is up, so
        /// that the server resolves the caller of every request the
        /// workloads make in full (thread, process, context) instead of
        /// one atomic load: what the lookup costs when contexts are held.
        context: bool,
        serving: Serving,
        /// The image served by nbdkit's file plugin on a Unix socket and
        /// mounted by URI; `None`: the image file itself.
        nbd: Option<Nbd>,
    },
}

const fn kernel(
    id: &'static str,
    label: &'static str,
    fstype: &'static str,
    options: &'static str,
) -> System {
    System {
        id,
        label,
        kind: Kind::Kernel { fstype, options },
        launch: Launch::Direct,
    }
}

const fn stitchfs(
    id: &'static str,
    label: &'static str,
    consistency: &'static str,
    data: Option<&'static str>,
) -> System {
    System {
        id,
        label,
        kind: Kind::Stitchfs {
            consistency,
            data,
            order: None,
            context: false,
            serving: SERVING,
            nbd: None,
        },
        launch: Launch::Direct,
    }
}

/// How a FUSE server, stitchfs's or the floor's, takes its requests.
#[derive(Clone, Copy, Debug)]
struct Serving {
    /// Spinning on the device during bursts (`--spin`, on by default).
    spin: bool,
    /// OPEN and RELEASE sent for every file opened (`--open-requests`,
    /// off by default).
    open_requests: bool,
}

/// Both servers' defaults.
const SERVING: Serving = Serving {
    spin: true,
    open_requests: false,
};

impl Serving {
    /// The flags asking `stitchfs mount` or `stitchfs bench floor-server`
    /// for this.
    fn add_args(self, cmd: &mut Command) {
        if !self.spin {
            cmd.args(["--spin", "off"]);
        }
        if self.open_requests {
            cmd.args(["--open-requests", "on"]);
        }
    }
}

/// `system` (stitchfs or the floor) served as `serving` says.
const fn served(mut system: System, serving: Serving) -> System {
    match &mut system.kind {
        Kind::Floor { serving: s } | Kind::Stitchfs { serving: s, .. } => *s = serving,
        _ => {}
    }
    system
}

/// `system` with its programs run as `launch` runs them.
const fn launched(system: System, launch: Launch) -> System {
    System { launch, ..system }
}

/// The FUSE floor server.
const fn floor(id: &'static str, label: &'static str) -> System {
    System {
        id,
        label,
        kind: Kind::Floor { serving: SERVING },
        launch: Launch::Direct,
    }
}

/// How a system over NBD is served.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Nbd {
    /// Requests in flight (`STITCHFS_NBD_DEPTH`).
    depth: usize,
    /// Milliseconds nbdkit's delay filter adds to every read and write, as
    /// a network's round trip would (0: none, loopback as it is).
    delay_ms: u32,
}

/// stitchfs journal on its image served over NBD by nbdkit.
const fn over_nbd(id: &'static str, label: &'static str, depth: usize, delay_ms: u32) -> System {
    System {
        id,
        label,
        kind: Kind::Stitchfs {
            consistency: "journal",
            data: Some("ordered"),
            order: None,
            context: false,
            serving: SERVING,
            nbd: Some(Nbd { depth, delay_ms }),
        },
        launch: Launch::Direct,
    }
}

/// Every system `--systems` can name.
pub const SYSTEMS: [System; 28] = [
    stitchfs("stitchfs", "stitchfs journal", "journal", Some("ordered")),
    over_nbd(
        "stitchfs-nbd",
        "stitchfs journal over NBD (nbdkit, 16 in flight)",
        stitch_blockdev::nbd::DEFAULT_DEPTH,
        0,
    ),
    over_nbd(
        "stitchfs-nbd-depth1",
        "stitchfs journal over NBD (nbdkit, 1 in flight)",
        1,
        0,
    ),
    over_nbd(
        "stitchfs-nbd-1ms",
        "stitchfs journal over NBD, 1 ms per request (16 in flight)",
        stitch_blockdev::nbd::DEFAULT_DEPTH,
        1,
    ),
    over_nbd(
        "stitchfs-nbd-1ms-depth1",
        "stitchfs journal over NBD, 1 ms per request (1 in flight)",
        1,
        1,
    ),
    System {
        id: "stitchfs-precise",
        label: "stitchfs journal, precise fsync",
        kind: Kind::Stitchfs {
            consistency: "journal",
            data: Some("ordered"),
            order: Some("precise"),
            context: false,
            serving: SERVING,
            nbd: None,
        },
        launch: Launch::Direct,
    },
    System {
        id: "stitchfs-context",
        label: "stitchfs journal, caller holding a context",
        kind: Kind::Stitchfs {
            consistency: "journal",
            data: Some("ordered"),
            order: None,
            context: true,
            serving: SERVING,
            nbd: None,
        },
        launch: Launch::Direct,
    },
    served(
        stitchfs(
            "stitchfs-nospin",
            "stitchfs journal, never spinning",
            "journal",
            Some("ordered"),
        ),
        Serving {
            spin: false,
            ..SERVING
        },
    ),
    served(
        stitchfs(
            "stitchfs-open",
            "stitchfs journal, sent opens and releases",
            "journal",
            Some("ordered"),
        ),
        Serving {
            open_requests: true,
            ..SERVING
        },
    ),
    launched(
        stitchfs(
            "stitchfs-stream",
            "stitchfs journal, stream ignoring fsync",
            "journal",
            Some("ordered"),
        ),
        Launch::Stream,
    ),
    launched(
        stitchfs(
            "stitchfs-xsync",
            "stitchfs journal, under xsync",
            "journal",
            Some("ordered"),
        ),
        Launch::Xsync,
    ),
    stitchfs(
        "stitchfs-softupdates",
        "stitchfs softupdates",
        "softupdates",
        None,
    ),
    launched(
        stitchfs(
            "stitchfs-softupdates-stream",
            "stitchfs softupdates, stream ignoring fsync",
            "softupdates",
            None,
        ),
        Launch::Stream,
    ),
    stitchfs(
        "stitchfs-writeback",
        "stitchfs data=writeback",
        "journal",
        Some("writeback"),
    ),
    stitchfs(
        "stitchfs-data-journal",
        "stitchfs data=journal",
        "journal",
        Some("journal"),
    ),
    stitchfs("stitchfs-async", "stitchfs async", "async", None),
    launched(
        stitchfs(
            "stitchfs-ceiling",
            "stitchfs async, fsyncs dropped",
            "async",
            None,
        ),
        Launch::NoFsync,
    ),
    kernel("ext4", "ext4 data=ordered", "ext4", "data=ordered"),
    kernel(
        "ext4-writeback",
        "ext4 data=writeback",
        "ext4",
        "data=writeback",
    ),
    kernel("ext4-journal", "ext4 data=journal", "ext4", "data=journal"),
    kernel("ext4-sync", "ext4 -o sync", "ext4", "sync"),
    kernel("ext2", "ext2", "ext2", ""),
    System {
        id: "fuse2fs",
        label: "fuse2fs",
        kind: Kind::Fuse2fs,
        launch: Launch::Direct,
    },
    System {
        id: "bindfs",
        label: "bindfs",
        kind: Kind::Bindfs,
        launch: Launch::Direct,
    },
    floor("fuse-floor", "FUSE floor"),
    served(
        floor("fuse-floor-nospin", "FUSE floor, never spinning"),
        Serving {
            spin: false,
            ..SERVING
        },
    ),
    served(
        floor("fuse-floor-open", "FUSE floor, sent opens and releases"),
        Serving {
            open_requests: true,
            ..SERVING
        },
    ),
    launched(
        floor("fuse-floor-nofsync", "FUSE floor, fsyncs dropped"),
        Launch::NoFsync,
    ),
];

/// The systems named by a comma-separated list of ids (`all` for every one).
pub fn select(list: &str) -> anyhow::Result<Vec<&'static System>> {
    if list == "all" {
        return Ok(SYSTEMS.iter().collect());
    }
    list.split(',')
        .map(|id| {
            SYSTEMS.iter().find(|s| s.id == id.trim()).with_context(|| {
                let ids: Vec<&str> = SYSTEMS.iter().map(|s| s.id).collect();
                format!("no system {id:?} (known: {}, or all)", ids.join(", "))
            })
        })
        .collect()
}

/// The id or label of a system under test spelled `name`, as the
/// benchmark's own string.
pub fn named(name: &str) -> Option<&'static str> {
    SYSTEMS
        .iter()
        .flat_map(|s| [s.id, s.label])
        .find(|&known| known == name)
}

/// Where a system's storage and mount point go: one directory on the disk
/// being measured.
pub struct Place {
    dir: PathBuf,
}

impl Place {
    pub fn new(dir: &Path) -> anyhow::Result<Place> {
        let dir = dir
            .canonicalize()
            .with_context(|| format!("{}", dir.display()))?;
        Ok(Place { dir })
    }

    fn image(&self) -> PathBuf {
        self.dir.join("fs.img")
    }

    fn mnt(&self) -> PathBuf {
        self.dir.join("mnt")
    }

    /// bindfs's source directory.
    fn src(&self) -> PathBuf {
        self.dir.join("src")
    }

    fn log(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.log"))
    }
}

const SETUP_HINT: &str = "or run scripts/setup-bench.sh";

impl System {
    /// Why this system cannot run here, with what to install; `None` when
    /// it can.
    pub fn missing(&self) -> Option<String> {
        let fuse = || -> Option<String> {
            if !Path::new("/dev/fuse").exists() {
                return Some("/dev/fuse is missing (FUSE is not available here)".into());
            }
            if tool("fusermount3").is_none() {
                return Some(format!(
                    "fusermount3 not installed: apt-get install fuse3 ({SETUP_HINT})"
                ));
            }
            None
        };
        let installed = |bin: &str, package: &str| {
            tool(bin)
                .is_none()
                .then(|| format!("{bin} not installed: apt-get install {package} ({SETUP_HINT})"))
        };
        let launcher = match self.launch {
            Launch::NoFsync => tool("eatmydata").is_none().then(|| {
                "eatmydata not installed: apt-get install eatmydata (or run scripts/setup.sh)"
                    .to_string()
            }),
            Launch::Xsync => own_subcommand(&["xsync"]),
            // Refused per workload, with what `stitchfs run` or
            // `setstream` said, if this build has no streams.
            Launch::Direct | Launch::Stream => None,
        };
        let system = match self.kind {
            Kind::Kernel { fstype, .. } => {
                if !is_root() {
                    return Some("needs root (loop devices and mount)".into());
                }
                installed(&format!("mkfs.{fstype}"), "e2fsprogs")
                    .or_else(|| installed("losetup", "mount"))
            }
            Kind::Fuse2fs => installed("fuse2fs", "fuse2fs")
                .or_else(|| installed("mkfs.ext4", "e2fsprogs"))
                .or_else(fuse),
            Kind::Bindfs => installed("bindfs", "bindfs").or_else(fuse),
            Kind::Stitchfs { nbd: Some(_), .. } => installed("nbdkit", "nbdkit")
                .or_else(fuse)
                .or_else(|| own_subcommand(&["mount"])),
            Kind::Stitchfs { .. } => fuse().or_else(|| own_subcommand(&["mount"])),
            Kind::Floor { .. } => fuse().or_else(|| own_subcommand(&["bench", "floor-server"])),
        };
        system.or(launcher)
    }

    /// How a workload's programs run on this system.
    pub fn launch(&self) -> Launch {
        self.launch
    }

    /// For a stitchfs mount, its `--consistency` (journal, softupdates,
    /// async); `None` for every other system, whose control calls
    /// (patchgroups among them) answer ENOTTY.
    pub fn stitchfs_consistency(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Stitchfs { consistency, .. } => Some(consistency),
            _ => None,
        }
    }

    /// Makes fresh storage: a new image of `bytes` (or, for bindfs, an
    /// empty source directory), and an empty mount point.
    pub fn format(&self, place: &Place, bytes: u64) -> anyhow::Result<()> {
        let (img, src, mnt) = (place.image(), place.src(), place.mnt());
        for dir in [&src, &mnt] {
            if dir.exists() {
                std::fs::remove_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
            }
        }
        std::fs::create_dir(&mnt)?;
        if img.exists() {
            std::fs::remove_file(&img)?;
        }
        match self.kind {
            Kind::Kernel { fstype, .. } => mke2fs(&format!("mkfs.{fstype}"), &img, bytes),
            Kind::Fuse2fs => mke2fs("mkfs.ext4", &img, bytes),
            Kind::Bindfs => Ok(std::fs::create_dir(&src)?),
            Kind::Floor { .. } => {
                let saved = stitch_floor::saved(&img);
                if saved.exists() {
                    std::fs::remove_file(&saved)?;
                }
                Ok(File::create(&img)?.set_len(bytes)?)
            }
            Kind::Stitchfs { consistency, .. } => {
                let opts = MkfsOptions {
                    size: Some(bytes),
                    journal: (consistency == "journal").then_some(JournalSize::Default),
                    force: true,
                    // As the kernel's and fuse2fs's images get from mke2fs
                    // (`lazy_itable_init=0,lazy_journal_init=0`).
                    preallocate: Preallocate::Metadata,
                };
                stitch_mkfs::mkfs(&img, &opts, &mut |_, _| {})?;
                Ok(())
            }
        }
    }

    /// Mounts what [`System::format`] made.
    pub fn mount(&self, place: &Place) -> anyhow::Result<Mounted> {
        let (img, mnt) = (place.image(), place.mnt());
        let mut m = Mounted {
            label: self.label,
            mnt: mnt.clone(),
            server: None,
            nbd: None,
            loopdev: None,
            disk: disk_stat_path(&place.dir),
            done: false,
        };
        match self.kind {
            Kind::Kernel { fstype, options } => {
                let dev = output(
                    Command::new(tool_path("losetup"))
                        .args(["--find", "--show"])
                        .arg(&img),
                )?;
                let dev = dev.trim().to_string();
                m.loopdev = Some(dev.clone());
                let mut cmd = Command::new("mount");
                cmd.args(["-t", fstype]);
                if !options.is_empty() {
                    cmd.args(["-o", options]);
                }
                output(cmd.arg(&dev).arg(&mnt))?;
            }
            Kind::Fuse2fs => {
                let mut cmd = Command::new(tool_path("fuse2fs"));
                // allow_other: other users reach the mount (the IMAP
                // server's mail processes run as `mail`).
                cmd.arg(&img).arg(&mnt).args(["-f", "-o", "allow_other"]);
                m.server = Some(Server::start(cmd, place.log(self.id), &mnt)?);
            }
            Kind::Bindfs => {
                let mut cmd = Command::new(tool_path("bindfs"));
                cmd.arg("-f").arg(place.src()).arg(&mnt);
                m.server = Some(Server::start(cmd, place.log(self.id), &mnt)?);
            }
            Kind::Floor { serving } => {
                let mut cmd = Command::new(std::env::current_exe()?);
                cmd.args(["bench", "floor-server"])
                    .arg(&img)
                    .arg(&mnt)
                    .args(["-o", "allow_other"]);
                serving.add_args(&mut cmd);
                m.server = Some(Server::start(cmd, place.log(self.id), &mnt)?);
            }
            Kind::Stitchfs {
                consistency,
                data,
                order,
                context,
                serving,
                nbd,
            } => {
                let mut cmd = Command::new(std::env::current_exe()?);
                let source = match nbd {
                    Some(Nbd { depth, delay_ms }) => {
                        let (child, uri) = serve_nbd(&img, &place.dir, delay_ms)?;
                        m.nbd = Some(child);
                        cmd.env("STITCHFS_NBD_DEPTH", depth.to_string());
                        std::ffi::OsString::from(uri)
                    }
                    None => img.clone().into_os_string(),
                };
                cmd.arg("mount").arg(&source).arg(&mnt).args([
                    "--foreground",
                    "-o",
                    "allow_other",
                    "--consistency",
                    consistency,
                ]);
                if let Some(d) = data {
                    cmd.args(["--data", d]);
                }
                if let Some(o) = order {
                    cmd.args(["--order", o]);
                }
                serving.add_args(&mut cmd);
                m.server = Some(Server::start(cmd, place.log(self.id), &mnt)?);
                if context {
                    let root = File::open(&mnt)?;
                    let held = stitch_control::request_set_tag(&root, 1)
                        .context("taking a context on the mount")?;
                    ensure!(held, "{} is not a stitchfs mount", mnt.display());
                }
            }
        }
        Ok(m)
    }
}

/// nbdkit's file plugin serving `img` on a Unix socket in `dir` (short
/// enough for a socket path), each read and write held `delay_ms` by the
/// delay filter when not 0; and the URI that reaches it.
fn serve_nbd(
    img: &Path,
    dir: &Path,
    delay_ms: u32,
) -> anyhow::Result<(std::process::Child, String)> {
    let socket = dir.join("nbd.sock");
    anyhow::ensure!(
        socket.as_os_str().len() < 100,
        "{} is too long for a socket path",
        socket.display()
    );
    let _ = std::fs::remove_file(&socket);
    let mut cmd = Command::new(tool_path("nbdkit"));
    cmd.args(["--foreground", "--exit-with-parent", "--unix"])
        .arg(&socket);
    if delay_ms > 0 {
        cmd.arg("--filter=delay");
    }
    cmd.arg("file").arg(format!("file={}", img.display()));
    if delay_ms > 0 {
        cmd.arg(format!("delay-read={delay_ms}ms"))
            .arg(format!("delay-write={delay_ms}ms"));
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .context("starting nbdkit")?;
    let t0 = std::time::Instant::now();
    while !socket.exists() {
        if t0.elapsed() > Duration::from_secs(20) || child.try_wait()?.is_some() {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("nbdkit did not open {}", socket.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((child, format!("nbd+unix:///?socket={}", socket.display())))
}

/// Why this binary cannot serve a system: it lacks the subcommand `args`
/// (`None` when `args --help` works).
fn own_subcommand(args: &[&str]) -> Option<String> {
    let works = std::env::current_exe().ok().is_some_and(|exe| {
        Command::new(exe)
            .args(args)
            .arg("--help")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    (!works).then(|| {
        format!(
            "this stitchfs binary has no `{}` subcommand",
            args.join(" ")
        )
    })
}

/// `mkfs.ext4`/`mkfs.ext2` of a new sparse image, 4 KiB blocks, with the
/// inode tables and journal written now, so no lazy initialization writes
/// in the background while a workload runs.
fn mke2fs(mkfs: &str, img: &Path, bytes: u64) -> anyhow::Result<()> {
    File::create(img)?.set_len(bytes)?;
    let ext = if mkfs.ends_with('2') {
        "lazy_itable_init=0"
    } else {
        "lazy_itable_init=0,lazy_journal_init=0"
    };
    output(
        Command::new(tool_path(mkfs))
            .args(["-q", "-F", "-b", "4096", "-E", ext])
            .arg(img),
    )?;
    Ok(())
}

/// A running FUSE server, our child.
struct Server {
    child: Child,
    log: PathBuf,
}

impl Server {
    /// Starts `cmd` (stderr and stdout to `log`) and waits until `mnt`
    /// shows in /proc/self/mounts.
    fn start(mut cmd: Command, log: PathBuf, mnt: &Path) -> anyhow::Result<Server> {
        let out = File::create(&log)?;
        let program = cmd.get_program().to_string_lossy().into_owned();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {program}"))?;
        let mut s = Server { child, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !is_mounted(mnt)? {
            if let Some(status) = s.child.try_wait()? {
                bail!(
                    "{program} exited ({status}) before mounting{}",
                    s.log_tail()
                );
            }
            if Instant::now() > deadline {
                s.kill();
                bail!(
                    "{program} did not mount {} within 60 s{}",
                    mnt.display(),
                    s.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(s)
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// SIGKILL to our child (it stays a zombie until reaped).
    fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// The last lines the server printed, as a suffix for an error.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n  ");
        if tail.is_empty() {
            String::new()
        } else {
            format!("; its output ({}):\n  {tail}", self.log.display())
        }
    }

    /// Reaps the server within `limit` (killing it after that): its exit
    /// status, total CPU seconds and bytes written.
    fn reap(&mut self, limit: Duration) -> anyhow::Result<(i32, f64, u64)> {
        let deadline = Instant::now() + limit;
        let mut killed = false;
        loop {
            let mut status = 0;
            // SAFETY: wait4 only writes into the status and rusage we pass.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            let pid = unsafe { libc::wait4(self.pid(), &mut status, libc::WNOHANG, &mut ru) };
            if pid == self.pid() {
                if killed {
                    bail!(
                        "the server did not exit within {} s of the unmount and was killed{}",
                        limit.as_secs(),
                        self.log_tail()
                    );
                }
                let cpu = seconds(ru.ru_utime) + seconds(ru.ru_stime);
                return Ok((status, cpu, ru.ru_oublock as u64 * 512));
            }
            ensure!(pid == 0, "wait4: {}", std::io::Error::last_os_error());
            if !killed && Instant::now() > deadline {
                self.kill();
                killed = true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn seconds(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6
}

/// A mounted system. Unmount it with [`Mounted::unmount`]; dropped while
/// mounted (an error on the way), it is unmounted lazily and its server
/// killed.
pub struct Mounted {
    label: &'static str,
    mnt: PathBuf,
    server: Option<Server>,
    /// nbdkit serving the image, for a system over NBD: stopped after the
    /// mount's server has exited.
    nbd: Option<std::process::Child>,
    /// `/dev/loopN`, for a kernel file system.
    loopdev: Option<String>,
    /// The host disk's stat file.
    disk: Option<PathBuf>,
    done: bool,
}

/// Counts at one moment, to subtract.
#[derive(Clone, Debug)]
pub struct Counters {
    client_cpu: f64,
    server_cpu: Option<f64>,
    fs_written: Option<u64>,
    fs_flushes: Option<u64>,
    disk: Option<DiskStat>,
    /// FUSE requests served so far, by opcode (a stitchfs server's own
    /// count, `stitchfs stats`).
    requests: Option<Requests>,
}

/// FUSE requests by opcode.
pub type Requests = std::collections::BTreeMap<String, u64>;

#[derive(Clone, Copy, Debug)]
struct DiskStat {
    written: u64,
    flushes: u64,
}

/// What happened between two [`Counters`].
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct Usage {
    /// CPU seconds of the benchmark process and the tools it ran (the
    /// workload, and the kernel's file system work done in its system
    /// calls).
    pub client_cpu: f64,
    /// CPU seconds of the FUSE server.
    pub server_cpu: Option<f64>,
    /// Bytes the file system wrote: the loop device's, or the server's
    /// `write_bytes`.
    pub fs_bytes_written: Option<u64>,
    /// Flushes the loop device received.
    pub fs_flushes: Option<u64>,
    /// The host disk's written bytes and flushes (device-wide).
    pub disk_bytes_written: Option<u64>,
    pub disk_flushes: Option<u64>,
    /// FUSE requests a stitchfs server served, by opcode (up to its
    /// unmount; reading the counts costs three: an opendir, the ioctl and
    /// a releasedir).
    #[serde(default)]
    pub requests: Option<Requests>,
}

impl Usage {
    /// All FUSE requests counted.
    pub fn requests_total(&self) -> Option<u64> {
        Some(self.requests.as_ref()?.values().sum())
    }
}

impl Counters {
    pub fn since(&self, before: &Counters) -> Usage {
        let d = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
        Usage {
            client_cpu: self.client_cpu - before.client_cpu,
            server_cpu: self.server_cpu.zip(before.server_cpu).map(|(a, b)| a - b),
            fs_bytes_written: d(self.fs_written, before.fs_written),
            fs_flushes: d(self.fs_flushes, before.fs_flushes),
            disk_bytes_written: d(self.disk.map(|s| s.written), before.disk.map(|s| s.written)),
            disk_flushes: d(self.disk.map(|s| s.flushes), before.disk.map(|s| s.flushes)),
            requests: self
                .requests
                .as_ref()
                .zip(before.requests.as_ref())
                .map(|(a, b)| {
                    a.iter()
                        .map(|(op, n)| {
                            (
                                op.clone(),
                                n.saturating_sub(b.get(op).copied().unwrap_or(0)),
                            )
                        })
                        .filter(|(_, n)| *n > 0)
                        .collect()
                }),
        }
    }
}

/// The FUSE requests a stitchfs server at `mnt` has served, by opcode
/// (`None` for any other file system, or when they cannot be read).
fn served_requests(mnt: &Path) -> Option<Requests> {
    let root = File::open(mnt).ok()?;
    let text = stitch_control::request_stats(&root).ok()??;
    let stats: serde_json::Value = serde_json::from_str(&text).ok()?;
    let by_op = stats.get("requests")?.as_object()?;
    Some(
        by_op
            .iter()
            .filter_map(|(op, v)| Some((op.clone(), v.get("count")?.as_u64()?)))
            .collect(),
    )
}

impl Mounted {
    /// The counts now.
    pub fn counters(&self) -> Counters {
        let (fs_written, fs_flushes) = match &self.loopdev {
            Some(dev) => match block_stat(&sys_block_stat(dev)) {
                Some(s) => (Some(s.written), Some(s.flushes)),
                None => (None, None),
            },
            None => (
                self.server.as_ref().and_then(|s| proc_write_bytes(s.pid())),
                None,
            ),
        };
        Counters {
            client_cpu: cpu_with_children(),
            server_cpu: self.server.as_ref().and_then(|s| proc_cpu(s.pid())),
            fs_written,
            fs_flushes,
            disk: self.disk.as_deref().and_then(block_stat),
            requests: self
                .server
                .as_ref()
                .and_then(|_| served_requests(&self.mnt)),
        }
    }

    /// Runs `f` on the mount; if it takes longer than `limit`, the FUSE
    /// server is killed, which makes the stuck calls fail (ENOTCONN), and
    /// the error says so.
    pub fn watched<T>(
        &self,
        limit: Duration,
        f: impl FnOnce(&Path) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let fired = Arc::new(AtomicBool::new(false));
        let (done, wait) = mpsc::channel::<()>();
        let pid = self.server.as_ref().map(Server::pid);
        let dog = {
            let fired = fired.clone();
            std::thread::spawn(move || {
                if let (Err(mpsc::RecvTimeoutError::Timeout), Some(pid)) =
                    (wait.recv_timeout(limit), pid)
                {
                    fired.store(true, Ordering::SeqCst);
                    // SAFETY: kill has no memory effects; `pid` is our
                    // child, not reaped before this thread is joined.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            })
        };
        let r = f(&self.mnt);
        let _ = done.send(());
        let _ = dog.join();
        if fired.load(Ordering::SeqCst) {
            bail!(
                "{} hung: the phase did not end within {} s, server killed{}",
                self.label,
                limit.as_secs(),
                self.server.as_ref().map_or(String::new(), Server::log_tail)
            );
        }
        r.map_err(|e| match self.died() {
            Some(why) => e.context(why),
            None => e,
        })
    }

    /// Whether the server has gone (crashed), and how.
    fn died(&self) -> Option<String> {
        let s = self.server.as_ref()?;
        let path = format!("/proc/{}/stat", s.pid());
        let state = std::fs::read_to_string(path).ok()?;
        let state = state.rsplit_once(')')?.1.split_whitespace().next()?;
        (state == "Z").then(|| format!("{} server exited{}", self.label, s.log_tail()))
    }

    /// Unmounts and returns the counts after the file system's last write
    /// (a server: when it has exited; a loop device: after umount).
    pub fn unmount(mut self) -> anyhow::Result<Counters> {
        self.done = true;
        if let Some(dev) = self.loopdev.take() {
            retry_unmount(&["umount"], &self.mnt)?;
            let c = self.counters_with(&dev);
            output(Command::new(tool_path("losetup")).arg("-d").arg(&dev))?;
            return Ok(c);
        }
        // The last counts of requests, before the unmount (the server is
        // gone after it).
        let requests = self
            .server
            .as_ref()
            .and_then(|_| served_requests(&self.mnt));
        let mut server = self.server.take();
        let r = retry_unmount(
            &[
                tool_path("fusermount3").to_str().unwrap_or("fusermount3"),
                "-u",
            ],
            &self.mnt,
        );
        if r.is_err() {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        let mut c = self.counters();
        c.requests = requests;
        if let Some(s) = &mut server {
            let (status, cpu, written) = s.reap(Duration::from_secs(300))?;
            c.server_cpu = Some(cpu);
            c.fs_written = Some(written);
            c.disk = self.disk.as_deref().and_then(block_stat);
            ensure!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "{} server ended with {}{}",
                self.label,
                wait_status(status),
                s.log_tail()
            );
        }
        if let Some(mut n) = self.nbd.take() {
            let _ = n.kill();
            let _ = n.wait();
        }
        r?;
        Ok(c)
    }

    fn counters_with(&self, dev: &str) -> Counters {
        let mut c = self.counters();
        if let Some(s) = block_stat(&sys_block_stat(dev)) {
            c.fs_written = Some(s.written);
            c.fs_flushes = Some(s.flushes);
        }
        c
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(s) = &mut self.server {
            s.kill();
        }
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.mnt)
            .stderr(Stdio::null())
            .status();
        if let Some(s) = &mut self.server {
            let _ = s.child.wait();
        }
        if let Some(n) = &mut self.nbd {
            let _ = n.kill();
            let _ = n.wait();
        }
        if let Some(dev) = &self.loopdev {
            let _ = Command::new(tool_path("losetup"))
                .arg("-d")
                .arg(dev)
                .status();
        }
    }
}

fn wait_status(status: i32) -> String {
    if libc::WIFSIGNALED(status) {
        format!("signal {}", libc::WTERMSIG(status))
    } else {
        format!("exit code {}", libc::WEXITSTATUS(status))
    }
}

/// `umount`/`fusermount3 -u`, retried while the mount is busy for a moment.
/// A process still using the mount after two seconds (a tool's detached
/// child, e.g. `git gc --auto`) is killed, and said so, so that one
/// workload's leftovers do not fail every system after it.
fn retry_unmount(cmd: &[&str], mnt: &Path) -> anyhow::Result<()> {
    let mut last = String::new();
    for attempt in 0..100 {
        let out = Command::new(cmd[0]).args(&cmd[1..]).arg(mnt).output()?;
        if out.status.success() {
            return Ok(());
        }
        last = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if attempt == 40 {
            for (pid, comm) in users_of(mnt) {
                eprintln!(
                    "bench: {} still in use by process {pid} ({comm}) after the workload; killing it",
                    mnt.display()
                );
                // SAFETY: kill has no memory effects.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("{} {}: {last}", cmd.join(" "), mnt.display())
}

/// Processes (other than this one) whose working directory, root or an
/// open file is under `mnt`, with their command names. Reads only
/// /proc's links, which never call into the file system.
pub fn users_of(mnt: &Path) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let under = |link: PathBuf| std::fs::read_link(link).is_ok_and(|t| t.starts_with(mnt));
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let dir = p.path();
        let uses = under(dir.join("cwd"))
            || under(dir.join("root"))
            || std::fs::read_dir(dir.join("fd"))
                .map(|fds| fds.flatten().any(|fd| under(fd.path())))
                .unwrap_or(false);
        if uses {
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            found.push((pid, comm.trim().to_string()));
        }
    }
    found
}

/// Whether `mnt` is a mount point now (/proc/self/mounts, octal escapes
/// undone).
pub fn is_mounted(mnt: &Path) -> anyhow::Result<bool> {
    let table = std::fs::read_to_string("/proc/self/mounts")?;
    let want = mnt.to_string_lossy();
    Ok(table
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .any(|p| unescape_mount_field(p) == want))
}

/// Runs `cmd`; its stdout, or an error with its stderr.
fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let what = format!("{cmd:?}");
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    ensure!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Where `name` is installed (PATH, and the sbin directories a non-root
/// PATH lacks).
pub(crate) fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn tool_path(name: &str) -> PathBuf {
    tool(name).unwrap_or_else(|| PathBuf::from(name))
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Writes back everything dirty and drops the page, dentry and inode
/// caches (needs root; false if they could not be dropped).
pub fn drop_caches() -> bool {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

fn sys_block_stat(dev: &str) -> PathBuf {
    let name = dev.trim_start_matches("/dev/");
    PathBuf::from(format!("/sys/block/{name}/stat"))
}

/// The stat file of the block device holding `dir`, if it is on one.
fn disk_stat_path(dir: &Path) -> Option<PathBuf> {
    let dev = std::fs::metadata(dir).ok()?.dev();
    // SAFETY: major/minor are pure arithmetic.
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let p = PathBuf::from(format!("/sys/dev/block/{major}:{minor}/stat"));
    (major != 0 && p.exists()).then_some(p)
}

/// The name of the block device holding `dir` (`vda`), if any.
pub fn disk_name(dir: &Path) -> Option<String> {
    let stat = disk_stat_path(dir)?;
    let link = std::fs::canonicalize(stat.parent()?).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

/// Written sectors (field 7) and flushes (field 16) of a block stat file.
fn block_stat(path: &Path) -> Option<DiskStat> {
    let text = std::fs::read_to_string(path).ok()?;
    let f: Vec<u64> = text
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    Some(DiskStat {
        written: f.get(6)? * 512,
        flushes: f.get(15).copied().unwrap_or(0),
    })
}

/// CPU seconds of this process and of its children that have been waited
/// for (the tools a workload runs: tar, postmark, sqlite3, git, make; a
/// FUSE server only once reaped, after the counts of its mount are taken).
fn cpu_with_children() -> f64 {
    [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN]
        .iter()
        .map(|&who| {
            // SAFETY: getrusage only writes into the struct we pass.
            let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
            unsafe { libc::getrusage(who, &mut ru) };
            seconds(ru.ru_utime) + seconds(ru.ru_stime)
        })
        .sum()
}

/// utime + stime of a process, in seconds.
fn proc_cpu(pid: i32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks as f64 / hz as f64)
}

fn proc_write_bytes(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))?
        .trim()
        .parse()
        .ok()
}

/// The device's own limits, measured on a raw file in the scratch
/// directory before the systems run.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct DeviceLimits {
    /// Median and 90th percentile of a 4 KiB `pwrite` + `fdatasync` over
    /// already allocated blocks.
    pub fsync_latency_s: f64,
    pub fsync_latency_p90_s: f64,
    pub latency_samples: usize,
    /// A sequential write of `seq_bytes` in 1 MiB writes, then `fdatasync`.
    pub seq_write_bytes_per_s: f64,
    pub seq_bytes: u64,
}

impl DeviceLimits {
    /// Round figures for tests: 1 ms an fsync, 100 MB/s.
    #[cfg(test)]
    pub const EXAMPLE: DeviceLimits = DeviceLimits {
        fsync_latency_s: 0.001,
        fsync_latency_p90_s: 0.002,
        latency_samples: 1,
        seq_write_bytes_per_s: 1e8,
        seq_bytes: 1,
    };

    pub fn measure(dir: &Path, samples: usize, seq_bytes: u64) -> anyhow::Result<DeviceLimits> {
        let path = dir.join("device-probe");
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        let block = [0x5au8; 4096];
        // Allocate first, so the latency is the device's, not the host
        // file system's allocation.
        for i in 0..samples as u64 {
            f.write_all_at(&block, i * 4096)?;
        }
        f.sync_all()?;
        let mut lat: Vec<f64> = (0..samples as u64)
            .map(|i| {
                let t = Instant::now();
                f.write_all_at(&block, i * 4096)?;
                f.sync_data()?;
                Ok(t.elapsed().as_secs_f64())
            })
            .collect::<std::io::Result<_>>()?;
        lat.sort_by(f64::total_cmp);
        f.set_len(0)?;
        f.sync_all()?;
        let chunk = vec![0xa5u8; 1 << 20];
        let t = Instant::now();
        let mut at = 0;
        while at < seq_bytes {
            f.write_all_at(&chunk, at)?;
            at += chunk.len() as u64;
        }
        f.sync_data()?;
        let seq = at as f64 / t.elapsed().as_secs_f64();
        drop(f);
        std::fs::remove_file(&path)?;
        Ok(DeviceLimits {
            fsync_latency_s: lat[lat.len() / 2],
            fsync_latency_p90_s: lat[lat.len() * 9 / 10],
            latency_samples: samples,
            seq_write_bytes_per_s: seq,
            seq_bytes: at,
        })
    }
}

/// The machine, for the top of a report.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub ram_bytes: u64,
    pub kernel: String,
    /// The block device under the scratch directory, and the host file
    /// system's type there.
    pub disk: String,
    pub host_fs: String,
}

impl Machine {
    pub fn probe(dir: &Path) -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or("unknown".into(), |(_, v)| v.trim().to_string());
        let ram_kib: u64 = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            ram_bytes: ram_kib * 1024,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            disk: disk_name(dir).unwrap_or_else(|| "none (not a block device)".into()),
            host_fs: host_fs(dir).unwrap_or_else(|| "unknown".into()),
        }
    }
}

/// The type of the file system holding `dir` (the longest mount point
/// above it).
fn host_fs(dir: &Path) -> Option<String> {
    let table = std::fs::read_to_string("/proc/self/mounts").ok()?;
    table
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let mnt = unescape_mount_field(f.get(1)?);
            let fstype = f.get(2)?.to_string();
            dir.starts_with(&mnt).then_some((mnt.len(), fstype))
        })
        .max()
        .map(|(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags each FUSE server is started with, for its systems.
    fn serving_flags(id: &str) -> Vec<String> {
        let system = select(id).unwrap()[0];
        let serving = match system.kind {
            Kind::Floor { serving } | Kind::Stitchfs { serving, .. } => serving,
            _ => panic!("{id} is not a FUSE server of ours"),
        };
        let mut cmd = Command::new("true");
        serving.add_args(&mut cmd);
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    /// The variants of stitchfs and the floor ask for what their names
    /// say, and keep everything else of the system they vary.
    #[test]
    fn served_variants_change_only_how_requests_are_taken() {
        for (id, want) in [
            ("stitchfs", &[][..]),
            ("fuse-floor", &[]),
            ("stitchfs-nospin", &["--spin", "off"]),
            ("fuse-floor-nospin", &["--spin", "off"]),
            ("stitchfs-open", &["--open-requests", "on"]),
            ("fuse-floor-open", &["--open-requests", "on"]),
        ] {
            assert_eq!(serving_flags(id), want, "{id}");
        }
        let Kind::Stitchfs {
            consistency, data, ..
        } = select("stitchfs-open").unwrap()[0].kind
        else {
            panic!("stitchfs-open is stitchfs");
        };
        assert_eq!((consistency, data), ("journal", Some("ordered")));
    }

    /// A process with its working directory or an open file under a
    /// directory is found; one elsewhere is not.
    #[test]
    fn users_of_a_directory_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let inside = dir.path().join("sub");
        std::fs::create_dir(&inside).unwrap();
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        let mut by_cwd = Command::new("sleep")
            .arg("30")
            .current_dir(&inside)
            .spawn()
            .unwrap();
        let mut by_fd = Command::new("sh")
            .arg("-c")
            .arg("exec 3<\"$1\"; exec sleep 30")
            .arg("sh")
            .arg(dir.path().join("file"))
            .current_dir("/")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let elsewhere = Command::new("sleep").arg("30").current_dir("/").spawn();
        let mut elsewhere = elsewhere.unwrap();
        let pids = |d: &Path| users_of(d).into_iter().map(|u| u.0).collect::<Vec<_>>();
        let mut found = pids(dir.path());
        for _ in 0..100 {
            if found.contains(&(by_fd.id() as i32)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
            found = pids(dir.path());
        }
        for c in [&mut by_cwd, &mut by_fd, &mut elsewhere] {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert!(found.contains(&(by_cwd.id() as i32)), "{found:?}");
        assert!(found.contains(&(by_fd.id() as i32)), "{found:?}");
        assert!(!found.contains(&(elsewhere.id() as i32)), "{found:?}");
    }

    #[test]
    fn systems_are_named_once() {
        for (i, s) in SYSTEMS.iter().enumerate() {
            assert!(SYSTEMS[i + 1..].iter().all(|t| t.id != s.id), "{}", s.id);
        }
        assert!(select("ext4,bindfs").is_ok());
        assert!(select("ext5").is_err());
        assert_eq!(select("all").unwrap().len(), SYSTEMS.len());
    }

    /// Each kind of system formats, mounts, takes a file and unmounts, and
    /// the counts see the write (where the machine has what it needs).
    #[test]
    fn systems_mount_and_count() {
        for id in ["ext4", "bindfs", "fuse2fs"] {
            let sys = select(id).unwrap()[0];
            if let Some(why) = sys.missing() {
                eprintln!("skipping {id}: {why}");
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let place = Place::new(dir.path()).unwrap();
            sys.format(&place, 64 << 20).unwrap();
            let m = sys.mount(&place).unwrap();
            assert!(is_mounted(&place.mnt()).unwrap(), "{id}");
            let before = m.counters();
            let data = vec![7u8; 1 << 20];
            m.watched(Duration::from_secs(60), |root| {
                let p = root.join("f");
                std::fs::write(&p, &data)?;
                File::open(&p)?.sync_all()?;
                Ok(())
            })
            .unwrap();
            let after = m.unmount().unwrap();
            assert!(!is_mounted(&place.mnt()).unwrap(), "{id}");
            let u = after.since(&before);
            assert!(u.fs_bytes_written.unwrap() >= 1 << 20, "{id}: {u:?}");
            assert_eq!(u.server_cpu.is_some(), id != "ext4", "{id}");
        }
    }

    /// A call stuck on a FUSE mount ends when the watchdog kills the
    /// server, and the error says the system hung. The workload here polls
    /// until the mount fails, so it ends only through the watchdog.
    #[test]
    fn watchdog_ends_a_hung_fuse_mount() {
        let sys = select("bindfs").unwrap()[0];
        if let Some(why) = sys.missing() {
            eprintln!("skipping: {why}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let place = Place::new(dir.path()).unwrap();
        sys.format(&place, 0).unwrap();
        let m = sys.mount(&place).unwrap();
        let err = m
            .watched::<()>(Duration::from_millis(200), |root| loop {
                std::fs::metadata(root.join("."))?;
                std::thread::sleep(Duration::from_millis(10));
            })
            .unwrap_err();
        assert!(format!("{err:#}").contains("bindfs hung"), "{err:#}");
        drop(m);
        assert!(!is_mounted(&place.mnt()).unwrap());
    }

    /// A program runs as it is, under `stitchfs run` in the stream, under
    /// `stitchfs xsync`, or under eatmydata; a server's clients connect
    /// through xsync's proxy under xsync, else to the server.
    #[test]
    fn programs_are_launched_as_their_system_says() {
        let root = Path::new("/m");
        let line = |id: &str| {
            let cmd = select(id).unwrap()[0]
                .launch()
                .command("git", root)
                .unwrap();
            let mut words = vec![cmd.get_program().to_string_lossy().into_owned()];
            words.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
            words
        };
        assert_eq!(line("stitchfs-precise"), ["git"]);
        assert_eq!(line("ext4"), ["git"]);
        let stream = line("stitchfs-stream");
        assert_eq!(
            stream[1..],
            [
                "run",
                "--stream",
                "bench",
                "--ignore-fsync",
                "--at",
                "/m",
                "--",
                "git"
            ]
        );
        assert!(stream[0].ends_with(
            std::env::current_exe()
                .unwrap()
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
        ));
        assert_eq!(line("stitchfs-xsync")[0], stream[0]);
        assert_eq!(
            line("stitchfs-xsync")[1..],
            ["xsync", "--at", "/m", "--", "git"]
        );
        for id in ["stitchfs-ceiling", "fuse-floor-nofsync"] {
            let words = line(id);
            assert!(
                words[0].ends_with("eatmydata") && words[1..] == ["--", "git"],
                "{words:?}"
            );
        }
        let front: SocketAddr = "127.0.0.1:7001".parse().unwrap();
        let server: SocketAddr = "127.0.0.1:7002".parse().unwrap();
        let serve = |id: &str| {
            let launch = select(id).unwrap()[0].launch();
            let (cmd, addr) = launch.server_command("py", root, front, server).unwrap();
            let args: Vec<String> = cmd
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            (args, addr)
        };
        let proxy = ["--proxy", "127.0.0.1:7001=127.0.0.1:7002"];
        let (args, addr) = serve("stitchfs-xsync");
        assert_eq!(args[..3], ["xsync", proxy[0], proxy[1]]);
        assert_eq!(args[3..], ["--at", "/m", "--", "py"]);
        assert_eq!(addr, front);
        assert_eq!(serve("ext4"), (Vec::new(), server));
        assert_eq!(serve("stitchfs-stream").1, server);
    }

    #[test]
    fn block_stat_fields() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stat");
        std::fs::write(&p, "1 2 3 4 5 6 10 8 9 10 11 12 13 14 15 7 17\n").unwrap();
        let s = block_stat(&p).unwrap();
        assert_eq!((s.written, s.flushes), (5120, 7));
    }
}
