#!/bin/sh
# gplan-run MODEL with no plan (a GGUF file or a Hugging Face folder: the graph chosen by its
# architecture, planned in process, the plan cached) gives the ids of gplan-compile GRAPH --gguf
# FILE (--config FOLDER/config.json) and gplan-run on that plan: greedy, 12 tokens after a 5-token
# prompt. The second run finds the plan in the cache.
# usage: no_plan.sh BUILD_DIR MODEL GRAPH WORK_DIR [-D NAME=VALUE ...]
set -u
tools=$1 gguf=$2 graph=$3 work=$4
shift 4
compile=$tools/tools/gplan-compile run=$tools/tools/gplan-run
name=$(basename "$gguf" .gguf)
from="--gguf $gguf"
[ -d "$gguf" ] && from="--config $gguf/config.json" name=hf_$name
cache=$work/no_plan_cache_$name
rm -rf "$cache" && mkdir -p "$cache" || exit 1
# shellcheck disable=SC2086 # from is two words
"$compile" "$graph" $from "$@" -o "$work/no_plan_$name.plan" >/dev/null || exit 1
want=$("$run" "$work/no_plan_$name.plan" --weights "$gguf" --prompt-ids 1,5,9,2,7 -n 12) || exit 1
for pass in first cached; do
  got=$(GPLAN_CACHE_DIR=$cache "$run" "$gguf" "$@" --prompt-ids 1,5,9,2,7 -n 12 --stats \
        2>"$work/no_plan_$name.err")
  plan=$(sed -n 's/^stats: backend .*, plan \(.*\)$/\1/p' "$work/no_plan_$name.err")
  case $plan in
    "$cache"/plans/*.plan) ;;
    *) echo "FAIL: $name ($pass): the plan is '$plan', not in $cache/plans"; exit 1 ;;
  esac
  [ "$got" = "$want" ] || { echo "FAIL: $name ($pass): '$got', the compiled plan gives '$want'"; exit 1; }
done
[ "$(ls "$cache/plans" | wc -l)" -eq 1 ] || { echo "FAIL: $name: $(ls "$cache/plans")"; exit 1; }
echo "ok: $name: $want"
# A plan of fewer layers than the file has leaves tensors unused: refused, unless asked for.
if [ "$name" = gpt2 ]; then
  # shellcheck disable=SC2086
  out=$("$compile" --check "$graph" $from -D n_layer=1 2>&1)
  case $out in
    *"tensors of the file are not in the graph (blk.1."*) ;;
    *) echo "FAIL: $name: one layer of two: '$out'"; exit 1 ;;
  esac
  # shellcheck disable=SC2086
  "$compile" --check "$graph" $from -D n_layer=1 --allow-unused >/dev/null ||
    { echo "FAIL: $name: --allow-unused refused"; exit 1; }
  out=$("$run" "$gguf" -D n_layer=1 --prompt-ids 1 -n 1 2>&1)
  case $out in
    *"tensors of the file are not in the graph"*) ;;
    *) echo "FAIL: $name: gplan-run with one layer of two: '$out'"; exit 1 ;;
  esac
  echo "ok: $name: unused tensors refused"
  # Another build of gplan (here a copy of the tool, which links the library statically: another
  # file) plans again rather than load what this one cached, and gives the same ids.
  mkdir -p "$work/no_plan_other" && cp "$run" "$work/no_plan_other/gplan-run" || exit 1
  got=$(GPLAN_CACHE_DIR=$cache "$work/no_plan_other/gplan-run" "$gguf" --prompt-ids 1,5,9,2,7 -n 12) ||
    exit 1
  [ "$got" = "$want" ] || { echo "FAIL: $name (other build): '$got', not '$want'"; exit 1; }
  [ "$(ls "$cache/plans" | wc -l)" -eq 2 ] ||
    { echo "FAIL: $name: another build's plans: $(ls "$cache/plans")"; exit 1; }
  echo "ok: $name: another build plans again"
fi
