#!/usr/bin/env bash
# Runs the whole test suite: a warnings-as-errors build, then the same suite under ASan+UBSan.
# Installs missing Debian packages when run as root. Usage: scripts/test.sh [--quick]
set -euo pipefail
GP_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$GP_ROOT/scripts/setup.sh"
gp_setup
cd "$GP_ROOT"

echo "== build (warnings are errors)"
gp_build build-test -DGPLAN_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
(cd build-test && ctest --output-on-failure -j "$(nproc)")

if [ "${1:-}" != "--quick" ]; then
  echo "== build with address and undefined-behaviour sanitizers"
  gp_build build-asan -DGPLAN_WERROR=ON -DGPLAN_SANITIZE=address,undefined -DGPLAN_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=Debug
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j "$(nproc)")
fi
echo "== all tests passed"
