//! FUSE plumbing shared by the stitchfs frontend and the FUSE floor
//! (`stitchfs bench floor-server`): the settings both ask of the kernel and
//! the reply helpers both use, and the switch that spins on the device
//! during bursts of requests ([`spin`]). The floor must be mounted exactly as
//! stitchfs is, so that "stitchfs against the floor" compares servers, not
//! mount settings; keeping those settings here, once, is what makes that
//! so.
//!
//! Architecture invariant: knows the FUSE protocol through `fuser`, no
//! file system; no other stitch crate.

pub mod spin;

use fuser::Errno;
use std::time::Duration;

/// How long the kernel may cache attributes, entries and absent names.
/// Every change reaches the server through this kernel, which drops what
/// it cached for what it changed (a server that changes attributes on its
/// own tells the kernel), so caching is exact, and one hour only bounds
/// how long the kernel keeps what nobody asks for again.
pub const TTL: Duration = Duration::from_secs(3600);

/// The largest write the kernel sends in one request.
pub const MAX_WRITE: u32 = 1 << 20;

/// The longest name, as ext2's.
pub const NAME_MAX: usize = 255;

/// A reply that can carry an errno (every `fuser` reply type can).
pub trait ErrorReply {
    fn fail(self, e: Errno);
}

macro_rules! error_reply {
    ($($t:ty),*) => {
        $(impl ErrorReply for $t {
            fn fail(self, e: Errno) {
                self.error(e)
            }
        })*
    };
}

error_reply!(
    fuser::ReplyEmpty,
    fuser::ReplyIoctl,
    fuser::ReplyData,
    fuser::ReplyEntry,
    fuser::ReplyAttr,
    fuser::ReplyOpen,
    fuser::ReplyWrite,
    fuser::ReplyStatfs,
    fuser::ReplyCreate,
    fuser::ReplyDirectory,
    fuser::ReplyDirectoryPlus,
    fuser::ReplyXattr
);
