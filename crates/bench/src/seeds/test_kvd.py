"""Tests of kvd, the key-value server of `bench seeds` kv.

Run: python3 crates/bench/src/seeds/test_kvd.py (the crate's tests run it).

The protocol tests serve in a thread of this process and talk to the server
over a socket; the durability test records the server's file system calls
and answers in one log, through a stand-in for its `os` module; the stop
tests run the server as a program, as the benchmark does.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvd  # noqa: E402


class Client:
    """One connection, speaking kvd's protocol."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.file = self.sock.makefile("rb")

    def send(self, data):
        self.sock.sendall(data)

    def line(self):
        return self.file.readline().rstrip(b"\n")

    def ask(self, request):
        self.send(request + b"\n")
        return self.line()

    def put(self, key, value):
        self.send(b"PUT %s %d\n" % (key, len(value)) + value)
        return self.line()

    def get(self, key):
        head = self.ask(b"GET " + key)
        if not head.startswith(b"VALUE "):
            return head
        return self.file.read(int(head.split()[1]))

    def close(self):
        self.file.close()
        self.sock.close()


class Served(unittest.TestCase):
    """A server over a fresh directory, in a thread."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "data")
        self.store = kvd.Store(self.dir)
        self.server = kvd.Server(("127.0.0.1", 0), self.store)
        self.thread = threading.Thread(target=self.server.serve_forever)
        self.thread.start()
        self.port = self.server.server_address[1]

    def tearDown(self):
        self.server.shutdown()
        self.thread.join()
        self.server.hang_up()
        self.server.server_close()
        self.store.close()
        self.tmp.cleanup()

    def client(self):
        c = Client(self.port)
        self.addCleanup(c.close)
        return c


class Protocol(Served):
    def test_put_get_count(self):
        c = self.client()
        self.assertEqual(c.ask(b"PING"), b"PONG")
        self.assertEqual(c.ask(b"COUNT"), b"COUNT 0")
        # Any bytes, line ends included.
        value = bytes(range(256)) + b"\n\nPUT x 1\n"
        self.assertEqual(c.put(b"k-1", value), b"OK")
        self.assertEqual(c.put(b"k.2", b""), b"OK")
        self.assertEqual(c.get(b"k-1"), value)
        self.assertEqual(c.get(b"k.2"), b"")
        self.assertEqual(c.get(b"nothing"), b"NOTFOUND")
        self.assertEqual(c.ask(b"COUNT"), b"COUNT 2")
        # An overwrite keeps one key, with the new value.
        self.assertEqual(c.put(b"k-1", b"new"), b"OK")
        self.assertEqual(c.get(b"k-1"), b"new")
        self.assertEqual(c.ask(b"COUNT"), b"COUNT 2")
        self.assertEqual(sorted(os.listdir(self.dir)), ["k-1", "k.2"])
        with open(os.path.join(self.dir, "k-1"), "rb") as f:
            self.assertEqual(f.read(), b"new")
        self.assertEqual(c.ask(b"QUIT"), b"BYE")
        self.assertEqual(c.file.read(), b"")

    def test_refusals_leave_the_connection_usable(self):
        c = self.client()
        for key in [b".hidden", b"a/b", b"x" * 201]:
            self.assertEqual(c.put(key, b"v"), b"ERR bad key", key)
        self.assertEqual(c.ask(b"GET ../etc"), b"ERR bad key")
        self.assertEqual(c.ask(b"FLY"), b"ERR unknown request")
        self.assertEqual(c.ask(b""), b"ERR unknown request")
        self.assertEqual(c.ask(b"COUNT 1"), b"ERR unknown request")
        self.assertEqual(c.ask(b"COUNT"), b"COUNT 0")
        self.assertEqual(os.listdir(self.dir), [])

    def test_a_put_without_a_length_closes_the_connection(self):
        c = self.client()
        self.assertEqual(c.ask(b"PUT k"), b"ERR usage: PUT KEY LENGTH")
        self.assertEqual(c.file.read(), b"")
        c = self.client()
        self.assertEqual(c.ask(b"PUT k %d" % (kvd.MAX_VALUE + 1)), b"ERR value too long")
        self.assertEqual(c.file.read(), b"")

    def test_clients_at_once(self):
        def work(i):
            c = Client(self.port)
            for j in range(20):
                assert c.put(b"c%d-%d" % (i, j), b"v" * (i + j)) == b"OK"
            c.close()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(self.client().ask(b"COUNT"), b"COUNT 160")
        with open(os.path.join(self.dir, "c7-19"), "rb") as f:
            self.assertEqual(f.read(), b"v" * 26)


class RecordingOs(types.ModuleType):
    """`os`, with the calls that change or sync files written to `log`."""

    def __init__(self, log):
        super().__init__("os")
        self._log = log

    def __getattr__(self, name):
        real = getattr(os, name)
        if name not in ("open", "write", "fsync", "rename", "close"):
            return real

        def call(*args):
            out = real(*args)
            shown = [a if isinstance(a, (int, str)) else "data" for a in args[:2]]
            if name == "open":
                shown = [os.path.basename(args[0]), out]
            elif name == "rename":
                shown = [os.path.basename(a) for a in args]
            self._log.append((name, *shown))
            return out

        return call


class Durability(Served):
    def setUp(self):
        self.log = []
        self.real_os = kvd.os
        kvd.os = RecordingOs(self.log)
        self.real_answer = kvd.Handler.answer

        def answer(handler, data, end=b"\n"):
            self.log.append(("answer", data))
            self.real_answer(handler, data, end)

        kvd.Handler.answer = answer
        super().setUp()
        # The store's own opening of its directory is not a PUT's.
        del self.log[:]

    def tearDown(self):
        super().tearDown()
        kvd.os = self.real_os
        kvd.Handler.answer = self.real_answer

    def test_a_put_is_durable_before_it_is_answered(self):
        dir_fd = self.store.dir_fd
        c = self.client()
        self.assertEqual(c.put(b"key", b"value"), b"OK")
        opened = [e for e in self.log if e[0] == "open"]
        self.assertEqual(len(opened), 1, self.log)
        tmp, fd = opened[0][1], opened[0][2]
        self.assertTrue(tmp.startswith(".key."), tmp)
        self.assertEqual(
            self.log,
            [
                ("open", tmp, fd),
                ("write", fd, "data"),
                ("fsync", fd),
                ("close", fd),
                ("rename", tmp, "key"),
                ("fsync", dir_fd),
                ("answer", b"OK"),
            ],
        )
        # A refused PUT touches nothing.
        del self.log[:]
        self.assertEqual(c.put(b".x", b"v"), b"ERR bad key")
        self.assertEqual(self.log, [("answer", b"ERR bad key")])


class Program(unittest.TestCase):
    """The server as the benchmark runs it: a process, stopped by a request
    or by SIGTERM."""

    def start(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        port_file = os.path.join(tmp.name, "port")
        proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "kvd.py"), "--port", "0", "--port-file",
             port_file, os.path.join(tmp.name, "data")],
            stderr=subprocess.PIPE,
        )
        self.addCleanup(proc.stderr.close)
        self.addCleanup(proc.kill)
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file):
            self.assertIsNone(proc.poll(), "kvd exited before listening")
            self.assertLess(time.monotonic(), deadline, "kvd did not listen")
            time.sleep(0.02)
        with open(port_file) as f:
            return proc, int(f.read())

    def test_shutdown_stops_it_with_a_connection_left_open(self):
        proc, port = self.start()
        idle = Client(port)
        self.addCleanup(idle.close)
        self.assertEqual(idle.ask(b"PING"), b"PONG")
        c = Client(port)
        self.addCleanup(c.close)
        self.assertEqual(c.put(b"k", b"v"), b"OK")
        self.assertEqual(c.ask(b"SHUTDOWN"), b"BYE")
        self.assertEqual(proc.wait(timeout=30), 0)
        self.assertIn(b"kvd: stopped", proc.stderr.read())

    def test_sigterm_stops_it(self):
        proc, port = self.start()
        c = Client(port)
        self.addCleanup(c.close)
        self.assertEqual(c.ask(b"PING"), b"PONG")
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(timeout=30), 0)


if __name__ == "__main__":
    unittest.main()
