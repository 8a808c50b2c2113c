#!/bin/sh
# Quantized GGUF models on the GPU, one command: the CUDA quantized-kernel tests (with their speed
# table), then random-weight files of the Llama-3-8B shape in Q4_K_M's type mix and of the
# Llama-3.2-1B shape in Q4_0 (untied head), written by bench/make_quant_gguf.py (numpy only),
# compiled from examples/llama.gplan with --gguf, timed as bench/gpu.sh times models (gpu_bench:
# decode = ms per one-token eval over 128 tokens after a 32-token prompt, fed back by argmax,
# and a 512-token prompt; CUDA checked against the CPU on the first repeat), and with gplan-run
# --stats; llama.cpp's llama-bench on the same files when LLAMA_BENCH is given. One table last.
# usage: bench/gpu_gguf.sh BUILD_DIR [LLAMA_BENCH]
#   BUILD_DIR: cmake -S . -B BUILD_DIR -DGPLAN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90, built (made
#   elsewhere and carried, or built here when cmake and nvcc exist). LLAMA_BENCH: the path of a
#   CUDA llama-bench (llama-cpp-python 0.3.36's vendor/llama.cpp, -DGGML_CUDA=ON
#   -DCMAKE_CUDA_ARCHITECTURES=90), run as llama-bench -m FILE -p 512 -n 128 -ngl 99.
#   REPEATS (3): runs of each timing; MODELS (llama3-8b llama3.2-1b): those and/or
#   qwen3moe-30b-a3b (the Qwen3-30B-A3B shape in Q4_K_M's mix, examples/qwen3moe.gplan: the
#   mixture-of-experts row of bench/moe.sh); GGUF_DIR (/tmp/gplan-gguf-models): where the files go
#   (4.6, 0.85 and 17 GiB; kept for later runs); OUT
#   (/tmp/gplan-gguf): logs; TESTS (1): 0 skips the tests.
set -u
B=${1:?usage: bench/gpu_gguf.sh BUILD_DIR [LLAMA_BENCH]}
LB=${2:-${LLAMA_BENCH:-}}
REPEATS=${REPEATS:-3}
MODELS=${MODELS:-llama3-8b llama3.2-1b}
DIR=${GGUF_DIR:-/tmp/gplan-gguf-models}
OUT=${OUT:-/tmp/gplan-gguf}
cd "$(dirname "$0")/.." || exit 1
case $B in /*) ;; *) B=$(pwd)/$B ;; esac
mkdir -p "$OUT" "$DIR"
if [ ! -x "$B/cuda/gpu_bench" ]; then
    cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DGPLAN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        >"$OUT/cmake.log" 2>&1 &&
        cmake --build "$B" -j16 --target gpu_bench test_cuda gplan-compile gplan-run \
            >>"$OUT/cmake.log" 2>&1 || { echo "gpu_gguf.sh: build failed, see $OUT/cmake.log"; exit 1; }
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader

# 1. The quantized kernels' tests against the CPU, and their speed table.
if [ "${TESTS:-1}" = 1 ]; then
    GPLAN_TEST_ONLY=quant timeout 300 "$B/tests/gplan_tests" cuda >"$OUT/test_quant.log" 2>&1
    echo "test_cuda (quant): exit $?"
    sed -n '/quant matmul: worst/,/^ *q6_k/p;/quant speed/,/^$/p' "$OUT/test_quant.log" | head -40
    grep -E "error|FAIL|off \(|Run Summary|asserts" "$OUT/test_quant.log" | head -20
fi

# 2. Files, plans, timings.
: >"$OUT/rows.txt"
for name in $MODELS; do
    graph=llama
    case $name in
    llama3-8b) mix=q4_k_m ;;
    llama3.2-1b) mix=q4_0 ;;
    qwen3moe-30b-a3b) mix=q4_k_m graph=qwen3moe ;;
    *) echo "gpu_gguf.sh: unknown model $name"; continue ;;
    esac
    f=$DIR/$name-$mix.gguf
    if [ ! -s "$f" ]; then
        python3 bench/make_quant_gguf.py "$f.tmp" --shape "$name" --mix "$mix" && mv "$f.tmp" "$f" ||
            { echo "gpu_gguf.sh: could not write $f"; continue; }
    fi
    plan=$OUT/$name-$mix.plan
    "$B/tools/gplan-compile" "examples/$graph.gplan" --gguf "$f" -D kv_type=f16 \
        -D max_position_embeddings=1024 -D n_batch=512 --backend cuda -o "$plan" \
        >"$OUT/$name.compile.log" 2>&1 || { echo "gpu_gguf.sh: compile failed:"; cat "$OUT/$name.compile.log"; continue; }
    gd="" ge="" gp="" gr="" ld="" lp=""
    for r in $(seq 1 "$REPEATS"); do
        chk=--no-check
        [ "$r" = 1 ] && chk=
        GPLAN_BENCH_CPU_THREADS=16 timeout 300 "$B/cuda/gpu_bench" "$plan" --weights "$f" --label "$name" --configs default \
            $chk >"$OUT/$name.bench$r.log" 2>&1
        res=$(grep "^RESULT $name default decode_ms" "$OUT/$name.bench$r.log")
        grep -E "^(CHECK|RESULT .*FAILED)|gpu_bench:" "$OUT/$name.bench$r.log"
        gd="$gd $(echo "$res" | awk '{print $5}')"
        ge="$ge $(echo "$res" | awk '{print $7}')"
        gp="$gp $(echo "$res" | awk '{print $13}')"
        timeout 200 "$B/tools/gplan-run" "$plan" --weights "$f" --backend cuda \
            --prompt-ids "$(seq -s, 100 131)" -n 129 --ignore-eos --stats \
            >/dev/null 2>"$OUT/$name.run$r.log"
        gr="$gr $(sed -nE 's/^stats: generation .*, ([0-9.]+) ms per eval.*/\1/p' "$OUT/$name.run$r.log")"
        if [ -n "$LB" ]; then
            # -p 512 -n 128 as two runs, so that one crashing does not lose the other's figure
            "$LB" -m "$f" -p 512 -n 0 -ngl 99 -r 1 -o csv >"$OUT/$name.llama$r.pp.csv" \
                2>"$OUT/$name.llama$r.log"
            "$LB" -m "$f" -p 0 -n 128 -ngl 99 -r 1 -o csv >"$OUT/$name.llama$r.tg.csv" \
                2>>"$OUT/$name.llama$r.log"
            col() { awk -F, -v want="$1" 'NR == 1 { for (i = 1; i <= NF; i++) { h = $i; gsub(/"/, "", h); c[h] = i } next }
                { p = $c["n_prompt"]; g = $c["n_gen"]; t = $c["avg_ts"]; gsub(/"/, "", p); gsub(/"/, "", g); gsub(/"/, "", t)
                  if (want == "pp" && p == 512 && g == 0) print t; if (want == "tg" && p == 0 && g == 128) printf "%.3f", 1000 / t }' \
                "$OUT/$name.llama$r.$1.csv"; }
            ld="$ld $(col tg)"
            lp="$lp $(col pp)"
            [ -s "$OUT/$name.llama$r.pp.csv" ] || echo "llama-bench -p 512 failed: $(tail -1 "$OUT/$name.llama$r.log")"
        fi
    done
    # min-max of each list (one value when they agree)
    span() { echo "$@" | tr ' ' '\n' | grep -v '^$' | sort -g | sed -n '1p;$p' | paste -sd- | sed 's/^\(.*\)-\1$/\1/'; }
    wgib=$(python3 -c "import os; print('%.2f' % (os.path.getsize('$f') / 2**30))")
    printf '| %s %s (%s GiB) | %s | %s | %s | %s | %s | %s |\n' "$name" "$mix" "$wgib" \
        "$(span $gd)" "$(span $ge)" "$(span $gr)" "${ld:+$(span $ld)}" "$(span $gp)" "${lp:+$(span $lp)}" \
        >>"$OUT/rows.txt"
done

echo
echo "decode: ms a token; gpu_bench (as bench/gpu.sh): wall per token incl. host argmax, and eval only;"
echo "gplan-run --stats: generation ms per eval; llama-bench: 1000 / tg128 t/s. prompt: 512 tokens, tokens/s."
echo "Each cell: min-max over $REPEATS runs."
echo "| model | gplan decode ms (gpu_bench) | gplan eval ms (gpu_bench) | gplan-run ms/eval | llama.cpp decode ms | gplan prompt-512 tok/s | llama.cpp pp512 tok/s |"
echo "|---|---|---|---|---|---|---|"
cat "$OUT/rows.txt"
