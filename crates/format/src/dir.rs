//! Linear directory blocks: a chain of `ext2_dir_entry_2` records that covers
//! the block exactly.
//!
//! Entry layout (little-endian): `inode: u32`, `rec_len: u16`, `name_len: u8`,
//! `file_type: u8`, then the name; `rec_len` spans the name, padding to 4
//! bytes and any free space after it. An entry with inode 0 is unused. A
//! hash-indexed (`dir_index`) directory's blocks are valid linear blocks too
//! (the index hides in space the linear view sees as free), so clearing the
//! directory's `INDEX` flag after changing it keeps it correct.
//!
//! Invariants: [`entries`] yields an error and stops at the first entry that
//! would leave the block, overlap the next one, or is otherwise malformed;
//! every mutation here leaves a block that [`check_block`] accepts.

use crate::codec::{read, write, Le};
use crate::error::{FormatError, Result, Structure};
use crate::inode::{FileType, InodeNo};

/// Bytes before the name.
pub const HEADER: usize = 8;
/// Longest name.
pub const MAX_NAME: usize = 255;

/// Record length an entry with a name of `name_len` bytes needs.
pub const fn rec_len_for(name_len: usize) -> usize {
    (HEADER + name_len + 3) & !3
}

/// One directory entry, borrowed from its block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry<'a> {
    /// Byte offset of the entry in the block.
    pub offset: usize,
    pub inode: InodeNo,
    pub rec_len: usize,
    pub name: &'a [u8],
    /// Raw `file_type` code (0 = unknown, 1..=7, see [`FileType::dir_code`]).
    pub file_type: u8,
}

impl DirEntry<'_> {
    pub fn file_type(&self) -> Option<FileType> {
        FileType::from_dir_code(self.file_type)
    }

    /// Bytes after this entry's name that a new entry could use.
    pub fn slack(&self) -> usize {
        let used = if self.inode.0 == 0 {
            0
        } else {
            rec_len_for(self.name.len())
        };
        self.rec_len - used
    }
}

/// Decodes `rec_len` as stored; 64 KiB blocks need the kernel's encoding.
fn rec_len_from_disk(raw: u16, block_len: usize) -> usize {
    let raw = usize::from(raw);
    if block_len < 65536 {
        raw
    } else if raw == 65535 || raw == 0 {
        65536
    } else {
        (raw & 65532) | ((raw & 3) << 16)
    }
}

fn rec_len_to_disk(len: usize) -> u16 {
    if len >= 65536 {
        65535
    } else {
        len as u16
    }
}

fn bad(offset: usize, reason: String) -> FormatError {
    FormatError::corrupt_at(Structure::DirectoryBlock, offset, reason)
}

/// Decodes the entry at `offset`, checking it stays inside `block`.
pub fn entry_at(block: &[u8], offset: usize) -> Result<DirEntry<'_>> {
    let header = offset
        .checked_add(HEADER)
        .and_then(|end| block.get(offset..end));
    let Some(header) = header else {
        return Err(bad(offset, "entry header crosses the block end".into()));
    };
    let (inode, raw_rec) = (
        read::<u32, Le>(header, 0).unwrap_or(0),
        read::<u16, Le>(header, 4).unwrap_or(0),
    );
    let rec_len = rec_len_from_disk(raw_rec, block.len());
    let (name_len, file_type) = (usize::from(header[6]), header[7]);
    if rec_len < rec_len_for(1) || !rec_len.is_multiple_of(4) {
        return Err(bad(
            offset,
            format!("rec_len {rec_len} is too small or not a multiple of 4"),
        ));
    }
    if offset + rec_len > block.len() {
        return Err(bad(
            offset,
            format!("rec_len {rec_len} crosses the block end"),
        ));
    }
    if rec_len < rec_len_for(name_len) {
        return Err(bad(
            offset,
            format!("name_len {name_len} does not fit rec_len {rec_len}"),
        ));
    }
    if file_type > 7 {
        return Err(bad(offset, format!("file_type {file_type} unknown")));
    }
    let name = &block[offset + HEADER..offset + HEADER + name_len];
    if inode != 0 && (name.is_empty() || name.contains(&b'/') || name.contains(&0)) {
        return Err(bad(
            offset,
            format!("invalid name {:?}", String::from_utf8_lossy(name)),
        ));
    }
    Ok(DirEntry {
        offset,
        inode: InodeNo(inode),
        rec_len,
        name,
        file_type,
    })
}

/// Iterator over the entries of a block (see [`entries`]).
pub struct Entries<'a> {
    block: &'a [u8],
    offset: usize,
    failed: bool,
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<DirEntry<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.offset >= self.block.len() {
            return None;
        }
        let r = entry_at(self.block, self.offset);
        match &r {
            Ok(e) => self.offset += e.rec_len,
            Err(_) => self.failed = true,
        }
        Some(r)
    }
}

/// Every entry of a block, used ones and unused (inode 0) alike.
pub fn entries(block: &[u8]) -> Entries<'_> {
    Entries {
        block,
        offset: 0,
        failed: false,
    }
}

/// Checks the whole chain of a block.
pub fn check_block(block: &[u8]) -> Result<()> {
    entries(block).try_for_each(|e| e.map(drop))
}

/// Writes an entry header and name at `offset` (caller checked the space).
fn put_entry(block: &mut [u8], offset: usize, inode: InodeNo, rec_len: usize, name: &[u8], ft: u8) {
    write::<u32, Le>(block, offset, inode.0);
    write::<u16, Le>(block, offset + 4, rec_len_to_disk(rec_len));
    block[offset + 6] = name.len() as u8;
    block[offset + 7] = ft;
    block[offset + HEADER..offset + HEADER + name.len()].copy_from_slice(name);
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME || name.contains(&b'/') || name.contains(&0) {
        return Err(FormatError::corrupt(
            Structure::DirectoryBlock,
            format!("cannot store name {:?}", String::from_utf8_lossy(name)),
        ));
    }
    Ok(())
}

/// A block with no entries: one unused record covering it.
pub fn empty_block(block_len: usize) -> Vec<u8> {
    let mut b = vec![0u8; block_len];
    put_entry(&mut b, 0, InodeNo(0), block_len, &[], 0);
    b
}

/// The first block of a new directory: `.` and `..`, the rest free.
pub fn new_dir_block(block_len: usize, this: InodeNo, parent: InodeNo) -> Vec<u8> {
    let mut b = vec![0u8; block_len];
    let dot = rec_len_for(1);
    put_entry(&mut b, 0, this, dot, b".", FileType::Directory.dir_code());
    put_entry(
        &mut b,
        dot,
        parent,
        block_len - dot,
        b"..",
        FileType::Directory.dir_code(),
    );
    b
}

/// Adds `name` in the first entry with room; `Ok(false)` if the block is full.
pub fn insert(block: &mut [u8], name: &[u8], inode: InodeNo, ft: FileType) -> Result<bool> {
    Ok(insert_at(block, name, inode, ft)?.is_some())
}

/// [`insert`], saying where: the offset of the new entry, `None` if the
/// block is full.
pub fn insert_at(
    block: &mut [u8],
    name: &[u8],
    inode: InodeNo,
    ft: FileType,
) -> Result<Option<usize>> {
    check_name(name)?;
    let need = rec_len_for(name.len());
    let spot = entries(block).find_map(|e| match e {
        Ok(e) if e.slack() >= need => Some(Ok((e.offset, e.inode, e.rec_len, e.name.len()))),
        Ok(_) => None,
        Err(err) => Some(Err(err)),
    });
    let Some((off, used_ino, rec_len, name_len)) = spot.transpose()? else {
        return Ok(None);
    };
    if used_ino.0 == 0 {
        put_entry(block, off, inode, rec_len, name, ft.dir_code());
        return Ok(Some(off));
    }
    let keep = rec_len_for(name_len);
    write::<u16, Le>(block, off + 4, rec_len_to_disk(keep));
    put_entry(
        block,
        off + keep,
        inode,
        rec_len - keep,
        name,
        ft.dir_code(),
    );
    Ok(Some(off + keep))
}

/// Finds a used entry by name.
pub fn lookup<'a>(block: &'a [u8], name: &[u8]) -> Result<Option<DirEntry<'a>>> {
    for e in entries(block) {
        let e = e?;
        if e.inode.0 != 0 && e.name == name {
            return Ok(Some(e));
        }
    }
    Ok(None)
}

/// Removes `name`: merged into the previous entry, or marked unused if it is
/// the first. Returns the inode it named, `None` if absent.
pub fn remove(block: &mut [u8], name: &[u8]) -> Result<Option<InodeNo>> {
    let mut prev: Option<(usize, usize)> = None;
    let mut found = None;
    for e in entries(block) {
        let e = e?;
        if e.inode.0 != 0 && e.name == name {
            found = Some((e.offset, e.rec_len, e.inode));
            break;
        }
        prev = Some((e.offset, e.rec_len));
    }
    let Some((off, rec_len, ino)) = found else {
        return Ok(None);
    };
    match prev {
        Some((poff, plen)) => {
            write::<u16, Le>(block, poff + 4, rec_len_to_disk(plen + rec_len));
        }
        None => {
            write::<u32, Le>(block, off, 0);
        }
    }
    Ok(Some(ino))
}

/// Points an existing entry at another inode (rename over, `..` update).
pub fn set_inode(block: &mut [u8], name: &[u8], inode: InodeNo, ft: FileType) -> Result<bool> {
    let Some(off) = lookup(block, name)?.map(|e| e.offset) else {
        return Ok(false);
    };
    write::<u32, Le>(block, off, inode.0);
    block[off + 7] = ft.dir_code();
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(block: &[u8]) -> Vec<(String, u32)> {
        entries(block)
            .map(|e| e.unwrap())
            .filter(|e| e.inode.0 != 0)
            .map(|e| (String::from_utf8_lossy(e.name).into_owned(), e.inode.0))
            .collect()
    }

    #[test]
    fn insert_lookup_remove() {
        let mut b = new_dir_block(4096, InodeNo(2), InodeNo(2));
        assert!(insert(&mut b, b"lost+found", InodeNo(11), FileType::Directory).unwrap());
        assert!(insert(&mut b, b"a", InodeNo(12), FileType::Regular).unwrap());
        let at = insert_at(&mut b, b"bc", InodeNo(13), FileType::Regular).unwrap();
        assert_eq!(at, Some(lookup(&b, b"bc").unwrap().unwrap().offset));
        assert_eq!(remove(&mut b, b"bc").unwrap(), Some(InodeNo(13)));
        check_block(&b).unwrap();
        assert_eq!(
            names(&b),
            [
                (".".into(), 2),
                ("..".into(), 2),
                ("lost+found".into(), 11),
                ("a".into(), 12)
            ]
        );
        assert_eq!(
            lookup(&b, b"a").unwrap().unwrap().file_type(),
            Some(FileType::Regular)
        );
        assert_eq!(remove(&mut b, b"lost+found").unwrap(), Some(InodeNo(11)));
        assert_eq!(remove(&mut b, b"nope").unwrap(), None);
        check_block(&b).unwrap();
        assert_eq!(names(&b).len(), 3);
    }

    #[test]
    fn full_block_reports_false() {
        let mut b = empty_block(1024);
        let mut n = 0;
        while insert(
            &mut b,
            format!("{n:0>200}").as_bytes(),
            InodeNo(20 + n),
            FileType::Regular,
        )
        .unwrap()
        {
            n += 1;
        }
        assert_eq!(n, 4, "1024 / rec_len_for(200)=208");
        check_block(&b).unwrap();
        assert!(insert(&mut b, b"", InodeNo(5), FileType::Regular).is_err());
        assert!(insert(&mut b, b"a/b", InodeNo(5), FileType::Regular).is_err());
    }

    #[test]
    fn corrupt_rec_len_names_offset() {
        let mut b = new_dir_block(4096, InodeNo(2), InodeNo(2));
        b[12 + 4] = 0x10;
        b[12 + 5] = 0x20; // rec_len 0x2010 > block
        let err = check_block(&b).unwrap_err().in_block(40);
        assert_eq!(
            err.to_string(),
            "corrupt directory block (block 40, offset 12): rec_len 8208 crosses the block end"
        );
        b[16] = 3;
        b[17] = 0;
        assert!(check_block(&b).is_err());
    }

    #[test]
    fn truncated_header_is_an_error() {
        // Found by the dir_block fuzzer: 7 bytes hold inode and rec_len but
        // not name_len/file_type.
        for len in 0..HEADER {
            assert!(check_block(&[0x0c; 8][..len]).is_err() || len == 0);
        }
    }

    #[test]
    fn rec_len_64k_encoding() {
        assert_eq!(rec_len_from_disk(rec_len_to_disk(65536), 65536), 65536);
        assert_eq!(rec_len_from_disk(12, 65536), 12);
        let b = empty_block(65536);
        check_block(&b).unwrap();
    }
}
