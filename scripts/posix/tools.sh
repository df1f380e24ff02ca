# Sourced by the scripts in scripts/posix: finds, or installs with cargo, the
# pinned crates.io tools they run. Tools go to $STITCH_POSIX_TOOLS (default
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
