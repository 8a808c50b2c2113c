#!/bin/sh
# Gemma 3 270M (the Q4_K_M GGUF people download: q4_k, q5_0, q6_k and q8_0 tensors, f32 norms
# holding 1 + w, none of rope.freq_base_swa, query_pre_attn_scalar or the layer pattern in its
# metadata) against llama.cpp's own run of the same file dequantized to f32
# (tests/parity/gemma3_270m/fixture.txt, from scripts/parity/make_gemma3_270m_fixture.sh):
# compiled with --gguf, a 960-token prompt (past the 512-position window of the local layers) in
# one eval, then 8 greedy tokens; every row within TOL (default 1e-3) of the fixture's entries and
# the tokens identical. The model comes from scripts/fetch_gemma3.sh: $GPLAN_GEMMA3_270M, else the
# cache path; when it is absent the test is skipped (exit 77), never passed.
# usage: gemma3_270m.sh BUILD_DIR FIXTURE_DIR WORK_DIR GRAPH [TOL]   (tests/parity/real_model.sh runs it)
model=${GPLAN_GEMMA3_270M:-${GPLAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gplan}/gemma-3-270m-q4_k_m.gguf}
# n_rows=1: the logits of each eval's last token only (the prompt's eval holds 960 tokens)
exec sh "$(dirname "$0")/real_model.sh" "$1" "$2" "$3" "$4" "${5:-1e-3}" gemma3_270m "$model" \
  scripts/fetch_gemma3.sh 262144 gemma3-270m/q4_k_m/cpu -D max_position_embeddings=1024 \
  -D n_batch=1024 -D n_rows=1
