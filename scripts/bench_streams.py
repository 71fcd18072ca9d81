#!/usr/bin/env python3
"""WAN streams sweep on the emulated grid: the same broadcast with every WAN
link's `streams:` set to each value in turn, measured in `gridbcast testbed`
next to `gridbcast simulate`'s prediction and the lower bound. Configuration (d)
of docs/PERFORMANCE.md: a lossy WAN, where one TCP stream is held far below the
link by loss and RTT and the bundle's streams decide the time. Needs root.
Each variant brings its own testbed up and down (also on failure).

  scripts/bench_streams.py [TOPOLOGY] [--streams 1,2,4,8] [--size 32MiB]
                           [--algorithm multilane] [--iterations 3]
                           [--congestion reno,bbr] [--tls off,on] [--json FILE]

--congestion runs the sweep once per TCP congestion control, set in every node
namespace (net.ipv4.tcp_congestion_control) before the broadcast; without it
the namespaces keep what they inherit from the host. The choice matters: a
loss-based algorithm (reno, cubic) backs off at every random drop, BBR does not.
Linux lets a namespace default only to an algorithm the host lists in
net.ipv4.tcp_allowed_congestion_control (here: reno bbr), so reno stands for
the loss-based family.

--tls on sets `tls: true` on the WAN links and makes a throw-away grid CA and
node certificates for the run (`gridbcast certs`), so the bundle's scaling can
be compared with and without TLS.

TOPOLOGY defaults to site-configs/testbed-lossy.yaml (2 sites x 2 nodes, 1 Gbit
NICs, 10 ms one-way WAN at 1 Gbit/s with 0.1 % loss).
"""
import argparse, json, os, re, subprocess, sys, tempfile

from common import (BIN, ROOT, SKIP, emulated_grid_unavailable, host_congestion, require_binary,
                    simulate_congestion)

STREAMS_LINE = re.compile(r"^(\s*)streams:\s*\d+\s*$", re.M)
TLS_LINE = re.compile(r"^(\s*)tls:\s*(true|false)\s*$", re.M)


def vary(text, streams, tls):
    """The topology text with every `streams:` value (WAN links and defaults) and every
    `tls:` flag replaced."""
    out, n = STREAMS_LINE.subn(lambda m: f"{m.group(1)}streams: {streams}", text)
    if n == 0:
        sys.exit("bench_streams: the topology has no `streams:` line to vary "
                 "(add `streams: N` to its WAN links or to defaults.wan)")
    out, n = TLS_LINE.subn(lambda m: f"{m.group(1)}tls: {'true' if tls else 'false'}", out)
    if n == 0 and tls:
        sys.exit("bench_streams: --tls on needs a `tls: false` line on the WAN links to turn on")
    return out


def node_names(topo):
    plan = subprocess.run([BIN, "plan", topo, "--format", "json", "--size", "0"],
                          check=True, capture_output=True, text=True)
    return [n["name"] for n in json.loads(plan.stdout)["nodes"]]


def measure(topo, cc, args, cert_dir=None):
    """Brings a testbed up, sets `cc` in every node namespace, broadcasts, takes it down."""
    tb = ["--id", f"st{os.getpid()}"]
    up = subprocess.run([BIN, "testbed", "up", topo, *tb], capture_output=True, text=True)
    if up.returncode != 0:
        sys.exit(f"bench_streams: testbed up failed (exit {up.returncode}):\n{up.stderr}")
    try:
        if cc:
            allowed = open("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read().split()
            if cc not in allowed:
                sys.exit(f"bench_streams: a network namespace may only default to an allowed congestion "
                         f"control (net.ipv4.tcp_allowed_congestion_control: {' '.join(allowed)}), "
                         f"not {cc}")
            for node in node_names(topo):
                subprocess.run([BIN, "testbed", "exec", topo, node, *tb, "--", "sysctl", "-q", "-w",
                                f"net.ipv4.tcp_congestion_control={cc}"], check=True)
        out = subprocess.run(
            [BIN, "testbed", "run", topo, *tb, "--", BIN, "launch", topo, "--size", args.size,
             "--algorithm", args.algorithm, "--iterations", str(args.iterations), "--json",
             *(["--cert-dir", cert_dir] if cert_dir else [])],
            capture_output=True, text=True, timeout=1800)
    finally:
        subprocess.run([BIN, "testbed", "down", topo, *tb], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    if out.returncode != 0:
        sys.exit(f"bench_streams: {topo} failed (exit {out.returncode}):\n{out.stderr}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if not r["verified"]:
        sys.exit(f"bench_streams: {topo}: a copy did not verify")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology", nargs="?", default=os.path.join(ROOT, "site-configs", "testbed-lossy.yaml"))
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--size", default="32MiB")
    ap.add_argument("--algorithm", default="multilane")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--congestion", default="",
                    help="comma-separated TCP congestion controls to compare (default: the host's)")
    ap.add_argument("--tls", default="off",
                    help="off, on, or off,on: the WAN links' tls flag (certificates are made for the run)")
    ap.add_argument("--json")
    args = ap.parse_args()
    require_binary("bench_streams")
    if emulated_grid_unavailable("bench_streams"):
        return SKIP
    with open(args.topology) as f:
        text = f.read()
    host_cc = host_congestion()
    ccs = [c for c in args.congestion.split(",") if c] or [""]
    tls_modes = args.tls.split(",")
    if any(m not in ("off", "on") for m in tls_modes):
        sys.exit(f"bench_streams: --tls takes off, on or off,on, not {args.tls}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="gridbcast-streams-") as tmp:
        certs = os.path.join(tmp, "certs")
        if "on" in tls_modes:
            subprocess.run([BIN, "certs", "init", certs], check=True, stdout=subprocess.DEVNULL)
            subprocess.run([BIN, "certs", "issue", args.topology, "--dir", certs], check=True,
                           stdout=subprocess.DEVNULL)
        print(f"# {os.path.relpath(args.topology, ROOT)}: {args.algorithm}, {args.size}, "
              f"median of {args.iterations} in `gridbcast testbed`, predicted by `gridbcast simulate`")
        print(f"{'tcp cc':>8}{'tls':>5}{'streams':>8}{'measured s':>12}{'MB/s':>9}{'predicted s':>13}"
              f"{'residual':>10}{'lower bound s':>15}{'x bound':>9}")
        for cc in ccs:
            for mode in tls_modes:
                for s in [int(x) for x in args.streams.split(",")]:
                    topo = os.path.join(tmp, f"streams-{s}-tls-{mode}.yaml")
                    with open(topo, "w") as f:
                        f.write(vary(text, s, mode == "on"))
                    r = measure(topo, cc, args, certs if mode == "on" else None)
                    sim = subprocess.run([BIN, "simulate", topo, "--algorithm", args.algorithm,
                                          "--size", args.size, "--json",
                                          "--congestion", simulate_congestion(cc or host_cc)],
                                         check=True, capture_output=True, text=True)
                    p = json.loads(sim.stdout.strip().splitlines()[-1])
                    t, pred = r["seconds"]["median"], p["predicted_seconds"]
                    lb = r["lower_bound_seconds"]
                    rows.append(dict(congestion=cc or host_cc, tls=mode == "on", streams=s,
                                     bytes=r["bytes"], measured=t, predicted=pred, lower_bound=lb,
                                     seconds=r["seconds"]))
                    print(f"{cc or host_cc:>8}{mode:>5}{s:>8}{t:>12.3f}{r['bytes'] / t / 1e6:>9.1f}"
                          f"{pred:>13.3f}{(pred - t) / t:>+10.1%}{lb:>15.3f}{t / lb:>9.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
