"""kvd: a small key-value server over files, for `stitchfs bench seeds` kv.

xsyncfs ("Rethink the Sync", OSDI 2006) measured servers that make each
request durable before they answer it. This is such a server in miniature:
it listens on 127.0.0.1, serves each connection in a thread of its own, and
keeps each key as one file in its data directory. A PUT is answered only
once the value is durable: it is written to a temporary file (a name that
begins with a dot, which no key does), the file is fsynced, renamed over
the key's file, and the directory is fsynced. A crash leaves the key's old
value or its new one, never a mix, and no PUT that was answered is lost.

The protocol, one request at a time on a connection, each answered before
the next is read; lines end with LF:

    PUT KEY LENGTH LF, then LENGTH bytes   -> OK
    GET KEY                                -> VALUE LENGTH LF and the bytes,
                                              or NOTFOUND
    COUNT                                  -> COUNT N (the keys stored)
    PING                                   -> PONG
    QUIT                                   -> BYE, and the connection closes
    SHUTDOWN                               -> BYE, and the server stops: it
                                              reads no more, answers what
                                              it has read, then exits 0

Anything else is answered ``ERR`` and a reason, and the connection stays
usable, but for a PUT whose value cannot be read (the connection closes).
A key is 1 to 200 of ``A-Za-z0-9_.-``, not beginning with a dot; a value
at most 16 MiB. SIGTERM stops the server as SHUTDOWN does.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import socketserver
import sys
import threading

KEY = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")
MAX_LINE = 1024
MAX_VALUE = 16 * 1024 * 1024


class Store:
    """The keys, one file each in `root`."""

    def __init__(self, root):
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        self.counter = 0
        self.lock = threading.Lock()

    def put(self, key, value):
        with self.lock:
            self.counter += 1
            n = self.counter
        tmp = os.path.join(self.root, f".{key}.{n}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(value)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, os.path.join(self.root, key))
        os.fsync(self.dir_fd)

    def get(self, key):
        try:
            with open(os.path.join(self.root, key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def count(self):
        return sum(1 for name in os.listdir(self.root) if not name.startswith("."))

    def close(self):
        os.close(self.dir_fd)


class Handler(socketserver.StreamRequestHandler):
    def setup(self):
        super().setup()
        with self.server.lock:
            self.server.conns.add(self.connection)

    def finish(self):
        with self.server.lock:
            self.server.conns.discard(self.connection)
        super().finish()

    def handle(self):
        store = self.server.store
        while True:
            line = self.rfile.readline(MAX_LINE + 1)
            if not line:
                return
            if len(line) > MAX_LINE or not line.endswith(b"\n"):
                self.answer(b"ERR line too long")
                return
            words = line.decode("ascii", "replace").split()
            cmd = words[0].upper() if words else ""
            if cmd == "PUT":
                if len(words) != 3 or not words[2].isdigit():
                    # The value's length is unknown: the stream is lost.
                    self.answer(b"ERR usage: PUT KEY LENGTH")
                    return
                length = int(words[2])
                if length > MAX_VALUE:
                    self.answer(b"ERR value too long")
                    return
                value = self.rfile.read(length)
                if len(value) != length:
                    return
                if not KEY.fullmatch(words[1]):
                    self.answer(b"ERR bad key")
                    continue
                try:
                    store.put(words[1], value)
                except OSError as e:
                    self.answer(f"ERR {e}".encode())
                    continue
                self.answer(b"OK")
            elif cmd == "GET" and len(words) == 2:
                if not KEY.fullmatch(words[1]):
                    self.answer(b"ERR bad key")
                    continue
                value = store.get(words[1])
                if value is None:
                    self.answer(b"NOTFOUND")
                else:
                    self.answer(b"VALUE %d\n" % len(value) + value, end=b"")
            elif cmd == "COUNT" and len(words) == 1:
                self.answer(b"COUNT %d" % store.count())
            elif cmd == "PING" and len(words) == 1:
                self.answer(b"PONG")
            elif cmd == "QUIT" and len(words) == 1:
                self.answer(b"BYE")
                return
            elif cmd == "SHUTDOWN" and len(words) == 1:
                self.answer(b"BYE")
                self.server.stop()
                return
            else:
                self.answer(b"ERR unknown request")

    def answer(self, data, end=b"\n"):
        self.wfile.write(data + end)
        self.wfile.flush()


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops some of 16 clients that
    # connect at once, which then wait a second to try again.
    request_queue_size = 128
    # Wait for the connections' threads at server_close, so that every
    # request under way is answered before the server exits.
    daemon_threads = False
    block_on_close = True

    def __init__(self, address, store):
        super().__init__(address, Handler)
        self.store = store
        self.lock = threading.Lock()
        self.conns = set()

    def stop(self):
        # shutdown() waits for serve_forever, which runs in another thread.
        threading.Thread(target=self.shutdown, daemon=True).start()

    def hang_up(self):
        """Ends the reading side of every connection still open, so that
        each thread ends once it has answered what it has read."""
        with self.lock:
            for conn in self.conns:
                try:
                    conn.shutdown(socket.SHUT_RD)
                except OSError:
                    pass


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True, help="port on 127.0.0.1 (0: any)")
    ap.add_argument("--port-file", help="write the port here once listening")
    ap.add_argument("dir", help="the data directory (made if missing)")
    args = ap.parse_args(argv)
    store = Store(args.dir)
    server = Server(("127.0.0.1", args.port), store)
    signal.signal(signal.SIGTERM, lambda *_: server.stop())
    port = server.server_address[1]
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(f"{port}\n")
        os.rename(args.port_file + ".tmp", args.port_file)
    print(f"kvd: listening on 127.0.0.1:{port}, data in {args.dir}", file=sys.stderr)
    try:
        server.serve_forever()
    finally:
        server.hang_up()
        server.server_close()
        store.close()
    print("kvd: stopped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
