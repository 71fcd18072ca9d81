#!/usr/bin/env python3
"""Probe benchmark (docs/PERFORMANCE.md, "Probing the network"): in the
emulated grid, shaped to exactly what each topology declares, `gridbcast
probe` is run several times and compared with the shaping: every NIC's figure
(the mean of its send and receive rate when within 25 % of each other, else
the higher: what the measured topology gets),
each WAN link's latency and bandwidth, and how long the probe took. Then the
case of issue 29: testbed-hetero-nics declared without its NICs' bandwidths
(every NIC at the 50 Mbit/s default, no pace_lanes), launched with and
without --probe, against the true max-flow bound.
Needs root. Brings its own testbeds up and down.

  scripts/bench_probe.py [--runs 3] [--topologies testbed-2x4,testbed-hetero-nics,...]
                         [--size 64MiB] [--iterations 3] [--no-launch] [--smoke]
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile

from common import BIN, ROOT, SKIP, emulated_grid_unavailable, require_binary

DEFAULT_TOPOLOGIES = "testbed-2x4,testbed-hetero-nics,testbed-hetero-3x,testbed-8x8"


def config(name):
    return os.path.join(ROOT, "site-configs", name + ".yaml")


def run(cmd, env=None, timeout=900):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def probe_once(topo, env, extra):
    p = run([BIN, "probe", topo, "--backend", "netns", "--json"] + extra, env)
    if p.returncode != 0:
        sys.exit(f"bench_probe: probe of {topo} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def errors(j):
    """Worst NIC error (%), the WAN rows, from one probe's JSON."""
    nic = {}
    for row in j["rows"]:
        m = re.match(r"(.+ nic \d+) \(.*\) (send|receive)$", row["what"])
        if m and row["measured"] is not None:
            nic.setdefault(m.group(1), []).append((row["measured"], row["declared"]))

    def figure(rates):  # as topology::estimate makes a NIC's figure
        s, r = rates[0][0], rates[-1][0]
        return (s + r) / 2 if len(rates) == 2 and max(s, r) <= 1.25 * min(s, r) else max(s, r)

    worst_nic = (max((abs(figure(v) - v[0][1]) / v[0][1] * 100, k) for k, v in nic.items())
                 if nic else (0, "-"))
    wan = []
    for row in j["rows"]:
        if not row["what"].startswith("wan ") or row["measured"] is None:
            continue
        if row["unit"] == "s":
            wan.append(f"{row['what']}: {row['measured'] * 1e3:.2f} ms (declared "
                       f"{row['declared'] * 1e3:.1f}, {abs(row['measured'] - row['declared']) * 1e3:.2f} ms off)")
        else:
            off = (row["measured"] - row["declared"]) / row["declared"] * 100
            floor = " a floor: the NICs limited it" if row["lower_bound"] else ""
            wan.append(f"{row['what']}: {'>= ' if row['lower_bound'] else ''}"
                       f"{row['measured'] / 1e6:.0f} Mbit/s (declared {row['declared'] / 1e6:.0f}, "
                       f"{off:+.1f} %{floor})")
    return worst_nic, wan


def undeclared(src, dst):
    """`src` without its NICs' bandwidths and pace_lanes, as someone who does
    not know the hardware writes it."""
    out = []
    for line in open(src):
        if line.startswith("#") or "pace_lanes" in line:
            continue
        if re.match(r"\s+bandwidth: ", line) and not re.match(r"\s{4}bandwidth: ", line):
            continue  # a NIC's bandwidth (the WAN defaults' stays)
        out.append(line)
    # Same name: the testbed's namespaces are found by it.
    with open(dst, "w") as f:
        f.write("".join(out))


def launch(topo, env, args, extra):
    p = run([BIN, "launch", topo, "--backend", "netns", "--size", args.size, "--algorithm",
             "multilane", "-i", str(args.iterations), "--json"] + extra, env)
    if p.returncode != 0:
        sys.exit(f"bench_probe: launch failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--topologies", default=DEFAULT_TOPOLOGIES)
    ap.add_argument("--size", default="64MiB")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--no-launch", action="store_true", help="skip the undeclared hetero-nics case")
    ap.add_argument("--smoke", action="store_true",
                    help="one short probe of testbed-2x4, every NIC within 25 %% (the test suite's)")
    args = ap.parse_args()
    require_binary("bench_probe")
    if emulated_grid_unavailable("bench_probe"):
        return SKIP
    topologies = ["testbed-2x4"] if args.smoke else args.topologies.split(",")
    runs = 1 if args.smoke else args.runs
    extra = ["--lan-seconds", "0.1", "--wan-seconds", "0.2"] if args.smoke else []
    status = 0
    for name in topologies:
        topo = config(name)
        tb_id = f"pr{os.getpid() % 100000}"
        env = dict(os.environ, GRIDBCAST_TESTBED_ID=tb_id)
        up = run([BIN, "testbed", "up", topo, "--id", tb_id])
        try:
            if up.returncode != 0:
                sys.exit(f"bench_probe: testbed up {name} failed:\n{up.stderr}")
            times, nics = [], []
            for i in range(runs):
                j = probe_once(topo, env, extra)
                worst, wan = errors(j)
                times.append(j["seconds"])
                nics.append(worst[0])
                print(f"{name} run {i + 1}: probe {j['seconds']:.2f} s; worst NIC {worst[1]} "
                      f"{worst[0]:.1f} % off; " + "; ".join(wan))
            print(f"{name}: probe time median {statistics.median(times):.2f} s "
                  f"(min {min(times):.2f}, max {max(times):.2f}); worst NIC error over the runs "
                  f"{max(nics):.1f} %")
            if args.smoke and max(nics) > 25:
                status = 1
            if name == "testbed-hetero-nics" and not args.no_launch and not args.smoke:
                with tempfile.TemporaryDirectory(prefix="gridbcast-bench-probe-") as work:
                    blind = os.path.join(work, "testbed-hetero-nics-undeclared.yaml")
                    undeclared(topo, blind)
                    bound = json.loads(run([BIN, "plan", topo, "--size", args.size, "--format", "json"]).stdout)
                    true_bound = bound["max_flow_bound_seconds"]
                    for label, flags in (("without --probe", []), ("with --probe", ["--probe"])):
                        s = launch(blind, env, args, flags)
                        t = s["seconds"]["median"]
                        printed = s["ratio_to_max_flow_bound"]
                        print(f"undeclared hetero-nics, multilane {args.size} x {args.iterations}, {label}: "
                              f"median {t:.2f} s = {t / true_bound:.2f} x the true bound ({true_bound:.2f} s); "
                              f"it printed ratio {printed:.2f} ({abs(printed - t / true_bound) / (t / true_bound) * 100:.0f} % "
                              f"off the true ratio); lanes {s.get('lanes', '?')}")
        finally:
            run([BIN, "testbed", "down", topo, "--id", tb_id])
    return status


if __name__ == "__main__":
    sys.exit(main())
