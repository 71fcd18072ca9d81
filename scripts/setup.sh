#!/usr/bin/env bash
# Installs what gridbcast needs from Debian 12's archive (only what is missing),
# then configures and builds into build/. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

# What gridbcast itself builds and tests with (docker/Dockerfile installs the same).
packages=(g++ cmake ninja-build pkg-config libasio-dev libyaml-cpp-dev libssl-dev
          libgtest-dev libcli11-dev nlohmann-json3-dev iproute2 iputils-ping python3)
# MPICH and Open MPI: the MPI providers and their tests, and the MPI peers the
# benchmarks compare with (docs/MPI.md). Not in the container image, which runs
# the broadcast, not MPI applications.
# python3-mpi4py (linked against Open MPI) and python3-numpy: the mpi4py test
# of the provider (tests/mpi/mpi4py_bcast.py).
mpi_packages=(mpich libmpich-dev openmpi-bin libopenmpi-dev python3-mpi4py python3-numpy)
# slurm-wlm and munge: the test against a real Slurm (scripts/test_slurm.sh
# starts its own daemons under a temporary directory; the packaged services
# are not used).
slurm_packages=(slurm-wlm munge)
missing=()
for p in "${packages[@]}" "${mpi_packages[@]}" "${slurm_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi

build_type=${GRIDBCAST_BUILD_TYPE:-RelWithDebInfo}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DGRIDBCAST_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
echo "setup: built build/cli/gridbcast"
