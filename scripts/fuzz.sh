#!/usr/bin/env bash
# Runs each libFuzzer target (clang, ASan+UBSan) for SECONDS (default 600), then
# merges inputs that found new coverage into the kept corpus tests/fuzz/corpus/.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     targets: yaml_loader wire control datagram file
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(yaml_loader wire control datagram file)
command -v clang++ >/dev/null || { echo "fuzz: clang++ is required (apt-get install clang libclang-rt-14-dev)"; exit 2; }
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGRIDBCAST_FUZZ=ON -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
for t in "${targets[@]}"; do
  cmake --build build-fuzz -j"$(nproc)" --target "${t}_fuzz"
  work="build-fuzz/corpus/$t"
  mkdir -p "$work"
  cp -n tests/fuzz/corpus/"$t"/* "$work"/ 2>/dev/null || true
  echo "== fuzzing $t for $seconds s"
  build-fuzz/tests/fuzz/"${t}_fuzz" "$work" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 2>&1 | tail -n 12
  build-fuzz/tests/fuzz/"${t}_fuzz" -merge=1 tests/fuzz/corpus/"$t" "$work" 2>&1 | tail -n 1
done
