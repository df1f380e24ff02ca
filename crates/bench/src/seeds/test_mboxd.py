"""Tests of mboxd, the IMAP server of `bench seeds` imap-mbox and imap-pg.

Run: python3 crates/bench/src/seeds/test_mboxd.py (the crate's tests run it).

Each test serves one connection in a thread of this process and talks to it
with imaplib. The file system calls the server makes go through a recording
stand-in for its `os` module, so a test sees every change and fsync it
makes; in patchgroup mode a recording stand-in for the `stitchfs` package,
which also refuses what the real calls refuse, says which groups were
engaged at each change.
"""

import errno
import imaplib
import os
import socket
import sys
import tempfile
import threading
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mboxd  # noqa: E402

# Calls that change the file system (os.open counts when it may write).
CHANGES = {"write", "replace", "rename", "unlink", "ftruncate", "truncate", "mkdir",
           "rmdir", "link", "symlink", "chmod", "utime"}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Recorder:
    """One log of the server's file system calls and patchgroup calls, in
    order, each change with the groups engaged when it was made."""

    def __init__(self):
        self.log = []
        self.pg = None

    def engaged(self):
        return frozenset(self.pg.engaged) if self.pg else frozenset()


class RecordingOs(types.ModuleType):
    """`os`, with its changes and fsyncs written to the recorder."""

    def __init__(self, rec):
        super().__init__("os")
        self._rec = rec

    def __getattr__(self, name):
        real = getattr(os, name)
        if name == "open":
            def open_(path, flags, *rest):
                if flags & WRITE_FLAGS:
                    self._rec.log.append(("change", "open", self._rec.engaged(), path))
                return real(path, flags, *rest)
            return open_
        if name in CHANGES or name == "fsync":
            kind = "fsync" if name == "fsync" else "change"

            def call(*args):
                self._rec.log.append((kind, name, self._rec.engaged(), args[0]))
                return real(*args)
            return call
        return real


class FakePatchgroups(types.ModuleType):
    """The `stitchfs` patchgroup calls, recorded, with the rules of the real
    ones: a group another depends on is sealed (EBUSY to depend on it while
    engaged, EINVAL to engage it after); the dependent must never have been
    engaged; a closed group is gone (EBADF)."""

    def __init__(self, rec):
        super().__init__("stitchfs")
        self.rec = rec
        rec.pg = self
        self.next_id = 1
        self.open = set()
        self.engaged = set()
        self.ever_engaged = set()
        self.sealed = set()
        self.depends = {}
        self.synced = []

    def _log(self, *event):
        self.rec.log.append(event)

    def _held(self, g):
        if g not in self.open:
            raise OSError(errno.EBADF, f"group {g} is not held")

    def pg_create(self, target=None):
        g = self.next_id
        self.next_id += 1
        self.open.add(g)
        self._log("pg_create", g)
        return g

    def pg_depend(self, q, p, target=None):
        self._held(q)
        self._held(p)
        if p in self.engaged:
            raise OSError(errno.EBUSY, f"group {p} is engaged")
        if q in self.ever_engaged:
            raise OSError(errno.EINVAL, f"group {q} has been engaged")
        self.sealed.add(p)
        self.depends.setdefault(q, set()).add(p)
        self._log("pg_depend", q, p)

    def pg_engage(self, g, target=None):
        self._held(g)
        if g in self.sealed:
            raise OSError(errno.EINVAL, f"group {g} is sealed")
        self.engaged.add(g)
        self.ever_engaged.add(g)
        self._log("pg_engage", g)

    def pg_disengage(self, g, target=None):
        self._held(g)
        self.engaged.discard(g)
        self._log("pg_disengage", g)

    def pg_sync(self, g, target=None):
        self._held(g)
        self.synced.append(g)
        self._log("pg_sync", g)

    def pg_close(self, g, target=None):
        self._held(g)
        self.open.discard(g)
        self.engaged.discard(g)
        self._log("pg_close", g)


class Server:
    """mboxd on a temporary mail directory, serving one connection at a
    time in a thread, its calls recorded."""

    def __init__(self, test, durability):
        self.dir = tempfile.TemporaryDirectory()
        test.addCleanup(self.dir.cleanup)
        self.maildir = self.dir.name
        self.rec = Recorder()
        self.os = RecordingOs(self.rec)
        real_os, saved = mboxd.os, sys.modules.get("stitchfs")
        mboxd.os = self.os
        mboxd.open = self.no_writes
        if durability == "patchgroups":
            sys.modules["stitchfs"] = FakePatchgroups(self.rec)

        def restore():
            mboxd.os = real_os
            del mboxd.open
            if saved is None:
                sys.modules.pop("stitchfs", None)
            else:
                sys.modules["stitchfs"] = saved
        test.addCleanup(restore)
        self.store = mboxd.Store(self.maildir, mboxd.durability(durability, self.maildir))
        self.pg = self.rec.pg
        self.listener = socket.create_server(("127.0.0.1", 0))
        test.addCleanup(self.listener.close)

    @staticmethod
    def no_writes(path, mode="r", *args, **kwargs):
        assert not set(mode) & set("wax+"), f"open({path!r}, {mode!r}) outside the store"
        return open(path, mode, *args, **kwargs)

    def serve_one(self):
        """The port of a session served in a thread."""
        def one():
            conn, _ = self.listener.accept()
            with conn:
                mboxd.Session(conn, self.store).run()
        self.thread = threading.Thread(target=one, daemon=True)
        self.thread.start()
        return self.listener.getsockname()[1]

    def connect(self):
        """A logged-in client of a session served in a thread."""
        m = imaplib.IMAP4("127.0.0.1", self.serve_one())
        ok(m.login("bench", "secret"))
        return m

    def logout(self, m):
        self.assert_bye(m.logout())
        self.thread.join(10)
        assert not self.thread.is_alive()

    @staticmethod
    def assert_bye(answer):
        assert answer[0] == "BYE", answer

    def file(self, name):
        with open(os.path.join(self.maildir, name), "rb") as f:
            return f.read()


def ok(answer):
    typ, data = answer
    assert typ == "OK", answer
    return data


def message(i, extra=""):
    return (f"From: a@b\r\nSubject: m{i}\r\n\r\nbody {i}\r\n{extra}").encode()


def fill(m, n, extra=""):
    for i in range(n):
        ok(m.append("INBOX", None, None, message(i, extra)))


def status(m, box, item="MESSAGES"):
    data = ok(m.status(box, f"({item})"))
    return int(data[0].split()[-1].rstrip(b")"))


def move(m, n):
    """Featherstitch's move, as the bench's client does it."""
    ok(m.select("INBOX"))
    ok(m.create("Moved"))
    for i in range(1, n + 1):
        ok(m.copy(str(i), "Moved"))
        ok(m.store(str(i), "+FLAGS", "(\\Deleted)"))
    ok(m.expunge())
    ok(m.check())


class Protocol(unittest.TestCase):
    """The commands, in the mode that writes without syncing."""

    def test_a_move_leaves_the_messages_in_the_destination_only(self):
        s = Server(self, "none")
        m = s.connect()
        fill(m, 5, extra="From the start of a line\r\n>From quoted\r\n")
        move(m, 5)
        self.assertEqual((status(m, "Moved"), status(m, "INBOX")), (5, 0))
        s.logout(m)
        # One From line a message, the pseudo-message's first; body lines
        # beginning "From " escaped.
        moved = s.file("Moved")
        self.assertEqual(moved.count(b"\nFrom MAILER-DAEMON ") + 1, 6)
        self.assertIn(b"\n>From the start of a line\n>>From quoted\n", moved)
        self.assertEqual(s.file("INBOX").count(b"From MAILER-DAEMON"), 1)
        # Read back: the text as appended, the UIDs written at no rewrite
        # yet numbered 1..5 all the same.
        m = s.connect()
        ok(m.select("Moved"))
        data = [d for d in ok(m.fetch("1:*", "(UID BODY.PEEK[])")) if isinstance(d, tuple)]
        self.assertEqual(len(data), 5)
        self.assertEqual(data[4][1], message(4, extra="From the start of a line\r\n>From quoted\r\n"))
        self.assertIn(b"(UID 5 BODY[]", data[4][0])
        s.logout(m)

    def test_sequence_sets_and_uid_commands(self):
        s = Server(self, "none")
        m = s.connect()
        fill(m, 8)
        ok(m.create("Dest"))
        ok(m.select("INBOX"))
        ok(m.copy("1:*", "Dest"))
        ok(m.copy("5", "Dest"))
        ok(m.copy("7:3", "Dest"))
        self.assertEqual(status(m, "Dest"), 8 + 1 + 5)
        self.assertEqual(ok(m.uid("SEARCH", None, "ALL"))[0], b"1 2 3 4 5 6 7 8")
        ok(m.uid("STORE", "2,4:5", "+FLAGS", "(\\Deleted \\Seen)"))
        ok(m.uid("STORE", "5", "-FLAGS", "(\\Seen)"))
        ok(m.uid("COPY", "6:*", "Dest"))
        self.assertEqual(status(m, "Dest"), 14 + 3)
        data = ok(m.expunge())
        # 2, then 4 (now 3), then 5 (now 3).
        self.assertEqual(data, [b"2", b"3", b"3"])
        self.assertEqual(ok(m.uid("SEARCH", None, "ALL"))[0], b"1 3 6 7 8")
        self.assertEqual(ok(m.search(None, "ALL"))[0], b"1 2 3 4 5")
        with self.assertRaisesRegex(imaplib.IMAP4.error, "BAD.*no message 9 in 5"):
            m.copy("9", "Dest")
        typ, data = m.copy("1", "Nowhere")
        self.assertEqual(typ, "NO")
        self.assertIn(b"TRYCREATE", data[0])
        typ, _ = m.create("Dest")
        self.assertEqual(typ, "NO")
        ok(m.noop())
        s.logout(m)

    def test_flags_reach_the_file_at_check_and_survive_a_new_session(self):
        s = Server(self, "none")
        m = s.connect()
        fill(m, 3)
        ok(m.select("INBOX"))
        ok(m.store("2", "+FLAGS.SILENT", "(\\Flagged \\Seen)"))
        # STORE keeps flags in memory, as UW does...
        self.assertNotIn(b"X-Status: F", s.file("INBOX"))
        ok(m.check())
        # ... and CHECK writes them, with the UIDs.
        inbox = s.file("INBOX")
        self.assertIn(b"Status: RO\nX-Status: F\nX-UID: 2\n", inbox)
        self.assertIn(b"X-IMAP: ", inbox)
        s.logout(m)
        m = s.connect()
        data = ok(m.select("INBOX"))
        self.assertEqual(data, [b"3"])
        flags = ok(m.fetch("2", "(FLAGS)"))[0]
        self.assertIn(b"\\Flagged", flags)
        self.assertIn(b"\\Seen", flags)
        self.assertEqual(ok(m.uid("FETCH", "3", "(FLAGS)"))[0], b"3 (UID 3 FLAGS ())")
        s.logout(m)

    def test_commands_wait_for_their_state(self):
        s = Server(self, "none")
        sock = socket.create_connection(("127.0.0.1", s.serve_one()))
        self.addCleanup(sock.close)
        f = sock.makefile("rb")
        self.assertTrue(f.readline().startswith(b"* OK [CAPABILITY IMAP4rev1]"))

        def command(line):
            sock.sendall(line + b"\r\n")
            lines = []
            while not lines or not lines[-1].startswith(line.split()[0] + b" "):
                lines.append(f.readline().rstrip(b"\r\n"))
            return lines
        self.assertEqual(command(b"a CAPABILITY"), [b"* CAPABILITY IMAP4rev1", b"a OK CAPABILITY completed"])
        self.assertTrue(command(b"b SELECT INBOX")[-1].startswith(b"b BAD log in first"))
        self.assertTrue(command(b'c LOGIN bench "pass word"')[-1].startswith(b"c OK"))
        self.assertTrue(command(b"d EXPUNGE")[-1].startswith(b"d BAD select a mailbox first"))
        self.assertTrue(command(b"e SELECT ../etc")[-1].startswith(b"e NO mailbox name"))
        self.assertTrue(command(b"f FROB")[-1].startswith(b"f BAD FROB not supported"))
        self.assertEqual(command(b"g LOGOUT"), [b"* BYE mboxd logging out", b"g OK LOGOUT completed"])
        s.thread.join(10)


class Fsync(unittest.TestCase):
    """The unmodified server syncs what each command stored."""

    def test_each_copy_is_synced_and_expunge_syncs_the_rewrite(self):
        s = Server(self, "fsync")
        m = s.connect()
        fill(m, 4)
        ok(m.select("INBOX"))
        ok(m.create("Moved"))
        log = s.rec.log
        start = len(log)
        ok(m.copy("1", "Moved"))
        # The append, then its fsync; nothing else.
        self.assertEqual([(e[0], e[1]) for e in log[start:]],
                         [("change", "open"), ("change", "write"), ("fsync", "fsync")])
        start = len(log)
        ok(m.store("1:4", "+FLAGS", "(\\Deleted)"))
        self.assertEqual(log[start:], [])
        ok(m.expunge())
        # New file written and synced, renamed, the directory synced.
        self.assertEqual([(e[0], e[1]) for e in log[start:]],
                         [("change", "open"), ("change", "write"), ("fsync", "fsync"),
                          ("change", "replace"), ("fsync", "fsync")])
        start = len(log)
        ok(m.check())
        self.assertEqual([(e[0], e[1]) for e in log[start:]], [("fsync", "fsync")])
        s.logout(m)


class Patchgroups(unittest.TestCase):
    """Each command's changes under a group of their own, chained to the
    previous command's; CHECK and EXPUNGE sync; no fsync."""

    def run_move(self, n=4):
        s = Server(self, "patchgroups")
        m = s.connect()
        fill(m, n)
        move(m, n)
        self.assertEqual((status(m, "Moved"), status(m, "INBOX")), (n, 0))
        s.logout(m)
        return s

    def test_every_change_is_made_with_exactly_one_group_engaged(self):
        s = self.run_move()
        changes = [e for e in s.rec.log if e[0] == "change"]
        self.assertGreater(len(changes), 10)
        for e in changes:
            self.assertEqual(len(e[2]), 1, e)
        self.assertEqual([e for e in s.rec.log if e[0] == "fsync"], [])

    def test_groups_chain_and_are_let_go(self):
        s = self.run_move()
        pg = s.pg
        created = [e[1] for e in s.rec.log if e[0] == "pg_create"]
        # The probe at start-up, then the chain.
        probe, chain = created[0], created[1:]
        self.assertNotIn(chain[0], pg.depends)
        for prev, g in zip(chain, chain[1:]):
            # Depends on the previous group before it is first engaged,
            # the previous one disengaged before that.
            depend = s.rec.log.index(("pg_depend", g, prev))
            engage = s.rec.log.index(("pg_engage", g))
            self.assertLess(depend, engage)
            self.assertLess(s.rec.log.index(("pg_disengage", prev)), depend)
            self.assertEqual(pg.depends[g], {prev})
        # Every group let go once a later one depends on it, the last when
        # the server stops.
        self.assertEqual(pg.open, {chain[-1]})
        s.store.dur.close()
        self.assertEqual(pg.open, set())
        self.assertNotIn(probe, pg.depends)

    def test_each_changing_command_has_a_group_of_its_own(self):
        s = self.run_move(n=3)
        log = s.rec.log
        # Per command (between the groups' engagements): the changes of one
        # group never span two COPYs, so a crash keeps a prefix of them.
        engaged_by_change = [next(iter(e[2])) for e in log if e[0] == "change"]
        copies = [e for e in log if e[0] == "change" and e[1] == "open"
                  and e[3].endswith("Moved") and not e[3].endswith(".rewrite")]
        groups = [next(iter(e[2])) for e in copies]
        # CREATE's group, then one per COPY.
        self.assertEqual(len(groups), 4)
        self.assertEqual(len(set(groups)), 4)
        self.assertEqual(sorted(groups), groups)
        self.assertEqual(engaged_by_change, sorted(engaged_by_change))

    def test_expunge_renames_after_the_new_file_and_check_syncs(self):
        s = self.run_move()
        log = s.rec.log
        rename = next(i for i, e in enumerate(log) if e[0] == "change" and e[1] == "replace")
        data = [e for e in log[:rename] if e[0] == "change" and str(e[3]).endswith(".rewrite")]
        rename_group = next(iter(log[rename][2]))
        data_group = next(iter(data[-1][2]))
        self.assertNotEqual(rename_group, data_group)
        self.assertEqual(s.pg.depends[rename_group], {data_group})
        # EXPUNGE syncs the rename's group (nothing engaged then); CHECK,
        # with nothing to write, syncs it again.
        syncs = [i for i, e in enumerate(log) if e[0] == "pg_sync"]
        self.assertEqual([log[i][1] for i in syncs], [rename_group, rename_group])
        self.assertLess(rename, syncs[0])
        self.assertEqual(s.pg.engaged, set())

    def test_a_server_without_patchgroups_refuses_to_start(self):
        saved = sys.modules.get("stitchfs")
        sys.modules["stitchfs"] = types.ModuleType("stitchfs")
        try:
            with tempfile.TemporaryDirectory() as d:
                with self.assertRaises(SystemExit) as e:
                    mboxd.durability("patchgroups", d)
            self.assertIn("has no pg_create", str(e.exception))
        finally:
            if saved is None:
                sys.modules.pop("stitchfs")
            else:
                sys.modules["stitchfs"] = saved


if __name__ == "__main__":
    unittest.main()
