//! What the checker finds, and how each finding is classified.
//!
//! Every finding is one [`FindingKind`] variant carrying the numbers a repair
//! needs (inode, block range, stored and correct count). Its [`Class`] is a
//! function of the kind alone, fixed by docs/design.md ("Consistency modes:
//! what a crash leaves"): a *soft-updates leak* is a link count too high, an inode or
//! block marked used but unreferenced, or a wrong group count; a *note* is a
//! superblock free total that lags the group descriptors (ext3 and ext4
//! leave them so between syncs, as stitchfs does; e2fsck reports them and
//! exits 0, the kernel and e2fsck recompute them); everything else is
//! *corruption*. Crash tests rely on this being exact, so the table lives in
//! one `match` ([`FindingKind::class`]) and nowhere else.
//!
//! Invariant: a leak never names something a repair could not safely release
//! or recount; a kind whose repair would lose a reachable file is corruption.

use serde::Serialize;
use std::fmt;

/// Corruption, a leak that soft updates may leave after a crash, or a note
/// that no mode counts against the file system.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    Corruption,
    Leak,
    /// A superblock free total that differs from the sum of the group
    /// descriptors' counts, which decide.
    Note,
}

/// Who claims a block.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Owner {
    /// Superblock copies, descriptor tables, bitmaps, inode tables.
    Metadata,
    Inode(u32),
}

/// Which bitmap.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BitmapKind {
    Block,
    Inode,
}

/// One problem, with what a repair needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FindingKind {
    // --- superblock, groups, journal (pass 0) ---
    /// The primary superblock does not decode; a backup was used.
    SuperblockCorrupt {
        reason: String,
    },
    GroupDescriptorCorrupt {
        group: u32,
        reason: String,
    },
    JournalCorrupt {
        reason: String,
    },
    /// The journal holds transactions from log block `start`, but the
    /// superblock does not ask for recovery: the kernel discards them
    /// unread (e2fsck -n names it and exits 0).
    JournalDataIgnored {
        start: u32,
    },
    // --- inodes and block maps (pass 1) ---
    /// The mode names no file type, or a field e2fsck requires zero is set.
    BadInode {
        ino: u32,
        reason: String,
    },
    InUseWithDtime {
        ino: u32,
        dtime: u32,
        /// The dtime is an orphan-list link (below the inode count), not a
        /// time: the list's own bookkeeping, which e2fsck -n names all the
        /// same.
        orphan_link: bool,
    },
    /// A deleted inode (links 0) with a mode but no deletion time, not on
    /// the orphan list.
    DeletedWithoutDtime {
        ino: u32,
    },
    /// An inode on the orphan list whose deletion did not finish: it and its
    /// blocks are marked used but nothing refers to them.
    Orphan {
        ino: u32,
    },
    /// A block pointer outside the file system; `logical` is `None` for an
    /// indirect block.
    IllegalBlock {
        ino: u32,
        logical: Option<u64>,
        block: u32,
    },
    BlockClaimedTwice {
        block: u32,
        owners: Vec<Owner>,
    },
    BadSize {
        ino: u32,
        size: u64,
        should_be: u64,
        /// A directory whose size, a whole number of blocks, stops short
        /// of blocks it maps.
        dir_blocks_past_size: bool,
    },
    BadBlockCount {
        ino: u32,
        i_blocks: u64,
        should_be: u64,
    },
    /// An extended-attribute block some inode names is not one.
    XattrBlockCorrupt {
        block: u32,
        reason: String,
    },
    /// An extended-attribute block's reference count differs from the
    /// inodes naming it.
    XattrRefcountWrong {
        block: u32,
        refcount: u32,
        should_be: u32,
    },
    ZeroLengthDirectory {
        ino: u32,
    },
    InvalidSymlink {
        ino: u32,
    },
    // --- directories (pass 2) ---
    DirectoryHole {
        dir: u32,
        logical: u64,
    },
    DirBlockCorrupt {
        dir: u32,
        logical: u64,
        block: u32,
        offset: usize,
        reason: String,
    },
    MissingDot {
        dir: u32,
    },
    BadDot {
        dir: u32,
        found: u32,
    },
    MissingDotDot {
        dir: u32,
    },
    DuplicateDot {
        dir: u32,
        name: String,
    },
    BadName {
        dir: u32,
        ino: u32,
        name: String,
    },
    /// An entry naming a reserved or out-of-range inode number.
    EntryBadInode {
        dir: u32,
        name: String,
        ino: u32,
    },
    /// An entry naming an inode that is not in use (dangling).
    DanglingEntry {
        dir: u32,
        name: String,
        ino: u32,
    },
    LinkToDot {
        dir: u32,
        name: String,
    },
    LinkToRoot {
        dir: u32,
        name: String,
    },
    /// A second entry naming a directory (directories have one parent).
    LinkToDirectory {
        dir: u32,
        name: String,
        ino: u32,
    },
    FileTypeWrong {
        dir: u32,
        name: String,
        ino: u32,
        found: u8,
        should_be: u8,
    },
    // --- connectivity (pass 3) ---
    RootMissing,
    LostFoundMissing,
    /// A directory no entry names: used but unreferenced.
    UnconnectedDirectory {
        ino: u32,
        dotdot: u32,
    },
    DirectoryLoop {
        ino: u32,
    },
    DotDotWrong {
        dir: u32,
        found: u32,
        should_be: u32,
    },
    // --- reference counts (pass 4) ---
    /// `counted` 0 means no entry names the inode (e2fsck: "unattached").
    LinkCountTooHigh {
        ino: u32,
        stored: u16,
        counted: u32,
    },
    LinkCountTooLow {
        ino: u32,
        stored: u16,
        counted: u32,
    },
    // --- group summaries (pass 5), block and inode ranges are inclusive ---
    /// Marked used in the bitmap, referenced by nothing.
    BlocksLeaked {
        first: u32,
        last: u32,
    },
    /// In use but marked free: an allocator could hand them out again.
    BlocksMarkedFree {
        first: u32,
        last: u32,
    },
    InodesLeaked {
        first: u32,
        last: u32,
    },
    InodesMarkedFree {
        first: u32,
        last: u32,
    },
    BitmapPaddingClear {
        group: u32,
        bitmap: BitmapKind,
    },
    GroupFreeBlocksWrong {
        group: u32,
        stored: u32,
        counted: u32,
    },
    GroupFreeInodesWrong {
        group: u32,
        stored: u32,
        counted: u32,
    },
    GroupDirsWrong {
        group: u32,
        stored: u32,
        counted: u32,
    },
    FreeBlocksWrong {
        stored: u32,
        counted: u32,
    },
    FreeInodesWrong {
        stored: u32,
        counted: u32,
    },
}

impl FindingKind {
    /// The classification of docs/design.md; the only place it is decided.
    pub fn class(&self) -> Class {
        use FindingKind::*;
        match self {
            Orphan { .. }
            | UnconnectedDirectory { .. }
            | LinkCountTooHigh { .. }
            | BlocksLeaked { .. }
            | InodesLeaked { .. }
            | GroupFreeBlocksWrong { .. }
            | GroupFreeInodesWrong { .. }
            | GroupDirsWrong { .. } => Class::Leak,
            FreeBlocksWrong { .. } | FreeInodesWrong { .. } => Class::Note,
            // A block count too high is what soft updates leaves when a crash
            // falls between counting a block and pointing at it (a count
            // goes up before a reference and down after it, like a link
            // count); too low would mean a mapped block went uncounted.
            BadBlockCount {
                i_blocks,
                should_be,
                ..
            } if i_blocks > should_be => Class::Leak,
            // Likewise an attribute block's count: it drops only after an
            // inode stops naming the block; too low, and freeing it with
            // its next-to-last user would leave the last one pointing at a
            // free block.
            XattrRefcountWrong {
                refcount,
                should_be,
                ..
            } if refcount > should_be => Class::Leak,
            // A directory growing through an indirect block: soft updates
            // writes the pointer to its new block, then (another block, the
            // inode) its size, and a crash between leaves the block past
            // the size, unseen by the kernel (it reads to the size). Its
            // contents are checked as any directory block's (a bad one is
            // reported apart); the repair extends the size, as e2fsck does.
            BadSize {
                dir_blocks_past_size: true,
                ..
            } => Class::Leak,
            // An in-use orphan's dtime links the orphan list onward.
            InUseWithDtime {
                orphan_link: true, ..
            } => Class::Leak,
            // A deletion that stopped after the last link went and before
            // the deletion time: an inode marked used that nothing reaches
            // (an entry naming it is reported apart, as a corruption), as
            // when a crash falls after an orphan left the orphan list and
            // before its deletion. e2fsck's repair only finishes the
            // deletion, and its preen mode makes it unasked.
            DeletedWithoutDtime { .. } => Class::Leak,
            _ => Class::Corruption,
        }
    }

    /// Whether e2fsck -n counts it as an uncorrected error (exit 4). Notes,
    /// the superblock's totals, are only hints (the kernel recomputes them
    /// at mount), so e2fsck reports them but exits 0 (`PR_NO_OK` in its
    /// problem table); a bad primary superblock it replaces by a backup in
    /// memory and, not allowed to write, exits 0 as well; journal data
    /// without the needs_recovery flag it declines to replay or clear, and
    /// exits 0 too. The findings stay in the report either way.
    pub fn is_error(&self) -> bool {
        self.class() != Class::Note
            && !matches!(
                self,
                FindingKind::SuperblockCorrupt { .. } | FindingKind::JournalDataIgnored { .. }
            )
    }
}

/// A finding as reported: kind, class and a sentence for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub class: Class,
    #[serde(flatten)]
    pub kind: FindingKind,
    pub message: String,
}

impl Finding {
    pub fn new(kind: FindingKind) -> Finding {
        Finding {
            class: kind.class(),
            message: kind.to_string(),
            kind,
        }
    }
}

fn range(what: &str, first: u32, last: u32) -> String {
    if first == last {
        format!("{what} {first}")
    } else {
        format!("{what}s {first}-{last}")
    }
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use FindingKind::*;
        match self {
            SuperblockCorrupt { reason } => write!(f, "primary superblock is corrupt ({reason}); checked with a backup"),
            GroupDescriptorCorrupt { group, reason } => write!(f, "group {group} descriptor: {reason}"),
            JournalCorrupt { reason } => write!(f, "journal: {reason}"),
            JournalDataIgnored { start } => write!(f, "journal holds transactions (from block {start}) but the superblock does not ask for recovery; the kernel discards them"),
            BadInode { ino, reason } => write!(f, "inode {ino}: {reason}"),
            InUseWithDtime { ino, dtime, .. } => write!(f, "inode {ino} is in use but has dtime {dtime}"),
            DeletedWithoutDtime { ino } => write!(f, "deleted inode {ino} has zero dtime"),
            Orphan { ino } => write!(f, "inode {ino} is on the orphan list, its deletion unfinished"),
            IllegalBlock { ino, logical: Some(l), block } => write!(f, "illegal block #{l} ({block}) in inode {ino}"),
            IllegalBlock { ino, logical: None, block } => write!(f, "illegal indirect block ({block}) in inode {ino}"),
            BlockClaimedTwice { block, owners } => write!(f, "block {block} is claimed by {owners:?}"),
            BadSize { ino, size, should_be, .. } => write!(f, "inode {ino}: i_size is {size}, should be {should_be}"),
            BadBlockCount { ino, i_blocks, should_be } => write!(f, "inode {ino}: i_blocks is {i_blocks}, should be {should_be}"),
            XattrBlockCorrupt { block, reason } => write!(f, "extended-attribute block {block}: {reason}"),
            XattrRefcountWrong { block, refcount, should_be } => write!(f, "extended-attribute block {block} has reference count {refcount}, should be {should_be}"),
            ZeroLengthDirectory { ino } => write!(f, "inode {ino} is a zero-length directory"),
            InvalidSymlink { ino } => write!(f, "symlink inode {ino} is invalid"),
            DirectoryHole { dir, logical } => write!(f, "directory inode {dir} has an unallocated block #{logical}"),
            DirBlockCorrupt { dir, logical, block, offset, reason } => write!(f, "directory inode {dir}, block #{logical} ({block}), offset {offset}: {reason}"),
            MissingDot { dir } => write!(f, "missing '.' in directory inode {dir}"),
            BadDot { dir, found } => write!(f, "'.' in directory inode {dir} names inode {found}"),
            MissingDotDot { dir } => write!(f, "missing '..' in directory inode {dir}"),
            DuplicateDot { dir, name } => write!(f, "duplicate '{name}' entry in directory inode {dir}"),
            BadName { dir, ino, name } => write!(f, "entry {name:?} (inode {ino}) in directory inode {dir} has an illegal name"),
            EntryBadInode { dir, name, ino } => write!(f, "entry {name:?} in directory inode {dir} has bad inode number {ino}"),
            DanglingEntry { dir, name, ino } => write!(f, "entry {name:?} in directory inode {dir} names unused inode {ino}"),
            LinkToDot { dir, name } => write!(f, "entry {name:?} in directory inode {dir} is a link to '.'"),
            LinkToRoot { dir, name } => write!(f, "entry {name:?} in directory inode {dir} is a link to the root"),
            LinkToDirectory { dir, name, ino } => write!(f, "entry {name:?} in directory inode {dir} is a second link to directory {ino}"),
            FileTypeWrong { dir, name, ino, found, should_be } => write!(f, "entry {name:?} (inode {ino}) in directory inode {dir} has file type {found}, should be {should_be}"),
            RootMissing => write!(f, "root inode is not an allocated directory"),
            LostFoundMissing => write!(f, "/lost+found not found"),
            UnconnectedDirectory { ino, dotdot } => write!(f, "unconnected directory inode {ino} (was in {dotdot})"),
            DirectoryLoop { ino } => write!(f, "directory inode {ino} is in a loop"),
            DotDotWrong { dir, found, should_be } => write!(f, "'..' in directory inode {dir} is {found}, should be {should_be}"),
            LinkCountTooHigh { ino, stored, counted } => write!(f, "inode {ino} link count is {stored}, should be {counted}"),
            LinkCountTooLow { ino, stored, counted } => write!(f, "inode {ino} link count is {stored}, should be {counted}"),
            BlocksLeaked { first, last } => write!(f, "{} marked used but unreferenced", range("block", *first, *last)),
            BlocksMarkedFree { first, last } => write!(f, "{} in use but marked free", range("block", *first, *last)),
            InodesLeaked { first, last } => write!(f, "{} marked used but unreferenced", range("inode", *first, *last)),
            InodesMarkedFree { first, last } => write!(f, "{} in use but marked free", range("inode", *first, *last)),
            BitmapPaddingClear { group, bitmap } => write!(f, "padding at the end of group {group}'s {bitmap:?} bitmap is not set"),
            GroupFreeBlocksWrong { group, stored, counted } => write!(f, "free blocks count wrong for group {group} ({stored}, counted={counted})"),
            GroupFreeInodesWrong { group, stored, counted } => write!(f, "free inodes count wrong for group {group} ({stored}, counted={counted})"),
            GroupDirsWrong { group, stored, counted } => write!(f, "directories count wrong for group {group} ({stored}, counted={counted})"),
            FreeBlocksWrong { stored, counted } => write!(f, "free blocks count wrong ({stored}, counted={counted})"),
            FreeInodesWrong { stored, counted } => write!(f, "free inodes count wrong ({stored}, counted={counted})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory short of its blocks is a leak; any other bad size is
    /// corruption.
    #[test]
    fn only_a_directory_short_of_its_blocks_is_a_leak_among_bad_sizes() {
        let bad = |past| FindingKind::BadSize {
            ino: 12,
            size: 49_152,
            should_be: 53_248,
            dir_blocks_past_size: past,
        };
        assert_eq!(bad(true).class(), Class::Leak);
        assert_eq!(bad(false).class(), Class::Corruption);
        assert!(bad(true).is_error(), "e2fsck -n exits 4 on it");
    }
}
