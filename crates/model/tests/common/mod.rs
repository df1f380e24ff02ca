//! Shared by the test files: the credentials the model should use to match
//! a real directory (stitch-testkit's scratch directories, on an ordinary
//! disk file system), and the permissions its root starts with.

use stitch_model::Owner;

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
