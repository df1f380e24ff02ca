//! Operations that add and remove names: create, mkdir, mknod, symlink,
//! link, unlink, rmdir.
//!
//! Each checks in the order Linux does (name, then existence, then kind,
//! then limits), because tests compare the *first* error too.

use std::collections::BTreeMap;

use super::{Body, Inode, Model};
use crate::types::{InodeNo, Name, Owner, Special, Time};
use crate::Errno;

impl Model {
    /// Checks that `name` may be added to `parent`.
    fn check_new_entry(&self, parent: InodeNo, name: &Name) -> Result<(), Errno> {
        // A removed directory that is still open takes no new entries.
        if parent != InodeNo::ROOT && self.nlink_is_zero(parent) {
            return Err(Errno::Enoent);
        }
        match self.lookup(parent, name) {
            Ok(_) => Err(Errno::Eexist),
            Err(Errno::Enoent) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Checks a symlink target: empty is `ENOENT`, too long `ENAMETOOLONG`.
    pub(crate) fn check_target(&self, target: &[u8]) -> Result<(), Errno> {
        if target.is_empty() {
            return Err(Errno::Enoent);
        }
        if target.len() > self.limits.max_symlink {
            return Err(Errno::Enametoolong);
        }
        Ok(())
    }

    /// Adds a new inode under `parent` and stamps the parent.
    fn add_new(&mut self, parent: InodeNo, name: &Name, inode: Inode, now: Time) -> InodeNo {
        let ino = self.alloc(inode);
        self.dir_entries_mut(parent)
            .expect("checked")
            .insert(name.clone(), ino);
        self.touch_dir(parent, now);
        ino
    }

    /// A directory's contents changed: mtime and ctime move.
    pub(crate) fn touch_dir(&mut self, dir: InodeNo, now: Time) {
        let node = self.inodes.get_mut(&dir).expect("live directory");
        node.mtime = now;
        node.ctime = now;
    }

    /// Creates an empty regular file.
    pub fn create(
        &mut self,
        parent: InodeNo,
        name: &Name,
        perm: u32,
        owner: Owner,
        now: Time,
    ) -> Result<InodeNo, Errno> {
        self.check_new_entry(parent, name)?;
        let inode = Inode::new(perm & 0o7777, owner, now, Body::File(Vec::new()));
        Ok(self.add_new(parent, name, inode, now))
    }

    /// Creates an empty directory. Linux's mkdir keeps only the permission
    /// and sticky bits of `perm` (setuid and setgid are dropped).
    pub fn mkdir(
        &mut self,
        parent: InodeNo,
        name: &Name,
        perm: u32,
        owner: Owner,
        now: Time,
    ) -> Result<InodeNo, Errno> {
        self.check_new_entry(parent, name)?;
        if self.nlink(parent) >= self.limits.dir_link_max {
            return Err(Errno::Emlink);
        }
        let inode = Inode::new(perm & 0o1777, owner, now, Body::Dir(BTreeMap::new()));
        Ok(self.add_new(parent, name, inode, now))
    }

    /// Creates a fifo, socket or device node.
    pub fn mknod(
        &mut self,
        parent: InodeNo,
        name: &Name,
        kind: Special,
        perm: u32,
        owner: Owner,
        now: Time,
    ) -> Result<InodeNo, Errno> {
        self.check_new_entry(parent, name)?;
        let inode = Inode::new(perm & 0o7777, owner, now, Body::Special(kind));
        Ok(self.add_new(parent, name, inode, now))
    }

    /// Creates a symlink (permissions 0777, as on Linux). An empty target
    /// is `ENOENT`, as `symlink(2)` says.
    pub fn symlink(
        &mut self,
        parent: InodeNo,
        name: &Name,
        target: &[u8],
        owner: Owner,
        now: Time,
    ) -> Result<InodeNo, Errno> {
        self.check_target(target)?;
        self.check_new_entry(parent, name)?;
        let inode = Inode::new(0o777, owner, now, Body::Symlink(target.to_vec()));
        Ok(self.add_new(parent, name, inode, now))
    }

    /// Adds a hard link `newparent/newname` to `ino`. Directories cannot be
    /// linked (`EPERM`), but an existing name wins (`EEXIST` first).
    pub fn link(
        &mut self,
        ino: InodeNo,
        newparent: InodeNo,
        newname: &Name,
        now: Time,
    ) -> Result<(), Errno> {
        self.inode(ino)?;
        self.check_new_entry(newparent, newname)?;
        if self.is_dir(ino) {
            return Err(Errno::Eperm);
        }
        if self.nlink(ino) == 0 {
            // Linux refuses to give an orphan a name again (no O_TMPFILE here).
            return Err(Errno::Enoent);
        }
        if self.nlink(ino) >= self.limits.file_link_max {
            return Err(Errno::Emlink);
        }
        self.dir_entries_mut(newparent)?
            .insert(newname.clone(), ino);
        self.touch_dir(newparent, now);
        self.inodes.get_mut(&ino).expect("live").ctime = now;
        Ok(())
    }

    /// Removes a name of a non-directory.
    pub fn unlink(&mut self, parent: InodeNo, name: &Name, now: Time) -> Result<(), Errno> {
        let ino = self.lookup(parent, name)?;
        if self.is_dir(ino) {
            return Err(Errno::Eisdir);
        }
        self.remove_entry(parent, name, ino, now);
        Ok(())
    }

    /// Removes an empty directory.
    pub fn rmdir(&mut self, parent: InodeNo, name: &Name, now: Time) -> Result<(), Errno> {
        let ino = self.lookup(parent, name)?;
        let entries = self.inode(ino)?.entries().ok_or(Errno::Enotdir)?;
        if !entries.is_empty() {
            return Err(Errno::Enotempty);
        }
        self.remove_entry(parent, name, ino, now);
        Ok(())
    }

    /// Drops entry `parent/name` (which names `ino`) and frees `ino` if that
    /// was its last name and it is not open.
    pub(crate) fn remove_entry(&mut self, parent: InodeNo, name: &Name, ino: InodeNo, now: Time) {
        let removed = self.dir_entries_mut(parent).expect("dir").remove(name);
        assert_eq!(removed, Some(ino));
        self.touch_dir(parent, now);
        self.inodes.get_mut(&ino).expect("live").ctime = now;
        self.free_if_unused(ino);
    }
}
