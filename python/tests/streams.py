"""Streams through a real mount, from the Python package (run as root by
crates/cli/tests/streams.rs with STITCHFS_MOUNT set).

Checks: joining, asking and leaving a stream; a thread and a child process
take the stream of their parent; a thread's own stream is its own; a
stream sync in a stream and outside one (EINVAL); a name too long, sent
past the library's own check (ENAMETOOLONG from the server); another
user's stream (EPERM); fsyncs that only order; the `with` block.
"""

import errno
import fcntl
import os
import threading

import stitchfs
from _check import fails_with

MNT = os.environ["STITCHFS_MOUNT"]
FD = os.open(MNT, os.O_RDONLY)


# No stream yet.
assert stitchfs.getstream(FD) == ("", 0, 0), stitchfs.getstream(FD)
print("outside:", fails_with(errno.EINVAL, stitchfs.streamsync, FD))

stitchfs.setstream("mail", 0, FD)
mine = stitchfs.getstream(FD)
assert mine.name == "mail" and mine.id > 0 and mine.flags == 0, mine
with open(os.path.join(MNT, "in-stream"), "w") as f:
    f.write("x")
stitchfs.streamsync(FD)

# A thread started now takes the process's stream; one that joins
# another keeps its own, and the main thread keeps "mail".
seen = {}


def thread():
    seen["inherited"] = stitchfs.getstream(FD).name
    stitchfs.setstream("side", stitchfs.IGNORE_FSYNC, FD)
    seen["own"] = stitchfs.getstream(FD)


t = threading.Thread(target=thread)
t.start()
t.join()
assert seen["inherited"] == "mail", seen
assert seen["own"].name == "side" and seen["own"].flags == stitchfs.IGNORE_FSYNC, seen
assert seen["own"].id != mine.id, seen
assert stitchfs.getstream(FD).name == "mail"

# A child process takes the stream, and keeps it across exec.
pid = os.fork()
if pid == 0:
    ok = stitchfs.getstream(FD) == mine
    os.execvp("python3", ["python3", "-c",
        "import os,stitchfs,sys; "
        f"sys.exit(0 if {ok} and stitchfs.getstream(os.environ['STITCHFS_MOUNT']).name == 'mail' else 1)"])
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0, "the child's stream"

# The same name is the same stream.
stitchfs.setstream("mail", stitchfs.IGNORE_FSYNC, FD)
again = stitchfs.getstream(FD)
assert again.id == mine.id and again.flags == stitchfs.IGNORE_FSYNC, again
# An fsync that only orders returns; the stream sync makes it durable.
with open(os.path.join(MNT, "ordered-only"), "w") as f:
    f.write("y")
    f.flush()
    os.fsync(f.fileno())
stitchfs.streamsync(FD)

# A name too long: the library refuses it, and so does the server.
print("too long:", fails_with(errno.ENAMETOOLONG, stitchfs.setstream, "n" * 64, 0, FD))
raw = stitchfs._STREAM.pack(stitchfs.API_VERSION, 0, 0, b"n" * 64)
try:
    fcntl.ioctl(FD, stitchfs.IOC_SET_STREAM, raw)
    raise AssertionError("the server took a name with no NUL")
except OSError as e:
    assert e.errno == errno.ENAMETOOLONG, e
# Unknown flags.
raw = stitchfs._STREAM.pack(stitchfs.API_VERSION, 8, 0, b"mail")
try:
    fcntl.ioctl(FD, stitchfs.IOC_SET_STREAM, raw)
    raise AssertionError("the server took unknown flags")
except OSError as e:
    assert e.errno == errno.EINVAL, e

# Another user may not join root's stream, and may make its own.
pid = os.fork()
if pid == 0:
    os.setgid(65534)
    os.setuid(65534)
    try:
        stitchfs.setstream("mail", 0, FD)
        os._exit(1)
    except stitchfs.StitchError as e:
        if e.errno != errno.EPERM:
            os._exit(2)
    stitchfs.setstream("nobody's", 0, FD)
    os._exit(0 if stitchfs.getstream(FD).name == "nobody's" else 3)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
assert code == 0, f"a second user: {code}"

# Leaving, and the with block (which goes back to where it was).
stitchfs.setstream("", 0, FD)
assert stitchfs.getstream(FD).id == 0
with stitchfs.stream("block", target=FD):
    assert stitchfs.getstream(FD).name == "block"
assert stitchfs.getstream(FD).id == 0
print("python streams ok")
