//! Reading inodes from the cache and writing their changed fields as
//! minimal patches.

use crate::diff;
use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, META};
use stitch_format::superblock::GOOD_OLD_INODE_SIZE;
use stitch_format::{Inode, InodeLocation, InodeNo};
use stitch_patch::{BlockNo, PatchId};

impl DiskFs {
    pub(crate) fn locate(&self, ino: InodeNo) -> Result<InodeLocation> {
        let (g, _) = self
            .geo
            .inode_group(ino)
            .ok_or_else(|| DiskError::Corrupt(format!("inode {} out of range", ino.0)))?;
        let table = self.alloc.group(g.0 as usize).inode_table_block();
        self.geo
            .inode_location(ino, table)
            .ok_or_else(|| DiskError::Corrupt(format!("inode {} has no slot", ino.0)))
    }

    /// The inode as the cache holds it (uncommitted changes included).
    pub fn read_inode(&mut self, ino: InodeNo) -> Result<Inode> {
        let loc = self.locate(ino)?;
        let size = usize::from(self.geo.inode_size);
        let block = self.m.read(BlockNo(u64::from(loc.block.0)))?;
        let inode = Inode::decode(&block[loc.offset..loc.offset + size])
            .map_err(|e| e.in_block(u64::from(loc.block.0)))?;
        inode.check_mapping_supported()?;
        Ok(inode)
    }

    /// Patches the fields of `inode` that differ from the cached slot, as
    /// one patch depending on `deps`.
    pub(crate) fn write_inode(
        &mut self,
        ino: InodeNo,
        inode: &Inode,
        deps: &[PatchId],
    ) -> Result<Vec<PatchId>> {
        self.encode_inode(ino, inode, deps, false)
    }

    /// Writes `inode` as one patch depending on `deps`, with every byte of
    /// the slot past its fields (the in-inode extended attributes) zero.
    /// For a new inode: the kernel leaves a deleted file's in-inode
    /// attributes in its slot, and they must not become the new file's.
    /// For an inode whose attributes moved to a block: they go in the
    /// same patch as the pointer to it.
    pub(crate) fn write_inode_clearing_attrs(
        &mut self,
        ino: InodeNo,
        inode: &Inode,
        deps: &[PatchId],
    ) -> Result<Vec<PatchId>> {
        self.encode_slot(ino, inode, deps, None, true)
    }

    /// Like `write_inode`, but the patch covers the whole slot even where
    /// nothing changed: what depends on it then also follows every earlier
    /// write of the inode (its initialization, first of all).
    pub(crate) fn write_whole_inode(
        &mut self,
        ino: InodeNo,
        inode: &Inode,
        deps: &[PatchId],
    ) -> Result<Vec<PatchId>> {
        self.encode_inode(ino, inode, deps, true)
    }

    fn encode_inode(
        &mut self,
        ino: InodeNo,
        inode: &Inode,
        deps: &[PatchId],
        whole: bool,
    ) -> Result<Vec<PatchId>> {
        let size = usize::from(self.geo.inode_size);
        self.encode_slot(ino, inode, deps, whole.then_some((0, size)), false)
    }

    fn encode_slot(
        &mut self,
        ino: InodeNo,
        inode: &Inode,
        deps: &[PatchId],
        cover: Option<(usize, usize)>,
        clear_attrs: bool,
    ) -> Result<Vec<PatchId>> {
        let loc = self.locate(ino)?;
        let size = usize::from(self.geo.inode_size);
        let blk = BlockNo(u64::from(loc.block.0));
        let mut slot = self.m.read(blk)?[loc.offset..loc.offset + size].to_vec();
        inode.encode_into(&mut slot);
        if clear_attrs {
            if let Some(x) = &inode.extra {
                let from = (GOOD_OLD_INODE_SIZE + x.extra_isize) as usize;
                slot[from.min(size)..].fill(0);
            }
        }
        Ok(diff::write_covering(
            &mut self.m,
            blk,
            loc.offset,
            &slot,
            cover,
            deps,
            META,
        )?)
    }
}
