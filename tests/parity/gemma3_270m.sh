#!/bin/sh
# Gemma 3 270M (the Q4_K_M GGUF people download: q4_k, q5_0, q6_k and q8_0 tensors, f32 norms
# holding 1 + w, none of rope.freq_base_swa, query_pre_attn_scalar or the layer pattern in its
# metadata) against llama.cpp's own run of the same file dequantized to f32
# (tests/parity/gemma3_270m/fixture.txt, from scripts/parity/make_gemma3_270m_fixture.sh):
# compiled with --gguf, a 960-token prompt (past the 512-position window of the local layers) in
# one eval, then 8 greedy tokens; every row within TOL (default 1e-3) of the fixture's entries and
# the tokens identical. The model comes from scripts/fetch_gemma3.sh: $GPLAN_GEMMA3_270M, else the
# cache path; when it is absent the test is skipped (exit 77), never passed.
# usage: gemma3_270m.sh BUILD_DIR FIXTURE_DIR WORK_DIR GRAPH [TOL]
set -u
tools=$1 fixture=$2 work=$3 graph=$4 tol=${5:-1e-3}
model=${GPLAN_GEMMA3_270M:-${GPLAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gplan}/gemma-3-270m-q4_k_m.gguf}
if [ ! -s "$model" ]; then
  echo "gemma3_270m: skipped: $model is absent (scripts/fetch_gemma3.sh fetches it)"
  exit 77
fi
mkdir -p "$work" || exit 1
prompt=$(sed -n 's/^prompt //p' "$fixture/fixture.txt" | tr ' ' ,)
steps=$(sed -n 's/^greedy //p' "$fixture/fixture.txt" | wc -w)
first=$(($(echo "$prompt" | tr ',' '\n' | wc -l) - 1))
# n_rows=1: the logits of each eval's last token only (the prompt's eval holds 960 tokens)
"$tools/tools/gplan-compile" "$graph" --gguf "$model" -D max_position_embeddings=1024 \
  -D n_batch=1024 -D n_rows=1 --backend cpu -o "$work/gemma3_270m.plan" >"$work/gemma3_270m.log" 2>&1 &&
  "$tools/tools/gplan-run" "$work/gemma3_270m.plan" --weights "$model" --prompt-ids "$prompt" \
    -n "$steps" --threads 2 --logits-out "$work/gemma3_270m.logits" >"$work/gemma3_270m.tokens" \
    2>>"$work/gemma3_270m.log" ||
  { echo "gemma3_270m: a tool failed:"; cat "$work/gemma3_270m.log"; exit 1; }
exec "$tools/tests/parity/parity-compare-sparse" "$fixture/fixture.txt" "$work/gemma3_270m.logits" \
  "$work/gemma3_270m.tokens" 262144 "$first" "$tol" gemma3-270m/q4_k_m/cpu
