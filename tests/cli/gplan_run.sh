#!/bin/sh
# gplan-run's exit statuses, messages and outputs.
# Usage: gplan_run.sh GPLAN_COMPILE GPLAN_RUN SOURCE_DIR TMP_DIR
set -u
compile=$1
tool=$2
src=$3
tmp=$4
mkdir -p "$tmp"
. "$src/tests/cli/lib.sh"

plan=$tmp/tiny.plan
"$compile" "$src/examples/tiny.gplan" -o "$plan" > /dev/null || { echo "FAIL: compile"; exit 1; }

# usage (2)
expect 2 "no plan given"
expect 2 "give exactly one of --weights and --random-weights" "$plan"
expect 2 "give exactly one of --weights and --random-weights" "$plan" --weights a --random-weights 1
expect 2 "unknown option: --frobnicate" "$plan" --random-weights 1 --frobnicate
expect 2 "bad --prompt-ids" "$plan" --random-weights 1 --prompt-ids 1,,2
expect 2 "--threads needs 1..256" "$plan" --random-weights 1 --threads 0
expect 2 "bad --temp" "$plan" --random-weights 1 --temp -1
expect 2 "missing value for: -n" "$plan" --random-weights 1 -n
expect 0 "usage: gplan-run PLAN" --help

# bad input (1)
printf 'not a plan' > "$tmp/junk.plan"
expect 1 "bad plan file" "$tmp/junk.plan" --random-weights 1
expect 1 "cannot open" "$plan" --weights "$tmp/missing.safetensors"
expect 1 "prompt token 1 is 256, outside the vocabulary [0, 256)" "$plan" --random-weights 1 \
  --prompt-ids 3,256
expect 1 "the prompt has 65 tokens, more than the planned context of 64 positions" "$plan" \
  --random-weights 1 --prompt-ids "$(seq -s, 1 65)"
expect 1 "cuda" "$plan" --random-weights 1 --backend cuda
expect 1 "unknown backend \"tpu\"" "$plan" --random-weights 1 --backend tpu

# success (0): token count, context stop, stats, logits file, greedy determinism
expect 0 "stats: host allocations during evals:" "$plan" --random-weights 1 -n 4 --stats
expect 0 "reached the planned context (64 positions)" "$plan" --random-weights 1 \
  --prompt-ids "$(seq -s, 1 60)" -n 20
out=$("$tool" "$plan" --random-weights 1 --prompt-ids "$(seq -s, 1 60)" -n 20 2>/dev/null)
n=$(printf '%s\n' "$out" | wc -w)
# 60 prompt positions leave 4: the prompt's eval gives token 1, then 4 evals give 4 more.
[ "$n" -eq 5 ] || { echo "FAIL: $n tokens before the context ended, expected 5"; failed=1; }
out=$("$tool" "$plan" --random-weights 1 -n 100 --loop 2>/dev/null)
n=$(printf '%s\n' "$out" | wc -w)
[ "$n" -eq 100 ] || { echo "FAIL: --loop gave $n tokens, expected 100"; failed=1; }
"$tool" "$plan" --random-weights 1 --prompt-ids 1,2,3 -n 5 --logits-out "$tmp/l.bin" > /dev/null
size=$(wc -c < "$tmp/l.bin")
# 5 evals (the prompt and 4 tokens) of 256 f32 logits each.
[ "$size" -eq 5120 ] || { echo "FAIL: logits file has $size bytes, expected 5120"; failed=1; }
a=$("$tool" "$plan" --random-weights 3 --prompt-ids 1,2,3 -n 8 --threads 1 2>/dev/null)
b=$("$tool" "$plan" --random-weights 3 --prompt-ids 1,2,3 -n 8 --threads 2 --backend reference \
    2>/dev/null)
[ "$a" = "$b" ] || { echo "FAIL: cpu gave '$a', reference '$b'"; failed=1; }
c=$("$tool" "$plan" --random-weights 3 --prompt-ids 1,2,3 -n 8 --temp 0.8 --seed 5 2>/dev/null)
d=$("$tool" "$plan" --random-weights 3 --prompt-ids 1,2,3 -n 8 --temp 0.8 --seed 5 2>/dev/null)
[ "$c" = "$d" ] || { echo "FAIL: seeded sampling differs: '$c' vs '$d'"; failed=1; }

[ $failed -eq 0 ] && echo "gplan-run: all checks passed"
exit $failed
