//! Scratch directories for tests.
//!
//! Every test's temporary files go beside the build, in the target
//! directory's `tmp` (where Cargo's `CARGO_TARGET_TMPDIR` points for
//! integration tests), not in `/tmp`: images of tens of megabytes, sparse
//! files and loop or FUSE mounts want an ordinary disk file system, and
//! `/tmp` may be a small tmpfs. `STITCH_TEST_TMP` names another place.

use std::path::{Path, PathBuf};

/// Where [`scratch`] makes its directories: `$STITCH_TEST_TMP`, or the
/// `tmp` directory of the target directory the running test was built in
/// (found from the test binary's path, `<target>/<profile>/deps/<test>`),
/// or the system's temporary directory for a binary that lives elsewhere.
pub fn scratch_base() -> PathBuf {
    if let Some(dir) = std::env::var_os("STITCH_TEST_TMP") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    exe.ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "deps"))
        .and_then(Path::parent)
        .and_then(Path::parent)
        .map_or_else(std::env::temp_dir, |target| target.join("tmp"))
}

/// A fresh directory under [`scratch_base`], removed when dropped.
pub fn scratch() -> tempfile::TempDir {
    let base = scratch_base();
    std::fs::create_dir_all(&base)
        .unwrap_or_else(|e| panic!("scratch base {}: {e}", base.display()));
    tempfile::tempdir_in(&base).unwrap_or_else(|e| panic!("scratch dir in {}: {e}", base.display()))
}
