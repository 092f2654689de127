#!/usr/bin/env bash
# Fails (and lists the files) if any tracked C++ file is not clang-format clean.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cc' '*.cu' '*.cuh' 2>/dev/null || true)
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "not clang-format clean (run: clang-format -i <file>):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "clang-format: ${#files[@]} files clean"
