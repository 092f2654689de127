#!/usr/bin/env bash
# Installs the Debian packages ntp needs (only those missing), then configures and builds.
#
#   scripts/setup.sh [BUILD_DIR] [extra cmake args...]
#
# BUILD_DIR defaults to build/. Safe to run again: it installs nothing that is present and
# rebuilds incrementally. Warnings are errors (NTP_WERROR=ON) so that CI and developers agree.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${1:-build}"
shift || true

packages=(
  cmake ninja-build g++ clang-format pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libtomlplusplus-dev
  libgloo-dev libopenblas-dev libblis-dev libdnnl-dev libhiredis-dev redis-server libjemalloc2
  gnuplot-nox fortunes iproute2 spin
  python3 python3-pip python3-venv clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing missing packages: ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# PyPI packages for tests/checkpoint/check_consolidate.py (only those missing). Debian's own
# python3 refuses plain pip installs (PEP 668), hence the retry.
python_modules=(safetensors numpy)
missing_py=()
for m in "${python_modules[@]}"; do
  if ! python3 -c "import $m" >/dev/null 2>&1; then missing_py+=("$m"); fi
done
if [ ${#missing_py[@]} -gt 0 ]; then
  echo "setup: installing missing Python packages: ${missing_py[*]}"
  python3 -m pip install --quiet "${missing_py[@]}" ||
    python3 -m pip install --quiet --break-system-packages "${missing_py[@]}"
fi

jobs="$(nproc)"
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNTP_WERROR=ON "$@" >/dev/null
fi
cmake --build "$build_dir" -j "$jobs"
# Demo corpus from the `fortunes` package: data/fortunes_{train,val}.bin (docs/data.md).
scripts/prepare_corpus.sh "$build_dir" data >/dev/null
