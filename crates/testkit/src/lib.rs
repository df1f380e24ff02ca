//! Test support shared by the crates' tests (a dev-dependency only; no
//! library crate depends on it), each helper defined once here: scratch
//! directories beside the build ([`scratch`]), fresh images from our mkfs
//! or mke2fs ([`fresh_image`], [`mkfs`], [`mke2fs`]), e2fsck as the
//! outside judge ([`e2fsck`], [`assert_e2fsck_clean`]), what is mounted
//! where ([`mount_type`]), kernel loop mounts, images the kernel wrote
//! extended attributes on, damaged images mount must refuse
//! ([`damaged`]), and NBD servers ([`nbd`]).
//!
//! Invariants: a [`LoopMount`] is unmounted when dropped, or the test fails
//! loudly; a mount left behind makes later `e2fsck` runs warn "is mounted"
//! and fail far from the cause. The damaged images are made by e2fsprogs
//! alone, never by stitch code (see [`damaged`]).

pub mod damaged;
mod e2fsck;
mod image;
pub mod nbd;
mod scratch;

pub use e2fsck::{assert_e2fsck_clean, e2fsck, e2fsck_image, E2fsck};
pub use image::{fresh_image, mke2fs, mkfs, JournalSize};
pub use scratch::{scratch, scratch_base};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Whether the tests run as root (loop mounts need it; CI runs as root).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}

/// The type of the file system mounted at `mnt` now (`ext4`,
/// `fuse.stitchfs`, ...; the last mount there if several are stacked), or
/// `None` if nothing is, from `/proc/self/mounts`. `mnt` is compared as
/// given: pass it canonical.
pub fn mount_type(mnt: &Path) -> Option<String> {
    let want = mnt.to_str()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("read /proc/self/mounts");
    mounts.lines().rev().find_map(|l| {
        let mut fields = l.split(' ');
        let point = unescape_mount_field(fields.nth(1)?);
        (point == want).then(|| fields.next().map(unescape_mount_field))?
    })
}

/// `/proc/self/mounts` escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mount_field(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let digits = std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(digits, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A kernel loop mount of an image file, unmounted on drop.
pub struct LoopMount {
    mnt: PathBuf,
}

impl LoopMount {
    /// Mounts `image` at `mnt` (created if missing) with `-o loop[,opts]`.
    /// `Err` carries mount's message, so a test can skip where loop devices
    /// are missing.
    pub fn new(image: &Path, mnt: &Path, opts: &str) -> Result<LoopMount, String> {
        std::fs::create_dir_all(mnt).map_err(|e| e.to_string())?;
        let o = if opts.is_empty() {
            "loop".to_string()
        } else {
            format!("loop,{opts}")
        };
        let out = Command::new("mount")
            .args(["-o", &o])
            .arg(image)
            .arg(mnt)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(LoopMount {
            mnt: mnt.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// Unmounts now, failing the test if it can't.
    pub fn unmount(self) {
        drop(self)
    }
}

impl Drop for LoopMount {
    /// `umount` fails with EBUSY for a moment while a sibling test thread
    /// forks a child that still holds descriptors into this mount (they
    /// close at exec), so retry for a while before giving up.
    fn drop(&mut self) {
        for _ in 0..100 {
            if Command::new("umount")
                .arg(&self.mnt)
                .status()
                .is_ok_and(|s| s.success())
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        if !std::thread::panicking() {
            panic!("could not unmount {}", self.mnt.display());
        }
    }
}

/// An image from `mke2fs -t ext` (ext2 or ext3, 32 MiB, 4 KiB blocks,
/// 128-byte inodes so that attributes go to blocks) on which the kernel
/// wrote files `a`, `b`, `c` and `d` of 5,000 bytes, the attribute
/// `user.k=shared` on a, b and d (the kernel shares one block among them)
/// and `user.k=own` on c. Needs root.
pub fn kernel_xattr_image(dir: &Path, ext: &str) -> Vec<u8> {
    let path = dir.join(format!("{ext}-xattr.img"));
    let m = kernel_mount_new(&path, ext, 128, &dir.join("xattr-mnt"));
    let mnt = m.path().to_path_buf();
    for (name, value) in [
        ("a", "shared"),
        ("b", "shared"),
        ("c", "own"),
        ("d", "shared"),
    ] {
        let f = mnt.join(name);
        std::fs::write(&f, name.repeat(5000)).expect("write on the kernel mount");
        set_xattr(&f, "user.k", value.as_bytes());
    }
    m.unmount();
    std::fs::read(&path).expect("read the image back")
}

/// A `mke2fs -t ext` image with 256-byte inodes on which the kernel made
/// `count` files, gave each a small attribute (it goes in the inode), and
/// deleted them again: the kernel leaves a freed inode's in-inode
/// attributes in its slot. Returns the image and the freed inode numbers.
pub fn kernel_freed_xattr_slots(dir: &Path, ext: &str, count: usize) -> (Vec<u8>, Vec<u32>) {
    use std::os::unix::fs::MetadataExt;
    let path = dir.join(format!("{ext}-freed-xattr.img"));
    let m = kernel_mount_new(&path, ext, 256, &dir.join("freed-xattr-mnt"));
    let mnt = m.path().to_path_buf();
    let mut inos = Vec::new();
    for i in 0..count {
        let f = mnt.join(format!("gone{i}"));
        std::fs::write(&f, b"x").expect("write on the kernel mount");
        set_xattr(&f, "user.left", b"behind");
        inos.push(std::fs::metadata(&f).expect("stat").ino() as u32);
    }
    for i in 0..count {
        std::fs::remove_file(mnt.join(format!("gone{i}"))).expect("unlink");
    }
    m.unmount();
    (std::fs::read(&path).expect("read the image back"), inos)
}

/// A `mke2fs -t ext3` image with 256-byte inodes whose files the kernel
/// gave attributes: `small` has `user.k=inode` (in its inode) and an ACL
/// granting uid 1000 read; `big` has `user.big` (300 `x`), `user.k2=two`
/// and `trusted.t=tt` (too much for the inode: in a block); directory `d`
/// has `user.dir=yes`. Needs root.
pub fn kernel_attribute_image(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("attributes.img");
    let m = kernel_mount_new(&path, "ext3", 256, &dir.join("attributes-mnt"));
    let mnt = m.path().to_path_buf();
    std::fs::write(mnt.join("small"), b"a").expect("write on the kernel mount");
    set_xattr(&mnt.join("small"), "user.k", b"inode");
    // POSIX ACL, xattr form (version 2): user::rw- user:1000:r-- group::r--
    // mask::r-- other::r--.
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 6u16, u32::MAX),
        (0x02, 4, 1000),
        (0x04, 4, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 4, u32::MAX),
    ] {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    set_xattr(&mnt.join("small"), "system.posix_acl_access", &acl);
    std::fs::write(mnt.join("big"), b"b").expect("write on the kernel mount");
    set_xattr(&mnt.join("big"), "user.big", &[b'x'; 300]);
    set_xattr(&mnt.join("big"), "user.k2", b"two");
    set_xattr(&mnt.join("big"), "trusted.t", b"tt");
    std::fs::create_dir(mnt.join("d")).expect("mkdir on the kernel mount");
    set_xattr(&mnt.join("d"), "user.dir", b"yes");
    m.unmount();
    path
}

/// A fresh 32 MiB `mke2fs -t ext` image at `path` (4 KiB blocks, inodes of
/// `inode_size` bytes), mounted by the kernel at `mnt`.
fn kernel_mount_new(path: &Path, ext: &str, inode_size: u16, mnt: &Path) -> LoopMount {
    let inode_size = inode_size.to_string();
    mke2fs(
        path,
        32 << 20,
        &["-t", ext, "-b", "4096", "-I", &inode_size],
    );
    LoopMount::new(path, mnt, "").unwrap_or_else(|e| panic!("{e}"))
}

/// Every extended attribute of `path` (name, value), sorted by name, as the
/// kernel reads them.
pub fn all_xattrs(path: &Path) -> Vec<(String, Vec<u8>)> {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("no NUL in the path");
    let mut names = vec![0u8; 65536];
    // SAFETY: a valid C string and a buffer of `names.len()` bytes.
    let n = unsafe { libc::listxattr(p.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(
        n >= 0,
        "listxattr {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    names.truncate(n as usize);
    let mut out: Vec<(String, Vec<u8>)> = names
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| {
            let c = std::ffi::CString::new(n).expect("no NUL in a name");
            let mut v = vec![0u8; 65536];
            // SAFETY: valid C strings and a buffer of `v.len()` bytes.
            let len =
                unsafe { libc::getxattr(p.as_ptr(), c.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
            assert!(
                len >= 0,
                "getxattr {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            );
            v.truncate(len as usize);
            (String::from_utf8_lossy(n).into_owned(), v)
        })
        .collect();
    out.sort();
    out
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("no NUL in the path");
    let n = std::ffi::CString::new(name).expect("no NUL in the name");
    // SAFETY: valid NUL-terminated strings and a buffer of `value.len()`.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "setxattr {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}
