//! The inode table: reading inodes from the cache and writing their
//! changed fields as minimal patches.

use crate::diff;
use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, META};
use stitch_format::superblock::GOOD_OLD_INODE_SIZE;
use stitch_format::{Inode, InodeLocation, InodeNo, Layout};
use stitch_modes::Modes;
use stitch_patch::{BlockNo, PatchId};

/// Where every inode lives: each group's inode table (fixed once mounted)
/// and the slot size.
pub(crate) struct InodeTable {
    layout: Layout,
    /// The first block of each group's table.
    tables: Vec<BlockNo>,
}

/// How much of an inode's slot a write patches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Span {
    /// The fields that changed.
    Changed,
    /// The whole slot, even where nothing changed.
    Whole,
    /// The fields that changed and every byte past them (the in-inode
    /// extended attributes), cleared.
    ClearingAttrs,
}

impl InodeTable {
    /// The table of a file system laid out as `layout` whose groups' tables
    /// start at `tables`.
    pub(crate) fn new(layout: Layout, tables: Vec<BlockNo>) -> InodeTable {
        InodeTable { layout, tables }
    }

    fn locate(&self, ino: InodeNo) -> Result<InodeLocation> {
        let (g, _) = self
            .layout
            .inode_group(ino)
            .ok_or_else(|| DiskError::Corrupt(format!("inode {} out of range", ino.0)))?;
        self.layout
            .inode_location(ino, self.tables[g.0 as usize])
            .ok_or_else(|| DiskError::Corrupt(format!("inode {} has no slot", ino.0)))
    }

    /// The bytes of `ino`'s slot as the cache holds them, and the block
    /// they are in.
    pub(crate) fn slot(&self, m: &mut Modes, ino: InodeNo) -> Result<(Vec<u8>, BlockNo)> {
        let loc = self.locate(ino)?;
        let size = usize::from(self.layout.inode_size);
        let slot = m.read(loc.block)?[loc.offset..loc.offset + size].to_vec();
        Ok((slot, loc.block))
    }

    /// The inode as the cache holds it (uncommitted changes included).
    pub(crate) fn read(&self, m: &mut Modes, ino: InodeNo) -> Result<Inode> {
        let loc = self.locate(ino)?;
        let size = usize::from(self.layout.inode_size);
        let block = m.read(loc.block)?;
        let inode = Inode::decode(&block[loc.offset..loc.offset + size])
            .map_err(|e| e.in_block(loc.block.0))?;
        inode.check_mapping_supported()?;
        Ok(inode)
    }

    /// Patches the fields of `inode` that differ from the cached slot, as
    /// one patch depending on `deps`.
    pub(crate) fn write(
        &self,
        m: &mut Modes,
        ino: InodeNo,
        inode: &Inode,
        deps: &[PatchId],
    ) -> Result<Vec<PatchId>> {
        self.encode(m, ino, inode, deps, Span::Changed)
    }

    /// Writes `inode` as one patch depending on `deps`, with every byte of
    /// the slot past its fields (the in-inode extended attributes) zero.
    /// For a new inode: the kernel leaves a deleted file's in-inode
    /// attributes in its slot, and they must not become the new file's.
    /// For an inode whose attributes moved to a block: they go in the
    /// same patch as the pointer to it.
    pub(crate) fn write_clearing_attrs(
        &self,
        m: &mut Modes,
        ino: InodeNo,
        inode: &Inode,
        deps: &[PatchId],
    ) -> Result<Vec<PatchId>> {
        self.encode(m, ino, inode, deps, Span::ClearingAttrs)
    }

    /// Like `write`, but the patch covers the whole slot even where
    /// nothing changed: what depends on it then also follows every earlier
    /// write of the inode (its initialization, first of all).
    pub(crate) fn write_whole(
        &self,
        m: &mut Modes,
        ino: InodeNo,
        inode: &Inode,
        deps: &[PatchId],
    ) -> Result<Vec<PatchId>> {
        self.encode(m, ino, inode, deps, Span::Whole)
    }

    fn encode(
        &self,
        m: &mut Modes,
        ino: InodeNo,
        inode: &Inode,
        deps: &[PatchId],
        span: Span,
    ) -> Result<Vec<PatchId>> {
        let loc = self.locate(ino)?;
        let size = usize::from(self.layout.inode_size);
        let blk = loc.block;
        let mut slot = m.read(blk)?[loc.offset..loc.offset + size].to_vec();
        inode.encode_into(&mut slot);
        if span == Span::ClearingAttrs {
            if let Some(x) = &inode.extra {
                let from = (GOOD_OLD_INODE_SIZE + x.extra_isize) as usize;
                slot[from.min(size)..].fill(0);
            }
        }
        let cover = (span == Span::Whole).then_some((0, size));
        Ok(diff::write_covering(
            m, blk, loc.offset, &slot, cover, deps, META,
        )?)
    }
}

impl DiskFs {
    /// The inode as the cache holds it (uncommitted changes included).
    pub fn read_inode(&mut self, ino: InodeNo) -> Result<Inode> {
        self.inodes.read(&mut self.m, ino)
    }
}
