//! Setting a regular file's size.
//!
//! Soft-updates order, truncating down: the pointers to the cut blocks are
//! cleared (in indirect blocks first, then in the inode together with the
//! new size, so no block is ever mapped past the size on disk), and the
//! blocks are freed only after that (rule 2). The tail of the last kept
//! block is zeroed after the new size too.

use crate::error::{DiskError, Result};
use crate::fs::{DiskFs, DATA};
use crate::Refusal;
use stitch_format::{FileType, Inode, InodeNo, Timestamp};
use stitch_patch::PatchId;

impl DiskFs {
    /// Sets the size of regular file `ino`: growing leaves a hole, shrinking
    /// frees the blocks past the new end.
    pub fn truncate(&mut self, ino: InodeNo, size: u64, now: Timestamp) -> Result<PatchId> {
        let mut inode = self.read_inode(ino)?;
        if inode.is_dir() {
            return Err(DiskError::Refused(Refusal::IsDir));
        }
        if inode.file_type() != Some(FileType::Regular) {
            return Err(DiskError::Refused(Refusal::Invalid(
                "truncate of a special file",
            )));
        }
        let max = stitch_format::indirect::max_blocks(self.bs) * self.bs as u64;
        if size > max {
            return Err(DiskError::Refused(Refusal::TooLarge));
        }
        let mut out = Vec::new();
        if size < inode.size() {
            // A cut inside the indirect map copies the kept part of each
            // indirect block on the way.
            self.alloc.room_before_op(&mut self.m, 3)?;
            let (freed, cleared) = self.cut_map(&mut inode, size.div_ceil(self.bs as u64))?;
            inode.core.blocks_lo -= freed.len() as u32 * (self.bs / 512) as u32;
            inode.set_size(size);
            inode.touch(now);
            let ip = self.inodes.write(&mut self.m, ino, &inode, &cleared)?;
            out.extend(self.zero_tail(&inode, size, &ip)?);
            let after: Vec<PatchId> = cleared.iter().chain(&ip).copied().collect();
            for b in freed {
                out.push(self.alloc.free_block(&mut self.m, b, &after)?);
            }
            out.extend(after);
        } else if size > inode.size() {
            inode.set_size(size);
            inode.touch(now);
            out.extend(self.inodes.write(&mut self.m, ino, &inode, &[])?);
        }
        self.stands_for(&[&out])
    }

    /// Zeros the bytes of the last kept block past the new size, so a later
    /// extension reads zeros there (POSIX), not the cut data. After the
    /// new size (`after`): before it, a crash would show the file at its
    /// old size with zeros in the middle, neither before nor after.
    fn zero_tail(&mut self, inode: &Inode, size: u64, after: &[PatchId]) -> Result<Vec<PatchId>> {
        let in_block = (size % self.bs as u64) as usize;
        if in_block == 0 {
            return Ok(Vec::new());
        }
        match self.bmap(inode, size / self.bs as u64)? {
            Some(p) => Ok(vec![self.m.byte(
                p,
                in_block,
                &vec![0u8; self.bs - in_block],
                after,
                DATA,
            )?]),
            None => Ok(Vec::new()),
        }
    }
}
