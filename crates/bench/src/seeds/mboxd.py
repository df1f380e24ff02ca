"""mboxd: a small IMAP4rev1 server over mbox files, for `stitchfs bench seeds`.

Featherstitch ("Generalized File System Dependencies", SOSP 2007, §6 and
§8.5) changed UW IMAP's mbox driver to order its writes with patchgroups
instead of fsync. This server is that experiment's server in miniature: one
connection at a time, on 127.0.0.1, the commands a mail move needs
(CAPABILITY, NOOP, LOGIN, LOGOUT, SELECT, CREATE, STATUS, APPEND, CHECK,
CLOSE, EXPUNGE, SEARCH ALL, FETCH, STORE, COPY, and UID COPY/STORE/FETCH/
SEARCH), any user and password accepted.

Storage, as UW IMAP's "unix" driver keeps it: a mailbox is one file in the
mail directory (INBOX is the file ``INBOX``), its messages one after another,
each opening with a ``From `` line and closed by a blank line; body lines
that begin ``From `` (after any ``>``) get one more ``>`` (mboxrd), so every
line beginning ``From `` opens a message. Line ends are LF on disk and CRLF
on the wire. The first message is UW's pseudo-message, which holds the
mailbox's UIDVALIDITY and the last UID given (``X-IMAP:``). A message's
flags are in its ``Status:`` (R: \\Seen; O: not \\Recent) and ``X-Status:``
(D: \\Deleted, F: \\Flagged, A: \\Answered, T: \\Draft) headers, its UID in
``X-UID:``. APPEND and COPY append messages without an ``X-UID:``; a reader
numbers them after the pseudo-message's last UID, in file order, the same
numbers each time until a rewrite writes them down. As UW does, STORE
changes flags in memory only; they reach the file when the mailbox is
rewritten (CHECK, EXPUNGE, CLOSE, selecting another, logging out).

A rewrite writes the whole mailbox to a new file (``.NAME.rewrite``; no
mailbox name begins with a dot) and renames it over the old one. UW rewrites
in place, which is cheaper when the change is near the end of a large
mailbox but leaves a half-written mailbox after a crash in the middle; a new
file and a rename leave the old mailbox or the new one, never a mix, as long
as the rename reaches the disk after the new file's data: the reason for the
fsync, or the second patchgroup, between them (below).

Durability (``--durability``), the two regimes of Featherstitch's Figure 11:

- ``fsync``: the unmodified server, which syncs what the protocol says is
  stored before it answers: the mailbox after each COPY into it and each
  APPEND, a rewritten mailbox before its rename and the directory after it
  (EXPUNGE, CHECK with flags changed), the mailbox at CHECK, a created
  mailbox and its directory.
- ``patchgroups``: each command's changes are made under a patchgroup of
  their own that depends on the previous command's, so they reach the disk
  in command order without waiting; CHECK and EXPUNGE pg_sync the newest
  group (everything before it comes along). A rewrite uses two groups in
  a row, the new file's then the rename's. A command that changes nothing
  (STORE, SELECT, STATUS...) makes no group: an empty group would order
  nothing. No fsync at all.
- ``none``: no fsync and no order (what filling a mailbox before a timed
  run needs, and the unsafe baseline).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import sys
import time
import traceback

SYSTEM_FLAGS = ("\\Answered", "\\Flagged", "\\Deleted", "\\Seen", "\\Draft")
# X-Status letters, as UW IMAP writes them.
X_STATUS = (("\\Deleted", "D"), ("\\Flagged", "F"), ("\\Answered", "A"), ("\\Draft", "T"))
NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")
FROM_LINE = re.compile(rb"(?m)^From ")
LITERAL = re.compile(rb"\{(\d+)\}$")
# Headers this server owns: read into the message's state, not its text.
OWN_HEADERS = (b"status", b"x-status", b"x-uid", b"x-keywords", b"x-imap", b"x-imapbase")
# The longest command line and literal this server accepts.
MAX_LINE = 64 * 1024
MAX_LITERAL = 64 * 1024 * 1024


class No(Exception):
    """The command failed (a tagged NO)."""


class Bad(Exception):
    """The command is malformed or not allowed now (a tagged BAD)."""


# --- durability regimes ---------------------------------------------------


class NoSync:
    """No fsync and no order."""

    fsyncs = False

    def begin(self):
        """A command starts."""

    def change(self):
        """The file system is about to be changed."""

    def after(self):
        """The command's later changes must reach the disk after its earlier."""

    def end(self):
        """The command is done."""

    def commit(self):
        """CHECK and EXPUNGE: everything so far, durable."""

    def close(self):
        """The server stops."""


class Fsync(NoSync):
    """The unmodified server: the store fsyncs where the protocol needs it."""

    fsyncs = True


class Patchgroups(NoSync):
    """Each command's changes in a group of their own, depending on the
    previous command's (Featherstitch §6, the IMAP server).

    Invariants: at most one group is engaged, and only while a command makes
    changes; ``last`` is the newest group, disengaged and still held, so the
    next group can depend on it and CHECK can sync it; every older group has
    been closed once a newer one depends on it (its dependencies stay).
    """

    def __init__(self, pg, target):
        self.pg = pg
        self.target = target
        self.engaged = None
        self.last = None

    def change(self):
        if self.engaged is None:
            self._next()

    def _next(self):
        g = self.pg.pg_create(target=self.target)
        if self.last is not None:
            # Sealing `last` (it is disengaged): the new group's changes
            # reach the disk only after every change of the groups before.
            self.pg.pg_depend(g, self.last, target=self.target)
            self.pg.pg_close(self.last, target=self.target)
            self.last = None
        self.pg.pg_engage(g, target=self.target)
        self.engaged = g

    def _disengage(self):
        if self.engaged is not None:
            self.pg.pg_disengage(self.engaged, target=self.target)
            self.last, self.engaged = self.engaged, None

    def after(self):
        # The next change opens a group that depends on this one.
        self._disengage()

    def end(self):
        self._disengage()

    def commit(self):
        self._disengage()
        if self.last is not None:
            # The newest group depends on all before it: one sync carries
            # every change the server has made.
            self.pg.pg_sync(self.last, target=self.target)

    def close(self):
        self._disengage()
        if self.last is not None:
            self.pg.pg_close(self.last, target=self.target)
            self.last = None


def durability(kind, maildir):
    """The regime `kind` for a store in `maildir`."""
    if kind == "none":
        return NoSync()
    if kind == "fsync":
        return Fsync()
    try:
        import stitchfs
    except ImportError as e:
        raise SystemExit(f"mboxd: patchgroups: the stitchfs Python package cannot be imported: {e}")
    missing = [n for n in ("pg_create", "pg_depend", "pg_engage", "pg_disengage", "pg_sync", "pg_close")
               if not hasattr(stitchfs, n)]
    if missing:
        raise SystemExit("mboxd: patchgroups: the stitchfs Python package has no "
                         + ", ".join(missing) + " (this build has no patchgroups)")
    # The calls go to the mount through a descriptor of the mail directory,
    # held for the server's life (one open, not one per call).
    target = os.open(maildir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        # Refused here rather than at the first command: ENOTTY off stitchfs.
        stitchfs.pg_close(stitchfs.pg_create(target=target), target=target)
    except OSError as e:
        raise SystemExit(f"mboxd: patchgroups refused on {maildir}: {e}")
    return Patchgroups(stitchfs, target)


# --- messages and mailboxes -------------------------------------------------


class Message:
    """One message: its ``From `` line, its text (LF line ends, without the
    server's own headers, unescaped), its flags and UID."""

    __slots__ = ("from_line", "text", "flags", "uid")

    def __init__(self, from_line, text, flags, uid=None):
        self.from_line = from_line
        self.text = text
        self.flags = set(flags)
        self.uid = uid

    def record(self, with_uid):
        """The message as the mbox holds it, with its closing blank line."""
        header, body = split_header(self.text)
        status = b"Status: " + (b"R" if "\\Seen" in self.flags else b"") + b"O\n"
        letters = "".join(c for f, c in X_STATUS if f in self.flags)
        status += b"X-Status: " + letters.encode() + b"\n"
        if with_uid:
            status += b"X-UID: %d\n" % self.uid
        return (self.from_line + b"\n" + escape(header) + status + b"\n" + escape(body) + b"\n")

    def wire(self):
        """The message as IMAP sends it (CRLF)."""
        return self.text.replace(b"\n", b"\r\n")


def split_header(text):
    """(header with its last line's end, body) of LF text."""
    if text.startswith(b"\n"):
        return b"", text[1:]
    i = text.find(b"\n\n")
    if i < 0:
        return text, b""
    return text[: i + 1], text[i + 2:]


def escape(text):
    return re.sub(rb"(?m)^(>*From )", rb">\1", text)


def unescape(text):
    return re.sub(rb"(?m)^>(>*From )", rb"\1", text)


def from_line():
    return b"From MAILER-DAEMON " + time.asctime(time.gmtime()).encode()


def pseudo_message(uidvalidity, uidlast):
    """UW IMAP's first message, holding the mailbox's own data."""
    now = time.gmtime()
    return (from_line() + b"\n"
            + b"Date: " + time.strftime("%a, %d %b %Y %H:%M:%S +0000", now).encode() + b"\n"
            + b"From: Mail System Internal Data <MAILER-DAEMON@localhost>\n"
            + b"Subject: DON'T DELETE THIS MESSAGE -- FOLDER INTERNAL DATA\n"
            + b"X-IMAP: %010d %010d\n" % (uidvalidity, uidlast)
            + b"Status: RO\n\n"
            + b"This text is part of the internal format of your mail folder, and is not\n"
            + b"a real message.  It is created automatically by the mail system software.\n"
            + b"If deleted, important folder data will be lost, and it will be re-created\n"
            + b"with the data reset to initial values.\n\n")


def parse_records(data):
    """Each message of mbox `data`: (Message, (uidvalidity, uidlast) if it
    is the pseudo-message)."""
    starts = [m.start() for m in FROM_LINE.finditer(data)]
    out = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(data)
        rec = data[start:end]
        if rec.endswith(b"\n\n"):
            rec = rec[:-1]
        line, _, text = rec.partition(b"\n")
        out.append(parse_message(line, text))
    return out


def parse_message(line, text):
    header, body = split_header(text)
    kept, flags, uid, imap = [], set(), None, None
    fields = re.split(rb"\n(?![ \t])", header.rstrip(b"\n")) if header else []
    for field in fields:
        name, _, value = field.partition(b":")
        key, value = name.strip().lower(), value.strip()
        if key not in OWN_HEADERS:
            kept.append(field + b"\n")
        elif key == b"status":
            flags |= {"\\Seen"} if b"R" in value else set()
        elif key == b"x-status":
            flags |= {f for f, c in X_STATUS if c.encode() in value}
        elif key == b"x-uid" and value.isdigit():
            uid = int(value)
        elif key == b"x-imap":
            parts = value.split()
            if len(parts) == 2 and all(p.isdigit() for p in parts):
                imap = (int(parts[0]), int(parts[1]))
    text = b"".join(kept) + b"\n" + unescape(body)
    return Message(line, text, flags, uid), imap


class Mailbox:
    """A selected mailbox: its messages in memory, and whether their flags
    differ from the file's."""

    def __init__(self, name, path, uidvalidity, uidlast):
        self.name = name
        self.path = path
        self.uidvalidity = uidvalidity
        self.uidlast = uidlast
        self.messages = []
        self.dirty = False

    @classmethod
    def read(cls, name, path):
        """The mailbox in file `path`, or None if there is none."""
        data = read_file(path)
        if data is None:
            return None
        box = cls(name, path, int(time.time()), 0)
        records = parse_records(data)
        if records and records[0][1] is not None:
            box.uidvalidity, box.uidlast = records[0][1]
            records = records[1:]
        elif records:
            # A foreign mbox: its numbers are written at the next rewrite.
            box.uidvalidity = int(os.stat(path).st_mtime)
            box.dirty = True
        box.absorb([m for m, _ in records])
        return box

    def absorb(self, messages):
        """`messages`, read from the end of the file, numbered after the
        last UID: a message keeps its X-UID only if it is above the UID of
        the message before it."""
        for m in messages:
            previous = self.messages[-1].uid if self.messages else 0
            if m.uid is None or m.uid <= previous:
                m.uid = self.uidlast + 1
            self.uidlast = max(self.uidlast, m.uid)
            self.messages.append(m)

    def contents(self):
        return pseudo_message(self.uidvalidity, self.uidlast) + b"".join(
            m.record(with_uid=True) for m in self.messages)

    def select(self, text, uid):
        """The (sequence number, message) pairs sequence set `text` names;
        by UID if `uid`."""
        if uid:
            largest = self.messages[-1].uid if self.messages else 0
            ranges = parse_set(text, largest)
            return [(i + 1, m) for i, m in enumerate(self.messages)
                    if any(lo <= m.uid <= hi for lo, hi in ranges)]
        ranges = parse_set(text, len(self.messages))
        if any(hi > len(self.messages) or lo < 1 for lo, hi in ranges):
            raise Bad(f"no message {text} in {len(self.messages)}")
        seen = set()
        for lo, hi in ranges:
            seen.update(range(lo, hi + 1))
        return [(n, self.messages[n - 1]) for n in sorted(seen)]


def parse_set(text, largest):
    """Sequence set `text` as (low, high) ranges; `*` is `largest`."""
    def number(s):
        if s == "*":
            return largest
        if not s.isdigit() or int(s) == 0:
            raise Bad(f"bad sequence set {text}")
        return int(s)
    out = []
    for part in text.split(","):
        a, colon, b = part.partition(":")
        lo = number(a)
        hi = number(b) if colon else lo
        out.append((min(lo, hi), max(lo, hi)))
    return out


def read_file(path):
    """The file's bytes, or None if it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# --- the store: every change to the file system ----------------------------


class Store:
    """The mail directory. Every change this server makes to the file system
    is made here, after `dur.change()`; where the regime fsyncs, it fsyncs."""

    def __init__(self, root, dur):
        self.root = root
        self.dur = dur

    def path(self, name):
        return os.path.join(self.root, name)

    def exists(self, name):
        return os.path.exists(self.path(name))

    def create(self, name):
        """A new mailbox, holding only the pseudo-message."""
        path = self.path(name)
        if os.path.exists(path):
            raise No(f"[ALREADYEXISTS] {name} exists")
        self.dur.change()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            write_all(fd, pseudo_message(int(time.time()), 0))
            if self.dur.fsyncs:
                os.fsync(fd)
        finally:
            os.close(fd)
        if self.dur.fsyncs:
            # Its name too, before COPY counts on it.
            self.fsync_dir()

    def append(self, name, data):
        """Messages `data` (records) added at the end of mailbox `name`
        (INBOX made if missing), in one write."""
        if not self.exists(name):
            if name != "INBOX":
                raise No(f"[TRYCREATE] no mailbox {name}")
            self.create(name)
        self.dur.change()
        fd = os.open(self.path(name), os.O_WRONLY | os.O_APPEND)
        try:
            write_all(fd, data)
            if self.dur.fsyncs:
                # The unmodified server: stored means on the disk.
                os.fsync(fd)
        finally:
            os.close(fd)

    def rewrite(self, box):
        """`box` as it is in memory replaces its file: a new file, then a
        rename over the old one, after it (never a half-written mailbox)."""
        tmp = os.path.join(self.root, "." + box.name + ".rewrite")
        self.dur.change()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            write_all(fd, box.contents())
            if self.dur.fsyncs:
                os.fsync(fd)
        finally:
            os.close(fd)
        # The rename must not reach the disk before the data it names.
        self.dur.after()
        self.dur.change()
        os.replace(tmp, box.path)
        if self.dur.fsyncs:
            self.fsync_dir()
        box.dirty = False

    def checkpoint(self, box):
        """CHECK: the mailbox's state on the disk."""
        if box.dirty:
            self.rewrite(box)
        elif self.dur.fsyncs and os.path.exists(box.path):
            fd = os.open(box.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def fsync_dir(self):
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# --- the protocol ----------------------------------------------------------


def tokenize(lines, literals):
    """A command's tokens: `lines[i]` is followed by `literals[i]` (its
    ``{n}`` marker already removed). Atoms and quoted strings come as str,
    literals as bytes, parenthesized lists as lists."""
    stack = [[]]
    for i, line in enumerate(lines):
        text = line.decode("utf-8", "surrogateescape")
        pos = 0
        while pos < len(text):
            c = text[pos]
            if c == " ":
                pos += 1
            elif c == "(":
                stack.append([])
                pos += 1
            elif c == ")":
                if len(stack) == 1:
                    raise Bad("unbalanced parenthesis")
                done = stack.pop()
                stack[-1].append(done)
                pos += 1
            elif c == '"':
                pos += 1
                s = []
                while pos < len(text) and text[pos] != '"':
                    if text[pos] == "\\" and pos + 1 < len(text):
                        pos += 1
                    s.append(text[pos])
                    pos += 1
                if pos >= len(text):
                    raise Bad("unterminated string")
                stack[-1].append("".join(s))
                pos += 1
            else:
                end = pos
                while end < len(text) and text[end] not in ' ()"':
                    end += 1
                stack[-1].append(text[pos:end])
                pos = end
        if i < len(literals):
            stack[-1].append(literals[i])
    if len(stack) != 1:
        raise Bad("unbalanced parenthesis")
    return stack[0]


def astring(tok):
    if isinstance(tok, bytes):
        return tok.decode("utf-8", "surrogateescape")
    if isinstance(tok, str):
        return tok
    raise Bad("a string was expected")


def mailbox_name(tok):
    name = astring(tok)
    if name.upper() == "INBOX":
        return "INBOX"
    if not NAME.fullmatch(name):
        raise No(f"mailbox name {name!r} not allowed here (letters, digits, . _ -)")
    return name


def flag_list(tok):
    items = tok if isinstance(tok, list) else [tok]
    flags = set()
    for f in items:
        f = astring(f)
        known = [s for s in SYSTEM_FLAGS if s.lower() == f.lower()]
        if known:
            flags.add(known[0])
        elif f.lower() != "\\recent":
            raise No(f"flag {f} cannot be stored (system flags only)")
    return flags


def flags_text(flags):
    return "(" + " ".join(f for f in SYSTEM_FLAGS if f in flags) + ")"


class Session:
    """One client connection."""

    def __init__(self, conn, store):
        self.conn = conn
        self.rfile = conn.makefile("rb")
        self.store = store
        self.user = None
        self.box = None
        self.out = []
        self.done = False

    def send(self, line):
        self.out.append(line.encode("utf-8", "surrogateescape") if isinstance(line, str) else line)
        if not line.endswith(b"\r\n" if isinstance(line, bytes) else "\r\n"):
            self.out.append(b"\r\n")

    def flush(self):
        if self.out:
            self.conn.sendall(b"".join(self.out))
            self.out = []

    def readline(self):
        line = self.rfile.readline(MAX_LINE + 2)
        if not line:
            raise EOFError
        if not line.endswith(b"\n"):
            raise Bad("line too long")
        return line.rstrip(b"\r\n")

    def read_command(self):
        """(tag, lines, literals) of the next command, its literals read."""
        lines, literals = [], []
        line = self.readline()
        while True:
            m = LITERAL.search(line)
            if not m:
                lines.append(line)
                break
            n = int(m.group(1))
            if n > MAX_LITERAL:
                raise Bad("literal too large")
            lines.append(line[: m.start()])
            self.send("+ Ready for literal data")
            self.flush()
            data = self.rfile.read(n)
            if len(data) != n:
                raise EOFError
            literals.append(data)
            line = self.readline()
        return lines, literals

    def run(self):
        self.send("* OK [CAPABILITY IMAP4rev1] mboxd ready")
        self.flush()
        try:
            while not self.done:
                try:
                    lines, literals = self.read_command()
                except Bad as e:
                    self.send(f"* BYE {e}")
                    self.flush()
                    break
                self.command(lines, literals)
                self.flush()
        except (ConnectionError, EOFError):
            pass
        if self.box is not None:
            # A client gone without LOGOUT: its flags are kept all the same.
            self.in_command(self.deselect)

    def in_command(self, f, *args):
        """`f(*args)` as one command of the regime."""
        self.store.dur.begin()
        try:
            return f(*args)
        finally:
            self.store.dur.end()

    def command(self, lines, literals):
        tag = "*"
        try:
            words = tokenize(lines, literals)
            if len(words) < 2 or not isinstance(words[0], str) or not isinstance(words[1], str):
                raise Bad("tag and command expected")
            tag, name, args = words[0], words[1].upper(), words[2:]
            uid = name == "UID"
            if uid:
                if not args or not isinstance(args[0], str):
                    raise Bad("UID what?")
                name, args = args[0].upper(), args[1:]
                if name not in ("COPY", "STORE", "FETCH", "SEARCH"):
                    raise Bad(f"UID {name} not supported")
            handler = getattr(self, "cmd_" + name.lower(), None)
            if handler is None:
                raise Bad(f"{name} not supported")
            if name not in ("CAPABILITY", "NOOP", "LOGOUT", "LOGIN") and self.user is None:
                raise Bad("log in first")
            if name in SELECTED_ONLY and self.box is None:
                raise Bad("select a mailbox first")
            text = self.in_command(handler, args, uid) if name in SELECTED_ONLY else \
                self.in_command(handler, args)
            self.send(f"{tag} OK {text or name + ' completed'}")
        except No as e:
            self.send(f"{tag} NO {e}")
        except Bad as e:
            self.send(f"{tag} BAD {e}")
        except (IndexError, ValueError, TypeError) as e:
            self.send(f"{tag} BAD malformed arguments ({e})")

    # Any state.

    def cmd_capability(self, args):
        self.send("* CAPABILITY IMAP4rev1")

    def cmd_noop(self, args):
        pass

    def cmd_logout(self, args):
        if self.box is not None:
            self.deselect()
        self.send("* BYE mboxd logging out")
        self.done = True

    def cmd_login(self, args):
        if self.user is not None:
            raise Bad("already logged in")
        self.user = astring(args[0])
        astring(args[1])
        return "LOGIN completed"

    # Authenticated.

    def deselect(self):
        """The selected mailbox's flags written down, and let go of."""
        box, self.box = self.box, None
        if box.dirty:
            self.store.rewrite(box)

    def cmd_select(self, args):
        name = mailbox_name(args[0])
        if self.box is not None:
            self.deselect()
        box = Mailbox.read(name, self.store.path(name))
        if box is None:
            if name != "INBOX":
                raise No(f"no mailbox {name}")
            box = Mailbox(name, self.store.path(name), int(time.time()), 0)
        self.box = box
        flags = flags_text(SYSTEM_FLAGS)
        self.send(f"* FLAGS {flags}")
        self.send(f"* OK [PERMANENTFLAGS {flags}] system flags only")
        self.send(f"* {len(box.messages)} EXISTS")
        self.send("* 0 RECENT")
        self.send(f"* OK [UIDVALIDITY {box.uidvalidity}] UIDs valid")
        self.send(f"* OK [UIDNEXT {box.uidlast + 1}] next UID")
        return "[READ-WRITE] SELECT completed"

    def cmd_create(self, args):
        name = mailbox_name(args[0])
        if name == "INBOX":
            raise No("[ALREADYEXISTS] INBOX exists")
        self.store.create(name)

    def cmd_status(self, args):
        name = mailbox_name(args[0])
        items = args[1] if isinstance(args[1], list) else [args[1]]
        box = self.box if self.box is not None and self.box.name == name else \
            Mailbox.read(name, self.store.path(name))
        if box is None:
            if name != "INBOX":
                raise No(f"no mailbox {name}")
            box = Mailbox(name, self.store.path(name), int(time.time()), 0)
        values = {
            "MESSAGES": len(box.messages),
            "RECENT": 0,
            "UIDNEXT": box.uidlast + 1,
            "UIDVALIDITY": box.uidvalidity,
            "UNSEEN": sum(1 for m in box.messages if "\\Seen" not in m.flags),
        }
        out = []
        for item in items:
            item = astring(item).upper()
            if item not in values:
                raise Bad(f"STATUS {item} not supported")
            out.append(f"{item} {values[item]}")
        self.send(f"* STATUS {name} ({' '.join(out)})")

    def cmd_append(self, args):
        name = mailbox_name(args[0])
        rest = args[1:]
        flags = flag_list(rest.pop(0)) if rest and isinstance(rest[0], list) else set()
        if len(rest) == 2 and isinstance(rest[0], str):
            rest.pop(0)  # the internal date: the time of the append is kept
        if len(rest) != 1 or not isinstance(rest[0], bytes):
            raise Bad("APPEND: the message must be a literal")
        text = rest[0].replace(b"\r\n", b"\n")
        if not text.endswith(b"\n"):
            text += b"\n"
        if b"\n\n" not in text:
            # A header alone: the blank line the file will give it anyway.
            text += b"\n"
        msg = Message(from_line(), text, flags)
        self.store.append(name, msg.record(with_uid=False))
        self.grew(name, [msg])

    def grew(self, name, messages):
        """Messages appended to mailbox `name`: if it is the selected one,
        it holds them too, numbered as a reader of the file would."""
        if self.box is not None and self.box.name == name:
            self.box.absorb(messages)
            self.send(f"* {len(self.box.messages)} EXISTS")

    # Selected.

    def cmd_check(self, args, uid):
        self.store.checkpoint(self.box)
        self.store.dur.commit()

    def cmd_close(self, args, uid):
        self.expunge(report=False)
        self.store.dur.commit()
        self.box = None

    def cmd_expunge(self, args, uid):
        self.expunge(report=True)
        self.store.dur.commit()

    def expunge(self, report):
        box = self.box
        kept, removed = [], 0
        for i, m in enumerate(box.messages):
            if "\\Deleted" in m.flags:
                if report:
                    self.send(f"* {i + 1 - removed} EXPUNGE")
                removed += 1
            else:
                kept.append(m)
        box.messages = kept
        if removed or box.dirty:
            self.store.rewrite(box)

    def cmd_search(self, args, uid):
        if [astring(a).upper() for a in args] != ["ALL"]:
            raise Bad("SEARCH: only ALL")
        found = (m.uid if uid else i + 1 for i, m in enumerate(self.box.messages))
        self.send("* SEARCH" + "".join(f" {n}" for n in found))

    def cmd_fetch(self, args, uid):
        pairs = self.box.select(astring(args[0]), uid)
        items = args[1] if isinstance(args[1], list) else [args[1]]
        items = [astring(i).upper() for i in items]
        if uid and "UID" not in items:
            items.insert(0, "UID")
        for n, m in pairs:
            parts = []
            for item in items:
                if item == "UID":
                    parts.append(f"UID {m.uid}".encode())
                elif item == "FLAGS":
                    parts.append(f"FLAGS {flags_text(m.flags)}".encode())
                elif item == "RFC822.SIZE":
                    parts.append(f"RFC822.SIZE {len(m.wire())}".encode())
                elif item in ("RFC822", "BODY[]", "BODY.PEEK[]"):
                    if item != "BODY.PEEK[]" and "\\Seen" not in m.flags:
                        m.flags.add("\\Seen")
                        self.box.dirty = True
                    data = m.wire()
                    label = "BODY[]" if item.startswith("BODY") else item
                    parts.append(f"{label} {{{len(data)}}}\r\n".encode() + data)
                else:
                    raise Bad(f"FETCH {item} not supported")
            self.send(f"* {n} FETCH (".encode() + b" ".join(parts) + b")")

    def cmd_store(self, args, uid):
        pairs = self.box.select(astring(args[0]), uid)
        op = astring(args[1]).upper()
        silent = op.endswith(".SILENT")
        op = op.removesuffix(".SILENT")
        if op not in ("FLAGS", "+FLAGS", "-FLAGS"):
            raise Bad(f"STORE {op} not supported")
        flags = flag_list(args[2] if len(args) == 3 else args[2:])
        for n, m in pairs:
            if op == "FLAGS":
                new = flags
            elif op == "+FLAGS":
                new = m.flags | flags
            else:
                new = m.flags - flags
            if new != m.flags:
                # In memory, as UW keeps them: written at the next rewrite.
                m.flags = set(new)
                self.box.dirty = True
            if not silent:
                shown = f"UID {m.uid} " if uid else ""
                self.send(f"* {n} FETCH ({shown}FLAGS {flags_text(m.flags)})")

    def cmd_copy(self, args, uid):
        pairs = self.box.select(astring(args[0]), uid)
        name = mailbox_name(args[1])
        if not pairs:
            return
        copies = [Message(m.from_line, m.text, m.flags) for _, m in pairs]
        self.store.append(name, b"".join(c.record(with_uid=False) for c in copies))
        self.grew(name, copies)


SELECTED_ONLY = ("CHECK", "CLOSE", "EXPUNGE", "SEARCH", "FETCH", "STORE", "COPY")


def serve(listener, store):
    """Serves connections one at a time, for ever."""
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            Session(conn, store).run()


def main(argv=None):
    ap = argparse.ArgumentParser(description="A small IMAP4rev1 server over mbox files.")
    ap.add_argument("--durability", choices=("fsync", "patchgroups", "none"), required=True)
    ap.add_argument("--port", type=int, default=0, help="on 127.0.0.1 (0: any free port)")
    ap.add_argument("--port-file", help="where to write the port once listening")
    ap.add_argument("maildir")
    args = ap.parse_args(argv)
    store = Store(args.maildir, durability(args.durability, args.maildir))
    listener = socket.create_server(("127.0.0.1", args.port))
    port = listener.getsockname()[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        os.replace(tmp, args.port_file)
    print(f"mboxd: {args.durability}, {args.maildir}, on 127.0.0.1:{port}", flush=True)
    # SIGTERM ends the server through its `finally`: the last group let go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        serve(listener, store)
    except Exception:
        # Memory may no longer match the disk: stop rather than go on.
        traceback.print_exc()
        return 1
    finally:
        store.dur.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
