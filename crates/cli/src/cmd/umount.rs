//! `stitchfs umount MOUNTPOINT`: unmounts a stitchfs mount and returns once
//! its server has finished with the image.
//!
//! `fusermount3 -u` returns as soon as the kernel lets go of the mount; the
//! server then writes what memory still holds, marks the image clean and
//! exits. Until it has, the image is not clean (`e2fsck -fn` finds a journal
//! to replay) and a new mount of it is refused. Every stitchfs mount holds an
//! exclusive `flock` on its image until its server exits, so this waits for
//! a shared one. A mount whose source is no file (an image on an NBD server,
//! or `-o fsname`) is asked for its server's process first (`server_pid`
//! in `stitchfs stats`), and that process is waited for.

use anyhow::{bail, Context};
use std::fs::File;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Where the stitchfs image is mounted
    pub mountpoint: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mountpoint = args
        .mountpoint
        .canonicalize()
        .with_context(|| format!("mount point {}", args.mountpoint.display()))?;
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    let Some(source) = stitchfs_source(&mountinfo, &mountpoint) else {
        bail!("{} is not a stitchfs mount", mountpoint.display());
    };
    // The source names the image unless `-o fsname` changed it or it is
    // an NBD URI; an image is waited on by its lock, else the server by
    // its process.
    let image = File::open(&source).ok();
    let server = match image {
        Some(_) => None,
        None => super::stats::read(&mountpoint)
            .ok()
            .and_then(|v| v["server_pid"].as_u64())
            .and_then(|pid| pidfd(pid as i32)),
    };
    let status = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(&mountpoint)
        .status()
        .context("running fusermount3 (apt-get install fuse3)")?;
    if !status.success() {
        bail!("fusermount3 -u {} failed ({status})", mountpoint.display());
    }
    match (image, server) {
        (Some(f), _) => wait_for_server(&f, &source),
        (None, Some(pid)) => wait_for_exit(&pid, &source),
        (None, None) => {
            eprintln!(
                "stitchfs: unmounted {}; its source {} is not a file it can wait on \
                 (mounted with -o fsname?), so the server may still be writing",
                mountpoint.display(),
                source.display()
            );
            Ok(())
        }
    }
}

/// The source (the image, unless `-o fsname` changed it) of the stitchfs
/// mount at `mountpoint`, from `/proc/self/mountinfo` text.
fn stitchfs_source(mountinfo: &str, mountpoint: &Path) -> Option<PathBuf> {
    stitch_control::mounts::stitchfs_mounts(mountinfo)
        .into_iter()
        .rev()
        .find_map(|(point, source)| (point == mountpoint).then_some(source))
}

/// A descriptor that becomes readable when process `pid` exits.
fn pidfd(pid: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a fresh descriptor that nothing else owns.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Blocks until the server process behind `pidfd` has exited.
fn wait_for_exit(pidfd: &std::os::fd::OwnedFd, source: &Path) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd;
    let mut said = false;
    loop {
        let mut p = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, 200) };
        if n > 0 {
            return Ok(());
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return Err(std::io::Error::last_os_error()).context("waiting for the server");
        }
        if !said {
            eprintln!(
                "stitchfs: waiting for the server to finish writing {}",
                source.display()
            );
            said = true;
        }
    }
}

/// Blocks until no server holds the image's lock.
fn wait_for_server(image: &File, path: &Path) -> anyhow::Result<()> {
    stitch_blockdev::wait_for_writer(image, || {
        eprintln!(
            "stitchfs: waiting for the server to finish writing {}",
            path.display()
        )
    })
    .with_context(|| format!("flock {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_is_found_by_mount_point_and_type() {
        let info = "\
36 25 0:32 / /mnt/a rw,relatime shared:1 - ext4 /dev/vda rw
37 25 0:45 / /mnt/with\\040space rw,nosuid - fuse.stitchfs /img/my\\040disk.img rw,user_id=0
38 25 0:46 / /mnt/other rw - fuse.fuse2fs /img/x.img rw
";
        assert_eq!(
            stitchfs_source(info, Path::new("/mnt/with space")),
            Some(PathBuf::from("/img/my disk.img"))
        );
        assert_eq!(stitchfs_source(info, Path::new("/mnt/other")), None);
        assert_eq!(stitchfs_source(info, Path::new("/mnt/a")), None);
    }
}
