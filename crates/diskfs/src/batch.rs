//! The batch interface the layer above calls at flush time: a list of
//! logical operations, applied in order, each answered with the patch that
//! stands for it (Featherstitch's `patch_t **p` convention, §6) and, for
//! operations that make an inode, its number. A failed operation stops the
//! batch and reports its position; what came before it stays applied.

use crate::attr::SetAttr;
use crate::create::{Owner, Special};
use crate::error::{DiskError, Result};
use crate::fs::DiskFs;
use crate::rename::RenameFlags;
use stitch_format::{InodeNo, Timestamp};
use stitch_patch::PatchId;

/// One logical operation. Names are single components; directories are
/// inode numbers (the layer above resolves paths).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Create {
        parent: InodeNo,
        name: Vec<u8>,
        perm: u16,
        uid: u32,
        gid: u32,
    },
    Mkdir {
        parent: InodeNo,
        name: Vec<u8>,
        perm: u16,
        uid: u32,
        gid: u32,
    },
    Mknod {
        parent: InodeNo,
        name: Vec<u8>,
        kind: Special,
        perm: u16,
        uid: u32,
        gid: u32,
    },
    Symlink {
        parent: InodeNo,
        name: Vec<u8>,
        target: Vec<u8>,
        uid: u32,
        gid: u32,
    },
    Link {
        ino: InodeNo,
        parent: InodeNo,
        name: Vec<u8>,
    },
    Unlink {
        parent: InodeNo,
        name: Vec<u8>,
    },
    Rmdir {
        parent: InodeNo,
        name: Vec<u8>,
    },
    Rename {
        from_dir: InodeNo,
        from: Vec<u8>,
        to_dir: InodeNo,
        to: Vec<u8>,
        flags: RenameFlags,
    },
    Write {
        ino: InodeNo,
        offset: u64,
        data: Vec<u8>,
    },
    Truncate {
        ino: InodeNo,
        size: u64,
    },
    SetAttr {
        ino: InodeNo,
        set: SetAttr,
    },
}

/// What one applied operation produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// The patch standing for the operation: depend on it, or wait for it.
    pub patch: PatchId,
    /// The inode an operation made (create, mkdir, mknod, symlink).
    pub ino: Option<InodeNo>,
}

/// A batch that stopped: the operations before `index` were applied.
#[derive(Debug)]
pub struct BatchError {
    pub index: usize,
    pub error: DiskError,
    pub applied: Vec<Done>,
}

impl DiskFs {
    /// Applies one logical operation.
    pub fn apply(&mut self, op: &Op, now: Timestamp) -> Result<Done> {
        let made = |(ino, patch): (InodeNo, PatchId)| Done {
            patch,
            ino: Some(ino),
        };
        let plain = |patch: PatchId| Done { patch, ino: None };
        // Writes and truncates make their own room; the rest may need a
        // directory block (and its indirect block) and a new block of
        // their own.
        if !matches!(
            op,
            Op::Write { .. }
                | Op::Truncate { .. }
                | Op::SetAttr { .. }
                | Op::Unlink { .. }
                | Op::Rmdir { .. }
        ) {
            self.alloc.room_before_op(&mut self.m, 3)?;
        }
        Ok(match op {
            Op::Create {
                parent,
                name,
                perm,
                uid,
                gid,
            } => made(self.create(*parent, name, *perm, *uid, *gid, now)?),
            Op::Mkdir {
                parent,
                name,
                perm,
                uid,
                gid,
            } => made(self.mkdir(*parent, name, *perm, *uid, *gid, now)?),
            Op::Mknod {
                parent,
                name,
                kind,
                perm,
                uid,
                gid,
            } => made(self.mknod(
                *parent,
                name,
                *kind,
                *perm,
                Owner {
                    uid: *uid,
                    gid: *gid,
                },
                now,
            )?),
            Op::Symlink {
                parent,
                name,
                target,
                uid,
                gid,
            } => made(self.symlink(*parent, name, target, *uid, *gid, now)?),
            Op::Link { ino, parent, name } => plain(self.link(*ino, *parent, name, now)?),
            Op::Unlink { parent, name } => plain(self.unlink(*parent, name, now)?),
            Op::Rmdir { parent, name } => plain(self.rmdir(*parent, name, now)?),
            Op::Rename {
                from_dir,
                from,
                to_dir,
                to,
                flags,
            } => plain(self.rename(*from_dir, from, *to_dir, to, *flags, now)?),
            Op::Write { ino, offset, data } => plain(self.write(*ino, *offset, data, now)?.1),
            Op::Truncate { ino, size } => plain(self.truncate(*ino, *size, now)?),
            Op::SetAttr { ino, set } => plain(self.setattr(*ino, *set, now)?),
        })
    }

    /// Applies one operation that makes an inode (create, mkdir, mknod,
    /// symlink) with the number reserved for it by
    /// [`DiskFs::reserve_inode`]; other operations ignore `ino`.
    pub fn apply_as(&mut self, op: &Op, ino: Option<InodeNo>, now: Timestamp) -> Result<Done> {
        let makes = matches!(
            op,
            Op::Create { .. } | Op::Mkdir { .. } | Op::Mknod { .. } | Op::Symlink { .. }
        );
        self.wanted_ino = if makes { ino } else { None };
        let done = self.apply(op, now);
        // A failed operation leaves the number reserved for a retry.
        self.wanted_ino = None;
        done
    }

    /// Applies `ops` in order; stops at the first failure.
    pub fn apply_batch(
        &mut self,
        ops: &[Op],
        now: Timestamp,
    ) -> std::result::Result<Vec<Done>, BatchError> {
        let mut applied = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            match self.apply(op, now) {
                Ok(done) => applied.push(done),
                Err(error) => {
                    return Err(BatchError {
                        index,
                        error,
                        applied,
                    })
                }
            }
        }
        Ok(applied)
    }
}
