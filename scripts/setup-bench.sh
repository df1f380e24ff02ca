#!/usr/bin/env bash
# Installs what `stitchfs bench` needs beyond scripts/setup.sh on a Debian
# machine (run as root, or with sudo available). Idempotent.
#
#   e2fsprogs  mkfs.ext4/mkfs.ext2 for the kernel's file systems, e2fsck
#   mount      losetup, mount, umount (ext4 on a loop device)
#   fuse3      fusermount3 (unmounting FUSE servers: stitchfs, bindfs)
#   fuse2fs    e2fsprogs' FUSE server, a baseline
#   bindfs     a FUSE passthrough, the baseline for FUSE's own overhead
#   matplotlib plots of the results
#   postmark   Debian's PostMark (bench seeds: Seltzer, Featherstitch, xsyncfs)
#   dovecot-imapd  the IMAP server of Featherstitch's IMAP test (bench seeds
#              starts its own instance on 127.0.0.1; the system's stays off)
#   sqlite3, git, tar, gcc, make   the tools bench seeds drives (ccfs's SQLite
#              and git tests, untar, the Andrew-style build)
#   GNU hello 2.10, the real C project of the Andrew-style build: Debian's
#              upstream tarball (configure included), fetched with
#              `apt-get source --download-only hello` through a private
#              deb-src list (the machine's apt sources are left alone), to
#              /var/cache/stitchfs-bench/hello.tar.gz
#
# The suites that mount (`bench mount`, `bench fsck`) also need root and
# /dev/fuse; a system whose tool is missing is skipped with a message
# naming the package.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
need_apt=()
have mkfs.ext4 || need_apt+=(e2fsprogs)
have losetup || need_apt+=(mount)
have fusermount3 || need_apt+=(fuse3)
have fuse2fs || need_apt+=(fuse2fs)
have bindfs || need_apt+=(bindfs)
have postmark || need_apt+=(postmark)
have sqlite3 || need_apt+=(sqlite3)
have git || need_apt+=(git)
have gcc || need_apt+=(gcc)
have make || need_apt+=(make)
have dovecot || need_apt+=(dovecot-imapd)
if ((${#need_apt[@]})); then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${need_apt[@]}"
fi

# The Andrew-style build's project.
project=/var/cache/stitchfs-bench/hello.tar.gz
if [ ! -s "$project" ]; then
  work=$(mktemp -d)
  mkdir -p "$work/lists/partial"
  . /etc/os-release
  echo "deb-src http://deb.debian.org/debian ${VERSION_CODENAME:-bookworm} main" >"$work/sources.list"
  apt_src=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
           -o "Dir::State::Lists=$work/lists")
  if apt-get "${apt_src[@]}" update -q >/dev/null 2>&1 &&
     (cd "$work" && apt-get "${apt_src[@]}" source --download-only -q hello >/dev/null 2>&1); then
    mkdir -p "$(dirname "$project")"
    cp "$work"/hello_*.orig.tar.gz "$project"
    echo "setup-bench: fetched $project"
  else
    echo "setup-bench: could not fetch Debian's hello source; bench seeds will skip andrew" >&2
  fi
  rm -rf "$work"
fi

if ! python3 -c 'import matplotlib' >/dev/null 2>&1; then
  python3 -m pip install -q matplotlib || echo "setup-bench: matplotlib not installed; benchmarks will skip plots" >&2
fi

[ -e /dev/fuse ] || echo "setup-bench: /dev/fuse is missing; FUSE systems will be skipped" >&2
[ "$(id -u)" = 0 ] || echo "setup-bench: not root; loop mounts and dropping caches need root" >&2
