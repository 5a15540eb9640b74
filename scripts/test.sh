#!/usr/bin/env bash
# scripts/test.sh: the whole set-up (scripts/setup.sh), then the whole test suite with ctest.
# Extra arguments go to ctest (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# For the tests only: promtool (Debian's prometheus) checks what /metrics serves. Its service is
# not started (the package's own start may fail where there is no init system: harmless here).
if ! command -v promtool >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "test: installing prometheus (promtool)"
  install() {
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      prometheus >/dev/null 2>&1
  }
  install || { $sudo apt-get update -qq && install; } ||
    echo "test: prometheus not installed; the metrics test checks without promtool"
fi
build=${BUILD_DIR:-build}
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
