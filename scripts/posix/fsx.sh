#!/usr/bin/env bash
# Runs fsx (the Rust port from crates.io, pinned in tools.sh, built with
# fsx-fixes.patch) for NUMOPS
# operations on a new file in the file system mounted at MOUNTPOINT, with the
# committed configuration scripts/posix/fsx.toml (FSX_CONFIG overrides).
#
#   scripts/posix/fsx.sh MOUNTPOINT NUMOPS
#
# FSX_SEED fixes the seed (default: random, printed, so a failure replays with
# FSX_SEED=...). On a mismatch fsx prints the operations that led to it and
# leaves the expected contents and its log in $FSX_ARTIFACTS (default a
# temporary directory, printed); the exit status is fsx's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/tools.sh"

[ $# = 2 ] || {
  echo "usage: $0 MOUNTPOINT NUMOPS" >&2
  exit 2
}
mnt=$(realpath "$1")
numops=$2
config=$(realpath "${FSX_CONFIG:-$here/fsx.toml}")
mountpoint -q "$mnt" || {
  echo "fsx.sh: $mnt is not a mount point" >&2
  exit 1
}
bin=$(fsx_tool)
seed=${FSX_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
artifacts=${FSX_ARTIFACTS:-$(mktemp -d /tmp/fsx-artifacts.XXXXXX)}
mkdir -p "$artifacts"
file=$mnt/fsx.$$.data

echo "== fsx $FSX_VERSION (+fsx-fixes.patch, $(basename "$bin")): $numops operations on $file, seed $seed, config $config"
start=$(date +%s)
set +e
"$bin" -q -N "$numops" -S "$seed" -f "$config" -P "$artifacts" "$file"
status=$?
set -e
if [ $status = 0 ]; then
  rm -f "$file"
  rm -rf "$artifacts"
  echo "fsx: $numops operations, no mismatch ($(($(date +%s) - start)) s, seed $seed)"
else
  echo "fsx: FAILED (exit $status) after $(($(date +%s) - start)) s; seed $seed;" \
    "replay: FSX_SEED=$seed $0 MOUNTPOINT $numops; file left at $file, artifacts in $artifacts" >&2
fi
exit $status
