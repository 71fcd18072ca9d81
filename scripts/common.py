"""What the benchmark and soak scripts share: where the gridbcast binary is,
sizes as the command line writes them, and the checks before a run."""
import os, shutil, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "cli", "gridbcast")
SKIP = 77  # what ctest counts as skipped (SKIP_RETURN_CODE)
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_size(s):
    """'64MiB', '1.5KiB', '4096' -> bytes."""
    s = s.strip()
    for u in sorted(UNITS, key=len, reverse=True):
        if s.endswith(u):
            return int(float(s[: -len(u)]) * UNITS[u])
    return int(s)


def fmt_size(n, sep=""):
    """bytes -> '64MiB' (or '64 MiB' with sep=' ') when exact, else '<n>B'."""
    for u in ("GiB", "MiB", "KiB"):
        if n >= UNITS[u] and n % UNITS[u] == 0:
            return f"{n // UNITS[u]}{sep}{u}"
    return f"{n}{sep}B"


def require_binary(tool):
    """Exits naming the set-up command when gridbcast has not been built."""
    if not os.path.exists(BIN):
        sys.exit(f"{tool}: {BIN} not found: run scripts/setup.sh first")


def emulated_grid_unavailable(tool):
    """True (after saying so) when this machine cannot run `gridbcast testbed`."""
    if os.geteuid() != 0 or not shutil.which("ip") or not os.path.exists("/dev/net/tun"):
        print(f"{tool}: skipped: the emulated grid needs root, ip (iproute2) and /dev/net/tun")
        return True
    return False


def host_congestion():
    """This host's TCP congestion control, which new network namespaces inherit."""
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        return f.read().strip()


def simulate_congestion(cc):
    """The `gridbcast simulate --congestion` model for a congestion control:
    bbr for BBR, otherwise loss-based (reno and cubic by name; others as cubic)."""
    return cc if cc in ("reno", "cubic", "bbr") else "cubic"
