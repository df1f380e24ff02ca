"""Patchgroups through a real mount, from the Python package (run as root
by crates/cli/tests/patchgroups.rs with STITCHFS_MOUNT set).

Checks: the paper's gzip case written with the ``with`` block (the output
before the input's removal); a group made in a thread serves the whole
process; a child process holds the parent's groups engaged as they were;
every misuse with its errno, sent through the library and, where the
library would refuse first, underneath (a negative handle, an unknown
op, a structure of another size); another user's group (EPERM, from a
child turned nobody); a pg_sync that makes its group durable leaves an
unrelated file's pages in memory (the mount's figures say so).
"""

import errno
import fcntl
import os
import struct
import threading

import stitchfs
from _check import fails_with

MNT = os.environ["STITCHFS_MOUNT"]
FD = os.open(MNT, os.O_RDONLY)


def path(name):
    return os.path.join(MNT, name)


# gzip with patchgroups: the compressed file, then the removal.
with open(path("big"), "wb") as f:
    f.write(b"line\n" * 50000)
stitchfs.sync(FD)
with stitchfs.patchgroup(target=FD) as write_out:
    with open(path("big.gz"), "wb") as f:
        f.write(b"compressed")
with stitchfs.patchgroup(after=write_out, target=FD, sync=True) as remove_in:
    os.unlink(path("big"))
print("sealed:", fails_with(errno.EINVAL, stitchfs.pg_engage, write_out, FD))
stitchfs.pg_close(write_out, FD)
stitchfs.pg_close(remove_in, FD)
print("closed:", fails_with(errno.EBADF, stitchfs.pg_sync, remove_in, FD))

# A group made in a thread is the process's.
made = {}
t = threading.Thread(target=lambda: made.setdefault("g", stitchfs.pg_create(FD)))
t.start()
t.join()
g = made["g"]
stitchfs.pg_engage(g, FD)

# A child holds it engaged, as the parent had it.
pid = os.fork()
if pid == 0:
    try:
        with open(path("child"), "w") as f:
            f.write("child")
        stitchfs.pg_disengage(g, FD)
        os._exit(0)
    except BaseException as e:  # noqa: BLE001 - reported through the status
        print("child:", e)
        os._exit(1)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
stitchfs.pg_disengage(g, FD)
print("not engaged:", fails_with(errno.EINVAL, stitchfs.pg_disengage, g, FD))

# Rules.
h = stitchfs.pg_create(FD)
print("itself:", fails_with(errno.EINVAL, stitchfs.pg_depend, h, h, FD))
stitchfs.pg_engage(h, FD)
k = stitchfs.pg_create(FD)
print("engaged:", fails_with(errno.EBUSY, stitchfs.pg_depend, k, h, FD))
print("after engage:", fails_with(errno.EINVAL, stitchfs.pg_depend, h, k, FD))
stitchfs.pg_disengage(h, FD)
stitchfs.pg_depend(k, h, FD)
print("unknown:", fails_with(errno.EBADF, stitchfs.pg_engage, 1 << 40, FD))
print("negative:", fails_with(errno.EBADF, stitchfs.pg_engage, -3, FD))


def raw(op, group=0, on=0, version=stitchfs.API_VERSION):
    buf = bytearray(stitchfs._GROUP.pack(version, op, group, on))
    fcntl.ioctl(FD, stitchfs.IOC_PATCHGROUP, buf, True)
    return stitchfs._GROUP.unpack(bytes(buf))


def raw_fails(code, *args, **kw):
    try:
        raw(*args, **kw)
    except OSError as e:
        assert e.errno == code, (e.errno, code)
        return
    raise AssertionError(f"raw {args} did not fail with {errno.errorcode[code]}")


raw_fails(errno.EINVAL, 99, k)
raw_fails(errno.EINVAL, stitchfs.PG_SYNC, k, version=0)
raw_fails(errno.EINVAL, stitchfs.PG_SYNC, k, version=stitchfs.API_VERSION + 1)
# The same call number with one more byte: another layout.
bigger = (stitchfs.IOC_PATCHGROUP & ~(0x3FFF << 16)) | ((stitchfs._GROUP.size + 8) << 16)
try:
    fcntl.ioctl(FD, bigger, bytearray(stitchfs._GROUP.size + 8), True)
    raise AssertionError("a group structure of another size was taken")
except OSError as e:
    assert e.errno == errno.EINVAL, e
assert raw(stitchfs.PG_CREATE)[2] > k

# Another user: a child turned nobody holds root's groups but may not use
# them; its own it may.
pid = os.fork()
if pid == 0:
    try:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        print("nobody:", fails_with(errno.EPERM, stitchfs.pg_engage, k, FD))
        own = stitchfs.pg_create(FD)
        stitchfs.pg_engage(own, FD)
        stitchfs.pg_disengage(own, FD)
        os._exit(0)
    except BaseException as e:  # noqa: BLE001
        print("nobody child:", e)
        os._exit(1)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0

# pg_sync takes its group, not the mount: 8 MiB of unrelated data stays.
os.mkdir(path("other"))
stitchfs.sync(FD)
with open(path("other/unrelated"), "wb") as f:
    f.write(os.urandom(1 << 23))
before = stitchfs.stats(FD)
with stitchfs.patchgroup(target=FD, sync=True):
    with open(path("small"), "w") as f:
        f.write("small")
after = stitchfs.stats(FD)
written = after["patches"]["blocks_written"] - before["patches"]["blocks_written"]
dirty = after["memfs"]["dirty_bytes"]
print(f"pg_sync wrote {written} blocks; {dirty} bytes stay dirty")
assert dirty >= 1 << 23, dirty
assert written < 512, written
stitchfs.sync(FD)
synced = stitchfs.stats(FD)["patches"]["blocks_written"] - after["patches"]["blocks_written"]
print(f"a global sync then wrote {synced} blocks")
assert synced >= 2048, synced
print("python patchgroups ok")
