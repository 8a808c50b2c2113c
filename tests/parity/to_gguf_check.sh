#!/bin/sh
# parity-to-gguf against gguf-py: each GGUF file parity-to-gguf writes for the --gguf parity tests
# must be byte for byte the file scripts/parity/make_gguf.py writes with gguf-py's GGUFWriter from
# the same fixture (and, for gemma2, gemma3 and phi3, with gguf-py's tensor names). Exit 77
# (skipped) without python3 and its numpy and gguf packages.
# usage: to_gguf_check.sh PARITY_TO_GGUF SOURCE_DIR WORK_DIR
set -u
tool=$1 src=$2 work=$3
# From / with -I and -P: a gguf/ folder in the working directory (the build's tests/parity has
# one) is a namespace package that imports without being gguf-py; its GGUFWriter tells them apart.
(cd / && python3 -I -c 'import numpy; from gguf import GGUFWriter') >/dev/null 2>&1 ||
  { echo "skipped: no python3 with numpy and gguf"; exit 77; }
mkdir -p "$work" || exit 1
status=0 n=0
# FIXTURE [FLAG or - [KEY=...]]: parity-to-gguf FLAG FOLDER OUT KEY=...
while read -r fixture flag key; do
  n=$((n + 1))
  [ "$flag" = - ] && flag=
  out=$work/$n-$fixture
  # shellcheck disable=SC2086 # flag and key are empty or one word
  "$tool" $flag "$src/tests/parity/$fixture" "$out.c.gguf" $key || { status=1; continue; }
  # shellcheck disable=SC2086
  python3 "$src/scripts/parity/make_gguf.py" $flag "$src/tests/parity/$fixture" "$out.py.gguf" \
    $key >/dev/null 2>&1 || { echo "make_gguf.py $flag $fixture $key failed"; status=1; continue; }
  if cmp "$out.c.gguf" "$out.py.gguf"; then
    echo "same bytes: $fixture${flag:+ $flag}${key:+ $key} ($(wc -c <"$out.c.gguf") bytes)"
  else
    echo "DIFFERENT: $fixture${flag:+ $flag}${key:+ $key}"
    status=1
  fi
done <<'SPECS'
gpt2
gpt2 --f16
mistral
mistral --f16
mistral --sliding-window
mistral --no-head-dim
llama3
llama3 --f16
gemma2
gemma2 --f16
gemma3 - attention.sliding_window_pattern=u32:3
gemma3 --f16 attention.sliding_window_pattern=u32:3
phi3
phi3 --f16
SPECS
exit $status
