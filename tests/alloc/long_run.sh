#!/usr/bin/env bash
# The long-generation test: gplan-run on the tiny example for thousands of tokens (--loop wraps the
# 64-position context) under the LD_PRELOAD shim; asserts 0 allocations and 0 thread creations
# during evals, and no growth of the resident set between eval 100 and the last eval.
# Usage: long_run.sh GPLAN_COMPILE GPLAN_RUN SHIM_SO SOURCE_DIR WORK_DIR [TOKENS]
set -euo pipefail
compile=$1 run=$2 shim=$3 src=$4 work=$5 tokens=${6:-5000}
mkdir -p "$work"
plan=$work/tiny.plan report=$work/shim-report.txt
rm -f "$report"
"$compile" "$src/examples/tiny.gplan" -o "$plan" > /dev/null
GP_ALLOC_SHIM_OUT=$report LD_PRELOAD=$shim "$run" "$plan" --random-weights 7 --prompt-ids 1,2,3 \
  -n "$tokens" --ignore-eos --loop --threads 2 > "$work/tokens.txt"
cat "$report"
read -r evals allocs threads rss100 rssend eval_thread other < <(sed -E 's/[a-z0-9_]+=//g' "$report")
fail=0
if [ "$evals" -lt "$tokens" ]; then echo "FAIL: $evals evals, expected at least $tokens"; fail=1; fi
if [ "$allocs" -ne 0 ]; then
  echo "FAIL: $allocs allocations during evals ($eval_thread on the eval thread, $other on others)"; fail=1
fi
if [ "$threads" -ne 0 ]; then echo "FAIL: $threads threads created during evals"; fail=1; fi
if [ "$rss100" -le 0 ] || [ "$rssend" -le 0 ]; then echo "FAIL: no RSS samples"; fail=1; fi
if [ "$rssend" -gt "$rss100" ]; then
  echo "FAIL: RSS grew by $((rssend - rss100)) pages between eval 100 and eval $evals"; fail=1
fi
n_tok=$(wc -w < "$work/tokens.txt")
if [ "$n_tok" -ne "$tokens" ]; then echo "FAIL: $n_tok tokens printed, expected $tokens"; fail=1; fi
[ $fail -eq 0 ] && echo "ok: $evals evals, 0 allocations, 0 threads, RSS $rss100 -> $rssend pages"
exit $fail
