"""LevelDB through plyvel, in the shape ALICE studied: a few large values,
synchronous puts, a small write buffer so that compaction runs. "put N"
is printed once the synchronous put of key N returns.

    leveldb.py workload
    leveldb.py check

A crash must leave a database that opens with paranoid checks, whose keys
are a prefix 1..k of those put (in order), each with its whole value, and
k at least every promised N.
"""
import os
import sys

import plyvel

from witness import fail, numbers

PUTS = 24


def key(i):
    return f"key{i:04}".encode()


def value(i):
    return (f"value {i} " * (1000 + 150 * i)).encode()


def workload():
    db = plyvel.DB("db", create_if_missing=True, write_buffer_size=64 << 10)
    print("opened", flush=True)
    for i in range(1, PUTS + 1):
        db.put(key(i), value(i), sync=True)
        print(f"put {i}", flush=True)
    db.close()


def check():
    promised = numbers("put")
    if not os.path.exists("db/CURRENT"):
        if promised:
            fail("durability", "the database is gone after a put")
        return
    try:
        db = plyvel.DB("db", paranoid_checks=True)
        found = {k: v for k, v in db}
        db.close()
    except plyvel.Error as e:
        fail("corruption", f"opening with paranoid checks: {e}")
    keys = sorted(found)
    k = len(keys)
    if keys != [key(i) for i in range(1, k + 1)]:
        fail("order", f"keys are not a prefix of those put: {[x.decode() for x in keys[:8]]}")
    bad = [i for i in range(1, k + 1) if found[key(i)] != value(i)]
    if bad:
        fail("atomicity", f"keys with a wrong value: {bad[:8]}")
    if promised and k < max(promised):
        fail("durability", f"{k} keys after 'put {max(promised)}'")


if __name__ == "__main__":
    {"workload": workload, "check": check}[sys.argv[1]]()
