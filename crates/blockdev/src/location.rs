//! Where an image lives: a path (an image file or a Linux block device) or
//! an NBD URI; and [`ByteImage`], byte-addressed access to either, for the
//! tools that work in bytes rather than blocks (mkfs, fsck).
//!
//! An argument is an NBD URI when its scheme is one of libnbd's
//! (`nbd`, `nbds`, `nbd+unix`, `nbds+unix`, `nbd+vsock`, `nbds+vsock`,
//! followed by `://`); anything else is a path, so a file named like a URI
//! is reached as `./nbd:...`.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};

use crate::nbd::NbdDevice;
use crate::DevError;

/// A path or an NBD URI.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Location {
    Path(PathBuf),
    Nbd(String),
}

const NBD_SCHEMES: [&str; 6] = [
    "nbd",
    "nbds",
    "nbd+unix",
    "nbds+unix",
    "nbd+vsock",
    "nbds+vsock",
];

impl Location {
    /// A URI with an NBD scheme, else a path.
    pub fn parse(s: &str) -> Location {
        match s.split_once("://") {
            Some((scheme, _)) if NBD_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) => {
                Location::Nbd(s.to_string())
            }
            _ => Location::Path(PathBuf::from(s)),
        }
    }

    pub fn as_path(&self) -> Option<&Path> {
        match self {
            Location::Path(p) => Some(p),
            Location::Nbd(_) => None,
        }
    }

    pub fn is_nbd(&self) -> bool {
        matches!(self, Location::Nbd(_))
    }

    /// The location as a path-like name, for messages and for errors that
    /// carry a path.
    pub fn name(&self) -> PathBuf {
        match self {
            Location::Path(p) => p.clone(),
            Location::Nbd(u) => PathBuf::from(u),
        }
    }

    /// A relative path made absolute against `dir`; a URI unchanged.
    pub fn absolute_in(&self, dir: &Path) -> Location {
        match self {
            Location::Path(p) => Location::Path(dir.join(p)),
            nbd => nbd.clone(),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Path(p) => write!(f, "{}", p.display()),
            Location::Nbd(u) => f.write_str(u),
        }
    }
}

impl std::str::FromStr for Location {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Location::parse(s))
    }
}

impl From<&Path> for Location {
    fn from(p: &Path) -> Self {
        Location::Path(p.to_path_buf())
    }
}

impl From<PathBuf> for Location {
    fn from(p: PathBuf) -> Self {
        Location::Path(p)
    }
}

impl From<&PathBuf> for Location {
    fn from(p: &PathBuf) -> Self {
        Location::Path(p.clone())
    }
}

/// An image addressed in bytes. Reads past the end are the caller's
/// concern ([`ByteImage::len`] says where it is).
pub trait ByteImage: Send + Sync {
    /// Bytes in the image.
    fn len(&self) -> io::Result<u64>;
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()>;
    /// In flight until [`ByteImage::sync`].
    fn write_at(&self, off: u64, data: &[u8]) -> io::Result<()>;
    /// Every write before it is durable.
    fn sync(&self) -> io::Result<()>;
    /// Whether blocks never written may read as anything but zeros (a
    /// block device or an NBD export; not a file made sparse).
    fn is_device(&self) -> bool;
}

impl ByteImage for File {
    fn len(&self) -> io::Result<u64> {
        let meta = self.metadata()?;
        if meta.file_type().is_block_device() {
            crate::file::size_of(self)
        } else {
            Ok(meta.len())
        }
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_exact_at(buf, off)
    }
    fn write_at(&self, off: u64, data: &[u8]) -> io::Result<()> {
        self.write_all_at(data, off)
    }
    fn sync(&self) -> io::Result<()> {
        self.sync_data()
    }
    fn is_device(&self) -> bool {
        self.metadata()
            .is_ok_and(|m| m.file_type().is_block_device())
    }
}

/// A block-layer error as an `io::Error`, for callers that report I/O
/// errors beside the image's name: a refusal keeps its reason alone, so
/// the name is not said twice.
pub fn io_error(e: DevError) -> io::Error {
    match e {
        DevError::Io { what, source } => io::Error::new(source.kind(), format!("{what}: {source}")),
        DevError::Refused { reason, .. } => io::Error::other(reason),
        other => io::Error::other(other.to_string()),
    }
}

impl ByteImage for NbdDevice {
    fn len(&self) -> io::Result<u64> {
        Ok(self.len_bytes())
    }
    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_bytes(off, buf).map_err(io_error)
    }
    fn write_at(&self, off: u64, data: &[u8]) -> io::Result<()> {
        self.write_bytes(off, data).map_err(io_error)
    }
    fn sync(&self) -> io::Result<()> {
        crate::BlockDevice::flush(self).map_err(io_error)
    }
    fn is_device(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nbd_schemes_are_uris_and_the_rest_are_paths() {
        for uri in [
            "nbd://localhost/disk",
            "nbd://10.0.0.1:10809/",
            "NBD+UNIX:///export?socket=/run/nbd.sock",
            "nbds://server/x",
            "nbd+vsock://3/",
        ] {
            assert_eq!(Location::parse(uri), Location::Nbd(uri.into()), "{uri}");
        }
        for path in [
            "disk.img",
            "/dev/sdb",
            "./nbd://x",
            "http://host/x",
            "nbd:/x",
        ] {
            assert_eq!(Location::parse(path), Location::Path(path.into()), "{path}");
        }
    }

    #[test]
    fn relative_paths_are_made_absolute_but_uris_are_not() {
        let dir = Path::new("/work");
        assert_eq!(
            Location::parse("a.img").absolute_in(dir),
            Location::Path("/work/a.img".into())
        );
        let uri = Location::parse("nbd://h/e");
        assert_eq!(uri.absolute_in(dir), uri);
        assert_eq!(uri.to_string(), "nbd://h/e");
    }
}
