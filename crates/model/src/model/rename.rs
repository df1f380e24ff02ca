//! `rename` and `renameat2` (`RENAME_NOREPLACE`, `RENAME_EXCHANGE`).
//!
//! The decision order follows Linux's `do_renameat2` and `vfs_rename`,
//! because tests compare the first error:
//!
//! 1. both flags → `EINVAL`;
//! 2. the source name is looked up (`ENAMETOOLONG`, `ENOENT`), then the
//!    destination name;
//! 3. `NOREPLACE` and the destination exists → `EEXIST` (even if it is the
//!    same inode); `EXCHANGE` and it does not → `ENOENT`;
//! 4. the source is the destination's parent or an ancestor of it →
//!    `EINVAL`; the destination is the source's parent or an ancestor of it →
//!    `ENOTEMPTY` (`EINVAL` for an exchange);
//! 5. source and destination are the same inode (the same name, or two hard
//!    links) → success and *nothing changes* (POSIX);
//! 6. a directory over a non-directory → `ENOTDIR`, the reverse → `EISDIR`;
//! 7. a directory moving to a new parent that is full of links → `EMLINK`;
//! 8. a directory over a non-empty directory → `ENOTEMPTY`.

use super::Model;
use crate::types::{InodeNo, Name, Time};
use crate::Errno;

/// `renameat2` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
}

/// One end of a rename: a directory and a name in it.
#[derive(Clone, Copy)]
struct End<'a> {
    dir: InodeNo,
    name: &'a Name,
}

impl Model {
    /// Renames `sp/sn` to `dp/dn` (see the module comment for the rules).
    pub fn rename(
        &mut self,
        (sp, sn): (InodeNo, &Name),
        (dp, dn): (InodeNo, &Name),
        flags: RenameFlags,
        now: Time,
    ) -> Result<(), Errno> {
        if flags.noreplace && flags.exchange {
            return Err(Errno::Einval);
        }
        let src = self.lookup(sp, sn)?;
        let dst = match self.lookup(dp, dn) {
            Ok(i) => Some(i),
            Err(Errno::Enoent) => None,
            Err(e) => return Err(e),
        };
        if flags.noreplace && dst.is_some() {
            return Err(Errno::Eexist);
        }
        let (from, to) = (End { dir: sp, name: sn }, End { dir: dp, name: dn });
        if flags.exchange {
            let dst = dst.ok_or(Errno::Enoent)?;
            return self.exchange(from, to, (src, dst), now);
        }
        self.check_ancestry(src, dst, sp, dp, Errno::Enotempty)?;
        if dst == Some(src) {
            return Ok(());
        }
        self.check_replace(src, dst, sp, dp)?;
        self.move_entry(from, to, src, dst, now);
        Ok(())
    }

    /// Step 4: no directory may move into its own subtree.
    fn check_ancestry(
        &self,
        src: InodeNo,
        dst: Option<InodeNo>,
        sp: InodeNo,
        dp: InodeNo,
        dst_is_ancestor: Errno,
    ) -> Result<(), Errno> {
        if self.is_dir(src) && self.is_ancestor_or_self(src, dp) {
            return Err(Errno::Einval);
        }
        if let Some(dst) = dst {
            if self.is_dir(dst) && self.is_ancestor_or_self(dst, sp) {
                return Err(dst_is_ancestor);
            }
        }
        Ok(())
    }

    /// Steps 6 to 8 for a plain rename.
    fn check_replace(
        &self,
        src: InodeNo,
        dst: Option<InodeNo>,
        sp: InodeNo,
        dp: InodeNo,
    ) -> Result<(), Errno> {
        let src_dir = self.is_dir(src);
        let dst_dir = dst.map(|d| self.is_dir(d));
        match dst_dir {
            Some(false) if src_dir => return Err(Errno::Enotdir),
            Some(true) if !src_dir => return Err(Errno::Eisdir),
            _ => {}
        }
        let gains_subdir = src_dir && dst_dir != Some(true) && sp != dp;
        if gains_subdir && self.nlink(dp) >= self.limits.dir_link_max {
            return Err(Errno::Emlink);
        }
        if let Some(d) = dst.filter(|d| self.is_dir(*d)) {
            if !self.inodes[&d].entries().expect("dir").is_empty() {
                return Err(Errno::Enotempty);
            }
        }
        Ok(())
    }

    /// Moves the entry, dropping the replaced inode's name.
    fn move_entry(&mut self, from: End, to: End, src: InodeNo, dst: Option<InodeNo>, now: Time) {
        self.dir_entries_mut(from.dir)
            .expect("dir")
            .remove(from.name);
        self.touch_dir(from.dir, now);
        self.inodes.get_mut(&src).expect("live").ctime = now;
        if let Some(d) = dst {
            self.dir_entries_mut(to.dir).expect("dir").remove(to.name);
            self.inodes.get_mut(&d).expect("live").ctime = now;
            self.free_if_unused(d);
        }
        self.dir_entries_mut(to.dir)
            .expect("dir")
            .insert(to.name.clone(), src);
        self.touch_dir(to.dir, now);
    }

    /// `RENAME_EXCHANGE`: the two names swap inodes.
    fn exchange(
        &mut self,
        from: End,
        to: End,
        (src, dst): (InodeNo, InodeNo),
        now: Time,
    ) -> Result<(), Errno> {
        self.check_ancestry(src, Some(dst), from.dir, to.dir, Errno::Einval)?;
        if src == dst {
            return Ok(());
        }
        self.check_exchange_links(src, dst, from.dir, to.dir)?;
        self.dir_entries_mut(from.dir)
            .expect("dir")
            .insert(from.name.clone(), dst);
        self.dir_entries_mut(to.dir)
            .expect("dir")
            .insert(to.name.clone(), src);
        for dir in [from.dir, to.dir] {
            self.touch_dir(dir, now);
        }
        for ino in [src, dst] {
            self.inodes.get_mut(&ino).expect("live").ctime = now;
        }
        Ok(())
    }

    /// Step 7 for an exchange: a directory crossing into a parent that
    /// does not get one back.
    fn check_exchange_links(
        &self,
        src: InodeNo,
        dst: InodeNo,
        sp: InodeNo,
        dp: InodeNo,
    ) -> Result<(), Errno> {
        if sp == dp {
            return Ok(());
        }
        let max = self.limits.dir_link_max;
        let (sd, dd) = (self.is_dir(src), self.is_dir(dst));
        if sd && !dd && self.nlink(dp) >= max {
            return Err(Errno::Emlink);
        }
        if dd && !sd && self.nlink(sp) >= max {
            return Err(Errno::Emlink);
        }
        Ok(())
    }
}
