//! `stitchfs xsync [--proxy LISTEN=TARGET]... [--stream NAME] -- CMD`:
//! external synchrony for an unmodified program ("Rethink the Sync").
//! CMD and every process it starts form one group on every stitchfs mount
//! this process can see. Their fsyncs, fdatasyncs, syncs and `O_SYNC`
//! writes return at once; instead, each byte they print (and, through a
//! proxy, each byte a server among them sends a client) is released only
//! once every file-system change the group made before it was read is
//! durable. An outside observer (a terminal, a network peer, another
//! process reading the files) never sees what a crash could undo, at
//! nearly the cost of running without fsync.
//!
//! A mount whose server dies while CMD runs takes with it whatever the
//! group changed there since the last commit, so output after that is
//! never released: commits keep failing (each error said once on stderr)
//! until CMD exits, and then xsync exits with the error. `--at` limits
//! the group to the mounts named.
//!
//! No mount is held open while CMD runs (an open file would keep every
//! stitchfs mount on the machine from being unmounted): each commit opens
//! each mount's root again and checks it is the same mount. A mount that
//! went away was either unmounted cleanly, which made everything durable
//! (its image says so: it was left clean), and then it leaves the group,
//! or its server stopped, and then commits fail as for a dead mount.
//!
//! The mount's side (membership, commits, outside readers waiting) is
//! `fuse::xsync`; the relay (pseudo-terminal or pipes, proxies, holding,
//! the bound on held output) is crate `stitch-relay`. This command joins
//! the group on each mount, then runs CMD under the relay with a commit
//! that asks every mount; it exits with CMD's status once everything CMD
//! did is durable.

use super::run::{become_subreaper, exit_code};
use anyhow::{bail, Context};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use stitch_control::{Xsync, STREAM_IGNORE_FSYNC, XS_COMMIT, XS_JOIN};
use stitch_relay::{Commit, Held, Options, Proxy, Terminal};

#[derive(clap::Args)]
pub struct Args {
    /// Relay clients that connect to LISTEN to CMD's server at TARGET,
    /// holding what the server sends them by the same rule as CMD's output
    /// (what clients send passes at once). LISTEN and TARGET are HOST:PORT
    /// or a Unix socket path (anything with a '/'). May be repeated.
    #[arg(long, value_name = "LISTEN=TARGET")]
    pub proxy: Vec<Proxy>,
    /// The group is also this stream on each mount (`stitchfs run
    /// --stream`): a crash leaves a prefix of its history, and every byte
    /// it printed was printed after what it depends on was durable.
    #[arg(long, value_name = "NAME")]
    pub stream: Option<String>,
    /// Seconds between commits when no output is held (held output starts
    /// one at once).
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub commit_interval: f64,
    /// Bytes of output held at most: past this CMD's writes block until a
    /// commit releases some (nothing is dropped or reordered).
    #[arg(long, value_name = "BYTES", default_value_t = stitch_relay::DEFAULT_BOUND)]
    pub hold_bound: usize,
    /// How CMD's output reaches ours: auto (a pseudo-terminal when our
    /// output is a terminal, pipes otherwise), pty or pipes.
    #[arg(long, value_name = "HOW", default_value = "auto", value_parser = ["auto", "pty", "pipes"])]
    pub terminal: String,
    /// Join only the stitchfs mount holding PATH (may be repeated): CMD's
    /// fsyncs on other mounts stay their own. Default: every stitchfs
    /// mount this process can see.
    #[arg(long, value_name = "PATH")]
    pub at: Vec<PathBuf>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

/// A mount the group joined.
struct Joined {
    /// Its root.
    root: PathBuf,
    /// Its device number: another mount at `root` is another device.
    dev: u64,
    /// Its image, as the mount table names it.
    source: PathBuf,
}

impl Joined {
    /// Commits the group on this mount: `Ok(false)` if the mount went
    /// away cleanly (everything it held is durable, and it leaves).
    fn commit(&self, held: Held) -> io::Result<bool> {
        let named = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("committing on {}: {e}", self.root.display()),
            )
        };
        let f = match File::open(&self.root) {
            Ok(f) => f,
            // A server that stopped: the mount is still there, dead.
            Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return Err(named(e)),
            Err(_) => return self.gone(),
        };
        if dev_of(&f)? != self.dev {
            return self.gone();
        }
        let call = Xsync {
            op: XS_COMMIT,
            held_bytes: held.bytes,
            held_chunks: held.chunks,
            ..Xsync::default()
        };
        stitch_control::request_xsync(&f, call).map_err(named)?;
        Ok(true)
    }

    /// The mount is no longer at its root: it leaves the group if its
    /// image was left clean, which only a clean unmount does after
    /// writing everything; otherwise what the group changed there since
    /// the last commit may be lost, and that is an error.
    fn gone(&self) -> io::Result<bool> {
        if image_left_clean(&self.source) {
            eprintln!(
                "stitchfs xsync: {} was unmounted cleanly; it leaves the group",
                self.root.display()
            );
            return Ok(false);
        }
        Err(io::Error::other(format!(
            "{} went away while CMD ran, and its image {} was not left clean: what CMD \
             changed there since the last commit may be lost",
            self.root.display(),
            self.source.display()
        )))
    }
}

/// Whether `image` (a file, or an NBD URI, read through a connection of
/// our own) is an ext2/3 image whose superblock says it was unmounted
/// cleanly.
fn image_left_clean(image: &Path) -> bool {
    use stitch_blockdev::{Location, NbdDevice, NbdOptions};
    match Location::parse(&image.to_string_lossy()) {
        Location::Path(p) => {
            super::mount::read_superblock(&p).is_ok_and(|sb| sb.cleanly_unmounted())
        }
        Location::Nbd(uri) => {
            let read_only = NbdOptions::from_env().map(|o| NbdOptions {
                read_only: true,
                ..o
            });
            let mut head = vec![0u8; 2048];
            read_only
                .and_then(|o| NbdDevice::open(&uri, o))
                .and_then(|d| d.read_bytes(0, &mut head))
                .is_ok()
                && stitch_format::Superblock::decode(&head[1024..])
                    .is_ok_and(|sb| sb.cleanly_unmounted())
        }
    }
}

fn dev_of(f: &File) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(f.metadata()?.dev())
}

/// The group on each mount: a commit asks every one still mounted.
struct Mounts {
    mounts: std::sync::Mutex<Vec<Joined>>,
}

impl Commit for Mounts {
    fn commit(&self, held: Held) -> io::Result<()> {
        let mut mounts = self.mounts.lock().unwrap_or_else(|e| e.into_inner());
        let mut kept = Vec::with_capacity(mounts.len());
        let mut failed = None;
        for m in mounts.drain(..) {
            match m.commit(held) {
                Ok(true) => kept.push(m),
                Ok(false) => {}
                Err(e) => {
                    failed.get_or_insert(e);
                    kept.push(m);
                }
            }
        }
        *mounts = kept;
        failed.map_or(Ok(()), Err)
    }
}

/// The root of the mount holding `path`: the farthest ancestor on the
/// same device.
fn mount_root(path: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut at = path
        .canonicalize()
        .with_context(|| format!("resolving {}", path.display()))?;
    let dev = std::fs::metadata(&at)?.dev();
    while let Some(up) = at.parent() {
        if std::fs::metadata(up).map(|m| m.dev()).ok() != Some(dev) {
            break;
        }
        at = up.to_path_buf();
    }
    Ok(at)
}

/// Joins a new group on the mount holding `point` (and `stream`, first):
/// `None` if it is not a stitchfs mount after all.
fn join(point: &Path, stream: Option<&str>, mountinfo: &str) -> anyhow::Result<Option<Joined>> {
    let f = File::open(point).with_context(|| format!("opening {}", point.display()))?;
    if stitch_control::request_version(&f)?.is_none() {
        return Ok(None);
    }
    if let Some(name) = stream {
        stitch_control::request_set_stream(&f, name.as_bytes(), STREAM_IGNORE_FSYNC)
            .with_context(|| format!("joining stream {name:?} on {}", point.display()))?;
    }
    let call = Xsync {
        op: XS_JOIN,
        ..Xsync::default()
    };
    stitch_control::request_xsync(&f, call)
        .with_context(|| format!("joining a group on {}", point.display()))?;
    let root = mount_root(point)?;
    let source = stitch_control::mounts::stitchfs_mounts(mountinfo)
        .into_iter()
        .rev()
        .find(|(p, _)| *p == root)
        .map(|(_, source)| source)
        .unwrap_or_default();
    Ok(Some(Joined {
        dev: dev_of(&f)?,
        root,
        source,
    }))
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if !(args.commit_interval > 0.0 && args.commit_interval.is_finite()) {
        bail!("--commit-interval must be a positive number of seconds");
    }
    if args.hold_bound == 0 {
        bail!("--hold-bound must be at least one byte");
    }
    become_subreaper()?;
    let mut mounts = Vec::new();
    let info =
        std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    if args.at.is_empty() {
        let mut points: Vec<PathBuf> = stitch_control::mounts::stitchfs_mounts(&info)
            .into_iter()
            .map(|(point, _)| point)
            .collect();
        points.sort();
        points.dedup();
        for point in points {
            match join(&point, args.stream.as_deref(), &info) {
                Ok(Some(j)) => mounts.push(j),
                Ok(None) => {}
                // A mount this user cannot open, or whose server is gone:
                // CMD cannot write there either.
                Err(e) if is_unreachable(&e) => {
                    eprintln!("stitchfs xsync: leaving out {}: {e:#}", point.display())
                }
                Err(e) => return Err(e),
            }
        }
        if mounts.is_empty() {
            bail!("no stitchfs mount to run on (none is mounted where this process can see it)");
        }
    }
    for at in &args.at {
        match join(at, args.stream.as_deref(), &info)? {
            Some(j) => mounts.push(j),
            None => bail!("{} is not on a stitchfs mount", at.display()),
        }
    }
    let terminal = match args.terminal.as_str() {
        "pty" => Terminal::Pty,
        "pipes" => Terminal::Pipes,
        _ => Terminal::Auto,
    };
    let opts = Options {
        proxies: args.proxy,
        commit_interval: Duration::from_secs_f64(args.commit_interval),
        bound: args.hold_bound,
        terminal,
        ..Options::default()
    };
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    let outcome = stitch_relay::run(
        cmd,
        opts,
        Arc::new(Mounts {
            mounts: std::sync::Mutex::new(mounts),
        }),
    )
    .with_context(|| format!("running {:?} under xsync", args.command[0]))?;
    Ok(exit_code(outcome.status))
}

/// A mount this user may not open, or whose server has exited.
fn is_unreachable(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<io::Error>())
        .any(|e| {
            e.kind() == io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(libc::ENOTCONN)
        })
}
