#!/bin/sh
# The hostile-GGUF catalogue (tests/cli/gguf_hostile.c): its tiny llama model compiles and runs,
# and each damaged variant is refused by gplan-compile --gguf and gplan-run (as a model, and as
# the weights of the intact model's plan where the damage is in the file's structure or tensors)
# with an exit status of 1 to 123 (no signal), within a timeout (no hang), and a message naming
# the file and what is wrong in it. The variants are also fuzz/corpus/gguf's hostile-*.gguf seeds,
# which must be what gguf-hostile writes now.
# Usage: hostile.sh GGUF_HOSTILE GPLAN_COMPILE GPLAN_RUN SOURCE_DIR TMP_DIR
set -u
gen=$1 compile=$2 tool=$3 src=$4 tmp=$5
rm -rf "$tmp"
mkdir -p "$tmp"
. "$src/tests/cli/lib.sh"
GPLAN_CACHE_DIR=$tmp/cache
export GPLAN_CACHE_DIR
"$gen" "$tmp" >"$tmp/catalogue.txt" || { echo "FAIL: gguf-hostile $tmp"; exit 1; }
llama=$src/examples/llama.gplan
base=$tmp/hostile-base.gguf
ids="--prompt-ids 1,2 -n 2"

# refused LABEL FILE TEXT COMMAND...: COMMAND exits with 1 to 123 (124: the timeout; above: a
# signal) within 20 s, its output naming FILE and holding TEXT.
refused() {
  label=$1 file=$2 text=$3
  shift 3
  out=$(timeout 20 "$@" 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ]; then
    fail "$label: exit status $rc, expected a refusal (1 to 123)"
  elif ! printf '%s\n' "$out" | grep -qF -- "$file: "; then
    fail "$label: the message does not name $file"
  elif ! printf '%s\n' "$out" | grep -qF -- "$text"; then
    fail "$label: output lacks: $text"
  else
    return 0
  fi
  printf '%s\n' "$out" | head -5
}

# The intact model: compiles, runs as a model and as a plan's weights.
expect_cmd 0 "ratio" timeout 20 "$compile" "$llama" --gguf "$base" -o "$tmp/base.plan"
# shellcheck disable=SC2086 # ids is a list of words
expect_cmd 0 "" timeout 20 "$tool" "$base" $ids
# shellcheck disable=SC2086
expect_cmd 0 "" timeout 20 "$tool" "$tmp/base.plan" --weights "$base" $ids

n=0
while IFS='	' read -r name class want; do
  f=$tmp/hostile-$name.gguf
  n=$((n + 1))
  refused "$name: gplan-compile --gguf" "$f" "$want" \
    "$compile" "$llama" --gguf "$f" -o "$tmp/$name.plan"
  # shellcheck disable=SC2086
  refused "$name: gplan-run MODEL" "$f" "$want" "$tool" "$f" $ids
  if [ "$class" != meta ]; then
    # shellcheck disable=SC2086
    refused "$name: gplan-run PLAN --weights" "$f" "$want" "$tool" "$tmp/base.plan" --weights "$f" $ids
  fi
done <"$tmp/catalogue.txt"
[ "$n" -ge 20 ] || fail "the catalogue has $n variants"

# The fuzz seeds are the catalogue's files, byte for byte.
for f in "$tmp"/hostile-*.gguf; do
  seed=$src/fuzz/corpus/gguf/${f##*/}
  cmp -s "$f" "$seed" ||
    fail "$seed is not what gguf-hostile writes (regenerate: gguf-hostile fuzz/corpus/gguf)"
done
for seed in "$src"/fuzz/corpus/gguf/hostile-*.gguf; do
  [ -e "$tmp/${seed##*/}" ] || fail "$seed is no longer in the catalogue"
done

[ "$failed" -eq 0 ] || exit 1
echo "hostile GGUF files: $n variants refused, none hung or crashed"
