#!/usr/bin/env bash
# scripts/test.sh: the whole set-up (scripts/setup.sh), then the whole test suite with ctest.
# Extra arguments go to ctest (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
build=${BUILD_DIR:-build}
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
