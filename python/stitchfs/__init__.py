"""The control interface of a stitchfs mount, from Python.

Each call sends one ioctl of stitchfs's control table on a file or
directory of the mount and raises :class:`StitchError` (an ``OSError``)
with a message saying what went wrong. Which mount: the ``path`` or open
file given, else ``$STITCHFS_MOUNT``, else the current directory. On a
file system that is not stitchfs the calls fail with ``ENOTTY``.

    >>> import stitchfs
    >>> stitchfs.sync("/mnt/data")          # doctest: +SKIP
    >>> stitchfs.version("/mnt/data")       # doctest: +SKIP
    2
    >>> stitchfs.set_tag(7, "/mnt/data")    # doctest: +SKIP
    >>> stitchfs.context("/mnt/data").tag   # doctest: +SKIP
    7

A process's *context* is what it holds on a mount: made when it first
sets state (``set_tag``), copied to each child process when the mount
first sees the child, kept across ``exec``, shared by its threads, closed
when the process exits. ``subreaper()`` keeps orphaned descendants of a
program that starts others in its family.

A *stream* ("Consistency Without Ordering") orders a program's changes:
the disk always holds a prefix of each stream's changes, and two streams
are ordered only where their changes are related (the same file, the
same name, a directory and an entry in it). ``setstream`` puts the
calling thread in one (threads and child processes started after take
it); with ``IGNORE_FSYNC`` its fsyncs only order; ``streamsync`` makes
it durable:

    >>> stitchfs.setstream("db", stitchfs.IGNORE_FSYNC)  # doctest: +SKIP
    >>> ...                                             # doctest: +SKIP
    >>> stitchfs.streamsync()                           # doctest: +SKIP
    >>> with stitchfs.stream("db"): ...                 # doctest: +SKIP

A *patchgroup* ("Generalized File System Dependencies") is a set of
changes a process marks by engaging it; ``pg_depend(q, p)`` keeps every
change of ``q`` off the disk until all of ``p``'s are on it, whatever
the moment of a crash, without an fsync:

    >>> p = stitchfs.pg_create()                        # doctest: +SKIP
    >>> stitchfs.pg_engage(p); ...; stitchfs.pg_disengage(p)  # doctest: +SKIP
    >>> with stitchfs.patchgroup(after=p) as q: ...     # doctest: +SKIP
    >>> stitchfs.pg_sync(q)                             # doctest: +SKIP

The numbers and layouts restate ``crates/control`` (the table's single
source); the test suite holds them equal.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno as _errno
import fcntl
import os
import struct
from typing import IO, Iterator, NamedTuple, Union

__all__ = [
    "API_VERSION",
    "CONTEXT_HELD",
    "CONTEXT_INHERITED",
    "Context",
    "IOC_CONTEXT",
    "IOC_SET_TAG",
    "IOC_SYNC",
    "IOC_VERSION",
    "IOC_SET_STREAM",
    "IOC_GET_STREAM",
    "IOC_STREAM_SYNC",
    "IOC_STATS",
    "IOC_GRAPH",
    "IOC_PATCHGROUP",
    "PG_CREATE",
    "PG_DEPEND",
    "PG_ENGAGE",
    "PG_DISENGAGE",
    "PG_SYNC",
    "PG_CLOSE",
    "IOC_XSYNC",
    "XS_JOIN",
    "XS_COMMIT",
    "XS_LEAVE",
    "xs_join",
    "xs_commit",
    "xs_leave",
    "pg_create",
    "pg_depend",
    "pg_engage",
    "pg_disengage",
    "pg_sync",
    "pg_close",
    "patchgroup",
    "IGNORE_FSYNC",
    "StitchError",
    "StreamInfo",
    "context",
    "getstream",
    "graph",
    "set_tag",
    "setstream",
    "stream",
    "streamsync",
    "strerror",
    "subreaper",
    "stats",
    "sync",
    "version",
]

#: The API version this module describes (2: contexts, 3: streams, 4: stats
#: and the patch graph, 5: patchgroups, 6: external synchrony).
API_VERSION = 6

#: ``_IO(0xF5, 1)``: everything the mount holds, durable.
IOC_SYNC = 0x0000F501
#: ``_IOR(0xF5, 2, struct stitch_version)``: the server's API version.
IOC_VERSION = 0x8008F502
#: ``_IOWR(0xF5, 3, struct stitch_context)``: a process's context.
IOC_CONTEXT = 0xC038F503
#: ``_IOW(0xF5, 4, struct stitch_tag)``: set the caller's tag.
IOC_SET_TAG = 0x4010F504
#: ``_IOW(0xF5, 5, struct stitch_stream)``: join a stream by name.
IOC_SET_STREAM = 0x4050F505
#: ``_IOWR(0xF5, 6, struct stitch_stream)``: the caller's stream.
IOC_GET_STREAM = 0xC050F506
#: ``_IOW(0xF5, 7, struct stitch_call)``: the caller's stream, durable.
IOC_STREAM_SYNC = 0x4008F507
#: ``_IOWR(0xF5, 8, struct stitch_text)``: the mount's figures, as JSON.
IOC_STATS = 0xFE88F508
#: ``_IOWR(0xF5, 9, struct stitch_text)``: the live patch graph, as DOT.
IOC_GRAPH = 0xFE88F509
#: ``_IOWR(0xF5, 10, struct stitch_group)``: a patchgroup call.
IOC_PATCHGROUP = 0xC018F50A
#: ``_IOWR(0xF5, 11, struct stitch_xsync)``: an external-synchrony call.
IOC_XSYNC = 0xC028F50B

#: The patchgroup calls (``struct stitch_group``'s ``op``).
PG_CREATE = 1
PG_DEPEND = 2
PG_ENGAGE = 3
PG_DISENGAGE = 4
PG_SYNC = 5
PG_CLOSE = 6

#: The external-synchrony calls (``struct stitch_xsync``'s ``op``).
XS_JOIN = 1
XS_COMMIT = 2
XS_LEAVE = 3

#: ``setstream`` flag: the stream's fsyncs only order, and return at once.
IGNORE_FSYNC = 1
#: The longest stream name, in bytes.
STREAM_NAME_MAX = 63

#: ``Context.flags``: the process holds a context.
CONTEXT_HELD = 1
#: ``Context.flags``: its context was copied from ``from_pid``.
CONTEXT_INHERITED = 2

_VERSION = struct.Struct("=II")
# version, flags, id, pid, tid, start, uid, from_pid, from_start, tag
_CONTEXT = struct.Struct("=IIQIIQIIQQ")
# version, flags, tag
_TAG = struct.Struct("=IIQ")
# version, flags, id, name
_STREAM = struct.Struct("=IIQ64s")
# version, flags
_CALL = struct.Struct("=II")
_TEXT_MAX = 16000
_TEXT = struct.Struct(f"=II{_TEXT_MAX}s")
# version, op, group, on
_GROUP = struct.Struct("=IIQQ")
# version, op, group, held_bytes, held_chunks, result
_XSYNC = struct.Struct("=IIQQQQ")

_PR_SET_CHILD_SUBREAPER = 36

#: Where the plain calls act when given no path.
MOUNT_ENV = "STITCHFS_MOUNT"

Target = Union[None, str, "os.PathLike[str]", int, IO[bytes], IO[str]]

_MEANINGS = {
    _errno.ENOTTY: "not a stitchfs mount (or a call this server does not know)",
    _errno.EINVAL: "a structure of the wrong size or version, a bad argument, a stream sync by a thread in no stream, "
    "or a patchgroup call the rules forbid (engaging a sealed group, a dependency of a group already engaged or sealed)",
    _errno.EPERM: "the handle, stream or patchgroup belongs to another user",
    _errno.EBUSY: "a dependency on a patchgroup some process has engaged (disengage it first)",
    _errno.ENAMETOOLONG: "a stream name longer than 63 bytes",
    _errno.EBADF: "an unknown or closed handle or patchgroup (its process exited, or this process does not hold it), "
    "or a bad descriptor",
    _errno.EIO: "the mount latched a device error: nothing more is durable",
    _errno.EROFS: "the mount is read-only",
    _errno.EAGAIN: "a limit of the mount is reached; try again once some are released",
    _errno.ESRCH: "the calling process could not be identified (it exited meanwhile)",
}


class StitchError(OSError):
    """A stitchfs call failed; ``errno`` says why, the message what it means."""


def strerror(err: int) -> str:
    """What ``err``, an errno from one of these calls, means."""
    return _MEANINGS.get(err, os.strerror(err))


@contextlib.contextmanager
def _descriptor(target: Target) -> Iterator[int]:
    if isinstance(target, int):
        yield target
        return
    if target is not None and hasattr(target, "fileno"):
        yield target.fileno()  # type: ignore[union-attr]
        return
    path = os.fspath(target) if target is not None else os.environ.get(MOUNT_ENV, ".")
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _call(what: str, target: Target, cmd: int, arg: Union[int, bytes, bytearray] = 0) -> bytes:
    with _descriptor(target) as fd:
        try:
            out = fcntl.ioctl(fd, cmd, arg)
        except OSError as e:
            raise StitchError(e.errno, f"stitchfs {what}: {strerror(e.errno)}") from None
    return out if isinstance(out, (bytes, bytearray)) else b""


def sync(target: Target = None) -> None:
    """Make everything the mount holds durable (``sync(1)`` cannot reach FUSE servers)."""
    _call("sync", target, IOC_SYNC)


def version(target: Target = None) -> int:
    """The API version the mount's server speaks."""
    out = _call("version", target, IOC_VERSION, bytes(_VERSION.size))
    api, _flags = _VERSION.unpack(out)
    return int(api)


def _text(what: str, target: Target, cmd: int) -> str:
    buf = bytearray(_TEXT.pack(API_VERSION, 0, b""))
    with _descriptor(target) as fd:
        try:
            fcntl.ioctl(fd, cmd, buf, True)
        except OSError as e:
            raise StitchError(e.errno, f"stitchfs {what}: {strerror(e.errno)}") from None
    _version, n, text = _TEXT.unpack(bytes(buf))
    return text[:n].decode()


def stats(target: Target = None) -> dict:
    """The mount's figures now (counters, latencies, ordering domains), as
    ``stitchfs stats --json`` prints them; field names in docs/stats.md."""
    import json

    return json.loads(_text("stats", target, IOC_STATS))


def graph(target: Target = None) -> str:
    """The mount's live graph of uncommitted patches, as Graphviz DOT."""
    return _text("graph", target, IOC_GRAPH)


class Context(NamedTuple):
    """A process's context on a mount, as ``context()`` reports it."""

    #: ``CONTEXT_HELD``, ``CONTEXT_INHERITED``.
    flags: int
    #: The context's number (0: the process holds none).
    id: int
    #: The process (``os.getpid()``).
    pid: int
    #: The calling thread (``threading.get_native_id()``), own context only.
    tid: int
    #: The process's start time, clock ticks after boot.
    start: int
    #: The user owning the context.
    uid: int
    #: The process it was copied from (0: none), and its start time.
    from_pid: int
    from_start: int
    #: The context's tag.
    tag: int

    @property
    def held(self) -> bool:
        return bool(self.flags & CONTEXT_HELD)

    @property
    def inherited(self) -> bool:
        return bool(self.flags & CONTEXT_INHERITED)


def context(target: Target = None, id: int = 0) -> Context:
    """The calling process's context (``id`` 0), or the one numbered ``id``.

    Raises ``StitchError`` with ``EBADF`` for a number naming no context
    (never made, or its process exited) and ``EPERM`` for another user's.
    """
    out = _call("context", target, IOC_CONTEXT, _CONTEXT.pack(API_VERSION, 0, id, *[0] * 7))
    _version, *fields = _CONTEXT.unpack(out)
    return Context(*fields)


def set_tag(tag: int, target: Target = None) -> None:
    """Give the calling process a context (inherited first, if it has none)
    and set its tag. ``EAGAIN`` when the mount's bound on contexts is reached."""
    _call("set_tag", target, IOC_SET_TAG, _TAG.pack(API_VERSION, 0, tag))


def subreaper() -> None:
    """Make this process a child subreaper (``PR_SET_CHILD_SUBREAPER``):
    an orphaned descendant is adopted by it rather than by init, and so
    still inherits from the family. For programs that start others."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise StitchError(err, f"stitchfs subreaper: {os.strerror(err)}")


class StreamInfo(NamedTuple):
    """The calling thread's stream, as ``getstream()`` reports it."""

    #: The stream's name ("" for none).
    name: str
    #: Its number on the mount (0: none).
    id: int
    #: ``IGNORE_FSYNC`` or 0.
    flags: int


def setstream(name: str, flags: int = 0, target: Target = None) -> None:
    """Put the calling thread in the stream ``name`` (made if new; "" leaves
    any stream); threads and child processes started after take it.

    ``ENAMETOOLONG`` for a name over 63 bytes, ``EPERM`` for a stream
    another user made, ``EAGAIN`` at the mount's bound on streams."""
    raw = name.encode()
    if len(raw) > STREAM_NAME_MAX:
        raise StitchError(_errno.ENAMETOOLONG, f"stitchfs setstream: {strerror(_errno.ENAMETOOLONG)}")
    _call("setstream", target, IOC_SET_STREAM, _STREAM.pack(API_VERSION, flags, 0, raw))


def getstream(target: Target = None) -> StreamInfo:
    """The calling thread's stream."""
    out = _call("getstream", target, IOC_GET_STREAM, _STREAM.pack(API_VERSION, 0, 0, b""))
    _version, flags, id, raw = _STREAM.unpack(out)
    return StreamInfo(raw.split(b"\0", 1)[0].decode(errors="replace"), int(id), int(flags))


def streamsync(target: Target = None) -> None:
    """Make every change of the calling thread's stream durable.
    ``EINVAL`` if the thread is in no stream."""
    _call("streamsync", target, IOC_STREAM_SYNC, _CALL.pack(API_VERSION, 0))


@contextlib.contextmanager
def stream(name: str, flags: int = 0, target: Target = None, sync: bool = True) -> Iterator[None]:
    """The calling thread in the stream ``name`` for the ``with`` block;
    at its end the stream is made durable (unless ``sync`` is false) and
    the thread goes back to the stream it was in."""
    before = getstream(target)
    setstream(name, flags, target)
    try:
        yield
        if sync:
            streamsync(target)
    finally:
        setstream(before.name, before.flags, target)


def _pg(what: str, op: int, group: int, on: int, target: Target) -> int:
    if group < 0 or on < 0:
        raise StitchError(_errno.EBADF, f"stitchfs {what}: {strerror(_errno.EBADF)}")
    out = _call(what, target, IOC_PATCHGROUP, _GROUP.pack(API_VERSION, op, group, on))
    _version, _op, g, _on = _GROUP.unpack(out)
    return int(g)


def pg_create(target: Target = None) -> int:
    """A new patchgroup, held by the calling process: its number.

    Every change the process makes while it has engaged the group
    (``pg_engage``) belongs to it. Groups are held like file descriptors:
    shared by the process's threads, copied to child processes (engaged
    as in the parent), kept across ``exec``, let go at ``pg_close`` or
    exit. ``EAGAIN`` at the mount's bounds."""
    return _pg("pg_create", PG_CREATE, 0, 0, target)


def pg_depend(q: int, p: int, target: Target = None) -> None:
    """No change of group ``q`` reaches the disk before every change of
    ``p`` (and of what ``p`` depends on) has. ``p`` is sealed: it can
    never be engaged again. ``EINVAL`` if ``q`` was engaged before or is
    sealed, or ``q == p``; ``EBUSY`` if some process has ``p`` engaged."""
    _pg("pg_depend", PG_DEPEND, q, p, target)


def pg_engage(g: int, target: Target = None) -> None:
    """The calling process's later changes belong to ``g`` too.
    ``EINVAL`` if ``g`` is sealed."""
    _pg("pg_engage", PG_ENGAGE, g, 0, target)


def pg_disengage(g: int, target: Target = None) -> None:
    """The calling process's later changes no longer belong to ``g``."""
    _pg("pg_disengage", PG_DISENGAGE, g, 0, target)


def pg_sync(g: int, target: Target = None) -> None:
    """Make ``g`` and what it depends on durable (nothing else)."""
    _pg("pg_sync", PG_SYNC, g, 0, target)


def pg_close(g: int, target: Target = None) -> None:
    """The calling process lets go of ``g`` (disengaging it); the order
    of the changes made under it stays."""
    _pg("pg_close", PG_CLOSE, g, 0, target)


def _xs(what: str, op: int, group: int, held: int, target: Target) -> "tuple[int, int]":
    out = _call(what, target, IOC_XSYNC, _XSYNC.pack(API_VERSION, op, group, held, 0, 0))
    _version, _op, g, _held, _chunks, result = _XSYNC.unpack(out)
    return int(g), int(result)


def xs_join(group: int = 0, target: Target = None) -> int:
    """The calling process (and the processes it starts after) joins the
    external-synchrony group ``group``, or a new one if 0: its number.
    Members' fsyncs and syncs return at once; whoever relays their output
    holds it until ``xs_commit`` returns (``stitchfs xsync`` does both)."""
    return _xs("xs_join", XS_JOIN, group, 0, target)[0]


def xs_commit(held: int = 0, target: Target = None) -> bool:
    """Make every change the caller's group made so far durable; whether
    that took a flush. ``held``: bytes of output the caller holds (for
    the mount's figures). ``EINVAL`` if the caller is in no group."""
    return bool(_xs("xs_commit", XS_COMMIT, 0, held, target)[1])


def xs_leave(target: Target = None) -> int:
    """The calling process leaves its group: the group's number."""
    return _xs("xs_leave", XS_LEAVE, 0, 0, target)[0]


@contextlib.contextmanager
def patchgroup(after: Union[int, None] = None, target: Target = None, sync: bool = False) -> Iterator[int]:
    """A new group, engaged for the ``with`` block (depending on the group
    ``after`` first, if given), disengaged at its end, made durable then
    if ``sync``. Yields the group; closing it is the caller's (it may be
    what the next block depends on)."""
    g = pg_create(target)
    if after is not None:
        pg_depend(g, after, target)
    pg_engage(g, target)
    try:
        yield g
    finally:
        pg_disengage(g, target)
    if sync:
        pg_sync(g, target)
