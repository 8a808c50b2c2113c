#!/bin/sh
# parity-to-gguf against gguf-py: each GGUF file parity-to-gguf writes for the --gguf parity tests
# must be byte for byte the file scripts/parity/make_gguf.py writes with gguf-py's GGUFWriter from
# the same fixture. Exit 77 (skipped) without python3 and its numpy and gguf packages.
# usage: to_gguf_check.sh PARITY_TO_GGUF SOURCE_DIR WORK_DIR
set -u
tool=$1 src=$2 work=$3
python3 -c 'import numpy, gguf' >/dev/null 2>&1 || { echo "skipped: no python3 with numpy and gguf"; exit 77; }
mkdir -p "$work" || exit 1
status=0
for spec in gpt2: gpt2:--f16 mistral: mistral:--f16 mistral:--sliding-window mistral:--no-head-dim; do
  fixture=${spec%%:*} flag=${spec#*:}
  out=$work/$fixture$flag
  # shellcheck disable=SC2086 # flag is empty or one word
  "$tool" $flag "$src/tests/parity/$fixture" "$out.c.gguf" || { status=1; continue; }
  # shellcheck disable=SC2086
  python3 "$src/scripts/parity/make_gguf.py" $flag "$src/tests/parity/$fixture" "$out.py.gguf" \
    >/dev/null 2>&1 || { echo "make_gguf.py $flag $fixture failed"; status=1; continue; }
  if cmp "$out.c.gguf" "$out.py.gguf"; then
    echo "same bytes: $fixture $flag ($(wc -c <"$out.c.gguf") bytes)"
  else
    echo "DIFFERENT: $fixture $flag"
    status=1
  fi
done
exit $status
