#!/usr/bin/env python3
"""Rate-limit benchmark (docs/PERFORMANCE.md, "Rate limits"): in the emulated
grid, one broadcast without a limit, one with --max-rate (what each node sends
in all) and one with a WAN link's max_rate, each checked two ways:

  - each node's sending rate from its interfaces' counters (tx bytes of every
    lane interface in its namespace, Ethernet frames as the shaping counts
    them) over the broadcast's time, the busiest node against --max-rate;
  - the WAN's rate: the bytes the plan sends across it (its WAN transfers, in
    frames of 1514 bytes for 1448 of payload) over the broadcast's time;

and the time against the max-flow bound of the limited grid. Needs root.
Brings its own testbed up and down.

  scripts/bench_rate_limit.py [--topology testbed-2x4] [--size 64MiB]
                              [--max-rate "100 Mbit"] [--wan-max-rate "50 Mbit"]
                              [--algorithm multilane] [--runs 2] [--smoke]
"""
import argparse, json, os, re, subprocess, sys, tempfile

from common import BIN, ROOT, SKIP, emulated_grid_unavailable, require_binary

FRAME = 1514 / 1448  # wire bytes per payload byte (MTU 1500, TCP timestamps)


def run(cmd, env=None, timeout=900):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def must(p, what):
    if p.returncode != 0:
        sys.exit(f"bench_rate_limit: {what} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p


def bits(text):
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)bit\s*", text)
    if not m:
        sys.exit(f"bench_rate_limit: {text!r} is not a rate like '100 Mbit'")
    return float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[m.group(2)]


def tx_bytes(topo, tb_id, nodes):
    """{node: tx bytes of every interface but lo} in each node's namespace."""
    out = {}
    for node in nodes:
        p = must(run([BIN, "testbed", "exec", topo, node, "--id", tb_id, "--", "cat",
                      "/proc/net/dev"]), f"reading {node}'s counters")
        total = 0
        for line in p.stdout.splitlines()[2:]:
            name, data = line.split(":", 1)
            if name.strip() != "lo":
                total += int(data.split()[8])
        out[node] = total
    return out


def with_wan_limit(src, dst, rate):
    """`src` with `max_rate: RATE` in defaults.wan (same name: the testbed's
    namespaces are found by it)."""
    out, done = [], False
    for line in open(src):
        out.append(line)
        if not done and re.match(r"^  wan:\s*$", line):
            out.append(f"    max_rate: {rate}\n")
            done = True
    if not done:
        sys.exit(f"bench_rate_limit: {src} has no defaults.wan block to add max_rate to")
    with open(dst, "w") as f:
        f.write("".join(out))


def one(label, topo, plan_topo, tb_id, env, nodes, args, extra, node_limit, wan_limit):
    plan = json.loads(must(run([BIN, "plan", plan_topo, "--size", args.size, "--algorithm",
                                args.algorithm, "--format", "json"] + extra), "plan").stdout)
    site = {n["rank"]: n["site"] for n in plan["nodes"]}
    wan_bytes = sum(t["length"] for t in plan["transfers"] if site[t["from"]] != site[t["to"]])
    bound = plan["max_flow_bound_seconds"]
    rows = []
    for i in range(args.runs):
        before = tx_bytes(topo, tb_id, nodes)
        p = must(run([BIN, "launch", plan_topo, "--backend", "netns", "--size", args.size,
                      "--algorithm", args.algorithm, "--json"] + extra, env), "launch")
        after = tx_bytes(topo, tb_id, nodes)
        j = json.loads(p.stdout.strip().splitlines()[-1])
        t = j["seconds"]["median"]
        rates = {n: (after[n] - before[n]) * 8 / t for n in nodes}
        busiest = max(rates, key=rates.get)
        wan_rate = wan_bytes * FRAME * 8 / t
        line = (f"{label} run {i + 1}: {t:.2f} s = {t / bound:.3f} x the bound ({bound:.2f} s); "
                f"busiest sender {busiest} {rates[busiest] / 1e6:.1f} Mbit/s")
        if node_limit:
            line += f" = {rates[busiest] / node_limit:.3f} x --max-rate"
        line += f"; WAN {wan_rate / 1e6:.1f} Mbit/s"
        if wan_limit:
            line += f" = {wan_rate / wan_limit:.3f} x its max_rate"
        print(line, flush=True)
        rows.append((t / bound, rates[busiest] / node_limit if node_limit else 0,
                     wan_rate / wan_limit if wan_limit else 0))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", default="testbed-2x4")
    ap.add_argument("--size", default="64MiB")
    ap.add_argument("--max-rate", default="100 Mbit")
    ap.add_argument("--wan-max-rate", default="50 Mbit")
    ap.add_argument("--algorithm", default="multilane")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--smoke", action="store_true",
                    help="8 MiB, one run each; fails when a limit is exceeded by more than 5 %%")
    args = ap.parse_args()
    if args.smoke:
        args.size, args.runs = "8MiB", 1
    require_binary("bench_rate_limit")
    if emulated_grid_unavailable("bench_rate_limit"):
        return SKIP
    topo = os.path.join(ROOT, "site-configs", args.topology + ".yaml")
    tb_id = f"rl{os.getpid() % 100000}"
    env = dict(os.environ, GRIDBCAST_TESTBED_ID=tb_id)
    nodes = [n["name"] for n in json.loads(must(run(
        [BIN, "plan", topo, "--size", "1", "--format", "json"]), "plan").stdout)["nodes"]]
    node_limit, wan_limit = bits(args.max_rate), bits(args.wan_max_rate)
    status = 0
    must(run([BIN, "testbed", "up", topo, "--id", tb_id]), "testbed up")
    try:
        with tempfile.TemporaryDirectory(prefix="gridbcast-bench-rate-") as work:
            limited_wan = os.path.join(work, args.topology + ".yaml")
            with_wan_limit(topo, limited_wan, args.wan_max_rate)
            print(f"{args.topology}, {args.algorithm} {args.size}:")
            one("no limit", topo, topo, tb_id, env, nodes, args, [], 0, 0)
            rows = one(f"--max-rate {args.max_rate}", topo, topo, tb_id, env, nodes, args,
                       ["--max-rate", args.max_rate], node_limit, 0)
            rows += one(f"WAN max_rate {args.wan_max_rate}", topo, limited_wan, tb_id, env, nodes,
                        args, [], 0, wan_limit)
            worst = max(max(r[1], r[2]) for r in rows)
            slowest = max(r[0] for r in rows)
            print(f"limits held within {(worst - 1) * 100:+.1f} % (worst); limited runs at most "
                  f"{slowest:.3f} x their limited bound")
            if args.smoke and worst > 1.05:
                status = 1
    finally:
        run([BIN, "testbed", "down", topo, "--id", tb_id])
    return status


if __name__ == "__main__":
    sys.exit(main())
