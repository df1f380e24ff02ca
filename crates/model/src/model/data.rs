//! File contents and attributes: read, write, truncate, setattr.
//!
//! Invariant: file data is one vector whose length is the file size; a
//! hole is zeros, so reading a hole gives zeros exactly as a sparse file
//! does on disk.

use super::{Body, Model};
use crate::types::{InodeNo, Owner, Time};
use crate::Errno;

/// Attribute changes of `setattr`; `None` leaves a field alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetAttr {
    /// New permission bits (`& 0o7777`); the type never changes.
    pub perm: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<Time>,
    pub mtime: Option<Time>,
}

impl Model {
    /// The data of a regular file, or the errno reading or writing any
    /// other kind gives.
    fn file_data(&mut self, ino: InodeNo) -> Result<&mut Vec<u8>, Errno> {
        match &mut self.inode_mut(ino)?.body {
            Body::File(d) => Ok(d),
            Body::Dir(_) => Err(Errno::Eisdir),
            _ => Err(Errno::Einval),
        }
    }

    /// Writes `data` at `offset`, extending the file (with a zero hole if
    /// `offset` is past the end). An empty write changes nothing.
    pub fn write(
        &mut self,
        ino: InodeNo,
        offset: u64,
        data: &[u8],
        now: Time,
    ) -> Result<usize, Errno> {
        let max = self.limits.max_file_size;
        let file = self.file_data(ino)?;
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::Efbig)?;
        if end > max {
            return Err(Errno::Efbig);
        }
        let (start, end) = (offset as usize, end as usize);
        if file.len() < end {
            file.resize(end, 0);
        }
        file[start..end].copy_from_slice(data);
        self.stamp_data(ino, now);
        Ok(data.len())
    }

    /// Sets the size, cutting or zero-extending.
    pub fn truncate(&mut self, ino: InodeNo, size: u64, now: Time) -> Result<(), Errno> {
        let max = self.limits.max_file_size;
        let file = self.file_data(ino)?;
        if size > max {
            return Err(Errno::Efbig);
        }
        file.resize(size as usize, 0);
        self.stamp_data(ino, now);
        Ok(())
    }

    /// Data changed: mtime and ctime move.
    fn stamp_data(&mut self, ino: InodeNo, now: Time) {
        let node = self.inodes.get_mut(&ino).expect("live");
        node.mtime = now;
        node.ctime = now;
    }

    /// Up to `len` bytes at `offset` (fewer at the end of the file).
    pub fn read(&mut self, ino: InodeNo, offset: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let file = self.file_data(ino)?;
        let start = (offset.min(file.len() as u64)) as usize;
        let end = start.saturating_add(len).min(file.len());
        Ok(file[start..end].to_vec())
    }

    /// Changes attributes; ctime moves whenever anything is set.
    pub fn setattr(&mut self, ino: InodeNo, attr: SetAttr, now: Time) -> Result<(), Errno> {
        let node = self.inode_mut(ino)?;
        if let Some(p) = attr.perm {
            node.perm = p & 0o7777;
        }
        let Owner { uid, gid } = node.owner;
        node.owner = Owner {
            uid: attr.uid.unwrap_or(uid),
            gid: attr.gid.unwrap_or(gid),
        };
        if let Some(t) = attr.atime {
            node.atime = t;
        }
        if let Some(t) = attr.mtime {
            node.mtime = t;
        }
        if attr != SetAttr::default() {
            node.ctime = now;
        }
        Ok(())
    }
}
