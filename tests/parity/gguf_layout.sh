#!/bin/sh
# A GPT-2 plan for one layout on weights of the other fails at load, naming each transposed
# Conv1D weight with both shapes (docs/errors.md E511): the Hugging Face layout's plan (--config)
# on llama.cpp's GGUF file, and the GGUF layout's plan (--gguf) on the checkpoint.
# usage: gguf_layout.sh BUILD_DIR FIXTURE_DIR GPT2_GGUF GRAPH WORK_DIR
set -u
tools=$1 fixture=$2 gguf=$3 graph=$4 work=$5
compile=$tools/tools/gplan-compile run=$tools/tools/gplan-run
mkdir -p "$work" || exit 1
status=0
hint="the transpose (a plan compiled for another layout: for a GGUF file's, compile with --gguf FILE)"
# expect PLAN WEIGHTS LINE: exit status 1 and LINE among the output's lines
expect() {
  out=$("$run" "$1" --weights "$2" --prompt-ids 1,2 -n 1 2>&1)
  rc=$?
  if [ "$rc" -ne 1 ] || ! printf '%s\n' "$out" | grep -qxF -- "$3"; then
    echo "FAIL: gplan-run $1 --weights $2: exit $rc, expected 1 and the line: $3"
    printf '%s\n' "$out" | head -4
    status=1
  else
    echo "ok: $3"
  fi
}
"$compile" "$graph" --config "$fixture/config.json" -o "$work/hf.plan" >/dev/null &&
  "$compile" "$graph" --gguf "$gguf" -o "$work/gguf.plan" >/dev/null || exit 1
expect "$work/hf.plan" "$gguf" \
  "weights: \"transformer.h.0.attn.c_attn.weight\": expected shape [48, 144] f32, file has [144, 48] f32, $hint"
expect "$work/gguf.plan" "$fixture" \
  "weights: \"transformer.h.1.mlp.c_proj.weight\": expected shape [48, 192] f32, file has [192, 48] f32, $hint"
exit $status
