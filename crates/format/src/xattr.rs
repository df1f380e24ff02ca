//! Extended attributes (ext2's `ext_attr` feature): in an attribute block
//! named by `i_file_acl`, and in the spare bytes of a 256-byte inode slot.
//!
//! Files made by the kernel or other tools may carry them in both places:
//! an attribute block, which identical sets share between files through
//! the header's reference count, and entries after the inode's fields.
//! stitchfs reads both and, when a file goes, lets go of its block: frees
//! it, or drops the count. It writes a file's whole set as one new block
//! ([`encode_block`]) and never writes in-inode entries.
//!
//! Both places hold a list of entries ended by four zero bytes: a 16-byte
//! head (name length, name index, value offset, value inode, value size,
//! hash), the name without its prefix, padding to 4 bytes. A value lies at
//! its offset from the start of the block, or, in an inode, from the first
//! entry (just after the in-inode magic number).

use crate::codec::{ondisk, Le};
use crate::error::{ensure, FormatError, Result, Structure};

/// `EXT2_XATTR_MAGIC`.
pub const XATTR_MAGIC: u32 = 0xEA02_0000;

ondisk! {
    /// `struct ext2_xattr_header`, the start of an attribute block.
    pub struct XattrHeader: Le, size = 32;
    {
        0x00 magic: u32,
        /// Inodes whose `i_file_acl` names this block.
        0x04 refcount: u32,
        /// Blocks the attributes use: always 1.
        0x08 blocks: u32,
        0x0C hash: u32,
        0x10 reserved: [u32; 4],
    }
}

impl XattrHeader {
    /// The header of an attribute block; an error if `buf` is not one.
    pub fn parse(buf: &[u8]) -> Result<XattrHeader> {
        let h = Self::decode_raw(buf).ok_or_else(|| {
            FormatError::corrupt(Structure::XattrBlock, "shorter than its header")
        })?;
        ensure(h.magic == XATTR_MAGIC, Structure::XattrBlock, || {
            format!("magic {:#x}, not {XATTR_MAGIC:#x}", h.magic)
        })?;
        ensure(h.blocks == 1, Structure::XattrBlock, || {
            format!("spans {} blocks", h.blocks)
        })?;
        ensure(h.refcount >= 1, Structure::XattrBlock, || {
            "reference count 0".into()
        })?;
        Ok(h)
    }
}

/// Bytes of an entry's fixed head (`struct ext2_xattr_entry` before its name).
const ENTRY_HEAD: usize = 16;

/// One attribute as stored: a name index (the prefix), the rest of the
/// name, and the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xattr {
    pub index: u8,
    pub name: Vec<u8>,
    pub value: Vec<u8>,
}

/// The name indexes ext2/ext4 define and the prefixes they stand for. An
/// ACL index stands for a whole name (its stored name is empty).
pub const PREFIXES: [(u8, &str); 6] = [
    (1, "user."),
    (2, "system.posix_acl_access"),
    (3, "system.posix_acl_default"),
    (4, "trusted."),
    (6, "security."),
    (7, "system."),
];

impl Xattr {
    /// The name programs see (`user.k`), or None for an index we do not
    /// know.
    pub fn full_name(&self) -> Option<Vec<u8>> {
        let (_, prefix) = PREFIXES.iter().find(|(i, _)| *i == self.index)?;
        let mut n = prefix.as_bytes().to_vec();
        n.extend_from_slice(&self.name);
        Some(n)
    }
}

impl Xattr {
    /// The attribute named `full` (`user.k`), or None when its prefix is
    /// not one ext2 can store. An ACL name takes its whole index.
    pub fn named(full: &[u8], value: Vec<u8>) -> Option<Xattr> {
        let (index, prefix) = PREFIXES
            .iter()
            .filter(|(_, p)| full.starts_with(p.as_bytes()))
            .max_by_key(|(_, p)| p.len())?;
        let name = full[prefix.len()..].to_vec();
        // Only the ACL indexes stand for a whole name.
        let whole = matches!(index, 2 | 3);
        (whole == name.is_empty()).then_some(Xattr {
            index: *index,
            name,
            value,
        })
    }

    /// `ext2fs_ext_attr_hash_entry`: the name bytes, then the value as
    /// little-endian words (zero-padded), each folded in by a rotation.
    fn hash(&self) -> u32 {
        let mut h: u32 = 0;
        for &c in &self.name {
            h = (h << 5) ^ (h >> 27) ^ u32::from(c);
        }
        for w in self.value.chunks(4) {
            let mut word = [0u8; 4];
            word[..w.len()].copy_from_slice(w);
            h = (h << 16) ^ (h >> 16) ^ u32::from_le_bytes(word);
        }
        h
    }

    /// Bytes of this attribute's entry (head, name, padding).
    fn entry_len(&self) -> usize {
        (ENTRY_HEAD + self.name.len() + 3) & !3
    }

    /// Bytes of this attribute's value with its padding.
    fn value_len(&self) -> usize {
        (self.value.len() + 3) & !3
    }
}

/// Do `attrs` fit one attribute block of `block_len` bytes?
pub fn fits_block(attrs: &[Xattr], block_len: usize) -> bool {
    let need: usize = attrs.iter().map(|a| a.entry_len() + a.value_len()).sum();
    XattrHeader::SIZE + need + 4 <= block_len
        && attrs
            .iter()
            .all(|a| a.name.len() <= 255 && a.value.len() <= usize::from(u16::MAX))
}

/// An attribute block of `block_len` bytes holding `attrs` for one inode
/// (reference count 1): entries sorted as ext2 keeps them (index, name
/// length, name), values packed down from the end, each entry's hash and
/// the header's hash as e2fsck computes them. None if they do not fit.
pub fn encode_block(attrs: &[Xattr], block_len: usize) -> Option<Vec<u8>> {
    if attrs.is_empty() || !fits_block(attrs, block_len) {
        return None;
    }
    let mut sorted: Vec<&Xattr> = attrs.iter().collect();
    sorted.sort_by(|a, b| (a.index, a.name.len(), &a.name).cmp(&(b.index, b.name.len(), &b.name)));
    let mut buf = vec![0u8; block_len];
    let (mut p, mut end) = (XattrHeader::SIZE, block_len);
    // The header's hash folds in every entry's; an entry without one (0)
    // makes it 0.
    let mut block_hash = Some(0u32);
    for a in sorted {
        end -= a.value_len();
        let offs = if a.value.is_empty() { 0 } else { end };
        buf[end..end + a.value.len()].copy_from_slice(&a.value);
        let h = a.hash();
        buf[p] = a.name.len() as u8;
        buf[p + 1] = a.index;
        buf[p + 2..p + 4].copy_from_slice(&(offs as u16).to_le_bytes());
        buf[p + 8..p + 12].copy_from_slice(&(a.value.len() as u32).to_le_bytes());
        buf[p + 12..p + 16].copy_from_slice(&h.to_le_bytes());
        buf[p + ENTRY_HEAD..p + ENTRY_HEAD + a.name.len()].copy_from_slice(&a.name);
        p += a.entry_len();
        block_hash = block_hash
            .filter(|_| h != 0)
            .map(|b| (b << 16) ^ (b >> 16) ^ h);
    }
    let header = XattrHeader {
        magic: XATTR_MAGIC,
        refcount: 1,
        blocks: 1,
        hash: block_hash.unwrap_or(0),
        reserved: [0; 4],
    };
    header.encode_into(&mut buf[..XattrHeader::SIZE]);
    Some(buf)
}

/// The attributes of an attribute block (header checked first).
pub fn parse_block(buf: &[u8]) -> Result<Vec<Xattr>> {
    XattrHeader::parse(buf)?;
    parse_entries(buf, XattrHeader::SIZE, 0, Structure::XattrBlock)
}

/// The attributes stored in an inode slot past `128 + i_extra_isize`:
/// `area` starts there and runs to the end of the slot. No magic number,
/// no attributes.
pub fn parse_in_inode(area: &[u8]) -> Result<Vec<Xattr>> {
    match area.get(..4) {
        Some(m) if u32::from_le_bytes(m.try_into().expect("4 bytes")) == XATTR_MAGIC => {
            parse_entries(area, 4, 4, Structure::XattrInInode)
        }
        _ => Ok(Vec::new()),
    }
}

/// Entries from `first` to the four zero bytes ending them; values at
/// `base` plus their offset. Everything must lie inside `buf`.
fn parse_entries(buf: &[u8], first: usize, base: usize, what: Structure) -> Result<Vec<Xattr>> {
    let u16_at = |p: usize| u16::from_le_bytes([buf[p], buf[p + 1]]);
    let u32_at = |p: usize| u32::from_le_bytes(buf[p..p + 4].try_into().expect("4 bytes"));
    let mut out = Vec::new();
    let mut p = first;
    loop {
        ensure(p + 4 <= buf.len(), what, || {
            format!("entries run past the end at byte {p}")
        })?;
        if u32_at(p) == 0 {
            return Ok(out);
        }
        ensure(p + ENTRY_HEAD <= buf.len(), what, || {
            format!("entry at byte {p} runs past the end")
        })?;
        let name_len = usize::from(buf[p]);
        let index = buf[p + 1];
        let value_offs = usize::from(u16_at(p + 2));
        let value_inum = u32_at(p + 4);
        let value_size = u32_at(p + 8) as usize;
        let name_end = p + ENTRY_HEAD + name_len;
        ensure(name_end <= buf.len(), what, || {
            format!("name of the entry at byte {p} runs past the end")
        })?;
        ensure(value_inum == 0, what, || {
            format!("entry at byte {p} keeps its value in inode {value_inum} (ea_inode)")
        })?;
        let at = base + value_offs;
        ensure(
            value_size == 0 || at + value_size <= buf.len(),
            what,
            || {
                format!(
                    "value of the entry at byte {p} ({value_size} bytes at {at}) runs past the end"
                )
            },
        )?;
        out.push(Xattr {
            index,
            name: buf[p + ENTRY_HEAD..name_end].to_vec(),
            value: if value_size == 0 {
                Vec::new()
            } else {
                buf[at..at + value_size].to_vec()
            },
        });
        p = (name_end + 3) & !3;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(refcount: u32) -> Vec<u8> {
        let mut b = vec![0u8; 1024];
        b[0..4].copy_from_slice(&XATTR_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&refcount.to_le_bytes());
        b[8..12].copy_from_slice(&1u32.to_le_bytes());
        b[12..16].copy_from_slice(&0xdead_beefu32.to_le_bytes());
        b[16] = 7;
        b
    }

    #[test]
    fn a_header_round_trips_with_a_new_count() {
        let b = block(3);
        let mut h = XattrHeader::parse(&b).unwrap();
        assert_eq!((h.refcount, h.hash), (3, 0xdead_beef));
        h.refcount -= 1;
        let bytes = h.to_bytes();
        let mut want = b[..32].to_vec();
        want[4..8].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(bytes.as_slice(), want.as_slice());
    }

    #[test]
    fn anything_else_is_refused() {
        let mut b = block(1);
        b[3] = 0;
        assert!(XattrHeader::parse(&b).is_err());
        assert!(XattrHeader::parse(&block(0)).is_err());
        let mut two = block(1);
        two[8] = 2;
        assert!(XattrHeader::parse(&two).is_err());
        assert!(XattrHeader::parse(&[0u8; 8]).is_err());
    }

    /// An in-inode area as Linux 6.x wrote it for `user.k=secretlabel` in
    /// a 256-byte slot (copied from a kernel-made image).
    fn kernel_area() -> Vec<u8> {
        let mut a = vec![0u8; 96];
        a[0..4].copy_from_slice(&XATTR_MAGIC.to_le_bytes());
        a[4..24].copy_from_slice(&[
            1, 1, 0x50, 0, 0, 0, 0, 0, 11, 0, 0, 0, 0, 0, 0, 0, b'k', 0, 0, 0,
        ]);
        a[84..95].copy_from_slice(b"secretlabel");
        a
    }

    #[test]
    fn in_inode_attributes_parse_as_the_kernel_wrote_them() {
        let got = parse_in_inode(&kernel_area()).unwrap();
        assert_eq!(
            got,
            [Xattr {
                index: 1,
                name: b"k".to_vec(),
                value: b"secretlabel".to_vec()
            }]
        );
        assert_eq!(got[0].full_name().unwrap(), b"user.k");
        assert!(parse_in_inode(&[0u8; 96]).unwrap().is_empty());
        assert!(parse_in_inode(&[]).unwrap().is_empty());
    }

    #[test]
    fn block_entries_parse_in_order_with_their_prefixes() {
        let mut b = block(1);
        b[16] = 0;
        // security.selinux = "lbl" at 1000, trusted.t = "" (no value).
        b[32..56].copy_from_slice(&[
            7, 6, 0xE8, 3, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, b's', b'e', b'l', b'i', b'n', b'u',
            b'x', 0,
        ]);
        b[56..76].copy_from_slice(&[
            1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b't', 0, 0, 0,
        ]);
        b[1000..1003].copy_from_slice(b"lbl");
        let got = parse_block(&b).unwrap();
        let names: Vec<_> = got.iter().map(|x| x.full_name().unwrap()).collect();
        assert_eq!(names, [b"security.selinux".to_vec(), b"trusted.t".to_vec()]);
        assert_eq!(
            (got[0].value.as_slice(), got[1].value.len()),
            (&b"lbl"[..], 0)
        );
        let unknown = Xattr {
            index: 9,
            name: b"x".to_vec(),
            value: vec![],
        };
        assert_eq!(unknown.full_name(), None);
    }

    #[test]
    fn entries_reaching_outside_are_corrupt() {
        let mut a = kernel_area();
        a[6..8].copy_from_slice(&90u16.to_le_bytes()); // value at 94..105
        assert!(parse_in_inode(&a).is_err());
        let mut a = kernel_area();
        a[8] = 5; // value in inode 5 (ea_inode)
        assert!(parse_in_inode(&a).is_err());
        let mut a = kernel_area();
        a[4] = 200; // name past the end
        assert!(parse_in_inode(&a).is_err());
        let mut a = kernel_area();
        a[20..24].copy_from_slice(&[1, 1, 1, 1]); // no end marker
        for (i, x) in a[24..84].iter_mut().enumerate() {
            *x = 1 + (i % 7) as u8;
        }
        assert!(parse_in_inode(&a).is_err());
    }

    fn attr(full: &str, value: &[u8]) -> Xattr {
        Xattr::named(full.as_bytes(), value.to_vec()).unwrap()
    }

    #[test]
    fn names_split_into_index_and_rest() {
        assert_eq!(
            (attr("user.k", b"").index, attr("user.k", b"").name),
            (1, b"k".to_vec())
        );
        assert_eq!(attr("security.selinux", b"").index, 6);
        assert_eq!(attr("system.posix_acl_access", b"").index, 2);
        assert_eq!(attr("system.posix_acl_access", b"").name, b"");
        for bad in ["user.", "bogus.x", "system.posix_acl_accessx", "trusted"] {
            assert_eq!(Xattr::named(bad.as_bytes(), vec![]), None, "{bad}");
        }
    }

    #[test]
    fn encoded_blocks_parse_back_sorted_as_ext2_keeps_them() {
        let attrs = [
            attr("user.zz", b"second"),
            attr("security.selinux", b"label"),
            attr("user.a", b""),
            attr("user.b", &[7u8; 1000]),
        ];
        let b = encode_block(&attrs, 4096).unwrap();
        let got = parse_block(&b).unwrap();
        let names: Vec<_> = got.iter().map(|a| a.full_name().unwrap()).collect();
        assert_eq!(
            names,
            [&b"user.a"[..], b"user.b", b"user.zz", b"security.selinux"]
        );
        assert_eq!(got[1].value, vec![7u8; 1000]);
        let h = XattrHeader::parse(&b).unwrap();
        assert_eq!((h.refcount, h.blocks), (1, 1));
        assert_ne!(h.hash, 0);
        assert_eq!(encode_block(&[], 4096), None);
        assert_eq!(encode_block(&[attr("user.big", &[1u8; 4096])], 4096), None);
        assert!(fits_block(
            &[attr("user.big", &[1u8; 4096 - 32 - 4 - 24])],
            4096
        ));
    }

    #[test]
    fn hashes_are_e2fsprogs_own() {
        // ext2fs_ext_attr_hash_entry by hand for name "k", value "ab":
        // name: 0 ^ 'k' = 0x6b; value word 0x00006261:
        // (0x6b << 16) ^ (0x6b >> 16) ^ 0x6261 = 0x006b6261.
        assert_eq!(attr("user.k", b"ab").hash(), 0x006b_6261);
        // One entry: the block hash is (0 << 16) ^ (0 >> 16) ^ h = h.
        let b = encode_block(&[attr("user.k", b"ab")], 1024).unwrap();
        assert_eq!(XattrHeader::parse(&b).unwrap().hash, 0x006b_6261);
    }
}
