#!/usr/bin/env bash
# scripts/package.sh: builds the coach Debian package (coach_VERSION_ARCH.deb) from this tree,
# and with --try installs it on this machine, runs what it installed and removes it again.
#
#   scripts/package.sh [--try] [--out DIR]
#
# The package is built without CUDA (its libraries are no Debian packages, so dpkg-shlibdeps
# cannot name them as dependencies), without tests and benchmarks, in build-pkg/ (PKG_BUILD_DIR
# changes that). --out: where the .deb goes (default: build-pkg/). --try needs root (or sudo):
# `dpkg -i` (then `apt-get -f install` for missing dependencies), `coach --version`,
# `coach-node --version`, a 1-epoch `coach train` of the digits example with the installed
# programs and examples, a coach-node started and listed by `coach nodes`, then `dpkg -r coach`.
# Exit code 0 when every step worked.
set -euo pipefail
cd "$(dirname "$0")/.."
try=0
out=""
while [ $# -gt 0 ]; do
  case $1 in
    --try) try=1; shift ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "package: unknown argument '$1' (--try, --out DIR)" >&2; exit 2 ;;
  esac
done
build=${PKG_BUILD_DIR:-build-pkg}
./scripts/setup.sh --deps-only >/dev/null  # the build's packages, and the digits for --try
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCOACH_ENABLE_CUDA=OFF \
  -DCOACH_BUILD_TESTS=OFF -DCOACH_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target coach coach-node coach-sim coach-invocation
(cd "$build" && cpack -G DEB >/dev/null)
deb=$(ls -t "$build"/coach_*.deb | head -n 1)
if [ -n "$out" ]; then mkdir -p "$out" && cp "$deb" "$out/" && deb="$out/$(basename "$deb")"; fi
echo "package: $deb"
dpkg-deb --info "$deb" | sed -n 's/^ \(Package\|Version\|Depends\|Installed-Size\):/  \1:/p'
[ "$try" -eq 1 ] || exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "package: dpkg -i $deb"
$sudo dpkg -i "$deb" >/dev/null 2>&1 || $sudo apt-get -f install -y -qq >/dev/null
trap '$sudo dpkg -r coach >/dev/null 2>&1 || true' EXIT
for f in /usr/bin/coach /usr/bin/coach-node /usr/bin/coach-sim /usr/bin/coach-invocation \
  /lib/systemd/system/coach-node.service /etc/default/coach-node \
  /usr/share/coach/examples/digits-mlp.yaml; do
  [ -e "$f" ] || { echo "package: $f is missing"; exit 1; }
done
/usr/bin/coach --version
/usr/bin/coach-node --version
/usr/bin/coach-sim --version
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify /lib/systemd/system/coach-node.service && echo "package: unit verified"
fi
scratch=$(mktemp -d)
cp -r /usr/share/coach/examples "$scratch/"
mkdir -p "$scratch/data" && cp data/digits.csv.gz "$scratch/data/"
sed 's/^epochs: .*/epochs: 1/' "$scratch/examples/digits-mlp.yaml" > "$scratch/examples/one-epoch.yaml"
(cd "$scratch" && /usr/bin/coach train examples/one-epoch.yaml --workers 2 --shards 2 2>&1 | tail -n 1)
port=$((20000 + RANDOM % 20000))
/usr/bin/coach-node --listen tcp://127.0.0.1:$port --scheduler --store '' --name packaged \
  --exit-with-parent >"$scratch/node.log" 2>&1 &
node=$!
for _ in $(seq 50); do
  /usr/bin/coach nodes --at 127.0.0.1:$port 2>/dev/null | grep -q packaged && break
  sleep 0.2
done
/usr/bin/coach nodes --at 127.0.0.1:$port
kill -TERM $node && wait $node
rm -rf "$scratch"
echo "package: installed, tried and removed"
