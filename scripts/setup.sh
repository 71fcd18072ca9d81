#!/usr/bin/env bash
# Installs what gridbcast needs from Debian 12's archive (only what is missing),
# then configures and builds into build/. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# What gridbcast itself builds and tests with (docker/Dockerfile installs the same).
packages=(g++ cmake ninja-build pkg-config libasio-dev libyaml-cpp-dev libssl-dev libzstd-dev
          libgtest-dev libcli11-dev nlohmann-json3-dev iproute2 iputils-ping python3)
# MPICH and Open MPI: the MPI providers and their tests, and the MPI peers the
# benchmarks compare with (docs/MPI.md). Not in the container image, which runs
# the broadcast, not MPI applications.
# python3-mpi4py (linked against Open MPI) and python3-numpy: the mpi4py test
# of the provider (tests/mpi/mpi4py_bcast.py).
# nftables: `gridbcast testbed shape --wan A-B --down` cuts a WAN link of the
# emulated grid with it (not in the container image, which needs no testbed).
testbed_packages=(nftables)
mpi_packages=(mpich libmpich-dev openmpi-bin libopenmpi-dev python3-mpi4py python3-numpy)
# slurm-wlm and munge: the test against a real Slurm (scripts/test_slurm.sh
# starts its own daemons under a temporary directory; the packaged services
# are not used).
slurm_packages=(slurm-wlm munge)
# pdsh, clustershell and openssh-server (with its client): the tools people
# distribute files with today, which scripts/bench_file_peers.py compares with
# (it starts its own sshd in each emulated node; the packaged service is not
# used).
file_peer_packages=(pdsh clustershell openssh-server openssh-client)
# podman (with runc), docker-compose 1.29 and debootstrap: the compose testbed
# run in a real container engine (scripts/test_compose.sh starts its own
# `podman system service` and makes the Debian 12 base image with debootstrap).
container_packages=(podman runc docker-compose debootstrap)
missing=()
for p in "${packages[@]}" "${testbed_packages[@]}" "${mpi_packages[@]}" "${slurm_packages[@]}" "${file_peer_packages[@]}" \
         "${container_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  # No service the packages bring (ssh, slurmd, munge) is started or left
  # running: a policy-rc.d that refuses every start, for this install only,
  # unless the machine has one of its own.
  policy=/usr/sbin/policy-rc.d
  placed=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# scripts/setup.sh: no service starts during its install\nexit 101\n' |
      "${sudo_cmd[@]}" tee "$policy" >/dev/null
    "${sudo_cmd[@]}" chmod 755 "$policy"
    placed=1
  fi
  status=0
  "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" || status=$?
  [ $placed -eq 1 ] && "${sudo_cmd[@]}" rm -f "$policy"
  [ $status -eq 0 ] || exit $status
fi

build_type=${GRIDBCAST_BUILD_TYPE:-RelWithDebInfo}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DGRIDBCAST_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built build/cli/gridbcast"
