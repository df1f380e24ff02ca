"""The control interface of a stitchfs mount, from Python.

Each call sends one ioctl of stitchfs's control table on a file or
directory of the mount and raises :class:`StitchError` (an ``OSError``)
with a message saying what went wrong. Which mount: the ``path`` or open
file given, else ``$STITCHFS_MOUNT``, else the current directory. On a
file system that is not stitchfs the calls fail with ``ENOTTY``.

    >>> import stitchfs
    >>> stitchfs.sync("/mnt/data")          # doctest: +SKIP
    >>> stitchfs.version("/mnt/data")       # doctest: +SKIP
    1

The numbers and layouts restate ``crates/control`` (the table's single
source); the test suite holds them equal.
"""

from __future__ import annotations

import contextlib
import errno as _errno
import fcntl
import os
import struct
from typing import IO, Iterator, Union

__all__ = [
    "API_VERSION",
    "IOC_SYNC",
    "IOC_VERSION",
    "StitchError",
    "sync",
    "version",
]

#: The API version this module describes.
API_VERSION = 1

#: ``_IO(0xF5, 1)``: everything the mount holds, durable.
IOC_SYNC = 0x0000F501
#: ``_IOR(0xF5, 2, struct stitch_version)``: the server's API version.
IOC_VERSION = 0x8008F502

_VERSION = struct.Struct("=II")

#: Where the plain calls act when given no path.
MOUNT_ENV = "STITCHFS_MOUNT"

Target = Union[None, str, "os.PathLike[str]", int, IO[bytes], IO[str]]

_MEANINGS = {
    _errno.ENOTTY: "not a stitchfs mount (or a call this server does not know)",
    _errno.EINVAL: "a structure of the wrong size or version, or a bad argument",
    _errno.EPERM: "the handle belongs to another user's process",
    _errno.EBADF: "an unknown or closed handle, or a bad descriptor",
    _errno.EIO: "the mount latched a device error: nothing more is durable",
    _errno.EROFS: "the mount is read-only",
    _errno.EAGAIN: "a limit of the mount is reached; try again once some are released",
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
