#!/usr/bin/env bash
# Mixture-of-experts models on the CPU, gplan against llama.cpp's llama-bench on the same files in
# one run (bench/gguf.sh's table: decode ms a token, a 128-token prompt's tokens/s): a small
# Qwen3-MoE shape (scripts/bench/make_random_gguf.py --shape qwen3moe-small: 12 layers, 32 experts
# of 512, 8 used; random f16 weights, then llama-quantize's Q4_K_M and Q8_0), in $GPLAN_CACHE/bench.
# usage: bench/moe.sh LLAMA_CPP_BUILD_BIN [THREADS (2)] [REPEATS (3)]. Notes: bench/moe-notes.md.
set -euo pipefail
GP_ROOT=$(cd "$(dirname "$0")/.." && pwd)
lcpp=${1:?usage: bench/moe.sh LLAMA_CPP_BUILD_BIN [THREADS] [REPEATS]}
cache=${GPLAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gplan}
vocab=$GP_ROOT/../shared/data/vocab/ggml-vocab-llama-bpe.gguf
mkdir -p "$cache/bench"
f16=$cache/bench/qwen3moe-small-f16.gguf
[ -s "$f16" ] || python3 "$GP_ROOT/scripts/bench/make_random_gguf.py" "$f16" "$vocab" \
                   --shape qwen3moe-small
models=()
for q in Q4_K_M Q8_0; do
  f=$cache/bench/qwen3moe-small-$q.gguf
  [ -s "$f" ] || "$lcpp/llama-quantize" "$f16" "$f" "$q" >/dev/null 2>&1
  models+=("qwen3moe-small_${q,,}:$f:qwen3moe")
done
GGUF_MODELS="${models[*]}" exec "$GP_ROOT/bench/gguf.sh" "$lcpp" "${2:-2}" "${3:-3}"
