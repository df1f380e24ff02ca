#!/usr/bin/env bash
# Creates the system user and group "pjdfstest" that scripts/posix/pjdfstest.toml
# names in [dummy_auth] (the other entry, nobody:nogroup, is Debian's own).
# Idempotent; needs root (or sudo) only when the user is missing.
set -euo pipefail
getent passwd pjdfstest >/dev/null && exit 0
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
$sudo useradd --system --user-group --no-create-home --home-dir /nonexistent \
  --shell /usr/sbin/nologin --comment "pjdfstest dummy user" pjdfstest
