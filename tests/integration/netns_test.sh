#!/usr/bin/env bash
# netns.cluster_up_ping_rate_down: deploy/local/netns-cluster.sh makes a 3-host cluster of network
# namespaces, hosts reach each other at their own addresses (and nothing else), a TCP transfer
# between two hosts runs at the tbf rate of the links, `up` refuses a prefix in use, and `down`
# (twice) leaves no namespace or link behind. Root only: exits 77 (skipped) with the reason
# where namespaces cannot be made. Needs python3 (ICMP echo and the transfer).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/../../deploy/local/netns-cluster.sh
prefix=coachtest$$
rate_mbit=100
seconds=3
tmp=$(mktemp -d)

say() { echo "netns_test: $*"; }
fail() {
  say "FAILED: $*" >&2
  exit 1
}

rc=0
why=$("$cluster" check --rate ${rate_mbit}mbit 2>&1) || rc=$?
if [ "$rc" -eq 77 ]; then
  say "skipped: $why"
  exit 77
fi
[ "$rc" -eq 0 ] || fail "check exited with $rc: $why"
command -v python3 >/dev/null || { say "skipped: python3 is not installed"; exit 77; }

cleanup() {
  "$cluster" down --prefix "$prefix" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# ICMP echo from the namespace it runs in to $1; exit 0 on a reply within 1 s (5 tries).
cat >"$tmp/ping.py" <<'EOF'
import os, select, socket, struct, sys, time

def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF

dst = sys.argv[1]
ident = os.getpid() & 0xFFFF
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
for seq in range(1, 6):
    payload = b"coach-netns-test"
    header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    packet = struct.pack("!BBHHH", 8, 0, checksum(header + payload), ident, seq) + payload
    sent = time.monotonic()
    sock.sendto(packet, (dst, 0))
    while time.monotonic() - sent < 1.0:
        ready, _, _ = select.select([sock], [], [], 1.0 - (time.monotonic() - sent))
        if not ready:
            break
        data, (src, _) = sock.recvfrom(2048)
        ihl = (data[0] & 0x0F) * 4
        kind, _, _, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
        if src == dst and kind == 0 and rid == ident and rseq == seq:
            print("reply from %s: seq=%d time=%.2f ms" % (src, seq, (time.monotonic() - sent) * 1000))
            sys.exit(0)
print("no reply from %s" % dst)
sys.exit(1)
EOF

# Receiver: accepts one connection on $1:$2, reads to EOF, prints the rate in Mbit/s measured
# from the first byte to the last.
cat >"$tmp/sink.py" <<'EOF'
import socket, sys, time
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((sys.argv[1], int(sys.argv[2])))
server.listen(1)
server.settimeout(30)
conn, _ = server.accept()
conn.settimeout(30)
total, first, last = 0, None, None
while True:
    data = conn.recv(1 << 20)
    if not data:
        break
    now = time.monotonic()
    if first is None:
        first = now
    total += len(data)
    last = now
print("%.2f %d %.3f" % (total * 8 / (last - first) / 1e6, total, last - first))
EOF

# Sender: connects to $1:$2 (retrying while the receiver starts) and sends for $3 seconds.
cat >"$tmp/source.py" <<'EOF'
import socket, sys, time
deadline = time.monotonic() + 10
while True:
    try:
        sock = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
chunk = b"\0" * (1 << 16)
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    sock.sendall(chunk)
sock.close()
EOF

say "up 3 hosts, links at ${rate_mbit}mbit, prefix $prefix"
"$cluster" up 3 --rate ${rate_mbit}mbit --prefix "$prefix"

[ "$("$cluster" addr 1)" = 10.77.0.1 ] || fail "addr 1 printed '$("$cluster" addr 1)'"
[ "$("$cluster" addr 3)" = 10.77.0.3 ] || fail "addr 3 printed '$("$cluster" addr 3)'"

if "$cluster" up 2 --prefix "$prefix" >"$tmp/again.out" 2>&1; then
  fail "a second up with the same prefix succeeded"
fi
grep -q "prefix '$prefix' is already in use" "$tmp/again.out" ||
  fail "a second up said: $(cat "$tmp/again.out")"

for i in 1 2 3; do
  got=$("$cluster" exec "$i" --prefix "$prefix" -- ip -4 -o addr show dev eth0 | awk '{print $4}')
  [ "$got" = "10.77.0.$i/24" ] || fail "host $i has eth0 address '$got', expected 10.77.0.$i/24"
done

"$cluster" exec 1 --prefix "$prefix" -- python3 "$tmp/ping.py" 10.77.0.2 ||
  fail "host 1 cannot reach host 2"
"$cluster" exec 2 --prefix "$prefix" -- python3 "$tmp/ping.py" 10.77.0.3 ||
  fail "host 2 cannot reach host 3"
"$cluster" exec 3 --prefix "$prefix" -- python3 "$tmp/ping.py" 10.77.0.1 ||
  fail "host 3 cannot reach host 1"

# Nothing but the cluster's own addresses is reachable: no default route in a namespace.
if "$cluster" exec 1 --prefix "$prefix" -- ip route get 1.1.1.1 >/dev/null 2>&1; then
  fail "host 1 has a route to 1.1.1.1: $("$cluster" exec 1 --prefix "$prefix" -- ip route)"
fi

say "transfer host 1 -> host 2 for ${seconds}s"
"$cluster" exec 2 --prefix "$prefix" -- python3 "$tmp/sink.py" 10.77.0.2 5201 >"$tmp/rate" &
sink=$!
"$cluster" exec 1 --prefix "$prefix" -- python3 "$tmp/source.py" 10.77.0.2 5201 "$seconds"
wait "$sink" || fail "the receiver failed"
read -r mbit bytes took <"$tmp/rate"
say "measured ${mbit} Mbit/s (${bytes} bytes in ${took} s) on links limited to ${rate_mbit} Mbit/s"
awk -v m="$mbit" -v r="$rate_mbit" 'BEGIN { exit !(m >= 0.5 * r && m <= 1.2 * r) }' ||
  fail "rate ${mbit} Mbit/s is outside [50%, 120%] of ${rate_mbit} Mbit/s"

# A process left running in a namespace is killed by down.
"$cluster" exec 3 --prefix "$prefix" -- sleep 300 &
sleeper=$!
sleep 0.2

"$cluster" down --prefix "$prefix"
wait "$sleeper" 2>/dev/null && fail "a process in host 3 survived down"
"$cluster" down --prefix "$prefix" | grep -q "nothing to remove" || fail "a second down did not say 'nothing to remove'"

left_ns=$(ip netns list | grep -F "$prefix" || true)
left_links=$(ip -o link show | grep -F "$prefix" || true)
[ -z "$left_ns" ] || fail "namespaces left after down: $left_ns"
[ -z "$left_links" ] || fail "links left after down: $left_links"
if "$cluster" status --prefix "$prefix" >/dev/null; then
  fail "status still finds the cluster after down"
fi
say "ok"
