#!/usr/bin/env bash
# The soak test the original leak was found with, at scale: 100,000 decode evals of one session
# (the tiny example; --loop starts again at position 0 whenever the 64-position context fills) under
# the LD_PRELOAD allocation shim. Prints evals, allocations and thread creations during evals, and
# the resident set after eval 100 and at the end; exits non-zero if memory grew or anything was
# allocated. Usage: bench/soak.sh [EVALS] [BUILD_DIR]   (default 100000, build-soak)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
evals=${1:-100000}
build=${2:-$root/build-soak}
if [ ! -x "$build/tools/gplan-run" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGPLAN_CUDA=OFF >/dev/null
  cmake --build "$build" -j "$(nproc)" --target gplan-compile gplan-run gp_alloc_shim >/dev/null
fi
shim=$(find "$build" -name 'libgp_alloc_shim.so' | head -1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/tools/gplan-compile" "$root/examples/tiny.gplan" -o "$work/tiny.plan" >/dev/null
start=$(date +%s.%N)
GP_ALLOC_SHIM_OUT=$work/report LD_PRELOAD=$shim "$build/tools/gplan-run" "$work/tiny.plan" \
  --random-weights 3 --prompt-ids 1,2,3 -n "$evals" --ignore-eos --loop --threads 1 --stats \
  >"$work/tokens" 2>"$work/stats"
end=$(date +%s.%N)
field() { tr ' ' '\n' <"$work/report" | sed -n "s/^$1=//p"; }
n=$(field evals) allocs=$(field allocs) threads=$(field threads)
rss100=$(field rss100) rssend=$(field rssend)
page=$(getconf PAGESIZE)
grep -E 'evals|RSS|allocations' "$work/stats" || true
printf '%-12s %-10s %-12s %-14s %-14s %s\n' evals allocs threads "RSS@100 KiB" "RSS@end KiB" seconds
printf '%-12s %-10s %-12s %-14s %-14s %.1f\n' "$n" "$allocs" "$threads" \
  $((rss100 * page / 1024)) $((rssend * page / 1024)) "$(echo "$end - $start" | bc)"
[ "$n" -ge "$evals" ] && [ "$allocs" -eq 0 ] && [ "$threads" -eq 0 ] && [ "$rssend" -le "$rss100" ]
