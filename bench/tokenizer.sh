#!/usr/bin/env bash
# Encoding speed of gp_tokenizer against Hugging Face tokenizers (pip) in the same run, on the same
# tokenizer.json, one thread each: 1 MB of mixed text (bench/tokenizer_text.py: prose, code, CJK,
# Cyrillic, emoji, numbers, whitespace runs; deterministic), best of REPEATS encodes of the whole
# text. gpt-2 and llama-spm come from tests/tokenizer/json, llama-bpe (and the GGUF files) from
# scripts/fetch_vocab.sh's folder. Notes and figures: bench/tokenizer-notes.md.
# Usage: bench/tokenizer.sh [REPEATS]   (default 5)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
reps=${1:-5}
build="$root/build-bench"
cmake -S "$root" -B "$build" -DGPLAN_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target tokenizer-bench -j2 >/dev/null
python3 -c 'import tokenizers' 2>/dev/null || { echo "error: pip install tokenizers" >&2; exit 1; }
vocab=${GPLAN_VOCAB_DIR:-$("$root/scripts/fetch_vocab.sh" || true)}
text="$build/tokenizer-text.txt"
python3 "$root/bench/tokenizer_text.py" "$text" 1048576
lscpu | grep -E 'Model name' || true
echo "python tokenizers $(python3 -c 'import tokenizers; print(tokenizers.__version__)'), load: $(cut -d' ' -f1-3 /proc/loadavg)"

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p"; }
rows=()
for name in gpt-2 llama-bpe llama-spm; do
  dir="$root/tests/tokenizer/json/$name"
  [ -f "$dir/tokenizer.json" ] || dir="$vocab/json/$name"
  if [ ! -f "$dir/tokenizer.json" ]; then
    echo "$name: skipped (no tokenizer.json: scripts/fetch_vocab.sh makes it)"
    continue
  fi
  g=$("$build/bench/tokenizer-bench" "$dir" "$text" "$reps")
  echo "$name tokenizer.json: $g"
  gg=""
  if [ -f "$vocab/ggml-vocab-$name.gguf" ]; then
    gg=$("$build/bench/tokenizer-bench" "$vocab/ggml-vocab-$name.gguf" "$text" "$reps")
    echo "$name GGUF:           $gg"
  fi
  h=$(python3 "$root/bench/tokenizer_hf.py" "$dir/tokenizer.json" "$text" "$reps")
  echo "$h" | sed "s/^/$name HF:             /"
  hw=$(echo "$h" | grep 'impl=hf ')
  hl=$(echo "$h" | grep 'impl=hf-lines')
  same=no
  [ "$(echo "$g" | field fnv)" = "$(echo "$hw" | field fnv)" ] && same=yes
  gm=$(echo "$g" | field mb_s)
  hm=$(echo "$hw" | field mb_s)
  lm=$(echo "$hl" | field mb_s)
  best_hf=$(python3 -c "print(max($hm, $lm))")
  ratio=$(python3 -c "print(f'{$gm / $best_hf:.1f}x')")
  rows+=("$(printf '| %-10s | %10s | %7s | %13s | %15s | %-8s |' "$name" "$gm" "$hm" "$lm" "$ratio" "$same")")
done
echo
echo "| vocab      | gplan MB/s | HF MB/s | HF lines MB/s | gplan / best HF | same ids |"
echo "|------------|------------|---------|---------------|-----------------|----------|"
for r in "${rows[@]}"; do echo "$r"; done
