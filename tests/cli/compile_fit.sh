#!/bin/sh
# gplan-compile --memory and --fit: the answer fits and one more does not (each plan's regions
# summed from its summary), refusals with figures (exit 3), usage errors (exit 2).
# Usage: compile_fit.sh TOOL SOURCE_DIR TMP_DIR
set -u
. "$2/tests/cli/lib.sh"
tool_src_tmp "$@"

g=$src/examples/llama.gplan
small="-D num_hidden_layers=2 -D hidden_size=256 -D intermediate_size=512 -D num_attention_heads=4
       -D num_key_value_heads=2 -D vocab_size=1000 -D n_batch=16"
# bytes CTX [MORE -D...]: the sum of the plan's regions at that context, from its summary
bytes() {
  ctx=$1
  shift
  # shellcheck disable=SC2086
  "$tool" "$g" $small -D max_position_embeddings="$ctx" "$@" --backend cuda -o "$tmp/b.plan" |
    awk '$1 ~ /^(arena|state|weights|io|extras)$/ && $3 == "B" { s += $2 } END { print s }'
}
s1=$(bytes 1)
s4096=$(bytes 4096)
[ "$s1" -gt 0 ] && [ "$s4096" -gt "$s1" ] || fail "plan bytes: $s1 at context 1, $s4096 at 4096"
budget=$(( (s1 + s4096) / 2 ))

# shellcheck disable=SC2086
out=$("$tool" "$g" $small -D max_position_embeddings=4096 --memory cuda="$budget" --fit 2>&1)
rc=$?
n=$(printf '%s\n' "$out" | sed -nE 's/^fit: cuda=.*: max_position_embeddings=([0-9]+) \(of 4096\) needs .*/\1/p')
if [ "$rc" -ne 0 ] || [ -z "$n" ]; then
  fail "--fit: exit status $rc: $out"
else
  [ "$n" -ge 1 ] && [ "$n" -lt 4096 ] || fail "--fit answered $n, not within [1, 4096)"
  fits=$(bytes "$n")
  over=$(bytes $((n + 1)))
  [ "$fits" -le "$budget" ] || fail "context $n: $fits bytes, more than the budget $budget"
  [ "$over" -gt "$budget" ] || fail "context $((n + 1)): $over bytes, within the budget $budget"
  printf '%s\n' "$out" | grep -qxF "placement: every layer on cuda" || fail "--fit: no placement line"
  # shellcheck disable=SC2086
  expect 0 "-> $tmp/at_n.plan" "$g" $small -D max_position_embeddings="$n" \
    --memory cuda="$budget" -o "$tmp/at_n.plan"
  # shellcheck disable=SC2086
  expect 3 "more than --memory's" "$g" $small -D max_position_embeddings=$((n + 1)) \
    --memory cuda="$budget" -o "$tmp/over.plan"
  [ ! -e "$tmp/over.plan" ] || fail "a plan over the budget was written"
  # shellcheck disable=SC2086
  expect 0 "-> $tmp/fit.plan" "$g" $small -D max_position_embeddings=4096 \
    --memory cuda="$budget" --fit -o "$tmp/fit.plan"
fi

# the number of sequences: n_seq grows, each of the full context
seq1=$(bytes 256 -D n_seq=1)
seq2=$(bytes 256 -D n_seq=2)
budget2=$(( seq1 + (seq2 - seq1) * 5 / 2 ))  # room for 3 sequences, not 4
# shellcheck disable=SC2086
expect 0 ": n_seq=3 needs " "$g" $small -D max_position_embeddings=256 -D n_seq=1 \
  --memory cuda="$budget2" --fit

# refusals with the figures
# shellcheck disable=SC2086
expect 3 "even max_position_embeddings=1 needs " "$g" $small --memory cuda=1KiB --fit
# shellcheck disable=SC2086
expect 3 ", more than --memory's 1.00 KiB; placing layers on the host is not implemented" \
  "$g" $small --memory cuda=1KiB -o "$tmp/x.plan"
expect 1 "graph 'tiny' has neither" "$src/examples/tiny.gplan" --memory cpu=1GiB --fit

# usage
expect 2 "--fit needs --memory DEV=SIZE" "$g" --fit
expect 2 "unknown unit 'XB'" "$g" --memory cuda=1XB -o "$tmp/x.plan"
expect 2 "DEVICE cpu or cuda" "$g" --memory gpu=1GiB -o "$tmp/x.plan"
expect 2 "the size must be a positive number" "$g" --memory cuda=-5GiB -o "$tmp/x.plan"
expect 2 "--backend must be that device" "$g" --memory cuda=1GiB --backend cpu -o "$tmp/x.plan"
expect 2 "--memory applies to planning FILE" --check "$g" --memory cuda=1GiB
expect 2 "-o FILE is required to plan" "$g" --memory cuda=1GiB

if [ "$failed" -ne 0 ]; then
  exit 1
fi
echo "gplan-compile --memory/--fit: all tests passed"
