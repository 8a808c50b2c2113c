#!/bin/sh
# Builds tests/parity/phi3_longrope/{short,long}/fixture.txt: llama.cpp's own run of the phi3
# fixture's weights under tests/parity/phi3_longrope/config.json (LongRoPE, original context 256
# of 1024), written as a GGUF file by parity-to-gguf, through scripts/parity/llama_logits.c at
# n_ctx 256 (llama.cpp picks the short factors) and 512 (the long ones); the phi3 fixture's
# prompt, then 32 greedy tokens.
# usage: make_phi3_longrope_fixture.sh LLAMA_CPP_DIR BUILD_DIR
#   LLAMA_CPP_DIR holds include/llama.h and a CPU build in build/bin (libllama); BUILD_DIR a gplan
#   build with tests/parity/parity-to-gguf.
set -eu
llama=$1 build=$2
here=$(cd "$(dirname "$0")" && pwd)
src=$here/../../tests/parity
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/tests/parity/parity-to-gguf" --config "$src/phi3_longrope/config.json" "$src/phi3" \
  "$tmp/phi3_longrope.gguf" tokenizer.ggml.model=str:none vocab_size=u32:256
cc -O2 "$here/llama_logits.c" -I"$llama/include" -I"$llama/ggml/include" -L"$llama/build/bin" \
  -lllama -lggml -lggml-base -Wl,-rpath,"$llama/build/bin" -o "$tmp/llama_logits"
prompt=ids:$(cat "$src/phi3/prompt.txt")
for v in short:256 long:512; do
  mkdir -p "$src/phi3_longrope/${v%%:*}"
  "$tmp/llama_logits" "$tmp/phi3_longrope.gguf" "$prompt" 32 "${v#*:}" \
    >"$src/phi3_longrope/${v%%:*}/fixture.txt" 2>"$tmp/run.log"
  echo "wrote $src/phi3_longrope/${v%%:*}/fixture.txt"
done
