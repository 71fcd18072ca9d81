#!/usr/bin/env bash
# The test suite: unit and property tests, then multi-process tests on loopback
# sockets. Expects scripts/setup.sh to have built build/.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j2 --timeout 900
