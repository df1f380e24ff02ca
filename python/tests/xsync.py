"""External synchrony's mount side, from the Python package (run as root
by crates/cli/tests/xsync.rs with STITCHFS_MOUNT set, on a mount with no
background flush, so every flush counted here is one a call caused).

Checks: a member's fsync returns without a flush, and its commit flushes
once (a second commit, with nothing new, does not); a process outside the
group that looks at a file the group changed waits for a commit first
(the kernel was told not to cache what the member saw of it), and one
that looks at something else does not; a member does not wait for its
own changes; a process that leaves the group fsyncs for real again; a
child of a member is in the group; misuse with its errno.
"""

import errno
import os
import subprocess
import sys

import stitchfs
from _check import fails_with

MNT = os.environ["STITCHFS_MOUNT"]
FD = os.open(MNT, os.O_RDONLY)


def path(name):
    return os.path.join(MNT, name)


def figures():
    return stitchfs.stats(FD)


def flushes():
    return figures()["memfs"]["flushes"]


# An outside process that stats the names it is sent. It is this one's
# child, started before this one joins a group; it takes a context of its
# own at once, so that it is not taken for a member later (a process the
# mount first sees after its parent joined would inherit the group).
OUTSIDER = subprocess.Popen(
    [
        sys.executable,
        "-c",
        "import os, sys, stitchfs\n"
        f"stitchfs.set_tag(1, {MNT!r})\n"
        "print('ready', flush=True)\n"
        "for line in sys.stdin:\n"
        "    name = line.strip()\n"
        "    try:\n"
        "        print(os.stat(name).st_size, flush=True)\n"
        "    except FileNotFoundError:\n"
        "        print('missing', flush=True)\n",
    ],
    stdin=subprocess.PIPE,
    stdout=subprocess.PIPE,
    text=True,
)
assert OUTSIDER.stdout.readline().strip() == "ready"


def outside_stat(name):
    OUTSIDER.stdin.write(path(name) + "\n")
    OUTSIDER.stdin.flush()
    return OUTSIDER.stdout.readline().strip()


# The group works in work/; other/ it never touches (a process outside
# that walks a directory the group changed waits too: its listing and
# times are what the group changed).
os.mkdir(path("work"))
os.mkdir(path("other"))
with open(path("other/unrelated"), "w") as f:
    f.write("before")
stitchfs.sync(FD)
assert outside_stat("other/unrelated") == "6"

# Misuse before joining.
print("commit outside:", fails_with(errno.EINVAL, stitchfs.xs_commit, 0, FD))
print("leave outside:", fails_with(errno.EINVAL, stitchfs.xs_leave, FD))
print("unknown group:", fails_with(errno.EBADF, stitchfs.xs_join, 1 << 40, FD))

group = stitchfs.xs_join(0, FD)
assert group >= 1, group
x = figures()["xsync"]
assert x["groups"] >= 1 and x["groups_made"] >= 1, x

# A member's fsync returns at once: no flush.
before = flushes()
with open(path("work/mine"), "w") as f:
    f.write("member data")
    f.flush()
    os.fsync(f.fileno())
    os.fdatasync(f.fileno())
stitchfs.sync(FD)
assert flushes() == before, (flushes(), before)
assert figures()["xsync"]["syncs_returned"] >= 3, figures()["xsync"]

# The member sees its own file at once, and stats it (the kernel must
# not keep that answer for others).
assert os.stat(path("work/mine")).st_size == 11
assert flushes() == before

# An outside process looking at something else does not wait.
assert outside_stat("other/unrelated") == "6"
assert figures()["xsync"]["observers_held"] == 0, figures()["xsync"]
assert flushes() == before

# An outside process looking at the member's file waits for a commit.
assert outside_stat("work/mine") == "11"
x = figures()["xsync"]
assert x["observers_held"] == 1, x
assert flushes() > before, "the outsider saw the file with no flush"
assert x["durable_below"] >= 1, x

# Nothing new: the commit has nothing to do; then a change: it flushes.
before = flushes()
assert stitchfs.xs_commit(0, FD) is False
assert flushes() == before
with open(path("work/mine"), "a") as f:
    f.write("!")
assert stitchfs.xs_commit(123, FD) is True
assert flushes() == before + 1, (flushes(), before)
x = figures()["xsync"]
assert x["commits_flushed"] >= 1 and x["max_held_bytes"] >= 123, x
assert stitchfs.xs_commit(0, FD) is False

# A removal is seen by an outsider only once durable too.
os.unlink(path("work/mine"))
before = flushes()
assert outside_stat("work/mine") == "missing"
assert flushes() > before
assert figures()["xsync"]["observers_held"] == 2

# A child process is in the group: its fsync returns at once.
before = flushes()
pid = os.fork()
if pid == 0:
    with open(path("work/child"), "w") as f:
        f.write("c")
        os.fsync(f.fileno())
    os._exit(0 if flushes() == before else 7)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, "the child's fsync flushed"

# Another user may not join this user's group.
pid = os.fork()
if pid == 0:
    os.setuid(65534)
    try:
        stitchfs.xs_join(group, FD)
    except stitchfs.StitchError as e:
        os._exit(0 if e.errno == errno.EPERM else 3)
    os._exit(4)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, "another user joined"

# Leaving: fsync is the mount's again.
assert stitchfs.xs_leave(FD) == group
before = flushes()
with open(path("work/after"), "w") as f:
    f.write("a")
    os.fsync(f.fileno())
assert flushes() > before, "an fsync after leaving did not flush"

OUTSIDER.stdin.close()
OUTSIDER.wait()
print("python xsync ok")
