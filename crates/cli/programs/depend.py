"""The paper's `depend "gzip -k big" "rm big"` ("Generalized File System
Dependencies", §5): compress a file, then remove the original.

    depend.py workload depend|plain
    depend.py check depend|plain

With `depend` each removal runs under `stitchfs depend`, its changes
ordered after everything gzip wrote; `plain` runs the same two commands
one after the other with nothing between them (no fsync: what most
scripts do). The originals are made durable first. Nothing is promised
durable after that, but a reader must find each file whole somewhere:
the original, or a compressed copy that decompresses to it. Losing both
is what an unordered file system may do to `plain` (soft updates writes
the removal and the copy's data in no order), and what `depend` must
never do.
"""
import gzip
import os
import subprocess
import sys

from witness import fail, promises

FILES = 4


def content(i):
    # A few blocks each, different per file.
    return (f"line {i} of the original, " * (400 + 150 * i) + "\n").encode()


def workload(variant):
    stitchfs = os.environ["STITCHFS_EXE"]
    for i in range(1, FILES + 1):
        with open(f"big{i}", "wb") as f:
            f.write(content(i))
    subprocess.run([stitchfs, "sync", "."], check=True)
    print("ready", flush=True)
    for i in range(1, FILES + 1):
        first, second = f"gzip -k big{i}", f"rm big{i}"
        if variant == "depend":
            subprocess.run([stitchfs, "depend", first, second], check=True)
        else:
            subprocess.run(["sh", "-c", f"{first} && {second}"], check=True)
        print(f"moved {i}", flush=True)


def check(variant):
    if "ready" not in promises():
        return  # the originals were still being written
    for i in range(1, FILES + 1):
        want = content(i)
        if os.path.exists(f"big{i}"):
            data = open(f"big{i}", "rb").read()
            # The original is only ever read: it is whole or removed.
            if data != want:
                fail("corruption", f"big{i} changed ({len(data)} bytes)")
            continue
        try:
            got = gzip.decompress(open(f"big{i}.gz", "rb").read())
        except (OSError, EOFError) as e:
            fail("order", f"big{i} is removed and big{i}.gz is not whole ({e})")
        if got != want:
            fail("order", f"big{i} is removed and big{i}.gz holds other data")


if __name__ == "__main__":
    {"workload": workload, "check": check}[sys.argv[1]](sys.argv[2])
