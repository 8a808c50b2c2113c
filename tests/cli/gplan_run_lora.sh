#!/bin/sh
# gplan-run with a PEFT adapter (tests/cli/lora_adapter: rank 4 on a 1-layer GPT-2's c_attn, random
# A and B, lora_alpha 8): merged at load into a plain plan, or bound at run time into the adapter
# branches of a plan compiled with -D lora_r=4. Both must generate the same tokens, different from
# the base model's. Usage: gplan_run_lora.sh COMPILE RUN SOURCE_DIR TMP_DIR
set -u
compile=$1 run=$2 src=$3 tmp=$4
mkdir -p "$tmp"
ad=$src/tests/cli/lora_adapter
dims="-D n_layer=1 -D n_embd=64 -D n_head=4 -D vocab_size=256 -D n_positions=64 -D n_batch=16"
failed=0
fail() { echo "FAIL: $*"; failed=1; }
# shellcheck disable=SC2086
"$compile" "$src/examples/gpt2.gplan" $dims -o "$tmp/base.plan" >/dev/null || fail "compile base"
# shellcheck disable=SC2086
"$compile" "$src/examples/gpt2.gplan" $dims -D lora_r=4 -o "$tmp/lora.plan" >/dev/null ||
  fail "compile lora_r=4"
gen() { "$run" "$@" --random-weights 5 --prompt-ids 1,2,3 -n 12 --threads 1; }
base=$(gen "$tmp/base.plan") || fail "base run"
merged=$(gen "$tmp/base.plan" --lora "$ad") || fail "merge run"
runtime=$(gen "$tmp/lora.plan" --lora "$ad" --lora-mode runtime) || fail "runtime run"
unbound=$(gen "$tmp/lora.plan") || fail "lora plan without an adapter"
[ "$merged" = "$runtime" ] || fail "merge ($merged) and runtime ($runtime) modes differ"
[ "$merged" != "$base" ] || fail "the adapter changed nothing ($merged)"
[ "$unbound" = "$base" ] || fail "empty adapter slots changed the output ($unbound vs $base)"
out=$("$run" "$tmp/base.plan" --random-weights 5 --lora-mode runtime 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -qF -- "--lora-scale and --lora-mode need --lora" ||
  fail "--lora-mode without --lora: $out"
out=$("$run" "$tmp/base.plan" --random-weights 5 --lora "$ad" --lora-mode sideways 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -qF -- "bad --lora-mode (merge or runtime)" ||
  fail "bad --lora-mode: $out"
out=$("$run" "$tmp/base.plan" --random-weights 5 --lora "$ad" --lora-mode runtime 2>&1)
[ $? -eq 1 ] || fail "runtime mode on a plan without adapter slots: $out"
[ $failed -eq 0 ] && echo "gplan-run --lora: merge and runtime modes agree ($merged)"
exit $failed
