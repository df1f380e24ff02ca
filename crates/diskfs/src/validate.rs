//! What mount checks before it writes a byte, beyond the superblock and
//! descriptors (decoded and checked by the format crate in `fs`): the
//! root directory, the orphan list and what freeing it touches, the
//! journal a journaled mount will write, and the resize inode the
//! `resize_inode` feature promises. A failed check is a [`Damage`] naming
//! the structure and the problem, as e2fsck would, and the image is left
//! as it was.
//!
//! Invariant: nothing here writes; every read goes through the cache, so
//! a staged journal replay is what is checked.

use crate::error::{Damage, DiskError, Result};
use crate::fs::DiskFs;
use rustc_hash::FxHashSet;
use stitch_format::features::compat;
use stitch_format::indirect::DIND_SLOT;
use stitch_format::inode::{RESIZE_INO, ROOT_INO};
use stitch_format::{dir, FileType, Inode, InodeNo, NO_BLOCK};
use stitch_modes::Consistency;

impl DiskFs {
    /// Every check of this module, for a mount in `consistency`.
    pub(crate) fn check_tree(&mut self, consistency: Consistency) -> Result<()> {
        self.check_root()?;
        self.check_orphans()?;
        if matches!(consistency, Consistency::Journal(_)) {
            let area = self.journal_area()?;
            self.read_journal_superblock(&area)?;
        }
        if self.sb.features().has_compat(compat::RESIZE_INODE) {
            self.check_resize_inode()?;
        }
        Ok(())
    }

    /// The root is an in-use directory with a sane link count whose first
    /// block holds `.` and `..`, both naming it.
    fn check_root(&mut self) -> Result<()> {
        let bad = |why: String| DiskError::from(Damage::Root(why));
        let root = self
            .read_inode(ROOT_INO)
            .map_err(|e| bad(format!("does not decode: {e}")))?;
        if !self.alloc.inode_marked(&mut self.m, ROOT_INO)? {
            return Err(bad("is marked free in the inode bitmap".into()));
        }
        if root.core.links_count == 0 || root.core.dtime != 0 {
            return Err(bad(format!(
                "is deleted ({} links, deletion time {})",
                root.core.links_count, root.core.dtime
            )));
        }
        match root.file_type() {
            Some(FileType::Directory) => {}
            Some(ft) => return Err(bad(format!("is a {}, not a directory", kind(ft)))),
            None => {
                return Err(bad(format!(
                    "has no file type (mode 0o{:o})",
                    root.core.mode
                )))
            }
        }
        if root.core.links_count < 2 {
            return Err(bad(format!(
                "has {} link; a directory has at least 2",
                root.core.links_count
            )));
        }
        let size = root.size();
        if size == 0 || size % self.bs as u64 != 0 {
            return Err(bad(format!(
                "has size {size}, not a whole number of blocks"
            )));
        }
        self.check_root_block(&root)
    }

    /// The root's first block: mapped inside the file system, its entries
    /// well formed, `.` and `..` naming the root.
    fn check_root_block(&mut self, root: &Inode) -> Result<()> {
        let bad = |why: String| DiskError::from(Damage::Root(why));
        let first = self.bmap(root, 0)?;
        let Some(b) = first.filter(|&b| self.layout.in_data_area(b)) else {
            return Err(bad(format!(
                "maps its first block at {}, not inside the file system",
                first.unwrap_or(NO_BLOCK).0
            )));
        };
        let block = self.m.read(b)?;
        dir::check_block(block).map_err(|e| bad(format!("first block {}: {e}", b.0)))?;
        for name in [&b"."[..], b".."] {
            let named = dir::lookup(block, name)?.map(|e| e.inode);
            if named != Some(ROOT_INO) {
                return Err(bad(format!(
                    "has {:?} naming {}, not itself",
                    String::from_utf8_lossy(name),
                    named.map_or(0, |i| i.0)
                )));
            }
        }
        Ok(())
    }

    /// The orphan list (files open when the system stopped, freed by
    /// mount): every link names an inode files may use, marked used, the
    /// list ends, and what freeing each orphan without links frees is
    /// inside the file system, marked used, and freed once.
    fn check_orphans(&mut self) -> Result<()> {
        let bad = |why: String| DiskError::from(Damage::OrphanList(why));
        let (first, last) = (self.sb.first_ino(), self.layout.inodes_count());
        let mut seen = FxHashSet::default();
        let mut freed = FxHashSet::default();
        let mut at = self.sb.last_orphan;
        while at != 0 {
            if at < first || at > last {
                return Err(bad(format!(
                    "names inode {at}, outside the inodes files use ({first}-{last})"
                )));
            }
            if !seen.insert(at) {
                return Err(bad(format!("loops back to inode {at}")));
            }
            let ino = InodeNo(at);
            let inode = self
                .read_inode(ino)
                .map_err(|e| bad(format!("names inode {at}, which does not decode: {e}")))?;
            if !self.alloc.inode_marked(&mut self.m, ino)? {
                return Err(bad(format!("names inode {at}, which is marked free")));
            }
            if inode.core.links_count == 0 {
                for b in self.owned_blocks(&inode)? {
                    if !self.layout.in_data_area(b)
                        || !self.alloc.block_marked(&mut self.m, b)?
                        || !freed.insert(b)
                    {
                        return Err(bad(format!(
                            "names inode {at}, whose {b} is outside the file system, \
                             marked free or owned twice"
                        )));
                    }
                }
            }
            at = inode.core.dtime;
        }
        Ok(())
    }

    /// With `resize_inode`, inode 7 is the regular file that holds the
    /// reserved descriptor blocks (diskfs never writes it, but its blocks
    /// must stay out of the allocator's way).
    fn check_resize_inode(&mut self) -> Result<()> {
        let bad = |why: String| DiskError::from(Damage::ResizeInode(why));
        let inode = self
            .read_inode(RESIZE_INO)
            .map_err(|e| bad(format!("does not decode: {e}")))?;
        if inode.file_type() != Some(FileType::Regular) {
            return Err(bad(format!(
                "is not a regular file (mode 0o{:o})",
                inode.core.mode
            )));
        }
        let dind = inode.block_ptr(DIND_SLOT);
        if !self.layout.in_data_area(dind) {
            return Err(bad(format!(
                "has its double indirect block at {}, not inside the file system",
                dind.0
            )));
        }
        Ok(())
    }
}

/// A file type as e2fsck names it in a sentence.
fn kind(ft: FileType) -> &'static str {
    match ft {
        FileType::Regular => "regular file",
        FileType::Directory => "directory",
        FileType::CharDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::Symlink => "symbolic link",
    }
}
