#!/usr/bin/env python3
"""Emulated-grid benchmark: brings up `gridbcast testbed` for a topology, runs
every algorithm at each size through `gridbcast launch` inside it, and prints
the measured median next to `gridbcast simulate`'s prediction and the max-flow
bound. Needs root. Tears the testbed down at the end, also on failure.

  scripts/bench_testbed.py site-configs/testbed-8x8.yaml [--sizes 1MiB,16MiB]
                           [--algorithms multilane,binary] [--iterations 3] [--json FILE]

An algorithm written NAME/K runs with --lanes K (e.g. multilane/2 is the
two-lane plan on a grid whose nodes have more NICs), in the same testbed.
With `auto` among the algorithms, each size ends with auto's regret: its
measured median over the fastest algorithm's measured in the same run
(docs/PERFORMANCE.md, "Selection from the model"):

  scripts/bench_testbed.py site-configs/testbed-8x8.yaml --sizes 1KiB,64KiB,1MiB,16MiB \
      --algorithms auto,multilane,binomial,scatter_rd,chain --iterations 5
"""
import argparse, json, os, subprocess, sys

from common import BIN, host_congestion, parse_size, simulate_congestion

ALGOS = ["multilane", "binomial", "scatter_rd", "scatter_ring", "scatter_ring_tuned", "chain", "binary"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology")
    ap.add_argument("--sizes", default="1MiB,16MiB")
    ap.add_argument("--algorithms", default=",".join(ALGOS))
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    topo = args.topology
    subprocess.run([BIN, "testbed", "up", topo], check=True, stdout=subprocess.DEVNULL)
    rows = []
    cc = host_congestion()
    try:
        print(f"# {topo}: measured in `gridbcast testbed` (median of {args.iterations}), "
              f"predicted by `gridbcast simulate --congestion {simulate_congestion(cc)}` (host: {cc}; "
              f"a congestion control the topology names takes precedence)")
        print(f"{'algorithm':<20}{'size':>8}{'measured s':>12}{'predicted s':>13}{'residual':>10}"
              f"{'max-flow s':>15}{'x bound':>9}")
        for size_text in args.sizes.split(","):
            size = parse_size(size_text)
            measured = {}
            for spec in args.algorithms.split(","):
                algo, _, lanes = spec.partition("/")
                lane_args = ["--lanes", lanes] if lanes else []
                out = subprocess.run(
                    [BIN, "testbed", "run", topo, "--", BIN, "launch", topo, "--size", str(size),
                     "--algorithm", algo, "--iterations", str(args.iterations), "--json"] + lane_args,
                    check=True, capture_output=True, text=True, timeout=900)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                sim = subprocess.run([BIN, "simulate", topo, "--algorithm", algo, "--size", str(size),
                                      "--json", "--congestion", simulate_congestion(cc)] + lane_args,
                                     check=True, capture_output=True, text=True)
                p = json.loads(sim.stdout.strip().splitlines()[-1])
                # "x bound": over the max-flow bound (docs/ALGORITHMS.md), which on a
                # homogeneous grid is the simple one.
                t, pred, lb = r["seconds"]["median"], p["predicted_seconds"], r["max_flow_bound_seconds"]
                ran = r["per_iteration"][0]["algorithm"] if r.get("per_iteration") else r["algorithm"]
                label = f"auto ({ran})" if algo == "auto" else spec
                measured[spec] = (t, ran)
                rows.append(dict(algorithm=spec, ran=ran, bytes=size, measured=t, predicted=pred,
                                 lower_bound=lb, verified=r["verified"]))
                print(f"{label:<20}{size_text:>8}{t:>12.4f}{pred:>13.4f}{(pred - t) / t:>+10.1%}"
                      f"{lb:>15.4f}{t / lb:>9.2f}", flush=True)
            others = {k: v for k, v in measured.items() if k != "auto"}
            if "auto" in measured and others:
                fastest = min(others, key=lambda k: others[k][0])
                t_auto, ran = measured["auto"]
                regret = t_auto / others[fastest][0]
                rows.append(dict(regret=regret, bytes=size, auto_ran=ran, fastest=fastest))
                print(f"# {size_text}: auto ran {ran}, {t_auto:.4f} s; fastest measured {fastest}, "
                      f"{others[fastest][0]:.4f} s; regret {regret:.3f}", flush=True)
    finally:
        subprocess.run([BIN, "testbed", "down", topo], stdout=subprocess.DEVNULL)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
