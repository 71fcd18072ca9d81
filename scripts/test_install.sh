#!/usr/bin/env bash
# Installs a build into a temporary prefix and uses it as a user would:
#   (a) the installed gridbcast: --help, man pages, plan on a shipped site config;
#   (b) a CMake project with find_package(gridbcast) that loads a topology, builds
#       a plan and broadcasts over loopback between two in-process ranks;
#   (c) a C program against the installed mpi.h via pkg-config, run under
#       the installed `gridbcast launch`, and the C++ API via pkg-config gridbcast;
#   (d) cpack -G DEB: the packages' metadata and contents, unpacked and run.
# Usage: scripts/test_install.sh [BUILD_DIR]   (default build/; must be built)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gridbcast-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
step() { echo "== test_install: $*"; }
fail() { echo "test_install: FAILED: $*" >&2; exit 1; }

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"
gb=$prefix/bin/gridbcast
[ -x "$gb" ] || fail "no $gb"
libdir=$(dirname "$(find "$prefix" -name libgridbcast_mpi.so -print -quit)")
[ -n "$libdir" ] && [ -f "$libdir/pkgconfig/gridbcast-mpi.pc" ] || fail "no libgridbcast_mpi.so / gridbcast-mpi.pc"
configs=$prefix/share/gridbcast/site-configs

step "(a) installed gridbcast"
"$gb" --help | grep -q 'Subcommands' || fail "gridbcast --help"
"$gb" --version | grep -q "gridbcast" || fail "gridbcast --version"
man1=$prefix/share/man/man1
for page in gridbcast gridbcast-plan gridbcast-launch gridbcast-certs; do
  f=$(find "$man1" -name "$page.1*" -print -quit)
  [ -n "$f" ] && zcat -f "$f" | head -1 | grep -q '^\.TH' || fail "man page $page.1 in $man1"
done
zcat -f "$man1"/gridbcast-certs.1* | grep -q 'certs issue' || fail "gridbcast-certs.1 lacks 'certs issue'"
if command -v man >/dev/null; then
  MANWIDTH=80 man -l "$man1"/gridbcast-plan.1* 2>/dev/null | grep -q -- '--algorithm' ||
    fail "man -l gridbcast-plan.1 does not show --algorithm"
fi
"$gb" plan "$configs/testbed-2x4.yaml" --algorithm multilane --check >"$tmp/plan.txt" ||
  fail "gridbcast plan --check on the installed testbed-2x4.yaml"
[ -s "$tmp/plan.txt" ] || fail "empty plan"

step "(b) find_package(gridbcast) consumer"
mkdir -p "$tmp/consumer"
cat >"$tmp/consumer/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(consumer LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(gridbcast 0.1 REQUIRED)
add_executable(consumer main.cpp)
target_link_libraries(consumer PRIVATE gridbcast::runtime)
CMAKE
cat >"$tmp/consumer/main.cpp" <<'CPP'
// Loads a site config, plans a broadcast, and runs it between two ranks
// (threads of this process) over loopback.
#include <cstdio>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/communicator.hpp"
#include "topology/loader.hpp"
#include "topology/plan/plan.hpp"

using namespace gridbcast;

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const topology::Grid grid = topology::load_grid_file(argv[1]);
  const std::uint64_t bytes = 1 << 20;
  const topology::Plan plan = topology::build_plan(grid, topology::Algorithm::kChain, 0, bytes);
  if (plan.ranks != 2 || plan.transfers.empty()) return 3;

  const runtime::JobCredentials creds = runtime::new_credentials();
  std::vector<std::unique_ptr<runtime::Communicator>> comms;
  runtime::EndpointTable table;
  for (int r = 0; r < 2; ++r) {
    comms.push_back(std::make_unique<runtime::Communicator>(grid, r, creds));
    table.push_back(comms.back()->listen());
  }
  // One run nonce for the job's communicators, fresh for every run.
  const runtime::RunNonce nonce = runtime::new_run_nonce();
  for (auto& c : comms) c->set_endpoints(table, nonce);
  std::vector<std::vector<unsigned char>> bufs(2, std::vector<unsigned char>(bytes));
  for (std::uint64_t i = 0; i < bytes; ++i) bufs[0][i] = static_cast<unsigned char>(i * 7 + 1);
  std::exception_ptr errors[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        comms[r]->bcast(bufs[r].data(), bytes, 0);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  if (bufs[1] != bufs[0]) return 4;
  std::printf("consumer: %zu transfers planned, %llu bytes broadcast\n", plan.transfers.size(),
              static_cast<unsigned long long>(bytes));
  return 0;
}
CPP
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log"; fail "consumer configure"; }
cmake --build "$tmp/consumer/build" >>"$tmp/consumer.log" 2>&1 || { cat "$tmp/consumer.log"; fail "consumer build"; }
"$tmp/consumer/build/consumer" "$configs/loopback-pair.yaml" || fail "consumer run"

step "(c) pkg-config gridbcast-mpi and gridbcast"
export PKG_CONFIG_PATH=$libdir/pkgconfig
cat >"$tmp/hello.c" <<'C'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char** argv) {
  int rank, size, value = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0) value = 42;
  MPI_Bcast(&value, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (value != 42) return 1;
  if (rank == 0) printf("hello: %d ranks got %d\n", size, value);
  MPI_Finalize();
  return 0;
}
C
# shellcheck disable=SC2046
cc -Wall -Werror "$tmp/hello.c" -o "$tmp/hello" $(pkg-config --cflags --libs gridbcast-mpi) ||
  fail "cc against pkg-config gridbcast-mpi"
"$prefix/bin/gridbcast-cc" -Wall -Werror "$tmp/hello.c" -o "$tmp/hello-cc" || fail "installed gridbcast-cc"
"$gb" launch "$configs/loopback-pair.yaml" --timeout 60 -- "$tmp/hello-cc" | grep -q 'hello: 2 ranks got 42' ||
  fail "hello (gridbcast-cc) under the installed gridbcast launch"
"$gb" launch "$configs/loopback-pair.yaml" --timeout 60 -- "$tmp/hello" | grep -q 'hello: 2 ranks got 42' ||
  fail "hello under the installed gridbcast launch"
# shellcheck disable=SC2046
c++ -std=c++20 "$tmp/consumer/main.cpp" -o "$tmp/consumer-pc" $(pkg-config --cflags --libs gridbcast) ||
  fail "c++ against pkg-config gridbcast"
"$tmp/consumer-pc" "$configs/loopback-pair.yaml" >/dev/null || fail "pkg-config consumer run"

step "(d) cpack -G DEB"
(cd "$tmp" && cpack -G DEB -B "$tmp/debs" --config "$build/CPackConfig.cmake" >"$tmp/cpack.log" 2>&1) ||
  { cat "$tmp/cpack.log"; fail "cpack -G DEB"; }
deb() { find "$tmp/debs" -maxdepth 1 -name "$1_*.deb" -print -quit; }
main=$(deb gridbcast)
dev=$(deb gridbcast-dev)
[ -n "$main" ] && [ -n "$dev" ] || { ls "$tmp/debs"; fail "gridbcast and gridbcast-dev .debs"; }
dpkg-deb --info "$main"
depends=$(dpkg-deb --field "$main" Depends)
for d in libyaml-cpp0.7 libssl3 libstdc++6 libc6; do
  [[ "$depends" == *"$d"* ]] || fail "gridbcast Depends: '$depends' lacks $d"
done
dev_depends=$(dpkg-deb --field "$dev" Depends)
for d in gridbcast libyaml-cpp-dev libssl-dev libasio-dev; do
  [[ "$dev_depends" == *"$d"* ]] || fail "gridbcast-dev Depends: '$dev_depends' lacks $d"
done
dpkg-deb --contents "$main" >"$tmp/main.list"
dpkg-deb --contents "$dev" >"$tmp/dev.list"
for f in ./usr/bin/gridbcast ./usr/share/man/man1/gridbcast.1.gz ./usr/share/man/man1/gridbcast-plan.1.gz \
         /libgridbcast_mpi.so ./usr/share/gridbcast/site-configs/default.yaml; do
  grep -q -- "$f\$" "$tmp/main.list" || fail "gridbcast .deb lacks $f"
done
for f in /gridbcastConfig.cmake /gridbcastTargets.cmake /pkgconfig/gridbcast.pc \
         /pkgconfig/gridbcast-mpi.pc ./usr/include/gridbcast/runtime/communicator.hpp \
         ./usr/include/gridbcast/mpi/mpi.h /libgridbcast_runtime.a; do
  grep -q -- "$f\$" "$tmp/dev.list" || fail "gridbcast-dev .deb lacks $f"
done
# Unpacked (not installed: that would need root and the system's dpkg database).
dpkg-deb -x "$main" "$tmp/root"
"$tmp/root/usr/bin/gridbcast" plan "$tmp/root/usr/share/gridbcast/site-configs/default.yaml" >/dev/null ||
  fail "gridbcast from the .deb"
ls "$tmp/debs"/*.deb
echo "test_install: passed"
