"""Maildir delivery: write the message in tmp/, fsync it, rename it into
new/, fsync new/; then say "delivered N" (the SMTP reply that lets the
sender forget the message: a promise).

    maildir.py workload
    maildir.py check

A crash may leave a partial message in tmp/, never one in new/, and never
lose one already delivered.
"""
import os
import sys

from witness import fail, fsync_dir, numbers, promises

MESSAGES = 16


def content(i):
    body = f"Message {i}: " + "lorem ipsum dolor sit amet " * (150 + 40 * i)
    return f"From: a@example.org\nSubject: {i}\n\n{body}\n".encode()


def workload():
    for d in ("tmp", "new", "cur"):
        os.mkdir(d)
    fsync_dir(".")
    print("ready", flush=True)
    for i in range(1, MESSAGES + 1):
        name = f"{i}.host"
        with open(f"tmp/{name}", "wb") as f:
            f.write(content(i))
            f.flush()
            os.fsync(f.fileno())
        os.rename(f"tmp/{name}", f"new/{name}")
        fsync_dir("new")
        print(f"delivered {i}", flush=True)


def check():
    lines = promises()
    delivered = numbers("delivered")
    if not os.path.isdir("new"):
        if "ready" in lines:
            fail("durability", "new/ is gone after 'ready'")
        return
    present = set()
    for name in os.listdir("new"):
        i = int(name.split(".")[0])
        if open(f"new/{name}", "rb").read() != content(i):
            fail("atomicity", f"new/{name} is not the whole message")
        present.add(i)
    lost = sorted(set(delivered) - present)
    if lost:
        fail("durability", f"delivered messages missing from new/: {lost}")



if __name__ == "__main__":
    {"workload": workload, "check": check}[sys.argv[1]]()
