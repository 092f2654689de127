#!/usr/bin/env bash
# Runs the checkpoint fuzz target for a bounded time from a seed corpus of valid files.
#   run_fuzz.sh FUZZ_BINARY CKPT_FIXTURE WORK_DIR SECONDS
set -euo pipefail
fuzz="$1" fixture="$2" work="$3" seconds="$4"
rm -rf "$work"
mkdir -p "$work/corpus"
"$fixture" "$work/ckpt" "$work/ref" --fuzz-seeds "$work/seeds" >/dev/null
# -max_len: the seeds are a few KB; larger inputs only slow the search down.
exec "$fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 "$work/corpus" "$work/seeds"
