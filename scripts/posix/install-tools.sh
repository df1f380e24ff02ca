#!/usr/bin/env bash
# Installs the pinned pjdfstest and fsx (crates.io) if missing, and the
# unprivileged user pjdfstest switches to. Called by scripts/setup.sh, so
# that the tests do not spend their time compiling tools.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/tools.sh"
posix_tool pjdfstest "$PJDFSTEST_VERSION" >/dev/null
fsx_tool >/dev/null
"$here/pjdfstest-user.sh"
