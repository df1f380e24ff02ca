"""SQLite transactions (Python's sqlite3 module, synchronous=EXTRA).

    sqlite.py workload delete|wal
    sqlite.py check delete|wal

Each transaction inserts row N and sets the counter to N; "committed N"
is printed once COMMIT returns. The checker opens the database as the
program would after a crash (recovering a hot journal or the WAL), and
holds it to: integrity_check says ok, rows are exactly 1..k with the
counter at k (no transaction half applied), and k is at least every
promised N.

synchronous=EXTRA, not FULL: in rollback (DELETE) mode a transaction
commits when its journal is deleted, and only EXTRA has SQLite fsync the
directory after that; with FULL a crash soon after COMMIT returns may roll
the last transaction back on any file system (SQLite documents this, and
this instrument found it on its first run).
"""
import os
import sqlite3
import sys

from witness import fail, numbers, promises

TRANSACTIONS = 12


def row(i):
    return f"row {i} " + "x" * (300 + 97 * i)


def workload(mode):
    con = sqlite3.connect("db.sqlite", isolation_level=None)
    con.execute(f"PRAGMA journal_mode={mode}")
    con.execute("PRAGMA synchronous=EXTRA")
    con.execute("CREATE TABLE t(i INTEGER PRIMARY KEY, v TEXT)")
    con.execute("CREATE TABLE c(n INTEGER)")
    con.execute("INSERT INTO c VALUES (0)")
    print("created", flush=True)
    for i in range(1, TRANSACTIONS + 1):
        con.execute("BEGIN")
        con.execute("INSERT INTO t VALUES (?, ?)", (i, row(i)))
        con.execute("UPDATE c SET n = ?", (i,))
        con.execute("COMMIT")
        print(f"committed {i}", flush=True)
    con.close()


def check(mode):
    committed = numbers("committed")
    created = "created" in promises()
    if not os.path.exists("db.sqlite"):
        if created:
            fail("durability", "the database is gone after 'created'")
        return
    try:
        con = sqlite3.connect("db.sqlite", isolation_level=None)
        ok = con.execute("PRAGMA integrity_check").fetchall()
    except sqlite3.DatabaseError as e:
        fail("corruption", f"opening: {e}")
    if ok != [("ok",)]:
        fail("corruption", f"integrity_check: {ok[:3]}")
    try:
        rows = con.execute("SELECT i, v FROM t ORDER BY i").fetchall()
        (n,) = con.execute("SELECT n FROM c").fetchone()
    except (sqlite3.DatabaseError, TypeError) as e:
        if created:
            fail("durability", f"tables missing after 'created': {e}")
        return
    if [r[0] for r in rows] != list(range(1, len(rows) + 1)) or n != len(rows):
        fail("atomicity", f"rows {[r[0] for r in rows]} with the counter at {n}")
    if any(v != row(i) for i, v in rows):
        fail("atomicity", "a row holds the wrong value")
    if committed and n < max(committed):
        fail("durability", f"{n} rows after 'committed {max(committed)}'")



if __name__ == "__main__":
    {"workload": workload, "check": check}[sys.argv[1]](sys.argv[2])
