#!/usr/bin/env bash
# The soak target, kept out of the default suite: live recovery through 100 random faults (80
# SIGKILLs, 20 SIGSTOPs, each repaired) of a 3 x 4 training job, about 20 minutes on 2 cores.
#
#   scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh build
ctest --test-dir build --output-on-failure --no-tests=error -L soak --timeout 7200
