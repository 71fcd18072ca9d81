#!/usr/bin/env python3
"""Soak: back-to-back broadcasts of random sizes, roots and algorithms on the
emulated grid, every copy verified byte-exact by the launcher (SHA-256 against
the root's), and every rank's resident memory flat: after the first 100
broadcasts it may not grow by more than 5 %. Needs root (network namespaces);
brings the testbed up under its own id and always takes it down.

  scripts/soak.py [TOPOLOGY] [--iterations 2000] [--size 16MiB] [--seed 7] [--json FILE]

TOPOLOGY defaults to site-configs/testbed-2x4.yaml (2 sites x 4 nodes, 2 x 100
Mbit/s NICs, 10 ms WAN). Exit status 0 only when every broadcast was verified
and memory stayed flat; the last line says which check failed otherwise.
"""
import argparse, json, os, subprocess, sys, time

from common import BIN, ROOT, SKIP, emulated_grid_unavailable, require_binary

BASELINE = 100      # broadcasts before memory is taken as settled
MAX_GROWTH = 0.05   # allowed growth of the largest rank's resident set after that


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology", nargs="?", default=os.path.join(ROOT, "site-configs", "testbed-2x4.yaml"))
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--size", default="16MiB", help="largest size; each broadcast draws from [0, size]")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--timeout", type=int, default=7200, help="seconds for the whole soak")
    ap.add_argument("--json", help="write the launcher's per-broadcast figures here")
    args = ap.parse_args()
    if args.iterations <= BASELINE:
        sys.exit(f"soak: --iterations must be above {BASELINE} (the memory baseline)")
    require_binary("soak")
    if emulated_grid_unavailable("soak"):
        return SKIP
    tb_id = f"soak{os.getpid()}"
    cmd = [BIN, "testbed", "run", args.topology, "--id", tb_id, "--",
           BIN, "launch", args.topology, "--iterations", str(args.iterations), "--random-sizes",
           "--random-roots", "--algorithm", "random", "--size", args.size, "--seed", str(args.seed),
           "--json"]
    print("soak:", " ".join(cmd), flush=True)
    start = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    finally:
        subprocess.run([BIN, "testbed", "down", args.topology, "--id", tb_id],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - start
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-4000:])
        print(f"soak: FAILED: the launch exited with status {r.returncode} after {wall:.0f} s")
        return 1
    out = json.loads(r.stdout.strip().splitlines()[-1])
    per = out["per_iteration"]
    if len(per) != args.iterations or not out["verified"]:
        print(f"soak: FAILED: {len(per)} of {args.iterations} broadcasts reported, verified={out['verified']}")
        return 1
    base = max(p["max_rss_bytes"] for p in per[:BASELINE])
    later = max(p["max_rss_bytes"] for p in per[BASELINE:])
    growth = later / base - 1
    sizes = [p["bytes"] for p in per]
    algos = sorted({p["algorithm"] for p in per})
    print(f"soak: {args.iterations} broadcasts in {wall:.0f} s, sizes {min(sizes)}..{max(sizes)} bytes "
          f"({sum(sizes) / 2**30:.1f} GiB in total), {len({p['root'] for p in per})} roots, "
          f"algorithms {', '.join(algos)}; all verified byte-exact (SHA-256)")
    print(f"soak: largest rank resident set: {base / 2**20:.1f} MiB over the first {BASELINE}, "
          f"{later / 2**20:.1f} MiB after ({growth:+.2%}; limit {MAX_GROWTH:+.0%}); "
          f"rejected connections {out['rejected_connections']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if growth > MAX_GROWTH:
        print("soak: FAILED: resident memory grew")
        return 1
    print("soak: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
