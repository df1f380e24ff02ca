//! What the passes learn and share: per-inode facts, block ownership, the
//! directory tree as entries describe it, and the findings so far.
//!
//! Memory is bounded by the file system's size, not its contents: 8 bytes
//! per inode, 4 bytes per block (the owner map, which names the first
//! claimant of every block so a second claim can name both), and one
//! record per directory and per directory block.
//!
//! Invariant: `owner[b]` is 0 exactly when nothing has claimed block `b`;
//! every later claim of a claimed block is recorded in `dups`.

use crate::finding::{Finding, FindingKind, Owner};
use std::collections::{BTreeMap, HashMap};

pub const USED: u8 = 1;
pub const DIR: u8 = 2;
pub const REG: u8 = 4;
/// e2fsck's `inode_bad_map`: entries naming it should have file type 0.
pub const BAD: u8 = 8;
pub const ORPHAN: u8 = 16;

const META: u32 = u32::MAX;

#[derive(Copy, Clone, Debug, Default)]
pub struct InodeInfo {
    pub flags: u8,
    /// Directory-entry type code implied by the mode (0: none).
    pub ftype: u8,
    pub links: u16,
    /// Entries naming this inode, `.` and `..` included.
    pub counted: u32,
}

#[derive(Copy, Clone, Debug, Default)]
pub struct DirInfo {
    /// The directory holding the first entry that names this one.
    pub parent: u32,
    /// What this directory's `..` names.
    pub dotdot: u32,
}

/// One block of a directory, to be read in pass 2.
#[derive(Copy, Clone, Debug)]
pub struct DirBlock {
    pub block: u32,
    pub dir: u32,
    pub logical: u64,
}

pub struct State {
    pub inodes: Vec<InodeInfo>,
    owner: Vec<u32>,
    pub dups: BTreeMap<u32, Vec<Owner>>,
    /// Extended-attribute blocks and the inodes naming each.
    pub ea_blocks: BTreeMap<u32, u32>,
    pub dirs: HashMap<u32, DirInfo>,
    pub dir_blocks: Vec<DirBlock>,
    /// Inode `lost+found` names in the root, 0 if none.
    pub lost_found: u32,
    /// In-use inodes on the orphan list (pending truncations).
    pub orphans_in_use: Vec<u32>,
    pub findings: Vec<Finding>,
}

impl State {
    pub fn new(inodes: u32, blocks: u32) -> State {
        State {
            inodes: vec![InodeInfo::default(); inodes as usize],
            owner: vec![0; blocks as usize],
            dups: BTreeMap::new(),
            ea_blocks: BTreeMap::new(),
            dirs: HashMap::new(),
            dir_blocks: Vec::new(),
            lost_found: 0,
            orphans_in_use: Vec::new(),
            findings: Vec::new(),
        }
    }

    pub fn report(&mut self, kind: FindingKind) {
        self.findings.push(Finding::new(kind));
    }

    /// Facts about inode `ino` (1-based); `None` out of range.
    pub fn inode(&self, ino: u32) -> Option<&InodeInfo> {
        self.inodes.get((ino as usize).wrapping_sub(1))
    }

    pub fn inode_mut(&mut self, ino: u32) -> Option<&mut InodeInfo> {
        self.inodes.get_mut((ino as usize).wrapping_sub(1))
    }

    pub fn has(&self, ino: u32, flag: u8) -> bool {
        self.inode(ino).is_some_and(|i| i.flags & flag != 0)
    }

    /// Records that `who` uses block `b` (the caller checked the range).
    pub fn claim(&mut self, b: u32, who: Owner) {
        let code = match who {
            Owner::Metadata => META,
            Owner::Inode(i) => i,
        };
        let Some(slot) = self.owner.get_mut(b as usize) else {
            return;
        };
        if *slot == 0 {
            *slot = code;
            return;
        }
        let first = if *slot == META {
            Owner::Metadata
        } else {
            Owner::Inode(*slot)
        };
        self.dups.entry(b).or_insert_with(|| vec![first]).push(who);
    }

    /// Claims an extended-attribute block, which many inodes may share.
    pub fn claim_ea(&mut self, b: u32, ino: u32) {
        let users = self.ea_blocks.entry(b).or_default();
        *users += 1;
        if *users == 1 {
            self.claim(b, Owner::Inode(ino));
        }
    }

    pub fn is_claimed(&self, b: u32) -> bool {
        self.owner.get(b as usize).is_some_and(|&o| o != 0)
    }
}
