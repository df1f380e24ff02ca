#!/usr/bin/env bash
# Installs what stitchfs needs to build, test and benchmark on a fresh
# Debian machine (run as root, or with sudo available). Idempotent.
set -euo pipefail

need_apt=()
have() { command -v "$1" >/dev/null 2>&1; }
have e2fsck || need_apt+=(e2fsprogs)
have debugfs || need_apt+=(e2fsprogs)
have fusermount3 || need_apt+=(fuse3)
have mount || need_apt+=(mount)
have losetup || need_apt+=(util-linux)
# Real programs and POSIX suites on the mount (crates/cli/tests/programs.rs,
# conformance.rs, scripts/posix/): the tools, and fuse2fs as a reference.
have git || need_apt+=(git)
have sqlite3 || need_apt+=(sqlite3)
have make || need_apt+=(make)
have gcc || need_apt+=(gcc)
have ar || need_apt+=(binutils)
have tar || need_apt+=(tar)
have fuse2fs || need_apt+=(fuse2fs)
have findmnt || need_apt+=(util-linux)
# ccfs's applications (`stitchfs bench seeds`, `stitchfs crashtest
# --program leveldb`): LevelDB through plyvel, Debian's package for
# Debian's python3 (another python3 first on PATH needs its own plyvel),
# and eatmydata, which drops the programs' fsyncs for the ceiling.
python3 -c 'import plyvel' >/dev/null 2>&1 || need_apt+=(python3-plyvel)
have eatmydata || need_apt+=(eatmydata)
# Seeing inside a mount (crates/cli/tests/stats.rs): Graphviz draws
# `stitchfs graph`, tmux holds `stitchfs top` in a terminal, and the
# Prometheus client's parser reads `--metrics`.
have dot || need_apt+=(graphviz)
have tmux || need_apt+=(tmux)
python3 -c 'import prometheus_client' >/dev/null 2>&1 || need_apt+=(python3-prometheus-client)
# Images on NBD servers (crates/blockdev/src/nbd): libnbd to build and
# link against, and nbdkit and qemu-nbd to serve exports in the tests and
# `stitchfs bench nbd`, and nbdcopy to read an export into a file for e2fsck.
[ -e /usr/include/libnbd.h ] || need_apt+=(libnbd-dev)
have nbdkit || need_apt+=(nbdkit)
have qemu-nbd || need_apt+=(qemu-utils)
have nbdcopy || need_apt+=(libnbd-bin)
if ((${#need_apt[@]})); then
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${need_apt[@]}"
fi
if ! python3 -c 'import prometheus_client' >/dev/null 2>&1; then
  python3 -m pip install -q prometheus-client ||
    echo "setup: $(command -v python3) cannot import prometheus_client; the metrics test will fail" >&2
fi
# Another python3 first on PATH (pyenv, a venv) gets plyvel's wheel.
if ! python3 -c 'import plyvel' >/dev/null 2>&1; then
  python3 -m pip install -q plyvel ||
    echo "setup: $(command -v python3) cannot import plyvel; LevelDB's benchmark and crash test will not run" >&2
fi

if ! have cargo; then
  echo "setup: cargo not found; install Rust with rustup (https://rustup.rs)" >&2
  exit 1
fi
# The workspace's rust-version (crc-fast needs 1.89): update an older
# toolchain through rustup.
want=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$(dirname "$0")/../Cargo.toml")
have_rustc=$(rustc --version | awk '{print $2}')
if [ "$(printf '%s\n%s\n' "$want" "$have_rustc" | sort -V | head -1)" != "$want" ]; then
  echo "setup: rustc $have_rustc is older than $want; updating with rustup" >&2
  rustup update stable >/dev/null && rustup default stable >/dev/null
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# pjdfstest and fsx (pinned, from crates.io) and pjdfstest's dummy user.
"$(dirname "$0")/posix/install-tools.sh"

# Plots of benchmark results.
# The Python package (python/, tested by crates/cli/tests/control.rs) is
# installed with pip without build isolation: setuptools with wheel.
if ! python3 -c 'import setuptools, wheel' >/dev/null 2>&1; then
  python3 -m pip install -q setuptools wheel
fi
have pkg-config || { sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo; DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q pkgconf; }

if ! python3 -c 'import matplotlib' >/dev/null 2>&1; then
  python3 -m pip install -q matplotlib || echo "setup: matplotlib not installed; benchmarks will skip plots" >&2
fi
