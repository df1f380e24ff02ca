"""What the crash-testing harness gives a checker, shared by the built-in
programs: the lines the workload printed before the crash (its promises),
and the way to report an inconsistent state."""
import os
import sys


def promises():
    """Lines the workload printed before the crash, in order."""
    with open(os.environ["STITCH_PROMISES"]) as f:
        return [l.rstrip("\n") for l in f]


def numbers(prefix):
    """N of every promised line "PREFIX N ...", in order."""
    return [int(l.split()[1]) for l in promises() if l.startswith(prefix + " ")]


def fail(kind, why):
    """Reports the state inconsistent: KIND is durability, atomicity,
    order or corruption; WHY says what was found."""
    print(f"{kind}: {why}")
    sys.exit(1)


def fsync_dir(path="."):
    d = os.open(path, os.O_RDONLY)
    os.fsync(d)
    os.close(d)
