//! Reclaiming soft-updates leaks (docs/design.md: `stitchfs fsck --repair-leaks`).
//!
//! The checker finds leaks; this module, part of the layer that modifies
//! file systems, fixes them, so the checker stays an independent judge. It
//! takes its own description of each leak ([`Leak`]) and repairs in
//! e2fsck's order: counts first (set to what the bitmaps say, so every later
//! bitmap change, made through the allocator, keeps them in step), then
//! bitmaps, then inode fields, then connectivity and link counts. A leak is
//! never a lost name: an unattached file or an unconnected directory is
//! reconnected to `lost+found` as `#ino`, as e2fsck does. The caller checks
//! again and repeats while leaks remain (one repair can reveal the next: a
//! reconnected directory's old parent now counts one link too many).

use crate::error::{DiskError, Result};
use crate::fs::DiskFs;
use crate::Refusal;
use stitch_format::{BlockNo, FileType, InodeNo, Timestamp};

/// One soft-updates leak, as a checker reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leak {
    /// The link count is above the `counted` entries naming the inode; with
    /// none, the inode is reconnected to `lost+found`.
    LinkCount {
        ino: InodeNo,
        counted: u32,
    },
    /// A directory no entry names.
    UnconnectedDirectory {
        ino: InodeNo,
    },
    /// Blocks marked used that nothing references.
    BlocksLeaked {
        first: BlockNo,
        last: BlockNo,
    },
    /// Inodes marked used that are not in use.
    InodesLeaked {
        first: InodeNo,
        last: InodeNo,
    },
    /// `i_blocks` above the blocks the inode maps (in 512-byte sectors).
    BlockCount {
        ino: InodeNo,
        should_be: u64,
    },
    /// A directory's size short of the blocks it maps (a crash between a
    /// new block's pointer in an indirect block and the size): set to
    /// `should_be`, which makes the block's entries seen again.
    DirSize {
        ino: InodeNo,
        should_be: u64,
    },
    /// An in-use inode whose `i_dtime` is a stale orphan-list link.
    OrphanLink {
        ino: InodeNo,
    },
    /// A deleted inode (no links) with no deletion time: its deletion
    /// stopped between the two writes; the time finishes it, as e2fsck
    /// does.
    DeletionTime {
        ino: InodeNo,
    },
    GroupFreeBlocks {
        group: u32,
        counted: u32,
    },
    GroupFreeInodes {
        group: u32,
        counted: u32,
    },
    GroupDirs {
        group: u32,
        counted: u32,
    },
    FreeBlocks {
        counted: u32,
    },
    FreeInodes {
        counted: u32,
    },
    /// An extended-attribute block's reference count above the inodes
    /// naming it (`users`, at least one).
    XattrRefcount {
        block: BlockNo,
        users: u32,
    },
}

impl Leak {
    /// A group summary or superblock total: what mount sets before
    /// anything else may move it (see `fs`).
    pub fn is_count(&self) -> bool {
        self.rank() == 0
    }

    /// The order repairs are made in (e2fsck's passes, counts first).
    fn rank(&self) -> u8 {
        match self {
            Leak::GroupFreeBlocks { .. }
            | Leak::GroupFreeInodes { .. }
            | Leak::GroupDirs { .. } => 0,
            Leak::FreeBlocks { .. } | Leak::FreeInodes { .. } => 0,
            Leak::BlocksLeaked { .. } | Leak::InodesLeaked { .. } => 1,
            Leak::BlockCount { .. }
            | Leak::DirSize { .. }
            | Leak::OrphanLink { .. }
            | Leak::DeletionTime { .. }
            | Leak::XattrRefcount { .. } => 2,
            Leak::UnconnectedDirectory { .. } => 3,
            Leak::LinkCount { .. } => 4,
        }
    }
}

impl DiskFs {
    /// Repairs `leaks`; returns how many it repaired.
    pub fn repair_leaks(&mut self, leaks: &[Leak], now: Timestamp) -> Result<usize> {
        let mut sorted = leaks.to_vec();
        sorted.sort_by_key(Leak::rank);
        // A reconnected directory gains an entry the report did not count:
        // its link count is left for the next pass to recount.
        let reconnected: Vec<InodeNo> = sorted
            .iter()
            .filter_map(|l| match l {
                Leak::UnconnectedDirectory { ino } => Some(*ino),
                _ => None,
            })
            .collect();
        let mut done = 0;
        for leak in &sorted {
            if matches!(leak, Leak::LinkCount { ino, .. } if reconnected.contains(ino)) {
                continue;
            }
            self.repair(*leak, now)?;
            done += 1;
        }
        Ok(done)
    }

    fn repair(&mut self, leak: Leak, now: Timestamp) -> Result<()> {
        match leak {
            Leak::GroupFreeBlocks { group, counted } => {
                self.set_group(group, counted, |g, n| g.free_blocks_count = n)
            }
            Leak::GroupFreeInodes { group, counted } => {
                self.set_group(group, counted, |g, n| g.free_inodes_count = n)
            }
            Leak::GroupDirs { group, counted } => {
                self.set_group(group, counted, |g, n| g.used_dirs_count = n)
            }
            Leak::FreeBlocks { counted } => {
                self.alloc.set_totals(Some(counted), None);
                self.write_super().map(drop)
            }
            Leak::FreeInodes { counted } => {
                self.alloc.set_totals(None, Some(counted));
                self.write_super().map(drop)
            }
            Leak::BlocksLeaked { first, last } => {
                // Mounting may already have freed some (an orphan's blocks).
                for b in (first.0..=last.0).map(BlockNo) {
                    if self.alloc.block_marked(&mut self.m, b)? {
                        self.alloc.free_block(&mut self.m, b, &[])?;
                    }
                }
                Ok(())
            }
            Leak::InodesLeaked { first, last } => {
                for i in (first.0..=last.0).map(InodeNo) {
                    if self.alloc.inode_marked(&mut self.m, i)? {
                        self.free_inode(i, false, &[])?;
                    }
                }
                Ok(())
            }
            Leak::BlockCount { ino, should_be } => self.edit_inode(ino, |i| {
                i.core.blocks_lo = should_be as u32;
            }),
            Leak::DirSize { ino, should_be } => self.edit_inode(ino, |i| i.set_size(should_be)),
            Leak::OrphanLink { ino } => self.edit_inode(ino, |i| i.core.dtime = 0),
            Leak::DeletionTime { ino } => {
                self.edit_inode(ino, |i| i.core.dtime = now.secs() as u32)
            }
            Leak::XattrRefcount { block, users } => self.set_xattr_refcount(block, users),
            Leak::UnconnectedDirectory { ino } => self.reconnect(ino, FileType::Directory, now),
            Leak::LinkCount { ino, counted: 0 } => {
                let ft = self
                    .read_inode(ino)?
                    .file_type()
                    .unwrap_or(FileType::Regular);
                self.edit_inode(ino, |i| i.core.links_count = 1)?;
                self.reconnect(ino, ft, now)
            }
            Leak::LinkCount { ino, counted } => {
                self.edit_inode(ino, |i| i.core.links_count = counted as u16)
            }
        }
    }

    /// Sets a count of group `group` to `counted`, checked against the
    /// group as mount checks it; the superblock's totals follow the
    /// descriptors.
    fn set_group(
        &mut self,
        group: u32,
        counted: u32,
        f: impl FnOnce(&mut stitch_format::GroupDesc, u16),
    ) -> Result<()> {
        let g = group as usize;
        if g >= self.alloc.groups() {
            return Err(DiskError::Refused(Refusal::Invalid("no such group")));
        }
        let mut gd = self.alloc.group(g).clone();
        let n = u16::try_from(counted)
            .map_err(|_| DiskError::Refused(Refusal::Invalid("a count past 65535")))?;
        f(&mut gd, n);
        self.alloc.set_group(&mut self.m, g, gd)
    }

    fn set_xattr_refcount(&mut self, at: BlockNo, users: u32) -> Result<()> {
        let mut h = stitch_format::xattr::XattrHeader::parse(self.m.read(at)?)?;
        if users == 0 || users > h.refcount {
            return Err(DiskError::Refused(Refusal::Invalid(
                "an attribute block's count only comes down to its users",
            )));
        }
        h.refcount = users;
        self.m
            .byte(at, 0, &h.to_bytes(), &[], crate::fs::META)
            .map(drop)?;
        Ok(())
    }

    fn edit_inode(
        &mut self,
        ino: InodeNo,
        f: impl FnOnce(&mut stitch_format::Inode),
    ) -> Result<()> {
        let mut inode = self.read_inode(ino)?;
        f(&mut inode);
        self.inodes.write(&mut self.m, ino, &inode, &[]).map(drop)
    }

    /// Names `ino` `#ino` in `lost+found` (a directory also gets its `..`
    /// pointed there, and `lost+found` a link for it).
    fn reconnect(&mut self, ino: InodeNo, ft: FileType, now: Timestamp) -> Result<()> {
        let root = self.root();
        let lf = self
            .lookup(root, b"lost+found")?
            .ok_or(DiskError::Refused(Refusal::Invalid(
                "no lost+found to reconnect into",
            )))?
            .ino;
        let name = format!("#{}", ino.0);
        self.add_entry(lf, name.as_bytes(), ino, ft, &[], now)?;
        if ft == FileType::Directory {
            self.set_dotdot(ino, lf, &[])?;
            self.edit_inode(lf, |i| i.core.links_count += 1)?;
        }
        Ok(())
    }
}
