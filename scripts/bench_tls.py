#!/usr/bin/env python3
"""TLS cost on loopback: site-configs/two-sites-tls.yaml (two sites of one node,
one WAN hop) with tls: true and tls: false, at 1 and 4 streams, each launch
`gridbcast launch TOPO --cert-dir DIR --size SIZE --iterations N --json`. The
configurations run interleaved for --rounds rounds, so load from other work
spreads over all of them; reported: the best and the median of the per-launch
median times, the bandwidth of the best, and the CPU seconds the whole job
(launcher and both ranks, without the SHA-256 check: --no-verify) used per GiB
moved, which other load disturbs far less than the time.

  scripts/bench_tls.py [--size 256MiB] [--iterations 3] [--rounds 5] [--json FILE]
"""
import argparse, json, os, resource, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "cli", "gridbcast")
TOPO = os.path.join(ROOT, "site-configs", "two-sites-tls.yaml")


def variant(tmp, tls, streams):
    text = open(TOPO).read().replace("streams: 4", f"streams: {streams}")
    text = text.replace("tls: true", f"tls: {'true' if tls else 'false'}")
    path = os.path.join(tmp, f"tls-{'on' if tls else 'off'}-{streams}.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="256MiB")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--bin", default=BIN, help="the gridbcast binary (default: build/cli/gridbcast)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gridbcast-tls-bench-") as tmp:
        certs = os.path.join(tmp, "certs")
        subprocess.run([a.bin, "certs", "init", certs], check=True, capture_output=True)
        subprocess.run([a.bin, "certs", "issue", TOPO, "--dir", certs], check=True, capture_output=True)
        configs = [(tls, s) for tls in (False, True) for s in (1, 4)]
        runs = {c: [] for c in configs}
        for _ in range(a.rounds):
            for tls, streams in configs:
                cmd = [a.bin, "launch", variant(tmp, tls, streams), "--cert-dir", certs,
                       "--size", a.size, "--iterations", str(a.iterations), "--json", "--no-verify"]
                before = children_cpu()
                out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
                cpu = children_cpu() - before
                j = json.loads(out.stdout)
                runs[(tls, streams)].append((j["seconds"]["median"], cpu, j["bytes"], j["iterations"]))
    print(f"# two-sites-tls.yaml, {a.size} x {a.iterations} iterations, {a.rounds} interleaved rounds")
    print("tls    streams   best s  median s   best GB/s   CPU s/GiB")
    results = []
    for (tls, streams), rs in runs.items():
        best = min(r[0] for r in rs)
        med = statistics.median(r[0] for r in rs)
        size = rs[0][2]
        gib_moved = size * rs[0][3] / (1 << 30)
        cpu_per_gib = statistics.median(r[1] for r in rs) / gib_moved
        print(f"{'on ' if tls else 'off'}    {streams:7d} {best:8.3f} {med:9.3f} {size / best / 1e9:11.2f} {cpu_per_gib:11.2f}")
        results.append({"tls": tls, "streams": streams, "best_s": best, "median_s": med,
                        "best_gbps": size / best / 1e9, "cpu_s_per_gib": cpu_per_gib})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
