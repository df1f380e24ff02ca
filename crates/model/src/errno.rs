//! Errno-style errors, named as in Linux so a model result and a kernel
//! result compare directly.
//!
//! Invariant: the model only ever returns the named variants; `Other`
//! exists so the real-directory runner can report an errno the model does
//! not know, which then shows up as a mismatch instead of a panic.

/// An error of one file system operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Errno {
    #[error("EPERM: operation not permitted")]
    Eperm,
    #[error("ENOENT: no such file or directory")]
    Enoent,
    #[error("ENXIO: no such device or address")]
    Enxio,
    #[error("EBADF: bad file descriptor")]
    Ebadf,
    #[error("EBUSY: device or resource busy")]
    Ebusy,
    #[error("EEXIST: file exists")]
    Eexist,
    #[error("ENOTDIR: not a directory")]
    Enotdir,
    #[error("EISDIR: is a directory")]
    Eisdir,
    #[error("EINVAL: invalid argument")]
    Einval,
    #[error("EMFILE: too many open files")]
    Emfile,
    #[error("EFBIG: file too large")]
    Efbig,
    #[error("EMLINK: too many links")]
    Emlink,
    #[error("ENAMETOOLONG: file name too long")]
    Enametoolong,
    #[error("ENOTEMPTY: directory not empty")]
    Enotempty,
    #[error("ELOOP: too many levels of symbolic links")]
    Eloop,
    #[error("errno {0}")]
    Other(i32),
}

/// Every named variant with its Linux number; one table for both directions.
const TABLE: [(Errno, i32); 15] = [
    (Errno::Eperm, libc::EPERM),
    (Errno::Enoent, libc::ENOENT),
    (Errno::Enxio, libc::ENXIO),
    (Errno::Ebadf, libc::EBADF),
    (Errno::Ebusy, libc::EBUSY),
    (Errno::Eexist, libc::EEXIST),
    (Errno::Enotdir, libc::ENOTDIR),
    (Errno::Eisdir, libc::EISDIR),
    (Errno::Einval, libc::EINVAL),
    (Errno::Emfile, libc::EMFILE),
    (Errno::Efbig, libc::EFBIG),
    (Errno::Emlink, libc::EMLINK),
    (Errno::Enametoolong, libc::ENAMETOOLONG),
    (Errno::Enotempty, libc::ENOTEMPTY),
    (Errno::Eloop, libc::ELOOP),
];

impl Errno {
    /// The errno for a raw Linux error number.
    pub fn from_raw(raw: i32) -> Errno {
        TABLE
            .iter()
            .find(|(_, n)| *n == raw)
            .map_or(Errno::Other(raw), |(e, _)| *e)
    }

    /// The raw Linux error number (for a FUSE reply, say).
    pub fn raw(self) -> i32 {
        match self {
            Errno::Other(n) => n,
            e => TABLE.iter().find(|(x, _)| *x == e).expect("in table").1,
        }
    }

    /// The errno carried by an I/O error; an error without one is a bug in
    /// the caller (std only makes those for its own invalid arguments).
    pub fn from_io(err: &std::io::Error) -> Errno {
        Errno::from_raw(err.raw_os_error().expect("io error carries an errno"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_round_trips_for_every_variant() {
        for (e, n) in TABLE {
            assert_eq!(Errno::from_raw(n), e);
            assert_eq!(e.raw(), n);
        }
        assert_eq!(Errno::from_raw(libc::EIO), Errno::Other(libc::EIO));
    }
}
