#!/usr/bin/env python3
"""Compression benchmark (docs/PERFORMANCE.md, "Compression"): in the emulated
grid with its WAN slowed to --wan-bandwidth, `gridbcast launch --file` of a
compressible file (a tarball of the machine's source headers and
documentation, cut to --size) and of random bytes, with each --compress mode.
Prints per file and mode the median time over --repeats runs (the launch's
broadcast time, and the whole command's), its ratio to the max-flow bound of
the slowed grid, the bytes the windows took on the wire per byte of file, and
the speed-up over `--compress off`. Runs are interleaved (off, auto, zstd, off,
...) so that the machine's noise falls on every mode alike. Fails unless every
copy verified, and (--smoke) unless auto packed the tarball to under half and
sent the random bytes as they are. Needs root. Brings its own testbed up and
down; removes the sources, the copies and the slowed topology at the end,
also on failure.

  scripts/bench_compress.py [TOPOLOGY] [--size 64MiB] [--wan-bandwidth 50Mbit]
                            [--modes off,auto,zstd] [--data text,random] [--repeats 3]
                            [--dir /var/tmp] [--smoke]
"""
import argparse, json, os, re, shutil, statistics, subprocess, sys, tempfile, time

from common import BIN, ROOT, SKIP, emulated_grid_unavailable, fmt_size, parse_size, require_binary

# What the text file is made of: trees of text every Debian machine has.
TEXT_TREES = ["/usr/include", "/usr/share/doc", "/usr/share/perl5", "/usr/lib/python3"]


def slowed_topology(path, bandwidth, out):
    """The topology with every WAN link given `bandwidth` (a line after each
    `- sites: [...]` of its wan list)."""
    with open(path) as f:
        lines = f.read().splitlines()
    done, result, in_wan = 0, [], False
    for line in lines:
        result.append(line)
        if re.match(r"^wan:\s*$", line):
            in_wan = True
        m = re.match(r"^(\s*)- sites:", line)
        if in_wan and m:
            result.append(" " * (len(m.group(1)) + 2) + f"bandwidth: {bandwidth}")
            done += 1
    if not done:
        sys.exit(f"bench_compress: {path} lists no WAN link (a top-level wan: with - sites:)")
    with open(out, "w") as f:
        f.write("\n".join(result) + "\n")


def make_text(path, size):
    """The first `size` bytes of a tar of TEXT_TREES (again from the start if
    the tar is shorter)."""
    trees = [t for t in TEXT_TREES if os.path.isdir(t)]
    with open(path, "wb") as f:
        left = size
        while left > 0:
            tar = subprocess.Popen(["tar", "cf", "-", "--ignore-failed-read", *trees],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            while left > 0:
                block = tar.stdout.read(min(left, 1 << 20))
                if not block:
                    break
                f.write(block)
                left -= len(block)
            tar.kill()
            tar.wait()


def make_random(path, size):
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(left, 8 << 20)
            f.write(os.urandom(n))
            left -= n


def launch(topo, src, out_dir, mode, env, timeout):
    cmd = [BIN, "launch", topo, "--backend", "netns", "--file", src,
           "--output", os.path.join(out_dir, "{node}", "copy"), "--compress", mode, "--json"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"bench_compress: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    if not summary.get("verified"):
        sys.exit(f"bench_compress: --compress {mode} of {src} was not verified")
    wire = sum(f["wire_bytes"] for f in summary["files"])
    packed = any(f["compressed"] for f in summary["files"])
    shutil.rmtree(out_dir, ignore_errors=True)
    return summary, wall, wire, packed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology", nargs="?", default=os.path.join(ROOT, "site-configs", "testbed-2x4.yaml"))
    ap.add_argument("--size", default="64MiB")
    ap.add_argument("--wan-bandwidth", default="50Mbit", help="every WAN link's rate in the run")
    ap.add_argument("--modes", default="off,auto,zstd")
    ap.add_argument("--data", default="text,random")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--smoke", action="store_true",
                    help="also fail unless auto packed the text and not the random bytes")
    args = ap.parse_args()
    require_binary("bench_compress")
    if emulated_grid_unavailable("bench_compress"):
        return SKIP
    modes, datas = args.modes.split(","), args.data.split(",")
    for m in modes:
        if m not in ("off", "auto", "zstd"):
            sys.exit(f"bench_compress: --modes: {m} is not off, auto or zstd")
    for d in datas:
        if d not in ("text", "random"):
            sys.exit(f"bench_compress: --data: {d} is not text or random")
    size = parse_size(args.size)
    work = tempfile.mkdtemp(prefix="gridbcast-bench-compress-", dir=args.dir)
    tb_id = f"cz{os.getpid()}"
    env = dict(os.environ, GRIDBCAST_TESTBED_ID=tb_id)
    topo = os.path.join(work, "slowed.yaml")
    up = None
    try:
        slowed_topology(args.topology, args.wan_bandwidth, topo)
        sources = {}
        for d in datas:
            sources[d] = os.path.join(work, f"{d}.bin")
            (make_text if d == "text" else make_random)(sources[d], size)
        up = subprocess.run([BIN, "testbed", "up", topo, "--id", tb_id], capture_output=True, text=True)
        if up.returncode != 0:
            sys.exit(f"bench_compress: testbed up failed:\n{up.stderr}")
        print(f"# {os.path.basename(args.topology)} with the WAN at {args.wan_bandwidth}: "
              f"{fmt_size(size, ' ')} per file, median of {args.repeats}, {os.cpu_count()} cores", flush=True)
        print(f"{'file':<8}{'compress':<10}{'seconds':>9}{'whole':>9}{'bound s':>9}{'x bound':>9}"
              f"{'wire/byte':>11}{'vs off':>8}  every run (s)", flush=True)
        failed = []
        for d in datas:
            runs = {m: [] for m in modes}
            for _ in range(args.repeats):
                for m in modes:
                    runs[m].append(launch(topo, sources[d], os.path.join(work, "copies"), m, env,
                                          args.timeout))
            base = statistics.median(r[0]["seconds"]["median"] for r in runs["off"]) if "off" in runs else None
            for m in modes:
                secs = statistics.median(r[0]["seconds"]["median"] for r in runs[m])
                whole = statistics.median(r[1] for r in runs[m])
                bound = runs[m][0][0]["max_flow_bound_seconds"]
                wire = runs[m][0][2]
                per_byte = f"{wire / size:.3f}"
                vs = f"{base / secs:.2f} x" if base else ""
                each = " ".join(f"{r[0]['seconds']['median']:.2f}" for r in runs[m])
                print(f"{d:<8}{m:<10}{secs:>9.2f}{whole:>9.2f}{bound:>9.2f}{secs / bound:>9.3f}"
                      f"{per_byte:>11}{vs:>8}  {each}", flush=True)
                if args.smoke and m == "auto":
                    packed = runs[m][0][3]
                    if d == "text" and not (packed and wire < size / 2):
                        failed.append(f"auto did not pack the text to under half ({wire} bytes)")
                    if d == "random" and packed:
                        failed.append("auto packed random bytes")
        for f in failed:
            print(f"bench_compress: {f}", file=sys.stderr)
        return 1 if failed else 0
    finally:
        if up is not None:
            subprocess.run([BIN, "testbed", "down", topo, "--id", tb_id], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
