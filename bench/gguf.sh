#!/usr/bin/env bash
# Quantized GGUF models on the CPU, gplan against llama.cpp's llama-bench on the same files in one
# run: decode ms a token (32 tokens) and a 128-token prompt's tokens/s, THREADS threads, REPEATS
# runs each (min and max reported). Models: SmolLM2-135M-Instruct Q4_1 (the real file,
# scripts/fetch_models.sh) and the TinyLlama-1.1B shape in Q8_0, Q4_0 and Q4_K_M (random weights:
# scripts/bench/make_random_gguf.py writes f16, llama-quantize quantizes it), in $GPLAN_CACHE/bench.
# usage: bench/gguf.sh LLAMA_CPP_BUILD_BIN [THREADS (2)] [REPEATS (3)]
#   GGUF_MODELS="NAME:FILE:GRAPH ..." replaces the models (bench/moe.sh), GRAPH in examples/.
#   LLAMA_CPP_BUILD_BIN holds llama-bench and llama-quantize, built from llama-cpp-python 0.3.36's
#   vendor/llama.cpp (cmake -B build -DGGML_CUDA=OFF; cmake --build build --target llama-bench
#   llama-quantize). Record the table in bench/gguf-notes.md with the machine and the date.
set -euo pipefail
GP_ROOT=$(cd "$(dirname "$0")/.." && pwd)
lcpp=${1:?usage: bench/gguf.sh LLAMA_CPP_BUILD_BIN [THREADS] [REPEATS]}
threads=${2:-2} repeats=${3:-3}
cache=${GPLAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gplan}
B=$GP_ROOT/build-bench
cd "$GP_ROOT"
. scripts/setup.sh
gp_build "$B" -DCMAKE_BUILD_TYPE=Release -DGPLAN_CUDA=OFF

mkdir -p "$cache/bench"
smol=
if [ -z "${GGUF_MODELS:-}" ]; then
  smol=$(scripts/fetch_models.sh)
  f16=$cache/bench/tinyllama-f16.gguf
  if [ ! -s "$f16" ]; then
    python3 scripts/bench/make_random_gguf.py "$f16" ../shared/data/vocab/ggml-vocab-llama-spm.gguf
  fi
  for q in Q8_0 Q4_0 Q4_K_M; do
    [ -s "$cache/bench/tinyllama-$q.gguf" ] ||
      "$lcpp/llama-quantize" "$f16" "$cache/bench/tinyllama-$q.gguf" "$q" >/dev/null 2>&1
  done
fi

prompt=$(seq -s, 100 227)
echo "== machine: $(scripts/bench/machine.sh avx2 avx512f avx512_vnni avx_vnni amx_tile asimddp \
     i8mm), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $threads threads"
rows=() notes=() kernels=
models=("smollm2-135m_q4_1:$smol:llama" "tinyllama-1.1b_q8_0:$cache/bench/tinyllama-Q8_0.gguf:llama"
        "tinyllama-1.1b_q4_0:$cache/bench/tinyllama-Q4_0.gguf:llama"
        "tinyllama-1.1b_q4_k_m:$cache/bench/tinyllama-Q4_K_M.gguf:llama")
[ -z "${GGUF_MODELS:-}" ] || read -r -a models <<<"$GGUF_MODELS"
for m in "${models[@]}"; do
  name=${m%%:*} rest=${m#*:}
  file=${rest%:*} graph=${rest##*:} name=${name//_/ }
  plan=$B/$(echo "$name" | tr ' ' _).plan
  "$B/tools/gplan-compile" "examples/$graph.gplan" --gguf "$file" -D max_position_embeddings=512 \
    -D n_batch=128 --backend cpu -o "$plan" >/dev/null
  gd=() gp=() ld=() lp=() crashes=0 norepack=0
  for _ in $(seq 1 "$repeats"); do
    out=$("$B/tools/gplan-run" "$plan" --weights "$file" --prompt-ids "$prompt" -n 33 \
          --threads "$threads" --stats 2>&1 >/dev/null)
    gp+=("$(echo "$out" | sed -nE 's/^stats: prompt .* ([0-9.]+) tokens\/s/\1/p')")
    gd+=("$(echo "$out" | sed -nE 's/^stats: generation .*, ([0-9.]+) ms per eval.*/\1/p')")
    kernels=$(echo "$out" | sed -n 's/^stats: cpu kernels: //p')
    csv=$("$lcpp/llama-bench" -m "$file" -t "$threads" -p 128 -n 32 -r 1 -o csv 2>/dev/null ||
          echo crashed)
    if [ "$csv" = crashed ]; then
      # that build's AMX repacking crashes on AMX Xeons (bench/gguf-notes.md): without it, marked *
      crashes=$((crashes + 1))
      csv=$("$lcpp/llama-bench" -m "$file" -t "$threads" -p 128 -n 32 -r 1 --repack 0 -o csv \
            2>/dev/null || echo crashed)
      norepack=1
    fi
    if [ "$csv" = crashed ]; then
      lp+=(crashed) ld+=(crashed)
    else
      lp+=("$(echo "$csv" | awk -F, 'NR==1{for(i=1;i<=NF;i++)if($i~/avg_ts/)c=i} /"128","0"/{gsub(/"/,"",$c);print $c}')")
      ld+=("$(echo "$csv" | awk -F, 'NR==1{for(i=1;i<=NF;i++)if($i~/avg_ts/)c=i} /"0","32"/{gsub(/"/,"",$c);printf "%.3f", 1000/$c}')")
    fi
  done
  span() { printf '%s\n' "$@" | sort -g | sed -n '1p;$p' | paste -sd- | sed 's/^\(.*\)-\1$/\1/'; }
  best() { printf '%s\n' "$@" | sort -g | sed -n "$1p"; }
  star=; [ "$norepack" = 1 ] && star=" *"
  rows+=("$(printf '%-20s | %-17s | %-17s | %-17s | %-17s' "$name" "$(span "${gd[@]}")" \
           "$(span "${ld[@]}")$star" "$(span "${gp[@]}")" "$(span "${lp[@]}")$star")")
  [ "$crashes" = 0 ] || notes+=("$name: llama-bench crashed $crashes of $repeats runs (default repacking); * = --repack 0")
done
echo
echo "| model | gplan decode ms/token | llama.cpp decode ms/token | gplan prompt-128 tok/s | llama.cpp prompt-128 tok/s |"
echo "|---|---|---|---|---|"
for r in "${rows[@]}"; do echo "| $r |"; done
echo "gplan's kernels on this processor: $kernels"
for n in "${notes[@]}"; do echo "$n"; done
echo "== load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
