#!/bin/sh
# A real model's GGUF file against a fixture of reference logits (the shared body of smollm2.sh
# and gemma3_270m.sh): compiled with --gguf and DEFS, the fixture's prompt in one eval then its
# greedy tokens; every eval's last logits row within TOL of the fixture's entries and the tokens
# identical. When MODEL is absent the test is skipped (exit 77), never passed.
# usage: real_model.sh BUILD_DIR FIXTURE_DIR WORK_DIR GRAPH TOL NAME MODEL FETCH VOCAB LABEL [DEFS...]
#   NAME: the work files' stem and the messages' prefix; FETCH: the script that fetches MODEL;
#   VOCAB: the model's vocabulary size; LABEL: parity-compare-sparse's row label.
set -u
tools=$1 fixture=$2 work=$3 graph=$4 tol=$5 name=$6 model=$7 fetch=$8 vocab=$9 label=${10}
shift 10
if [ ! -s "$model" ]; then
  echo "$name: skipped: $model is absent ($fetch fetches it)"
  exit 77
fi
mkdir -p "$work" || exit 1
prompt=$(sed -n 's/^prompt //p' "$fixture/fixture.txt" | tr ' ' ,)
steps=$(sed -n 's/^greedy //p' "$fixture/fixture.txt" | wc -w)
first=$(($(echo "$prompt" | tr ',' '\n' | wc -l) - 1))
"$tools/tools/gplan-compile" "$graph" --gguf "$model" "$@" --backend cpu -o "$work/$name.plan" \
  >"$work/$name.log" 2>&1 &&
  "$tools/tools/gplan-run" "$work/$name.plan" --weights "$model" --prompt-ids "$prompt" \
    -n "$steps" --threads 2 --logits-out "$work/$name.logits" >"$work/$name.tokens" \
    2>>"$work/$name.log" ||
  { echo "$name: a tool failed:"; cat "$work/$name.log"; exit 1; }
exec "$tools/tests/parity/parity-compare-sparse" "$fixture/fixture.txt" "$work/$name.logits" \
  "$work/$name.tokens" "$vocab" "$first" "$tol" "$label"
