//! Inodes: the 128-byte core every revision has, and the extra fields that
//! 256-byte inodes carry after it (covered by `i_extra_isize`).
//!
//! Bytes of an inode slot past `128 + i_extra_isize` belong to in-inode
//! extended attributes; [`Inode::encode_into`] never touches them, so a
//! decode/modify/encode cycle preserves attributes stitchfs does not model.
//!
//! Times are read and written only through [`Inode::time`] and
//! [`Inode::set_time`], which keep them as the kernel's ext4 driver does
//! (see [`crate::time`]): seconds in the base field, and epoch bits and
//! nanoseconds in the field's `_extra` word where `i_extra_isize` covers
//! it (`EXT4_FITS_IN_INODE`).
//!
//! Invariant: a decoded [`Inode`] has an `extra_isize` that fits its slot
//! and is a multiple of 4 (what e2fsck requires); `extra` fields it does not
//! cover read as zero.

use crate::codec::{offset_of, ondisk, ondisk_block, Le};
use crate::error::{ensure, FormatError, Result, Structure};
use crate::superblock::GOOD_OLD_INODE_SIZE;
use crate::time::{TimeRange, Timestamp};
use crate::units::BlockNo;
pub use crate::units::InodeNo;

/// The bad-blocks inode.
pub const BAD_INO: InodeNo = InodeNo(1);
/// The root directory.
pub const ROOT_INO: InodeNo = InodeNo::ROOT;
/// The `resize_inode` feature's reserved-GDT inode.
pub const RESIZE_INO: InodeNo = InodeNo(7);
/// The journal (ext3).
pub const JOURNAL_INO: InodeNo = InodeNo(8);
/// First inode not reserved (`lost+found` on fresh file systems).
pub const FIRST_INO: InodeNo = InodeNo(11);

/// Number of block pointers in `i_block`: 12 direct, then single, double
/// and triple indirect.
pub const N_BLOCKS: usize = 15;
/// Bytes of the fixed 256-byte-inode extension stitchfs writes in every
/// inode it creates: mke2fs's `s_want_extra_isize` and `s_min_extra_isize`,
/// and what the kernel gives a new inode (`sizeof(struct ext4_inode)` less
/// the 128-byte core, unless the `extra_isize` feature, which stitchfs
/// refuses, asks for more).
pub const WANT_EXTRA_ISIZE: u16 = 32;

/// `i_flags` bits stitchfs needs to recognise.
pub mod flags {
    /// Hash-indexed directory (`dir_index`).
    pub const INDEX: u32 = 0x1000;
    /// Huge file (`huge_file`, refused).
    pub const HUGE_FILE: u32 = 0x4_0000;
    /// Extent-mapped (`extent`, refused).
    pub const EXTENTS: u32 = 0x8_0000;
    /// Inode holds a large extended attribute (`ea_inode`, refused).
    pub const EA_INODE: u32 = 0x20_0000;
    /// Data inline in the inode (`inline_data`, refused).
    pub const INLINE_DATA: u32 = 0x1000_0000;
    /// Flags that change how `i_block` is read; each needs a feature we refuse.
    pub const UNSUPPORTED_MAPPING: u32 = EXTENTS | INLINE_DATA | EA_INODE | HUGE_FILE;
}

/// Mode bits: file type in the top four bits.
pub mod mode {
    pub const S_IFMT: u16 = 0xF000;
    pub const S_IFIFO: u16 = 0x1000;
    pub const S_IFCHR: u16 = 0x2000;
    pub const S_IFDIR: u16 = 0x4000;
    pub const S_IFBLK: u16 = 0x6000;
    pub const S_IFREG: u16 = 0x8000;
    pub const S_IFLNK: u16 = 0xA000;
    pub const S_IFSOCK: u16 = 0xC000;
}

/// A file type, as in the mode bits and in directory entries.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FileType {
    Regular,
    Directory,
    CharDevice,
    BlockDevice,
    Fifo,
    Socket,
    Symlink,
}

impl FileType {
    /// From the `S_IFMT` bits of a mode; `None` for an invalid type.
    pub fn from_mode(m: u16) -> Option<Self> {
        use mode::*;
        Some(match m & S_IFMT {
            S_IFREG => FileType::Regular,
            S_IFDIR => FileType::Directory,
            S_IFCHR => FileType::CharDevice,
            S_IFBLK => FileType::BlockDevice,
            S_IFIFO => FileType::Fifo,
            S_IFSOCK => FileType::Socket,
            S_IFLNK => FileType::Symlink,
            _ => return None,
        })
    }

    /// The `S_IFMT` bits.
    pub fn mode_bits(self) -> u16 {
        use mode::*;
        match self {
            FileType::Regular => S_IFREG,
            FileType::Directory => S_IFDIR,
            FileType::CharDevice => S_IFCHR,
            FileType::BlockDevice => S_IFBLK,
            FileType::Fifo => S_IFIFO,
            FileType::Socket => S_IFSOCK,
            FileType::Symlink => S_IFLNK,
        }
    }

    /// The directory entry `file_type` code (`filetype` feature).
    pub fn dir_code(self) -> u8 {
        match self {
            FileType::Regular => 1,
            FileType::Directory => 2,
            FileType::CharDevice => 3,
            FileType::BlockDevice => 4,
            FileType::Fifo => 5,
            FileType::Socket => 6,
            FileType::Symlink => 7,
        }
    }

    /// From a directory entry code; `None` for 0 (unknown) or > 7.
    pub fn from_dir_code(code: u8) -> Option<Self> {
        [
            FileType::Regular,
            FileType::Directory,
            FileType::CharDevice,
            FileType::BlockDevice,
            FileType::Fifo,
            FileType::Socket,
            FileType::Symlink,
        ]
        .into_iter()
        .find(|t| t.dir_code() == code)
    }
}

ondisk! {
    /// The first 128 bytes of every inode (`struct ext2_inode`, Linux `osd2`).
    pub struct InodeCore: Le, size = 128;
    {
        0x00 mode: u16,
        0x02 uid: u16,
        0x04 size_lo: u32,
        0x08 atime: u32,
        0x0C ctime: u32,
        0x10 mtime: u32,
        0x14 dtime: u32,
        0x18 gid: u16,
        0x1A links_count: u16,
        /// 512-byte sectors, including indirect and EA blocks.
        0x1C blocks_lo: u32,
        0x20 flags: u32,
        0x24 version: u32,
        0x28 block: [u32; 15],
        0x64 generation: u32,
        0x68 file_acl_lo: u32,
        0x6C size_high: u32,
        0x70 obso_faddr: u32,
        0x74 blocks_high: u16,
        0x76 file_acl_high: u16,
        0x78 uid_high: u16,
        0x7A gid_high: u16,
        0x7C checksum_lo: u16,
        0x7E reserved: u16,
    }
}

ondisk! {
    /// The extension of large inodes, at byte 128 of the slot. Only the
    /// first `extra_isize` bytes (at least `extra_isize` itself) are in use.
    pub struct InodeExtra: Le, size = 32;
    {
        0x00 extra_isize: u16,
        0x02 checksum_hi: u16,
        0x04 ctime_extra: u32,
        0x08 mtime_extra: u32,
        0x0C atime_extra: u32,
        0x10 crtime: u32,
        0x14 crtime_extra: u32,
        0x18 version_hi: u32,
        0x1C projid: u32,
    }
}

/// Where a time field's `_extra` word ends, counted from the start of the
/// inode: `i_extra_isize` must reach `end - 128` for the inode to hold it
/// (`EXT4_FITS_IN_INODE`). Every time word is 4 bytes.
const fn extra_end(field: &str) -> usize {
    GOOD_OLD_INODE_SIZE as usize + offset_of(InodeExtra::OFFSETS, field) + 4
}

const CTIME_EXTRA_END: usize = extra_end("ctime_extra");
const MTIME_EXTRA_END: usize = extra_end("mtime_extra");
/// The end of `i_atime_extra`, the last of the three `_extra` words: a
/// file system whose inodes reach it holds nanoseconds
/// ([`TimeRange::Nanoseconds`]).
pub const ATIME_EXTRA_END: usize = extra_end("atime_extra");
const CRTIME_END: usize = extra_end("crtime");
const CRTIME_EXTRA_END: usize = extra_end("crtime_extra");

/// One of the times an inode keeps.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TimeField {
    /// `i_atime`: last read.
    Access,
    /// `i_mtime`: last change of contents.
    Modify,
    /// `i_ctime`: last change of the inode.
    Change,
    /// `i_crtime`: creation, kept only in the extension.
    Create,
}

/// A time's two words: the base (low 32 bits of the seconds) and the
/// `_extra` word (epoch bits and nanoseconds), if the inode holds one.
fn encode_time(t: Timestamp, extra: bool) -> (u32, Option<u32>) {
    if !extra {
        // EXT4_INODE_SET_XTIME without room: clamped 32-bit seconds.
        let t = TimeRange::Seconds.truncate(t);
        return (t.secs() as i32 as u32, None);
    }
    let t = TimeRange::Nanoseconds.truncate(t);
    // ext4_encode_extra_time: how many 2^32 steps the seconds are above
    // their low 32 bits read as signed.
    let epoch = ((t.secs() - i64::from(t.secs() as i32)) >> 32) as u32 & EPOCH_MASK;
    (
        t.secs() as i32 as u32,
        Some(epoch | (t.nsec() << EPOCH_BITS)),
    )
}

/// ext4_decode_extra_time; an `_extra` word of 0 (or none) leaves plain
/// signed seconds. Nanoseconds past 10^9 - 1 (bits no encoder writes) read
/// as 10^9 - 1.
fn decode_time(base: u32, extra: Option<u32>) -> Timestamp {
    let extra = extra.unwrap_or(0);
    let secs = i64::from(base as i32) + (i64::from(extra & EPOCH_MASK) << 32);
    Timestamp::new(secs, (extra >> EPOCH_BITS).min(999_999_999))
}

const EPOCH_BITS: u32 = 2;
const EPOCH_MASK: u32 = (1 << EPOCH_BITS) - 1;

/// An inode: the core, and the extension if the slot is larger than 128 bytes.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Inode {
    pub core: InodeCore,
    pub extra: Option<InodeExtra>,
}

const CORE: usize = GOOD_OLD_INODE_SIZE as usize;

/// Bytes of the extension in use for a given `extra_isize` (the field itself
/// always is).
fn extra_span(extra_isize: u16) -> usize {
    usize::from(extra_isize).clamp(2, InodeExtra::SIZE)
}

impl Inode {
    /// Decodes an inode from its whole slot (`inode_size` bytes).
    pub fn decode(slot: &[u8]) -> Result<Self> {
        let core = InodeCore::decode_raw(slot).ok_or_else(|| {
            FormatError::corrupt(
                Structure::Inode,
                format!("slot of {} bytes, need 128", slot.len()),
            )
        })?;
        let extra = match slot.get(CORE..) {
            Some(rest) if rest.len() >= 2 => Some(Self::decode_extra(rest)?),
            _ => None,
        };
        Ok(Inode { core, extra })
    }

    fn decode_extra(rest: &[u8]) -> Result<InodeExtra> {
        let isize = u16::from_le_bytes([rest[0], rest[1]]);
        ensure(
            usize::from(isize) <= rest.len() && isize.is_multiple_of(4),
            Structure::Inode,
            || {
                format!(
                    "i_extra_isize {isize} invalid for a {} byte slot",
                    rest.len() + CORE
                )
            },
        )?;
        let mut tmp = [0u8; InodeExtra::SIZE];
        let n = extra_span(isize).min(rest.len());
        tmp[..n].copy_from_slice(&rest[..n]);
        Ok(InodeExtra::decode_raw(&tmp).unwrap_or_default())
    }

    /// Encodes into a slot: the core, and the in-use part of the extension.
    /// A slot shorter than 128 bytes is a caller bug.
    pub fn encode_into(&self, slot: &mut [u8]) {
        self.core.encode_into(slot);
        if let (Some(extra), Some(rest)) = (&self.extra, slot.get_mut(CORE..)) {
            let tmp = extra.to_bytes();
            let n = extra_span(extra.extra_isize).min(rest.len());
            rest[..n].copy_from_slice(&tmp[..n]);
        }
    }

    /// A fresh inode for a slot of `inode_size` bytes, with mke2fs's
    /// extension size, all times (creation too) set to `now`.
    pub fn new(ft: FileType, perm: u16, inode_size: u16, now: Timestamp) -> Self {
        let mut core = InodeCore {
            mode: ft.mode_bits() | (perm & 0o7777),
            ..Default::default()
        };
        core.links_count = 1;
        let extra = (usize::from(inode_size) >= CORE + InodeExtra::SIZE).then(|| InodeExtra {
            extra_isize: WANT_EXTRA_ISIZE,
            ..Default::default()
        });
        let mut inode = Inode { core, extra };
        for f in [
            TimeField::Access,
            TimeField::Modify,
            TimeField::Change,
            TimeField::Create,
        ] {
            inode.set_time(f, now);
        }
        inode
    }

    /// `i_extra_isize`: bytes of the extension in use (0 without one).
    pub fn extra_isize(&self) -> u16 {
        self.extra.as_ref().map_or(0, |x| x.extra_isize)
    }

    /// Whether the extension covers bytes up to `end` of the inode.
    fn covers(&self, end: usize) -> bool {
        CORE + usize::from(self.extra_isize()) >= end
    }

    /// A time as the kernel reads it. Creation time is the epoch where the
    /// inode has no room for it.
    pub fn time(&self, f: TimeField) -> Timestamp {
        let x = self.extra.as_ref();
        let word = |end: usize, v: fn(&InodeExtra) -> u32| x.filter(|_| self.covers(end)).map(v);
        match f {
            TimeField::Access => {
                decode_time(self.core.atime, word(ATIME_EXTRA_END, |x| x.atime_extra))
            }
            TimeField::Modify => {
                decode_time(self.core.mtime, word(MTIME_EXTRA_END, |x| x.mtime_extra))
            }
            TimeField::Change => {
                decode_time(self.core.ctime, word(CTIME_EXTRA_END, |x| x.ctime_extra))
            }
            TimeField::Create => match word(CRTIME_END, |x| x.crtime) {
                Some(base) => decode_time(base, word(CRTIME_EXTRA_END, |x| x.crtime_extra)),
                None => Timestamp::EPOCH,
            },
        }
    }

    /// Sets a time as the kernel writes it: with its `_extra` word where
    /// the inode has one, else as clamped whole seconds. Creation time is
    /// kept only where the inode has room for it.
    pub fn set_time(&mut self, f: TimeField, t: Timestamp) {
        let covers = |end| self.covers(end);
        let (fits, extra_fits) = match f {
            TimeField::Access => (true, covers(ATIME_EXTRA_END)),
            TimeField::Modify => (true, covers(MTIME_EXTRA_END)),
            TimeField::Change => (true, covers(CTIME_EXTRA_END)),
            TimeField::Create => (covers(CRTIME_END), covers(CRTIME_EXTRA_END)),
        };
        if !fits {
            return;
        }
        let (base, extra) = encode_time(t, extra_fits);
        let x = self.extra.as_mut();
        let (slot, extra_slot) = match f {
            TimeField::Access => (&mut self.core.atime, x.map(|x| &mut x.atime_extra)),
            TimeField::Modify => (&mut self.core.mtime, x.map(|x| &mut x.mtime_extra)),
            TimeField::Change => (&mut self.core.ctime, x.map(|x| &mut x.ctime_extra)),
            TimeField::Create => {
                let x = x.expect("crtime fits only in the extension");
                (&mut x.crtime, Some(&mut x.crtime_extra))
            }
        };
        *slot = base;
        if let (Some(v), Some(slot)) = (extra, extra_slot) {
            *slot = v;
        }
    }

    /// A change of contents at `t`: modification and change times.
    pub fn touch(&mut self, t: Timestamp) {
        self.set_time(TimeField::Modify, t);
        self.set_time(TimeField::Change, t);
    }

    pub fn file_type(&self) -> Option<FileType> {
        FileType::from_mode(self.core.mode)
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == Some(FileType::Directory)
    }

    /// File size in bytes (`i_size_high` counts for every type in revision 1).
    pub fn size(&self) -> u64 {
        u64::from(self.core.size_lo) | (u64::from(self.core.size_high) << 32)
    }

    pub fn set_size(&mut self, size: u64) {
        self.core.size_lo = size as u32;
        self.core.size_high = (size >> 32) as u32;
    }

    /// Sectors (512 bytes) allocated, as `i_blocks` counts them.
    pub fn sectors(&self) -> u32 {
        self.core.blocks_lo
    }

    /// Extended attribute block, [`NO_BLOCK`](crate::units::NO_BLOCK) if none.
    pub fn file_acl(&self) -> BlockNo {
        BlockNo::from(self.core.file_acl_lo)
    }

    /// Names `block` as the extended attribute block ([`NO_BLOCK`](crate::units::NO_BLOCK): none).
    pub fn set_file_acl(&mut self, block: BlockNo) {
        self.core.file_acl_lo = ondisk_block(block);
    }

    /// Block pointer `slot` of `i_block` ([`NO_BLOCK`](crate::units::NO_BLOCK) = hole): the
    /// twelve direct blocks, then the single, double and triple indirect
    /// ones, in an inode that maps blocks (not a device or a fast symlink,
    /// which keep other things there).
    pub fn block_ptr(&self, slot: usize) -> BlockNo {
        BlockNo::from(self.core.block[slot])
    }

    /// Sets block pointer `slot` of `i_block`.
    pub fn set_block_ptr(&mut self, slot: usize, block: BlockNo) {
        self.core.block[slot] = ondisk_block(block);
    }

    /// Every block pointer of `i_block`, in slot order.
    pub fn block_ptrs(&self) -> impl Iterator<Item = BlockNo> + '_ {
        self.core.block.iter().map(|&b| BlockNo::from(b))
    }

    pub fn uid(&self) -> u32 {
        u32::from(self.core.uid) | (u32::from(self.core.uid_high) << 16)
    }

    pub fn gid(&self) -> u32 {
        u32::from(self.core.gid) | (u32::from(self.core.gid_high) << 16)
    }

    pub fn set_owner(&mut self, uid: u32, gid: u32) {
        self.core.uid = uid as u16;
        self.core.uid_high = (uid >> 16) as u16;
        self.core.gid = gid as u16;
        self.core.gid_high = (gid >> 16) as u16;
    }

    /// Refuses inodes whose block map stitchfs cannot read.
    pub fn check_mapping_supported(&self) -> Result<()> {
        let bad = self.core.flags & flags::UNSUPPORTED_MAPPING;
        if bad == 0 {
            Ok(())
        } else {
            Err(FormatError::unsupported(
                Structure::Inode,
                format!("i_flags 0x{bad:x} (extents, inline data, EA inode or huge file)"),
            ))
        }
    }

    /// The device number of a character or block device inode:
    /// `(major, minor)`, old encoding in `i_block[0]`, new in `i_block[1]`.
    pub fn device(&self) -> (u32, u32) {
        let [old, new] = [self.core.block[0], self.core.block[1]];
        if old != 0 {
            ((old >> 8) & 0xff, old & 0xff)
        } else {
            ((new & 0xfff00) >> 8, (new & 0xff) | ((new >> 12) & 0xfff00))
        }
    }

    /// Stores a device number the way the kernel does (old encoding when it fits).
    pub fn set_device(&mut self, major: u32, minor: u32) {
        self.core.block = [0; N_BLOCKS];
        if major < 256 && minor < 256 {
            self.core.block[0] = (major << 8) | minor;
        } else {
            self.core.block[1] = (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_never_touches_xattr_space() {
        let mut slot = [0xAAu8; 256];
        let mut ino = Inode::new(FileType::Regular, 0o644, 256, Timestamp::from_secs(7));
        ino.extra.as_mut().unwrap().extra_isize = 4;
        ino.extra.as_mut().unwrap().crtime = 9; // not covered by isize 4
        ino.encode_into(&mut slot);
        assert_eq!(&slot[132..], &[0xAA; 124][..], "bytes past 128+4 preserved");
        let back = Inode::decode(&slot).unwrap();
        assert_eq!(
            back.extra.unwrap().crtime,
            0,
            "uncovered field reads as zero"
        );
    }

    /// The kernel's table of encodings (the comment above
    /// `ext4_encode_extra_time` in fs/ext4/ext4.h): seconds, the base field
    /// and the epoch bits, at both ends of every epoch.
    #[test]
    fn times_encode_as_the_kernel_does() {
        let table: [(i64, u32, u32); 10] = [
            (-0x8000_0000, 0x8000_0000, 0),
            (-1, 0xFFFF_FFFF, 0),
            (0, 0, 0),
            (0x7FFF_FFFF, 0x7FFF_FFFF, 0),
            (0x8000_0000, 0x8000_0000, 1),
            (0xFFFF_FFFF, 0xFFFF_FFFF, 1),
            (0x1_0000_0000, 0, 1),
            (0x1_7FFF_FFFF, 0x7FFF_FFFF, 1),
            (0x1_8000_0000, 0x8000_0000, 2),
            (0x3_7FFF_FFFF, 0x7FFF_FFFF, 3),
        ];
        let mut slot = [0u8; 256];
        for (secs, base, epoch) in table {
            let t = Timestamp::new(secs, 123_456_789);
            // The ends of the range keep no nanoseconds (as the kernel's
            // timestamp_truncate).
            let want = match secs {
                0x3_7FFF_FFFF | -0x8000_0000 => Timestamp::from_secs(secs),
                _ => t,
            };
            let mut ino = Inode::new(FileType::Regular, 0o644, 256, Timestamp::EPOCH);
            ino.set_time(TimeField::Modify, t);
            ino.encode_into(&mut slot);
            let x = ino.extra.as_ref().unwrap();
            let words = (ino.core.mtime, x.mtime_extra);
            assert_eq!(words, (base, epoch | want.nsec() << 2), "{secs:#x}");
            let back = Inode::decode(&slot).unwrap();
            assert_eq!(back.time(TimeField::Modify), want, "{secs:#x}");
        }
    }

    /// Without room for an `_extra` word the kernel keeps clamped signed
    /// seconds; a creation time needs the extension.
    #[test]
    fn times_without_room_are_whole_clamped_seconds() {
        let t = |s| Timestamp::new(s, 5);
        let mut ino = Inode::new(FileType::Regular, 0o644, 128, t(100));
        assert_eq!(ino.time(TimeField::Change), Timestamp::from_secs(100));
        assert_eq!(ino.time(TimeField::Create), Timestamp::EPOCH);
        ino.set_time(TimeField::Access, t(1 << 31));
        ino.set_time(TimeField::Modify, t(-(1 << 40)));
        assert_eq!(ino.core.atime, 0x7FFF_FFFF);
        assert_eq!(
            ino.time(TimeField::Modify),
            Timestamp::from_secs(-(1 << 31))
        );
        // An extension too short for atime_extra (kernels before 2.6.23).
        let mut slot = [0u8; 256];
        let mut ino = Inode::new(FileType::Regular, 0o644, 256, t(1));
        ino.extra.as_mut().unwrap().extra_isize = 12;
        ino.set_time(TimeField::Access, t(1 << 31));
        ino.set_time(TimeField::Modify, t(1 << 31));
        ino.encode_into(&mut slot);
        let back = Inode::decode(&slot).unwrap();
        assert_eq!(
            back.time(TimeField::Access),
            Timestamp::from_secs((1 << 31) - 1)
        );
        assert_eq!(back.time(TimeField::Modify), t(1 << 31));
        assert_eq!(back.time(TimeField::Create), Timestamp::EPOCH);
        assert_eq!(ATIME_EXTRA_END, 144);
    }

    #[test]
    fn bad_extra_isize_is_corrupt() {
        let mut slot = [0u8; 256];
        slot[128] = 6;
        assert!(Inode::decode(&slot)
            .unwrap_err()
            .to_string()
            .contains("i_extra_isize 6"));
        slot[128] = 0;
        slot[129] = 1; // 256 > 128
        assert!(Inode::decode(&slot).is_err());
        assert!(Inode::decode(&slot[..100]).is_err());
    }

    #[test]
    fn device_numbers_round_trip_both_encodings() {
        let mut ino = Inode::new(FileType::CharDevice, 0o600, 128, Timestamp::EPOCH);
        for (ma, mi) in [(1, 3), (259, 70000), (8, 300)] {
            ino.set_device(ma, mi);
            assert_eq!(ino.device(), (ma, mi));
        }
    }

    #[test]
    fn file_type_codes_round_trip() {
        for code in 1..=7 {
            let t = FileType::from_dir_code(code).unwrap();
            assert_eq!(t.dir_code(), code);
            assert_eq!(FileType::from_mode(t.mode_bits() | 0o755), Some(t));
        }
        assert_eq!(FileType::from_dir_code(0), None);
        assert_eq!(FileType::from_mode(0), None);
    }
}
