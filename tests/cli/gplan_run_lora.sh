#!/bin/sh
# gplan-run with a PEFT adapter (tests/cli/lora_adapter: rank 4 on a 1-layer GPT-2's c_attn, random
# A and B, lora_alpha 8): merged at load into a plain plan by a merge plan (gplan-compile
# --lora-merge, shown by gplan-inspect), or bound at run time into the adapter branches of a plan
# compiled with -D lora_r=4. Both must generate the same tokens, different from the base model's;
# usage and mismatch errors. Usage: gplan_run_lora.sh COMPILE RUN INSPECT SOURCE_DIR TMP_DIR
set -u
compile=$1 run=$2 inspect=$3 src=$4 tmp=$5
mkdir -p "$tmp"
ad=$src/tests/cli/lora_adapter
dims="-D n_layer=1 -D n_embd=64 -D n_head=4 -D vocab_size=256 -D n_positions=64 -D n_batch=16"
. "$src/tests/cli/lib.sh"
# shellcheck disable=SC2086
"$compile" "$src/examples/gpt2.gplan" $dims -o "$tmp/base.plan" >/dev/null || fail "compile base"
# shellcheck disable=SC2086
"$compile" "$src/examples/gpt2.gplan" $dims -D lora_r=4 -o "$tmp/lora.plan" >/dev/null ||
  fail "compile lora_r=4"
# shellcheck disable=SC2086
"$compile" "$src/examples/gpt2.gplan" $dims -D lora_r=4 --lora-merge -o "$tmp/merge.plan" \
  >/dev/null || fail "compile the merge plan"
# shellcheck disable=SC2086
"$compile" "$src/examples/gpt2.gplan" $dims -D lora_r=8 --lora-merge -o "$tmp/merge8.plan" \
  >/dev/null || fail "compile the rank-8 merge plan"
mp="--lora-merge-plan $tmp/merge.plan"
gen() { "$run" "$@" --random-weights 5 --prompt-ids 1,2,3 -n 12 --threads 1; }
base=$(gen "$tmp/base.plan") || fail "base run"
# shellcheck disable=SC2086
merged=$(gen "$tmp/base.plan" --lora "$ad" $mp) || fail "merge run"
runtime=$(gen "$tmp/lora.plan" --lora "$ad" --lora-mode runtime) || fail "runtime run"
unbound=$(gen "$tmp/lora.plan") || fail "lora plan without an adapter"
[ "$merged" = "$runtime" ] || fail "merge ($merged) and runtime ($runtime) modes differ"
[ "$merged" != "$base" ] || fail "the adapter changed nothing ($merged)"
[ "$unbound" = "$base" ] || fail "empty adapter slots changed the output ($unbound vs $base)"

# The merge plan is an ordinary plan: 4 targets x 3 nodes, the deltas in the arena.
out=$("$inspect" "$tmp/merge.plan") || fail "gplan-inspect merge.plan: $out"
echo "$out" | grep -q "^plan gpt2_lora_merge .*: 25 tensors, 12 nodes" ||
  fail "gplan-inspect: not the merge graph: $(echo "$out" | head -1)"
echo "$out" | grep -Eq "transformer.h.0.mlp.c_fc.delta +intermediate +f32 +\[64, 256\] +arena" ||
  fail "gplan-inspect: no c_fc delta in the arena"

# Usage errors (exit 2) and mismatches (exit 1).
expect_cmd 2 "--lora-scale, --lora-mode and --lora-merge-plan need --lora" \
  "$run" "$tmp/base.plan" --random-weights 5 --lora-mode runtime
expect_cmd 2 "bad --lora-mode (merge or runtime)" \
  "$run" "$tmp/base.plan" --random-weights 5 --lora "$ad" --lora-mode sideways
expect_cmd 2 "--lora in merge mode needs --lora-merge-plan FILE" \
  "$run" "$tmp/base.plan" --random-weights 5 --lora "$ad"
# shellcheck disable=SC2086
expect_cmd 2 "--lora-merge-plan is for merge mode, not --lora-mode runtime" \
  "$run" "$tmp/lora.plan" --random-weights 5 --lora "$ad" --lora-mode runtime $mp
expect_cmd 1 "has no adapter slots" \
  "$run" "$tmp/base.plan" --random-weights 5 --lora "$ad" --lora-mode runtime
expect_cmd 1 "lora: $ad: the adapter has rank 4, the merge plan $tmp/merge8.plan rank 8 (compile it with -D lora_r=4)" \
  "$run" "$tmp/base.plan" --random-weights 5 --lora "$ad" --lora-merge-plan "$tmp/merge8.plan"
expect_cmd 1 "$tmp/base.plan: not a LoRA merge plan (no input \"lora_scale\" f32 [1]" \
  "$run" "$tmp/base.plan" --random-weights 5 --lora "$ad" --lora-merge-plan "$tmp/base.plan"
# shellcheck disable=SC2086
expect_cmd 1 "graph 'gpt2' declares no LoRA weights" \
  "$compile" "$src/examples/gpt2.gplan" $dims --lora-merge -o "$tmp/none.plan"
# shellcheck disable=SC2086
expect_cmd 2 "--lora-merge makes a CPU plan of one device" \
  "$compile" "$src/examples/gpt2.gplan" $dims -D lora_r=4 --lora-merge --backend cuda -o "$tmp/x.plan"
# an adapter folder whose adapter_config.json is a FIFO: refused, not waited on
mkdir -p "$tmp/fifo_adapter"
rm -f "$tmp/fifo_adapter/adapter_config.json"
mkfifo "$tmp/fifo_adapter/adapter_config.json" || fail "mkfifo"
# shellcheck disable=SC2086
expect_cmd 1 "$tmp/fifo_adapter/adapter_config.json: cannot open (not a regular file: a FIFO)" \
  timeout 10 "$run" "$tmp/base.plan" --random-weights 5 --lora "$tmp/fifo_adapter" $mp
[ $failed -eq 0 ] && echo "gplan-run --lora: merge and runtime modes agree ($merged)"
exit $failed
