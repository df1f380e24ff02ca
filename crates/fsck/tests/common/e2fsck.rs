//! Reading `e2fsck -fn` output: which of its problem messages maps to which
//! [`FindingKind`] of ours. The table is the contract of the agreement
//! tests: every problem e2fsck names must be named by us as one of the
//! kinds listed for it. A message the table does not know fails the test,
//! so a new kind of disagreement can never pass silently.

use serde_json::Value;

/// e2fsck message fragment → our kinds (any one of them satisfies it).
pub const TABLE: &[(&str, &[&str])] = &[
    (
        "Inode bitmap differences",
        &["inodes_leaked", "inodes_marked_free"],
    ),
    (
        "Block bitmap differences",
        &["blocks_leaked", "blocks_marked_free"],
    ),
    (
        "Free blocks count wrong for group",
        &["group_free_blocks_wrong"],
    ),
    (
        "Free inodes count wrong for group",
        &["group_free_inodes_wrong"],
    ),
    ("Directories count wrong for group", &["group_dirs_wrong"]),
    ("Free blocks count wrong (", &["free_blocks_wrong"]),
    ("Free inodes count wrong (", &["free_inodes_wrong"]),
    (
        "ref count is",
        &["link_count_too_high", "link_count_too_low"],
    ),
    ("Unattached inode", &["link_count_too_high"]),
    ("Unattached zero-length inode", &["link_count_too_high"]),
    (
        "Multiply-claimed block(s) in inode",
        &["block_claimed_twice"],
    ),
    ("has deleted/unused inode", &["dangling_entry"]),
    ("has an incorrect filetype", &["file_type_wrong"]),
    ("has filetype set", &["file_type_wrong"]),
    ("has bad inode #", &["entry_bad_inode"]),
    ("is a link to directory", &["link_to_directory"]),
    ("is a link to '.'", &["link_to_dot"]),
    ("is a link to the root inode", &["link_to_root"]),
    ("is duplicate '.", &["duplicate_dot"]),
    ("has illegal characters in its name", &["bad_name"]),
    ("has a zero-length name", &["bad_name"]),
    ("should be <The NULL inode> (0)", &["unconnected_directory"]),
    ("'..' in", &["dot_dot_wrong"]),
    ("Unconnected directory inode", &["unconnected_directory"]),
    ("directory corrupted", &["dir_block_corrupt"]),
    ("Missing '.' in", &["missing_dot"]),
    ("Missing '..' in", &["missing_dot_dot"]),
    ("Bad inode number for '.'", &["bad_dot"]),
    ("i_size is", &["bad_size"]),
    ("i_blocks is", &["bad_block_count"]),
    ("is in use, but has dtime set", &["in_use_with_dtime"]),
    ("has zero dtime", &["orphan", "deleted_without_dtime"]),
    ("was part of the orphaned inode list", &["orphan"]),
    ("Illegal block", &["illegal_block"]),
    ("Illegal indirect block", &["illegal_block"]),
    ("Illegal double indirect block", &["illegal_block"]),
    ("Illegal triple indirect block", &["illegal_block"]),
    ("is invalid.", &["invalid_symlink"]),
    ("is a zero-length directory", &["zero_length_directory"]),
    ("has an unallocated block", &["directory_hole"]),
    ("Root inode is not a directory", &["bad_inode"]),
    ("Root inode not allocated", &["root_missing"]),
    ("/lost+found not found", &["lost_found_missing"]),
    ("has invalid mode", &["bad_inode"]),
    ("Superblock invalid, trying backup", &["superblock_corrupt"]),
    ("Padding at end of", &["bitmap_padding_clear"]),
    (
        "needs_recovery flag is clear, but journal has data",
        &["journal_data_ignored"],
    ),
];

/// Lines that carry no problem of their own (prompts, headers, the
/// details of a problem already named on an earlier line).
const CONTEXT: &[&str] = &[
    "Pass ",
    "e2fsck 1.",
    "Fix? no",
    "Clear? no",
    "Salvage? no",
    "Create? no",
    "Connect to /lost+found? no",
    "Clone multiply-claimed blocks? no",
    "Delete file? no",
    "WARNING: Filesystem still has errors",
    "Warning: skipping journal recovery",
    "e2fsck: aborted",
    "Running additional passes",
    "has 1 multiply-claimed block",
    "multiply-claimed block(s), shared with",
    "(There are ",
    "File /",
    "File ...",
    "ext2fs_open2: Bad magic number",
    "files (",
    "IGNORED",
    "Too many illegal blocks",
    "Run journal anyway? no",
    "Clear journal? no",
];

/// A problem e2fsck named, and the kinds of ours that may name it.
#[derive(Debug)]
pub struct Problem {
    pub line: String,
    pub kinds: &'static [&'static str],
}

impl Problem {
    /// A superblock free total: e2fsck says so and still exits 0, and we
    /// report it as a note, not against the file system.
    pub fn is_note(&self) -> bool {
        self.kinds
            .iter()
            .all(|k| matches!(*k, "free_blocks_wrong" | "free_inodes_wrong"))
    }
}

/// The problems in an e2fsck -fn output; `Err` names a line no table knows.
pub fn problems(output: &str) -> Result<Vec<Problem>, String> {
    let mut out = Vec::new();
    for line in output.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some((_, kinds)) = TABLE.iter().find(|(frag, _)| line.contains(frag)) {
            out.push(Problem {
                line: line.to_string(),
                kinds,
            });
            continue;
        }
        if line.starts_with('/') || CONTEXT.iter().any(|c| line.contains(c)) {
            continue;
        }
        return Err(format!("unmapped e2fsck line: {line:?}"));
    }
    Ok(out)
}

/// The `kind` names of our findings (from their JSON form).
pub fn kinds(report: &stitch_fsck::Report) -> Vec<String> {
    let v = serde_json::to_value(report).unwrap();
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The numbers e2fsck lists after "+" or "-" in a bitmap differences
/// line, as inclusive ranges, with the sign.
pub fn bitmap_ranges(line: &str) -> Vec<(char, u64, u64)> {
    let list = line.split(':').nth(1).unwrap_or_default();
    list.split_whitespace()
        .filter_map(|tok| {
            let sign = tok.chars().next()?;
            let body = tok[1..].trim_matches(|c| c == '(' || c == ')');
            let (a, b) = match body.split_once("--") {
                Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
                None => {
                    let n = body.parse().ok()?;
                    (n, n)
                }
            };
            Some((sign, a, b))
        })
        .collect()
}

/// Whether our findings of `kind` cover the range `a..=b`.
pub fn covered(report: &Value, kind: &str, a: u64, b: u64) -> bool {
    let ranges: Vec<(u64, u64)> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind)
        .map(|f| (f["first"].as_u64().unwrap(), f["last"].as_u64().unwrap()))
        .collect();
    (a..=b).all(|n| ranges.iter().any(|&(x, y)| x <= n && n <= y))
}
