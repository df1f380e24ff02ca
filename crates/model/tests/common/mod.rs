//! Shared by the test files: a fresh real directory to replay ops on, and
//! the credentials the model should use to match it.

use std::path::PathBuf;

use stitch_model::Owner;

/// Where real directories for tests live (beside the crate's build dir,
/// on an ordinary disk file system).
pub fn scratch() -> tempfile::TempDir {
    let base = PathBuf::from(
        std::env::var("STITCH_MODEL_TMP").unwrap_or_else(|_| "/work/target-model/tmp".into()),
    );
    std::fs::create_dir_all(&base).expect("scratch base");
    tempfile::tempdir_in(base).expect("scratch dir")
}

/// The effective uid and gid, which own what the real runner creates.
pub fn me() -> Owner {
    // SAFETY: these calls only read process credentials.
    unsafe {
        Owner {
            uid: libc::geteuid(),
            gid: libc::getegid(),
        }
    }
}

/// Gives the real root the permissions the model's root starts with.
pub fn set_root_perm(dir: &std::path::Path, perm: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(perm)).expect("chmod root");
}
