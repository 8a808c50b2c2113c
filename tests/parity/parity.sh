#!/bin/sh
# One Hugging Face parity check: compiles a fixture's graph with --config, runs gplan-run on the
# fixture's checkpoint and compares logits and tokens with what transformers computed (one table row).
#
# usage: parity.sh --tools BUILD_DIR --fixture DIR --graph FILE.gplan --work DIR
#                  [--backend cpu|cuda] [--dtype f32|f16] [--weights PATH] [--name LABEL]
#                  [--tol X] [--argmax] [-D NAME=VALUE]... [--lora DIR [--lora-mode merge|runtime]]
#                  [--devices N] [--gguf FILE] [--config FILE]
#   f32: greedy, the prompt in one eval then one token per eval; logits within --tol (default 1e-4)
#        and the tokens identical.
#   f16: weights and KV cache in f16, teacher-forced (prompt + the fixture's tokens, one token per
#        eval, so every step's row is compared even where f16 would pick another token); logits
#        within --tol (default 1e-2); --argmax: and every step's argmax must be the fixture's token.
# A fixture with a file `base` (a LoRA fixture from scripts/parity/make_lora_fixtures.py) names a
# sibling fixture folder: config.json and the default --weights are read from there. --lora and
# --lora-mode are passed to gplan-run (runtime mode needs a plan compiled with -D lora_r=R; merge
# mode, the default, gets a merge plan compiled here with --lora-merge -D lora_r=R, R read from the
# adapter's adapter_config.json, and the same graph, config and dtype as the plan).
# --devices N compiles a tensor-parallel plan for N devices (run on the CPU: one thread per device).
# --gguf FILE compiles with --gguf FILE instead of --config (parameters from the GGUF metadata) and
# runs on FILE's weights unless --weights says otherwise. --config FILE compiles with that config
# instead of the fixture's config.json (the same model in other keys: tests/parity/gemma3's
# config_v4.json).
# BUILD_DIR holds tools/gplan-compile, tools/gplan-run and tests/parity/parity-compare.
# Exit status: that of parity-compare (0 pass, 1 fail, 2 bad input), or 1 when a tool fails.
set -u
tools= fixture= graph= work= backend=cpu dtype=f32 weights= name= tol= defines= lora= lora_dir=
lora_mode=merge argmax= gguf= config=
while [ $# -gt 0 ]; do
  case "$1" in
    --tools) tools=$2; shift 2 ;;
    --fixture) fixture=$2; shift 2 ;;
    --graph) graph=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --weights) weights=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --tol) tol=$2; shift 2 ;;
    --argmax) argmax=--argmax; shift ;;
    -D) defines="$defines -D $2"; shift 2 ;;
    --devices) defines="$defines --devices $2"; shift 2 ;;
    --allow-unused) defines="$defines --allow-unused"; shift ;;
    --gguf) gguf=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    --lora) lora_dir=$2; shift 2 ;;
    --lora-mode) lora_mode=$2; shift 2 ;;
    *) echo "parity.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$tools" ] || [ -z "$fixture" ] || [ -z "$graph" ] || [ -z "$work" ]; then
  echo "parity.sh: needs --tools, --fixture, --graph and --work" >&2
  exit 2
fi
compile=$tools/tools/gplan-compile
run=$tools/tools/gplan-run
compare=$tools/tests/parity/parity-compare
model=$fixture
if [ -f "$fixture/base" ]; then
  model=$(dirname "$fixture")/$(tr -d ' \n\r' < "$fixture/base")
fi
[ -n "$weights" ] || weights=${gguf:-$model}
params="--config ${config:-$model/config.json}"
[ -z "$gguf" ] || params="--gguf $gguf"
[ -n "$name" ] || name="$(basename "$fixture")/$backend/$dtype"
tag=$(echo "$name" | tr '/ ' '__')
mkdir -p "$work" || exit 1

prompt=$(tr -d ' \n\r' < "$fixture/prompt.txt")
tokens=$(tr '\n' ' ' < "$fixture/tokens.txt")
steps=$(echo $tokens | wc -w)
plan=$work/$tag.plan
out=$work/$tag.tokens
logits=$work/$tag.logits
log=$work/$tag.log
: >"$log"
dtype_defs=
[ "$dtype" = f16 ] && dtype_defs="-D wtype=f16 -D kv_type=f16 -D n_batch=1"
if [ -n "$lora_dir" ]; then
  lora="--lora $lora_dir --lora-mode $lora_mode"
  if [ "$lora_mode" = merge ]; then
    rank=$(sed -n 's/.*"r": *\([0-9][0-9]*\).*/\1/p' "$lora_dir/adapter_config.json" | head -n 1)
    # shellcheck disable=SC2086
    "$compile" "$graph" $params $defines $dtype_defs -D lora_r="$rank" \
        --lora-merge -o "$work/$tag.merge.plan" >>"$log" 2>&1 ||
      { printf '%-34s tool failed (the merge plan):\n' "$name"; sed 's/^/  /' "$log"; exit 1; }
    lora="$lora --lora-merge-plan $work/$tag.merge.plan"
  fi
fi

case "$dtype" in
  f32)
    [ -n "$tol" ] || tol=1e-4
    # shellcheck disable=SC2086 # defines is a list of words
    "$compile" "$graph" $params -o "$plan" $defines >>"$log" 2>&1 &&
      "$run" "$plan" --weights "$weights" --backend "$backend" --prompt-ids "$prompt" \
        -n "$steps" --logits-out "$logits" $lora >"$out" 2>>"$log"
    ok=$?
    skip=0
    cmp_args="--got-tokens $out"
    ;;
  f16)
    [ -n "$tol" ] || tol=1e-2
    # prompt, then every fixture token but the last: step s's row is the eval of the token before it
    forced=$prompt
    for t in $(echo $tokens | tr ' ' '\n' | sed '$d'); do forced="$forced,$t"; done
    skip=$(($(echo "$prompt" | tr ',' '\n' | wc -l) - 1))
    # shellcheck disable=SC2086
    "$compile" "$graph" $params -o "$plan" $defines $dtype_defs \
        >>"$log" 2>&1 &&
      "$run" "$plan" --weights "$weights" --backend "$backend" --prompt-ids "$forced" \
        -n 1 --logits-out "$logits" $lora >"$out" 2>>"$log"
    ok=$?
    cmp_args=
    ;;
  *) echo "parity.sh: --dtype is f32 or f16" >&2; exit 2 ;;
esac
if [ $ok -ne 0 ]; then
  printf '%-34s %5s  tool failed (exit %d):\n' "$name" "$steps" "$ok"
  sed 's/^/  /' "$log"
  exit 1
fi
# shellcheck disable=SC2086
"$compare" "$fixture" "$logits" --skip "$skip" --tol "$tol" --name "$name" $cmp_args $argmax
