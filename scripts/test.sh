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
# deploy.k8s_schema validates deploy/kubernetes against the Kubernetes API schemas Debian ships
# (its OpenAPI spec in golang-k8s-kube-openapi-dev, its models in python3-kubernetes, read with
# python3-jsonschema); container.two_node_job builds and runs the container image (podman with
# runc; debootstrap makes the debian:12 base where no registry answers). Without them those skip.
for pkg in python3-jsonschema python3-kubernetes golang-k8s-kube-openapi-dev podman runc debootstrap; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" && continue
  echo "test: installing $pkg"
  install "$pkg" || { $sudo apt-get update -qq && install "$pkg"; } ||
    echo "test: $pkg not installed; the tests that need it skip"
done
# PyTorch (from PyPI, into the venv at /opt/coach-venv or $COACH_VENV) for the tests of
# PyTorch scripts as workers (label torch); without it those tests skip, saying so.
./scripts/torch-venv.sh || echo "test: no PyTorch venv; the tests labelled torch skip"
build=${BUILD_DIR:-build}
# Everything setup.sh leaves out: the tests, the benchmarks, the CUDA plugin where the toolkit is.
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
