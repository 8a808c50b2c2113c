#!/bin/sh
# The whole catalogue of located diagnostics (docs/errors.md, "Every located message"): one input
# per message of the graph language (scanner, parser, lowering, shape checks), of --lora-merge, of
# the config.json reader and of the CSV reader, from tests/cli/diagnostics.txt. Each case must exit
# with status 1 and print first `FILE:LINE:COL: error: MESSAGE`, exactly the expected line, then
# line LINE of FILE and a caret under COL when that line is printable (nothing of it otherwise).
# Every message format in the sources must be produced by a case, or be listed below as one that
# names no place in a file or that the front end cannot reach; every case's message must be in
# docs/errors.md.
# Usage: diagnostics.sh GPLAN_COMPILE SOURCE_DIR TMP_DIR
set -u
compile=$1
src=$2
tmp=$3
doc=$src/docs/errors.md
data=$src/tests/cli/diagnostics.txt
export LC_ALL=C
rm -rf "$tmp"
mkdir -p "$tmp"
cd "$tmp" || exit 1
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# The data file, into the input files and cases.tsv (ARGS, a tab, the expected first line):
#   === ARGS           a case: gplan-compile ARGS (run in TMP_DIR)
#   --- FILE [-n|sh]   FILE's text: the lines up to the next marker (-n: without the final
#                      newline; sh: the one line is a shell command whose output is the file)
#   --> LINE           the expected first line of the output
# Lines starting with # outside a file's text, and empty lines there, are comments.
awk -v gen="$tmp/gen.sh" -v cases="$tmp/cases.tsv" '
function flush() {
  if (file == "")
    return
  if (kind == "sh")
    printf "%s >%s\n", text, file >>gen
  else {
    printf "%s%s", text, (kind == "-n" || text == "" ? "" : "\n") >file
    close(file)
  }
  file = ""
}
/^=== / { flush(); args = substr($0, 5); next }
/^--- / { flush(); n = split(substr($0, 5), w, " "); file = w[1]; kind = n > 1 ? w[2] : ""
          text = ""; first = 1; printf "" >file; close(file); next }
/^--> / { flush(); printf "%s\t%s\n", args, substr($0, 5) >>cases; next }
file != "" { text = first ? $0 : text "\n" $0; first = 0; next }
' "$data"
[ -f gen.sh ] && sh gen.sh
[ -s cases.tsv ] || { echo "FAIL: no cases in $data"; exit 1; }

# caret COL < LINEFILE: the caret line ir/diag.c prints under column COL (bytes) of the line.
caret() {
  awk -v col="$1" '{
    s = ""
    for (i = 1; i < col; i++) {
      c = i <= length($0) ? substr($0, i, 1) : " "
      if (c >= "\200" && c < "\300") continue
      s = s (c == "\t" ? "\t" : " ")
    }
    print s "^"
  }'
}

ran=0
tab=$(printf '\t')
while IFS="$tab" read -r args want; do
  ran=$((ran + 1))
  # shellcheck disable=SC2086  # ARGS are words
  "$compile" $args >out.txt 2>&1
  rc=$?
  got=$(sed -n 1p out.txt)
  if [ "$rc" -ne 1 ]; then
    fail "gplan-compile $args: exit status $rc, expected 1"
    head -3 out.txt
    continue
  fi
  if [ "$got" != "$want" ]; then
    fail "gplan-compile $args: first line"
    printf '  got:  %s\n  want: %s\n' "$got" "$want"
    continue
  fi
  if ! printf '%s\n' "$want" | grep -Eq '^[^:]+:[0-9]+:[0-9]+: error: '; then
    fail "case of gplan-compile $args: expected line not in FILE:LINE:COL: error: form: $want"
    continue
  fi
  file=${want%%:*}
  rest=${want#*:}
  line=${rest%%:*}
  rest=${rest#*:}
  col=${rest%%:*}
  # The line as ir/diag.c quotes it: present, no control bytes but tabs, at most 4096 bytes.
  awk -v n="$line" 'NR == n { print; found = 1; exit } END { exit !found }' "$file" |
    sed 's/\r$//' >srcline.txt
  quoted=0
  if [ -s srcline.txt ] || awk -v n="$line" 'NR == n { found = 1 } END { exit !found }' "$file"; then
    bad=$(tr -d '\t\n\040-\176\200-\377' <srcline.txt | wc -c)
    len=$(($(wc -c <srcline.txt) - 1))
    [ "$bad" -eq 0 ] && [ "$len" -le 4096 ] && quoted=1
  fi
  if [ "$quoted" -eq 1 ]; then
    sed -n 2p out.txt >got2.txt
    caret "$col" <srcline.txt >caret.txt
    sed -n 3p out.txt >got3.txt
    if ! cmp -s got2.txt srcline.txt || ! cmp -s got3.txt caret.txt; then
      fail "gplan-compile $args: the source line and caret do not follow the message"
      head -3 out.txt
    fi
  elif sed -n 2p out.txt | grep -qv ': error: '; then
    fail "gplan-compile $args: a line is quoted that is not printable"
    head -3 out.txt
  fi
  # docs/errors.md lists the message (numbers may differ there)
  shape=$(printf '%s\n' "$want" | sed 's/[0-9][0-9]*/N/g')
  sed 's/[0-9][0-9]*/N/g' "$doc" | grep -qF -- "$shape" || fail "docs/errors.md lacks: $want"
done <cases.tsv

# ---- every message format of the sources has a case ----
cut -f2 cases.tsv | sed 's/^[^:]*:[0-9]*:[0-9]*: error: //' >messages.txt

# The first string literal of each call of a diagnostic function (error, lex_error, gp_diag_error,
# ERR, FAIL), adjacent literals joined and \" \\ resolved; preprocessor lines are skipped, and a
# call with a ';', '{' or '}' before its first '"' has none.
formats() {
  awk '
!/^[ \t]*#/ { s = s $0 "\n" }
END {
  n = length(s); off = 0; rest = s
  while (match(rest, /(error|ERR|FAIL)\(/)) {
    i = off + RSTART + RLENGTH; off = i - 1; rest = substr(s, i)
    while (i <= n) {
      c = substr(s, i, 1)
      if (c == "\"" || c == ";" || c == "{" || c == "}") break
      i++
    }
    if (c != "\"") continue
    lit = ""
    while (substr(s, i, 1) == "\"") {
      for (i++; i <= n && (c = substr(s, i, 1)) != "\""; i++)
        if (c == "\\") { lit = lit substr(s, i + 1, 1); i++ } else lit = lit c
      for (i++; i <= n && substr(s, i, 1) ~ /[ \t\n]/; i++) ;
    }
    print lit
  }
}' "$@"
}

# Formats that are no located message of a user's file. Unlocated: "%s" (bison's syntax errors,
# which cases above give), the command line (-D), the graph as a whole (no LoRA weights) or the
# machine (out of memory, planner invariants). Unreachable from a file: a parameter's default can
# only name builtins and earlier parameters (constants); the lowering checks softmax's causal and
# rope's mode and attention's window keywords, sets moe's norm and act itself and computes view
# offsets in elements; the IR builder's checks of its own callers (tests/test_ir.c asserts them
# through the API).
cat >exempt.txt <<'EOF'
%s
-D %s=%s: expected an integer
-D %s=%s: expected a number
-D %s=%s: expected a dtype (f32, f16, bf16 or i32)
bad -D '%s': expected NAME=VALUE
-D %.*s: graph '%s' has no parameter '%.*s'
out of memory
no graph to build a LoRA merge from
graph '%s' declares no LoRA weights (%s<module>%s): compile it with -D lora_r=R to build its merge graph
liveness: out of memory for %d tensors
tensor %s views tensor %d, which is not defined before it
plan: out of memory
plan: out of memory for %d tensors
plan: tensor %s has kind %s and no view source
plan: offset assignment failed for %zu arena buffers (status %d)
plan: BUG: the checker found overlapping arena buffers after %s: %s
plan: BUG: the built plan is invalid: %s
plan: alignment %lld is not a power of two in [1, %lld]
plan: %d devices, expected 1..%d
plan: unknown backend mask 0x%x
plan: unknown strategy %d
plan: %d tensors is too many
parameter '%s' must default to a constant, got %s
softmax: causal must be 0 or 1, got %lld
rope: mode must be 0 (rotate-half) or 1 (interleaved), got %lld
attention: window must be in 0..%d, got %lld
moe: norm %lld, expected 0..%d
moe: act %lld, expected 0..%d
moe: the clamped swiglu needs a finite limit > 0 and alpha (got %g, %g)
moe: %d inputs; the biases are four (router, gate, up, down) or none
attention: sinks take input 4, so not with a ragged batch (seq, blocks)
view: offset %lld is not a multiple of the %lld-byte element size
%s: %d dims (at most %d are supported)
%s: missing shape
%s: bad dtype %d
%s: dim %d uses unknown symbolic dim %d
%s: dim %d has size %lld (sizes must be > 0)
tensor '%s': kind %s cannot be declared (only input, output, weight and state)
'%s' is already defined (at %s:%d)
'%s' is already defined
output '%s': no such value (tensor %d)
output '%s': the name is already used by %s '%s'
cast: bad target dtype %d
unknown op %d
%s: takes %d inputs, got %d
%s: takes %d to %d inputs, got %d
%s: %s is not a tensor (id %d)
EOF

# A format as an extended regular expression matching whole messages.
to_regex() {
  sed -e 's/[][\.*^$+?(){}|/]/\\&/g' \
      -e 's/%\\\.\\\*s/.*/g' -e 's/%\\\.[0-9][0-9]*s/.*/g' -e 's/%s/.*/g' \
      -e 's/%l*[dui]/-?[0-9]+/g' -e 's/%z[ud]/[0-9]+/g' -e 's/%g/[-+.0-9a-z]+/g' \
      -e 's/%0*[0-9]*x/[0-9a-f]+/g' -e 's/%c/./g' -e 's/%%/%/g' -e 's/^/^/' -e 's/$/$/'
}

n_formats=0
for f in dsl/scanner.l dsl/parser.y dsl/ast.c dsl/params.c dsl/lower.c ir/graph.c ir/shape.c \
  planner/csv.c planner/lora_merge.c planner/liveness.c planner/plan_build.c; do
  formats "$src/$f" >formats.txt
  while IFS= read -r fmt; do
    n_formats=$((n_formats + 1))
    grep -qxF -- "$fmt" exempt.txt && continue
    re=$(printf '%s\n' "$fmt" | to_regex)
    grep -Eq -- "$re" messages.txt || fail "$f: no case gives the message \"$fmt\""
  done <formats.txt
done
# Exempt formats that are gone from the sources: the list must not outlive them.
for f in dsl/scanner.l dsl/parser.y dsl/ast.c dsl/params.c dsl/lower.c ir/graph.c ir/shape.c \
  planner/csv.c planner/lora_merge.c planner/liveness.c planner/plan_build.c; do
  formats "$src/$f"
done >all_formats.txt
while IFS= read -r fmt; do
  grep -qxF -- "$fmt" all_formats.txt || fail "exempt format no longer in the sources: $fmt"
done <exempt.txt
[ "$n_formats" -ge 150 ] || fail "only $n_formats message formats found in the sources"

if [ "$failed" -ne 0 ]; then
  exit 1
fi
echo "diagnostics: $ran cases passed, $n_formats message formats covered or exempt"
