#!/usr/bin/env bash
# gridbcast under a real Slurm (Debian's slurm-wlm) on this one machine:
# munged, slurmctld and one slurmd per node name, everything (keys, sockets,
# state, logs, ports 16817..) under a fresh temporary directory, torn down on
# any exit. The system's Slurm and munge configuration are not touched.
#
# Several nodes on one host: node names gbn1..gbn3 at 127.0.0.11.. through a
# bind-mounted /etc/hosts in a mount namespace of the script's own ("Node
# names" below), each node a slurmd -N NAME with NodeHostname=NAME and a port
# of its own. The same names are what SLURM_JOB_NODELIST gives gridbcast.
#
# Checks: `srun -N K hostname`; `salloc -N K gridbcast launch --size 4MiB
# --json` (topology from SLURM_JOB_NODELIST, srun backend, every copy
# verified, one job step per rank on its node); examples/slurm/gridbcast.sbatch
# under sbatch with --file (a copy on every node but the root's); a rank that
# exits 3 under srun fails the job naming it and leaves no step or process.
#
# usage: scripts/test_slurm.sh GRIDBCAST_BINARY
# Exits 77 (skipped) without root, without slurm-wlm/munge installed, or when
# the daemons cannot start here (the reason is printed).
set -u
gridbcast=${1:?usage: test_slurm.sh GRIDBCAST_BINARY}
gridbcast=$(readlink -f "$gridbcast")
skip() { echo "SKIP: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root (slurmd runs job steps as their user)"
for p in slurmctld slurmd srun salloc sbatch sinfo munged munge; do
  command -v "$p" >/dev/null || skip "$p not installed (apt-get install slurm-wlm munge)"
done
[ -r /etc/munge/munge.key ] || command -v mungekey >/dev/null || skip "no munge key and no mungekey"
# Into a mount namespace of our own (see "Node names" below), once.
if [ -z "${GRIDBCAST_SLURM_NS:-}" ] && unshare -m true 2>/dev/null; then
  GRIDBCAST_SLURM_NS=1 exec unshare -m bash "$0" "$@"
fi

T=$(mktemp -d /tmp/gridbcast-slurm.XXXXXX)
chmod 755 "$T"
pids=()
cleanup() {
  local rc=$?
  scancel --quiet --full -u root 2>/dev/null || true
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[$i]}" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
  done
  [ -f "$T/munge/pid" ] && kill "$(cat "$T/munge/pid")" 2>/dev/null
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    for f in "$T"/log/*; do echo "== $f"; tail -n 20 "$f"; done >&2
  fi
  rm -rf "$T"
  exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Node names. Debian's slurmd is built without --enable-multiple-slurmd, so
# each node needs a NodeHostname of its own, and gridbcast's topology needs
# each node at an address of its own (the loader refuses two nodes on one
# address). So the script runs in a mount namespace of its own (unshare -m)
# where /etc/hosts is a bind-mounted copy that adds gbn1..gbnK at 127.0.0.11..;
# the host's /etc/hosts is never written, and the mount goes with the
# namespace. Without unshare: one node, localhost.
K=3
names=()
if [ "${GRIDBCAST_SLURM_NS:-}" = 1 ]; then
  cp /etc/hosts "$T/hosts"
  for i in $(seq "$K"); do
    echo "127.0.0.$((10 + i)) gbn$i" >>"$T/hosts"
    names+=("gbn$i")
  done
  mount --bind "$T/hosts" /etc/hosts || fail "cannot bind-mount $T/hosts in our namespace"
  for n in "${names[@]}"; do
    [ "$(getent ahostsv4 "$n" | awk 'NR == 1 {print $1}')" != "" ] || fail "$n does not resolve"
  done
else
  names=(localhost)
  K=1
  echo "note: no mount namespace (unshare -m): a one-node test" >&2
fi
list=$(IFS=,; echo "${names[*]}")

mkdir -p "$T/munge" "$T/ctld" "$T/log" "$T/run"
chmod 700 "$T/munge"
if [ -r /etc/munge/munge.key ]; then cp /etc/munge/munge.key "$T/munge/key"
else mungekey -c -k "$T/munge/key" >/dev/null || skip "mungekey failed"; fi
chmod 600 "$T/munge/key"
munged --socket="$T/munge/sock" --key-file="$T/munge/key" --pid-file="$T/munge/pid" \
  --log-file="$T/log/munged.log" --seed-file="$T/munge/seed" --force ||
  skip "munged does not start here"
munge -S "$T/munge/sock" -n | unmunge -S "$T/munge/sock" >/dev/null || skip "munge does not work here"

plugins=$(dirname "$(dpkg -L slurm-wlm-basic-plugins 2>/dev/null | grep -m1 '/select_linear.so$')")
[ -d "$plugins" ] || plugins=/usr/lib/x86_64-linux-gnu/slurm-wlm
{
  cat <<EOF
ClusterName=gbtest
SlurmctldHost=localhost
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$T/munge/sock
StateSaveLocation=$T/ctld
SlurmdSpoolDir=$T/spool-%n
SlurmctldPidFile=$T/run/slurmctld.pid
SlurmdPidFile=$T/run/slurmd-%n.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd-%n.log
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
PluginDir=$plugins
EOF
  port=16821
  for n in "${names[@]}"; do
    echo "NodeName=$n NodeHostname=$n Port=$port CPUs=1 RealMemory=1000 State=UNKNOWN"
    port=$((port + 1))
  done
  echo "PartitionName=gb Nodes=$list Default=YES MaxTime=10 State=UP"
} >"$T/slurm.conf"
export SLURM_CONF=$T/slurm.conf
# Nothing of a surrounding allocation may leak into ours.
for v in $(env | awk -F= '/^SLURM_/ && $1 != "SLURM_CONF" {print $1}'); do unset "$v"; done

slurmctld -D -i -f "$SLURM_CONF" >"$T/log/slurmctld.out" 2>&1 &
pids+=($!)
for n in "${names[@]}"; do
  mkdir -p "$T/spool-$n"
  slurmd -D -f "$SLURM_CONF" -N "$n" >"$T/log/slurmd-$n.out" 2>&1 &
  pids+=($!)
done
idle=0
for _ in $(seq 100); do
  idle=$(sinfo -h -t idle -o '%D' 2>/dev/null | head -1)
  [ "${idle:-0}" = "$K" ] && break
  sleep 0.2
done
[ "${idle:-0}" = "$K" ] || skip "slurmctld/slurmd did not bring $K nodes up here: $(sinfo 2>&1 | tail -n 2); $(tail -n 3 "$T"/log/*.out)"

echo "-- srun -N$K hostname"
out=$(timeout 60 srun -N"$K" bash -c 'echo "$SLURMD_NODENAME $SLURM_PROCID"') || fail "srun -N$K failed"
echo "$out"
[ "$(echo "$out" | wc -l)" = "$K" ] || fail "srun ran $(echo "$out" | wc -l) tasks, not $K"

echo "-- salloc -N$K gridbcast launch --size 4MiB --json"
timeout 120 salloc -N"$K" "$gridbcast" launch --size 4MiB --json >"$T/launch.json" 2>"$T/launch.err"
rc=$?
cat "$T/launch.err" >&2
[ $rc = 0 ] || fail "launch under salloc exited $rc: $(cat "$T/launch.json")"
grep -q "topology from SLURM_JOB_NODELIST: $K nodes" "$T/launch.err" ||
  [ "$K" = 1 ] || fail "launch did not say it took SLURM_JOB_NODELIST"
python3 - "$T/launch.json" "$K" <<'EOF' || fail "launch's JSON does not show $K verified ranks"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["ranks"] == int(sys.argv[2]) and r["verified"] is True, r
print("launch:", {k: r[k] for k in ("ranks", "sites", "bytes", "verified", "seconds")})
EOF
# Each rank was a job step of its own (srun backend), on its own node.
for n in "${names[@]}"; do
  grep -q "launch task StepId=" "$T/log/slurmd-$n.log" ||
    fail "no job step ran on node $n"
done

echo "-- sbatch examples/slurm/gridbcast.sbatch (--file)"
head -c 3000000 /dev/urandom >"$T/payload"
sed -e "s|^#SBATCH --nodes=.*|#SBATCH --nodes=$K|" \
    -e "s|^#SBATCH --time=.*|#SBATCH --time=5|" \
    "$(dirname "$0")/../examples/slurm/gridbcast.sbatch" >"$T/job.sbatch"
jid=$(cd "$T" && GRIDBCAST="$gridbcast" FILE="$T/payload" OUTPUT="$T/copy-{node}" \
      sbatch --parsable --output="$T/sbatch.out" --error="$T/sbatch.err" "$T/job.sbatch") ||
  fail "sbatch refused the job"
for _ in $(seq 600); do
  squeue -h -j "$jid" 2>/dev/null | grep -q . || break
  sleep 0.2
done
cat "$T/sbatch.err" >&2
cat "$T/sbatch.out"
# Every node but the root's (the first of SLURM_JOB_NODELIST) holds a copy.
copies=0
for n in "${names[@]}"; do
  [ -e "$T/copy-$n" ] && { cmp "$T/payload" "$T/copy-$n" || fail "copy on $n differs"; } &&
    copies=$((copies + 1))
done
[ $copies = $((K - 1)) ] || fail "sbatch job: $copies copies, not $((K - 1))"
echo "-- a failing rank under srun: the launcher fails the job, no step is left"
timeout 120 salloc -N"$K" "$gridbcast" launch --silence-timeout 10 -- /bin/sh -c \
  '[ "$GRIDBCAST_RANK" != 1 ] || exit 3; exec sleep 59.25' >"$T/fail.out" 2>"$T/fail.err"
rc=$?
cat "$T/fail.err" >&2
[ $rc != 0 ] && [ $rc != 124 ] || fail "launch with a failing rank exited $rc"
grep -q "rank 1" "$T/fail.err" || fail "the launcher did not name rank 1"
for _ in $(seq 50); do
  [ -z "$(squeue -h -s 2>/dev/null)" ] && [ -z "$(squeue -h 2>/dev/null)" ] && break
  sleep 0.2
done
[ -z "$(squeue -h -s 2>/dev/null)" ] || fail "job steps left after the failure: $(squeue -s)"
pgrep -f "sleep 59.25" >/dev/null && fail "a rank's sleep outlived the job"
echo "PASS: $K Slurm nodes ($list): srun, salloc + launch over srun, a failing rank, sbatch + launch --file"
