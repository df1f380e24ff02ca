#!/usr/bin/env bash
# Runs fsx (the Rust port from crates.io, pinned in tools.sh) for NUMOPS
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
bin=$(posix_tool fsx "$FSX_VERSION")
seed=${FSX_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
artifacts=${FSX_ARTIFACTS:-$(mktemp -d /tmp/fsx-artifacts.XXXXXX)}
mkdir -p "$artifacts"
file=$mnt/fsx.$$.data

# fsx 0.3.2's mapped read never unmaps its mapping, so a long run holds one
# mapping per mapped read and dies of ENOMEM (a panic in mmap) when the
# process passes vm.max_map_count (65530 by default; our 1,000,000-operation
# runs reached it). Raise the limit for the run if it is too low.
maps_needed=$((numops / 4 + 65536))
maps_now=$(cat /proc/sys/vm/max_map_count 2>/dev/null || echo 0)
if [ "$maps_now" -lt "$maps_needed" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "fsx.sh: raising vm.max_map_count from $maps_now to $maps_needed (fsx leaks a mapping per mapped read)"
    sysctl -q -w vm.max_map_count="$maps_needed"
  else
    echo "fsx.sh: vm.max_map_count is $maps_now; fsx may fail with ENOMEM after about $((maps_now * 4)) operations (run as root to raise it)" >&2
  fi
fi

echo "== fsx $FSX_VERSION: $numops operations on $file, seed $seed, config $config"
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
