#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, rustdoc, every test, and a
# short benchmark smoke run. Keep it under 20 minutes on 2 cores. Ends with
# one line totalling every cargo test binary ("tests: N passed, N failed").
set -euo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo doc (broken or private links fail)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
echo "== bench smoke: stitchfs bench optimizations --quick"
cargo run -q --release -p stitchfs -- bench optimizations --quick
echo "== cargo test"
# Crash tests build, write and check thousands of images; on a disk-backed
# scratch directory the kernel's write-back of those files costs several
# times the checks themselves. testkit's scratch directories go to memory
# when there is room (Docker's default /dev/shm of 64 MiB is too small, so
# it is not taken then). TMPDIR stays on disk: the benchmark tests count
# what a file system writes to its device there.
shm_gib=$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -n 1 | tr -d ' ' || true)
if [ -z "${STITCH_TEST_TMP:-}" ] && [ "${shm_gib:-0}" -ge 8 ] 2>/dev/null; then
    export STITCH_TEST_TMP=/dev/shm/stitchfs-tests
    echo "(test scratch directories in $STITCH_TEST_TMP: ${shm_gib} GiB free)"
fi
status=0
cargo test --workspace --no-fail-fast 2>&1 | tee "$log" || status=$?
passed=$(grep -Eo '[0-9]+ passed' "$log" | awk '{s += $1} END {print s + 0}')
failed=$(grep -Eo '[0-9]+ failed' "$log" | awk '{s += $1} END {print s + 0}')
echo "tests: $passed passed, $failed failed"
exit "$status"
