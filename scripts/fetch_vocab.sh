#!/usr/bin/env bash
# Fetches llama.cpp's vocabulary test files (models/ggml-vocab-NAME.gguf with NAME.gguf.inp and
# NAME.gguf.out) from PyPI's llama-cpp-python source distribution into a cache folder outside the
# repository, then (when python has gguf and tokenizers) makes their tokenizer.json folders with
# scripts/tokenizer/make_json.py into FOLDER/json. Prints FOLDER on stdout (for GPLAN_VOCAB_DIR);
# messages go to stderr. Exits non-zero when the files cannot be had (no network, no pip).
# Usage: scripts/fetch_vocab.sh    (GPLAN_LLAMA_CPP_SDIST=FILE uses a downloaded sdist)
set -euo pipefail
GP_ROOT=$(cd "$(dirname "$0")/.." && pwd)
ver=0.3.36
cache=${XDG_CACHE_HOME:-$HOME/.cache}/gplan
dir=$cache/vocab-$ver
mkdir -p "$cache"
if [ ! -f "$dir/.complete" ]; then
  sdist=${GPLAN_LLAMA_CPP_SDIST:-$cache/llama_cpp_python-$ver.tar.gz}
  if [ ! -f "$sdist" ]; then
    echo "fetch_vocab: downloading llama-cpp-python $ver (source) into $cache" >&2
    python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$ver" \
      -d "$cache" >&2
  fi
  tmp=$(mktemp -d "$cache/vocab.XXXXXX")
  tar -xzf "$sdist" -C "$tmp" --wildcards "llama_cpp_python-$ver/vendor/llama.cpp/models/ggml-vocab-*"
  rm -rf "$dir"
  mv "$tmp/llama_cpp_python-$ver/vendor/llama.cpp/models" "$dir"
  rm -rf "$tmp"
  touch "$dir/.complete"
fi
# tokenizer.json folders: about ten seconds a vocabulary; skipped (with the reason) without the
# python packages, and then the tests skip those loaders' checks by name.
if [ ! -f "$dir/json/.complete" ]; then
  if python3 -c 'import gguf, tokenizers' 2>/dev/null; then
    echo "fetch_vocab: making tokenizer.json folders in $dir/json" >&2
    python3 "$GP_ROOT/scripts/tokenizer/make_json.py" "$dir" "$dir/json" >&2 &&
      touch "$dir/json/.complete"
  else
    echo "fetch_vocab: no tokenizer.json folders (pip install gguf tokenizers)" >&2
  fi
fi
echo "$dir"
