#!/usr/bin/env python3
"""Loopback benchmark: gridbcast's algorithms on a topology (the embedded default
unless --topology), sizes 1 KiB .. 256 MiB (x4), with time, bandwidth, the ratio
to the topology's lower bound, the aggregate throughput ((p-1)*M/t) and, measured
in the same run, the loopback ceiling of a single TCP stream (2 ranks, chain).
With --peers, Open MPI's and MPICH's MPI_Bcast at the same sizes (TCP transports).

  scripts/bench_loopback.py [--sizes 1KiB,64MiB] [--algorithms multilane,binomial]
                            [--iterations N] [--peers] [--json FILE]
"""
import argparse, json, os, shutil, statistics, subprocess, sys

from common import BIN, ROOT, fmt_size, parse_size

ALGOS = ["multilane", "binomial", "scatter_rd", "scatter_ring", "scatter_ring_tuned", "chain", "binary"]


def launch(topology, size, algo, iterations):
    cmd = [BIN, "launch", "--size", str(size), "--algorithm", algo, "--iterations", str(iterations),
           "--json", "--no-verify"]
    if topology:
        cmd.insert(2, topology)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout)


def iterations_for(size, base):
    return max(3, min(base * 8, (256 << 20) * base // max(size, 1))) if size < (16 << 20) else base


def ceiling(size, iterations):
    pair = os.path.join(ROOT, "site-configs", "loopback-pair.yaml")
    r = launch(pair, size, "chain", iterations)
    return size / r["seconds"]["median"]


def build_peer(mpicc, out):
    src = os.path.join(ROOT, "bench", "mpi_bcast.c")
    if not shutil.which(mpicc):
        return None
    os.makedirs(os.path.dirname(out), exist_ok=True)
    subprocess.run([mpicc, "-O2", "-o", out, src], check=True)
    return out


def run_peer(kind, exe, ranks, size, iterations):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               MPI_BCAST_SKIP_FINALIZE="1")
    if kind == "openmpi":
        cmd = ["mpirun.openmpi", "--oversubscribe", "--mca", "btl", "tcp,self", "--mca",
               "btl_tcp_if_include", "lo", "-np", str(ranks), exe, str(size), str(iterations)]
    else:
        cmd = ["mpiexec.mpich", "-n", str(ranks), "-genv", "UCX_TLS", "tcp,self", exe, str(size),
               str(iterations)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    except subprocess.TimeoutExpired:
        return None
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", default="", help="site-config (default: the embedded default)")
    ap.add_argument("--sizes", default="1KiB,4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB,64MiB,256MiB")
    ap.add_argument("--algorithms", default=",".join(ALGOS))
    ap.add_argument("--iterations", type=int, default=5, help="iterations at large sizes")
    ap.add_argument("--peers", action="store_true", help="also run Open MPI and MPICH MPI_Bcast")
    ap.add_argument("--json", help="write all figures to this file")
    args = ap.parse_args()
    if not os.path.exists(BIN):
        sys.exit(f"{BIN} not found: run scripts/setup.sh first")
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    algos = args.algorithms.split(",")
    results = []
    print(f"# gridbcast loopback benchmark, {os.cpu_count()} cores, topology "
          f"{args.topology or '<embedded default>'}")
    print(f"{'algorithm':<20}{'size':>10}{'median s':>12}{'MiB/s':>10}{'x lower bound':>15}"
          f"{'aggregate GiB/s':>17}{'ceiling GiB/s':>15}")
    peers = {}
    if args.peers:
        for kind, cc in (("openmpi", "mpicc.openmpi"), ("mpich", "mpicc.mpich")):
            exe = build_peer(cc, os.path.join(ROOT, "build", "bench", f"mpi_bcast_{kind}"))
            if exe:
                peers[kind] = exe
    for size in sizes:
        n = iterations_for(size, args.iterations)
        ceil = ceiling(size, n) if size >= (64 << 10) else None
        for algo in algos:
            r = launch(args.topology, size, algo, n)
            t = r["seconds"]["median"]
            agg = (r["ranks"] - 1) * size / t if t > 0 else 0
            row = dict(algorithm=algo, bytes=size, ranks=r["ranks"], iterations=n, median=t,
                       min=r["seconds"]["min"], max=r["seconds"]["max"],
                       ratio_lower_bound=r["ratio_to_lower_bound"], aggregate_Bps=agg,
                       ceiling_Bps=ceil)
            results.append(row)
            print(f"{algo:<20}{fmt_size(size, ' '):>10}{t:>12.6f}{size / t / (1 << 20) if t else 0:>10.1f}"
                  f"{r['ratio_to_lower_bound']:>15.2f}{agg / (1 << 30):>17.2f}"
                  f"{(ceil / (1 << 30)) if ceil else float('nan'):>15.2f}", flush=True)
        for kind, exe in peers.items():
            r = run_peer(kind, exe, results[-1]["ranks"], size, n)
            if r is None:
                print(f"{kind + ' MPI_Bcast':<20}{fmt_size(size, ' '):>10}{'failed':>12}")
                continue
            results.append(dict(algorithm=kind, bytes=size, ranks=r["ranks"], iterations=n,
                                median=r["median"], min=r["min"], max=r["max"]))
            print(f"{kind + ' MPI_Bcast':<20}{fmt_size(size, ' '):>10}{r['median']:>12.6f}"
                  f"{size / r['median'] / (1 << 20) if r['median'] else 0:>10.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
