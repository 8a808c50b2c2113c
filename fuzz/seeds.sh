#!/bin/sh
# Seed corpora for the fuzz targets, made from examples/ and from what the tools produce.
# Usage: fuzz/seeds.sh OUT_DIR GPLAN_COMPILE  (writes OUT_DIR/{dsl,plan,safetensors,csv,gguf}/)
set -eu
out=$1
compile=$2
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out/dsl" "$out/plan" "$out/safetensors" "$out/csv" "$out/gguf"

# dsl: the examples, and every code block of the language reference.
cp "$src"/examples/*.gplan "$out/dsl/"
awk -v dir="$out/dsl" '/^```/ { if (inb) { inb = 0; close(f) } else { inb = 1; n++; f = sprintf("%s/doc%02d.gplan", dir, n) } next }
     inb { print > f }' "$src/docs/language.md"

# plan: small models planned with each strategy, alignment and device count.
i=0
for args in "tiny.gplan" "tiny.gplan --strategy greedy --alignment 4096" "tiny.gplan --devices 2" \
  "tiny.gplan -D n_layer=1 -D n_positions=8 --strategy exact" \
  "gpt2.gplan -D n_layer=1 -D n_positions=16 -D vocab_size=64" \
  "llama.gplan -D num_hidden_layers=1 -D max_position_embeddings=16 -D vocab_size=64"; do
  i=$((i + 1))
  set -- $args
  f=$1
  shift
  "$compile" "$src/examples/$f" -o "$out/plan/seed$i.plan" "$@" >/dev/null 2>&1 ||
    echo "seeds.sh: could not plan $f $*" >&2
done

# csv: MiniMalloc problems and a solution (with its offset column).
printf 'id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n' >"$out/csv/p12.csv"
printf 'size,upper,id,lower\r\n8,2,a,0\r\n16,4,b,1\r\n' >"$out/csv/crlf.csv"
"$compile" --buffers "$out/csv/p12.csv" -o "$out/csv/s12.csv" >/dev/null 2>&1 ||
  echo "seeds.sh: --buffers failed" >&2

# safetensors: u64 little-endian header length, the JSON header, the data.
st() { # st FILE JSON DATA_BYTES
  n=$(printf '%s' "$2" | wc -c)
  printf "$(printf '\\%03o\\%03o\\%03o\\%03o\\000\\000\\000\\000' $((n % 256)) $((n / 256 % 256)) \
    $((n / 65536 % 256)) $((n / 16777216 % 256)))" >"$1"
  printf '%s' "$2" >>"$1"
  head -c "$3" /dev/zero | tr '\0' '\077' >>"$1"
}
st "$out/safetensors/one.safetensors" '{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}' 24
st "$out/safetensors/mixed.safetensors" '{"__metadata__":{"format":"pt"},"a":{"dtype":"F16","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]},"c":{"dtype":"I32","shape":[],"data_offsets":[16,20]},"d":{"dtype":"F64","shape":[1,1,1,1,1],"data_offsets":[20,28]},"e":{"dtype":"U8","shape":[0],"data_offsets":[28,28]}}' 28
st "$out/safetensors/padded.safetensors" '{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}      ' 4
printf '{"metadata":{"total_size":20},"weight_map":{"x":"a.safetensors","y":"a.safetensors"}}' \
  >"$out/safetensors/index.json"

# gguf: gguf-py's GGUFWriter output (the committed corpus, fuzz/corpus/gguf/, has the test writer's,
# and the hostile-GGUF catalogue's tiny model and its variants, written by tests/cli/gguf_hostile.c
# and checked to be current by ctest cli_hostile_gguf).
cp "$src/tests/gguf/fixture.gguf" "$out/gguf/"
