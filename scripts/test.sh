#!/usr/bin/env bash
# The test suite. Expects scripts/setup.sh to have built build/.
#   1. every suite in build/ (unit, property, loopback multi-process, testbed, MPI);
#   2. the unit and loopback suites again under ASan+UBSan and under TSan.
# --quick skips step 2.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1

phase() { echo "== $1: $((SECONDS - phase_start)) s (total $SECONDS s)"; phase_start=$SECONDS; }
phase_start=$SECONDS
cmake --build build -j"$(nproc)"
phase "build"
ctest --test-dir build --output-on-failure -j2 --timeout 900
phase "ctest"

[ $quick -eq 1 ] && exit 0

# Gigabyte cases are left to the plain build: sanitizers multiply memory and time.
filter='-*ThreeGibibytes*:*OneGibibyte*:*TwoGiB*'
for san in address,undefined thread; do
  dir="build-san-${san%%,*}"
  echo "== sanitizer build: $san ($dir)"
  # Line tables only (-g1): reports keep file:line, and ASan's build takes
  # 40 % less time than with full debug information (-g).
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 \
    -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DGRIDBCAST_WERROR=ON -DGRIDBCAST_SANITIZE="$san" >/dev/null
  # The file pipeline's and the job layer's suites (file streaming; control
  # protocol, launcher and backends as processes) under ASan+UBSan; TSan
  # keeps to the engine's.
  suites=(topology_tests lanes_tests runtime_tests)
  targets=("${suites[@]}")
  # job_tests also start the launcher and ranks as processes: that build's own
  # gridbcast, so they run sanitized too.
  [ "$san" = thread ] || { suites+=(files_tests job_tests); targets+=(files_tests job_tests gridbcast); }
  cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}"
  phase "$san build"
  # TSan runs ~10x slower: the largest loopback shapes stay with the other builds.
  f="$filter"
  [ "$san" = thread ] && f="$filter:*Shapes*/15nodes*:*Shapes*/17nodes*"
  for t in "${suites[@]}"; do
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
      "$dir/tests/$t" --gtest_brief=1 --gtest_filter="$f"
    phase "$san $t"
  done
done
echo "sanitizer suites: 8 passed, 0 failed"
