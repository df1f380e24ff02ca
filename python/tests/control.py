"""The control table through the Python package on a real stitchfs
mount, run by crates/cli/tests/control.rs as root with
``$STITCHFS_MOUNT`` (a fresh mount) and ``$FOREIGN`` (a directory on
another file system).

The API version and sync, on the mount's root and on a file. Then
contexts; every call goes through a descriptor of the mount's root, a
directory. What each process sees, each check failing if inheritance
broke:

- a process holding no context: who it is, and nothing held;
- a child: a copy of its parent's, taken at its first request (its
  parent's later change does not reach it) and its own after;
- a thread: its process's, shared;
- a program after exec: the context its process held before;
- a grandchild whose parent exited before it made a request: its
  grandparent's, found through the subreaper that adopted it (and
  nothing without the subreaper);
- a new process given an exited one's pid (forced through
  ``ns_last_pid``): never the old process's context;
- writes through a shared mapping, which the kernel sends with no caller
  (thread id 0): served, and no context changed;

and every misuse errno with its message: an unknown and a closed context
(EBADF), another user's either way (EPERM, as user nobody), a structure
of another size or version or with unknown flags (EINVAL), a number of
ours the server does not know and a file system that is not stitchfs
(ENOTTY), a bad descriptor (EBADF). Prints "python ok" when all hold.
"""

import ctypes
import errno
import fcntl
import json
import mmap
import os
import struct
import sys
import threading
import time

import stitchfs

MNT = os.environ["STITCHFS_MOUNT"]
FD = os.open(MNT, os.O_RDONLY | os.O_DIRECTORY)
NOBODY = 65534


def ctx(id=0):
    return stitchfs.context(FD, id)


def refused(what, call, want):
    try:
        call()
    except stitchfs.StitchError as e:
        assert e.errno == want, (what, errno.errorcode[e.errno], errno.errorcode[want])
        assert isinstance(e, OSError)
        print(f"{what}: {e}")
        return str(e)
    raise AssertionError(f"{what}: no error")


def in_child(body, wait_for=None):
    """Runs ``body()`` in a child process; returns what it returned (as
    JSON). ``wait_for``, if given, is called in the parent once the child
    has written a first line (``ready()``), before the child goes on."""
    r, w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(go_w)

        def ready(value=None):
            os.write(w, (json.dumps(value) + "\n").encode())
            os.read(go_r, 1)

        try:
            out = body(ready) if wait_for else body()
            os.write(w, (json.dumps(out) + "\n").encode())
            os._exit(0)
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            os.write(w, (json.dumps({"error": repr(e)}) + "\n").encode())
            os._exit(1)
    os.close(w)
    os.close(go_r)
    f = os.fdopen(r)
    if wait_for:
        wait_for(json.loads(f.readline()))
        os.write(go_w, b"x")
    line = f.readline()
    os.close(go_w)
    _, status = os.waitpid(pid, 0)
    out = json.loads(line) if line else {"error": "no answer"}
    assert status == 0 and not (isinstance(out, dict) and "error" in out), out
    return out


def as_dict(c):
    return c._asdict()


# The API version and sync, plain (``$STITCHFS_MOUNT``) and on a file.
assert stitchfs.version() == stitchfs.API_VERSION == 6, stitchfs.version()
stitchfs.sync()
with open(os.path.join(MNT, "f"), "wb") as f:
    f.write(b"x")
    stitchfs.sync(f)

# A process holding nothing: who it is, and no context.
me = ctx()
assert (me.pid, me.tid) == (os.getpid(), threading.get_native_id()), me
assert not me.held and me.id == 0 and me.tag == 0 and me.start > 0, me
assert me.uid == os.getuid(), me

stitchfs.subreaper()
stitchfs.set_tag(7, FD)
me = ctx()
assert me.held and not me.inherited and me.tag == 7 and me.id != 0, me
assert me.from_pid == 0 and me.uid == 0, me
assert ctx(me.id).tag == 7 and ctx(me.id).tid == 0

# A child: a copy taken at its first request, then its own.
probe = os.path.join(MNT, "probe")
open(probe, "w").close()


def child_after(ready):
    # Its first request: an open always reaches the server.
    os.close(os.open(probe, os.O_RDONLY))
    ready()  # the parent now changes its tag
    c = ctx()
    stitchfs.set_tag(9, FD)
    return as_dict(c)


def parent_changes(_):
    stitchfs.set_tag(8, FD)


c = in_child(child_after, wait_for=parent_changes)
assert c["tag"] == 7, f"the child saw its parent's later tag: {c}"
assert c["flags"] == stitchfs.CONTEXT_HELD | stitchfs.CONTEXT_INHERITED, c
assert (c["from_pid"], c["from_start"]) == (os.getpid(), me.start), c
assert c["pid"] != os.getpid() and c["id"] not in (0, me.id), c
assert ctx().tag == 8, "the child's tag reached its parent"
refused("an exited child's context", lambda: ctx(c["id"]), errno.EBADF)
refused("a context never made", lambda: ctx(1 << 40), errno.EBADF)
stitchfs.set_tag(7, FD)

# A thread: its process's context, shared.
seen = {}


def in_thread():
    seen["c"] = ctx()
    seen["tid"] = threading.get_native_id()
    stitchfs.set_tag(12, FD)


t = threading.Thread(target=in_thread)
t.start()
t.join()
assert seen["c"].id == me.id and seen["c"].tag == 7, seen
assert seen["c"].tid == seen["tid"] != os.getpid(), seen
assert ctx().tag == 12, "a thread's tag is its process's"
stitchfs.set_tag(7, FD)

# exec keeps the context the process held: the same context, by number.
AFTER_EXEC = """
import json, os, stitchfs
c = stitchfs.context(int(os.environ["STITCH_FD"]))
print(json.dumps(dict(c._asdict(), held=int(os.environ["HELD_ID"]))))
"""
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    stitchfs.set_tag(11, FD)
    os.environ["HELD_ID"] = str(ctx().id)
    os.environ["STITCH_FD"] = str(FD)
    os.set_inheritable(FD, True)
    os.dup2(w, 1)
    os.execv(sys.executable, [sys.executable, "-c", AFTER_EXEC])
os.close(w)
out = os.fdopen(r).read()
_, status = os.waitpid(pid, 0)
assert status == 0 and out, out
after = json.loads(out)
assert after["pid"] == pid and after["id"] == after["held"] and after["tag"] == 11, after

# An orphan: its parent exits before it makes a request; the subreaper
# adopts it, and it inherits from the subreaper.


def orphan_seen():
    r, w = os.pipe()
    parent = os.fork()
    if parent == 0:
        os.close(r)
        parent_pid = os.getpid()
        if os.fork() == 0:
            deadline = time.monotonic() + 10
            while os.getppid() == parent_pid and time.monotonic() < deadline:
                time.sleep(0.01)
            c = ctx()
            os.write(w, (json.dumps([as_dict(c), os.getppid()]) + "\n").encode())
            os._exit(0)
        os._exit(0)  # before the grandchild made any request
    os.close(w)
    os.waitpid(parent, 0)
    line = os.fdopen(r).readline()
    # The orphan is now this process's child: reap it.
    try:
        os.wait()
    except ChildProcessError:
        pass
    c, ppid = json.loads(line)
    return c, ppid


TOP = os.getpid()
c, ppid = orphan_seen()
assert ppid == TOP, f"not adopted by the subreaper: parent {ppid}"
assert c["tag"] == 7 and c["from_pid"] == TOP, c

# Without the subreaper the orphan goes to init, which holds nothing.
ctypes.CDLL(None, use_errno=True).prctl(stitchfs._PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
c, ppid = orphan_seen()
assert ppid != TOP and not c["flags"] & stitchfs.CONTEXT_HELD, (c, ppid)
stitchfs.subreaper()

# A reused pid is a new process: it never takes the old one's context.


def exits_holding():
    stitchfs.set_tag(20, FD)
    return as_dict(ctx())


old = in_child(exits_holding)
reused = None
try:
    for _ in range(50):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(old["pid"] - 1))
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            if os.getpid() == old["pid"]:
                os.write(w, json.dumps(as_dict(ctx())).encode())
            os._exit(0)
        os.close(w)
        out = os.fdopen(r).read()
        os.waitpid(pid, 0)
        if out:
            reused = json.loads(out)
            break
except OSError as e:
    print(f"pid reuse could not be forced ({e}); the unit tests simulate it")
if reused is not None:
    # Its start time may be the old one's too, when both began in one
    # clock tick (10 ms): the server tells them apart by the old one's
    # exit, which its pidfd reports.
    assert reused["pid"] == old["pid"], (reused, old)
    assert reused["id"] != old["id"] and reused["tag"] == 7, (reused, old)
    assert reused["from_pid"] == TOP, reused
    same_tick = reused["start"] == old["start"]
    print(f"pid {old['pid']} reused (same start tick: {same_tick}): a new process, a new context")

# Writes through a shared mapping reach the server with no caller.
path = os.path.join(MNT, "mapped")
with open(path, "wb") as f:
    f.truncate(8192)
with open(path, "r+b") as f:
    m = mmap.mmap(f.fileno(), 8192, mmap.MAP_SHARED)
    m[0:5] = b"hello"
    m[4096:4101] = b"world"
    m.flush()
    m.close()
stitchfs.sync(FD)
after = ctx()
assert (after.id, after.tag, after.flags) == (me.id, 7, me.flags), after

# Another user: nobody never reads root's context, nor root nobody's.


def as_nobody(ready):
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    refused("another user's context", lambda: ctx(me.id), errno.EPERM)
    c = ctx()
    assert c.uid == NOBODY and c.tag == 7 and c.inherited, c
    stitchfs.set_tag(30, FD)
    ready(c.id)  # alive while root asks
    return None


def root_asks(nobody_id):
    refused("user nobody's context, asked by root", lambda: ctx(nobody_id), errno.EPERM)


in_child(as_nobody, wait_for=root_asks)

# Structures of another size or version, unknown flags.


def raw(cmd, arg):
    try:
        fcntl.ioctl(FD, cmd, arg)
    except OSError as e:
        return e.errno
    return 0


CTX = struct.Struct("=IIQIIQIIQQ")
wrong_size = (stitchfs.IOC_CONTEXT & ~(0x3FFF << 16)) | (64 << 16)
assert raw(wrong_size, bytes(64)) == errno.EINVAL
for v in (0, stitchfs.API_VERSION + 1):
    assert raw(stitchfs.IOC_CONTEXT, CTX.pack(v, *[0] * 9)) == errno.EINVAL, v
assert raw(stitchfs.IOC_SET_TAG, struct.pack("=IIQ", stitchfs.API_VERSION, 4, 1)) == errno.EINVAL
# The version call with a 16-byte layout.
assert raw(0x8010F502, bytes(16)) == errno.EINVAL
assert stitchfs.strerror(errno.EINVAL).startswith("a structure of the wrong size")

# A number of ours unknown; not stitchfs; no descriptor.
assert raw(0x0000F5F0, 0) == errno.ENOTTY
msg = refused("sync off stitchfs", lambda: stitchfs.sync(os.environ["FOREIGN"]), errno.ENOTTY)
assert "not a stitchfs mount" in msg, msg
refused("context off stitchfs", lambda: stitchfs.context(os.environ["FOREIGN"]), errno.ENOTTY)
refused("set_tag off stitchfs", lambda: stitchfs.set_tag(1, os.environ["FOREIGN"]), errno.ENOTTY)
refused("a bad descriptor", lambda: stitchfs.context(987654), errno.EBADF)

print("python ok")
