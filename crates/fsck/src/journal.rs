//! Pass 0's journal: the journal superblock, and, when the file system
//! needs recovery, what replaying the journal would write
//! ([`stitch_format::jbd2::recover`], the kernel's replay as pure code).
//! The check then runs on the image as if replayed (an in-memory overlay,
//! [`crate::image::Image::set_overlay`]), or, with `--recover`, on the
//! image after [`replay`] has written it.
//!
//! The journal is the data of inode 8, read here through its block map
//! ([`JournalFile`]), one indirect block per level cached: replay reads
//! the log in order, so each indirect block is read about once.
//!
//! Invariants: a damaged journal is a finding, never an error or a panic;
//! only an I/O error or an unsupported journal feature stops the check.
//! Nothing is replayed, in memory or on disk, unless recovery succeeded and
//! every block it writes lies inside the file system.

use crate::error::FsckError;
use crate::finding::FindingKind;
use crate::fs::Fs;
use crate::image::Image;
use crate::report::RecoverySummary;
use stitch_format::codec::ondisk_block;
use stitch_format::features::incompat;
use stitch_format::indirect;
use stitch_format::inode::JOURNAL_INO;
use stitch_format::jbd2::{recover, JournalSuperblock, RecoverError, Recovery};
use stitch_format::superblock::SUPERBLOCK_OFFSET;
use stitch_format::{FormatError, Inode, Structure, Superblock};

/// Where the journal is and what its superblock says.
pub struct Journal {
    pub jsb: JournalSuperblock,
    /// File-system block holding the journal superblock (journal block 0).
    sb_block: u32,
}

/// A journal that replay can apply, and what it would write.
pub struct Replay {
    pub journal: Journal,
    pub recovery: Recovery,
}

impl Replay {
    pub fn summary(&self, applied: bool) -> RecoverySummary {
        let r = &self.recovery;
        RecoverySummary {
            transactions: r.transactions,
            blocks: r.blocks.len(),
            revoked: r.revoked,
            failed_commit: r.failed_commit,
            applied,
        }
    }
}

/// Reads the journal of an ext3 file system and, if the superblock asks
/// for recovery, works out the replay. Problems are pushed to `findings`.
pub fn examine(
    img: &Image,
    fs: &Fs,
    findings: &mut Vec<FindingKind>,
) -> Result<Option<Replay>, FsckError> {
    if !fs.sb.has_journal() {
        return Ok(None);
    }
    let Some((mut file, journal)) = open(img, fs, findings)? else {
        return Ok(None);
    };
    if !fs.sb.needs_recovery() {
        if journal.jsb.start != 0 {
            let start = journal.jsb.start;
            findings.push(FindingKind::JournalDataIgnored { start });
        }
        return Ok(None);
    }
    let Some(recovery) = recovery(&journal.jsb, &mut file, findings)? else {
        return Ok(None);
    };
    Ok(replayable(fs, &recovery, findings).then_some(Replay { journal, recovery }))
}

/// The journal inode and superblock; `None` (and a finding) if damaged.
fn open<'a>(
    img: &'a Image,
    fs: &'a Fs,
    findings: &mut Vec<FindingKind>,
) -> Result<Option<(JournalFile<'a>, Journal)>, FsckError> {
    if fs.sb.journal_inum != JOURNAL_INO.0 {
        return Err(FsckError::Unsupported(FormatError::unsupported(
            Structure::JournalSuperblock,
            format!(
                "journal in inode {} (only inode 8 is supported)",
                fs.sb.journal_inum
            ),
        )));
    }
    match JournalFile::open(img, fs)? {
        Ok(f) => Ok(Some(f)),
        Err(e @ FormatError::UnsupportedFeature { .. }) => Err(FsckError::Unsupported(e)),
        Err(e) => corrupt(findings, e.to_string()),
    }
}

/// Runs [`recover`] over the journal file; `None` (and a finding) if the
/// journal cannot be recovered.
fn recovery(
    jsb: &JournalSuperblock,
    file: &mut JournalFile<'_>,
    findings: &mut Vec<FindingKind>,
) -> Result<Option<Recovery>, FsckError> {
    match recover(jsb, |n| file.read(n.0)) {
        Ok(r) => Ok(Some(r)),
        Err(RecoverError::Read { source, .. }) => match source {
            ReadError::Io(e) => Err(e),
            ReadError::Map(reason) => corrupt(findings, reason),
        },
        Err(RecoverError::Corrupt(e)) => corrupt(findings, e.to_string()),
    }
}

fn corrupt<T>(findings: &mut Vec<FindingKind>, reason: String) -> Result<Option<T>, FsckError> {
    findings.push(FindingKind::JournalCorrupt { reason });
    Ok(None)
}

/// Findings about a recovery, and whether it may be replayed at all.
fn replayable(fs: &Fs, r: &Recovery, findings: &mut Vec<FindingKind>) -> bool {
    let mut report = |reason: String| findings.push(FindingKind::JournalCorrupt { reason });
    if let Some((&b, _)) = r.blocks.range(fs.layout.end()..).next() {
        report(format!(
            "a transaction writes {b}, outside the file system; not replayed"
        ));
        return false;
    }
    if let Some(t) = r.failed_commit {
        report(format!(
            "transaction {t} fails its commit checksum; it and later ones are not replayed"
        ));
    }
    if !r.bad_checksums.is_empty() {
        report(format!(
            "the journal copies of blocks {:?} fail their checksums and are not replayed",
            r.bad_checksums
        ));
    }
    true
}

/// `--recover`: writes what replay would write, in the order that keeps
/// every crash recoverable, as the kernel and e2fsck do.
pub fn replay(img: &mut Image, fs: &Fs, r: &Replay) -> Result<(), FsckError> {
    let primary = primary_superblock(img)?;
    if let Err(e) = Superblock::decode(&primary) {
        return Err(FsckError::RecoverRefused(format!(
            "the primary superblock does not decode ({e}); nothing was written"
        )));
    }
    let bs = fs.bs() as u64;
    for (&b, data) in &r.recovery.blocks {
        img.write_at(b.0 * bs, data)?;
    }
    // Journal rule: the home blocks are durable before the journal stops
    // holding them, or a crash in between loses committed transactions.
    img.sync()?;
    let jsb = &r.journal.jsb;
    if jsb.start != 0 {
        let reset = jsb.reset(r.recovery.next_sequence);
        img.write_at(u64::from(r.journal.sb_block) * bs, &reset.to_bytes())?;
        // The journal is empty on disk before the superblock stops asking
        // for recovery: a crash in between leaves the flag over an empty
        // journal, which replays nothing. The other order would leave a
        // full journal the kernel discards without a flag.
        img.sync()?;
    }
    // The superblock may itself have been replayed: clear the flag in the
    // replayed copy.
    let mut buf = primary_superblock(img)?;
    let mut sb = Superblock::decode_raw(&buf).expect("a 1024-byte buffer decodes");
    sb.feature_incompat &= !incompat::RECOVER.bit;
    sb.encode_into(&mut buf);
    img.write_at(SUPERBLOCK_OFFSET, &buf)?;
    img.sync()
}

fn primary_superblock(img: &Image) -> Result<Vec<u8>, FsckError> {
    let mut buf = vec![0u8; Superblock::SIZE];
    img.read_at(SUPERBLOCK_OFFSET, &mut buf)?;
    Ok(buf)
}

/// Why a journal block could not be read.
pub enum ReadError {
    Io(FsckError),
    /// The journal inode's block map does not reach the block.
    Map(String),
}

/// Inode 8's data, block by block.
struct JournalFile<'a> {
    img: &'a Image,
    fs: &'a Fs,
    iblock: [u32; 15],
    /// The last indirect block read at each depth, and its contents.
    cache: [(u32, Vec<u8>); 3],
}

impl<'a> JournalFile<'a> {
    /// Reads the journal inode and decodes the journal superblock; the
    /// inner error describes a damaged journal.
    fn open(img: &'a Image, fs: &'a Fs) -> Result<Result<(Self, Journal), FormatError>, FsckError> {
        let s = Structure::JournalSuperblock;
        let Some(loc) = fs
            .layout
            .inode_location(JOURNAL_INO, fs.groups[0].inode_table)
        else {
            return Ok(Err(FormatError::corrupt(s, "no journal inode")));
        };
        let blk = img.read_blocks(ondisk_block(loc.block), 1)?;
        let slot = &blk[loc.offset..loc.offset + usize::from(fs.layout.inode_size)];
        let inode = match Inode::decode(slot) {
            Ok(i) => i,
            Err(e) => return Ok(Err(e)),
        };
        let mut file = JournalFile {
            img,
            fs,
            iblock: inode.core.block,
            cache: Default::default(),
        };
        let (sb_block, buf) = match file.block(0)? {
            Ok(b) => b,
            Err(reason) => return Ok(Err(FormatError::corrupt(s, reason))),
        };
        let jblocks = (inode.size() / fs.bs() as u64).min(u64::from(u32::MAX)) as u32;
        let jsb = JournalSuperblock::decode(&buf, fs.bs() as u32, jblocks);
        Ok(jsb.map(|jsb| (file, Journal { jsb, sb_block })))
    }

    /// Journal block `n`, for [`recover`].
    fn read(&mut self, n: u32) -> Result<Vec<u8>, ReadError> {
        match self.block(n) {
            Ok(Ok((_, buf))) => Ok(buf),
            Ok(Err(reason)) => Err(ReadError::Map(reason)),
            Err(e) => Err(ReadError::Io(e)),
        }
    }

    /// Journal block `n` and where it is; the inner error says why the map
    /// does not reach it.
    fn block(&mut self, n: u32) -> Result<Result<(u32, Vec<u8>), String>, FsckError> {
        let bs = self.fs.bs();
        let Ok(path) = indirect::map_path(u64::from(n), bs) else {
            return Ok(Err(format!("journal block {n} is past the largest file")));
        };
        let mut b = self.iblock[path.slot];
        for (depth, &index) in path.levels().iter().enumerate() {
            if b == 0 || !self.fs.in_range(b) {
                return Ok(Err(format!(
                    "journal block {n}: indirect block {b} is invalid"
                )));
            }
            if self.cache[depth].0 != b {
                self.cache[depth] = (b, self.img.read_blocks(b, 1)?);
            }
            b = indirect::pointer(&self.cache[depth].1, index).map_or(0, ondisk_block);
        }
        if b == 0 || !self.fs.in_range(b) {
            return Ok(Err(format!("journal block {n} is at invalid block {b}")));
        }
        Ok(Ok((b, self.img.read_blocks(b, 1)?)))
    }
}
