"""The classic atomic replace: write a temporary, rename it over the file.

    replace.py workload fsync|nofsync
    replace.py check fsync|nofsync

With fsync the temporary is fsynced before the rename and the directory
after it, and "replaced N" is printed once version N is the file's: a
promise that no crash leaves an older version. Without fsync the program
promises nothing durable, but a reader must still find one whole version,
never an empty or mixed file (what ext4 gives a rename over a file).
Version 0 is written and fsynced in both variants before anything else.
"""
import os
import sys

from witness import fail, fsync_dir, numbers

VERSIONS = 12


def content(i):
    # Several blocks, a different length per version: a mixed or cut
    # file does not pass for a whole one.
    return (f"version {i:04}\n" * (700 + 300 * i)).encode()


def write(i, fsync):
    with open("f.tmp", "wb") as f:
        f.write(content(i))
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.rename("f.tmp", "f")
    if fsync:
        fsync_dir()


def workload(variant):
    write(0, True)
    print("replaced 0", flush=True)
    for i in range(1, VERSIONS + 1):
        write(i, variant == "fsync")
        print(f"replaced {i}", flush=True)


def check(variant):
    promised = numbers("replaced")
    if not os.path.exists("f"):
        if promised:
            fail("durability", f"f is gone after 'replaced {max(promised)}'")
        return
    data = open("f", "rb").read()
    version = next((i for i in range(VERSIONS + 1) if content(i) == data), None)
    if version is None:
        fail("atomicity", f"f holds no whole version ({len(data)} bytes, starts {data[:16]!r})")
    if variant == "fsync" and promised and version < max(promised):
        fail("durability", f"f is version {version} after 'replaced {max(promised)}'")



if __name__ == "__main__":
    {"workload": workload, "check": check}[sys.argv[1]](sys.argv[2])
