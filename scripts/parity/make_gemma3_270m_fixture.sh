#!/bin/sh
# Builds tests/parity/gemma3_270m/fixture.txt: llama.cpp's own run of Gemma 3 270M (the Q4_K_M
# GGUF scripts/fetch_gemma3.sh fetches), its weights dequantized to f32 by llama-quantize so that
# llama.cpp computes in f32 as gplan does, through scripts/parity/llama_logits.c. The prompt (960
# tokens) runs past the model's 512-position window, so its local and global layers differ.
# usage: make_gemma3_270m_fixture.sh LLAMA_CPP_DIR MODEL.gguf OUT_DIR
#   LLAMA_CPP_DIR holds include/llama.h and a CPU build in build/bin (libllama, llama-quantize).
set -eu
llama=$1 model=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$llama/build/bin/llama-quantize" --allow-requantize "$model" "$tmp/f32.gguf" F32 >"$tmp/q.log" 2>&1
cc -O2 "$here/llama_logits.c" -I"$llama/include" -I"$llama/ggml/include" -L"$llama/build/bin" \
  -lllama -lggml -lggml-base -Wl,-rpath,"$llama/build/bin" -o "$tmp/llama_logits"
prompt=$(awk 'BEGIN { for (i = 0; i < 30; i++) printf "%sIn the year %d, the village of Almere planted %d trees along the river, and the children counted them every spring.", (i ? " " : ""), 1900 + i, 7 * i + 3; printf " The number of trees planted in the year 1905 was" }')
mkdir -p "$out"
"$tmp/llama_logits" "$tmp/f32.gguf" "$prompt" 8 >"$out/fixture.txt" 2>"$tmp/run.log"
echo "wrote $out/fixture.txt"
