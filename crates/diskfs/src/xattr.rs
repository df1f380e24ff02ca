//! Extended attributes of an inode: read from its slot and its attribute
//! block, and replaced as a whole set.
//!
//! A new set always goes to a new block (copy-on-write), so a block shared
//! with other inodes is never changed under them and a crash sees either
//! the old set or the new one. The order: the block's bitmap bit, its
//! contents, then the inode naming it (its in-inode attributes cleared in
//! the same patch, since the set now lives in the block), then the old
//! block let go of (freed, or its count dropped). A crash between leaves a
//! block allocated and unnamed, or a count too high: leaks, never a name
//! pointing at nothing.

use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, META};
use crate::Refusal;
use stitch_format::features::compat;
use stitch_format::inode::TimeField;
use stitch_format::superblock::GOOD_OLD_INODE_SIZE;
use stitch_format::xattr::{self, Xattr};
use stitch_format::BlockNo;
use stitch_format::{Inode, InodeNo, Timestamp, NO_BLOCK};
use stitch_patch::PatchId;

impl DiskFs {
    /// Can this image hold extended attributes (the `ext_attr` feature)?
    pub fn supports_xattrs(&self) -> bool {
        self.sb.features().has_compat(compat::EXT_ATTR)
    }

    /// The extended attributes of `ino` as the cache holds them: those in
    /// its slot past its fields, then those in its attribute block. A
    /// malformed list or block is a corruption error naming both.
    pub fn xattrs(&mut self, ino: InodeNo) -> Result<Vec<Xattr>> {
        let (slot, block) = self.inodes.slot(&mut self.m, ino)?;
        let inode = Inode::decode(&slot).map_err(|e| e.in_block(block.0))?;
        let mut out = match &inode.extra {
            Some(x) => {
                let from = usize::from(GOOD_OLD_INODE_SIZE + x.extra_isize);
                xattr::parse_in_inode(&slot[from..])
                    .map_err(|e| DiskError::Corrupt(format!("{ino}: in-inode attributes: {e}")))?
            }
            None => Vec::new(),
        };
        let block = inode.file_acl();
        if block != NO_BLOCK {
            out.extend(self.xattr_block(ino, block, xattr::parse_block)?);
        }
        Ok(out)
    }

    /// Reads `ino`'s attribute block `block` through `parse`; a block
    /// outside the file system or one `parse` refuses is a corruption
    /// error naming both.
    pub(crate) fn xattr_block<T>(
        &mut self,
        ino: InodeNo,
        block: BlockNo,
        parse: impl FnOnce(&[u8]) -> stitch_format::Result<T>,
    ) -> Result<T> {
        let corrupt = |why: String| {
            DiskError::Corrupt(format!(
                "{ino}: extended-attribute block {}: {why}",
                block.0
            ))
        };
        if self.layout.group_of_block(block).is_none() {
            return Err(corrupt("beyond the file system".into()));
        }
        parse(self.m.read(block)?).map_err(|e| corrupt(e.to_string()))
    }

    /// Replaces the extended attributes of `ino` with `attrs` (the whole
    /// set; empty removes them all), in the order the module describes.
    /// Refused when the image lacks `ext_attr` or the set does not fit one
    /// block (`NoSpace`, as ext2 does).
    pub fn set_xattrs(&mut self, ino: InodeNo, attrs: &[Xattr], now: Timestamp) -> Result<PatchId> {
        if !self.supports_xattrs() {
            return Err(DiskError::Refused(Refusal::Invalid(
                "the image has no ext_attr feature",
            )));
        }
        self.alloc.room_before_op(&mut self.m, 1)?;
        let mut inode: Inode = self.read_inode(ino)?;
        let old = inode.file_acl();
        let mut made = Vec::new();
        let mut new = NO_BLOCK;
        if !attrs.is_empty() {
            let data = xattr::encode_block(attrs, self.bs).ok_or(DiskError::NoSpace(
                "extended attributes do not fit one block",
            ))?;
            let (blk, bb) = self
                .alloc
                .alloc_block(&mut self.m, self.alloc.inode_group_start(ino))?;
            let init = self.m.byte(blk, 0, &data, &[], META)?;
            made.extend([bb, init]);
            new = blk;
        }
        let sectors = (self.bs / 512) as u32;
        match (old != NO_BLOCK, new != NO_BLOCK) {
            (false, true) => inode.core.blocks_lo += sectors,
            (true, false) => inode.core.blocks_lo -= sectors,
            _ => {}
        }
        inode.set_file_acl(new);
        inode.set_time(TimeField::Change, now);
        let named = self
            .inodes
            .write_clearing_attrs(&mut self.m, ino, &inode, &made)?;
        let mut all = made;
        all.extend(&named);
        if old != NO_BLOCK {
            let released = self.release_xattr_block(ino, old, &named)?;
            all.push(released);
        }
        Ok(self.m.group(&all)?)
    }

    /// An extended-attribute block an inode no longer names (the file was
    /// deleted, or its attributes moved to a new block): freed if the
    /// inode was its only user, else its reference count drops by one.
    /// Either waits for the inode's change (`cleared`), so a crash leaves
    /// the count too high (a leak e2fsck repairs), never too low.
    pub(crate) fn release_xattr_block(
        &mut self,
        ino: InodeNo,
        block: BlockNo,
        cleared: &[PatchId],
    ) -> Result<PatchId> {
        let mut h = self.xattr_block(ino, block, stitch_format::xattr::XattrHeader::parse)?;
        if h.refcount == 1 {
            return self.alloc.free_block(&mut self.m, block, cleared);
        }
        h.refcount -= 1;
        Ok(self.m.byte(block, 0, &h.to_bytes(), cleared, META)?)
    }
}
