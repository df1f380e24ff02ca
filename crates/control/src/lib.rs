//! The control interface of a stitchfs mount: the table of ioctls a
//! program sends on any file or directory of a mount, with their fixed-size
//! argument structures, and the caller's side of each call. The server
//! answers the same table in the FUSE frontend; `stitchfs sync`, the
//! benchmarks, the C library (`libstitch`, `stitch.h`) and the Python
//! package call it, so the numbers and layouts live here once (the C
//! header and the Python module restate them, and tests hold them equal).
//!
//! Transport: FUSE's restricted ioctls. The kernel copies `_IOC_SIZE(cmd)`
//! bytes in for a `_IOW` command and out for a `_IOR` one, so every
//! argument is a fixed-size `#[repr(C)]` structure whose size is part of
//! its command number: a caller built against another layout sends
//! another number, which the server refuses (`EINVAL` for a number it
//! knows with another size, `ENOTTY` for one it does not know; a file
//! system that is not stitchfs answers `ENOTTY` too).
//!
//! | number | name | argument | what |
//! |---|---|---|---|
//! | `_IO(0xF5, 1)` | [`IOC_SYNC`] | none | everything the mount holds, durable when it returns |
//! | `_IOR(0xF5, 2, Version)` | [`IOC_VERSION`] | [`Version`] out | the API version the server speaks |
//! | `_IOWR(0xF5, 3, Context)` | [`IOC_CONTEXT`] | [`Context`] in and out | who is calling, or the context numbered `id`: process, user, inherited from, tag |
//! | `_IOW(0xF5, 4, Tag)` | [`IOC_SET_TAG`] | [`Tag`] in | gives the calling process a context (inherited first, if it has none) and sets its tag |
//! | `_IOW(0xF5, 5, Stream)` | [`IOC_SET_STREAM`] | [`Stream`] in | puts the calling thread in the stream named (made if new), or in none for an empty name |
//! | `_IOWR(0xF5, 6, Stream)` | [`IOC_GET_STREAM`] | [`Stream`] in and out | the calling thread's stream: name, number, flags |
//! | `_IOW(0xF5, 7, Call)` | [`IOC_STREAM_SYNC`] | [`Call`] in | every change of the calling thread's stream, durable when it returns |
//! | `_IOWR(0xF5, 8, Text)` | [`IOC_STATS`] | [`Text`] in and out | the mount's figures now, as JSON (`docs/stats.md`) |
//! | `_IOWR(0xF5, 9, Text)` | [`IOC_GRAPH`] | [`Text`] in and out | the live graph of uncommitted patches, as Graphviz DOT (summarised by block when whole it would not fit) |
//! | `_IOWR(0xF5, 10, Group)` | [`IOC_PATCHGROUP`] | [`Group`] in and out | a patchgroup call (`op`): create, depend, engage, disengage, sync, close |
//! | `_IOWR(0xF5, 11, Xsync)` | [`IOC_XSYNC`] | [`Xsync`] in and out | an external-synchrony call (`op`): join a group, commit it, leave it |
//!
//! A **stream** ("Consistency Without Ordering") is an order of changes:
//! the disk always holds a prefix of each stream's changes (each whole),
//! and nothing orders two streams except related changes (on the same
//! file, the same name, a directory and an entry in it), which keep their
//! order. A thread joins one by name; new threads and child processes
//! take their parent's. With [`STREAM_IGNORE_FSYNC`] the stream's `fsync`
//! and `fdatasync` (and `O_SYNC` writes) only order and return at once;
//! [`IOC_STREAM_SYNC`] makes the stream durable. A stream belongs to the
//! user who made it; another user's is refused (`EPERM`).
//!
//! A **patchgroup** ("Generalized File System Dependencies", §5) is a set
//! of changes a process marks by *engaging* it: every change the process
//! makes while the group is engaged belongs to it. `depend(Q, P)` says
//! that no change of Q may reach the disk before every change of P (and
//! of what P depends on) has: after any crash, if any change made under
//! Q is on disk, all of P's are. `sync(P)` makes P and what it depends
//! on durable, nothing else. A group's life follows the paper's rules,
//! which make a cycle impossible to build and keep a group from holding
//! changes in memory forever: its dependencies are added before it is
//! first engaged, and once another group depends on it, it is *sealed*
//! and can never be engaged again (nor gain dependencies). Groups are
//! held per process like file descriptors: shared by its threads, copied
//! to a child process (with what it has engaged), kept across `exec`,
//! let go at `close` or exit; a group lives while some process holds it.
//! A process names only groups it holds.
//!
//! An **external-synchrony group** (`stitchfs xsync`, after "Rethink the
//! Sync") is a set of processes whose `fsync`, `fdatasync`, `syncfs`,
//! [`IOC_SYNC`] and `O_SYNC` writes return at once: what they promised is
//! kept instead by holding the group's *output* (held outside the file
//! system, by whoever relays it) until a commit ([`XS_COMMIT`]) has made
//! durable every change the group made before it. A process outside the
//! group that touches what the group changed and is not yet durable waits
//! for that commit. Membership is held like a context's stream: a child
//! process takes its parent's group.
//!
//! A **context** is what a process holds on a mount: made when it first
//! asks for one, copied to each child process when the mount first sees
//! the child (fork semantics), kept across `exec`, shared by its threads,
//! closed when the process exits. It holds a tag (a number the process
//! chooses, which shows what was inherited), the process's stream and
//! the patchgroups it holds and has engaged. Each context has a
//! number never reused on the mount (`id`), by which a process of the
//! same user may name it. A process is known by its pid and start time,
//! so a new process on a reused pid is never taken for the old one. An
//! orphan inherits from the subreaper that adopted it, so a program that
//! starts others should be one (`stitch_subreaper`, `stitchfs.subreaper`).
//! Requests the kernel makes with no caller (thread id 0: release,
//! forget, writeback of a shared mapping) carry no context;
//! ARCHITECTURE.md ("Requests with no caller") says what that means for
//! each feature.
//!
//! The C library (`stitch.h`: `stitch_sync`, `stitch_version`,
//! `stitch_context`, `stitch_set_tag`, each with an `_at` variant taking
//! a descriptor) and the Python package (`stitchfs.sync`, `version`,
//! `context`, `set_tag`) wrap each call, with a message for each errno
//! below (`stitch_strerror`, `StitchError`).
//!
//! A structure a caller sends starts with the API version it was built
//! for; a server refuses 0 or a version newer than its own. Misuse is
//! answered with an errno, never a hang:
//!
//! | errno | when |
//! |---|---|
//! | `ENOTTY` | not a stitchfs mount, or a number this server does not know |
//! | `EINVAL` | a call of the table with another argument size, a version of 0 or newer than the server's, flags it does not know |
//! | `EBADF` | an `id` naming no context: never made, or its process exited (closed) |
//! | `EPERM` | an `id` of another user's context (one user never reads or uses another's) |
//! | `EAGAIN` | the mount's bound on processes holding a context is reached (`stitchfs mount --contexts`) |
//! | `ESRCH` | the calling process could not be identified (it exited before its call was served) |
//! | `ENAMETOOLONG` | a stream name of 64 bytes or more (it must end in a NUL within its field) |
//! | `EPERM` | a stream another user made |
//! | `EAGAIN` | the mount's bound on streams (4096), or on threads with a stream of their own in one process (256), is reached |
//! | `EINVAL` | a stream sync by a thread in no stream (and the mount's order is not `global`) |
//! | `EBADF` | a patchgroup the calling process does not hold: never made, closed, or made by a process it did not inherit from |
//! | `EPERM` | a patchgroup of another user |
//! | `EINVAL` | a patchgroup call the rules forbid: engaging a sealed group; a dependency of a group already engaged or sealed, or on itself; disengaging a group the process has not engaged; an `op` not in the table |
//! | `EBUSY` | a dependency on a group some process has engaged now (its changes are not all made yet: disengage it first) |
//! | `EAGAIN` | the mount's bound on live patchgroups (65,536) or a process's on groups it holds (1,024) is reached |
//!
//! Architecture invariant: knows the table and the mount table, nothing of
//! how a mount serves the calls; no other stitch crate.

pub mod mounts;

use std::os::fd::AsRawFd;

/// The ioctl "type" byte of every stitchfs call.
pub const MAGIC: u32 = 0xF5;

/// The API version this table describes. A server answers calls of its
/// own version and older; a caller can ask with [`IOC_VERSION`].
/// Version 1: sync and version. Version 2: contexts. Version 3: streams.
/// Version 4: stats and the patch graph. Version 5: patchgroups.
/// Version 6: external synchrony.
pub const API_VERSION: u32 = 6;

const NONE: u32 = 0;
const WRITE: u32 = 1;
const READ: u32 = 2;

/// Linux's `_IOC(dir, type, nr, size)`.
const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | (MAGIC << 8) | nr
}

/// The call number's `nr` and argument size (`_IOC_NR`, `_IOC_SIZE`).
pub const fn decode(cmd: u32) -> (u32, usize) {
    (cmd & 0xFF, ((cmd >> 16) & 0x3FFF) as usize)
}

/// Whether `cmd` carries stitchfs's type byte.
pub const fn is_ours(cmd: u32) -> bool {
    (cmd >> 8) & 0xFF == MAGIC
}

/// Makes everything the mount holds durable, as `sync(2)` would if the
/// kernel sent `syncfs` to FUSE servers (it does not): `_IO(0xF5, 1)`.
pub const IOC_SYNC: u32 = ioc(NONE, 1, 0);

/// The server's API version: `_IOR(0xF5, 2, Version)`.
pub const IOC_VERSION: u32 = ioc(READ, 2, std::mem::size_of::<Version>());

/// What [`IOC_VERSION`] answers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Version {
    /// The API version the server speaks ([`API_VERSION`]).
    pub api: u32,
    /// Reserved, 0.
    pub flags: u32,
}

const _: () = assert!(std::mem::size_of::<Version>() == 8);

/// Who is calling, or the context another process holds:
/// `_IOWR(0xF5, 3, Context)`.
pub const IOC_CONTEXT: u32 = ioc(READ | WRITE, 3, std::mem::size_of::<Context>());

/// Gives the calling process a context and sets its tag:
/// `_IOW(0xF5, 4, Tag)`.
pub const IOC_SET_TAG: u32 = ioc(WRITE, 4, std::mem::size_of::<Tag>());

/// [`Context::flags`]: the process holds a context.
pub const CONTEXT_HELD: u32 = 1;
/// [`Context::flags`]: its context began as a copy of another process's
/// (`from_pid`, `from_start`).
pub const CONTEXT_INHERITED: u32 = 2;

/// What [`IOC_CONTEXT`] is sent and answers. The caller fills `version`
/// and `id` (0: its own process); the server fills the rest.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Context {
    /// In: the API version the caller speaks.
    pub version: u32,
    /// Out: [`CONTEXT_HELD`], [`CONTEXT_INHERITED`].
    pub flags: u32,
    /// In: the context asked for, 0 for the caller's own. Out: the
    /// context's number (0 if the caller holds none).
    pub id: u64,
    /// Out: the process (a thread group id, as `getpid` says).
    pub pid: u32,
    /// Out: the calling thread (`gettid`) when asking for one's own, else 0.
    pub tid: u32,
    /// Out: the process's start time, in clock ticks after boot (field
    /// 22 of `/proc/PID/stat`): with `pid`, the process for its whole life.
    pub start: u64,
    /// Out: the user owning the context (the process's real uid when it
    /// took it); for a process holding none, its real uid now.
    pub uid: u32,
    /// Out: the process the context was copied from (0: none).
    pub from_pid: u32,
    /// Out: that process's start time.
    pub from_start: u64,
    /// Out: the context's tag (0 for a process holding none).
    pub tag: u64,
}

/// What [`IOC_SET_TAG`] is sent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tag {
    /// The API version the caller speaks.
    pub version: u32,
    /// Reserved, 0.
    pub flags: u32,
    /// The tag to set.
    pub tag: u64,
}

/// Puts the calling thread in a stream: `_IOW(0xF5, 5, Stream)`.
pub const IOC_SET_STREAM: u32 = ioc(WRITE, 5, std::mem::size_of::<Stream>());

/// The calling thread's stream: `_IOWR(0xF5, 6, Stream)`.
pub const IOC_GET_STREAM: u32 = ioc(READ | WRITE, 6, std::mem::size_of::<Stream>());

/// Makes the calling thread's stream durable: `_IOW(0xF5, 7, Call)`.
pub const IOC_STREAM_SYNC: u32 = ioc(WRITE, 7, std::mem::size_of::<Call>());

/// [`Stream::flags`]: the stream's `fsync`s only order; they return at
/// once.
pub const STREAM_IGNORE_FSYNC: u32 = 1;

/// The longest stream name, in bytes (the field holds a NUL after it).
pub const STREAM_NAME_MAX: usize = 63;

/// What [`IOC_SET_STREAM`] is sent and [`IOC_GET_STREAM`] answers.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream {
    /// In: the API version the caller speaks.
    pub version: u32,
    /// [`STREAM_IGNORE_FSYNC`].
    pub flags: u32,
    /// Out: the stream's number on this mount (0: no stream).
    pub id: u64,
    /// The stream's name, NUL-terminated (empty: no stream).
    pub name: [u8; 64],
}

impl Default for Stream {
    fn default() -> Stream {
        Stream {
            version: 0,
            flags: 0,
            id: 0,
            name: [0; 64],
        }
    }
}

impl Stream {
    /// A request for the stream `name`: `None` if the name does not fit.
    pub fn named(name: &[u8], flags: u32) -> Option<Stream> {
        let mut s = Stream {
            version: API_VERSION,
            flags,
            ..Stream::default()
        };
        s.name.get_mut(..name.len())?.copy_from_slice(name);
        (name.len() <= STREAM_NAME_MAX).then_some(s)
    }

    /// The name up to its NUL; `None` if the field holds no NUL.
    pub fn name(&self) -> Option<&[u8]> {
        let end = self.name.iter().position(|&b| b == 0)?;
        Some(&self.name[..end])
    }
}

/// An argument of a call that takes nothing else ([`IOC_STREAM_SYNC`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Call {
    /// The API version the caller speaks.
    pub version: u32,
    /// Reserved, 0.
    pub flags: u32,
}

/// The mount's figures: `_IOWR(0xF5, 8, Text)`.
pub const IOC_STATS: u32 = ioc(READ | WRITE, 8, std::mem::size_of::<Text>());

/// The live patch graph: `_IOWR(0xF5, 9, Text)`.
pub const IOC_GRAPH: u32 = ioc(READ | WRITE, 9, std::mem::size_of::<Text>());

/// A patchgroup call: `_IOWR(0xF5, 10, Group)`.
pub const IOC_PATCHGROUP: u32 = ioc(READ | WRITE, 10, std::mem::size_of::<Group>());

/// [`Group::op`]: a new group, held by the calling process (out: `group`).
pub const PG_CREATE: u32 = 1;
/// [`Group::op`]: `group` depends on `on`.
pub const PG_DEPEND: u32 = 2;
/// [`Group::op`]: the calling process's later changes belong to `group`.
pub const PG_ENGAGE: u32 = 3;
/// [`Group::op`]: they no longer do.
pub const PG_DISENGAGE: u32 = 4;
/// [`Group::op`]: `group` and what it depends on, durable when it returns.
pub const PG_SYNC: u32 = 5;
/// [`Group::op`]: the calling process lets go of `group` (disengaging it).
pub const PG_CLOSE: u32 = 6;

/// What [`IOC_PATCHGROUP`] is sent and answers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Group {
    /// In: the API version the caller speaks.
    pub version: u32,
    /// In: the call ([`PG_CREATE`] .. [`PG_CLOSE`]).
    pub op: u32,
    /// In: the group acted on. Out, for [`PG_CREATE`]: the new group
    /// (numbers start at 1 and are never reused on a mount).
    pub group: u64,
    /// In, for [`PG_DEPEND`]: the group `group` depends on.
    pub on: u64,
}

/// An external-synchrony call: `_IOWR(0xF5, 11, Xsync)`.
pub const IOC_XSYNC: u32 = ioc(READ | WRITE, 11, std::mem::size_of::<Xsync>());

/// [`Xsync::op`]: the calling process (and the processes it starts after)
/// joins `group`, or a new group when `group` is 0 (out: the group).
pub const XS_JOIN: u32 = 1;
/// [`Xsync::op`]: every change the calling process's group made so far,
/// durable when it returns (out: `result` 1 if that took a flush, 0 if it
/// was durable already). `held_bytes` and `held_chunks` in: the output
/// the caller holds for the group, for the mount's figures.
pub const XS_COMMIT: u32 = 2;
/// [`Xsync::op`]: the calling process leaves its group (its fsyncs are
/// its own again; what the group made stays to be committed).
pub const XS_LEAVE: u32 = 3;

/// What [`IOC_XSYNC`] is sent and answers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Xsync {
    /// In: the API version the caller speaks.
    pub version: u32,
    /// In: the call ([`XS_JOIN`] .. [`XS_LEAVE`]).
    pub op: u32,
    /// In, for [`XS_JOIN`]: the group to join (0: a new one). Out: the
    /// caller's group (numbers start at 1, never reused on a mount).
    pub group: u64,
    /// In, for [`XS_COMMIT`]: bytes of output the caller holds.
    pub held_bytes: u64,
    /// In, for [`XS_COMMIT`]: chunks of output the caller holds.
    pub held_chunks: u64,
    /// Out, for [`XS_COMMIT`]: 1 if the commit flushed, 0 if nothing of
    /// the group was left to make durable.
    pub result: u64,
}

/// Room for the text of a [`Text`] answer.
pub const TEXT_MAX: usize = 16000;

/// What [`IOC_STATS`] and [`IOC_GRAPH`] are sent (`version` filled) and
/// answer: `len` bytes of UTF-8 text (the figures as one JSON object,
/// field names in `docs/stats.md`; the graph as Graphviz DOT).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Text {
    /// In: the API version the caller speaks.
    pub version: u32,
    /// Out: the bytes of `text` used.
    pub len: u32,
    /// Out: UTF-8 text.
    pub text: [u8; TEXT_MAX],
}

impl Default for Text {
    fn default() -> Text {
        Text {
            version: 0,
            len: 0,
            text: [0; TEXT_MAX],
        }
    }
}

impl Text {
    /// The answer carrying `json` (any text); `None` if it does not fit.
    pub fn of(json: &str) -> Option<Text> {
        let mut t = Text {
            version: API_VERSION,
            len: u32::try_from(json.len()).ok()?,
            ..Text::default()
        };
        t.text
            .get_mut(..json.len())?
            .copy_from_slice(json.as_bytes());
        Some(t)
    }

    /// The text, if `len` is within the field and the bytes UTF-8.
    pub fn text(&self) -> Option<&str> {
        std::str::from_utf8(self.text.get(..self.len as usize)?).ok()
    }
}

const _: () = assert!(std::mem::size_of::<Text>() == 16008);
const _: () = assert!(std::mem::size_of::<Context>() == 56);
const _: () = assert!(std::mem::size_of::<Stream>() == 80);
const _: () = assert!(std::mem::size_of::<Call>() == 8);
const _: () = assert!(std::mem::size_of::<Tag>() == 16);
const _: () = assert!(std::mem::size_of::<Group>() == 24);

/// A structure sent through the table: plain bytes in both directions.
pub trait Wire: Copy + Default {
    /// Its bytes, as the kernel copies them.
    fn to_bytes(&self) -> Vec<u8>;
    /// From the bytes the kernel copied; `None` if there are too few.
    fn from_bytes(b: &[u8]) -> Option<Self>;
}

/// [`Wire`] for a `#[repr(C)]` structure of `u32` and `u64` fields laid
/// out without padding, in field order, native byte order.
macro_rules! wire {
    ($t:ident { $($f:ident: $ty:ty),* $(,)? }) => {
        impl Wire for $t {
            fn to_bytes(&self) -> Vec<u8> {
                let mut v = Vec::with_capacity(std::mem::size_of::<$t>());
                $(v.extend_from_slice(&self.$f.to_ne_bytes());)*
                v
            }

            fn from_bytes(b: &[u8]) -> Option<Self> {
                let mut at = 0;
                $(
                    let n = std::mem::size_of::<$ty>();
                    let $f = <$ty>::from_ne_bytes(b.get(at..at + n)?.try_into().ok()?);
                    at += n;
                )*
                let _ = at;
                Some($t { $($f),* })
            }
        }
    };
}

wire!(Version {
    api: u32,
    flags: u32
});
wire!(Tag {
    version: u32,
    flags: u32,
    tag: u64,
});
wire!(Call {
    version: u32,
    flags: u32
});
wire!(Group {
    version: u32,
    op: u32,
    group: u64,
    on: u64,
});
wire!(Xsync {
    version: u32,
    op: u32,
    group: u64,
    held_bytes: u64,
    held_chunks: u64,
    result: u64,
});

impl Wire for Stream {
    fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(std::mem::size_of::<Stream>());
        v.extend_from_slice(&self.version.to_ne_bytes());
        v.extend_from_slice(&self.flags.to_ne_bytes());
        v.extend_from_slice(&self.id.to_ne_bytes());
        v.extend_from_slice(&self.name);
        v
    }

    fn from_bytes(b: &[u8]) -> Option<Stream> {
        let head = Call::from_bytes(b)?;
        Some(Stream {
            version: head.version,
            flags: head.flags,
            id: u64::from_ne_bytes(b.get(8..16)?.try_into().ok()?),
            name: b.get(16..80)?.try_into().ok()?,
        })
    }
}

impl Wire for Text {
    fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(std::mem::size_of::<Text>());
        v.extend_from_slice(&self.version.to_ne_bytes());
        v.extend_from_slice(&self.len.to_ne_bytes());
        v.extend_from_slice(&self.text);
        v
    }

    fn from_bytes(b: &[u8]) -> Option<Text> {
        let head = Call::from_bytes(b)?;
        Some(Text {
            version: head.version,
            len: head.flags,
            text: b.get(8..8 + TEXT_MAX)?.try_into().ok()?,
        })
    }
}

wire!(Context {
    version: u32,
    flags: u32,
    id: u64,
    pid: u32,
    tid: u32,
    start: u64,
    uid: u32,
    from_pid: u32,
    from_start: u64,
    tag: u64,
});

/// Every call the table holds: (number, name), for the server's dispatch
/// and the tests that hold the C and Python copies equal.
pub const TABLE: [(u32, &str); 11] = [
    (IOC_SYNC, "sync"),
    (IOC_VERSION, "version"),
    (IOC_CONTEXT, "context"),
    (IOC_SET_TAG, "set_tag"),
    (IOC_SET_STREAM, "set_stream"),
    (IOC_GET_STREAM, "get_stream"),
    (IOC_STREAM_SYNC, "stream_sync"),
    (IOC_STATS, "stats"),
    (IOC_GRAPH, "graph"),
    (IOC_PATCHGROUP, "patchgroup"),
    (IOC_XSYNC, "xsync"),
];

/// Sends [`IOC_SYNC`] through `f`: `Ok(true)` once everything its stitchfs
/// mount holds is durable, `Ok(false)` if `f` is on another file system
/// (which does not know the ioctl).
pub fn request_sync(f: &impl AsRawFd) -> std::io::Result<bool> {
    // SAFETY: an argument-less ioctl on a descriptor the caller owns.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_SYNC as _) } == 0 {
        return Ok(true);
    }
    not_ours(std::io::Error::last_os_error())
}

/// Asks the server behind `f` for its API version: `Ok(None)` if `f` is
/// on another file system.
pub fn request_version(f: &impl AsRawFd) -> std::io::Result<Option<Version>> {
    let mut v = Version::default();
    // SAFETY: the kernel writes size_of::<Version>() bytes, the size the
    // command number carries, into `v`.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_VERSION as _, &mut v as *mut Version) } == 0 {
        return Ok(Some(v));
    }
    not_ours(std::io::Error::last_os_error()).map(|_| None)
}

/// Gives the calling process a context on the mount behind `f` and sets
/// its tag ([`IOC_SET_TAG`]): `Ok(false)` if `f` is on another file
/// system.
pub fn request_set_tag(f: &impl AsRawFd, tag: u64) -> std::io::Result<bool> {
    let t = Tag {
        version: API_VERSION,
        flags: 0,
        tag,
    };
    // SAFETY: the kernel reads size_of::<Tag>() bytes, the size the
    // command number carries, from `t`.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_SET_TAG as _, &t as *const Tag) } == 0 {
        return Ok(true);
    }
    not_ours(std::io::Error::last_os_error())
}

/// Puts the calling thread (and the threads and processes it starts
/// after) in the stream `name` on the mount behind `f`, made if new
/// ([`IOC_SET_STREAM`]); an empty name leaves any stream. `Ok(false)` if
/// `f` is on another file system.
pub fn request_set_stream(f: &impl AsRawFd, name: &[u8], flags: u32) -> std::io::Result<bool> {
    let s = Stream::named(name, flags)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENAMETOOLONG))?;
    // SAFETY: the kernel reads size_of::<Stream>() bytes, the size the
    // command number carries, from `s`.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_SET_STREAM as _, &s as *const Stream) } == 0 {
        return Ok(true);
    }
    not_ours(std::io::Error::last_os_error())
}

/// Makes every change of the calling thread's stream on the mount behind
/// `f` durable ([`IOC_STREAM_SYNC`]).
pub fn request_stream_sync(f: &impl AsRawFd) -> std::io::Result<()> {
    let c = Call {
        version: API_VERSION,
        flags: 0,
    };
    // SAFETY: the kernel reads size_of::<Call>() bytes, the size the
    // command number carries, from `c`.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_STREAM_SYNC as _, &c as *const Call) } == 0 {
        return Ok(());
    }
    Err(std::io::Error::last_os_error())
}

/// Sends the patchgroup call `op` on `group` (and `on`, for a
/// dependency) to the mount behind `f` ([`IOC_PATCHGROUP`]): the group
/// the answer names (the new one, for [`PG_CREATE`]).
pub fn request_patchgroup(f: &impl AsRawFd, op: u32, group: u64, on: u64) -> std::io::Result<u64> {
    let mut g = Group {
        version: API_VERSION,
        op,
        group,
        on,
    };
    // SAFETY: the kernel reads and writes size_of::<Group>() bytes, the
    // size the command number carries, at `g`.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_PATCHGROUP as _, &mut g as *mut Group) } == 0 {
        return Ok(g.group);
    }
    Err(std::io::Error::last_os_error())
}

/// Sends the external-synchrony call `op` to the mount behind `f`
/// ([`IOC_XSYNC`]) and returns the answer. Another file system answers
/// an error (ask [`request_version`] first to tell which).
pub fn request_xsync(f: &impl AsRawFd, call: Xsync) -> std::io::Result<Xsync> {
    let mut x = Xsync {
        version: API_VERSION,
        ..call
    };
    // SAFETY: the kernel reads and writes size_of::<Xsync>() bytes, the
    // size the command number carries, at `x`.
    if unsafe { libc::ioctl(f.as_raw_fd(), IOC_XSYNC as _, &mut x as *mut Xsync) } == 0 {
        return Ok(x);
    }
    Err(std::io::Error::last_os_error())
}

/// The figures of the mount behind `f` ([`IOC_STATS`]), as JSON text:
/// `Ok(None)` if `f` is on another file system (or a stitchfs server too
/// old to know the call).
pub fn request_stats(f: &impl AsRawFd) -> std::io::Result<Option<String>> {
    request_text(f, IOC_STATS)
}

/// The live patch graph of the mount behind `f` ([`IOC_GRAPH`]), as
/// Graphviz DOT: `Ok(None)` as for [`request_stats`].
pub fn request_graph(f: &impl AsRawFd) -> std::io::Result<Option<String>> {
    request_text(f, IOC_GRAPH)
}

/// Sends `cmd`, a call answered with a [`Text`].
fn request_text(f: &impl AsRawFd, cmd: u32) -> std::io::Result<Option<String>> {
    let mut t = Box::new(Text {
        version: API_VERSION,
        ..Text::default()
    });
    // SAFETY: the kernel reads and writes size_of::<Text>() bytes, the
    // size the command number carries, at `t`.
    if unsafe { libc::ioctl(f.as_raw_fd(), cmd as _, &mut *t as *mut Text) } == 0 {
        let text = t.text().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "an answer not UTF-8 text")
        })?;
        return Ok(Some(text.to_owned()));
    }
    not_ours(std::io::Error::last_os_error()).map(|_| None)
}

/// The errors a file system that is not stitchfs answers an unknown
/// ioctl with are `Ok(false)`; others stay errors.
fn not_ours(err: std::io::Error) -> std::io::Result<bool> {
    match err.raw_os_error() {
        Some(libc::ENOTTY | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP) => Ok(false),
        _ => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_linuxs_encoding() {
        // _IO(0xF5, 1), _IOR(0xF5, 2, 8 bytes), _IOWR(0xF5, 3, 56 bytes)
        // and _IOW(0xF5, 4, 16 bytes), as the C macros give.
        assert_eq!(IOC_SYNC, 0x0000_F501);
        assert_eq!(IOC_VERSION, 0x8008_F502);
        assert_eq!(IOC_CONTEXT, 0xC038_F503);
        assert_eq!(IOC_SET_TAG, 0x4010_F504);
        assert_eq!(decode(IOC_VERSION), (2, 8));
        // _IOW(0xF5, 5, 80 bytes), _IOWR(0xF5, 6, 80), _IOW(0xF5, 7, 8).
        assert_eq!(IOC_SET_STREAM, 0x4050_F505);
        assert_eq!(IOC_GET_STREAM, 0xC050_F506);
        assert_eq!(IOC_STREAM_SYNC, 0x4008_F507);
        // _IOWR(0xF5, 8, 16008 bytes).
        assert_eq!(IOC_STATS, 0xFE88_F508);
        assert_eq!(decode(IOC_STATS), (8, 16008));
        assert_eq!(IOC_GRAPH, 0xFE88_F509);
        // _IOWR(0xF5, 10, 24 bytes).
        assert_eq!(IOC_PATCHGROUP, 0xC018_F50A);
        // _IOWR(0xF5, 11, 40 bytes).
        assert_eq!(IOC_XSYNC, 0xC028_F50B);
        assert!(is_ours(IOC_SYNC) && !is_ours(0x5401));
    }

    #[test]
    fn structures_cross_the_wire_unchanged() {
        let v = Version { api: 3, flags: 0 };
        assert_eq!(Version::from_bytes(&v.to_bytes()), Some(v));
        assert_eq!(Version::from_bytes(&[1, 2]), None);
        let c = Context {
            version: 2,
            flags: CONTEXT_HELD,
            id: 1 << 40,
            pid: 7,
            tid: 8,
            start: u64::MAX,
            uid: 65534,
            from_pid: 1,
            from_start: 2,
            tag: 0xdead_beef,
        };
        let bytes = c.to_bytes();
        assert_eq!(bytes.len(), std::mem::size_of::<Context>());
        // The layout C sees: `id` at 8, `tag` last.
        assert_eq!(bytes[8..16], (1u64 << 40).to_ne_bytes());
        assert_eq!(bytes[48..], 0xdead_beefu64.to_ne_bytes());
        assert_eq!(Context::from_bytes(&bytes), Some(c));
        assert_eq!(Context::from_bytes(&bytes[..55]), None);
        let t = Tag {
            version: 2,
            flags: 0,
            tag: 9,
        };
        assert_eq!(Tag::from_bytes(&t.to_bytes()), Some(t));
        let s = Stream::named(b"git", STREAM_IGNORE_FSYNC).unwrap();
        let bytes = s.to_bytes();
        assert_eq!(bytes.len(), 80);
        assert_eq!(&bytes[16..19], b"git");
        assert_eq!(Stream::from_bytes(&bytes), Some(s));
        assert_eq!(s.name(), Some(&b"git"[..]));
        assert!(Stream::named(&[b'x'; 64], 0).is_none());
        assert!(Stream::named(&[b'x'; 63], 0).is_some());
    }

    #[test]
    fn every_number_in_the_table_is_unique_and_ours() {
        for (i, (n, name)) in TABLE.iter().enumerate() {
            assert!(is_ours(*n), "{name}");
            assert!(TABLE[i + 1..].iter().all(|(m, _)| m != n), "{name}");
        }
    }
}
