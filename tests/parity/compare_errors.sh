#!/bin/sh
# parity-compare on damaged or mismatched input: exit statuses (0 pass, 1 fail, 2 bad input) and
# that a NaN, a changed logit, a wrong row count or a wrong token each fail.
# usage: compare_errors.sh PARITY_COMPARE FIXTURE_DIR WORK_DIR
set -u
cmp=$1 fix=$2 work=$3
mkdir -p "$work" || exit 1
bad=0
expect() { # expect STATUS DESCRIPTION COMMAND...
  want=$1 what=$2
  shift 2
  "$@" >"$work/out" 2>&1
  got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: $what: exit $got, expected $want"
    sed 's/^/  /' "$work/out"
    bad=$((bad + 1))
  fi
}
cp "$fix/logits.f32" "$work/same.f32"
cp "$fix/tokens.txt" "$work/same.txt"
expect 0 "identical logits and tokens" "$cmp" "$fix" "$work/same.f32" --got-tokens "$work/same.txt" --argmax
grep -q '0.000e+00' "$work/out" || { echo "FAIL: identical input should report 0 error"; bad=$((bad + 1)); }
expect 2 "no arguments" "$cmp"
expect 2 "missing fixture" "$cmp" "$work/nonexistent" "$work/same.f32"
expect 2 "missing logits" "$cmp" "$fix" "$work/nonexistent.f32"
expect 2 "bad --tol" "$cmp" "$fix" "$work/same.f32" --tol abc
expect 2 "unknown option" "$cmp" "$fix" "$work/same.f32" --frobnicate
printf '1 2 x3\n' >"$work/junk.txt"
expect 2 "junk in the tokens file" "$cmp" "$fix" "$work/same.f32" --got-tokens "$work/junk.txt"
# one row too many (an extra eval)
cat "$fix/logits.f32" "$fix/logits.f32" | head -c $(($(wc -c <"$fix/logits.f32") + 4 * 8)) >"$work/long.f32"
expect 1 "a partial extra row" "$cmp" "$fix" "$work/long.f32"
expect 1 "--skip beyond the rows" "$cmp" "$fix" "$work/same.f32" --skip 1
# a NaN (0x7fc00000 little-endian) and a large value in the first row
cp "$fix/logits.f32" "$work/nan.f32"
printf '\000\000\300\177' | dd of="$work/nan.f32" bs=1 seek=8 conv=notrunc 2>/dev/null
expect 1 "a NaN logit" "$cmp" "$fix" "$work/nan.f32"
cp "$fix/logits.f32" "$work/big.f32"
printf '\000\000\200\103' | dd of="$work/big.f32" bs=1 seek=12 conv=notrunc 2>/dev/null
expect 1 "one logit set to 256" "$cmp" "$fix" "$work/big.f32"
# the tokens with the last one changed, and one token short
awk '{ $NF = ($NF + 1) % 7; print }' "$fix/tokens.txt" >"$work/tok1.txt"
expect 1 "a different last token" "$cmp" "$fix" "$work/same.f32" --got-tokens "$work/tok1.txt"
awk '{ NF = NF - 1; print }' "$fix/tokens.txt" >"$work/tok2.txt"
expect 1 "one token short" "$cmp" "$fix" "$work/same.f32" --got-tokens "$work/tok2.txt"
# a loose tolerance lets a small change through; the default does not
cp "$fix/logits.f32" "$work/small.f32"
printf '\000\000\000\000' | dd of="$work/small.f32" bs=1 seek=0 conv=notrunc 2>/dev/null
expect 0 "a zeroed logit under --tol 10" "$cmp" "$fix" "$work/small.f32" --tol 10
if [ $bad -eq 0 ]; then echo "parity-compare: all error cases behave"; fi
[ $bad -eq 0 ]
