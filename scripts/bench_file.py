#!/usr/bin/env python3
"""File-distribution benchmark: `gridbcast launch --file` inside the emulated
grid (`gridbcast testbed run`), against the max-flow lower bound and, when the
machine has the memory for every rank to hold it, the in-memory broadcast of
the same size. Prints one line per run: time, bound, ratio, largest rank RSS,
and how busy the machine's CPUs were (CPU seconds of every process the run
started over wall time x cores: near 100 % means the emulation, not the
network, set the pace). Needs root. Removes the source (unless --source) and
every copy at the end, also on failure.

  scripts/bench_file.py [TOPOLOGY] [--size 4GiB] [--windows 64MiB,512MiB]
                        [--dir /var/tmp] [--source FILE] [--in-memory auto|on|off]
                        [--compress auto|zstd|off]
"""
import argparse, json, os, resource, shutil, subprocess, sys, tempfile, time

from common import BIN, ROOT, SKIP, emulated_grid_unavailable, fmt_size, parse_size, require_binary


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd, timeout):
    """Runs cmd; returns (the launch's JSON summary, wall s, CPU s of its process tree)."""
    cpu0, t0 = children_cpu(), time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall, cpu = time.monotonic() - t0, children_cpu() - cpu0
    if out.returncode != 0:
        sys.exit(f"bench_file: {' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]), wall, cpu


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology", nargs="?", default=os.path.join(ROOT, "site-configs", "testbed-2x4.yaml"))
    ap.add_argument("--size", default="4GiB")
    ap.add_argument("--windows", default="64MiB", help="comma-separated --window values")
    ap.add_argument("--dir", default="/var/tmp", help="where the source and the copies go")
    ap.add_argument("--source", help="an existing file to send (default: random data of --size)")
    ap.add_argument("--in-memory", default="auto", choices=["auto", "on", "off"])
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--compress", choices=["auto", "zstd", "off"],
                    help="launch's --compress (default: launch's own, auto)")
    args = ap.parse_args()
    require_binary("bench_file")
    if emulated_grid_unavailable("bench_file"):
        return SKIP
    work = tempfile.mkdtemp(prefix="gridbcast-bench-file-", dir=args.dir)
    try:
        src = args.source
        if not src:
            src = os.path.join(work, "source.bin")
            size = parse_size(args.size)
            with open(src, "wb") as f:
                left = size
                while left:
                    n = min(left, 64 << 20)
                    f.write(os.urandom(n))
                    left -= n
        size = os.path.getsize(src)
        cores = os.cpu_count()
        ranks = 0
        print(f"# {os.path.basename(args.topology)}: {fmt_size(size, ' ')}, copies in {args.dir}, "
              f"{cores} cores")
        print(f"{'what':<24}{'seconds':>10}{'bound s':>10}{'x bound':>9}{'max RSS':>12}{'CPU busy':>10}")
        for window in args.windows.split(","):
            copies = os.path.join(work, "copies")
            r, wall, cpu = run([BIN, "testbed", "run", args.topology, "--", BIN, "launch", args.topology,
                                "--file", src, "--output", copies + "/{node}/copy.bin",
                                "--window", window, "--json"]
                               + (["--compress", args.compress] if args.compress else []), args.timeout)
            ranks = r["ranks"]
            if not r["verified"]:
                sys.exit("bench_file: the run was not verified")
            print(f"{'file, window ' + window:<24}{r['seconds']['median']:>10.2f}"
                  f"{r['max_flow_bound_seconds']:>10.2f}{r['ratio_to_max_flow_bound']:>9.3f}"
                  f"{r['peak_rss_bytes'] / 2**20:>9.1f} MiB{cpu / (wall * cores):>9.0%}", flush=True)
            shutil.rmtree(copies, ignore_errors=True)
        fits = size * ranks < 0.6 * mem_available()
        if args.in_memory == "on" or (args.in_memory == "auto" and fits):
            r, wall, cpu = run([BIN, "testbed", "run", args.topology, "--", BIN, "launch", args.topology,
                                "--size", str(size), "--json"], args.timeout)
            print(f"{'in memory':<24}{r['seconds']['median']:>10.2f}{r['max_flow_bound_seconds']:>10.2f}"
                  f"{r['ratio_to_max_flow_bound']:>9.3f}{r['peak_rss_bytes'] / 2**20:>9.1f} MiB"
                  f"{cpu / (wall * cores):>9.0%}")
        elif args.in_memory == "auto":
            print(f"# in memory: skipped, {ranks} x {fmt_size(size, ' ')} does not fit in this machine's memory")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
