"""A program that says "committed N" only when record N is safe, the
promise external synchrony keeps ("Rethink the Sync"): each record is
written to a temporary file, fsynced, renamed into place, and appended to
a log, which is fsynced; then the program prints the line.

    xsync.py workload xsync|nosync
    xsync.py check xsync|nosync

With `xsync` the program runs under `stitchfs xsync`: its fsyncs return
at once, and each line reaches the harness only after everything the
program did before printing it is durable, so every line seen must
survive a crash. `nosync` runs the same program alone with its fsyncs
left out (what the output would promise on a file system that simply
dropped them): the control, which a crash shows lying.
"""
import os
import subprocess
import sys

from witness import fail, numbers

RECORDS = 12


def content(i):
    return (f"record {i} " * (50 + 40 * i) + "\n").encode()


def inner(variant):
    do_fsync = variant == "xsync"
    log = os.open("log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for i in range(1, RECORDS + 1):
        with open(f"rec{i}.tmp", "wb") as f:
            f.write(content(i))
            f.flush()
            if do_fsync:
                os.fsync(f.fileno())
        os.rename(f"rec{i}.tmp", f"rec{i}")
        os.write(log, f"{i}\n".encode())
        if do_fsync:
            os.fsync(log)
        print(f"committed {i}", flush=True)


def workload(variant):
    me = [sys.executable, os.path.abspath(__file__), "inner", variant]
    if variant == "xsync":
        # Only the mount under test: the group is what this program does
        # there, and other mounts on the machine come and go.
        xsync = [os.environ["STITCHFS_EXE"], "xsync", "--at", "."]
        me = xsync + ["--commit-interval", "60", "--"] + me
    subprocess.run(me, check=True)


def check(variant):
    done = numbers("committed")
    logged = []
    if os.path.exists("log"):
        logged = [l for l in open("log").read().split("\n") if l]
    for i in done:
        try:
            data = open(f"rec{i}", "rb").read()
        except FileNotFoundError:
            fail("durability", f"committed {i} was printed, rec{i} is missing")
        if data != content(i):
            fail("durability", f"committed {i} was printed, rec{i} holds {len(data)} other bytes")
        if str(i) not in logged:
            fail("durability", f"committed {i} was printed, the log has {logged}")


if __name__ == "__main__":
    {"workload": workload, "check": check, "inner": inner}[sys.argv[1]](sys.argv[2])
