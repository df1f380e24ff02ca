//! The control table (crate `stitch-control`), served: each ioctl a
//! program sends on a file or directory of the mount, dispatched by
//! number. A number of ours with another argument size is a caller built
//! against another layout (`EINVAL`); a number not ours, or one this
//! server does not know, is `ENOTTY`, as any file system answers an ioctl
//! it does not know.

use super::{Failure, OpResult, StitchFuse};
use fuser::{Errno, Request};
use stitch_control::{
    Version, Wire, API_VERSION, IOC_CONTEXT, IOC_GET_STREAM, IOC_GRAPH, IOC_PATCHGROUP,
    IOC_SET_STREAM, IOC_SET_TAG, IOC_STATS, IOC_STREAM_SYNC, IOC_SYNC, IOC_VERSION, IOC_XSYNC,
    TABLE,
};

impl StitchFuse {
    /// Serves the control call `cmd` of `req` with the argument bytes the
    /// kernel copied in; returns the bytes to copy out.
    pub(super) fn control(&self, req: &Request, cmd: u32, input: &[u8]) -> OpResult<Vec<u8>> {
        match cmd {
            IOC_CONTEXT => self.context_call(req, input),
            IOC_SET_TAG => self.set_tag(req, input),
            IOC_SET_STREAM => self.set_stream(req, input),
            IOC_GET_STREAM => self.get_stream(req, input),
            IOC_STREAM_SYNC => self.stream_sync(req, input),
            IOC_STATS => self.stats_call(input),
            IOC_GRAPH => self.graph_call(input),
            IOC_PATCHGROUP => self.patchgroup_call(req, input),
            IOC_XSYNC => self.xsync_call(req, input),
            // A member of an external-synchrony group syncs at once, as it
            // fsyncs: its output waits instead.
            IOC_SYNC if super::xsync::current().is_some() => {
                self.xsync.sync_returned();
                Ok(Vec::new())
            }
            IOC_SYNC => {
                self.fs.sync()?;
                Ok(Vec::new())
            }
            IOC_VERSION => Ok(Version {
                api: API_VERSION,
                flags: 0,
            }
            .to_bytes()),
            other => Err(Failure::Errno(refusal(other))),
        }
    }
}

/// Why `cmd` is not served: `EINVAL` for a call of the table sent with
/// another argument size, `ENOTTY` otherwise.
fn refusal(cmd: u32) -> Errno {
    let (nr, _) = stitch_control::decode(cmd);
    let known = stitch_control::is_ours(cmd)
        && TABLE
            .iter()
            .any(|&(n, _)| stitch_control::decode(n).0 == nr);
    if known {
        Errno::EINVAL
    } else {
        Errno::ENOTTY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_call_of_another_size_is_einval_and_others_enotty() {
        // _IOR(0xF5, 2, 16 bytes): the version call, another layout.
        assert_eq!(refusal(0x8010_F502), Errno::EINVAL);
        assert_eq!(refusal(0x8008_F5F0), Errno::ENOTTY);
        assert_eq!(refusal(0x5401), Errno::ENOTTY); // TCGETS
    }
}
