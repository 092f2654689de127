#!/usr/bin/env bash
# The Python package's tests: `pip install .` into a virtual environment (build-py/venv), then
# pytest tests/python, which compares the package with the CLI of BUILD_DIR for the same inputs.
#
#   scripts/python_test.sh [BUILD_DIR]      (BUILD_DIR defaults to build/, built by setup.sh)
#
# The package's build folder (build-py/, pyproject.toml) is kept, so a second run rebuilds only
# what changed; the build dependencies are installed in the venv once (--no-build-isolation).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir="${1:-build}"
venv=build-py/venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet "scikit-build-core>=0.10" "pybind11>=2.12" numpy pytest
"$venv/bin/python" -m pip install --quiet --no-build-isolation .
# `import ntp` finds the installed package: the sources are under python/, not on the path.
NTP_BINARY="$PWD/$build_dir/bin/ntp" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  --rootdir tests/python tests/python
