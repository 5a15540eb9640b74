#!/usr/bin/env bash
# container.two_node_job: deploy/container/Containerfile built with podman from the .deb of this
# build (cpack with the recipe of the package scripts/package.sh makes), then 2 coach-nodes in containers (the
# scheduler and one that joins it, --network=host) train the digits job (2 workers, 2 shards,
# placement spread) with the data mounted read-only at /data, submitted from inside the
# scheduler's container; the job must succeed with parts on both nodes. Every container started
# is removed again (checked).
#
#   tests/integration/container_test.sh BUILD_DIR
#
# The image is tagged coach-test:HASH, HASH a content hash of its inputs (the Containerfile, the
# packaged programs, the package's recipe): an image already built from the same inputs is
# reused (the run then takes well under a minute); older coach-test images are removed. With no
# image registry reachable, the base debian:12 is made once by `debootstrap --variant=minbase
# bookworm` and `podman import` (a few minutes, from Debian's archive), and kept.
# Exits 77 (skipped) with the reason where no container can run: not root, no podman or runc,
# no debootstrap for the base image, or podman cannot start a container here. Podman runs with
# runc and `default_ulimits = []` (CONTAINERS_CONF, a file in BUILD_DIR: this sandbox refuses
# podman's default ulimits); the system's configuration is not changed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
prefix=coach-test-$$
tmp=$(mktemp -d)

say() { echo "container_test: $*"; }
skip() {
  say "skipped: $*"
  exit 77
}
fail() {
  say "FAILED: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || skip "not root (rootful podman is what this test runs)"
command -v podman >/dev/null || skip "podman is not installed (Debian package podman)"
command -v runc >/dev/null || skip "runc is not installed (Debian package runc)"
export CONTAINERS_CONF=$build/container-test/containers.conf
mkdir -p "$(dirname "$CONTAINERS_CONF")"
printf '[containers]\ndefault_ulimits = []\n' >"$CONTAINERS_CONF"
pm() { podman --runtime runc "$@"; }

cleanup() {
  local left
  left=$(pm ps -a --filter "name=^$prefix-" --format '{{.Names}}' 2>/dev/null)
  [ -n "$left" ] && pm rm -f -t 0 $left >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT

# The base image, made once.
if ! pm image exists debian:12; then
  command -v debootstrap >/dev/null ||
    skip "no debian:12 image and no debootstrap to make one (Debian package debootstrap)"
  say "making debian:12 with debootstrap (once)"
  root=$build/container-test/rootfs
  rm -rf "$root"
  debootstrap --variant=minbase bookworm "$root" >"$tmp/debootstrap.log" 2>&1 ||
    skip "debootstrap failed (no Debian archive reachable?): $(tail -n 1 "$tmp/debootstrap.log")"
  tar -C "$root" -c . | pm import - debian:12 >/dev/null || fail "podman import failed"
  rm -rf "$root"
fi
pm run --rm --network=host debian:12 true >"$tmp/probe.log" 2>&1 ||
  skip "podman cannot run a container here: $(tail -n 1 "$tmp/probe.log")"

# The image, from the programs of this build: reused while its inputs are the same.
for p in coach coach-node coach-sim coach-invocation; do
  [ -x "$build/apps/$p" ] || fail "$build/apps/$p is not built"
done
hash=$(cat "$src/deploy/container/Containerfile" "$src/cmake/coach_package.cmake" \
  "$build"/apps/{coach,coach-node,coach-sim,coach-invocation} | sha256sum | cut -c1-16)
image=coach-test:$hash
if pm image exists "$image"; then
  say "reusing $image"
else
  say "building $image"
  ctx=$tmp/context
  mkdir -p "$ctx"
  # The package's own recipe (CPackConfig.cmake: name, version, dependencies by dpkg-shlibdeps,
  # conffiles) over this build's install (cmake --install, as deploy_test checks it): cpack on
  # the build tree itself would first build every target of it, the tests included.
  DESTDIR=$tmp/stage cmake --install "$build" --prefix /usr >"$tmp/install.log" 2>&1 ||
    fail "cmake --install failed: $(tail -n 5 "$tmp/install.log")"
  cpack --config "$build/CPackConfig.cmake" -G DEB -B "$tmp/cpack" -D CPACK_INSTALL_CMAKE_PROJECTS= \
    -D "CPACK_INSTALLED_DIRECTORIES=$tmp/stage;/" -D CPACK_PACKAGING_INSTALL_PREFIX=/ \
    >"$tmp/cpack.log" 2>&1 || fail "cpack failed: $(tail -n 5 "$tmp/cpack.log")"
  cp "$tmp"/cpack/coach_*.deb "$ctx/" || fail "cpack made no .deb"
  pm build --network=host -f "$src/deploy/container/Containerfile" -t "$image" "$ctx" \
    >"$tmp/build.log" 2>&1 || fail "podman build failed: $(tail -n 20 "$tmp/build.log")"
  for old in $(pm images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/coach-test:'); do
    [ "$old" = "localhost/$image" ] || pm rmi -f "$old" >/dev/null 2>&1
  done
fi
pm run --rm --network=host "$image" --version | grep -q '^coach-node ' || fail "the image's coach-node does not run"

# A port free on this host (the containers share its network).
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 30000))
    ss -ltnH "sport = :$p" 2>/dev/null | grep -q . || {
      echo "$p"
      return
    }
  done
}
port=$(free_port)
port2=$(free_port)
at=127.0.0.1:$port

# The job's data, mounted read-only at /data in every container (the same path on every node).
data=$tmp/data
mkdir -p "$data"
cp "$src/data/digits.csv.gz" "$data/" || fail "no data/digits.csv.gz (scripts/setup.sh makes it)"
cat >"$data/job.yaml" <<'EOF'
name: container-digits
dataset: {format: csv, path: /data/digits.csv.gz, test_fraction: 0.2}
model: {type: mlp, hidden: [64], activation: relu}
optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.9}
batch_size: 32
epochs: 3
workers: 2
shards: 2
placement: spread
backend: cpu
EOF
chmod -R a+rX "$tmp"

run_node() {  # NAME ARGS...: a coach-node in a container of its own
  local name=$1
  shift
  pm run -d --name "$prefix-$name" --network=host -v "$data:/data:ro" "$image" \
    --name "$name" --cpu-accounting reserved --cpus 2 --heartbeat 0.25 "$@" >/dev/null ||
    fail "cannot start the container of $name"
}
run_node sched --listen "tcp://$at" --scheduler --store ''
run_node node-b --listen "tcp://127.0.0.1:$port2" --join "$at"
coach() { pm exec "$prefix-sched" coach "$@"; }
alive=0
for _ in $(seq 100); do
  alive=$(coach nodes --json --at "$at" 2>/dev/null | grep -o '"alive": *true' | wc -l)
  [ "$alive" -ge 2 ] && break
  sleep 0.2
done
coach nodes --at "$at"
[ "$alive" -ge 2 ] || fail "2 containerized nodes not alive: $(pm logs "$prefix-node-b" 2>&1 | tail -n 5)"

out=$(coach submit /data/job.yaml --wait --json --at "$at" 2>"$tmp/submit.err")
rc=$?
echo "$out" | tail -n 1
[ "$rc" -eq 0 ] || fail "submit --wait exited $rc: $(cat "$tmp/submit.err")"
job=$(echo "$out" | grep -o '"job": *[0-9]*' | head -n 1 | grep -o '[0-9]*$')
[ -n "$job" ] || fail "no job id in: $out"
status=$(coach status "$job" --json --at "$at")
echo "$status" | grep -q '"state": *"succeeded"' || fail "job $job did not succeed: $status"
echo "$status" | /usr/bin/env python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]
nodes = set(j["worker_nodes"]) | set(j["shard_nodes"])
acc = j["test_accuracy"]
print("container_test: job %d %s: %d epochs, test accuracy %.4f, parts on %s" %
      (j["job"], j["state"], j["epochs_done"], acc, ", ".join(sorted(nodes))))
sys.exit(0 if nodes == {"sched", "node-b"} and j["epochs_done"] == 3 and acc > 0.8 else 1)
' || fail "the job did not train across both containers to accuracy > 0.8: $status"

# Stop (SIGTERM: each node drains and exits 0) and remove every container.
for n in node-b sched; do
  pm stop -t 30 "$prefix-$n" >/dev/null || fail "cannot stop $n"
  code=$(pm inspect "$prefix-$n" --format '{{.State.ExitCode}}')
  [ "$code" = 0 ] || fail "$n exited $code: $(pm logs "$prefix-$n" 2>&1 | tail -n 5)"
  pm rm "$prefix-$n" >/dev/null || fail "cannot remove $n"
done
left=$(pm ps -a --filter "name=^$prefix-" --format '{{.Names}}')
[ -z "$left" ] || fail "containers left: $left"
say "passed: job $job trained across 2 containerized nodes ($image); no container left"
