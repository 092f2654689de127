#!/usr/bin/env bash
# Prepares the demo corpus from Debian's `fortunes` package (installed by scripts/setup.sh):
# byte-tokenized llm.c-format shards OUT_DIR/fortunes_train.bin (90%) and fortunes_val.bin (10%).
#
#   scripts/prepare_corpus.sh [BUILD_DIR] [OUT_DIR]      (defaults: build, data)
#
# Deterministic: the same package version gives byte-identical files. Nothing is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
out_dir="${2:-data}"
cmake --build "$build_dir" --target ntp_prepare_corpus >/dev/null
"$build_dir/bin/ntp_prepare_corpus" "$out_dir"
