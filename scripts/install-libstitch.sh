#!/usr/bin/env bash
# Builds libstitch (the C library of stitchfs's control interface) and
# installs it under PREFIX (default /usr/local): lib/libstitch.{so,a},
# include/stitch.h and lib/pkgconfig/stitch.pc. Then:
#   cc prog.c $(pkg-config --cflags --libs stitch)
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-/usr/local}
cargo build --release -p stitch-lib
target=${CARGO_TARGET_DIR:-target}/release
install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$target/libstitch.so" "$prefix/lib/libstitch.so"
install -m 0644 "$target/libstitch.a" "$prefix/lib/libstitch.a"
install -m 0644 crates/libstitch/include/stitch.h "$prefix/include/stitch.h"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
cat > "$prefix/lib/pkgconfig/stitch.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: stitch
Description: the control interface of a stitchfs mount
Version: $version
Libs: -L\${libdir} -lstitch
Cflags: -I\${includedir}
PC
command -v ldconfig >/dev/null && ldconfig "$prefix/lib" 2>/dev/null || true
echo "installed libstitch $version under $prefix"
