#!/usr/bin/env bash
# The full test suite: set up, build, run every test, then the sanitizer build of the unit tests
# and the formatting check. Exits non-zero if anything fails or if no test ran.
#
#   scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

jobs="$(nproc)"

echo "== build (Release, warnings as errors)"
scripts/setup.sh build

echo "== tests (all but the soak target: scripts/soak.sh)"
ctest --test-dir build --output-on-failure -j "$jobs" --no-tests=error --timeout 600 -LE soak

echo "== Python package (pip install . into build-py/venv, pytest tests/python)"
scripts/python_test.sh build

echo "== ASan/UBSan build of the unit tests"
scripts/setup.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DNTP_SANITIZE=ON -DNTP_BUILD_BENCH=OFF
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --no-tests=error -L unit --timeout 900

echo "== clang-format"
scripts/check_format.sh

echo "== all checks passed"
