#!/usr/bin/env bash
# deploy/local/netns-cluster.sh: an N-host "cluster" on one machine. Each host is a network
# namespace PREFIX-I with its own address 10.77.0.I/24 on eth0, a veth pair joining it to the
# bridge BASE-br in the root namespace (10.77.0.254). Links can be rate-limited with tc tbf,
# both ways. Namespaces get no default route: traffic reaches only the cluster's own addresses.
# Root only. See deploy/local/README.md.
#
#   netns-cluster.sh up N [--rate R] [--burst B] [--latency L] [--prefix P]
#   netns-cluster.sh exec I [--prefix P] -- CMD...
#   netns-cluster.sh addr I
#   netns-cluster.sh status [--prefix P]
#   netns-cluster.sh down [--prefix P]
#   netns-cluster.sh check [--rate R]
#
# Names: namespaces PREFIX-1..PREFIX-N; root-namespace links BASE-br (bridge) and BASE-hI (host
# end of host I's veth), where BASE is PREFIX when it has at most 9 characters (interface names
# are limited to 15) and otherwise the first 3 characters of PREFIX plus 6 hex digits of its
# checksum. Every root-namespace link also carries the alias PREFIX:br or PREFIX:hI, so
# `ip link` shows which cluster it belongs to and `down` finds it whatever its name.
#
# Exit codes: 0 done; 1 failed (the message says why); 2 bad usage; 77 (check only) namespaces
# cannot be made here.
set -Eeuo pipefail

readonly subnet=10.77.0
readonly bridge_host=254
readonly max_hosts=253
readonly lock_file=/run/coach-netns-cluster.lock
program=$(basename "$0")

die() {
  echo "$program: $*" >&2
  exit 1
}

usage() {
  [ $# -gt 0 ] && echo "$program: $*" >&2
  sed -n '8,13p' "$0" | sed 's/^#   /  /' >&2
  exit 2
}

check_prefix() {
  [[ $1 =~ ^[A-Za-z][A-Za-z0-9_-]{0,31}$ ]] ||
    usage "prefix '$1' must be a letter then up to 31 letters, digits, '_' or '-'"
}

check_index() {
  if ! [[ $1 =~ ^[1-9][0-9]{0,2}$ ]] || [ "$1" -gt "$max_hosts" ]; then
    usage "host '$1' must be a number from 1 to $max_hosts"
  fi
}

# BASE for interface names (see the header).
link_base() {
  local prefix=$1
  if [ ${#prefix} -le 9 ]; then
    echo "$prefix"
  else
    local sum
    sum=$(printf '%s' "$prefix" | cksum | cut -d' ' -f1)
    printf '%s%06x\n' "${prefix:0:3}" $((sum % 16777216))
  fi
}

# Namespaces of PREFIX, one a line.
prefix_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$1-[0-9]+\$" | sort -t- -k2n || true
}

# Root-namespace links of PREFIX (by name or by alias), one a line.
prefix_links() {
  local prefix=$1 base
  base=$(link_base "$prefix")
  ip -o link show 2>/dev/null | awk -v base="$base" -v prefix="$prefix" '
    {
      name = $2; sub(/:$/, "", name); sub(/@.*/, "", name)
      alias = ""
      for (i = 3; i < NF; i++) if ($i == "alias") alias = $(i + 1)
      if (name ~ ("^" base "-(br|h[0-9]+)$") || alias ~ ("^" prefix ":(br|h[0-9]+)$")) print name
    }' || true
}

need_root() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces need CAP_NET_ADMIN)"
  command -v ip >/dev/null || die "'ip' (iproute2) is not installed"
}

take_lock() {
  exec 9>"$lock_file"
  flock -w 30 9 || die "another $program is running (lock $lock_file)"
}

# Bytes per second of a tc rate ("100mbit", "1gbit", "12.5mbps", "1000000").
rate_bytes_per_s() {
  local rate=$1
  [[ $rate =~ ^([0-9]+(\.[0-9]+)?)([A-Za-z]*)$ ]] || return 1
  local number=${BASH_REMATCH[1]} unit=${BASH_REMATCH[3],,} factor
  case $unit in
    "" | bit) factor=0.125 ;;
    kbit) factor=125 ;;
    mbit) factor=125000 ;;
    gbit) factor=125000000 ;;
    tbit) factor=125000000000 ;;
    bps) factor=1 ;;
    kbps) factor=1000 ;;
    mbps) factor=1000000 ;;
    gbps) factor=1000000000 ;;
    *) return 1 ;;
  esac
  awk -v n="$number" -v f="$factor" 'BEGIN { printf "%.0f\n", n * f }'
}

# tc tbf on DEV (run with an optional "ip netns exec NS" before tc).
limit_link() {
  local rate=$1 burst=$2 latency=$3 dev=$4
  shift 4
  "$@" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency "$latency"
}

# Kills the processes in PREFIX's namespaces, deletes the root-namespace links (a veth pair goes
# with its host end, synchronously) and then the namespaces. Idempotent; prints what it removed.
teardown() {
  local prefix=$1 ns pids link removed_ns=0 removed_links=0
  for ns in $(prefix_namespaces "$prefix"); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] || continue
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 50); do
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [ -z "$pids" ] && break
      sleep 0.1
    done
    # shellcheck disable=SC2086
    if [ -n "$pids" ]; then kill -KILL $pids 2>/dev/null || true; fi
  done
  for link in $(prefix_links "$prefix"); do
    if ip link del dev "$link" 2>/dev/null; then removed_links=$((removed_links + 1)); fi
  done
  for ns in $(prefix_namespaces "$prefix"); do
    if ip netns del "$ns" 2>/dev/null; then removed_ns=$((removed_ns + 1)); fi
  done
  local left_ns left_links
  left_ns=$(prefix_namespaces "$prefix")
  left_links=$(prefix_links "$prefix")
  if [ -n "$left_ns$left_links" ]; then
    # shellcheck disable=SC2086 # one line, words split on purpose
    echo "$program: could not remove:" $left_ns $left_links >&2
    return 1
  fi
  if [ $((removed_ns + removed_links)) -eq 0 ]; then
    echo "$prefix: nothing to remove"
  else
    echo "$prefix: down (removed $removed_ns namespaces, $removed_links links)"
  fi
}

# The interface that holds an address of the cluster's subnet in the root namespace, if any.
subnet_user() {
  ip -o -4 addr show 2>/dev/null | awk -v net="$subnet." '
    { split($4, a, "/"); if (index(a[1], net) == 1) { print $2; exit } }' || true
}

cmd_up() {
  local hosts="" prefix=coach rate="" burst="" latency=50ms
  while [ $# -gt 0 ]; do
    case $1 in
      --prefix) [ $# -ge 2 ] || usage "--prefix needs a value"; prefix=$2; shift 2 ;;
      --rate) [ $# -ge 2 ] || usage "--rate needs a value"; rate=$2; shift 2 ;;
      --burst) [ $# -ge 2 ] || usage "--burst needs a value"; burst=$2; shift 2 ;;
      --latency) [ $# -ge 2 ] || usage "--latency needs a value"; latency=$2; shift 2 ;;
      -*) usage "up: unknown option '$1'" ;;
      *) [ -z "$hosts" ] || usage "up: one host count, not '$hosts' and '$1'"; hosts=$1; shift ;;
    esac
  done
  [ -n "$hosts" ] || usage "up: how many hosts?"
  check_index "$hosts"
  check_prefix "$prefix"
  if [ -n "$rate" ]; then
    local bytes
    bytes=$(rate_bytes_per_s "$rate") || usage "--rate '$rate' is not a rate (e.g. 100mbit, 1gbit)"
    [ "$bytes" -gt 0 ] || usage "--rate '$rate' must be more than 0"
    # A burst of 4 ms at the rate (at least 32 KiB): enough for timer granularity, small
    # enough that the rate holds over any interval longer than a few milliseconds.
    [ -n "$burst" ] || burst=$(((bytes / 250) > 32768 ? bytes / 250 : 32768))
  fi
  need_root
  take_lock

  local in_use
  # shellcheck disable=SC2046 # one word per name
  in_use=$(printf ' %s' $(prefix_namespaces "$prefix") $(prefix_links "$prefix"))
  [ -z "${in_use// /}" ] || die "prefix '$prefix' is already in use (by$in_use); run: $program down --prefix $prefix"
  local user
  user=$(subnet_user)
  [ -z "$user" ] || die "$subnet.0/24 is already in use on $user (another cluster is up? $program down --prefix PREFIX)"

  local base br
  base=$(link_base "$prefix")
  br=$base-br
  trap 'echo "$program: up failed; removing what was made" >&2; teardown "$prefix" >&2 || true' ERR
  ip link add "$br" type bridge
  ip link set dev "$br" alias "$prefix:br"
  # Bridged frames skip iptables where the kernel allows (a FORWARD policy of DROP, as Docker
  # sets, would drop them otherwise); the global sysctl bridge-nf-call-iptables still wins.
  ip link set dev "$br" type bridge nf_call_iptables 0 nf_call_ip6tables 0 2>/dev/null || true
  sysctl -qw "net.ipv6.conf.$br.disable_ipv6=1" 2>/dev/null || true
  ip addr add "$subnet.$bridge_host/24" dev "$br"
  ip link set dev "$br" up

  local i ns host_end ns_end
  for i in $(seq "$hosts"); do
    ns=$prefix-$i
    host_end=$base-h$i
    ns_end=$base-n$i
    ip netns add "$ns"
    ip netns exec "$ns" ip link set dev lo up
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
    ip link add "$host_end" type veth peer name "$ns_end"
    ip link set dev "$host_end" alias "$prefix:h$i"
    ip link set dev "$host_end" master "$br"
    sysctl -qw "net.ipv6.conf.$host_end.disable_ipv6=1" 2>/dev/null || true
    ip link set dev "$ns_end" netns "$ns"
    ip netns exec "$ns" ip link set dev "$ns_end" name eth0
    ip netns exec "$ns" ip addr add "$subnet.$i/24" dev eth0
    ip netns exec "$ns" ip link set dev eth0 up
    ip link set dev "$host_end" up
    if [ -n "$rate" ]; then
      limit_link "$rate" "$burst" "$latency" eth0 ip netns exec "$ns"  # out of host i
      limit_link "$rate" "$burst" "$latency" "$host_end"                # into host i
    fi
  done
  trap - ERR
  echo "$prefix: $hosts hosts up on bridge $br ($subnet.$bridge_host/24)${rate:+, links limited to $rate each way (tbf burst $burst latency $latency)}"
  for i in $(seq "$hosts"); do
    echo "  $prefix-$i  $subnet.$i"
  done
}

cmd_exec() {
  local host="" prefix=coach
  while [ $# -gt 0 ]; do
    case $1 in
      --prefix) [ $# -ge 2 ] || usage "--prefix needs a value"; prefix=$2; shift 2 ;;
      --) shift; break ;;
      -*) usage "exec: unknown option '$1'" ;;
      *) [ -z "$host" ] || usage "exec: put the command after '--'"; host=$1; shift ;;
    esac
  done
  [ -n "$host" ] || usage "exec: which host?"
  [ $# -gt 0 ] || usage "exec: no command after '--'"
  check_index "$host"
  check_prefix "$prefix"
  need_root
  [ -e "/run/netns/$prefix-$host" ] || die "no namespace $prefix-$host (is the cluster up? $program up N --prefix $prefix)"
  exec ip netns exec "$prefix-$host" "$@"
}

cmd_addr() {
  [ $# -eq 1 ] || usage "addr: one host number"
  check_index "$1"
  echo "$subnet.$1"
}

cmd_status() {
  local prefix=coach
  while [ $# -gt 0 ]; do
    case $1 in
      --prefix) [ $# -ge 2 ] || usage "--prefix needs a value"; prefix=$2; shift 2 ;;
      *) usage "status: unknown argument '$1'" ;;
    esac
  done
  check_prefix "$prefix"
  local ns links
  ns=$(prefix_namespaces "$prefix")
  links=$(prefix_links "$prefix")
  if [ -z "$ns$links" ]; then
    echo "$prefix: not up"
    return 1
  fi
  # shellcheck disable=SC2086 # one line each, words split on purpose
  echo "$prefix: namespaces:" $ns
  # shellcheck disable=SC2086
  echo "$prefix: links:" $links
}

cmd_down() {
  local prefix=coach
  while [ $# -gt 0 ]; do
    case $1 in
      --prefix) [ $# -ge 2 ] || usage "--prefix needs a value"; prefix=$2; shift 2 ;;
      *) usage "down: unknown argument '$1'" ;;
    esac
  done
  check_prefix "$prefix"
  need_root
  take_lock
  teardown "$prefix"
}

# Exit 0 when namespaces, veths and a bridge can be made here (and tc tbf, with --rate); else
# print why and exit 77.
cmd_check() {
  local rate=""
  while [ $# -gt 0 ]; do
    case $1 in
      --rate) [ $# -ge 2 ] || usage "--rate needs a value"; rate=$2; shift 2 ;;
      *) usage "check: unknown argument '$1'" ;;
    esac
  done
  skip() {
    echo "$program: cannot make namespaces here: $*"
    exit 77
  }
  [ "$(id -u)" -eq 0 ] || skip "not root (network namespaces need CAP_NET_ADMIN)"
  command -v ip >/dev/null || skip "'ip' (iproute2) is not installed"
  if [ -n "$rate" ]; then
    command -v tc >/dev/null || skip "'tc' (iproute2) is not installed; --rate needs it"
  fi
  local user
  user=$(subnet_user)
  [ -z "$user" ] || skip "$subnet.0/24 is already in use on $user (another cluster is up?)"
  # Make one of everything up makes, with names of our own, and remove it again.
  local ns=coachcheck-$$ br=cchk$$br host_end=cchk$$h ns_end=cchk$$n out
  # shellcheck disable=SC2064
  trap "ip netns del $ns 2>/dev/null || true; ip link del $br 2>/dev/null || true; ip link del $host_end 2>/dev/null || true" EXIT
  out=$(ip netns add "$ns" 2>&1) || skip "ip netns add failed: $out"
  out=$(ip netns exec "$ns" ip link set dev lo up 2>&1) || skip "ip netns exec failed: $out"
  out=$(ip link add "$br" type bridge 2>&1) || skip "cannot make a bridge: $out"
  out=$(ip link add "$host_end" type veth peer name "$ns_end" 2>&1) || skip "cannot make a veth pair: $out"
  out=$(ip link set dev "$host_end" master "$br" 2>&1) || skip "cannot attach a veth to a bridge: $out"
  out=$(ip link set dev "$ns_end" netns "$ns" 2>&1) || skip "cannot move a veth into a namespace: $out"
  if [ -n "$rate" ]; then
    rate_bytes_per_s "$rate" >/dev/null || usage "--rate '$rate' is not a rate (e.g. 100mbit, 1gbit)"
    out=$(tc qdisc add dev "$host_end" root tbf rate "$rate" burst 32kb latency 50ms 2>&1) ||
      skip "tc tbf is not available: $out"
  fi
  echo "$program: ok: namespaces, veth pairs and bridges can be made here${rate:+ (and tc tbf)}"
}

[ $# -gt 0 ] || usage
command=$1
shift
case $command in
  up) cmd_up "$@" ;;
  exec) cmd_exec "$@" ;;
  addr) cmd_addr "$@" ;;
  status) cmd_status "$@" ;;
  down) cmd_down "$@" ;;
  check) cmd_check "$@" ;;
  -h | --help | help) usage ;;
  *) usage "unknown command '$command'" ;;
esac
