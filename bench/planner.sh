#!/bin/sh
# Builds gplan in Release and runs planner-bench (offset assignment: MiniMalloc instances, every
# trace in DATA_DIR/traces, synthetic graphs): a line per instance, then one summary table.
# With MINIMALLOC_BIN set to a MiniMalloc binary built from github.com/google/minimalloc, also
# times it on the same MiniMalloc instances in the same run and prints both side by side.
# Usage: [MINIMALLOC_BIN=...] bench/planner.sh [DATA_DIR [FILTER]]
#        (DATA_DIR default: ../shared/data next to the checkout, else ../../shared/data)
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-bench"
cmake -S "$root" -B "$build" -DGPLAN_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target planner-bench -j2 >/dev/null
lscpu | head -n 12 | grep -E 'Model name|^CPU\(s\)' || true
out=$(mktemp)
trap 'rm -f "$out" "$out.csv" "$out.mm"' EXIT
"$build/bench/planner-bench" "$@" | tee "$out"
[ -n "$MINIMALLOC_BIN" ] || exit 0
data=${1:-}
if [ -z "$data" ]; then
    data="$root/../shared/data"
    [ -d "$data" ] || data="$root/../../shared/data"
fi
echo
echo "MiniMalloc ($MINIMALLOC_BIN) on the same instances, same run (its own timer, seconds):"
: >"$out.mm"
for x in A C E G I K; do
    f="$data/minimalloc/$x.1048576.csv"
    [ -f "$f" ] || continue
    mm=$("$MINIMALLOC_BIN" --capacity=1048576 --input="$f" --output="$out.csv" 2>&1 >/dev/null |
         head -n 1 | sed 's/[^0-9.].*//')
    # the last table row of this instance: the summary's (total s is the 10th field)
    gp=$(grep "^minimalloc-$x " "$out" | tail -n 1 | awk '{print $10}')
    echo "minimalloc-$x ${gp:-0} ${mm:-0}" >>"$out.mm"
done
awk 'BEGIN { printf "%-14s %10s %12s %8s\n", "instance", "gplan s", "MiniMalloc s", "ratio" }
     { printf "%-14s %10.3f %12.3f %8.3f\n", $1, $2, $3, ($3 > 0 ? $2 / $3 : 0); g += $2; m += $3 }
     END { printf "%-14s %10.3f %12.3f %8.3f\n", "total", g, m, (m > 0 ? g / m : 0) }' "$out.mm"
