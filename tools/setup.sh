#!/usr/bin/env bash
# Installs what grimoire needs to build and test, from Debian's packages and pinned PyPI packages.
# Run as root (or with sudo). Idempotent.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS="build-essential cmake ninja-build pkg-config git zstd clang libclang-rt-14-dev \
  nlohmann-json3-dev libcpp-httplib-dev libpcre2-dev libutf8proc-dev libcli11-dev libfmt-dev libspdlog-dev \
  libgtest-dev libgmock-dev libbenchmark-dev libssl-dev zlib1g-dev libbrotli-dev python3 python3-venv python3-pip"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
# Python for the test suites (template rendering reference, server client tests), pinned.
python3 -m pip install -q -r "$(dirname "$0")/../tests/requirements.txt"
