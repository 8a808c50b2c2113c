#!/bin/sh
# LoRA on a GPU machine: parity with PEFT on the CUDA backend (merge and runtime modes, the
# committed fixtures tests/parity/{gpt2,llama}_lora), then the decode cost of runtime-mode adapter
# branches on all GPT-2 117M projections for rank 0 (none), 8 and 64 (fp16 weights and KV cache,
# a 32-token prompt then 128 tokens, ms per eval from gplan-run --stats). Prints a table.
# Usage: bench/lora_gpu.sh BUILD_DIR   (BUILD_DIR holds tools/ and tests/parity/parity-compare)
# BACKEND=cpu TOKENS=8 bench/lora_gpu.sh build   runs the same steps on the CPU, as a smoke test.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build-parity}" && pwd)
backend=${BACKEND:-cuda} n=${TOKENS:-128}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
for f in gpt2 llama; do
  fx=$root/tests/parity/${f}_lora
  for mode in merge runtime; do
    extra=""
    [ "$mode" = runtime ] && extra="-D lora_r=4"
    # shellcheck disable=SC2086
    sh "$root/tests/parity/parity.sh" --tools "$build" --fixture "$fx" --graph "$root/examples/$f.gplan" \
      --work "$work/p-$f-$mode" --backend "$backend" --dtype f32 --name "${f}_lora/$backend/$mode" \
      --lora "$fx" --lora-mode "$mode" $extra || fails=$((fails + 1))
  done
done
prompt=$(seq -s, 100 131)
printf '%-34s %14s %14s %10s\n' "GPT-2 117M, fp16, $backend" "decode ms/eval" "overhead" "allocs"
base=
for r in 0 8 64; do
  "$build/tools/gplan-compile" "$root/examples/gpt2.gplan" -D wtype=f16 -D kv_type=f16 \
    -D lora_r=$r -o "$work/g$r.plan" >/dev/null || { fails=$((fails + 1)); continue; }
  "$build/tools/gplan-run" "$work/g$r.plan" --random-weights 1 --backend "$backend" --prompt-ids "$prompt" \
    -n "$n" --ignore-eos --stats >/dev/null 2>"$work/s$r" || { cat "$work/s$r"; fails=$((fails + 1)); continue; }
  ms=$(sed -n 's/^stats: generation .*tokens, \([0-9.]*\) ms per eval.*/\1/p' "$work/s$r")
  al=$(sed -n 's/^stats: host allocations during evals: \([0-9n/a]*\) on the eval thread.*/\1/p' "$work/s$r")
  [ -n "$base" ] || base=$ms
  printf '%-34s %14s %13.1f%% %10s\n' "runtime adapters, rank $r" "$ms" \
    "$(awk -v a="$ms" -v b="$base" 'BEGIN { print (a - b) * 100 / b }')" "${al:-?}"
done
echo "== $fails failures"
[ $fails -eq 0 ]
