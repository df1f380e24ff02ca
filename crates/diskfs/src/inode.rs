//! Reading inodes from the cache and writing their changed fields as
//! minimal patches.

use crate::diff;
use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, META};
use stitch_format::xattr::{self, Xattr};
use stitch_format::{Inode, InodeLocation, InodeNo};
use stitch_patch::{BlockNo, PatchId};

impl DiskFs {
    fn locate(&self, ino: InodeNo) -> Result<InodeLocation> {
        let (g, _) = self
            .geo
            .inode_group(ino)
            .ok_or_else(|| DiskError::Corrupt(format!("inode {} out of range", ino.0)))?;
        let table = self.gds[g.0 as usize].inode_table_block();
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

    /// The extended attributes of `ino` as the cache holds them: those in
    /// its slot past its fields, then those in its attribute block. A
    /// malformed list or block is a corruption error naming both.
    pub fn xattrs(&mut self, ino: InodeNo) -> Result<Vec<Xattr>> {
        let corrupt = |where_: String, why: String| {
            DiskError::Corrupt(format!("inode {ino}: {where_}: {why}"))
        };
        let loc = self.locate(ino)?;
        let size = usize::from(self.geo.inode_size);
        let slot =
            self.m.read(BlockNo(u64::from(loc.block.0)))?[loc.offset..loc.offset + size].to_vec();
        let inode = Inode::decode(&slot).map_err(|e| e.in_block(u64::from(loc.block.0)))?;
        let mut out = match &inode.extra {
            Some(x) => xattr::parse_in_inode(&slot[128 + usize::from(x.extra_isize)..])
                .map_err(|e| corrupt("in-inode attributes".into(), e.to_string()))?,
            None => Vec::new(),
        };
        let block = inode.file_acl();
        if block != 0 {
            let where_ = || format!("extended-attribute block {block}");
            if self
                .geo
                .group_of_block(stitch_format::BlockNo(block))
                .is_none()
            {
                return Err(corrupt(where_(), "beyond the file system".into()));
            }
            let buf = self.m.read(BlockNo(u64::from(block)))?;
            out.extend(xattr::parse_block(buf).map_err(|e| corrupt(where_(), e.to_string()))?);
        }
        Ok(out)
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

    /// Writes a new inode into its slot as one patch depending on `deps`.
    /// Every byte of the slot past what `inode` encodes becomes zero: a
    /// freed slot keeps the in-inode extended attributes of the file that
    /// had it (the kernel leaves them when it deletes one), and they must
    /// not come back as attributes of the new file.
    pub(crate) fn init_inode(
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
        fresh: bool,
    ) -> Result<Vec<PatchId>> {
        let loc = self.locate(ino)?;
        let size = usize::from(self.geo.inode_size);
        let blk = BlockNo(u64::from(loc.block.0));
        let mut slot = if fresh {
            vec![0; size]
        } else {
            self.m.read(blk)?[loc.offset..loc.offset + size].to_vec()
        };
        inode.encode_into(&mut slot);
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
