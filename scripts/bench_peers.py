#!/usr/bin/env python3
"""gridbcast against MPICH's and Open MPI's MPI_Bcast inside one emulated grid.

Brings up `gridbcast testbed` for TOPOLOGY under its own id, then for every size
runs, in that grid and with the same measurement:

  gridbcast   `gridbcast bench --method barrier` with every --algorithms entry
  mpich       bench/mpi_bcast.c built with mpicc.mpich, one rank per node
              namespace, UCX over TCP on the nodes' lane interfaces only
  openmpi     bench/mpi_bcast.c built with mpicc.openmpi, one rank per node
              namespace, the TCP BTL on the lane interfaces only, yielding when idle

The method (gridbcast bench's "barrier"; bench/mpi_bcast.c with SYNC "root"
reproduces its sync message for message): an untimed sync (every rank reports to
the root, the root sends each rank a go), then every rank times its own call; WARMUP untimed broadcasts first; a fixed number of
samples. A rank's figure is its mean over the samples; Avg/Min/Max are over the
non-root ranks, and Max is the broadcast time (until the last rank holds the
data), used for MB/s and the ratio to the topology's lower bound. Every copy is
verified (gridbcast: against the root's data after each point; MPI: a pattern
check on every rank after the last broadcast).

Prints one table; --csv/--json write every row and every setting used, --plot an
SVG (log-log time against size, a line per stack/algorithm, the lower bound
dashed). Needs root, ip and /dev/net/tun (exit 77 otherwise, as ctest's skip).
The testbed always comes down; only processes this script started are killed,
by PID. No /etc/hosts lines are needed or added (the launch agent addresses
namespaces by name, control traffic goes over the testbed's management bridge).

  scripts/bench_peers.py [TOPOLOGY] [--sizes 1KiB,1MiB,16MiB,64MiB] [--iterations 20,10,4,3]
                         [--peers mpich,openmpi] [--algorithms multilane,binary,chain,binomial]
                         [--csv FILE] [--json FILE] [--plot FILE.svg]
"""
import argparse, ipaddress, json, os, shlex, shutil, signal, subprocess, sys, tempfile, threading, time

from common import BIN, ROOT, SKIP, emulated_grid_unavailable, fmt_size, parse_size, require_binary

SRC = os.path.join(ROOT, "bench", "mpi_bcast.c")
PEERS = {"mpich": ("mpicc.mpich", "mpiexec.mpich", "MPICH"),
         "openmpi": ("mpicc.openmpi", "mpirun.openmpi", "Open MPI")}
COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8C564B",
           "#7F7F7F", "#BCBD22"]

# ssh stand-in for hydra and orte: drop ssh-style options, run the command inside
# the node namespace the "host" names. The namespaces share /tmp and the host
# name, so Open MPI's daemons would all make their session directories under
# /tmp/ompi.<hostname>.<uid> at once and race ("mkdir ... File exists", about one
# launch in four failed): each gets its own base under this run's directory.
LAUNCH_AGENT = """#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    -o|-p|-l|-i|-F|-E|-b|-c|-m|-J|-L|-R|-D|-W|-S) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host=$1; shift
sessions=%(tmp)s/sessions/$host
mkdir -p "$sessions"
exec ip netns exec "$host" env OMPI_MCA_orte_tmpdir_base="$sessions" sh -c "$*"
"""


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def log(msg):
    print(f"# {msg}", file=sys.stderr, flush=True)


class Testbed:
    """A testbed this script brought up under its own id; `down` is idempotent."""

    def __init__(self, topology, tb_id):
        self.topology, self.id, self.is_up, self.state = topology, tb_id, False, None

    def up(self, delay):
        cmd = [BIN, "testbed", "up", self.topology, "--id", self.id] + (["--delay", delay] if delay else [])
        self.is_up = True  # from here on a failure may have left parts: always run down
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        self.up_output = (r.stdout + r.stderr).strip()
        self.delay_note = ""
        if r.returncode != 0:
            raise RuntimeError(f"testbed up failed ({r.returncode}): {self.up_output[-2000:]}")
        state_dir = None
        for line in self.up_output.splitlines():
            if "state in " in line:
                state_dir = line.rsplit("state in ", 1)[1].strip()
            if line.startswith("testbed: WAN latency"):
                self.delay_note = line
        if not state_dir:
            raise RuntimeError(f"testbed up did not say where its state is: {self.up_output}")
        self.state_dir = state_dir
        self.state = read_state(os.path.join(state_dir, "state.yaml"))

    def down(self):
        if not self.is_up:
            return
        r = subprocess.run([BIN, "testbed", "down", self.topology, "--id", self.id],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            log(f"testbed down exited {r.returncode}: {(r.stdout + r.stderr).strip()[-1000:]}")
        self.is_up = False


def read_state(path):
    """The few fields of the testbed's state.yaml this script needs (flat keys and
    the nodes list; the file is written by gridbcast in a fixed layout)."""
    state, nodes, node = {}, [], None
    section = None
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line or line.lstrip().startswith("#"):
                continue
            if not line.startswith(" "):
                key, _, value = line.partition(":")
                section = key.strip()
                if value.strip():
                    state[section] = value.strip()
                continue
            if section != "nodes":
                continue
            text = line.strip()
            if text.startswith("- "):
                node = {}
                nodes.append(node)
                text = text[2:]
            key, _, value = text.partition(":")
            if node is not None:
                node[key.strip()] = value.strip()
    state["nodes"] = sorted(nodes, key=lambda n: int(n["rank"]))
    for k in ("prefix", "mgmt_gateway", "mgmt_net"):
        if k not in state:
            raise RuntimeError(f"{path}: no {k}")
    if not state["nodes"] or any("ns" not in n or "mgmt" not in n for n in state["nodes"]):
        raise RuntimeError(f"{path}: no nodes with namespaces and management addresses")
    return state


def lane_interfaces(ns):
    """{device: network} of a node namespace's IPv4 interfaces other than lo and mgmt."""
    out = subprocess.run(["ip", "-n", ns, "-o", "-4", "addr", "show"], check=True, capture_output=True,
                         text=True).stdout
    lanes = {}
    for line in out.splitlines():
        f = line.split()
        dev, cidr = f[1], f[3]
        if dev in ("lo", "mgmt"):
            continue
        lanes[dev] = str(ipaddress.ip_interface(cidr).network)
    return lanes


def interface_bytes(nodes):
    """Bytes sent per interface name, summed over the node namespaces."""
    total = {}
    for n in nodes:
        out = subprocess.run(["ip", "-n", n["ns"], "-s", "-j", "link", "show"], check=True,
                             capture_output=True, text=True).stdout
        for link in json.loads(out):
            name = link["ifname"]
            if name == "lo":
                continue
            total[name] = total.get(name, 0) + link["stats64"]["tx"]["bytes"]
    return total


def traffic_delta(before, after):
    return {k: after.get(k, 0) - before.get(k, 0) for k in sorted(after)}


class Started:
    """One child this script started, in its own session so that its whole process
    group (and only that) can be signalled by the child's PID."""

    def __init__(self, cmd, env):
        self.cmd = cmd
        self.p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        self.out, self.err = [], []
        self.result_at = None
        self.result_seen = threading.Event()
        self.t_out = threading.Thread(target=self._read, args=(self.p.stdout, self.out, True), daemon=True)
        self.t_err = threading.Thread(target=self._read, args=(self.p.stderr, self.err, False), daemon=True)
        self.t_out.start()
        self.t_err.start()

    def _read(self, stream, sink, is_stdout):
        for line in stream:
            sink.append(line)
            if is_stdout and line.lstrip().startswith("{") and '"verified"' in line:
                self.result_at = time.monotonic()
                self.result_seen.set()

    def kill_group(self):
        try:
            os.killpg(self.p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.p.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()

    def finish(self):
        self.t_out.join(timeout=5)
        self.t_err.join(timeout=5)
        return "".join(self.out), "".join(self.err)


def run_bounded(cmd, env, timeout, grace):
    """Runs cmd; returns (stdout, stderr, returncode or None, note). The run may
    end badly only after its result line is out: then it gets `grace` seconds to
    exit (MPICH with UCX's TCP transport can hang in MPI_Finalize) before its
    process group is killed; without a result line it has `timeout` seconds."""
    s = Started(cmd, env)
    note = ""
    deadline = time.monotonic() + timeout
    rc = None
    while True:
        try:
            rc = s.p.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if s.result_seen.is_set() and now > s.result_at + grace:
            note = f"killed by the script {grace:.0f} s after its result line (did not exit)"
            s.kill_group()
            break
        if now > deadline:
            note = f"killed by the script after {timeout:.0f} s without a result"
            s.kill_group()
            break
    if rc is not None:
        # The leader exited; anything left in its group is still ours.
        try:
            os.killpg(s.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    out, err = s.finish()
    return out, err, rc, note


def sweep_namespaces(nodes, marker):
    """Kills processes left in the node namespaces whose command line names this
    run's temporary directory (orted, hydra_pmi_proxy, mpi_bcast of this run);
    anything else is reported and left alone. Returns what was killed."""
    killed = []
    for n in nodes:
        r = subprocess.run(["ip", "netns", "pids", n["ns"]], capture_output=True, text=True)
        for pid in r.stdout.split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(f"{n['name']}:{pid}:{cmdline[:80]}")
                except ProcessLookupError:
                    pass
            else:
                log(f"left alone in {n['ns']}: PID {pid} {cmdline[:120]}")
    return killed


def peer_command(kind, exe, ctx, size, iterations, warmup, root):
    hosts = ",".join(n["ns"] for n in ctx["nodes"])
    np = str(len(ctx["nodes"]))
    devices = ",".join(ctx["lane_devices"])
    args = [exe, str(size), str(iterations), str(root), str(warmup), "root"]
    if kind == "mpich":
        return ["mpiexec.mpich", "-launcher", "ssh", "-launcher-exec", ctx["agent"],
                "-localhost", ctx["mgmt_gateway"], "-hosts", hosts, "-ppn", "1", "-n", np,
                "-genv", "UCX_TLS", "tcp,self", "-genv", "UCX_NET_DEVICES", devices,
                "-genv", "MPI_BCAST_SKIP_FINALIZE", "1"] + args
    return ["mpirun.openmpi", "--leave-session-attached",
            "--mca", "plm_rsh_agent", ctx["agent"], "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "routed", "direct", "--mca", "oob_tcp_if_include", ctx["mgmt_net"],
            "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", devices,
            "--mca", "mpi_yield_when_idle", "1",
            "--host", hosts, "-np", np] + args


def version_of(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return " ".join((r.stdout + r.stderr).split())[:200]
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"


def svg_plot(title, series, bound):
    """Log-log time against size, a polyline per series, the lower bound dashed."""
    import math
    W, H, L, R, T, B = 900, 540, 80, 230, 40, 60
    pw, ph = W - L - R, H - T - B
    pts = [(x, y) for s in series for x, y in s[1] if x > 0 and y > 0] + [(x, y) for x, y in bound if y > 0]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'font-family="sans-serif" font-size="12">', '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{xml(title)}</text>']
    if not pts:
        out.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle">nothing to plot</text></svg>')
        return "\n".join(out) + "\n"
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    lx0, ly0 = math.floor(math.log10(min(xs))), math.floor(math.log10(min(ys)))
    lx1 = max(lx0 + 1, math.ceil(math.log10(max(xs))))
    ly1 = max(ly0 + 1, math.ceil(math.log10(max(ys))))
    px = lambda x: L + (math.log10(x) - lx0) / (lx1 - lx0) * pw
    py = lambda y: T + ph - (math.log10(y) - ly0) / (ly1 - ly0) * ph
    out.append('<g stroke="#dddddd">')
    for d in range(lx0, lx1 + 1):
        out.append(f'<line x1="{px(10 ** d):.2f}" y1="{T}" x2="{px(10 ** d):.2f}" y2="{T + ph}"/>')
    for d in range(ly0, ly1 + 1):
        out.append(f'<line x1="{L}" y1="{py(10 ** d):.2f}" x2="{L + pw}" y2="{py(10 ** d):.2f}"/>')
    out.append(f'</g>\n<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
    for d in range(lx0, lx1 + 1):
        out.append(f'<text x="{px(10 ** d):.2f}" y="{T + ph + 18}" text-anchor="middle">'
                   f'{si_bytes(10 ** d)}</text>')
    for d in range(ly0, ly1 + 1):
        out.append(f'<text x="{L - 6}" y="{py(10 ** d) + 4:.2f}" text-anchor="end">{si_time(10 ** d)}</text>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 15}" text-anchor="middle">message size '
               f'(log; 1 kB = 1000 bytes)</text>')
    out.append(f'<text x="18" y="{T + ph / 2}" text-anchor="middle" transform="rotate(-90 18 {T + ph / 2})">'
               f'broadcast time, max over ranks of the mean (log)</text>')
    allseries = [(name, p, False) for name, p in series] + [("lower bound", bound, True)]
    colour = 0
    for i, (name, points, dashed) in enumerate(allseries):
        c = "#555555" if dashed else COLOURS[colour % len(COLOURS)]
        colour += 0 if dashed else 1
        good = [(x, y) for x, y in points if x > 0 and y > 0]
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        poly = " ".join(f"{px(x):.2f},{py(y):.2f}" for x, y in good)
        out.append(f'<polyline class="series" data-name="{xml(name)}" fill="none" stroke="{c}" '
                   f'stroke-width="2"{dash} points="{poly}"/>')
        if not dashed:
            out += [f'<circle cx="{px(x):.2f}" cy="{py(y):.2f}" r="3" fill="{c}"/>' for x, y in good]
        ly = T + 10 + 20 * i
        out.append(f'<line x1="{L + pw + 15}" y1="{ly}" x2="{L + pw + 45}" y2="{ly}" stroke="{c}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{L + pw + 52}" y="{ly + 4}">{xml(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def xml(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def si_bytes(v):
    for u in ("B", "kB", "MB", "GB", "TB"):
        if v < 1000:
            return f"{v:g} {u}"
        v /= 1000
    return f"{v:g} PB"


def si_time(s):
    if s >= 1:
        return f"{s:g} s"
    if s >= 1e-3:
        return f"{s * 1e3:g} ms"
    return f"{s * 1e6:g} us"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology", nargs="?", default=os.path.join(ROOT, "site-configs", "testbed-8x8.yaml"))
    ap.add_argument("--sizes", default="1KiB,1MiB,16MiB,64MiB")
    ap.add_argument("--iterations", default="5",
                    help="timed samples per point (at least 2): one number, or one per size")
    ap.add_argument("--warmup", type=int, default=1, help="untimed broadcasts before each point")
    ap.add_argument("--algorithms", default="multilane,binary,chain,binomial",
                    help="gridbcast algorithms (comma-separated; empty for none)")
    ap.add_argument("--peers", default="mpich,openmpi", help="comma-separated: mpich, openmpi (empty for none)")
    ap.add_argument("--root", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run without a result")
    ap.add_argument("--grace", type=float, default=15,
                    help="seconds an MPI run may take to exit after its result line")
    ap.add_argument("--id", help="testbed id (default: peers<PID>)")
    ap.add_argument("--delay", choices=["auto", "netem", "delayline"], help="passed to testbed up")
    ap.add_argument("--csv")
    ap.add_argument("--json")
    ap.add_argument("--plot", help="write an SVG plot here")
    args = ap.parse_args()

    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    its = [int(x) for x in args.iterations.split(",")]
    if len(its) == 1:
        its = its * len(sizes)
    if len(its) != len(sizes) or min(its) < 2 or args.warmup < 0:
        sys.exit("bench_peers: --iterations: one number >= 2, or one per size")
    algos = [a for a in args.algorithms.split(",") if a.strip()]
    peers = [p for p in args.peers.split(",") if p.strip()]
    for p in peers:
        if p not in PEERS:
            sys.exit(f"bench_peers: unknown peer {p!r}; one of {', '.join(PEERS)}")
    require_binary("bench_peers")
    if emulated_grid_unavailable("bench_peers"):
        return SKIP
    for p in peers:  # installed by scripts/setup.sh: missing is an error, not a skip
        for tool in PEERS[p][:2]:
            if not shutil.which(tool):
                sys.exit(f"bench_peers: {tool} not found (scripts/setup.sh installs MPICH and Open MPI)")

    tmp = tempfile.mkdtemp(prefix="gridbcast-bench-peers.")
    tb = None
    rows, failures = [], []
    settings = {}
    started = time.time()
    load_samples = [loadavg()]
    stop_sampling = threading.Event()

    def sample_load():  # every 5 s while the benchmark runs
        while not stop_sampling.wait(5):
            load_samples.append(loadavg())

    sampler = threading.Thread(target=sample_load, daemon=True)
    sampler.start()
    try:
        exes = {}
        for p in peers:
            exe = os.path.join(tmp, f"mpi_bcast_{p}")
            cmd = [PEERS[p][0], "-O2", "-o", exe, SRC]
            subprocess.run(cmd, check=True)
            exes[p] = exe
            settings.setdefault("compile", {})[p] = " ".join(cmd)
        agent = os.path.join(tmp, "launch-in-netns.sh")
        with open(agent, "w") as f:
            f.write(LAUNCH_AGENT % {"tmp": shlex.quote(tmp)})
        os.chmod(agent, 0o755)

        tb_id = args.id or f"peers{os.getpid()}"
        tb = Testbed(args.topology, tb_id)
        tb.up(args.delay)
        st = tb.state
        nodes = st["nodes"]
        lanes = [lane_interfaces(n["ns"]) for n in nodes]
        devices = sorted(lanes[0])
        if not devices or any(sorted(l) != devices for l in lanes):
            raise RuntimeError("the node namespaces do not all have the same lane interfaces: "
                               + "; ".join(f"{n['name']}: {sorted(l)}" for n, l in zip(nodes, lanes)))
        ctx = dict(nodes=nodes, agent=agent, mgmt_gateway=st["mgmt_gateway"], mgmt_net=st["mgmt_net"],
                   lane_devices=devices)
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        settings.update(
            topology=args.topology, testbed_id=tb_id, testbed_prefix=st["prefix"],
            testbed_up=tb.up_output.splitlines(), ranks=len(nodes), root=args.root, warmup=args.warmup,
            method="barrier (gridbcast bench --method barrier; mpi_bcast.c SYNC root, the same sync): "
                   "every rank reports to the root, the root sends each rank a go, every rank times its "
                   "own broadcast call; per rank the mean over the samples; time = max over the non-root "
                   "ranks (gridbcast bench's Max)",
            lane_devices={d: sorted({l[d] for l in lanes}) for d in devices},
            management=f"{st['mgmt_net']} (launcher/mpiexec/mpirun side {st['mgmt_gateway']})",
            cpus=os.cpu_count(), kernel=os.uname().release,
            versions={"mpich": version_of(["mpichversion"]),
                      "openmpi": version_of(["mpirun.openmpi", "--version"]),
                      "ucx": version_of(["dpkg-query", "-W", "libucx0"])},
            mpich_notes="ch4:ucx as installed; busy-polls (no yield setting exists/used), so its 1 rank "
                        "per namespace compete for the 2 CPUs with everything else; hydra launches "
                        "proxies through the netns agent; the program exits after a final barrier "
                        "without MPI_Finalize (UCX 1.13 TCP teardown can hang) and a bad termination "
                        "is accepted only after the result line",
            openmpi_notes="TCP BTL on the lane interfaces only, mpi_yield_when_idle 1 (ranks yield when "
                          "idle), routed direct (hung at shutdown with 7+ namespaces otherwise), "
                          "orteds stay attached to mpirun (--leave-session-attached) so they die with it; "
                          "each orted gets its own session directory base (OMPI_MCA_orte_tmpdir_base set "
                          "by the launch agent) because the namespaces share /tmp and the host name",
            hosts_file="not touched: no /etc/hosts lines are needed or added",
            grace_seconds=args.grace, timeout_seconds=args.timeout)
        for p in peers:
            settings.setdefault("commands", {})[p] = " ".join(
                shlex.quote(c) for c in peer_command(p, exes[p], ctx, "BYTES", "ITERATIONS", args.warmup,
                                                     args.root))
        settings.setdefault("commands", {})["gridbcast"] = (
            f"{BIN} testbed run {args.topology} --id {tb_id} -- {BIN} bench {args.topology} --method barrier "
            f"--sizes BYTES --algorithms {','.join(algos)} --root {args.root} --warmup {args.warmup} "
            f"--min-iterations ITERATIONS --max-iterations ITERATIONS --max-time 100000 --json")
        log(f"testbed {st['prefix']} (id {tb_id}) up: {len(nodes)} ranks, lanes {', '.join(devices)}")
        bounds = {}

        for size, n_it in zip(sizes, its):
            if algos:
                cmd = [BIN, "testbed", "run", args.topology, "--id", tb_id, "--", BIN, "bench", args.topology,
                       "--method", "barrier", "--sizes", str(size), "--algorithms", ",".join(algos),
                       "--root", str(args.root), "--warmup", str(args.warmup), "--min-iterations", str(n_it),
                       "--max-iterations", str(n_it), "--max-time", "100000", "--json"]
                l0, b0, t0 = loadavg(), interface_bytes(nodes), time.monotonic()
                out, err, rc, note = run_bounded(cmd, os.environ.copy(), args.timeout, args.grace)
                wall = time.monotonic() - t0
                traffic = traffic_delta(b0, interface_bytes(nodes))
                l1 = loadavg()
                load_samples += [l0, l1]
                res = None
                if rc == 0:
                    res = json.loads(out.strip().splitlines()[-1])
                if res is None:
                    failures.append(f"gridbcast bench at {fmt_size(size)}: "
                                    f"{'exit status ' + str(rc) if rc is not None else note}: {err.strip()[-1500:]}")
                    log(failures[-1])
                else:
                    for pt in res["points"]:
                        bounds[size] = pt["lower_bound_us"] / 1e6
                        rows.append(dict(
                            stack="gridbcast", name=f"gridbcast {pt['algorithm']}", algorithm=pt["algorithm"],
                            bytes=size, iterations=pt["iterations"], warmup=args.warmup,
                            time_s=pt["max_us"] / 1e6, min_s=pt["min_us"] / 1e6, avg_s=pt["avg_us"] / 1e6,
                            rel_stdev=pt["rel_stdev"], lower_bound_s=pt["lower_bound_us"] / 1e6,
                            verified=pt["verified"], rank_mean_s=[v / 1e6 for v in pt["rank_us"]],
                            exit_status=rc, note=note, wall_s=wall, load_before=l0, load_after=l1,
                            tx_bytes_by_interface=traffic, traffic_shared_with="every algorithm of this size"))
                        log(f"{fmt_size(size)} gridbcast {pt['algorithm']}: {pt['max_us'] / 1e6:.4f} s")
            if size not in bounds:
                sim = subprocess.run([BIN, "simulate", args.topology, "--algorithm", "multilane", "--size",
                                      str(size), "--json"], check=True, capture_output=True, text=True)
                bounds[size] = json.loads(sim.stdout.strip().splitlines()[-1])["lower_bound_seconds"]
            for p in peers:
                cmd = peer_command(p, exes[p], ctx, size, n_it, args.warmup, args.root)
                l0, b0, t0 = loadavg(), interface_bytes(nodes), time.monotonic()
                out, err, rc, note = run_bounded(cmd, env, args.timeout, args.grace)
                wall = time.monotonic() - t0
                killed = sweep_namespaces(nodes, tmp)
                traffic = traffic_delta(b0, interface_bytes(nodes))
                l1 = loadavg()
                load_samples += [l0, l1]
                res = None
                for line in out.splitlines():
                    if line.lstrip().startswith("{") and '"verified"' in line:
                        res = json.loads(line)
                if res is None or res.get("bytes") != size or res.get("ranks") != len(nodes):
                    failures.append(f"{p} at {fmt_size(size)}: no result "
                                    f"({'exit status ' + str(rc) if rc is not None else note}): "
                                    f"{(out + err).strip()[-1500:]}")
                    log(failures[-1])
                    continue
                if rc != 0 or note:
                    note = (note or f"exit status {rc} after the result line") + " (accepted: results were out)"
                if killed:
                    note += f"; left in namespaces and killed: {len(killed)}"
                lane_bytes = sum(v for k, v in traffic.items() if k in devices)
                if lane_bytes < (len(nodes) - 1) * size * (n_it + args.warmup) * 0.99:
                    failures.append(f"{p} at {fmt_size(size)}: only {lane_bytes} bytes crossed the lane "
                                    f"interfaces; the data did not go through the emulated network")
                    log(failures[-1])
                rows.append(dict(
                    stack=p, name=f"{PEERS[p][2]} MPI_Bcast", algorithm="MPI_Bcast", bytes=size,
                    iterations=res["iterations"], warmup=res.get("warmup"), time_s=res["rank_max"],
                    min_s=res["rank_min"], avg_s=res["rank_avg"], rel_stdev=res["slowest_rel_stdev"],
                    lower_bound_s=bounds[size], verified=res["verified"], rank_mean_s=res["rank_mean"],
                    slowest_per_iteration=dict(min=res["min"], median=res["median"], max=res["max"]),
                    exit_status=rc, note=note, wall_s=wall, load_before=l0, load_after=l1,
                    tx_bytes_by_interface=traffic))
                log(f"{fmt_size(size)} {p}: {res['rank_max']:.4f} s{' (' + note + ')' if note else ''}")
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
    stop_sampling.set()
    sampler.join()
    load_samples.append(loadavg())
    settings["load_average_1min"] = dict(min=min(l[0] for l in load_samples), max=max(l[0] for l in load_samples),
                                         mean=round(sum(l[0] for l in load_samples) / len(load_samples), 2),
                                         start=load_samples[0], end=load_samples[-1])
    settings["wall_seconds"] = round(time.time() - started, 1)

    # One table.
    print(f"# {os.path.relpath(args.topology, ROOT) if args.topology.startswith(ROOT) else args.topology}: "
          f"{settings.get('ranks', '?')} ranks in `gridbcast testbed` (one per node namespace), method barrier, "
          f"warm-up {args.warmup}")
    print("# time = max over non-root ranks of the rank's mean call time (the broadcast time); "
          "min/avg over the same ranks")
    for p in peers:
        print(f"# {p}: {settings.get('commands', {}).get(p, '')}")
    la = settings["load_average_1min"]
    print(f"# load average (1 min) during the run: {la['min']:.2f} .. {la['max']:.2f}, mean {la['mean']:.2f} "
          f"({os.cpu_count()} CPUs); wall {settings['wall_seconds']:.0f} s")
    print("# a rank gets its go from the root up to one one-way latency after the root starts, so with this "
          "method small sizes can come out under the bound's latency term")
    print(f"{'size':>6}  {'stack/algorithm':<22}{'iters':>6}{'time s':>10}{'min s':>10}{'avg s':>10}"
          f"{'stdev':>8}{'MB/s':>9}{'x bound':>9}  verified")
    for size in sizes:
        for r in rows:
            if r["bytes"] != size:
                continue
            mbs = size / r["time_s"] / 1e6 if r["time_s"] > 0 else float("nan")
            r["MB_per_s"] = mbs
            r["ratio_to_lower_bound"] = r["time_s"] / r["lower_bound_s"]
            print(f"{fmt_size(size):>6}  {r['name']:<22}{r['iterations']:>6}{r['time_s']:>10.4f}"
                  f"{r['min_s']:>10.4f}{r['avg_s']:>10.4f}{r['rel_stdev']:>8.1%}{mbs:>9.2f}"
                  f"{r['ratio_to_lower_bound']:>9.2f}  {'yes' if r['verified'] else 'NO'}"
                  f"{'  ' + r['note'] if r['note'] else ''}")
        lb = next((r["lower_bound_s"] for r in rows if r["bytes"] == size), None)
        if lb:
            print(f"{fmt_size(size):>6}  {'lower bound':<22}{'':>6}{lb:>10.4f}")
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("stack,name,bytes,iterations,warmup,time_s,min_s,avg_s,rel_stdev,MB_per_s,lower_bound_s,"
                    "ratio_to_lower_bound,verified,exit_status,note\n")
            for r in rows:
                f.write(",".join(str(r.get(k, "")) for k in (
                    "stack", "name", "bytes", "iterations", "warmup", "time_s", "min_s", "avg_s", "rel_stdev",
                    "MB_per_s", "lower_bound_s", "ratio_to_lower_bound")) + f",{str(r['verified']).lower()},"
                        f"{r['exit_status']},\"{r['note']}\"\n")
            for k, v in settings.items():
                f.write(f"# {k}: {json.dumps(v)}\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(settings=settings, rows=rows, failures=failures), f, indent=1)
    if args.plot:
        series = {}
        for r in rows:
            series.setdefault(r["name"], []).append((r["bytes"], r["time_s"]))
        bound = sorted({(r["bytes"], r["lower_bound_s"]) for r in rows})
        title = f"{os.path.basename(args.topology)}: gridbcast and MPI_Bcast in the emulated grid (barrier method)"
        with open(args.plot, "w") as f:
            f.write(svg_plot(title, [(k, sorted(v)) for k, v in series.items()], bound))
    bad = [r for r in rows if not r["verified"]]
    for r in bad:
        failures.append(f"{r['name']} at {fmt_size(r['bytes'])}: NOT VERIFIED")
    expected = len(sizes) * (len(algos) + len(peers))
    if len(rows) != expected:
        failures.append(f"{len(rows)} of {expected} points measured")
    for f_ in failures:
        print(f"bench_peers: FAILED: {f_}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
