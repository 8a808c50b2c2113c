#!/bin/sh
# One call on the GPU machine over a build folder made elsewhere (cmake -DGPLAN_CUDA=ON
# -DCMAKE_CUDA_ARCHITECTURES=90, targets test_cuda gpu_bench gplan-compile gplan-run
# gp_cuda_allocshim gp_alloc_shim parity-compare): the CUDA suite; text in and out and chat on
# the CUDA backend (a small Llama with q4_1 weights and tests/cli/tokenizer's vocabulary) against
# the CPU; GPT-2 decode timings and LoRA's cost (bench/gpu.sh with its default configuration and
# bench/lora_gpu.sh), with the one-token launch counts of the LoRA plans; one table last.
# usage: bench/gpu_check.sh BUILD_DIR   (logs in $OUT, default /tmp/gpu-check)
set -u
B=$1
O=${OUT:-/tmp/gpu-check}
mkdir -p "$O"
# The test binaries open the sources where they were built (/work/main here).
[ -e /work/main ] || { mkdir -p /work && ln -s "$PWD" /work/main; }
export LD_LIBRARY_PATH=$PWD/$B/lib:${LD_LIBRARY_PATH:-}
nvidia-smi -L
row() { printf '| %-52s | %s |\n' "$1" "$2" >>"$O/table"; }
: >"$O/table"

# 1. The CUDA suite (every op against the CPU, the models, quantized products, LoRA).
timeout 200 "$B/tests/test_cuda" >"$O/test_cuda.log" 2>&1
rc=$?
row "test_cuda (exit $rc)" "$(grep -E '^ *(tests|asserts) ' "$O/test_cuda.log" | tr -s ' ' | paste -sd ';')"
grep -B2 -A3 -E 'FAILED|failures:' "$O/test_cuda.log" | head -40

# 2. Text on CUDA: greedy text from a prompt and a two-turn chat, q4_1 weights, against the CPU.
p=$O/small.plan
"$B/tools/gplan-compile" examples/llama.gplan -D num_hidden_layers=2 -D hidden_size=256 \
  -D intermediate_size=512 -D num_attention_heads=4 -D num_key_value_heads=2 -D vocab_size=384 \
  -D max_position_embeddings=256 -D n_batch=32 -D wtype=q4_1 -o "$p" >/dev/null
for be in cpu cuda; do
  "$B/tools/gplan-run" "$p" --random-weights 7 --tokenizer tests/cli/tokenizer --backend $be \
    --prompt "Once upon a time" -n 24 --ignore-eos >"$O/text.$be" 2>"$O/text.$be.err"
  printf 'Hello there\nAnd again\n' | "$B/tools/gplan-run" "$p" --random-weights 7 \
    --tokenizer tests/cli/tokenizer --backend $be --chat -n 12 --stats >"$O/chat.$be" 2>"$O/chat.$be.err"
done
cmp -s "$O/text.cpu" "$O/text.cuda" && t=same || t=DIFFERENT
cmp -s "$O/chat.cpu" "$O/chat.cuda" && c=same || c=DIFFERENT
row "--prompt text, q4_1, cuda vs cpu (24 tokens)" "$t ($(wc -c <"$O/text.cuda") bytes)"
row "--chat two turns, cuda vs cpu" "$c; cuda: $(grep -o 'turn [0-9]*: [0-9]* tokens evaluated' "$O/chat.cuda.err" | paste -sd ';')"
row "allocations while generating (cuda --stats)" "$(grep -E 'allocations during evals|outside evals' "$O/chat.cuda.err" | sed 's/stats: //' | paste -sd ';')"

# 3. Decode timings and LoRA (the default configuration only).
mkdir -p "$B/bin" && cp "$B/tests/test_cuda" "$B/bin/test_cuda" 2>/dev/null # gpu.sh: no second run
OUT=$O/gpu CONFIGS=default TOKENS=300 timeout 150 sh bench/gpu.sh "$B" >"$O/gpu.txt" 2>&1
for m in gpt2-117m gpt2-1558m; do
  row "$m decode ms a token (gpu_bench default)" "$(awk '/^RESULT/ && $4=="decode_ms" {print $5}' "$O/gpu/$m.log" | paste -sd ' ')"
done
row "gpt2 cuda vs cpu" "$(grep '^CHECK' "$O/gpu.txt" | awk '{print $2, $6, $8}' | paste -sd ';')"
awk '/^runtime adapters/ {print $3, $4, $5, $6}' "$O/gpu/lora.log" 2>/dev/null |
  while read -r a b ms ov; do row "LoRA runtime $a $b, ms a token, overhead" "$ms $ov"; done
for r in 0 8; do
  "$B/tools/gplan-compile" examples/gpt2.gplan -D wtype=f16 -D kv_type=f16 -D lora_r=$r \
    -o "$O/l$r.plan" >/dev/null
  GPLAN_CUDA_VERBOSE=1 "$B/tools/gplan-run" "$O/l$r.plan" --random-weights 1 --backend cuda \
    --prompt-ids 1,2,3 -n 2 >/dev/null 2>"$O/verbose$r.log"
  row "GPT-2 lora_r=$r: the backend's fusion report" "$(grep -iE 'launch|lora' "$O/verbose$r.log" | head -3 | paste -sd ';')"
done
echo
cat "$O/table"
