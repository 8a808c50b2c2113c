#!/bin/sh
# The GPU benchmark, one command on the GPU machine: runs the CUDA tests, checks CUDA against the CPU
# backend, times gplan's decode (ms/token, 128 tokens after a 32-token prompt) and a 512-token prompt
# for GPT-2 117M and 1558M shapes with random fp16 weights, next to PyTorch in the same run, counts
# allocations during evals, and prints one table last.
# usage: bench/gpu.sh [BUILD_DIR]   (default build-cuda; built elsewhere with
#   cmake -S . -B build-cuda -DGPLAN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 and carried, or built
#   here when missing and cmake and nvcc exist). Logs go to $OUT (default /tmp/gplan-gpu).
set -u
B=${1:-build-cuda}
OUT=${OUT:-/tmp/gplan-gpu}
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 1

if [ ! -x "$B/cuda/gpu_bench" ]; then
    cmake -S . -B "$B" -DGPLAN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/cmake.log" 2>&1 &&
        cmake --build "$B" -j8 --target gpu_bench test_cuda gplan-compile gp_cuda_allocshim \
            >>"$OUT/cmake.log" 2>&1 || { echo "gpu.sh: build failed, see $OUT/cmake.log"; exit 1; }
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
    | tee "$OUT/gpu.txt"

# 1. Tests: every op against the CPU kernels, the tiny model CPU vs CUDA, allocation counts.
timeout 300 "$B/tests/test_cuda" >"$OUT/test_cuda.log" 2>&1
TEST_RC=$?
grep -E "asserts|tests |error|FAIL|cuda:" "$OUT/test_cuda.log" | head -20

# 2. Plans (compiled on the build machine when carried in $B/plans).
mkdir -p "$B/plans"
plan() { # name, then -D overrides
    name=$1; shift
    [ -f "$B/plans/$name.plan" ] || "$B/tools/gplan-compile" examples/gpt2.gplan \
        -o "$B/plans/$name.plan" -D wtype=f16 -D kv_type=f16 "$@" >/dev/null
}
plan gpt2-117m
plan gpt2-1558m -D n_layer=48 -D n_embd=1600 -D n_head=25

# 3. gplan, with the CUDA allocation shim preloaded; 4. PyTorch in the same run.
SHIM="$B/cuda/libgp_cuda_allocshim.so"
for m in gpt2-117m gpt2-1558m; do
    LD_PRELOAD="$SHIM" timeout 400 "$B/cuda/gpu_bench" "$B/plans/$m.plan" --label "$m" --variants \
        >"$OUT/$m.log" 2>&1
    echo "gpu_bench $m: exit $?"
done
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_gpt2.py 12 768 12 --no-hf >"$OUT/torch.log" 2>&1
PYTHONUNBUFFERED=1 timeout 300 python3 bench/torch_gpt2.py 48 1600 25 --no-hf >>"$OUT/torch.log" 2>&1

# 5. The table.
cat "$OUT"/gpt2-*.log "$OUT/torch.log" | grep -E "^(CHECK|RESULT|torch|gp_cuda_allocshim|cuda profile)"
echo
echo "| model | config | decode ms/token (eval; in backend) | prompt ms (tok/s) | allocs in evals: backend/host/cuda calls/free-mem delta |"
echo "|---|---|---|---|---|"
cat "$OUT"/gpt2-*.log | awk '/^RESULT/ {
    printf "| %s | %s | %.3f (%.3f; %.3f) | %s: %.2f (%s) | %s/%s/%s/%s |\n", $2, $3, $5, $7, $9, $10, $11, $13, $15, $17, $19, $21 }'
awk '/^torch/ { printf "| torch %s %s | eager / cuda-graph | %s / %s | prompt512: %s ms | - |\n", $2, $3, $5, $8, $11 }' "$OUT/torch.log"
echo "tests: exit $TEST_RC ($(grep -E '^ +asserts' "$OUT/test_cuda.log" | tr -s ' '))"
