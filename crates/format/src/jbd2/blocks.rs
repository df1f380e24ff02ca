//! Log blocks: the common header, descriptor blocks and their tags, commit
//! blocks and revoke blocks, with their checksums.
//!
//! Descriptor and revoke blocks of a `CSUM_V2`/`CSUM_V3` journal end with a
//! 4-byte tail holding the block's CRC32C; tags and revoke records never reach
//! into it.

use super::checksum::{crc32c_raw, data_block_csum};
use super::JBD2_MAGIC;
use crate::codec::{ondisk, read, write, Be};
use crate::error::{ensure, FormatError, Result, Structure};
use crate::units::BlockNo;

/// `h_blocktype` values.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum BlockType {
    Descriptor = 1,
    Commit = 2,
    SuperblockV1 = 3,
    SuperblockV2 = 4,
    Revoke = 5,
    FastCommit = 6,
}

impl BlockType {
    pub fn from_u32(v: u32) -> Option<Self> {
        use BlockType::*;
        [
            Descriptor,
            Commit,
            SuperblockV1,
            SuperblockV2,
            Revoke,
            FastCommit,
        ]
        .into_iter()
        .find(|t| *t as u32 == v)
    }
}

ondisk! {
    /// `journal_header_t`, the first 12 bytes of every metadata block of the log.
    pub struct BlockHeader: Be, size = 12;
    {
        0x0 magic: u32,
        0x4 blocktype: u32,
        0x8 sequence: u32,
    }
}

impl BlockHeader {
    pub fn new(t: BlockType, sequence: u32) -> Self {
        BlockHeader {
            magic: JBD2_MAGIC,
            blocktype: t as u32,
            sequence,
        }
    }

    /// The header of a log block, `None` if it is not a journal metadata
    /// block (no magic, unknown type): during replay that ends the log.
    pub fn parse(buf: &[u8]) -> Option<(BlockType, u32)> {
        let h = Self::decode_raw(buf)?;
        (h.magic == JBD2_MAGIC).then_some(())?;
        Some((BlockType::from_u32(h.blocktype)?, h.sequence))
    }
}

/// Tag flags.
pub mod tag_flags {
    /// The data block began with the JBD2 magic, which was zeroed in the log.
    pub const ESCAPE: u32 = 1;
    /// No UUID follows this tag.
    pub const SAME_UUID: u32 = 2;
    pub const DELETED: u32 = 4;
    pub const LAST_TAG: u32 = 8;
}

/// Bytes of the checksum tail of descriptor and revoke blocks.
pub const TAIL_SIZE: usize = 4;
const UUID_SIZE: usize = 16;

/// How tags and revoke records are laid out, from the journal's features.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TagFormat {
    pub csum_v2: bool,
    pub csum_v3: bool,
    pub bit64: bool,
}

impl TagFormat {
    /// `journal_tag_bytes()`: 16 with v3; else 12 (8 without 64bit), plus 2 with v2.
    pub fn tag_bytes(self) -> usize {
        if self.csum_v3 {
            return 16;
        }
        let base = if self.bit64 { 12 } else { 8 };
        base + if self.csum_v2 { 2 } else { 0 }
    }

    pub fn has_tail(self) -> bool {
        self.csum_v2 || self.csum_v3
    }

    /// Bytes of a block usable by tags or revoke records.
    fn usable(self, block_len: usize) -> usize {
        block_len.saturating_sub(if self.has_tail() { TAIL_SIZE } else { 0 })
    }

    fn revoke_record(self) -> usize {
        if self.bit64 {
            8
        } else {
            4
        }
    }
}

/// One descriptor tag: the home location of the next data block in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorTag {
    pub blocknr: BlockNo,
    pub flags: u32,
    /// Data block checksum (v2: low 16 bits only).
    pub checksum: u32,
    /// The UUID after the tag, when `SAME_UUID` is clear.
    pub uuid: Option<[u8; 16]>,
}

impl DescriptorTag {
    fn encoded_len(&self, fmt: TagFormat) -> usize {
        fmt.tag_bytes() + if self.uuid.is_some() { UUID_SIZE } else { 0 }
    }
}

/// A home block number's low and high 32 bits, as tags and revoke records
/// keep them.
fn halves(b: BlockNo) -> (u32, u32) {
    (b.0 as u32, (b.0 >> 32) as u32)
}

fn corrupt(s: Structure, off: usize, reason: String) -> FormatError {
    FormatError::corrupt_at(s, off, reason)
}

fn expect_header(buf: &[u8], want: BlockType, s: Structure) -> Result<u32> {
    match BlockHeader::parse(buf) {
        Some((t, seq)) if t == want => Ok(seq),
        Some((t, _)) => Err(corrupt(
            s,
            0,
            format!("block type {t:?}, expected {want:?}"),
        )),
        None => Err(corrupt(s, 0, "no journal block header".into())),
    }
}

fn decode_tag(buf: &[u8], off: usize, fmt: TagFormat) -> DescriptorTag {
    let u32_at = |o: usize| read::<u32, Be>(buf, off + o).unwrap_or(0);
    let u16_at = |o: usize| read::<u16, Be>(buf, off + o).map_or(0, u32::from);
    let (flags, checksum, high) = if fmt.csum_v3 {
        (u32_at(4), u32_at(12), u32_at(8))
    } else {
        (u16_at(6), u16_at(4), if fmt.bit64 { u32_at(8) } else { 0 })
    };
    let blocknr = BlockNo(u64::from(u32_at(0)) | (u64::from(high) << 32));
    DescriptorTag {
        blocknr,
        flags,
        checksum,
        uuid: None,
    }
}

/// Writes one tag; its block number's high half is written where the
/// format has room for it, and is zero otherwise (`encode_descriptor`
/// checks).
fn encode_tag(buf: &mut [u8], off: usize, tag: &DescriptorTag, fmt: TagFormat) {
    let (low, high) = halves(tag.blocknr);
    write::<u32, Be>(buf, off, low);
    if fmt.csum_v3 {
        write::<u32, Be>(buf, off + 4, tag.flags);
        write::<u32, Be>(buf, off + 8, high);
        write::<u32, Be>(buf, off + 12, tag.checksum);
    } else {
        write::<u16, Be>(buf, off + 4, tag.checksum as u16);
        write::<u16, Be>(buf, off + 6, tag.flags as u16);
        if fmt.bit64 {
            write::<u32, Be>(buf, off + 8, high);
        }
    }
}

/// Refuses a home block number past 32 bits where a tag or revoke record
/// keeps 32 (`wide`: it keeps 64).
fn check_width(b: BlockNo, wide: bool, s: Structure) -> Result<()> {
    ensure(wide || b.to_u32().is_some(), s, || {
        format!("{b} does not fit a 32-bit journal record")
    })
}

/// Decodes a descriptor block: its sequence and tags, in log order.
pub fn decode_descriptor(buf: &[u8], fmt: TagFormat) -> Result<(u32, Vec<DescriptorTag>)> {
    let s = Structure::JournalDescriptor;
    let seq = expect_header(buf, BlockType::Descriptor, s)?;
    let end = fmt.usable(buf.len());
    let mut off = BlockHeader::SIZE;
    let mut tags = Vec::new();
    while off + fmt.tag_bytes() <= end {
        let mut tag = decode_tag(buf, off, fmt);
        off += fmt.tag_bytes();
        if tag.flags & tag_flags::SAME_UUID == 0 {
            let uuid = buf
                .get(off..off + UUID_SIZE)
                .filter(|_| off + UUID_SIZE <= end);
            let uuid =
                uuid.ok_or_else(|| corrupt(s, off, "tag UUID crosses the block end".into()))?;
            tag.uuid = Some(uuid.try_into().unwrap_or([0; 16]));
            off += UUID_SIZE;
        }
        let last = tag.flags & tag_flags::LAST_TAG != 0;
        tags.push(tag);
        if last {
            break;
        }
    }
    ensure(!tags.is_empty(), s, || "no tags".into())?;
    Ok((seq, tags))
}

/// Builds a descriptor block. The first tag should carry the UUID and the
/// others `SAME_UUID`; the caller sets `LAST_TAG` on the last. Fails if the
/// tags do not fit.
pub fn encode_descriptor(
    seq: u32,
    tags: &[DescriptorTag],
    fmt: TagFormat,
    block_len: usize,
) -> Result<Vec<u8>> {
    let need: usize = BlockHeader::SIZE + tags.iter().map(|t| t.encoded_len(fmt)).sum::<usize>();
    ensure(
        need <= fmt.usable(block_len),
        Structure::JournalDescriptor,
        || format!("{} tags need {need} bytes", tags.len()),
    )?;
    for tag in tags {
        // Replay reads a tag's high half only with `64bit` (as the kernel
        // does), though `tag3` has room for it.
        check_width(tag.blocknr, fmt.bit64, Structure::JournalDescriptor)?;
    }
    let mut buf = vec![0u8; block_len];
    BlockHeader::new(BlockType::Descriptor, seq).encode_into(&mut buf);
    let mut off = BlockHeader::SIZE;
    for tag in tags {
        encode_tag(&mut buf, off, tag, fmt);
        off += fmt.tag_bytes();
        if let Some(uuid) = tag.uuid {
            buf[off..off + UUID_SIZE].copy_from_slice(&uuid);
            off += UUID_SIZE;
        }
    }
    Ok(buf)
}

/// How many tags (all but the first with `SAME_UUID`) fit one descriptor.
pub fn tags_per_descriptor(fmt: TagFormat, block_len: usize) -> usize {
    let room = fmt
        .usable(block_len)
        .saturating_sub(BlockHeader::SIZE + UUID_SIZE);
    room / fmt.tag_bytes()
}

/// The checksum a tag carries for `data` (v2 keeps the low 16 bits).
pub fn tag_checksum(fmt: TagFormat, seed: u32, seq: u32, data: &[u8]) -> u32 {
    let c = data_block_csum(seed, seq, data);
    if fmt.csum_v3 {
        c
    } else {
        c & 0xFFFF
    }
}

/// CRC32C of a descriptor or revoke block with its tail zeroed.
fn tail_csum(seed: u32, buf: &[u8]) -> u32 {
    let mut copy = buf.to_vec();
    let n = copy.len();
    copy[n.saturating_sub(TAIL_SIZE)..].fill(0);
    crc32c_raw(seed, &copy)
}

/// Stores the block's checksum in its tail (`CSUM_V2`/`CSUM_V3` only).
pub fn set_tail_checksum(buf: &mut [u8], seed: u32) {
    let c = tail_csum(seed, buf);
    let n = buf.len();
    write::<u32, Be>(buf, n.saturating_sub(TAIL_SIZE), c);
}

/// Verifies a descriptor or revoke block's tail checksum.
pub fn verify_tail_checksum(buf: &[u8], seed: u32, s: Structure) -> Result<()> {
    let n = buf.len();
    let stored = read::<u32, Be>(buf, n.saturating_sub(TAIL_SIZE)).unwrap_or(0);
    let want = tail_csum(seed, buf);
    ensure(stored == want, s, || {
        format!("tail checksum 0x{stored:08x}, computed 0x{want:08x}")
    })
}

/// `h_chksum_type` values of commit blocks.
pub mod commit_csum {
    pub const CRC32: u8 = 1;
    pub const MD5: u8 = 2;
    pub const SHA1: u8 = 3;
    pub const CRC32C: u8 = 4;
    /// `h_chksum_size` of a CRC32.
    pub const CRC32_SIZE: u8 = 4;
}

ondisk! {
    /// `struct commit_header`.
    pub struct CommitBlock: Be, size = 0x3C;
    {
        0x00 magic: u32,
        0x04 blocktype: u32,
        0x08 sequence: u32,
        0x0C chksum_type: u8,
        0x0D chksum_size: u8,
        0x0E padding: [u8; 2],
        0x10 chksum: [u32; 8],
        0x30 commit_sec: u64,
        0x38 commit_nsec: u32,
    }
}

impl CommitBlock {
    pub fn new(sequence: u32, sec: u64, nsec: u32) -> Self {
        CommitBlock {
            magic: JBD2_MAGIC,
            blocktype: BlockType::Commit as u32,
            sequence,
            commit_sec: sec,
            commit_nsec: nsec,
            ..Default::default()
        }
    }

    pub fn decode(buf: &[u8]) -> Result<Self> {
        expect_header(buf, BlockType::Commit, Structure::JournalCommit)?;
        Self::decode_raw(buf)
            .ok_or_else(|| FormatError::corrupt(Structure::JournalCommit, "truncated"))
    }

    /// The whole commit block, with a v2/v3 checksum if `csum_seed` is given.
    pub fn encode_block(&self, block_len: usize, csum_seed: Option<u32>) -> Vec<u8> {
        let mut buf = vec![0u8; block_len.max(Self::SIZE)];
        self.encode_into(&mut buf);
        if let Some(seed) = csum_seed {
            write::<u32, Be>(&mut buf, 0x10, 0);
            let c = crc32c_raw(seed, &buf);
            write::<u32, Be>(&mut buf, 0x10, c);
        }
        buf
    }

    /// Verifies the v2/v3 checksum of a commit block (`h_chksum[0]` zeroed).
    pub fn verify_csum_v2v3(buf: &[u8], seed: u32) -> Result<()> {
        let stored = read::<u32, Be>(buf, 0x10).unwrap_or(0);
        let mut copy = buf.to_vec();
        write::<u32, Be>(&mut copy, 0x10, 0);
        let want = crc32c_raw(seed, &copy);
        ensure(stored == want, Structure::JournalCommit, || {
            format!("checksum 0x{stored:08x}, computed 0x{want:08x}")
        })
    }
}

/// A revoke block: home blocks whose earlier log copies must not be replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevokeBlock {
    pub sequence: u32,
    pub blocks: Vec<BlockNo>,
}

const REVOKE_HEADER: usize = 16;

impl RevokeBlock {
    pub fn decode(buf: &[u8], fmt: TagFormat) -> Result<Self> {
        let s = Structure::JournalRevoke;
        let sequence = expect_header(buf, BlockType::Revoke, s)?;
        let count = read::<u32, Be>(buf, 12).unwrap_or(0) as usize;
        let rec = fmt.revoke_record();
        ensure(
            count >= REVOKE_HEADER && count <= fmt.usable(buf.len()),
            s,
            || {
                format!(
                    "r_count {count} outside {REVOKE_HEADER}..={}",
                    fmt.usable(buf.len())
                )
            },
        )?;
        ensure((count - REVOKE_HEADER).is_multiple_of(rec), s, || {
            format!("r_count {count} not a whole number of records")
        })?;
        let blocks = buf[REVOKE_HEADER..count]
            .chunks_exact(rec)
            .map(|c| {
                if rec == 8 {
                    read::<u64, Be>(c, 0).map(BlockNo)
                } else {
                    read::<BlockNo, Be>(c, 0)
                }
            })
            .map(|v| v.unwrap_or(BlockNo(0)))
            .collect();
        Ok(RevokeBlock { sequence, blocks })
    }

    /// How many records fit one revoke block.
    pub fn capacity(fmt: TagFormat, block_len: usize) -> usize {
        fmt.usable(block_len).saturating_sub(REVOKE_HEADER) / fmt.revoke_record()
    }

    /// Encodes the block (without its tail checksum); fails if it does not fit.
    pub fn encode(&self, fmt: TagFormat, block_len: usize) -> Result<Vec<u8>> {
        let rec = fmt.revoke_record();
        ensure(
            self.blocks.len() <= Self::capacity(fmt, block_len),
            Structure::JournalRevoke,
            || format!("{} records do not fit", self.blocks.len()),
        )?;
        for &b in &self.blocks {
            check_width(b, rec == 8, Structure::JournalRevoke)?;
        }
        let mut buf = vec![0u8; block_len];
        BlockHeader::new(BlockType::Revoke, self.sequence).encode_into(&mut buf);
        write::<u32, Be>(
            &mut buf,
            12,
            (REVOKE_HEADER + rec * self.blocks.len()) as u32,
        );
        for (i, &b) in self.blocks.iter().enumerate() {
            let off = REVOKE_HEADER + i * rec;
            if rec == 8 {
                write::<u64, Be>(&mut buf, off, b.0);
            } else {
                write::<u32, Be>(&mut buf, off, halves(b).0);
            }
        }
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn formats() -> [TagFormat; 5] {
        let f = |csum_v2, csum_v3, bit64| TagFormat {
            csum_v2,
            csum_v3,
            bit64,
        };
        [
            f(false, false, false),
            f(false, false, true),
            f(true, false, false),
            f(true, false, true),
            f(false, true, true),
        ]
    }

    #[test]
    fn tag_sizes_match_journal_tag_bytes() {
        let sizes: Vec<usize> = formats().iter().map(|f| f.tag_bytes()).collect();
        assert_eq!(sizes, [8, 12, 10, 14, 16]);
    }

    #[test]
    fn descriptor_round_trip_every_format() {
        for fmt in formats() {
            let n = tags_per_descriptor(fmt, 4096);
            let tags: Vec<DescriptorTag> = (0..n)
                .map(|i| DescriptorTag {
                    blocknr: BlockNo(1000 + i as u64 + if fmt.bit64 { 1 << 33 } else { 0 }),
                    flags: if i == 0 { 0 } else { tag_flags::SAME_UUID }
                        | if i + 1 == n { tag_flags::LAST_TAG } else { 0 },
                    checksum: if fmt.csum_v3 {
                        0xdead_beef
                    } else if fmt.csum_v2 {
                        0xbeef
                    } else {
                        0
                    },
                    uuid: (i == 0).then_some([9; 16]),
                })
                .collect();
            let mut buf = encode_descriptor(42, &tags, fmt, 4096).unwrap();
            if fmt.has_tail() {
                set_tail_checksum(&mut buf, 77);
                verify_tail_checksum(&buf, 77, Structure::JournalDescriptor).unwrap();
            }
            assert_eq!(
                decode_descriptor(&buf, fmt).unwrap(),
                (42, tags.clone()),
                "{fmt:?}"
            );
            let mut more = tags.clone();
            more.push(tags[1].clone());
            assert!(
                encode_descriptor(42, &more, fmt, 4096).is_err(),
                "{fmt:?} one tag too many"
            );
        }
    }

    /// A home block past 32 bits is refused where the record keeps 32,
    /// never cut to its low half.
    #[test]
    fn blocks_past_32_bits_need_64bit_records() {
        let far = BlockNo(1 << 32);
        for fmt in formats() {
            let tag = DescriptorTag {
                blocknr: far,
                flags: tag_flags::LAST_TAG,
                checksum: 0,
                uuid: Some([9; 16]),
            };
            let revoke = RevokeBlock {
                sequence: 3,
                blocks: vec![far],
            };
            let encoded = [
                encode_descriptor(42, &[tag], fmt, 4096).is_ok(),
                revoke.encode(fmt, 4096).is_ok(),
            ];
            assert_eq!(encoded, [fmt.bit64; 2], "{fmt:?}");
        }
    }

    #[test]
    fn revoke_round_trip_and_bad_count() {
        for fmt in formats() {
            let cap = RevokeBlock::capacity(fmt, 1024);
            let r = RevokeBlock {
                sequence: 3,
                blocks: (0..cap as u64).map(BlockNo).collect(),
            };
            let mut buf = r.encode(fmt, 1024).unwrap();
            assert_eq!(RevokeBlock::decode(&buf, fmt).unwrap(), r);
            buf[12..16].copy_from_slice(&5000u32.to_be_bytes());
            assert!(RevokeBlock::decode(&buf, fmt).is_err());
        }
    }

    #[test]
    fn commit_checksum_detects_change() {
        let c = CommitBlock::new(9, 1_700_000_000, 5);
        let mut buf = c.encode_block(4096, Some(123));
        CommitBlock::verify_csum_v2v3(&buf, 123).unwrap();
        assert_eq!(CommitBlock::decode(&buf).unwrap().sequence, 9);
        buf[100] = 1;
        assert!(CommitBlock::verify_csum_v2v3(&buf, 123).is_err());
        assert!(
            decode_descriptor(&buf, TagFormat::default()).is_err(),
            "a commit is not a descriptor"
        );
    }
}
