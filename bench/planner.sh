#!/bin/sh
# Builds gplan in Release and runs planner-bench (offset assignment: MiniMalloc instances, the
# iopddl trace, synthetic graphs). Usage: bench/planner.sh [DATA_DIR]  (default ../shared/data)
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-bench"
cmake -S "$root" -B "$build" -DGPLAN_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target planner-bench -j2 >/dev/null
lscpu | head -n 12 | grep -E 'Model name|^CPU\(s\)' || true
"$build/bench/planner-bench" "$@"
