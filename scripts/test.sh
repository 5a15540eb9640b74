#!/usr/bin/env bash
# scripts/test.sh: the whole set-up (scripts/setup.sh), builds the rest (tests, benchmarks, the CUDA
# plugin), then runs the whole test suite with ctest.
# Extra arguments go to ctest (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# For the tests only: Debian's prometheus (promtool checks what /metrics serves; its server
# scrapes a 3-node cluster in metrics_cluster_test); headless
# Chromium (Debian's chromium) loads the dashboard; systemd-analyze (Debian's systemd) verifies
# deploy/systemd's unit. Services are not started (a package's own
# start may fail where there is no init system: harmless here). Without them those checks skip.
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
install() {
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" \
    >/dev/null 2>&1
}
for tool in promtool:prometheus chromium:chromium systemd-analyze:systemd; do
  command -v "${tool%%:*}" >/dev/null 2>&1 && continue
  echo "test: installing ${tool#*:} (${tool%%:*})"
  install "${tool#*:}" || { $sudo apt-get update -qq && install "${tool#*:}"; } ||
    echo "test: ${tool#*:} not installed; the tests that need it skip"
done
# PyTorch (from PyPI, into the venv at /opt/coach-venv or $COACH_VENV) for the tests of
# PyTorch scripts as workers (label torch); without it those tests skip, saying so.
./scripts/torch-venv.sh || echo "test: no PyTorch venv; the tests labelled torch skip"
build=${BUILD_DIR:-build}
# Everything setup.sh leaves out: the tests, the benchmarks, the CUDA plugin where the toolkit is.
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
