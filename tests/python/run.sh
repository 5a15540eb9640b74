#!/usr/bin/env bash
# tests/python/run.sh PYTHON MODULE PATTERN: the Python package's tests tests/python/PATTERN, run
# with PYTHON where it imports MODULE (numpy for the core, torch for coach.torch); else exit 77
# (ctest: skipped), saying why.
set -uo pipefail
py=$1 module=$2 pattern=$3
if ! "$py" -c "import $module" 2>/dev/null; then
  echo "skipped: $py cannot import $module (numpy: apt-get install python3-numpy; torch: scripts/torch-venv.sh)"
  exit 77
fi
exec "$py" -m unittest discover -s "$(dirname "$0")" -p "$pattern"
