#!/bin/sh
# The GPU benchmark, one command on the GPU machine: runs the CUDA tests, then for GPT-2 117M and
# 1558M shapes (random fp16 weights) checks CUDA against the CPU backend and times decode (ms/token,
# 128 tokens after a 32-token prompt) and a 512-token prompt for each configuration (fusion
# switches, PDL, eager: docs/cuda.md), counts allocations during evals (with the callers of
# host allocations), runs gplan-run --stats for thousands of CUDA evals under the host allocation
# shim, LoRA parity with PEFT and the runtime-adapter cost for ranks 8 and 64 (bench/lora_gpu.sh),
# and prints one table last. PyTorch's figures too with GPU_BENCH_TORCH=1.
# usage: bench/gpu.sh [BUILD_DIR]   (default build-cuda; built elsewhere with
#   cmake -S . -B build-cuda -DGPLAN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 and carried, or built
#   here when missing and cmake and nvcc exist). Logs go to $OUT (default /tmp/gplan-gpu).
#   CONFIGS: gpu_bench's configurations (default all); TOKENS: gplan-run's generated tokens (3000).
set -u
B=${1:-build-cuda}
OUT=${OUT:-/tmp/gplan-gpu}
CONFIGS=${CONFIGS:-all}
TOKENS=${TOKENS:-3000}
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 1

if [ ! -x "$B/cuda/gpu_bench" ]; then
    cmake -S . -B "$B" -DGPLAN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/cmake.log" 2>&1 &&
        cmake --build "$B" -j8 --target gpu_bench test_cuda gplan-compile gplan-run \
            gp_cuda_allocshim gp_alloc_shim matvec_bench parity-compare >>"$OUT/cmake.log" 2>&1 ||
        { echo "gpu.sh: build failed, see $OUT/cmake.log"; exit 1; }
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
    | tee "$OUT/gpu.txt"

# 1. Tests: every op against the CPU kernels, the tiny model CPU vs CUDA, allocation counts.
timeout 90 "$B/tests/test_cuda" >"$OUT/test_cuda.log" 2>&1
TEST_RC=$?
grep -E "asserts|tests |error|FAIL|cuda:" "$OUT/test_cuda.log" | head -20

# 1b. The matvec microbenchmark at the 1558M shapes (v2, cuBLAS; graphs, L2 cold).
[ -x "$B/cuda/matvec_bench" ] && timeout 60 "$B/cuda/matvec_bench" >"$OUT/matvec.log" 2>&1

# 2. Plans (compiled on the build machine when carried in $B/plans).
mkdir -p "$B/plans"
plan() { # name, then -D overrides; recompiled whenever the compiler is here: a plan from an
    # older compiler loads but may miss what this runtime needs to fuse (an attention's workspace)
    name=$1; shift
    [ -x "$B/tools/gplan-compile" ] || [ -f "$B/plans/$name.plan" ] || return 1
    [ -x "$B/tools/gplan-compile" ] || return 0
    "$B/tools/gplan-compile" examples/gpt2.gplan -o "$B/plans/$name.plan" -D wtype=f16 \
        -D kv_type=f16 "$@" >/dev/null
}
plan gpt2-117m
plan gpt2-1558m -D n_layer=48 -D n_embd=1600 -D n_head=25

# 3. gplan, with the CUDA allocation shim preloaded.
SHIM="$B/cuda/libgp_cuda_allocshim.so"
for m in gpt2-117m gpt2-1558m; do
    GPLAN_CUDA_VERBOSE=1 GPLAN_BENCH_CPU_THREADS=16 LD_PRELOAD="$SHIM" timeout "$([ $m = gpt2-117m ] && echo 90 || echo 160)" \
        "$B/cuda/gpu_bench" "$B/plans/$m.plan" --label "$m" --configs "$CONFIGS" >"$OUT/$m.log" 2>&1
    echo "gpu_bench $m: exit $?"
done

# 4. Thousands of CUDA evals through gplan-run: its own count and the host shim's (tests/alloc).
HSHIM="$B/runtime/libgp_alloc_shim.so"
GP_ALLOC_SHIM_OUT="$OUT/shim.txt" LD_PRELOAD="$SHIM:$HSHIM" timeout 45 "$B/tools/gplan-run" \
    "$B/plans/gpt2-117m.plan" --backend cuda --random-weights 7 --prompt-ids 1,2,3 -n "$TOKENS" \
    --ignore-eos --loop --stats >/dev/null 2>"$OUT/gplan-run.log"
echo "gplan-run: exit $? ($(grep -E 'allocations|generation' "$OUT/gplan-run.log" | tr '\n' ';'))"
echo "host shim: $(cat "$OUT/shim.txt" 2>/dev/null)"

# 5. Isolated kernel times of the first one-token eval (the warm-up eval at creation: embedding
#    and the first layers of 1558M) with Nsight Compute, when present (GPU_BENCH_NCU=0: skip).
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ "${GPU_BENCH_NCU:-1}" = 1 ]; then
    timeout 150 "$NCU" --clock-control none --metrics gpu__time_duration.sum -c 120 --csv \
        "$B/cuda/gpu_bench" "$B/plans/gpt2-1558m.plan" --no-check --configs default \
        >"$OUT/ncu.csv" 2>"$OUT/ncu.err"
    echo "ncu: exit $?"
fi

# 6. PyTorch in the same run, on request.
if [ "${GPU_BENCH_TORCH:-0}" = 1 ]; then
    PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_gpt2.py 12 768 12 --no-hf >"$OUT/torch.log" 2>&1
    PYTHONUNBUFFERED=1 timeout 300 python3 bench/torch_gpt2.py 48 1600 25 --no-hf >>"$OUT/torch.log" 2>&1
fi

# 7. The table.
if [ -s "$OUT/ncu.csv" ]; then
    echo "ncu, 1558M first 120 kernels of a one-token eval: kernel, count, mean duration"
    grep '"gpu__time_duration.sum"' "$OUT/ncu.csv" | awk -F'","' '{
        n = $5; sub(/\(.*/, "", n); u = $(NF-1); v = $NF; gsub(/[",]/, "", v);
        if (u == "nsecond" || u == "ns") v /= 1000; if (u == "msecond" || u == "ms") v *= 1000;
        c[n]++; s[n] += v; tot += v }
        END { for (k in c) printf "  %-28s %4d  %8.2f us\n", k, c[k], s[k] / c[k]; printf "  total %.1f us\n", tot }'
fi
cat "$OUT/matvec.log" 2>/dev/null
cat "$OUT"/gpt2-*.log | grep -E "^(cuda:|gp_cuda_allocshim)" | sort | uniq -c
grep -h "^ALLOC" "$OUT"/gpt2-*.log | grep -v " eager " | cut -c1-300 | sort -k2,3 -u | head -12
grep -h "^ALLOC" "$OUT"/gpt2-*.log | grep " eager " | cut -c1-300 | head -4
grep -h -E "^(CHECK|RESULT .* FAILED)" "$OUT"/gpt2-*.log
echo
grep -h "^IDLE" "$OUT"/gpt2-*.log
echo "| model | config | decode ms/token (eval; in backend) [warm-up rep; host argmax] | prompt ms | allocs in evals: backend / host (eval thread) / cuda calls / free-mem delta |"
echo "|---|---|---|---|---|"
cat "$OUT"/gpt2-*.log | awk '/^RESULT/ && NF >= 29 {
    printf "| %s | %s | %.3f (%.3f; %.3f) [%.3f; %.3f] | %s: %.2f | %s / %s (%s) / %s / %s |\n", $2, $3, $5, $7, $9, $27, $29, $10, $11, $15, $17, $25, $19, $21 }'
[ -f "$OUT/torch.log" ] && awk '/^torch/ { printf "| torch %s %s | eager / cuda-graph | %s / %s | prompt512: %s ms | - |\n", $2, $3, $5, $8, $11 }' "$OUT/torch.log"
if [ -x "$B/tests/parity/parity-compare" ]; then
    sh bench/lora_gpu.sh "$B" >"$OUT/lora.log" 2>&1
    grep -E "lora/cuda|GPT-2 117M|runtime adapters|failures" "$OUT/lora.log"
fi
echo "tests: exit $TEST_RC ($(grep -E '^ +(tests|asserts)' "$OUT/test_cuda.log" | tr -s ' ' | tr '\n' ';'))"
