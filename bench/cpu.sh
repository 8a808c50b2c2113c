#!/usr/bin/env bash
# CPU speed of the GPT-2 117M shape (random weights, f32): ms per eval for a 128-token prompt (one
# eval) and per generated token (decode, one token per eval), at 1 thread and at every core.
# Builds Release into build-bench. Usage: bench/cpu.sh [REPEATS (default 3)] [TOKENS (default 32)]
# Record the figures in bench/cpu-notes.md with the machine and the date.
set -euo pipefail
GP_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$GP_ROOT/scripts/setup.sh"
gp_setup
cd "$GP_ROOT"
repeats=${1:-3} tokens=${2:-32}

echo "== build (Release)"
gp_build build-bench -DCMAKE_BUILD_TYPE=Release -DGPLAN_CUDA=OFF
plan=build-bench/gpt2-117m.plan
build-bench/tools/gplan-compile examples/gpt2.gplan -o "$plan" > /dev/null
prompt=$(seq -s, 1 128)

echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== GPT-2 117M shape, f32, random weights; prompt 128 tokens, then $tokens tokens one eval each"
printf '%-8s %-4s %14s %14s %12s %10s\n' threads run "prompt ms/eval" "decode ms/tok" "decode tok/s" "allocs"
for th in 1 "$(nproc)"; do
  for r in $(seq 1 "$repeats"); do
    out=$(build-bench/tools/gplan-run "$plan" --random-weights 1 --prompt-ids "$prompt" \
          -n "$((tokens + 1))" --threads "$th" --stats 2>&1 >/dev/null)
    p=$(echo "$out" | sed -nE 's/^stats: prompt .*, ([0-9.]+) ms per eval.*/\1/p')
    g=$(echo "$out" | sed -nE 's/^stats: generation .*, ([0-9.]+) ms per eval, ([0-9.]+) tokens.*/\1/p')
    t=$(echo "$out" | sed -nE 's/^stats: generation .* ms per eval, ([0-9.]+) tokens.*/\1/p')
    a=$(echo "$out" | sed -nE 's/^stats: host allocations during evals: (.*)/\1/p')
    printf '%-8s %-4s %14s %14s %12s %10s\n' "$th" "$r" "$p" "$g" "$t" "$a"
  done
done
