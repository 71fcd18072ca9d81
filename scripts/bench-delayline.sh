#!/usr/bin/env bash
# Benchmarks the testbed's userspace delay line (docs/TESTBED.md, "Measured"):
#   1. added latency: ping RTT across a 10 ms link, idle and under 1 Gbit/s of
#      paced TCP load through the same delay line;
#   2. throughput: 8 TCP streams through the delay line, with GSO packets
#      (the default on loss-free links) and with plain 1500-byte packets.
# Two namespaces (one node per site), 10 Gbit/s NICs and WAN so that only the
# delay line limits. Needs root, iproute2, iputils-ping, python3 and a built
# build/cli/gridbcast (scripts/setup.sh). Removes everything it created.
# Usage: bash scripts/bench-delayline.sh [SECONDS]   (default 5 per measurement)
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${GRIDBCAST:-$PWD/build/cli/gridbcast}
secs=${1:-5}
[ "$(id -u)" -eq 0 ] || { echo "bench-delayline: needs root" >&2; exit 1; }
[ -x "$bin" ] || { echo "bench-delayline: build first (bash scripts/setup.sh)" >&2; exit 1; }
command -v ping >/dev/null || { echo "bench-delayline: needs ping (apt-get install iputils-ping)" >&2; exit 1; }

work=$(mktemp -d /tmp/gridbcast-bench-XXXXXX)
topo=$work/bench-delayline.yaml
id=bench-$$
cat > "$topo" <<'EOF'
name: bench-delayline
defaults:
  nic_bandwidth: 10 Gbit
sites:
  - name: a
    nodes: [{name: a1, nics: [{address: 10.241.1.1}]}]
  - name: b
    nodes: [{name: b1, nics: [{address: 10.242.1.1}]}]
wan:
  - sites: [a, b]
    latency: 10 ms
    bandwidth: 10 Gbit
EOF
cleanup() { "$bin" testbed down "$topo" --id "$id" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

in_a() { "$bin" testbed exec "$topo" a1 --id "$id" -- "$@"; }
in_b() { "$bin" testbed exec "$topo" b1 --id "$id" -- "$@"; }
state_dir() { "$bin" testbed status "$topo" --id "$id" | sed -n 's/^  state: *//p'; }

# streams SECONDS N [RATE]: N streams a1 -> b1; prints the receiver's JSON.
streams() {
  local seconds=$1 n=$2 rate=${3:-0bit}
  in_b "$bin" testbed traffic server --listen 10.242.1.1 --streams "$n" --timeout 120 > "$work/server.json" &
  local server=$!
  in_a "$bin" testbed traffic client --connect 10.242.1.1 --bind 10.241.1.1 --streams "$n" \
    --seconds "$seconds" --rate "$rate" > /dev/null
  wait "$server"
  cat "$work/server.json"
}

# ping_stats COUNT: RTT statistics a1 -> b1 at 10 ms intervals, as JSON.
ping_stats() {
  in_a ping -n -c "$1" -i 0.01 -I 10.241.1.1 10.242.1.1 | python3 -c '
import json, re, statistics, sys
t = sorted(float(m.group(1)) for m in re.finditer(r"time=([0-9.]+) ms", sys.stdin.read()))
print(json.dumps({"count": len(t), "min": t[0], "median": statistics.median(t), "mean": statistics.mean(t),
                  "p99": t[int(0.99 * (len(t) - 1))], "max": t[-1]}))'
}

delayline_stats() {
  local dir; dir=$(state_dir)
  for pid in $(sed -n 's/.*pid: \([0-9]*\).*/\1/p' "$dir/state.yaml"); do kill -USR1 "$pid"; done
  sleep 0.3
  for f in "$dir"/delayline-*.log; do echo "  $(basename "$f" .log): $(tail -n 1 "$f")"; done
}

echo "== gridbcast delay-line benchmark: $(nproc) CPUs, kernel $(uname -r), ${secs} s per measurement"

echo "-- latency: RTT a1 -> b1 across 2 x 10 ms (configured RTT 20 ms)"
"$bin" testbed up "$topo" --id "$id" --delay delayline 2>&1 | tail -n 1
idle=$(ping_stats 200)
echo "idle:                      $idle"
streams $((secs + 3)) 4 "250 Mbit" > "$work/load.json" &
load=$!
sleep 1.5
loaded=$(ping_stats $((secs * 100)))
wait "$load"
echo "under load:                $loaded"
echo "load (4 x 250 Mbit paced): $(cat "$work/load.json")"
echo "delay lines' own account (all packets of this phase):"
delayline_stats
"$bin" testbed down "$topo" --id "$id" >/dev/null 2>&1

echo "-- throughput: 8 streams through the delay line"
"$bin" testbed up "$topo" --id "$id" --delay delayline >/dev/null 2>&1
gso=$(streams "$secs" 8)
echo "GSO packets (default):     $gso"
"$bin" testbed down "$topo" --id "$id" >/dev/null 2>&1
"$bin" testbed up "$topo" --id "$id" --delay delayline --no-offload >/dev/null 2>&1
plain=$(streams "$secs" 8)
echo "1500-byte packets:         $plain"
echo "delay lines' own account (1500-byte phase):"
delayline_stats
"$bin" testbed down "$topo" --id "$id" >/dev/null 2>&1

python3 - "$idle" "$loaded" "$gso" "$plain" <<'EOF'
import json, sys
idle, loaded, gso, plain = (json.loads(a) for a in sys.argv[1:])
print("== summary")
print(f"added RTT beyond 2 x 10 ms, median: idle {idle['median'] - 20:.3f} ms, under 1 Gbit/s {loaded['median'] - 20:.3f} ms"
      f" (mean {loaded['mean'] - 20:.3f}, p99 {loaded['p99'] - 20:.3f})")
print(f"throughput, 8 streams: GSO {gso['bits_per_second'] / 1e9:.2f} Gbit/s, "
      f"1500-byte packets {plain['bits_per_second'] / 1e9:.2f} Gbit/s")
EOF
