"""Git: change files, `git add`, `git commit`; "committed N HASH" once the
commit returns.

    git.py workload fsync|default
    git.py check fsync|default

With fsync the repository sets core.fsync=all: Git then fsyncs objects,
the index and the new reference file before a commit returns, but not the
directory after renaming that file into place, so a commit is durable
only once a later fsync carries the rename (stitchfs's sequential order:
any fsync makes every earlier change durable). The checker holds every
printed commit but the last to that. With Git's default settings it
promises nothing durable.
Either way a crash must leave a repository that `git fsck --strict`
accepts, whose HEAD is the reflog's last entry or the one before it (Git
appends to the reflog before renaming the reference), and on which
`git status` works.
"""
import os
import subprocess
import sys

from witness import fail, promises

COMMITS = 8


def git(*args, check=True):
    return subprocess.run(
        ["git", *args], capture_output=True, text=True, check=check
    )


def workload(variant):
    git("init", "-q", "repo")
    os.chdir("repo")
    git("config", "user.name", "crash test")
    git("config", "user.email", "crash@example.org")
    if variant == "fsync":
        git("config", "core.fsync", "all")
        git("config", "core.fsyncMethod", "fsync")
    for i in range(1, COMMITS + 1):
        with open("log.txt", "a") as f:
            f.write(f"line {i}\n" * 200)
        os.makedirs("src", exist_ok=True)
        with open(f"src/f{i}.c", "w") as f:
            f.write(f"int f{i}(void) {{ return {i}; }}\n" * (20 + i))
        git("add", "-A")
        git("commit", "-q", "-m", f"commit {i}")
        head = git("rev-parse", "HEAD").stdout.strip()
        print(f"committed {i} {head}", flush=True)


def check(variant):
    commits = [l.split()[2] for l in promises() if l.startswith("committed ")]
    if not os.path.isdir("repo/.git"):
        if len(commits) > 1 and variant == "fsync":
            fail("durability", "the repository is gone after a commit")
        return
    os.chdir("repo")
    # The last commit's reference rename waits for the next fsync.
    durable = commits[:-1]
    if git("rev-parse", "--verify", "-q", "HEAD", check=False).returncode != 0:
        if durable and variant == "fsync":
            fail("durability", "HEAD names no commit after a commit")
        return
    fsck = git("fsck", "--strict", "--no-dangling", check=False)
    if fsck.returncode != 0:
        fail("corruption", "git fsck: " + (fsck.stdout + fsck.stderr).strip()[:300])
    status = git("status", "--porcelain", check=False)
    if status.returncode != 0:
        fail("corruption", "git status: " + status.stderr.strip()[:300])
    # Git appends to the reflog before it renames the new reference into
    # place, so a crash between the two leaves the reflog one step ahead.
    head = git("rev-parse", "HEAD").stdout.strip()
    reflog = git("reflog", "-2", "--format=%H", check=False).stdout.split()
    if reflog and head not in reflog:
        fail("order", f"HEAD {head[:12]} is not among the reflog's last entries {reflog}")
    if variant == "fsync":
        for h in durable:
            known = git("merge-base", "--is-ancestor", h, "HEAD", check=False)
            if known.returncode != 0:
                fail("durability", f"acknowledged commit {h[:12]} is not in HEAD's history")


if __name__ == "__main__":
    {"workload": workload, "check": check}[sys.argv[1]](sys.argv[2])
