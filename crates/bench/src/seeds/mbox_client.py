"""The IMAP client of `bench seeds` imap-mbox and imap-pg (Python's imaplib).

    fill PORT N BYTES   N messages of about BYTES appended to INBOX
    move PORT N         Featherstitch's §8.5 move: select INBOX, create
                        Moved, then for each message COPY it to Moved and
                        STORE +FLAGS (\\Deleted) on it, EXPUNGE, CHECK;
                        STATUS must then find N messages in Moved and none
                        in INBOX; LOGOUT.

Any answer but OK stops it with the server's words.
"""

import imaplib
import socket
import sys


def ok(answer, what):
    typ, data = answer
    if typ != "OK":
        sys.exit(f"{what}: {typ} {data}")
    return data


def messages(m, mailbox):
    data = ok(m.status(mailbox, "(MESSAGES)"), f"STATUS {mailbox}")
    return int(data[0].split()[-1].rstrip(b")"))


def fill(m, n, size):
    for i in range(n):
        head = f"From: bench@localhost\r\nTo: bench@localhost\r\nSubject: message {i}\r\n\r\n"
        line = "x" * 62 + "\r\n"
        body = line * (size // len(line)) + "x" * (size % len(line))
        ok(m.append("INBOX", None, None, (head + body).encode()), f"APPEND {i}")
    got = messages(m, "INBOX")
    if got != n:
        sys.exit(f"INBOX holds {got} messages after the fill, not {n}")


def move(m, n):
    data = ok(m.select("INBOX"), "SELECT INBOX")
    if int(data[0]) != n:
        sys.exit(f"INBOX holds {int(data[0])} messages, not {n}")
    ok(m.create("Moved"), "CREATE Moved")
    for i in range(1, n + 1):
        ok(m.copy(str(i), "Moved"), f"COPY {i}")
        ok(m.store(str(i), "+FLAGS", "(\\Deleted)"), f"STORE {i}")
    ok(m.expunge(), "EXPUNGE")
    ok(m.check(), "CHECK")
    moved, left = messages(m, "Moved"), messages(m, "INBOX")
    if (moved, left) != (n, 0):
        sys.exit(f"after the move Moved holds {moved} messages (not {n}), INBOX {left} (not 0)")


def main():
    mode, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    m = imaplib.IMAP4("127.0.0.1", port)
    # imaplib sends a literal and its closing CRLF in two writes: without
    # this the second waits on the server's delayed ACK (40 ms an APPEND).
    m.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ok(m.login("bench", "bench"), "LOGIN")
    if mode == "fill":
        fill(m, n, int(sys.argv[4]))
    elif mode == "move":
        move(m, n)
    else:
        sys.exit(f"no mode {mode}")
    typ, _ = m.logout()
    if typ != "BYE":
        sys.exit(f"LOGOUT: {typ}")


if __name__ == "__main__":
    main()
