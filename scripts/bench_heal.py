#!/usr/bin/env python3
"""Healing benchmark (docs/PERFORMANCE.md, "A node lost mid-file"): in the
emulated grid, `gridbcast launch --file` undisturbed, then the same with one
node's rank killed (SIGKILL) at a fraction of the undisturbed time. Prints
both times, their ratio, what the healed run sent again, and whether every
surviving copy verified (and the exit status, 3: completed on the survivors).
With --slow RATE the victim's links are shaped to RATE instead (`gridbcast
testbed shape`): a straggler, set aside while the others finish; it prints
when the others were done and when the straggler was. With --cut the
victim's NICs are cut instead (`testbed shape NODE --down`: its rank still
answers the launcher), with --cut-wan A-B the WAN link between sites A and B
(`testbed shape --wan A-B --down`): the ranks' progress deadline (--timeout)
notices, the launcher names who was cut off from the senders' stalled links,
and the others heal around it (or, where another WAN path exists, every node
finishes over it). With --slow and --kill-root-after S, the root's rank is
SIGKILLed S seconds into the stragglers' own run: a node holding a verified
copy sends the rest instead (docs/FILES.md, "A lost root"). --log FILE keeps the
second run's standard error, with timestamps. Needs root. Brings its own testbed up and down; removes the source and the
copies at the end, also on failure.

  scripts/bench_heal.py [TOPOLOGY] [--size 512MiB] [--victim w3] [--at 0.3]
                       [--slow 10Mbit [--kill-root-after S] | --cut | --cut-wan A-B]
                       [--timeout S] [--dir /var/tmp] [--log FILE]
"""
import argparse, json, os, shutil, signal, subprocess, sys, tempfile, threading, time

from common import BIN, ROOT, SKIP, emulated_grid_unavailable, parse_size, require_binary


def rank_pids(launcher_pid):
    """{GRIDBCAST_RANK: pid} of the launcher's children (ip netns exec becomes the rank)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != launcher_pid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except (OSError, IndexError, ValueError):
            continue
        if b"GRIDBCAST_RANK" in env:
            out[int(env[b"GRIDBCAST_RANK"])] = int(entry)
    return out


def launch(args, src, out_dir, env, victim=None, at=None, timeout=3600, tb_id=None):
    """One run; with a victim, at `at` s its rank is killed (or, with
    --slow, its node's links are shaped to that rate)."""
    cmd = [BIN, "launch", args.topology, "--backend", "netns", "--file", src,
           "--output", os.path.join(out_dir, "{node}", "copy"), "--json"]
    if args.timeout:
        cmd += ["--timeout", str(args.timeout)]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines, others_done, killed_root, stragglers_run = [], [], [], []

    def read_err():
        for line in p.stderr:
            lines.append(line)
            if "the others are done" in line and not others_done:
                # Its ranks: the root and each straggler the line names.
                stragglers_run.append(1 + line.split("now the straggler", 1)[-1].count("rank "))
                others_done.append(time.monotonic() - t0)
    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    hit = None
    if victim is not None:
        while time.monotonic() - t0 < at and p.poll() is None:
            time.sleep(0.01)
        if args.slow or args.cut or args.cut_wan:
            what = (["--wan", args.cut_wan] if args.cut_wan else [args.victim]) + \
                   (["--bandwidth", args.slow] if args.slow else ["--down"])
            shaped = subprocess.run([BIN, "testbed", "shape", args.topology, *what, "--id", tb_id],
                                    capture_output=True, text=True)
            if shaped.returncode != 0:
                p.kill()
                sys.exit(f"bench_heal: testbed shape failed:\n{shaped.stderr}")
        else:
            pid = rank_pids(p.pid).get(victim)
            if pid is None:
                p.kill()
                sys.exit(f"bench_heal: rank {victim} not found under the launcher")
            os.kill(pid, signal.SIGKILL)
        hit = time.monotonic() - t0
        if args.kill_root_after is not None:
            # The stragglers' own run: the root (rank 0 there) and each straggler.
            while not others_done and p.poll() is None:
                time.sleep(0.05)
            while p.poll() is None:
                ranks = rank_pids(p.pid)
                if 0 in ranks and len(ranks) == stragglers_run[0]:
                    break
                time.sleep(0.05)
            time.sleep(args.kill_root_after)
            pid = rank_pids(p.pid).get(0)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                killed_root.append(time.monotonic() - t0)
    # stdout here, stderr only by the reader (communicate() would read it too
    # and keep some of its lines from the reader).
    out = p.stdout.read()
    p.wait(timeout=timeout)
    reader.join(timeout=10)
    wall = time.monotonic() - t0
    summary = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    args.root_killed_at = killed_root[0] if killed_root else None
    return p.returncode, wall, hit, summary, "".join(lines), others_done[0] if others_done else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology", nargs="?", default=os.path.join(ROOT, "site-configs", "testbed-8x8.yaml"))
    ap.add_argument("--size", default="512MiB")
    ap.add_argument("--victim", default="w3", help="the node whose rank is killed")
    ap.add_argument("--at", type=float, default=0.3, help="when, as a fraction of the undisturbed time")
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--slow", metavar="RATE",
                    help="shape the victim's links to RATE (10Mbit) instead of killing it")
    ap.add_argument("--cut", action="store_true",
                    help="cut the victim's NICs (its rank still answers the launcher) instead of killing it")
    ap.add_argument("--cut-wan", metavar="A-B", help="cut the WAN link between sites A and B instead")
    ap.add_argument("--timeout", type=float, help="the launch's progress deadline (--timeout S)")
    ap.add_argument("--kill-root-after", type=float, metavar="S",
                    help="with --slow: SIGKILL the root S seconds into the stragglers' own run")
    ap.add_argument("--log", help="write the healed run's standard error here (with -v and timestamps)")
    args = ap.parse_args()
    if sum(map(bool, (args.slow, args.cut, args.cut_wan))) > 1:
        ap.error("say at most one of --slow, --cut and --cut-wan")
    if args.kill_root_after is not None and not args.slow:
        ap.error("--kill-root-after needs --slow (the root is killed in the stragglers' run)")
    require_binary("bench_heal")
    if emulated_grid_unavailable("bench_heal"):
        return SKIP
    names = subprocess.run([BIN, "plan", args.topology, "--format", "json"], capture_output=True, text=True)
    nodes = [n["name"] for n in json.loads(names.stdout)["nodes"]] if names.returncode == 0 else []
    if args.victim not in nodes:
        sys.exit(f"bench_heal: no node {args.victim} in {args.topology}")
    if args.cut_wan:
        sites = {n["site"] for n in json.loads(names.stdout)["nodes"]}
        if not any(args.cut_wan[:i] in sites and args.cut_wan[i + 1:] in sites
                   for i, c in enumerate(args.cut_wan) if c == "-"):
            sys.exit(f"bench_heal: --cut-wan {args.cut_wan} names no two sites of {args.topology} "
                     f"({', '.join(sorted(sites))})")
    victim = nodes.index(args.victim)
    tb_id = f"heal{os.getpid()}"
    env = dict(os.environ, GRIDBCAST_TESTBED_ID=tb_id)
    if args.log:
        env.update(GRIDBCAST_LOG_LEVEL="info", GRIDBCAST_LOG_TIMESTAMPS="1")
    work = tempfile.mkdtemp(prefix="gridbcast-bench-heal-", dir=args.dir)
    up = subprocess.run([BIN, "testbed", "up", args.topology, "--id", tb_id], capture_output=True, text=True)
    try:
        if up.returncode != 0:
            sys.exit(f"bench_heal: testbed up failed:\n{up.stderr}")
        src = os.path.join(work, "source.bin")
        with open(src, "wb") as f:
            left = parse_size(args.size)
            while left > 0:
                n = min(left, 8 << 20)
                f.write(os.urandom(n))
                left -= n
        rc, base, _, s0, err, _ = launch(args, src, os.path.join(work, "undisturbed"), env)
        if rc != 0:
            sys.exit(f"bench_heal: the undisturbed run failed ({rc}):\n{err[-3000:]}")
        print(f"undisturbed: {base:.2f} s, {s0.get('ranks')} ranks, verified {s0.get('verified')}")
        rc, healed, hit, s1, err, others = launch(args, src, os.path.join(work, "healed"), env,
                                                   victim, args.at * base, tb_id=tb_id)
        if args.log:
            with open(args.log, "w") as f:
                f.write(f"# {'slowed' if args.slow else 'cut' if args.cut or args.cut_wan else 'killed'} at {hit:.2f} s after the start\n" + err)
        resent = next((l.split("resume: ", 1)[1] for l in err.splitlines() if "resume: sent" in l), "?")
        if args.slow:
            st = s1.get("stragglers", [])
            named = [f"{x['node']} at {x['rate_bytes_per_second'] * 8 / 1e6:.1f} Mbit/s" for x in st]
            print(f"{args.victim} (rank {victim}) slowed to {args.slow} at {hit:.2f} s: exit status {rc}; "
                  f"stragglers {named}; the others done at "
                  + (f"{others:.2f} s = {others / base:.2f} x the undisturbed time" if others else "?")
                  + f"; all {healed:.2f} s; {s1.get('ranks')} ranks verified {s1.get('verified')}; "
                  f"the others' run {resent}")
            if args.kill_root_after is not None:
                took = s1.get("took_over", [])
                after = [l.split("resume: ", 1)[1] for l in err.splitlines() if "resume: sent" in l][-1:]
                print(f"  the root killed at {args.root_killed_at or 0:.2f} s in the stragglers' run; took over: "
                      + (", ".join(f"{t['node']} after {t['lost_node']} {t['after']}" for t in took) or "nobody")
                      + f"; the stragglers' copies from it: {after[0] if after else '?'}")
                return 0 if rc == 0 and s1.get("verified") and st and took else 1
            return 0 if rc == 0 and s1.get("verified") and st else 1
        missing = [m["node"] for m in s1.get("missing", [])]
        if args.cut or args.cut_wan:
            around = [" ".join(w["sites"]) for w in s1.get("routed_around", [])]
            what = f"WAN link {args.cut_wan}" if args.cut_wan else f"{args.victim} (rank {victim})"
            print(f"{what} cut at {hit:.2f} s: exit status {rc}, {healed:.2f} s in all = "
                  f"{healed / base:.2f} x the undisturbed time; {s1.get('ranks')} ranks verified "
                  f"{s1.get('verified')}, missing {missing}, routed around {around}; "
                  f"the healed run {resent}")
            return 0 if rc in (0, 3) and s1.get("verified") and (missing or around) else 1
        print(f"{args.victim} (rank {victim}) killed at {hit:.2f} s: exit status {rc}, "
              f"{healed:.2f} s in all = {healed / base:.2f} x the undisturbed time; "
              f"{s1.get('ranks')} surviving ranks verified {s1.get('verified')}, missing {missing}; "
              f"the healed run {resent}")
        return 0 if rc == 3 and s1.get("verified") else 1
    finally:
        subprocess.run([BIN, "testbed", "down", args.topology, "--id", tb_id], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
