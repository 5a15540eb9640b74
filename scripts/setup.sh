#!/usr/bin/env bash
# scripts/setup.sh: installs what Coach needs on Debian 12 (packages and data sets) and builds its
# programs.
# Idempotent: a second run installs nothing and rebuilds only what changed.
#   BUILD_DIR   build folder (default: build)
#   COACH_CMAKE_ARGS  extra arguments for cmake's configure step
#   COACH_CUDA=1      also build the CUDA backend's plugin (built anyway where nvidia-smi sees a GPU)
#   --deps-only       install the packages and the data only, build nothing
#   --all             also build coach-node and coach-sim (a cluster of nodes, the simulator)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}

packages=(build-essential cmake ninja-build pkg-config git zlib1g-dev
  libcaf-dev cppzmq-dev libzmq3-dev capnproto libcapnp-dev libeigen3-dev libsqlite3-dev
  libyaml-cpp-dev libcli11-dev libsodium-dev libssl-dev nlohmann-json3-dev libspdlog-dev libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist python3-numpy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# scikit-learn's 8x8 digits: taken out of Debian's python3-sklearn package without installing it.
if [ ! -s data/digits.csv.gz ]; then
  echo "setup: extracting digits.csv.gz from python3-sklearn"
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -qq python3-sklearn >/dev/null && dpkg-deb -x python3-sklearn_*.deb x)
  mkdir -p data
  cp "$(find "$tmp/x" -name digits.csv.gz | head -n 1)" data/digits.csv.gz
  rm -rf "$tmp"
fi

# --deps-only: the packages and data, no build (scripts/package.sh builds its own).
all=0
case "${1:-}" in
  --deps-only) exit 0 ;;
  --all) all=1 ;;
  "") ;;
  *) echo "setup: unknown option '$1' (--deps-only, --all)" >&2; exit 2 ;;
esac

jobs=$(nproc)
# Ninja for a new build folder (the programs built in 3 min 53 s with it against 4 min 24 s
# with make on a 2-core VM); a folder made before keeps its generator.
generator=()
[ -e "$build/CMakeCache.txt" ] || generator=(-G Ninja)
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release ${COACH_CMAKE_ARGS:-} >/dev/null
# What `coach train` needs: coach and coach-invocation (function mode's child); with --all, or
# where they were built before (kept in step), coach-node and coach-sim too (scripts/test.sh
# builds everything: them, the tests and the benchmarks). The daemons are left out of the
# first command to keep it short: a fresh clone trains in under 3 minutes on 2 cores. The CUDA
# backend, a plugin the programs load (kernels/cuda_plugin.hpp), where it can run or is asked
# for: a GPU visible to nvidia-smi, COACH_CUDA=1, or a plugin built here before.
targets=(coach coach-invocation)
if [ "$all" = 1 ] || [ -e "$build/apps/coach-node" ]; then
  targets+=(coach-node coach-sim)
fi
if grep -q '^COACH_ENABLE_CUDA:BOOL=ON' "$build/CMakeCache.txt" &&
  { [ "${COACH_CUDA:-}" = 1 ] || [ -e "$build/lib/libcoach_cuda.so" ] ||
    nvidia-smi -L >/dev/null 2>&1; }; then
  targets+=(coach_cuda)
fi
echo "setup: building ${targets[*]} in $build"
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
[ "$all" = 1 ] || [ -e "$build/apps/coach-node" ] ||
  echo "setup: built coach; ./scripts/setup.sh --all builds coach-node and coach-sim too"
