#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, every test, and a
# short benchmark smoke run. Keep it under 20 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --workspace
echo "== bench smoke: stitchfs bench optimizations --quick"
cargo run -q --release -p stitchfs -- bench optimizations --quick
