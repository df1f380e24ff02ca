//! `stitchfs mount [IMAGE] MOUNTPOINT`: serve an image through FUSE.
//!
//! Without IMAGE, `./stitchfs.img` is used, made (ext3, 4 GiB sparse) if
//! missing. The default mode is journal with data=ordered, or soft updates
//! for an image without a journal. Without `--foreground` the command
//! returns once the mount works (non-zero with the error otherwise) and a
//! daemon serves it. SIGINT, SIGTERM, SIGHUP and `fusermount3 -u` all end
//! in a clean unmount: memfs makes everything durable and the image is
//! marked clean before the process exits (`stitchfs umount` waits for
//! that; `fusermount3 -u` returns before). A mount by root serves every
//! user, as a kernel mount does; another user's serves that user alone
//! ([`session_acl`]).
//!
//! Nothing is written to the image before everything the mount relies on
//! is checked (`DiskFs::check_mountable`): a damaged image is refused,
//! unchanged, with what is wrong and where to repair it. An image left
//! unclean without a journal to replay (a soft-updates or async mount
//! that stopped) is then run through the checker, with a progress bar on
//! a terminal: corruption is refused, leaks are reclaimed (`repair`, as
//! `fsck --repair-leaks` does) and said in one line of the log, and only
//! then is the image mounted.

use crate::fuse::{daemon, diag, StitchFuse};
use crate::image::Opened;
use crate::repair::Verdict;
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use stitch_blockdev::Location;
use stitch_diskfs::{Consistency, DataMode, DiskFs};
use stitch_format::Superblock;
use stitch_memfs::{MemFs, Order};

/// The image used when none is named, in the current directory.
const DEFAULT_IMAGE: &str = "stitchfs.img";
/// Its size when it has to be made (sparse: only metadata takes space).
const DEFAULT_SIZE: u64 = 4 << 30;

#[derive(clap::Args)]
pub struct Args {
    /// [IMAGE] MOUNTPOINT: the image (default ./stitchfs.img, made if
    /// missing; a file, a block device, or an NBD URI such as
    /// nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH) and the
    /// directory to mount it on. Over NBD, STITCHFS_NBD_TIMEOUT (seconds,
    /// default 30) bounds how long the server may stay silent before the
    /// mount turns read-only, and STITCHFS_NBD_DEPTH (default 16) how many
    /// requests are in flight.
    #[arg(value_name = "PATH", num_args = 1..=2, required = true)]
    pub paths: Vec<String>,
    /// async | softupdates | journal (default: journal, or softupdates for
    /// an image without a journal); journal-writeback etc. also accepted.
    #[arg(long, value_name = "MODE", value_parser = parse_consistency)]
    pub consistency: Option<Consistency>,
    /// What the journal does with file data: writeback | ordered (default)
    /// | journal.
    #[arg(long, value_name = "DATA", value_parser = parse_data)]
    pub data: Option<DataMode>,
    /// What an fsync (or fdatasync) makes durable. sequential (default):
    /// every change made on the mount before it, in order, as a journal
    /// committing in sequence gives; a crash never keeps a change and
    /// loses one made before it that an fsync has since covered. precise:
    /// only what the fsynced file or directory depends on (McoreFS's
    /// closure), faster beside unrelated work, but a program that relies
    /// on an fsync to order earlier changes (Git's objects before its
    /// references) can lose them. global: every program that chose no
    /// stream shares one stream, so every flush holds a prefix of their
    /// history, in soft updates too, and an fsync makes that prefix
    /// durable. A program in a stream of its own (`stitchfs run
    /// --stream`) keeps its stream's order whatever this says.
    #[arg(long, value_name = "ORDER", default_value_t = Order::Sequential)]
    pub order: Order,
    /// FUSE mount options, comma-separated (ro, noexec, ...). A mount by
    /// root serves every user, as a kernel mount does (the kernel checks
    /// permissions); `private` narrows it to root alone. Another user's
    /// mount serves that user alone; `allow_other` (every user) and
    /// `allow_root` (root too) need `user_allow_other` in /etc/fuse.conf.
    #[arg(short = 'o', value_name = "OPTIONS", action = clap::ArgAction::Append)]
    pub options: Vec<String>,
    /// Stay attached to the terminal instead of running as a daemon.
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Seconds between background flushes of memory to disk; 0 never.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub flush_interval: u64,
    /// Write-behind: a file with this many MiB not yet on disk is flushed
    /// in the background while it is written, not all at its fsync; 0
    /// never. Needs the background flush (--flush-interval above 0).
    #[arg(long, value_name = "MIB", default_value_t = 16)]
    pub write_behind: u64,
    /// File data kept in memory before it is flushed and evicted, in MiB.
    /// The line printed at unmount counts the flushes this bound caused
    /// ("under memory pressure"); many say it is too small for the work.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub memory: u64,
    /// Threads serving requests (default: one per core).
    #[arg(long, value_name = "N")]
    pub threads: Option<std::num::NonZeroUsize>,
    /// While requests come close together (two within 200 µs), one
    /// serving thread polls for the next instead of sleeping, until 1 ms
    /// passes without one: round trips cost less, for at most 1 ms of a
    /// core's time after each burst. `off` always sleeps.
    #[arg(long, value_name = "ON|OFF", default_value = "on", value_parser = ["on", "off"])]
    pub spin: String,
    /// `off`: files are opened and closed without a round trip to this
    /// server (the kernel's no-open support; a removed file is kept while
    /// the kernel holds it). `on`: the kernel sends OPEN and RELEASE for
    /// every file opened, two more requests a file (for comparison).
    #[arg(long, value_name = "ON|OFF", default_value = "off", value_parser = ["on", "off"])]
    pub open_requests: String,
    /// Processes that may hold a context (what the control API keeps per
    /// process) at once; one more asking for one gets EAGAIN until others
    /// exit.
    #[arg(long, value_name = "N", default_value_t = crate::fuse::DEFAULT_CONTEXTS)]
    pub contexts: usize,
    /// Serve the mount's figures (those of `stitchfs stats`) in the
    /// Prometheus text format at http://ADDR/metrics, e.g. 127.0.0.1:9464
    /// (off unless given; anyone who can reach ADDR may read them)
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
}

fn parse_consistency(s: &str) -> Result<Consistency, String> {
    s.parse()
}

fn parse_data(s: &str) -> Result<DataMode, String> {
    s.parse()
}

/// Everything decided before the process may fork, and the image, opened:
/// a failure to open it (locked, refused by its server) is said on the
/// terminal. The daemon inherits the descriptors (an NBD connection has no
/// thread of its own), and the parent exits without closing them politely.
struct Plan {
    image: Location,
    opened: Opened,
    mountpoint: PathBuf,
    mode: Consistency,
    config: fuser::Config,
    /// The image was made just now, for this user.
    made: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let plan = plan(&args)?;
    // Forking is safe only while this is the process's one thread: before
    // the device, memfs's flusher and the FUSE workers exist.
    let ready = if args.foreground {
        None
    } else {
        Some(daemon::daemonize().context("daemonizing")?)
    };
    daemon::block_signals().context("blocking signals")?;
    diag::install_panic_hook();
    let fs = open(&plan, &args)?;
    let server = StitchFuse::new(fs.clone())
        .with_contexts(args.contexts)
        .with_open_requests(args.open_requests == "on");
    let spin = server.spin();
    if let Some(addr) = &args.metrics {
        match crate::fuse::metrics::serve(addr, server.figure_source()) {
            Ok(bound) => diag::info(&format!("metrics on http://{bound}/metrics")),
            Err(e) => return Finisher::new(fs).finish(Some(e)),
        }
    }
    let mut session = match fuser::Session::new(server, &plan.mountpoint, &plan.config) {
        Ok(s) => s,
        Err(e) => {
            let err = anyhow::Error::new(e).context(format!(
                "mounting on {}{}",
                plan.mountpoint.display(),
                fuse_device_hint()
            ));
            return Finisher::new(fs).finish(Some(err));
        }
    };
    crate::fuse::tell_kernel_of_attr_changes(&fs, session.notifier());
    if args.spin == "on" {
        use std::os::fd::AsFd;
        if let Err(e) = spin.attach(session.as_fd()) {
            diag::error(&format!("not spinning on the device: {e}"));
        }
    }
    let unmounter = Arc::new(std::sync::Mutex::new(session.unmount_callable()));
    diag::info(&format!(
        "mounted {} on {} ({}, {} order, {} threads)",
        plan.image,
        plan.mountpoint.display(),
        plan.mode,
        args.order,
        plan.config.n_threads.unwrap_or(1)
    ));
    let daemonized = ready.is_some();
    if let Some(ready) = ready {
        // The parent has its answer; what fails after that is only ours.
        if let Err(e) = ready.ready() {
            diag::error(&format!("leaving the terminal: {e}"));
        }
    }
    let finisher = Arc::new(Finisher::new(fs));
    if let Err(e) = watch_signals(&plan.mountpoint, unmounter.clone(), finisher.clone()) {
        diag::error(&format!(
            "starting the signal thread: {e}; only fusermount3 -u unmounts now"
        ));
    }
    let served = session.run();
    // Normally the kernel mount is gone already; if the loop failed, take
    // it away rather than leave a dead mount behind.
    if served.is_err() {
        let mut u = unmounter.lock().unwrap_or_else(|e| e.into_inner());
        let _ = daemon::unmount(&plan.mountpoint, &mut u);
    }
    // The kernel mount is gone (unmounted, or the connection failed):
    // make everything durable and mark the image clean.
    let err = served
        .err()
        .map(|e| anyhow::Error::new(e).context("serving FUSE requests"));
    let res = finisher.finish(err);
    if let Some(nbd) = &plan.opened.nbd {
        let s = nbd.stats();
        diag::info(&format!(
            "{}: {} write requests ({} blocks), {} flushes, {} FUA writes in place of a flush, \
             {} reads, {} free blocks trimmed at unmount{}",
            plan.image,
            s.write_requests,
            s.blocks_written,
            s.flushes,
            s.fua_writes,
            s.reads,
            s.trimmed_blocks,
            match s.trim_failures {
                0 => String::new(),
                n => format!(" ({n} trims refused by the server)"),
            }
        ));
    }
    if let (true, Err(e)) = (daemonized, &res) {
        // stderr is /dev/null by now.
        diag::error(&format!("{e:#}"));
    }
    res
}

/// Why a mount may have failed before reaching the kernel: /dev/fuse
/// missing, or not open to this user.
fn fuse_device_hint() -> &'static str {
    let dev = c"/dev/fuse";
    // SAFETY: a valid C path and constant flags.
    if unsafe { libc::access(dev.as_ptr(), libc::R_OK | libc::W_OK) } == 0 {
        ""
    } else if Path::new("/dev/fuse").exists() {
        " (/dev/fuse is not readable and writable by you: mount as root, or ask for access)"
    } else {
        " (/dev/fuse is missing: load the fuse module, `modprobe fuse`)"
    }
}

/// The first SIGINT, SIGTERM or SIGHUP unmounts (lazily when busy); a
/// second finishes now: it waits for an unmount under way, or makes
/// everything durable itself while files are still open, and exits.
fn watch_signals(
    mountpoint: &Path,
    unmounter: Arc<std::sync::Mutex<fuser::SessionUnmounter>>,
    finisher: Arc<Finisher>,
) -> std::io::Result<()> {
    let mnt = mountpoint.to_path_buf();
    daemon::on_signal(
        move |sig| {
            diag::info(&format!("{sig}: unmounting {}", mnt.display()));
            let mut u = unmounter.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = daemon::unmount(&mnt, &mut u) {
                diag::error(&format!("unmounting {}: {e}", mnt.display()));
            }
        },
        move |sig| {
            diag::info(&format!("{sig} again: finishing now"));
            std::process::exit(match finisher.finish(None) {
                Ok(()) => 0,
                Err(e) => {
                    diag::error(&format!("{e:#}"));
                    1
                }
            });
        },
    )
}

/// Unmounts memfs once, whoever asks first (the end of the session, a
/// second signal, a failed start); a later caller waits for the first and
/// shares its outcome, so the process never exits in the middle of it.
struct Finisher {
    fs: MemFs,
    outcome: std::sync::Mutex<Option<Result<(), String>>>,
}

impl Finisher {
    fn new(fs: MemFs) -> Self {
        Finisher {
            fs,
            outcome: std::sync::Mutex::new(None),
        }
    }

    /// Everything durable, the image marked clean. `err` is what went
    /// wrong before, reported first.
    fn finish(&self, err: Option<anyhow::Error>) -> anyhow::Result<()> {
        let mut outcome = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        let unmounted = outcome
            .get_or_insert_with(|| match self.fs.unmount() {
                Ok(_) => {
                    // After a failure the failure is the news.
                    if err.is_none() {
                        diag::info(&format!("unmounted cleanly ({})", flush_summary(&self.fs)));
                    }
                    Ok(())
                }
                Err(e) => Err(format!(
                    "unmounting the file system: {e} (the image may need `stitchfs fsck`)"
                )),
            })
            .clone();
        match (err, unmounted) {
            (Some(e), Err(u)) => {
                diag::error(&u);
                Err(e)
            }
            (Some(e), Ok(())) => Err(e),
            (None, Err(u)) => Err(anyhow::anyhow!(u)),
            (None, Ok(())) => Ok(()),
        }
    }
}

/// What the mount's flushes were, for the unmount line: a count under
/// memory pressure says `--memory` is too small for the work, one for room
/// that the disk ran nearly full.
fn flush_summary(fs: &MemFs) -> String {
    let s = fs.stats();
    let o = s.own_flushes;
    format!(
        "{} flushes wrote to the disk; memfs began on its own, whether or not anything \
         was left to write, {} periodic, {} write-behind, {} under memory pressure and {} to \
         find room",
        s.flushes, o.periodic, o.write_behind, o.pressure, o.room
    )
}

fn plan(args: &Args) -> anyhow::Result<Plan> {
    let (image, mountpoint, named) = match args.paths.as_slice() {
        [m] => (Location::parse(DEFAULT_IMAGE), m, false),
        [i, m] => (Location::parse(i), m, true),
        _ => bail!("give [IMAGE] MOUNTPOINT"),
    };
    let image = image.absolute_in(&std::env::current_dir().context("the current directory")?);
    let mountpoint = Path::new(mountpoint);
    let mountpoint = mountpoint
        .canonicalize()
        .with_context(|| format!("mount point {}", mountpoint.display()))?;
    if !mountpoint.is_dir() {
        bail!("mount point {} is not a directory", mountpoint.display());
    }
    let made = image.as_path().is_some_and(|p| !p.exists());
    if made {
        if named {
            bail!(
                "{image}: no such image (make one with `stitchfs mkfs --journal --size 4G {image}`)"
            );
        }
        make_default_image(&image)?;
    }
    // A file's superblock is read without opening it for writing, so that
    // what the options say wrong (another user's allow_other) is said
    // first; an export's needs the connection, which is kept.
    let (opened, sb) = match &image {
        Location::Path(p) => (None, read_superblock(p)?),
        Location::Nbd(_) => {
            let (o, sb) = crate::image::open(&image, &refusal)?;
            (Some(o), sb)
        }
    };
    let mode = choose_mode(args, sb.has_journal(), &image)?;
    let config = fuse_config(args, &image)?;
    let opened = match opened {
        Some(o) => o,
        None => crate::image::open(&image, &refusal)?.0,
    };
    Ok(Plan {
        image,
        opened,
        mountpoint,
        mode,
        config,
        made,
    })
}

fn make_default_image(image: &Location) -> anyhow::Result<()> {
    diag::info(&format!(
        "no image named and {image} does not exist: making a {} GiB sparse ext3 image there",
        DEFAULT_SIZE >> 30
    ));
    let opts = stitch_mkfs::MkfsOptions {
        size: Some(DEFAULT_SIZE),
        journal: Some(stitch_mkfs::JournalSize::Default),
        force: false,
        ..Default::default()
    };
    stitch_mkfs::mkfs_at(image, &opts, &mut |_, _| {}).with_context(|| format!("mkfs {image}"))?;
    Ok(())
}

/// The primary superblock of an image file, read and checked before
/// anything opens it for writing (`stitchfs xsync` asks whether a mount
/// left its image clean).
pub(crate) fn read_superblock(image: &Path) -> anyhow::Result<Superblock> {
    crate::image::read_superblock(image, &refusal)
}

/// The consistency mode: what was asked, checked against the image; by
/// default journal (data=ordered), or soft updates without a journal.
fn choose_mode(args: &Args, has_journal: bool, image: &Location) -> anyhow::Result<Consistency> {
    let mode = match (args.consistency, args.data) {
        (None, data) if has_journal => Consistency::Journal(data.unwrap_or(DataMode::Ordered)),
        (None, None) => {
            diag::info(&format!(
                "{image} has no journal: using soft updates (`stitchfs mkfs --journal` makes \
                 images that can run journal mode)"
            ));
            Consistency::SoftUpdates
        }
        (Some(Consistency::Journal(d)), data) => Consistency::Journal(data.unwrap_or(d)),
        (Some(other), None) => other,
        (_, Some(_)) => bail!("--data applies only to journal mode (--consistency journal)"),
    };
    if matches!(mode, Consistency::Journal(_)) && !has_journal {
        bail!(
            "{image} has no journal, so it cannot run journal mode: make the image with \
             `stitchfs mkfs --journal`, or mount with --consistency softupdates"
        );
    }
    Ok(mode)
}

/// Mount options: ours, then the user's `-o` list.
fn fuse_config(args: &Args, image: &Location) -> anyhow::Result<fuser::Config> {
    use fuser::MountOption as M;
    let mut opts = vec![
        M::FSName(image.to_string()),
        M::CUSTOM("subtype=stitchfs".into()),
        M::DefaultPermissions,
    ];
    let user = || args.options.iter().flat_map(|o| o.split(','));
    // SAFETY: reads the process's effective uid.
    let root = unsafe { libc::geteuid() } == 0;
    let acl = session_acl(user(), root);
    if !root && acl != fuser::SessionACL::Owner {
        let conf = std::fs::read_to_string(FUSE_CONF).unwrap_or_default();
        if !user_allow_other(&conf) {
            bail!(
                "-o allow_other and -o allow_root let other users into the mount, which \
                 fusermount3 permits a user other than root only when {FUSE_CONF} has a line \
                 `user_allow_other`: have root add it, or leave the option out (the mount is \
                 then yours alone)"
            );
        }
    }
    for o in user().filter(|o| !o.is_empty()) {
        let opt = match o {
            "allow_other" | "allow_root" | "private" | "default_permissions" => continue,
            "auto_unmount" => M::AutoUnmount,
            "ro" => M::RO,
            "rw" => M::RW,
            "dev" => M::Dev,
            "nodev" => M::NoDev,
            "suid" => M::Suid,
            "nosuid" => M::NoSuid,
            "exec" => M::Exec,
            "noexec" => M::NoExec,
            "atime" => M::Atime,
            "noatime" => M::NoAtime,
            "dirsync" => M::DirSync,
            "sync" => M::Sync,
            "async" => M::Async,
            other => match other.strip_prefix("fsname=") {
                Some(name) => {
                    opts.retain(|o| !matches!(o, M::FSName(_)));
                    M::FSName(name.into())
                }
                None => M::CUSTOM(other.into()),
            },
        };
        opts.push(opt);
    }
    let mut config = fuser::Config::default();
    config.mount_options = opts;
    config.acl = acl;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    config.n_threads = Some(args.threads.map_or(cores, |n| n.get()));
    config.clone_fd = true;
    Ok(config)
}

/// Where fusermount3 reads whether users may mount for others.
const FUSE_CONF: &str = "/etc/fuse.conf";

/// Who may use the mount. By default, as with a kernel mount, every user
/// when root mounts (the kernel still checks each one's permissions:
/// `default_permissions`), and the mounting user alone otherwise (letting
/// others in needs root's leave, `user_allow_other`). The last of
/// `allow_other` (everyone), `allow_root` (the owner and root) and
/// `private` (the owner alone) decides otherwise.
fn session_acl<'a>(options: impl Iterator<Item = &'a str>, root: bool) -> fuser::SessionACL {
    use fuser::SessionACL as A;
    let default = if root { A::All } else { A::Owner };
    options.fold(default, |acl, o| match o {
        "allow_other" => A::All,
        "allow_root" => A::RootAndOwner,
        "private" => A::Owner,
        _ => acl,
    })
}

/// Whether fuse.conf's text has a `user_allow_other` line (after removing
/// `#` comments and surrounding blanks, as fusermount3 reads it).
fn user_allow_other(conf: &str) -> bool {
    conf.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .any(|l| l == "user_allow_other")
}

/// Mounts diskfs on the opened image in the chosen mode, and memfs over it.
fn open(plan: &Plan, args: &Args) -> anyhow::Result<MemFs> {
    let disk = mount_disk(plan)?;
    let opts = stitch_memfs::Options {
        memory_limit: args.memory.saturating_mul(1 << 20),
        flush_interval: (args.flush_interval > 0).then(|| Duration::from_secs(args.flush_interval)),
        write_behind: args.write_behind.saturating_mul(1 << 20),
        fixed_time: None,
        order: args.order,
    };
    let fs = MemFs::mount(disk, opts).context("starting memfs")?;
    if plan.made {
        // A file system made for whoever asked is theirs to fill (as
        // mke2fs's root_owner): its root belongs to them.
        // SAFETY: these calls only read the process's credentials.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let own = stitch_memfs::SetAttrs {
            uid: Some(uid),
            gid: Some(gid),
            ..Default::default()
        };
        fs.setattr(fs.root(), own)
            .context("giving the new file system's root to its user")?;
    }
    Ok(fs)
}

/// diskfs on the open (and locked) image, in the plan's mode. Nothing is
/// written before every check passed: first what mount relies on
/// (`DiskFs::check_mountable`); then, for an image left unclean without a
/// journal to replay (a soft-updates or async mount that stopped: its
/// group summaries may lag its bitmaps, and it may leak), the checker,
/// whose leaks are reclaimed and whose corruption is refused (`repair`).
fn mount_disk(plan: &Plan) -> anyhow::Result<DiskFs> {
    let dev = &plan.opened.dev;
    DiskFs::check_mountable(dev.clone(), plan.mode).map_err(|e| refusal(&plan.image, e))?;
    let sb = crate::image::superblock_of(&plan.image, &*plan.opened.bytes)?;
    if !sb.cleanly_unmounted() && !sb.needs_recovery() {
        reclaim(&plan.image, &plan.opened)?;
    }
    DiskFs::mount(dev.clone(), plan.mode, stitch_diskfs::Timestamp::now())
        .with_context(|| format!("mounting {} ({})", plan.image, plan.mode))
}

/// The refusal of a damaged image, pointing to the tools that repair it.
fn refusal(image: &Location, e: stitch_diskfs::DiskError) -> anyhow::Error {
    if e.is_damage() {
        let what = match e {
            stitch_diskfs::DiskError::Damaged(d) => d.to_string(),
            e => e.to_string(),
        };
        anyhow::anyhow!(
            "{image} is damaged, so it was not mounted and nothing was written: {what}\n\
             check it with {}",
            repair_advice(image)
        )
    } else {
        anyhow::Error::new(e).context(format!("{image} cannot be mounted; nothing was written"))
    }
}

/// The tools that check and repair `image`: e2fsck reads files and block
/// devices only, so for an image on an NBD server it is pointed at a copy.
fn repair_advice(image: &Location) -> String {
    match image {
        Location::Path(_) => format!(
            "`e2fsck -fn {image}` or `stitchfs fsck {image}`; `e2fsck -f {image}` repairs it"
        ),
        Location::Nbd(_) => format!(
            "`stitchfs fsck '{image}'`; e2fsck reads the file behind the server, or a copy \
             (`nbdcopy '{image}' copy.img`), and `e2fsck -f` on the file behind the server \
             (with the server stopped) repairs it"
        ),
    }
}

/// After an unclean shutdown without a journal: the checker's verdict, on
/// a terminal with its progress; leaks reclaimed and said in one line of
/// the log, corruption refused with what it is.
fn reclaim(image: &Location, opened: &Opened) -> anyhow::Result<()> {
    let shown = image;
    diag::info(&format!(
        "{shown} was not unmounted cleanly: checking it before mounting"
    ));
    let started = std::time::Instant::now();
    let bar = crate::progress::bar()?;
    let verdict = crate::repair::reclaim(image, opened, &mut |phase, done, total| {
        crate::progress::show(&bar, phase, done, total)
    });
    crate::progress::clear(&bar);
    match verdict? {
        Verdict::Clean(done) => {
            diag::info(&format!(
                "{shown}: checked after an unclean shutdown in {:.1} s: {done}",
                started.elapsed().as_secs_f64()
            ));
            Ok(())
        }
        Verdict::Corrupt(report) => {
            let found: Vec<String> = report
                .findings
                .iter()
                .filter(|f| f.class == stitch_fsck::Class::Corruption)
                .take(5)
                .map(|f| format!("  {}", f.message))
                .collect();
            bail!(
                "{shown} was not unmounted cleanly and is damaged, not only leaking, so it was \
                 not mounted and nothing was written:\n{}\n({} problem(s) in all: check it \
                 with {})",
                found.join("\n"),
                report.summary.corruptions,
                repair_advice(shown)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuser::SessionACL as A;

    #[test]
    fn root_serves_everyone_unless_narrowed() {
        let acl = |opts: &[&str], root| session_acl(opts.iter().copied(), root);
        assert_eq!(acl(&[], true), A::All);
        assert_eq!(acl(&["ro", "private"], true), A::Owner);
        assert_eq!(acl(&["allow_root"], true), A::RootAndOwner);
        assert_eq!(acl(&["private", "allow_other"], true), A::All);
        assert_eq!(acl(&[], false), A::Owner);
        assert_eq!(acl(&["allow_other"], false), A::All);
    }

    #[test]
    fn fuse_conf_is_read_as_fusermount3_reads_it() {
        assert!(user_allow_other(
            "# mount_max = 1000\n  user_allow_other  \n"
        ));
        assert!(user_allow_other("user_allow_other # for stitchfs"));
        assert!(!user_allow_other("#user_allow_other\n"));
        assert!(!user_allow_other("user_allow_others\n"));
        assert!(!user_allow_other(""));
    }
}
