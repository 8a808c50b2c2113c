#!/bin/sh
# gplan-inspect on a plan made by gplan-compile: the views it offers, and its refusal of damaged
# plan files. Usage: gplan_inspect.sh COMPILE INSPECT SOURCE_DIR TMP_DIR
set -u
compile=$1
inspect=$2
src=$3
tmp=$4
mkdir -p "$tmp"
tool=$inspect
. "$src/tests/cli/lib.sh"

plan=$tmp/tiny.plan
"$compile" "$src/examples/tiny.gplan" -o "$plan" >/dev/null || fail "gplan-compile tiny"

expect 0 "plan tiny" "$plan"
expect 0 "in-place of" "$plan"
expect 0 '"arena_bytes"' "$plan" --json
expect 0 '"lower_bound_bytes"' "$plan" --json
"$inspect" "$plan" --timeline >"$tmp/timeline.txt" 2>&1 || fail "--timeline exit status"
[ "$(wc -l <"$tmp/timeline.txt")" -gt 10 ] || fail "--timeline printed too little"
"$inspect" "$plan" --svg "$tmp/tiny.svg" >/dev/null 2>&1 || fail "--svg exit status"
grep -q '<svg' "$tmp/tiny.svg" && grep -q '<title>' "$tmp/tiny.svg" || fail "--svg content"

# The JSON's arena equals the summary's arena line.
arena_json=$("$inspect" "$plan" --json | tr ',' '\n' | grep '"arena_bytes"' | tr -dc '0-9')
"$inspect" "$plan" | grep -q "arena *$arena_json B" || fail "arena bytes differ between views"

# Damaged plans: truncated, flipped magic, not a plan at all.
head -c 100 "$plan" >"$tmp/trunc.plan"
expect 1 "$tmp/trunc.plan: bad plan file (" "$tmp/trunc.plan"
cp "$plan" "$tmp/magic.plan" && printf 'X' | dd of="$tmp/magic.plan" bs=1 count=1 conv=notrunc 2>/dev/null
expect 1 "$tmp/magic.plan: bad plan file (" "$tmp/magic.plan"
expect 1 "$src/examples/tiny.gplan: bad plan file (" "$src/examples/tiny.gplan"
expect 1 "$tmp/none.plan" "$tmp/none.plan"
# A FIFO, a device or a folder is refused without waiting on it (opening a FIFO blocks; timeout
# turns a hang into exit status 124).
rm -f "$tmp/fifo" && mkfifo "$tmp/fifo" || fail "mkfifo"
expect_cmd 1 "gplan-inspect: $tmp/fifo: cannot open: not a regular file (a FIFO)" \
  timeout 10 "$inspect" "$tmp/fifo"
expect_cmd 1 "gplan-inspect: /dev/null: cannot open: not a regular file (a device)" \
  timeout 10 "$inspect" /dev/null
expect_cmd 1 "gplan-inspect: $tmp: cannot open: not a regular file (a folder)" \
  timeout 10 "$inspect" "$tmp"
expect 2 "" --frob "$plan"
expect 2 ""

[ "$failed" -eq 0 ] || exit 1
echo "gplan-inspect: all tests passed"
