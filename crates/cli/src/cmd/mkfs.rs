//! `stitchfs mkfs [--journal[=SIZE]] [--size SIZE] [--preallocate WHAT]
//! [--force] IMAGE`: make an ext2 image, or ext3 with `--journal` (see the
//! `stitch-mkfs` crate).

use anyhow::Context;
use stitch_blockdev::Location;
use stitch_mkfs::{JournalSize, MkfsOptions, Preallocate};

#[derive(clap::Args)]
pub struct Args {
    /// Add a journal (ext3); SIZE as for --size, default as mke2fs picks.
    #[arg(long, value_name = "SIZE", num_args = 0..=1, require_equals = true, default_missing_value = "default")]
    pub journal: Option<String>,
    /// Size of the file system (bytes, or with a K/M/G/T suffix, powers of
    /// 1024); defaults to the size of the existing file or device.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub size: Option<u64>,
    /// Overwrite an existing ext2/ext3/ext4 file system.
    #[arg(long)]
    pub force: bool,
    /// Which zero regions of an image file to write now rather than leave as
    /// holes (a block device always has them written): none (the sparsest
    /// image, the fastest mkfs) | journal (its body, as mke2fs does) |
    /// metadata (the journal and every inode table). A write into a hole
    /// makes the host file system allocate, and the host's fdatasync then
    /// commits its own metadata too, so a journal left as holes slows every
    /// commit until the log has wrapped once.
    #[arg(long, value_name = "WHAT", default_value = "journal", value_parser = parse_preallocate)]
    pub preallocate: Preallocate,
    /// Image file (created if missing), block device, or NBD URI
    /// (nbd://HOST[:PORT]/EXPORT, nbd+unix:///EXPORT?socket=PATH; the
    /// export's size unless --size says less).
    pub image: Location,
}

fn parse_preallocate(s: &str) -> Result<Preallocate, String> {
    s.parse()
}

/// Parses `123`, `64M`, `1G`, `2t` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (digits, shift) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("unknown size suffix {c:?} (use K, M, G or T)")),
            };
            (&s[..i], shift)
        }
        _ => (s, 0),
    };
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is not a size"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

fn journal_size(arg: &Option<String>) -> anyhow::Result<Option<JournalSize>> {
    Ok(match arg.as_deref() {
        None => None,
        Some("default") => Some(JournalSize::Default),
        Some(s) => Some(JournalSize::Bytes(
            parse_size(s).map_err(anyhow::Error::msg)?,
        )),
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let opts = MkfsOptions {
        size: args.size,
        journal: journal_size(&args.journal)?,
        force: args.force,
        preallocate: args.preallocate,
    };
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} blocks ({eta})")
            .context("progress bar template")?
            .progress_chars("=> "),
    );
    bar.set_message("writing");
    let report = stitch_mkfs::mkfs_at(&args.image, &opts, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    })
    .with_context(|| format!("mkfs {}", args.image))?;
    bar.finish_and_clear();
    println!(
        "{}: {} file system, {} blocks of {} bytes, {} groups, {} inodes{}",
        args.image,
        report.kind(),
        report.blocks,
        report.block_size,
        report.groups,
        report.inodes,
        if report.journal_blocks > 0 {
            format!(", journal {} blocks", report.journal_blocks)
        } else {
            String::new()
        },
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert!(parse_size("12X").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
