#!/bin/sh
# SmolLM2-135M-Instruct (Q4_1 GGUF with one Q8_0 tensor) against transformers, which dequantizes
# the file to f32 (tests/parity/smollm2/fixture.txt, from scripts/parity/make_smollm2_fixture.py):
# compiled with --gguf, the prompt in one eval then 32 greedy tokens; every eval's last logits row
# within TOL (default 1e-3) of the fixture's entries and the tokens identical.
# The model comes from scripts/fetch_models.sh: $GPLAN_SMOLLM2, else the default cache path; when
# it is absent the test is skipped (exit 77), never passed.
# usage: smollm2.sh BUILD_DIR FIXTURE_DIR WORK_DIR GRAPH [TOL]
set -u
tools=$1 fixture=$2 work=$3 graph=$4 tol=${5:-1e-3}
model=${GPLAN_SMOLLM2:-${GPLAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gplan}/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -s "$model" ]; then
  echo "smollm2: skipped: $model is absent (scripts/fetch_models.sh fetches it)"
  exit 77
fi
mkdir -p "$work" || exit 1
prompt=$(sed -n 's/^prompt //p' "$fixture/fixture.txt" | tr ' ' ,)
steps=$(sed -n 's/^greedy //p' "$fixture/fixture.txt" | wc -w)
first=$(($(echo "$prompt" | tr ',' '\n' | wc -l) - 1))
"$tools/tools/gplan-compile" "$graph" --gguf "$model" -D max_position_embeddings=256 \
  -D n_batch=32 --backend cpu -o "$work/smollm2.plan" >"$work/smollm2.log" 2>&1 &&
  "$tools/tools/gplan-run" "$work/smollm2.plan" --weights "$model" --prompt-ids "$prompt" \
    -n "$steps" --threads 2 --logits-out "$work/smollm2.logits" >"$work/smollm2.tokens" \
    2>>"$work/smollm2.log" ||
  { echo "smollm2: a tool failed:"; cat "$work/smollm2.log"; exit 1; }
exec "$tools/tests/parity/parity-compare-sparse" "$fixture/fixture.txt" "$work/smollm2.logits" \
  "$work/smollm2.tokens" 49152 "$first" "$tol" smollm2-135m/q4_1/cpu
