#!/usr/bin/env python3
"""The MPI provider with several ranks per node, in the emulated grid.

Brings up `gridbcast testbed` for TOPOLOGY under its own id and starts PPN
ranks in every node namespace (Open MPI by default; --peer mpich), then, for
every size, times bench/mpi_bcast.c (built with the peer's mpicc) with the
same sync as scripts/bench_peers.py (SYNC root, every rank times its own call)
in these configurations:

  mpi          the MPI library alone (its own MPI_Bcast; intra-node shared
               memory with Open MPI's vader)
  mpi-han      Open MPI alone with its own hierarchical collectives (coll/han,
               priority 100; not its default in 4.1)
  flat         + libgridbcast_mpi_provider_<peer>.so, GRIDBCAST_HIERARCHY=flat:
               one grid node per rank (today's behaviour before hierarchies)
  node         + the provider, GRIDBCAST_HIERARCHY=node: one leader per node
               namespace runs the plan between nodes, PMPI_Bcast inside a node
  node-lanes   as node, with GRIDBCAST_TRANSPORT=lanes (gridbcast's TCP lanes
               between the leaders)
  flat-lanes   as flat, with GRIDBCAST_TRANSPORT=lanes
  node-topo, node-lanes-topo
               as node and node-lanes with GRIDBCAST_TOPOLOGY=TOPOLOGY: the
               leaders are placed on the site-config's nodes (both NICs,
               sites, WAN streams) instead of an inferred one-NIC site

The namespaces share the host name, so a wrapper gives each rank its
node's name (from its namespace's) as GRIDBCAST_HOST and its eth0 address as GRIDBCAST_ADDRESS
(docs/MPI.md) and preloads the provider. The statistics line of rank 0 must
say how many broadcasts went hierarchical: all of them for node*, none for
flat*. Every copy is verified by mpi_bcast.c; the bytes that crossed the lane
interfaces are checked against (nodes - 1) x size per broadcast.

Needs root, ip and /dev/net/tun (exit 77 otherwise); the testbed always comes
down; only processes this script started are killed, by process group.

  scripts/bench_han.py [TOPOLOGY] [--ppn 4] [--sizes 16MiB] [--iterations 3]
                       [--configs mpi,flat,node,node-lanes] [--peer openmpi]
Example (as root, on the 2 shared cores):
  flock /tmp/gridbcast-cpu.lock scripts/bench_han.py site-configs/testbed-2x4.yaml \\
      --ppn 4 --sizes 16MiB --iterations 3 --json /tmp/han.json
"""
import argparse, json, os, re, shlex, shutil, subprocess, sys, tempfile, time

from common import BIN, ROOT, SKIP, emulated_grid_unavailable, fmt_size, parse_size, require_binary
from bench_peers import (LAUNCH_AGENT, PEERS, SRC, Testbed, interface_bytes, lane_interfaces, loadavg, log,
                         run_bounded, sweep_namespaces, traffic_delta)

# Run inside the node namespace by the launcher for every rank: the host name
# and address the provider should use, then the program with the provider.
RANK_WRAPPER = """#!/bin/sh
ns=$(ip netns identify $$)
addr=$(ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1)
# The testbed names a node's namespace PREFIX-n-NODE: NODE is its name in the site-config.
export GRIDBCAST_HOST="${ns##*-n-}" GRIDBCAST_ADDRESS="$addr"
# The namespaces share /dev/shm and the host name, so Open MPI's shared-memory
# segments (named after host, job and local rank) would collide between
# namespaces: each namespace gets its own directory.
export OMPI_MCA_btl_vader_backing_directory="%(shm)s/$ns"
mkdir -p "$OMPI_MCA_btl_vader_backing_directory"
if [ -n "$BENCH_HAN_PRELOAD" ]; then export LD_PRELOAD="$BENCH_HAN_PRELOAD"; fi
exec "$@"
"""

CONFIGS = {
    "mpi": {},
    "mpi-han": {"OMPI_MCA_coll_han_priority": "100"},
    "flat": {"GRIDBCAST_HIERARCHY": "flat", "GRIDBCAST_TRANSPORT": "mpi"},
    "node": {"GRIDBCAST_HIERARCHY": "node", "GRIDBCAST_TRANSPORT": "mpi"},
    "flat-lanes": {"GRIDBCAST_HIERARCHY": "flat", "GRIDBCAST_TRANSPORT": "lanes"},
    "node-lanes": {"GRIDBCAST_HIERARCHY": "node", "GRIDBCAST_TRANSPORT": "lanes"},
    "node-topo": {"GRIDBCAST_HIERARCHY": "node", "GRIDBCAST_TRANSPORT": "mpi", "GRIDBCAST_TOPOLOGY": "TOPOLOGY"},
    "node-lanes-topo": {"GRIDBCAST_HIERARCHY": "node", "GRIDBCAST_TRANSPORT": "lanes",
                        "GRIDBCAST_TOPOLOGY": "TOPOLOGY"},
}


def command(peer, exe, wrapper, ctx, ppn, size, iterations, warmup, env):
    hosts = ctx["nodes"]
    np = str(len(hosts) * ppn)
    devices = ",".join(ctx["lane_devices"])
    args = [wrapper, exe, str(size), str(iterations), "0", str(warmup), "root"]
    if peer == "mpich":
        c = ["mpiexec.mpich", "-launcher", "ssh", "-launcher-exec", ctx["agent"],
             "-localhost", ctx["mgmt_gateway"], "-hosts", ",".join(n["ns"] for n in hosts),
             "-ppn", str(ppn), "-n", np, "-genv", "UCX_TLS", "tcp,self", "-genv", "UCX_NET_DEVICES",
             devices, "-genv", "MPI_BCAST_SKIP_FINALIZE", "1"]
        for k, v in env.items():
            c += ["-genv", k, v]
        return c + args
    c = ["mpirun.openmpi", "--leave-session-attached",
         "--mca", "plm_rsh_agent", ctx["agent"], "--mca", "plm_rsh_no_tree_spawn", "1",
         "--mca", "routed", "direct", "--mca", "oob_tcp_if_include", ctx["mgmt_net"],
         "--mca", "btl", "tcp,vader,self", "--mca", "btl_tcp_if_include", devices,
         "--mca", "mpi_yield_when_idle", "1", "--oversubscribe",
         "--host", ",".join(f"{n['ns']}:{ppn}" for n in hosts), "-np", np]
    for k, v in env.items():
        c += ["-x", f"{k}={v}"]
    return c + args


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology", nargs="?", default=os.path.join(ROOT, "site-configs", "testbed-2x4.yaml"))
    ap.add_argument("--ppn", type=int, default=4, help="ranks per node namespace")
    ap.add_argument("--sizes", default="16MiB")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--configs", default="mpi,flat,node,node-lanes")
    ap.add_argument("--repeat", type=int, default=1, help="run the list of configurations this many times")
    ap.add_argument("--peer", default="openmpi", choices=sorted(PEERS))
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--grace", type=float, default=15)
    ap.add_argument("--id", help="testbed id (default: han<PID>)")
    ap.add_argument("--json")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    configs = [c for c in args.configs.split(",") if c.strip()]
    for c in configs:
        if c not in CONFIGS:
            sys.exit(f"bench_han: unknown configuration {c!r}; one of {', '.join(CONFIGS)}")
    if args.ppn < 1 or args.iterations < 1:
        sys.exit("bench_han: --ppn and --iterations must be at least 1")
    require_binary("bench_han")
    provider = os.path.join(ROOT, "build", "mpi", f"libgridbcast_mpi_provider_{args.peer}.so")
    if any(not c.startswith("mpi") for c in configs) and not os.path.exists(provider):
        sys.exit(f"bench_han: {provider} not found: build the providers first (scripts/setup.sh)")
    if emulated_grid_unavailable("bench_han"):
        return SKIP

    tmp = tempfile.mkdtemp(prefix="gridbcast-bench-han.")
    shm = tempfile.mkdtemp(prefix="gridbcast-bench-han.", dir="/dev/shm")
    tb, rows, failures = None, [], []
    settings = dict(topology=args.topology, ppn=args.ppn, peer=args.peer, warmup=args.warmup,
                    iterations=args.iterations, cpus=os.cpu_count())
    try:
        exe = os.path.join(tmp, f"mpi_bcast_{args.peer}")
        subprocess.run([PEERS[args.peer][0], "-O2", "-o", exe, SRC], check=True)
        agent = os.path.join(tmp, "launch-in-netns.sh")
        with open(agent, "w") as f:
            f.write(LAUNCH_AGENT % {"tmp": shlex.quote(tmp)})
        wrapper = os.path.join(tmp, "rank.sh")
        with open(wrapper, "w") as f:
            f.write(RANK_WRAPPER % {"shm": shm})
        for p in (agent, wrapper):
            os.chmod(p, 0o755)
        tb_id = args.id or f"han{os.getpid()}"
        tb = Testbed(args.topology, tb_id)
        tb.up(None)
        st = tb.state
        nodes = st["nodes"]
        devices = sorted(lane_interfaces(nodes[0]["ns"]))
        ctx = dict(nodes=nodes, agent=agent, mgmt_gateway=st["mgmt_gateway"], mgmt_net=st["mgmt_net"],
                   lane_devices=devices)
        base_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        log(f"testbed {st['prefix']} up: {len(nodes)} nodes x {args.ppn} ranks")
        for size in sizes:
            for rep in range(args.repeat):
                for name in configs:
                    env = {k: os.path.abspath(args.topology) if v == "TOPOLOGY" else v
                           for k, v in CONFIGS[name].items()}
                    if not name.startswith("mpi"):
                        env.update(BENCH_HAN_PRELOAD=provider, GRIDBCAST_STATS="1")
                    cmd = command(args.peer, exe, wrapper, ctx, args.ppn, size, args.iterations,
                                  args.warmup, env)
                    settings.setdefault("commands", {})[name] = " ".join(shlex.quote(c) for c in cmd)
                    l0, b0, t0 = loadavg(), interface_bytes(nodes), time.monotonic()
                    out, err, rc, note = run_bounded(cmd, base_env, args.timeout, args.grace)
                    wall = time.monotonic() - t0
                    sweep_namespaces(nodes, tmp)
                    traffic = traffic_delta(b0, interface_bytes(nodes))
                    res = None
                    for line in out.splitlines():
                        if line.lstrip().startswith("{") and '"verified"' in line:
                            res = json.loads(line)
                    if res is None:
                        failures.append(f"{name} at {fmt_size(size)}: no result "
                                        f"({rc if rc is not None else note}): {(out + err).strip()[-1500:]}")
                        log(failures[-1])
                        continue
                    stats = re.search(r"gridbcast provider .*", err)
                    hier = re.search(r"(\d+) hierarchical", stats.group(0)) if stats else None
                    expect_hier = name.startswith("node")
                    if not name.startswith("mpi"):
                        if not hier:
                            failures.append(f"{name}: no statistics line: {err.strip()[-800:]}")
                        elif (int(hier.group(1)) > 0) != expect_hier:
                            failures.append(f"{name}: {hier.group(0)}: {stats.group(0)}")
                    lane_bytes = sum(v for k, v in traffic.items() if k in devices)
                    need = (len(nodes) - 1) * size * (args.iterations + args.warmup) * 0.99
                    if lane_bytes < need:
                        failures.append(f"{name} at {fmt_size(size)}: only {lane_bytes} bytes crossed the "
                                        f"lane interfaces")
                    row = dict(config=name, bytes=size, time_s=res["rank_max"], avg_s=res["rank_avg"],
                               min_s=res["rank_min"], rel_stdev=res["slowest_rel_stdev"],
                               slowest_per_iteration=dict(min=res["min"], median=res["median"], max=res["max"]),
                               verified=res["verified"], lane_bytes=lane_bytes, wall_s=round(wall, 1),
                               load_before=l0, load_after=loadavg(), note=note, exit_status=rc,
                               stats=stats.group(0) if stats else "")
                    rows.append(row)
                    log(f"{fmt_size(size)} {name}: {res['rank_max']:.3f} s (lane bytes {lane_bytes}, "
                        f"load {l0[0]:.1f}){' ' + row['stats'] if row['stats'] else ''}")
    except Exception as e:  # reported below; the testbed still comes down
        failures.append(f"{type(e).__name__}: {e}")
        log(failures[-1])
    finally:
        if tb is not None:
            try:
                if tb.state:
                    sweep_namespaces(tb.state["nodes"], tmp)
            finally:
                tb.down()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)

    print(f"# {args.topology}: {args.ppn} ranks per node namespace, {args.peer}, root 0, "
          f"{args.iterations} samples after {args.warmup} warm-up; time = max over non-root ranks of the mean")
    print(f"{'size':>6}  {'config':<12}{'time s':>9}{'avg s':>9}{'slowest med':>12}{'stdev':>8}  verified")
    for r in rows:
        print(f"{fmt_size(r['bytes']):>6}  {r['config']:<12}{r['time_s']:>9.3f}{r['avg_s']:>9.3f}"
              f"{r['slowest_per_iteration']['median']:>12.3f}{r['rel_stdev']:>8.1%}  "
              f"{'yes' if r['verified'] else 'NO'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(settings=settings, rows=rows, failures=failures), f, indent=1)
    for r in rows:
        if not r["verified"]:
            failures.append(f"{r['config']} at {fmt_size(r['bytes'])}: NOT VERIFIED")
    for f_ in failures:
        print(f"bench_han: FAILED: {f_}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
