#!/bin/sh
# Builds gplan in Release and runs planner-bench (offset assignment: MiniMalloc instances, every
# trace in DATA_DIR/traces, synthetic graphs): a line per instance, then one summary table.
# Usage: bench/planner.sh [DATA_DIR [FILTER]]  (default: ../shared/data, else ../../shared/data)
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-bench"
cmake -S "$root" -B "$build" -DGPLAN_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target planner-bench -j2 >/dev/null
lscpu | head -n 12 | grep -E 'Model name|^CPU\(s\)' || true
"$build/bench/planner-bench" "$@"
