#!/usr/bin/env python3
"""mpi4py programs with gridbcast's MPI provider preloaded (docs/MPI.md).

Two modes:

  mpi4py_bcast.py --launch [--provider-openmpi SO] [--provider-mpich SO]
                  [--ranks 4] [--runs mpi,lanes,mpi:random]
      The test (ctest mpi.mpi4py_provider). Finds an interpreter with
      mpi4py (this one, else Debian's /usr/bin/python3) and which MPI mpi4py
      is linked against (ldd of mpi4py/MPI*.so), starts this script under
      that MPI's launcher with LD_PRELOAD=<its provider> and
      GRIDBCAST_STATS=1, once per transport (and algorithm), and checks that
      every rank verified every broadcast and that the provider's statistics
      line (printed by rank 0 at MPI_Finalize) counts exactly as many broadcasts
      through gridbcast as the ranks made at or above GRIDBCAST_MIN_BYTES: the
      same proof the C provider tests use (tests/mpi/provider_test.cpp).
      Exits 77 (skipped) when mpi4py is not installed.

  mpi4py_bcast.py (under mpiexec)
      The MPI program: comm.Bcast of NumPy arrays (1 KiB, 1 MiB, 16 MiB;
      several dtypes; every root, mostly non-zero), on COMM_WORLD and on a
      split communicator, and comm.bcast of Python objects, each checked on
      every rank. Prints one line per rank and, on rank 0, how many
      broadcasts should have gone through gridbcast.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys

SKIP = 77
MIN_BYTES = 64 * 1024  # GRIDBCAST_MIN_BYTES set by the launcher (the default)


# --------------------------------------------------------------------------
# The MPI program (one per rank).
# --------------------------------------------------------------------------
def rank_main():
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    min_bytes = int(os.environ.get("GRIDBCAST_MIN_BYTES", MIN_BYTES))
    checks, failures, expected = 0, [], 0

    def pattern(n_bytes, dtype, root, salt):
        dt = np.dtype(dtype)
        n = n_bytes // dt.itemsize
        rng = np.random.default_rng(n_bytes * 131 + root * 7 + salt)
        raw = rng.integers(0, 256, size=n * dt.itemsize, dtype=np.uint8)
        a = raw.view(dt).copy()
        if dt.kind in "fc":  # no NaNs: compare values, not bit patterns
            a = np.nan_to_num(a, nan=1.5, posinf=2.5, neginf=-3.5)
        return a

    def check(ok, what):
        nonlocal checks
        checks += 1
        if not ok:
            failures.append(what)

    def Bcast(c, n_bytes, dtype, root, salt, explicit_type=False):
        nonlocal expected
        want = pattern(n_bytes, dtype, root, salt)
        if c.Get_rank() == root:
            buf = want.copy()
        else:
            buf = np.full_like(want, 7)  # not the data
        if explicit_type:
            c.Bcast([buf, MPI._typedict[np.dtype(dtype).char]], root=root)
        else:
            c.Bcast(buf, root=root)
        if buf.nbytes >= min_bytes:
            expected += 1
        check(np.array_equal(buf, want) and buf.dtype == want.dtype,
              "Bcast %d bytes of %s from root %d on a communicator of %d"
              % (n_bytes, np.dtype(dtype).name, root, c.Get_size()))

    sizes = [1024, 1024 * 1024, 16 * 1024 * 1024]
    dtypes = [np.uint8, np.int32, np.float64, np.complex128, np.float32, np.int64]
    # Each size with each dtype, the roots taking turns (root 0 only once in four).
    i = 0
    for n_bytes in sizes:
        for dtype in dtypes:
            if n_bytes == sizes[-1] and i % 2:
                i += 1
                continue  # 16 MiB: half the dtypes are enough
            root = (i + 1) % size
            Bcast(comm, n_bytes, dtype, root, salt=i, explicit_type=(i % 3 == 0))
            i += 1
    # Every root, 1 MiB of doubles.
    for root in range(size):
        Bcast(comm, 1024 * 1024, np.float64, root, salt=100 + root)
    # A sub-communicator: the odd ranks and the even ranks, reversed order.
    sub = comm.Split(rank % 2, -rank)
    for root in range(sub.Get_size()):
        Bcast(sub, 1024 * 1024 + 8, np.int64, root, salt=200 + root)
    sub.Free()

    # Python objects: pickled, then its length and the bytes broadcast
    # (mpi4py 3: one MPI_Bcast of the size, one of the bytes).
    small = {"rank of root": 1, "list": list(range(10)), "text": "grid"}
    got = comm.bcast(small if rank == 1 else None, root=1)
    check(got == small, "bcast of a small dict from root 1")
    big = {"array": np.arange(300000, dtype=np.float64), "name": "big", "t": (1, 2, 3)}
    got = comm.bcast(big if rank == size - 1 else None, root=size - 1)
    check(isinstance(got, dict) and got["name"] == "big" and got["t"] == (1, 2, 3)
          and np.array_equal(got["array"], big["array"]),
          "bcast of a 2.3 MiB dict from root %d" % (size - 1))
    expected += 1  # the pickle of `big` (2.4 MB); its length and `small` are below min_bytes

    failed = comm.allreduce(len(failures))
    line = "mpi4py rank %d of %d: %d checks, %d failed" % (rank, size, checks, len(failures))
    if failures:
        line += ": " + "; ".join(failures)
    print(line, flush=True)
    comm.Barrier()
    if rank == 0:
        print("mpi4py expects %d broadcasts through gridbcast (%s, %s)"
              % (expected, MPI.Get_library_version().split(",")[0].strip(),
                 "mpi4py " + __import__("mpi4py").__version__), flush=True)
    return 1 if failed else 0


# --------------------------------------------------------------------------
# The test: launch, then check.
# --------------------------------------------------------------------------
PROBE = ("import importlib.util as u; m = u.find_spec('mpi4py.MPI'); "
         "print(m.origin if m else '', bool(u.find_spec('numpy')))")


def find_python():
    """An interpreter with mpi4py: this one, else Debian's /usr/bin/python3
    (python3-mpi4py installs there; `python3` on PATH may be another one)."""
    for python in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
        if not os.access(python, os.X_OK):
            continue
        r = subprocess.run([python, "-c", PROBE], capture_output=True, text=True)
        fields = r.stdout.split()
        if r.returncode == 0 and len(fields) == 2 and fields[0]:
            return python, fields[0], fields[1] == "True"
    return None, None, False


def mpi4py_flavour(origin):
    """Which MPI mpi4py's extension module is linked against, or None."""
    ldd = subprocess.run(["ldd", origin], capture_output=True, text=True)
    if re.search(r"libmpi\.so\.4\d", ldd.stdout):
        return "openmpi", origin
    if re.search(r"libmpich\.so", ldd.stdout):
        return "mpich", origin
    return None, origin + ": neither libmpi.so.40 (Open MPI) nor libmpich.so:\n" + ldd.stdout


def launch_command(flavour, ranks, env, argv):
    if flavour == "openmpi":
        launcher = shutil.which("mpirun.openmpi")
        # As tests/mpi/mpi_support.hpp: root allowed, more ranks than cores,
        # loopback only (the testbed may be adding and removing interfaces).
        c = ["/usr/bin/env", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
             launcher, "--oversubscribe", "--mca", "btl", "tcp,self",
             "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo",
             "-np", str(ranks)]
        for k, v in env:
            c += ["-x", "%s=%s" % (k, v)]  # into the ranks only, not into mpirun
    else:
        launcher = shutil.which("mpiexec.mpich")
        c = [launcher, "-n", str(ranks), "-genv", "UCX_TLS", "sm,self"]
        for k, v in env:
            c += ["-genv", k, v]
    if launcher is None:
        return None
    return c + argv


def run(cmd, timeout):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the launcher we started and its ranks
        out, err = p.communicate()
        return None, out, err
    return p.returncode, out, err


def launch_main(args):
    python, origin, numpy = find_python()
    if python is None:
        print("SKIP: mpi4py is not installed for %s or /usr/bin/python3"
              " (bash scripts/setup.sh installs python3-mpi4py)" % sys.executable)
        return SKIP
    if not numpy:
        print("FAIL: %s has mpi4py but not NumPy (apt-get install python3-numpy)" % python)
        return 1
    flavour, detail = mpi4py_flavour(origin)
    if flavour is None:
        print("FAIL: cannot tell which MPI mpi4py uses: " + detail)
        return 1
    provider = {"openmpi": args.provider_openmpi, "mpich": args.provider_mpich}[flavour]
    if not provider or not os.path.exists(provider):
        print("FAIL: mpi4py (%s) uses %s but gridbcast's provider for it was not built"
              " (%r); install the MPI's -dev package and reconfigure" % (detail, flavour, provider))
        return 1
    print("mpi4py: %s (%s), linked against %s; provider %s" % (detail, python, flavour, provider))

    status = 0
    for run_spec in args.runs.split(","):
        transport, _, algorithm = run_spec.partition(":")
        algorithm = algorithm or "auto"
        env = [("LD_PRELOAD", provider), ("GRIDBCAST_STATS", "1"),
               ("GRIDBCAST_TRANSPORT", transport), ("GRIDBCAST_ALGORITHM", algorithm),
               ("GRIDBCAST_MIN_BYTES", str(MIN_BYTES))]
        cmd = launch_command(flavour, args.ranks, env,
                             [python, os.path.abspath(__file__)])
        if cmd is None:
            print("FAIL: %s's launcher is not on PATH" % flavour)
            return 1
        print("$ " + " ".join(cmd), flush=True)
        rc, out, err = run(cmd, args.timeout)
        sys.stdout.write(out)
        problems = []
        if rc != 0:
            problems.append("exit status %s" % ("timeout" if rc is None else rc))
        # mpirun forwards each rank's output in pieces, so lines of two ranks
        # can run together: matched anywhere, not line by line.
        ok_ranks = re.findall(r"mpi4py rank (\d+) of %d: (\d+) checks, 0 failed" % args.ranks, out)
        if sorted(int(r) for r, _ in ok_ranks) != list(range(args.ranks)):
            problems.append("not every rank reported 0 failed checks")
        m = re.search(r"mpi4py expects (\d+) broadcasts through gridbcast", out)
        expected = int(m.group(1)) if m else None
        # The proof it went through gridbcast: the provider's line from rank 0.
        head = r"gridbcast provider \(%s, transport %s\) rank 0: (\d+) MPI_Bcast: (\d+) gridbcast" % (
            flavour, transport)
        s = re.search(head, err)
        if s is None:
            problems.append("no statistics line from the provider: it was not in the ranks")
        else:
            print(err[s.start():err.find("\n", s.start())])
            ours = int(s.group(2))
            if expected is None or ours != expected:
                problems.append("%d broadcasts through gridbcast, expected %s" % (ours, expected))
        if problems:
            status = 1
            sys.stdout.write("FAIL (%s): %s\n--- stderr ---\n%s\n" % (run_spec, "; ".join(problems), err))
        else:
            print("ok (%s): %d broadcasts through gridbcast" % (run_spec, expected), flush=True)
    return status


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--launch", action="store_true", help="run the test (else: be one rank)")
    p.add_argument("--provider-openmpi", default="")
    p.add_argument("--provider-mpich", default="")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--runs", default="mpi,lanes,mpi:random",
                   help="TRANSPORT[:ALGORITHM],... one launch each (default %(default)s)")
    p.add_argument("--timeout", type=float, default=240)
    args = p.parse_args()
    return launch_main(args) if args.launch else rank_main()


if __name__ == "__main__":
    sys.exit(main())
