#!/usr/bin/env bash
# Installs Weft's build and test dependencies from Debian packages only.
# Idempotent: when every package is already present it changes nothing and
# does not touch the network; otherwise it runs `apt-get update` once.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  clang-16 libclang-rt-16-dev clang-format
  libasio-dev libprotobuf-dev protobuf-compiler
  librocksdb-dev liburing-dev libfuse3-dev fuse3 libisal-dev libjemalloc-dev
  libspdlog-dev libfmt-dev libcli11-dev libtoml11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3-dev python3-pybind11
  python3-numpy python3-pytest python3-torch
  bindfs iproute2 procps psmisc util-linux
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
