#!/usr/bin/env bash
# The compose testbed in a real container engine: Debian's podman (runc) with
# docker-compose 1.29 talking to a `podman system service` of this script's
# own. Brings testbed-2x2 up as containers (2 routers, 4 nodes, 1 launcher),
# runs an 8 MiB broadcast that the launcher verifies on every rank, checks that
# the WAN delay is there (each node's ping across sites, in its log), and tears
# everything down on any exit.
#
# The image: docker/Dockerfile's `prebuilt` target with this build's binary
# (stripped) on a Debian 12 base made with debootstrap from Debian's archive
# and `podman import` -- no registry. The base image is kept between runs
# (localhost/gridbcast-test/debian:12), and so is podman's layer cache of the
# runtime packages; the run's own image, containers, networks and service are
# removed.
#
# usage: scripts/test_compose.sh GRIDBCAST_BINARY [TOPOLOGY]
# Keeps to 720 s in all (ctest allows 1200), then fails and cleans up.
# Exits 77 (skipped) without root, without podman, docker-compose or
# debootstrap installed (scripts/setup.sh installs them), or when this machine
# cannot run containers (the reason is printed).
set -u
gridbcast=${1:?usage: test_compose.sh GRIDBCAST_BINARY [TOPOLOGY]}
gridbcast=$(readlink -f "$gridbcast")
here=$(cd "$(dirname "$0")/.." && pwd)
topology=$(readlink -f "${2:-$here/site-configs/testbed-2x2.yaml}")
skip() { echo "SKIP: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
say() { echo "test_compose: $*"; }

[ "$(id -u)" = 0 ] || skip "needs root (rootful podman: the routers need NET_ADMIN and a TUN)"
for p in podman docker-compose debootstrap runc strip; do
  command -v "$p" >/dev/null || skip "$p not installed (scripts/setup.sh installs it)"
done
[ -c /dev/net/tun ] || skip "no /dev/net/tun for the routers' delay lines"

run=gbc$$$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
base=localhost/gridbcast-test/debian:12
image=localhost/gridbcast-test/gridbcast:$run
T=$(mktemp -d /tmp/gridbcast-compose.XXXXXX)
service_pid=
export DOCKER_HOST=unix://$T/podman.sock
# One deadline for the whole test, below ctest's TIMEOUT (900 s) with room for
# the cleanup: ctest's kill would skip the EXIT trap and leave containers.
deadline=$((SECONDS + 720))
# Seconds a step may take: at most $1, and never past the deadline.
budget() {
  local left=$((deadline - SECONDS))
  [ "$left" -gt 0 ] || fail "out of time (the test's 720 s)"
  echo $(("$1" < left ? "$1" : left))
}
# Long steps run in the background, so that INT and TERM end the test at once.
step_pid=
step() {
  "$@" &
  step_pid=$!
  wait $step_pid
  local rc=$?
  step_pid=
  return $rc
}
compose() { step timeout "$(budget 300)" docker-compose -p "$run" -f "$T/compose.yaml" "$@"; }

cleanup() {
  local rc=$?
  # A step cut short by a signal: stopped before anything is removed.
  if [ -n "$step_pid" ]; then
    kill "$step_pid" 2>/dev/null
    wait "$step_pid" 2>/dev/null
  fi
  if [ -f "$T/compose.yaml" ] && [ -n "$service_pid" ]; then
    if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
      timeout 60 docker-compose -p "$run" -f "$T/compose.yaml" logs --no-color >&2 2>&1 || true
    fi
    timeout 60 docker-compose -p "$run" -f "$T/compose.yaml" down -t 2 >/dev/null 2>&1 || true
  fi
  # Whatever compose could not remove (it failed, or the service died).
  local left
  left=$(timeout 60 podman ps -aq --filter "label=com.docker.compose.project=$run" 2>/dev/null)
  [ -n "$left" ] && timeout 120 podman rm -f -t 2 $left >/dev/null 2>&1
  left=$(timeout 60 podman network ls -q --filter "label=com.docker.compose.project=$run" 2>/dev/null)
  [ -n "$left" ] && timeout 60 podman network rm -f $left >/dev/null 2>&1
  if [ -n "$service_pid" ]; then
    kill "$service_pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$service_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$service_pid" 2>/dev/null
  fi
  timeout 120 podman rmi -f "$image" >/dev/null 2>&1
  # A debootstrap cut short leaves its proc and sys mounts in the rootfs.
  [ -d "$T/rootfs" ] && umount -R -l "$T/rootfs"/* >/dev/null 2>&1
  rm -rf "$T"
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# 1. The Debian 12 base image, made once and kept.
if ! timeout 60 podman image exists "$base"; then
  mirror=${GRIDBCAST_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  say "making $base with debootstrap from $mirror"
  step timeout "$(budget 400)" debootstrap --variant=minbase bookworm "$T/rootfs" "$mirror" \
    >"$T/debootstrap.log" 2>&1 ||
    { tail -n 20 "$T/debootstrap.log" >&2; fail "debootstrap bookworm from $mirror failed"; }
  grep -q '^12\.' "$T/rootfs/etc/debian_version" || fail "debootstrap made no Debian 12"
  tar -C "$T/rootfs" -c . | timeout "$(budget 120)" podman import --change 'CMD ["bash"]' - "$base" >"$T/import.log" 2>&1 ||
    fail "podman import of the base image failed"
  rm -rf "$T/rootfs"
fi

# 2. The image: this build's binary, stripped, and the site configs.
mkdir -p "$T/context"
strip -o "$T/context/gridbcast" "$gridbcast" || fail "cannot strip $gridbcast"
cp -r "$here/site-configs" "$T/context/"
if ! step timeout "$(budget 400)" podman build -q --build-arg "BASE=$base" --target prebuilt \
    -f "$here/docker/Dockerfile" -t "$image" "$T/context" >"$T/build.log" 2>&1; then
  tail -n 30 "$T/build.log" >&2
  fail "podman build of docker/Dockerfile --target prebuilt failed"
fi

# Can this machine run a container at all? (Limits no higher than the host's
# hard limits: podman's own defaults are higher than runc may set here.)
hard_nofile=$(ulimit -Hn); hard_nproc=$(ulimit -Hu)
nofile=8192; [ "$hard_nofile" != unlimited ] && [ "$hard_nofile" -lt $nofile ] && nofile=$hard_nofile
nproc=4096; [ "$hard_nproc" != unlimited ] && [ "$hard_nproc" -lt $nproc ] && nproc=$hard_nproc
limits=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
if ! out=$(timeout "$(budget 60)" podman run --rm "${limits[@]}" "$image" true 2>&1); then
  skip "podman cannot run a container here: $out"
fi
# The engine works: from here on, anything wrong is the image's or ours.
out=$(timeout "$(budget 60)" podman run --rm "${limits[@]}" "$image" gridbcast --version 2>&1) ||
  fail "gridbcast does not run in the image: $out"

# 3. The engine's Docker API for docker-compose.
podman system service --time=0 "$DOCKER_HOST" >"$T/service.log" 2>&1 &
service_pid=$!
for _ in $(seq 100); do [ -S "$T/podman.sock" ] && break; sleep 0.1; done
[ -S "$T/podman.sock" ] || { cat "$T/service.log" >&2; fail "podman system service did not start"; }

# 4. The compose file, the job secret (mode 0600, read through env_file), up.
cp "$topology" "$T/topology.yaml"
"$gridbcast" testbed compose "$T/topology.yaml" -o "$T/compose.yaml" --engine podman \
  --image "$image" --nofile "$nofile" --nproc "$nproc" \
  --launch-arg=--size --launch-arg=8MiB || fail "gridbcast testbed compose failed"
(umask 077; printf 'GRIDBCAST_SECRET=%s\nGRIDBCAST_JOB_ID=%s\n' \
  "$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')" "$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" \
  >"$T/gridbcast.env")
say "project $run: up"
compose up -d >"$T/up.log" 2>&1 || { cat "$T/up.log" >&2; fail "docker-compose up failed"; }

# 5. The launcher's exit status and report.
launcher=$(compose ps -q launcher) && [ -n "$launcher" ] || fail "no launcher container"
status=$(timeout "$(budget 300)" podman wait "$launcher") || fail "the launcher did not finish in time"
logs=$(compose logs --no-color 2>&1)
[ "$status" = 0 ] || fail "the launcher exited $status"
echo "$logs" | grep -E 'launcher.*(time until|ratio|verified)' | sed 's/^/  /'
echo "$logs" | grep -qE 'launcher.*verified: all [0-9]+ ranks hold the root' ||
  fail "the launcher did not verify every rank's copy"

# 6. The WAN delay: every node pinged the other sites' routers before it ran
# its rank, over the routers' netem or delay line; the round trip holds at
# least the one-way latency of the link (testbed-2x2: 10 ms).
latency_ms=$(python3 - "$T/compose.yaml" <<'PY'
import re, sys
units = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
found = [float(v) * units[u] for v, u in
         re.findall(r"# WAN link \d+ to .*: ([0-9.]+) (ns|us|ms|s) one-way", open(sys.argv[1]).read())]
print(min(found) if found else 0)
PY
)
python3 -c 'import sys; sys.exit(float(sys.argv[1]) <= 0)' "${latency_ms:-0}" ||
  fail "no WAN link latency in $T/compose.yaml to check the pings against"
pings=$(echo "$logs" | grep -E "node [^:]+: site [^ ]+'s router [0-9.]+ answers: rtt")
[ -n "$pings" ] || fail "no node logged its ping across sites"
echo "$pings" | sed 's/^/  /'
echo "$logs" | grep -E 'router-[^ ]+: (WAN delay, rate and loss by tc netem|delay line running)' |
  sed 's/^/  /'
echo "$pings" | python3 -c '
import re, sys
want = float(sys.argv[1] or 0) * 0.95
bad = [l for l in sys.stdin
       if float(re.search(r"= ([0-9.]+)/", l).group(1)) < want]
if bad:
    sys.exit("round trip under the WAN latency of %.1f ms: %s" % (want / 0.95, bad))
' "${latency_ms:-}" || fail "the WAN delay is not there"
say "passed: ${status}, $(echo "$pings" | wc -l) cross-site pings at or above ${latency_ms:-?} ms"
