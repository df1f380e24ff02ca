# Sourced by the scripts in scripts/posix: finds, or installs with cargo, the
# pinned crates.io tools they run (fsx with one fix of ours, see fsx_tool). Tools go to $STITCH_POSIX_TOOLS (default
# ~/.cache/stitchfs/posix-tools); a copy of the same version already on PATH
# or in ~/.cargo/bin is used as it is.

POSIX_TOOLS_DIR=${STITCH_POSIX_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/stitchfs/posix-tools}
PJDFSTEST_VERSION=0.2.2
FSX_VERSION=0.3.2

# posix_tool NAME VERSION: prints the path of NAME at exactly VERSION,
# installing it first if no such copy exists. Fails if cargo fails.
posix_tool() {
  local name=$1 version=$2 bin
  for bin in "$POSIX_TOOLS_DIR/bin/$name" "$(command -v "$name" || true)" "$HOME/.cargo/bin/$name"; do
    if [ -n "$bin" ] && [ -x "$bin" ] &&
      [ "$("$bin" --version 2>/dev/null)" = "$name $version" ]; then
      echo "$bin"
      return 0
    fi
  done
  echo "posix: installing $name $version into $POSIX_TOOLS_DIR (cargo install, a minute or two)" >&2
  cargo install --locked --quiet --root "$POSIX_TOOLS_DIR" --version "=$version" "$name" >&2 || {
    echo "posix: cargo install $name $version failed" >&2
    return 1
  }
  echo "$POSIX_TOOLS_DIR/bin/$name"
}

# fsx_tool: prints the path of fsx $FSX_VERSION built with fsx-fixes.patch
# (two bugs of the port that fail long runs; the patch says which), building
# it first from the crates.io source if needed. The binary's name carries a
# digest of the patch, so that neither an unpatched fsx nor one built with
# an older patch is taken for it.
fsx_tool() {
  local patch
  patch="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/fsx-fixes.patch"
  local bin
  bin="$POSIX_TOOLS_DIR/bin/fsx-$FSX_VERSION+$(sha256sum "$patch" | cut -c1-12)"
  if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null)" = "fsx $FSX_VERSION" ]; then
    echo "$bin"
    return 0
  fi
  echo "posix: building fsx $FSX_VERSION with fsx-fixes.patch into $POSIX_TOOLS_DIR (a minute or two)" >&2
  local work
  work=$(mktemp -d)
  if ! (
    set -e
    # A throwaway package that depends on fsx makes cargo fetch its source
    # (cargo warns that fsx has no library, and fetches it all the same).
    mkdir -p "$work/fetch/src"
    echo 'fn main() {}' >"$work/fetch/src/main.rs"
    printf '[package]\nname = "fetch-fsx"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\nfsx = "=%s"\n' \
      "$FSX_VERSION" >"$work/fetch/Cargo.toml"
    cargo fetch --quiet --manifest-path "$work/fetch/Cargo.toml"
    src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"fsx-$FSX_VERSION" 2>/dev/null | head -1)
    [ -n "$src" ] || { echo "posix: cargo fetched no source for fsx $FSX_VERSION" >&2; exit 1; }
    cp -r "$src" "$work/fsx"
    (cd "$work/fsx" && git apply "$patch")
    cargo build --quiet --release --locked --manifest-path "$work/fsx/Cargo.toml" --target-dir "$work/target"
    mkdir -p "$POSIX_TOOLS_DIR/bin"
    install -m 755 "$work/target/release/fsx" "$bin"
  ) >&2; then
    echo "posix: building fsx $FSX_VERSION failed (work left in $work)" >&2
    return 1
  fi
  rm -rf "$work"
  echo "$bin"
}
