#!/usr/bin/env python3
"""The file peers table (docs/PERFORMANCE.md, "Files against the tools people
use"): the same file from the same root node to every other node of an
emulated grid, by

  gridbcast    `gridbcast launch --file` (the netns backend)
  pdcp         pdsh's pdcp over ssh, its default fan-out (32)
  clush        ClusterShell's `clush --copy`, flat: every node from the root,
               its default fan-out (64)
  clush-tree   the same in ClusterShell's tree mode, a gateway per site (its
               first node other than the root), the fair one across sites
  scp          a plain scp loop, one node after the other: the naive baseline
  sbcast       Slurm's sbcast (its default fan-out, 8) in an allocation of
               every other node, under a Slurm started inside the grid:
               slurmctld in the root node's namespace, a slurmd in every
               other node's (as the sshds, in a mount namespace of its own),
               munged on the host (its socket is a file, reached from every
               namespace), all under the run's directory

With --tree N the source is a directory of N files (--size in all, in
directories of 100; sbcast copies files only and is left out), copied with
pdcp -r, clush --copy, scp -r and gridbcast's --file DIR, and every copy is
checked file by file.

Every other node runs a real sshd in its namespace, started here with a host
key and a client key made for this run, in a mount namespace of its own in
which the destination directory is that node's own. Every copy but
gridbcast's is made from inside the root node's namespace to the nodes' first
lane addresses: over the shaped lanes and WAN, never the management network.
Every copy is checked with SHA-256 against the source. The table gives each
tool's time (the whole command, gridbcast's start-up included), its ratio to the max-flow bound (`gridbcast plan`) and how many
times faster gridbcast was. Needs root and Debian's pdsh, clustershell,
openssh-server, slurm-wlm and munge (scripts/setup.sh installs them). Removes every process, mount,
key and copy it made, also on failure.

  scripts/bench_file_peers.py [TOPOLOGY] [--size 64MiB] [--tools gridbcast,pdcp,clush,clush-tree,scp,sbcast]
                              [--tree N] [--root NODE] [--smoke]
"""
import argparse, hashlib, json, os, re, shutil, signal, socket, subprocess, sys, tempfile, time

from common import BIN, ROOT, SKIP, emulated_grid_unavailable, fmt_size, parse_size, require_binary

TOOLS = ["gridbcast", "pdcp", "clush", "clush-tree", "scp", "sbcast"]
PROGRAMS = {"pdcp": "pdcp", "clush": "clush", "clush-tree": "clush", "scp": "scp",
            "sbcast": "sbcast"}
SSH_TOOLS = ["pdcp", "clush", "clush-tree", "scp"]
SSHD = "/usr/sbin/sshd"


def run(cmd, timeout=3600, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def must(p, what):
    if p.returncode != 0:
        raise SystemExit(f"bench_file_peers: {what} failed ({p.returncode}):\n"
                         f"{(p.stderr or '')[-3000:]}{(p.stdout or '')[-1000:]}")
    return p


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Testbed:
    """The emulated grid of TOPOLOGY under a testbed id of this run, and an
    sshd in every node but the root."""

    def __init__(self, topo, work):
        self.topo, self.work = topo, work
        self.id = f"fp{os.getpid() % 100000}"
        plan = json.loads(must(run([BIN, "plan", topo, "--size", "1", "--format", "json"]),
                               "gridbcast plan").stdout)
        self.nodes = [n["name"] for n in plan["nodes"]]
        self.site = {n["name"]: n["site"] for n in plan["nodes"]}
        self.sshd = {}  # node -> (the testbed exec process, its pid file)
        self.slurm = None  # a Slurm inside the grid, when sbcast runs
        self.up = False

    def __enter__(self):
        must(run([BIN, "testbed", "up", self.topo, "--id", self.id]), "testbed up")
        self.up = True
        return self

    def __exit__(self, *exc):
        if self.slurm:
            self.slurm.stop()
        for node, (proc, pidfile) in self.sshd.items():
            try:
                with open(pidfile) as f:
                    os.kill(int(f.read().strip()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.up:
            run([BIN, "testbed", "down", self.topo, "--id", self.id])
        return False

    def exec_args(self, node):
        return [BIN, "testbed", "exec", self.topo, node, "--id", self.id, "--"]

    def address(self, node):
        """The node's first lane address (its lowest-named interface's)."""
        out = must(run(self.exec_args(node) + ["ip", "-4", "-o", "addr", "show"]),
                   f"addresses of {node}").stdout
        found = sorted((m.group(1), m.group(2)) for m in
                       re.finditer(r"^\d+:\s+(\S+)\s+inet\s+([0-9.]+)/", out, re.M)
                       if m.group(1) != "lo")
        if not found:
            raise SystemExit(f"bench_file_peers: {node} has no IPv4 address in its namespace")
        return found[0][1]

    def start_sshd(self, node, config, dest_root, mount_point):
        """sshd in `node`'s namespace, in a mount namespace where mount_point
        is dest_root/node (so every node's copy is its own)."""
        own = os.path.join(dest_root, node)
        os.makedirs(own, exist_ok=True)
        pidfile = os.path.join(self.work, f"sshd-{node}.pid")
        script = (f"mount --bind '{own}' '{mount_point}' && "
                  f"exec {SSHD} -D -e -f '{config}' -o 'PidFile={pidfile}'")
        log = open(os.path.join(self.work, f"sshd-{node}.log"), "w")
        proc = subprocess.Popen(self.exec_args(node) + [
            "unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            stdout=log, stderr=subprocess.STDOUT)
        self.sshd[node] = (proc, pidfile)


def cgroup_mounts():
    """Shell commands that mount, in the current mount namespace, the cgroup
    file systems this script sees under /sys/fs/cgroup (v1 hierarchies, v2,
    or both): `ip netns exec` mounts a sysfs of the namespace's own, without
    them, and slurmd will not start without them. A hierarchy mounted again
    is the same hierarchy."""
    steps = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4]
            if point != "/sys/fs/cgroup" and not point.startswith("/sys/fs/cgroup/"):
                continue
            rest = fields[fields.index("-") + 1:]
            fstype, opts = rest[0], rest[2].split(",")
            keep = [o for o in opts if o not in ("rw", "ro")]
            steps.append(f"mkdir -p {point} && mount -t {fstype} "
                         + (f"-o {','.join(keep)} " if keep else "") + f"{fstype} {point}")
    return " && ".join(steps) if steps else "true"


class Slurm:
    """munged, slurmctld in the root's namespace and a slurmd in every other
    node's, everything under work/slurm; stop() ends them all."""

    def __init__(self, tb, root, others, addresses, dest_root, mount_point):
        self.tb, self.root, self.others = tb, root, others
        self.dir = os.path.join(tb.work, "slurm")
        self.procs, self.munge_pid, self.conf = [], None, None
        self.env = dict(os.environ)
        tb.slurm = self  # stopped with the testbed, whatever happens from here
        d = self.dir
        for sub in ("munge", "ctld", "log", "run"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        os.chmod(os.path.join(d, "munge"), 0o700)
        key = os.path.join(d, "munge", "key")
        if os.access("/etc/munge/munge.key", os.R_OK):
            shutil.copy("/etc/munge/munge.key", key)
        else:
            must(run(["mungekey", "-c", "-k", key]), "mungekey")
        os.chmod(key, 0o600)
        self.sock = os.path.join(d, "munge", "sock")
        must(run(["munged", f"--socket={self.sock}", f"--key-file={key}",
                  f"--pid-file={d}/munge/pid", f"--log-file={d}/log/munged.log",
                  f"--seed-file={d}/munge/seed", "--force"]), "munged")
        self.munge_pid = os.path.join(d, "munge", "pid")
        plugins = "/usr/lib/x86_64-linux-gnu/slurm-wlm"
        # slurmctld runs in the root node's namespace at its lane address, but
        # checks that the host's name is the controller's: the namespaces
        # share the host's name.
        root_addr = tb.address(root)
        self.conf = os.path.join(d, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=gbpeers
SlurmctldHost={socket.gethostname().split(".")[0]}({root_addr})
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.sock}
StateSaveLocation={d}/ctld
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
PluginDir={plugins}
""")
            for n in others:
                f.write(f"NodeName={n} NodeAddr={addresses[n]} NodeHostname={n} CPUs=1 "
                        "RealMemory=1000 State=UNKNOWN\n")
            f.write(f"PartitionName=peers Nodes={','.join(others)} Default=YES MaxTime=60 State=UP\n")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        self.env["SLURM_CONF"] = self.conf
        self._start(root, ["slurmctld", "-D", "-i", "-f", self.conf], "slurmctld")
        for n in others:
            os.makedirs(os.path.join(d, f"spool-{n}"), exist_ok=True)
            own = os.path.join(dest_root, n)
            os.makedirs(own, exist_ok=True)
            script = (f"mount --bind '{own}' '{mount_point}' && {cgroup_mounts()} && "
                      f"exec slurmd -D -f '{self.conf}' -N {n}")
            self._start(n, ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                        f"slurmd-{n}")
        deadline = time.monotonic() + 60
        while True:
            p = run(self.client(["sinfo", "-h", "-t", "idle", "-o", "%D"]), env=self.env)
            if p.returncode == 0 and p.stdout.strip() == str(len(others)):
                break
            if time.monotonic() > deadline:
                # slurmctld's logs, then the first slurmd's.
                names = sorted(os.listdir(os.path.join(d, "log")),
                               key=lambda f: (not f.startswith("slurmctld"), f))[:4]
                logs = "".join(f"== {f}\n" + open(os.path.join(d, "log", f)).read()[-800:]
                               for f in names)
                raise SystemExit(f"bench_file_peers: Slurm did not bring {len(others)} nodes up: "
                                 f"{p.stdout.strip()} {p.stderr.strip()}\n{logs}")
            time.sleep(0.3)

    def _start(self, node, argv, name):
        log = open(os.path.join(self.dir, "log", f"{name}.out"), "w")
        self.procs.append(subprocess.Popen(self.tb.exec_args(node) + argv, stdout=log,
                                           stderr=subprocess.STDOUT, env=self.env))

    def client(self, argv):
        """A Slurm client command in the root's namespace."""
        return self.tb.exec_args(self.root) + ["env", f"SLURM_CONF={self.conf}"] + argv

    def stop(self):
        if self.conf and self.procs:
            run(self.client(["scancel", "--quiet", "--full", "-u", "root"]), env=self.env, timeout=30)
        for name in ["slurmctld"] + [f"slurmd-{n}" for n in self.others]:
            pidfile = os.path.join(self.dir, "run", f"{name}.pid")
            try:
                with open(pidfile) as f:
                    os.kill(int(f.read().strip()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        for proc in self.procs:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        try:
            with open(self.munge_pid) as f:
                os.kill(int(f.read().strip()), signal.SIGTERM)
        except (OSError, ValueError, TypeError):
            pass


def write_ssh_files(work):
    """A host key, a client key, sshd_config and ssh_config for this run."""
    host_key, client_key = os.path.join(work, "host_key"), os.path.join(work, "client_key")
    for key in (host_key, client_key):
        must(run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key]), "ssh-keygen")
    shutil.copy(client_key + ".pub", os.path.join(work, "authorized_keys"))
    sshd_config = os.path.join(work, "sshd_config")
    with open(sshd_config, "w") as f:
        f.write(f"""Port 22
ListenAddress 0.0.0.0
HostKey {host_key}
AuthorizedKeysFile {work}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 200
MaxSessions 200
Subsystem sftp internal-sftp
""")
    ssh_config = os.path.join(work, "ssh_config")
    with open(ssh_config, "w") as f:
        f.write(f"""Host *
  User root
  IdentityFile {client_key}
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  BatchMode yes
  ConnectTimeout 20
""")
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
    return sshd_config, ssh_config


def wait_for_ssh(tb, root, addresses, ssh_config):
    deadline = time.monotonic() + 30
    for node, addr in addresses.items():
        while True:
            p = run(tb.exec_args(root) + ["ssh", "-F", ssh_config, addr, "true"], timeout=60)
            if p.returncode == 0:
                break
            if time.monotonic() > deadline:
                log = os.path.join(tb.work, f"sshd-{node}.log")
                raise SystemExit(f"bench_file_peers: sshd on {node} ({addr}) did not answer: "
                                 f"{p.stderr.strip()}\n{open(log).read()[-2000:]}")
            time.sleep(0.3)


def tree_digest(top):
    """SHA-256 over every regular file's path, mode and bytes below `top`, in
    sorted order: equal for two trees with the same files."""
    h = hashlib.sha256()
    for d, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(d, name)
            h.update(os.path.relpath(path, top).encode() + b"\0")
            h.update(oct(os.lstat(path).st_mode & 0o7777).encode() + b"\0")
            h.update(bytes.fromhex(sha256(path)))
    return h.hexdigest()


def make_tree(top, files, size):
    """`files` files of about size/files random bytes each, 100 to a directory."""
    each = size // files
    for i in range(files):
        d = os.path.join(top, f"d{i // 100:04d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:06d}"), "wb") as f:
            f.write(os.urandom(each + (1 if i < size % files else 0)))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology", nargs="?",
                    default=os.path.join(ROOT, "site-configs", "testbed-2x4.yaml"))
    ap.add_argument("--size", default="64MiB")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--root", help="the root node (default: the topology's first)")
    ap.add_argument("--dir", default="/var/tmp", help="where the source and the copies go")
    ap.add_argument("--tree", type=int, metavar="N",
                    help="the source is a directory of N files of --size in all")
    ap.add_argument("--smoke", action="store_true",
                    help="4 MiB on testbed-2x2 with every tool: fails unless every copy verifies")
    args = ap.parse_args()
    if args.smoke:
        args.size = "4MiB"
        args.topology = os.path.join(ROOT, "site-configs", "testbed-2x2.yaml")
    require_binary("bench_file_peers")
    if emulated_grid_unavailable("bench_file_peers"):
        return SKIP
    tools = [t for t in args.tools.split(",") if t]
    if args.tree is not None:
        if args.tree < 1:
            raise SystemExit("bench_file_peers: --tree takes a number of files, at least 1")
        if "sbcast" in tools:
            print("sbcast: copies files only, not a tree: left out", flush=True)
            tools.remove("sbcast")
    for t in tools:
        if t not in TOOLS:
            raise SystemExit(f"bench_file_peers: unknown tool {t!r}; the tools: {', '.join(TOOLS)}")
    lacking = [PROGRAMS[t] for t in tools if t in PROGRAMS and not shutil.which(PROGRAMS[t])]
    if "sbcast" in tools:
        lacking += [p for p in ("slurmctld", "slurmd", "salloc", "sinfo", "munged")
                    if not shutil.which(p)]
    if any(t in SSH_TOOLS for t in tools) and not os.path.exists(SSHD):
        lacking.append(SSHD)
    if lacking:
        raise SystemExit(f"bench_file_peers: {', '.join(lacking)} not found: run scripts/setup.sh "
                         "(it installs pdsh, clustershell, openssh-server, slurm-wlm and munge)")
    size = parse_size(args.size)
    work = tempfile.mkdtemp(prefix="gridbcast-file-peers-", dir=args.dir)
    status = 0
    try:
        if args.tree is not None:
            src = os.path.join(work, "source")
            make_tree(src, args.tree, size)
            want = tree_digest(src)
        else:
            src = os.path.join(work, "source.bin")
            with open(src, "wb") as f:
                left = size
                while left > 0:
                    f.write(os.urandom(min(left, 1 << 20)))
                    left -= min(left, 1 << 20)
            want = sha256(src)
        # What each node's copy is called: the source's tree lands as a
        # directory of this name.
        copy_name = "copy" if args.tree is not None else "copy.bin"
        digest_of = tree_digest if args.tree is not None else sha256
        dest_root = os.path.join(work, "nodes")
        mount_point = os.path.join(work, "dest")  # each node's sshd sees dest_root/NODE here
        os.makedirs(mount_point)
        with Testbed(args.topology, work) as tb:
            root = args.root or tb.nodes[0]
            if root not in tb.nodes:
                raise SystemExit(f"bench_file_peers: no node {root!r}; the nodes: {', '.join(tb.nodes)}")
            others = [n for n in tb.nodes if n != root]
            root_rank = tb.nodes.index(root)
            plan = json.loads(must(run([BIN, "plan", args.topology, "--size", str(size), "--root",
                                        str(root_rank), "--format", "json"]), "plan").stdout)
            bound = plan["max_flow_bound_seconds"]
            addresses = {n: tb.address(n) for n in others}
            ssh_tools = [t for t in tools if t in SSH_TOOLS]
            if ssh_tools:
                sshd_config, ssh_config = write_ssh_files(work)
                for n in others:
                    tb.start_sshd(n, sshd_config, dest_root, mount_point)
                wait_for_ssh(tb, root, addresses, ssh_config)
            slurm = Slurm(tb, root, others, addresses, dest_root, mount_point) if "sbcast" in tools else None
            what = f" in {args.tree} files" if args.tree is not None else ""
            print(f"{os.path.basename(args.topology)}: {fmt_size(size, ' ')}{what} from {root} to "
                  f"{len(others)} nodes; max-flow bound {bound:.2f} s", flush=True)
            times = {}
            for tool in tools:
                for n in others:  # emptied, not replaced: each sshd has it bind-mounted
                    d = os.path.join(dest_root, n)
                    os.makedirs(d, exist_ok=True)
                    for entry in os.listdir(d):
                        path = os.path.join(d, entry)
                        if os.path.isdir(path) and not os.path.islink(path):
                            shutil.rmtree(path)
                        else:
                            os.unlink(path)
                # A file is copied to its name; a tree into the existing
                # destination directory, under the source's name (renamed
                # below).
                dest = os.path.join(mount_point, copy_name) if args.tree is None else mount_point
                recursive = ["-r"] if args.tree is not None else []
                hosts = ",".join(addresses[n] for n in others)
                if tool == "gridbcast":
                    cmd = [BIN, "launch", args.topology, "--backend", "netns", "--root",
                           str(root_rank), "--file", src, "--output",
                           os.path.join(dest_root, "{node}", copy_name), "--json"]
                    env = dict(os.environ, GRIDBCAST_TESTBED_ID=tb.id)
                elif tool == "pdcp":
                    cmd = tb.exec_args(root) + ["pdcp", "-R", "ssh", "-w", hosts] + recursive + [
                        src, dest]
                    env = dict(os.environ, PDSH_SSH_ARGS=f"-F {ssh_config} -2 -a -x -l%u %h")
                elif tool == "clush":
                    cmd = tb.exec_args(root) + [
                        "clush", "-w", hosts, "-O", f"ssh_options=-F {ssh_config}",
                        "-O", f"scp_options=-F {ssh_config}", "--copy", src, "--dest", dest]
                    env = None
                elif tool == "clush-tree":
                    topology_file = os.path.join(work, "clush-topology.conf")
                    # A gateway in every other site of two or more nodes (its
                    # first), which copies to the rest of its site; the root's
                    # own site, and nodes alone in theirs, directly.
                    gateways = {}
                    for n in others:
                        if tb.site[n] != tb.site[root]:
                            gateways.setdefault(tb.site[n], n)
                    routes = {g: [addresses[n] for n in others if tb.site[n] == site and n != g]
                              for site, g in gateways.items()}
                    routes = {g: below for g, below in routes.items() if below}
                    with open(topology_file, "w") as f:
                        f.write("[routes]\n")
                        if routes:
                            f.write(socket.gethostname().split(".")[0] + ": " +
                                    ",".join(addresses[g] for g in routes) + "\n")
                        for g, below in routes.items():
                            f.write(f"{addresses[g]}: {','.join(below)}\n")
                    env = dict(os.environ, CLUSTERSHELL_GW_PYTHON_EXECUTABLE="/usr/bin/python3")
                    cmd = tb.exec_args(root) + [
                        "clush", "--topology", topology_file, "-w", hosts,
                        "-O", f"ssh_options=-F {ssh_config}", "-O", f"scp_options=-F {ssh_config}",
                        "--copy", src, "--dest", dest]
                elif tool == "sbcast":
                    cmd = slurm.client(["salloc", "-N", str(len(others)), "-w", ",".join(others),
                                        "sbcast", "-f", src, dest])
                    env = slurm.env
                else:  # scp, one node after the other
                    loop = " && ".join(f"scp -q {' '.join(recursive)} -F {ssh_config} {src} "
                                       f"root@{addresses[n]}:{dest}" for n in others)
                    cmd = tb.exec_args(root) + ["sh", "-c", loop]
                    env = None
                t0 = time.monotonic()
                p = run(cmd, env=env)
                elapsed = time.monotonic() - t0
                if p.returncode != 0:
                    print(f"{tool}: failed ({p.returncode}): {p.stderr.strip()[-1500:]}", flush=True)
                    status = 1
                    continue
                note = ""
                if tool == "gridbcast":  # the whole command, as for the others
                    j = json.loads(p.stdout.strip().splitlines()[-1])
                    note = f" (the broadcast itself {j['seconds']['median']:.2f} s)"
                if args.tree is not None:
                    # pdcp -r, scp -r and clush --copy put the tree in the
                    # destination directory under the source's name.
                    # clush's tree mode leaves the nodes behind a gateway
                    # the tree's entries themselves: gathered as the copy.
                    top = sorted(os.listdir(src))
                    for n in others:
                        node_dir = os.path.join(dest_root, n)
                        copy = os.path.join(node_dir, copy_name)
                        kept = os.path.join(node_dir, os.path.basename(src))
                        if os.path.isdir(kept) and not os.path.exists(copy):
                            os.rename(kept, copy)
                        elif sorted(os.listdir(node_dir)) == top:
                            os.mkdir(copy)
                            for entry in top:
                                os.rename(os.path.join(node_dir, entry), os.path.join(copy, entry))
                bad = [n for n in others
                       if not os.path.exists(os.path.join(dest_root, n, copy_name))
                       or digest_of(os.path.join(dest_root, n, copy_name)) != want]
                verified = not bad
                if bad:
                    status = 1
                    first = os.path.join(dest_root, bad[0])
                    print(f"{tool}: {bad[0]} holds " + (", ".join(sorted(os.listdir(first))[:5])
                                                        or "nothing"), flush=True)
                times[tool] = elapsed
                print(f"{tool:10s} {elapsed:8.2f} s  {elapsed / bound:6.2f} x bound  "
                      f"verified {verified}" + (f" (bad: {', '.join(bad)})" if bad else "") + note,
                      flush=True)
            if "gridbcast" in times:
                g = times["gridbcast"]
                print("gridbcast faster by: " + ", ".join(
                    f"{t} {v / g:.1f} x" for t, v in times.items() if t != "gridbcast"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
