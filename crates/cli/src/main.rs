//! The `stitchfs` command: one binary, one subcommand per tool (docs/design.md, "Tools").
//!
//! This crate only parses arguments and prints; every subcommand calls into a
//! library crate, so tests exercise the same code without a process boundary.

// The commands' doc comments are their --help text, written in the CLI's
// notation (`[IMAGE] MOUNTPOINT`), not as rustdoc links.
#![allow(rustdoc::broken_intra_doc_links)]

mod cmd;
mod fuse;
mod image;
mod programs;
mod progress;
mod repair;

use clap::{Parser, Subcommand};

/// mimalloc rather than glibc's malloc: the server allocates and frees a 4 KiB
/// page or block buffer for every block written, and glibc hands freed heap
/// back to the kernel and faults it in again (zeroed) on the next write —
/// about 40% of the server's CPU in a 100 MB write + fsync (`perf`). Built
/// with `no_thp`: on the project's VM, fresh 2 MiB huge pages cost anywhere
/// from 13 ms to 400 ms per 100 MB touched, 4 KiB pages a steady ~70 ms.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "stitchfs", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Make an ext2 (or, with --journal, ext3) file system.
    Mkfs(cmd::mkfs::Args),
    /// Check an image like e2fsck -fn (exit 0 clean, 4 problems, 8 error);
    /// one needing recovery is checked as replayed (--recover writes it).
    Fsck(cmd::fsck::Args),
    /// Run a benchmark suite and print its figures.
    Bench(cmd::bench::Args),
    /// Mount an image through FUSE ([IMAGE] MOUNTPOINT; without IMAGE,
    /// ./stitchfs.img, made if missing); runs as a daemon unless -f.
    /// `stitchfs umount MOUNTPOINT`, `fusermount3 -u MOUNTPOINT` or
    /// SIGTERM unmounts it cleanly. A damaged image is refused unchanged;
    /// one left unclean without a journal to replay is checked first, its
    /// soft-updates leaks reclaimed.
    Mount(cmd::mount::Args),
    /// Unmount a stitchfs mount and wait until its server has written
    /// everything and marked the image clean (`fusermount3 -u` returns
    /// before that).
    Umount(cmd::umount::Args),
    /// Make everything a stitchfs mount holds durable (sync(1) does not
    /// reach FUSE servers): [PATH] is any file or directory on the mount.
    Sync(cmd::sync::Args),
    /// Show a live mount's figures: flushes and their causes, dirty
    /// memory, fsync latency, the patch cache's counters, the journal,
    /// requests by opcode with their latency, streams and contexts
    /// (field names of --json in docs/stats.md).
    Stats(cmd::stats::Args),
    /// Show a live mount's graph of uncommitted patches (each in its
    /// block, pointing at what it depends on) as Graphviz DOT, or draw it
    /// with -o FILE.svg / FILE.png; summarised by block when large.
    Graph(cmd::graph::Args),
    /// A terminal dashboard of a live mount, refreshed every second:
    /// request rates, dirty data, flushes and their causes, fsync latency,
    /// the patch cache, domains, requests by opcode (s sorts, q quits).
    Top(cmd::top::Args),
    /// Run a program and everything it starts in a stream of a mount: the
    /// disk keeps a prefix of what they change, in order; the stream is
    /// made durable when the program exits, before its status is returned.
    Run(cmd::run::Args),
    /// Run CMD1, then CMD2, with every change CMD2 makes reaching the disk
    /// only after every change CMD1 made (patchgroups; no fsync); exits
    /// with CMD2's status, or CMD1's if it fails (CMD2 does not run then).
    Depend(cmd::depend::Args),
    /// Run CMD and everything it starts with external synchrony on every
    /// stitchfs mount: their fsyncs return at once, and their output (and
    /// with --proxy what their server sends its clients) is held until
    /// every change they made before it is durable; exits with CMD's
    /// status once all it did is durable.
    Xsync(cmd::xsync::Args),
    /// Crash-test workloads: every crash image recovered and judged by
    /// e2fsck, our fsck and a reference model (exit 1 on any violation).
    Crashtest(cmd::crashtest::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Mkfs(args) => cmd::mkfs::run(args),
        Command::Fsck(args) => match cmd::fsck::run(args) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Command::Bench(args) => cmd::bench::run(args),
        Command::Mount(args) => cmd::mount::run(args),
        Command::Umount(args) => cmd::umount::run(args),
        Command::Sync(args) => cmd::sync::run(args),
        Command::Stats(args) => cmd::stats::run(args),
        Command::Graph(args) => cmd::graph::run(args),
        Command::Top(args) => cmd::top::run(args),
        Command::Run(args) => match cmd::run::run(args) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Command::Depend(args) => match cmd::depend::run(args) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Command::Xsync(args) => match cmd::xsync::run(args) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
        Command::Crashtest(args) => match cmd::crashtest::run(args) {
            Ok(code) => std::process::exit(code),
            Err(e) => Err(e),
        },
    };
    if let Err(err) = result {
        eprintln!("stitchfs: {err:#}");
        std::process::exit(1);
    }
}
