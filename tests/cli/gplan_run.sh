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
expect 2 "no model or plan given"
expect 2 "give exactly one of --weights and --random-weights" "$plan"
expect 2 "give exactly one of --weights and --random-weights" "$plan" --weights a --random-weights 1
expect 2 "unknown option: --frobnicate" "$plan" --random-weights 1 --frobnicate
expect 2 "bad --prompt-ids" "$plan" --random-weights 1 --prompt-ids 1,,2
expect 2 "--threads needs 1..256" "$plan" --random-weights 1 --threads 0
expect 2 "bad --temp" "$plan" --random-weights 1 --temp -1
expect 2 "missing value for: -n" "$plan" --random-weights 1 -n
expect 2 "--logits-all needs --logits-out FILE" "$plan" --random-weights 1 --logits-all
expect 2 "-D, --ctx and --memory need a model file" "$plan" --random-weights 1 --memory cpu=1GiB
printf 'GGUF' > "$tmp/magic.gguf" # a model by its magic: the options are checked before it is read
expect 2 "a budget is DEVICE=SIZE" "$tmp/magic.gguf" --memory 1GiB
expect 2 "--memory names another device than --backend's: cuda" "$tmp/magic.gguf" --memory cuda=1GiB
expect 0 "usage: gplan-run MODEL" --help

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

# A FIFO or a device in place of a file is refused without opening it (opening a FIFO blocks);
# timeout turns a hang into exit status 124.
rm -f "$tmp/fifo" && mkfifo "$tmp/fifo" || fail "mkfifo"
fifo_msg="$tmp/fifo: cannot open (not a regular file: a FIFO)"
expect_cmd 1 "$fifo_msg" timeout 10 "$tool" "$tmp/fifo"
expect_cmd 1 "$fifo_msg" timeout 10 "$tool" "$plan" --weights "$tmp/fifo"
expect_cmd 1 "$fifo_msg" timeout 10 "$tool" "$plan" --random-weights 1 --tokenizer "$tmp/fifo" \
  --prompt "Hi"
expect_cmd 1 "/dev/null: cannot open (not a regular file: a character device)" \
  timeout 10 "$tool" "$plan" --weights /dev/null --prompt "Hi"
expect_cmd 1 "$fifo_msg" timeout 10 "$compile" "$src/examples/llama.gplan" --gguf "$tmp/fifo" \
  -o "$tmp/fifo.plan"
expect_cmd 1 "$tmp/fifo: cannot open: not a regular file (a FIFO)" \
  timeout 10 "$tool" "$plan" --random-weights 1 --lora "$tmp" --lora-merge-plan "$tmp/fifo"

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
# --logits-all: every row of each eval (3 + 4 rows); tiny has no rows input, so it computes them all
"$tool" "$plan" --random-weights 1 --prompt-ids 1,2,3 -n 5 --logits-out "$tmp/la.bin" --logits-all \
  > /dev/null
size=$(wc -c < "$tmp/la.bin")
[ "$size" -eq 7168 ] || { echo "FAIL: --logits-all file has $size bytes, expected 7168"; failed=1; }
# A graph with a rows input (examples/gpt2.gplan): the LM head runs on the last row only unless
# --logits-all asks for every row; the rows they share are the same bytes.
g=$tmp/gpt2-rows.plan
small="-D n_layer=2 -D n_embd=64 -D n_head=4 -D vocab_size=256 -D n_positions=64 -D n_batch=8"
# shellcheck disable=SC2086 # small is a list of words
"$compile" "$src/examples/gpt2.gplan" $small -o "$g" > /dev/null || { echo "FAIL: compile gpt2"; exit 1; }
"$tool" "$g" --random-weights 2 --prompt-ids 1,2,3 -n 3 --logits-out "$tmp/g1.bin" > /dev/null
"$tool" "$g" --random-weights 2 --prompt-ids 1,2,3 -n 3 --logits-out "$tmp/ga.bin" --logits-all \
  > /dev/null
[ "$(wc -c < "$tmp/g1.bin")" -eq 3072 ] || { echo "FAIL: gpt2 last rows: $(wc -c < "$tmp/g1.bin") bytes"; failed=1; }
[ "$(wc -c < "$tmp/ga.bin")" -eq 5120 ] || { echo "FAIL: gpt2 --logits-all: $(wc -c < "$tmp/ga.bin") bytes"; failed=1; }
# the prompt's last row (row 2 of ga) and the two generated rows (rows 3, 4) against g1's three
cmp -s -n 3072 "$tmp/g1.bin" "$tmp/ga.bin" 0 2048 || { echo "FAIL: gpt2 rows differ"; failed=1; }
cmp -s -n 1024 "$tmp/ga.bin" "$tmp/ga.bin" 0 1024 && { echo "FAIL: gpt2 rows 0 and 1 equal"; failed=1; }
# shellcheck disable=SC2086
"$compile" "$src/examples/gpt2.gplan" $small -D n_rows=1 -o "$tmp/gpt2-one.plan" > /dev/null ||
  { echo "FAIL: compile gpt2 n_rows=1"; exit 1; }
expect 1 "set_rows: 3 rows asked for, the plan computes at most 1 (R <= 1;" "$tmp/gpt2-one.plan" \
  --random-weights 2 --prompt-ids 1,2,3 -n 3 --logits-out "$tmp/g2.bin" --logits-all
a=$("$tool" "$plan" --random-weights 3 --prompt-ids 1,2,3 -n 8 --threads 1 2>/dev/null)
b=$("$tool" "$plan" --random-weights 3 --prompt-ids 1,2,3 -n 8 --threads 2 --backend reference \
    2>/dev/null)
[ "$a" = "$b" ] || { echo "FAIL: cpu gave '$a', reference '$b'"; failed=1; }
c=$("$tool" "$plan" --random-weights 3 --prompt-ids 1,2,3 -n 8 --temp 0.8 --seed 5 2>/dev/null)
d=$("$tool" "$plan" --random-weights 3 --prompt-ids 1,2,3 -n 8 --temp 0.8 --seed 5 2>/dev/null)
[ "$c" = "$d" ] || { echo "FAIL: seeded sampling differs: '$c' vs '$d'"; failed=1; }

# --check-weights: a NaN planted at element 5 of an f32 tensor is found there (exit 1); a clean file
# exits 0, an unreadable one 2. tests/test_gguf.c's test_scan covers f16, bf16 and block scales.
. "$src/tests/cli/gguf_lib.sh"
{ ghead 0 1; tinfo w.weight 8; } >"$tmp/nan.gguf"
tdata "$tmp/nan.gguf" 5
{ le 2143289344 4; le 0 8; } >>"$tmp/nan.gguf"
expect_run line 5 "--check-weights nan.gguf" 1 \
  "$tmp/nan.gguf: tensor w.weight: 1 non-finite value (first at element 5: nan)" \
  "$tool" --check-weights "$tmp/nan.gguf"
expect 1 "$tmp/nan.gguf: 1 of 1 tensors hold non-finite values" --check-weights "$tmp/nan.gguf"
{ ghead 0 1; tinfo w.weight 8; } >"$tmp/clean.gguf"
tdata "$tmp/clean.gguf" 8
expect 0 "$tmp/clean.gguf: 1 tensors, 8 values, all finite" --check-weights "$tmp/clean.gguf"
expect 0 "all finite" --check-weights "$src/tests/parity/qwen2"
head -c 80 "$tmp/nan.gguf" >"$tmp/cut.gguf"
expect 2 "gplan-run: $tmp/cut.gguf: bad GGUF file (" --check-weights "$tmp/cut.gguf"
expect_cmd 2 "$tmp/fifo: cannot open (not a regular file: a FIFO)" \
  timeout 10 "$tool" --check-weights "$tmp/fifo"
expect 2 "--check-weights PATH takes no other arguments" --check-weights "$tmp/nan.gguf" -n 1

[ $failed -eq 0 ] && echo "gplan-run: all checks passed"
exit $failed
