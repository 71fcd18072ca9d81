#!/usr/bin/env python3
"""Multicast inside a site (issue 15), the paper's own plots re-done in the
emulated grid: broadcast latency (`gridbcast bench --method ack`, the slowest
rank's mean) against the number of nodes in one site, for multicast and the
tree algorithms, optionally with datagram loss on every node's lane.

  scripts/bench_multicast.py [--nodes 2,4,8,16,32,64] [--sizes 1KiB,64KiB]
                             [--algorithms multicast,binomial,multilane]
                             [--loss 0,0.1,0.5] [--nic 100Mbit] [--mtu 9000]
                             [--json FILE]

Each site is one `gridbcast testbed` of N nodes with two NICs of --nic, its
site saying `multicast: true` (with --mtu, `multicast: {mtu: M}`: the site's
bridges and veths take M-byte packets, and datagrams fill them). Loss: an nftables rule in every node's
namespace drops that share of arriving multicast datagrams, independently
per node (the TCP ring is untouched), as a lossy lane would. Needs root;
installs nftables with apt-get when --loss asks for it and it is missing.
Tears each testbed down, also on failure.
"""
import argparse, json, os, shutil, subprocess, sys, tempfile

from common import BIN, emulated_grid_unavailable, parse_size, require_binary

TOPOLOGY = """# One emulated site of {n} nodes for scripts/bench_multicast.py.
name: mcast-{n}
defaults:
  nic_bandwidth: {nic}
sites:
  - name: hall
    multicast: {multicast}
    nodes:
      - name: m[1-{n}]
        nics:
          - address: 10.231.1.[1-{n}]
          - address: 10.231.2.[1-{n}]
"""

LOSS_RULES = """table ip gridbcast_bench_loss {{
  chain arrive {{
    type filter hook prerouting priority -300; policy accept;
    ip daddr 224.0.0.0/4 {match}drop
  }}
}}
"""


def ensure_nft():
    if shutil.which("nft"):
        return
    print("# installing nftables (datagram loss rules)", file=sys.stderr)
    subprocess.run(["apt-get", "install", "-y", "nftables"], check=True, stdout=subprocess.DEVNULL)


def set_loss(topo, n, loss):
    """Drops `loss` of arriving multicast datagrams at every node (0: no rule)."""
    for i in range(1, n + 1):
        node = f"m{i}"
        subprocess.run([BIN, "testbed", "exec", topo, node, "--", "nft", "delete", "table", "ip",
                        "gridbcast_bench_loss"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if loss > 0:
            # numgen draws 0..9999; every datagram when the loss is whole.
            drop = int(round(loss * 10000))
            match = "" if drop >= 10000 else f"numgen random mod 10000 < {drop} "
            rules = LOSS_RULES.format(match=match)
            subprocess.run([BIN, "testbed", "exec", topo, node, "--", "nft", "-f", "-"], input=rules,
                           text=True, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="2,4,8,16,32,64")
    ap.add_argument("--sizes", default="1KiB,64KiB")
    ap.add_argument("--algorithms", default="multicast,binomial,multilane")
    ap.add_argument("--loss", default="0", help="comma-separated shares of datagrams lost, e.g. 0,0.1,0.5")
    ap.add_argument("--nic", default="100 Mbit")
    ap.add_argument("--mtu", type=int, help="the site's MTU (jumbo frames), e.g. 9000; default: 1500")
    ap.add_argument("--max-time", default="8", help="seconds per point (gridbcast bench --max-time)")
    ap.add_argument("--json")
    args = ap.parse_args()
    require_binary("bench_multicast")
    if emulated_grid_unavailable("bench_multicast"):
        return 0
    losses = [float(x) for x in args.loss.split(",")]
    if any(l > 0 for l in losses):
        ensure_nft()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    rows = []
    multicast = f"{{mtu: {args.mtu}}}" if args.mtu else "true"
    print(f"# one site, two {args.nic} NICs per node, MTU {args.mtu or 1500}; `gridbcast bench --method ack`: the slowest rank's "
          f"mean latency (us) over up to {args.max_time} s per point")
    print(f"{'nodes':>6}{'loss':>6}{'algorithm':>12}" + "".join(f"{s:>12}" for s in args.sizes.split(",")))
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(x) for x in args.nodes.split(",")]:
            topo = os.path.join(tmp, f"mcast-{n}.yaml")
            with open(topo, "w") as f:
                f.write(TOPOLOGY.format(n=n, nic=args.nic, multicast=multicast))
            subprocess.run([BIN, "testbed", "up", topo], check=True, stdout=subprocess.DEVNULL)
            try:
                for loss in losses:
                    set_loss(topo, n, loss)
                    out = subprocess.run(
                        [BIN, "testbed", "run", topo, "--", BIN, "bench", topo, "--method", "ack",
                         "--sizes", ",".join(str(s) for s in sizes), "--algorithms", args.algorithms,
                         "--max-time", args.max_time, "--json"],
                        check=True, capture_output=True, text=True, timeout=3600)
                    result = json.loads(out.stdout.strip().splitlines()[-1])
                    by_algo = {}
                    for p in result["points"]:
                        by_algo.setdefault(p["algorithm"], {})[p["bytes"]] = p
                        rows.append(dict(nodes=n, loss=loss, mtu=args.mtu or 1500, algorithm=p["algorithm"], bytes=p["bytes"],
                                         max_us=p["max_us"], avg_us=p["avg_us"],
                                         iterations=p["iterations"], verified=p["verified"]))
                    for algo, points in by_algo.items():
                        cells = "".join(f"{points[s]['max_us']:>12.0f}" if s in points else f"{'-':>12}"
                                        for s in sizes)
                        print(f"{n:>6}{loss:>6.2f}{algo:>12}{cells}", flush=True)
            finally:
                subprocess.run([BIN, "testbed", "down", topo], stdout=subprocess.DEVNULL)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if not all(r["verified"] for r in rows):
        print("bench_multicast: some copy did not match the root's data", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
