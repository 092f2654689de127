# Sourced by the model checks (models/*/check.sh): exits unless spin and a C compiler ($CC, else
# cc) are here. Without spin: skipped (exit 77), or failed under CI=true; without a compiler:
# failed. Sets cc.
if ! command -v spin >/dev/null 2>&1; then
  if [ "${CI:-}" = "true" ]; then
    echo "missing test dependency under CI=true: spin (apt-get install spin; scripts/setup.sh)"
    exit 1
  fi
  echo "missing test dependency: spin (a failure under CI=true); skipped"
  exit 77
fi
cc="${CC:-cc}"
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "missing test dependency: a C compiler ($cc)"
  exit 1
fi
