#!/bin/sh
# The multi-GPU benchmark (issue 8), one command on a host with 2 GPUs: for the GPT-2 1558M and
# Llama-7B shapes (random fp16 weights, fp16 KV cache) compiles a plan per device count, times
# decode (ms/token, 128 tokens after a 32-token prompt) and a 512-token prompt with gpu_bench,
# records memory per device, compares every N-device plan's logits with the 1-device plan's
# (teacher-forced, one token per eval: gplan-run --logits-out, then parity-compare), counts
# allocations during evals and prints one table last (layout: bench/multi-gpu-notes.md).
# usage: bench/multi-gpu.sh [BUILD_DIR]   (default build-cuda: built elsewhere with
#   cmake -S . -B build-cuda -DGPLAN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 and carried, or built
#   here when missing and cmake and nvcc exist; plans in BUILD_DIR/plans/mgpu-*.plan are used when
#   present, compiled otherwise: remove them after changing the compiler).
# Environment: OUT logs (default /tmp/gplan-mgpu); MODELS (default "gpt2-1558m llama-7b"; also
#   gpt2-small, llama-small); DEVICES device counts (default "1 2"; the first is the reference);
#   SEED random weights (7); CHECK_TOKENS teacher-forced tokens (24); TOL largest relative error
#   of a logits row against the reference, max|d| / max|ref| (1e-2, fp16); CPU_CHECK=0 skips
#   gpu_bench's CUDA-vs-CPU check; BACKEND=cpu runs without a GPU: no gpu_bench, timings from
#   gplan-run --stats on the CPU backend (its shared-memory all_reduce), PROMPT tokens (512).
#   Example CPU smoke run: BACKEND=cpu MODELS="gpt2-small llama-small" PROMPT=64 bench/multi-gpu.sh build
# Output that the runtime must print for the memory column (optional; else nvidia-smi samples):
#   a gpu_bench line "device D: weights W bytes, state S bytes, arena A bytes" per device.
# Exit status: 0 when every plan compiled, ran and matched the reference; 1 otherwise, and at once
# when fewer GPUs are visible than DEVICES needs.
set -u
B=${1:-build-cuda}
OUT=${OUT:-/tmp/gplan-mgpu}
MODELS=${MODELS:-gpt2-1558m llama-7b}
DEVICES=${DEVICES:-1 2}
SEED=${SEED:-7}
CHECK_TOKENS=${CHECK_TOKENS:-24}
TOL=${TOL:-1e-2}
CPU_CHECK=${CPU_CHECK:-1}
BACKEND=${BACKEND:-cuda}
PROMPT=${PROMPT:-512}
cd "$(dirname "$0")/.." || exit 1
FAILS=0
# NVLink multicast (NVLS) stays off on shared GPU hosts: a program using it can take the host's
# GPUs out of service for everyone; NCCL falls back to its ring and tree algorithms.
export NCCL_NVLS_ENABLE=0

die() {
    echo "multi-gpu.sh: $*" >&2
    exit 1
}

fail() {
    echo "multi-gpu.sh: $*" >&2
    FAILS=$((FAILS + 1))
}

# The graph and -D overrides of a model shape (words, for the compiler's command line).
model_defs() {
    case $1 in
    gpt2-1558m) echo "examples/gpt2.gplan -D n_layer=48 -D n_embd=1600 -D n_head=25" ;;
    llama-7b) echo "examples/llama.gplan -D num_hidden_layers=32 -D hidden_size=4096" \
        "-D intermediate_size=11008 -D num_attention_heads=32 -D num_key_value_heads=32" \
        "-D vocab_size=32000 -D max_position_embeddings=4096" ;;
    gpt2-small) echo "examples/gpt2.gplan -D n_layer=2" ;;
    llama-small) echo "examples/llama.gplan -D num_hidden_layers=2 -D hidden_size=256" \
        "-D intermediate_size=688 -D num_attention_heads=8 -D num_key_value_heads=4" \
        "-D max_position_embeddings=1024" ;;
    *) return 1 ;;
    esac
}

# N comma-separated token ids below 32000 (every model's vocabulary is at least that).
ids() {
    awk -v n="$1" 'BEGIN { for (i = 0; i < n; i++) printf "%s%d", i ? "," : "", (i * 7919 + 13) % 32000 }'
}

# ---- 0. Arguments, GPUs, tools ----
case $BACKEND in cuda | cpu) ;; *) die "BACKEND is cuda or cpu, not '$BACKEND'" ;; esac
REF=
MAXDEV=0
for n in $DEVICES; do
    case $n in '' | *[!0-9]* | 0*) die "DEVICES: '$n' is not a device count (1, 2, 4, 8)" ;; esac
    [ -n "$REF" ] || REF=$n
    [ "$n" -gt "$MAXDEV" ] && MAXDEV=$n
done
[ -n "$REF" ] || die "DEVICES is empty"
for m in $MODELS; do
    model_defs "$m" >/dev/null || die "unknown model '$m' (gpt2-1558m, llama-7b, gpt2-small, llama-small)"
done
mkdir -p "$OUT" "$OUT/ref" || die "cannot create $OUT"
rm -f "$OUT/rows.txt"

if [ "$BACKEND" = cuda ]; then
    command -v nvidia-smi >/dev/null 2>&1 ||
        die "nvidia-smi not found: this needs a host with $MAXDEV NVIDIA GPUs (BACKEND=cpu: the CPU smoke run)"
    NGPU=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c '[0-9]')
    if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
        NVIS=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c '[0-9A-Za-z]')
        [ "$NVIS" -lt "$NGPU" ] && NGPU=$NVIS
    fi
    [ "$NGPU" -ge "$MAXDEV" ] ||
        die "$NGPU GPU(s) visible, DEVICES=\"$DEVICES\" needs $MAXDEV (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})"
fi

need="$B/tools/gplan-run $B/tests/parity/parity-compare"
[ "$BACKEND" = cuda ] && need="$need $B/cuda/gpu_bench"
missing=
for t in $need; do [ -x "$t" ] || missing=1; done
if [ -n "$missing" ]; then
    cuda=OFF targets="gplan-compile gplan-run gplan-inspect parity-compare"
    [ "$BACKEND" = cuda ] && cuda=ON targets="$targets gpu_bench gp_cuda_allocshim"
    echo "building $targets in $B (log: $OUT/cmake.log)"
    # shellcheck disable=SC2086 # targets is a list of words
    { cmake -S . -B "$B" -DGPLAN_CUDA=$cuda -DCMAKE_CUDA_ARCHITECTURES=90 &&
        cmake --build "$B" -j8 --target $targets; } >"$OUT/cmake.log" 2>&1 ||
        die "build failed, see $OUT/cmake.log"
    for t in $need; do [ -x "$t" ] || die "$t missing after the build (see $OUT/cmake.log)"; done
fi
SHIM=
[ -f "$B/cuda/libgp_cuda_allocshim.so" ] && SHIM="$B/cuda/libgp_cuda_allocshim.so"
if [ "$BACKEND" = cuda ]; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv,noheader |
        tee "$OUT/gpu.txt"
    nvidia-smi topo -m >"$OUT/topo.txt" 2>&1 && sed -n '1,3p' "$OUT/topo.txt"
fi
START=$(date +%s)

# ---- 1. Plans: NAME-dN (timed) and NAME-dN-t1 (n_batch=1, for the teacher-forced check) ----
mkdir -p "$B/plans" || die "cannot create $B/plans"
compile() { # NAME N SUFFIX [-D ...]: succeeds when $B/plans/mgpu-NAME-dN SUFFIX.plan exists after
    c_plan="$B/plans/mgpu-$1-d$2$3.plan" c_log="$OUT/compile-$1-d$2$3.log" c_name=$1 c_n=$2
    shift 3
    # Recompiled whenever the compiler is here: a plan from an older compiler loads but may miss
    # what this runtime needs to fuse (an attention's workspace); a carried plan serves otherwise.
    [ -x "$B/tools/gplan-compile" ] || [ ! -f "$c_plan" ] || return 0
    [ -x "$B/tools/gplan-compile" ] || { echo "no $B/tools/gplan-compile to make $c_plan" >"$c_log"; return 1; }
    # shellcheck disable=SC2046 # model_defs prints words
    "$B/tools/gplan-compile" $(model_defs "$c_name") -D wtype=f16 -D kv_type=f16 "$@" \
        --devices "$c_n" -o "$c_plan.tmp" >"$c_log" 2>&1 && mv "$c_plan.tmp" "$c_plan"
}
for m in $MODELS; do
    for n in $DEVICES; do
        compile "$m" "$n" "" && compile "$m" "$n" -t1 -D n_batch=1 && continue
        fail "gplan-compile $m --devices $n failed (the language feature may not be there yet):"
        grep -h -m3 "error" "$OUT/compile-$m-d$n.log" "$OUT/compile-$m-d$n-t1.log" 2>/dev/null |
            sed 's/^/  /' >&2
    done
done

# ---- 2. Per plan: timings, memory, allocations (gpu_bench, or gplan-run on the CPU) ----
# Each run appends one row to $OUT/rows.txt:
#   model devices decode_ms prompt_tok_s mem_used_mib mem_planned_mib rel_err argmax allocs status
MEMQ="--query-gpu=index,memory.used --format=csv,noheader,nounits"

planned_mib() { # PLAN: arena + state + weights of the plan's summary (per device), MiB
    [ -x "$B/tools/gplan-inspect" ] || { echo -; return; }
    "$B/tools/gplan-inspect" "$1" 2>/dev/null | awk '$1 ~ /^(arena|state|weights)$/ && $3 == "B" { t += $2; k++ }
        END { if (k) printf "%.0f", t / 1048576; else printf "-" }'
}

# Memory per device in MiB, "d0/d1/...": the runtime's own "device D: weights W bytes, state S
# bytes, arena A bytes" lines when LOG has them, else nvidia-smi's largest memory.used while the
# plan ran, less the figure before it (includes the CUDA context and cuBLAS/NCCL buffers).
mem_used() { # N LOG BEFORE SAMPLES
    own=$(sed -n 's/.*device \([0-9][0-9]*\): weights \([0-9][0-9]*\) bytes, state \([0-9][0-9]*\) bytes, arena \([0-9][0-9]*\) bytes.*/\1 \2 \3 \4/p' "$2" |
        awk '{ t[$1] = $2 + $3 + $4; if ($1 + 1 > n) n = $1 + 1 }
            END { for (d = 0; d < n; d++) printf "%s%.0f", d ? "/" : "", t[d] / 1048576 }')
    if [ -n "$own" ]; then
        echo "$own"
        return
    fi
    [ -s "$4" ] || { echo -; return; }
    awk -F', *' -v n="$1" 'NR == FNR { base[$1] = $2; next }
        $1 < n && $2 - base[$1] > top[$1] { top[$1] = $2 - base[$1] }
        END { for (d = 0; d < n; d++) printf "%s%.0f", d ? "/" : "", top[d] }' "$3" "$4"
}

bench_cuda() { # NAME N
    tag=$1-d$2 plan="$B/plans/mgpu-$1-d$2.plan" log="$OUT/$1-d$2.bench.log"
    # shellcheck disable=SC2086 # MEMQ is a list of words
    nvidia-smi $MEMQ >"$OUT/$tag.mem0" 2>/dev/null
    # shellcheck disable=SC2086
    nvidia-smi $MEMQ -lms 500 >"$OUT/$tag.mem" 2>/dev/null &
    smi=$!
    check=
    [ "$CPU_CHECK" = 1 ] || check=--no-check
    # shellcheck disable=SC2086 # check is empty or one word
    NCCL_DEBUG=${NCCL_DEBUG:-INFO} GPLAN_CUDA_VERBOSE=1 GPLAN_BENCH_CPU_THREADS=$(nproc) \
        LD_PRELOAD="$SHIM" timeout "$([ "$1" = llama-7b ] && echo 420 || echo 240)" \
        "$B/cuda/gpu_bench" "$plan" --label "$tag" --configs default $check >"$log" 2>&1
    rc=$?
    kill "$smi" 2>/dev/null
    wait "$smi" 2>/dev/null
    echo "gpu_bench $tag: exit $rc"
    [ $rc -eq 0 ] || fail "gpu_bench $tag: exit $rc (see $log)"
    mem=$(mem_used "$2" "$log" "$OUT/$tag.mem0" "$OUT/$tag.mem")
    # RESULT fields by name: gpu_bench may add fields without breaking this.
    awk -v mem="$mem" -v plan="$(planned_mib "$plan")" -v name="$1" -v n="$2" -v rc=$rc '
        function val(k,  i) { for (i = 3; i < NF; i++) if ($i == k) return $(i + 1); return "-" }
        /^RESULT / && $3 == "default" && $4 == "decode_ms" {
            d = val("decode_ms"); p = val("prompt_tok_s")
            g = val("host_allocs_device_threads"); if (g == "-") g = 0
            a = val("backend_allocs") "/" val("host_allocs_eval_thread") "/" g "/" \
                (val("host_allocs") - val("host_allocs_eval_thread") - g) "/" val("cuda_calls") }
        END { if (d == "") d = p = a = "-"
              print name, n, d, p, mem == "" ? "-" : mem, plan, "-", "-", a, rc ? "bench-failed" : "ok" }' \
        "$log" >>"$OUT/rows.txt"
}

bench_cpu() { # NAME N: the same figures from gplan-run --stats on the CPU backend
    tag=$1-d$2 plan="$B/plans/mgpu-$1-d$2.plan"
    "$B/tools/gplan-run" "$plan" --backend cpu --random-weights "$SEED" --prompt-ids "$(ids 32)" \
        -n 129 --ignore-eos --stats >/dev/null 2>"$OUT/$tag.decode.log" &&
        "$B/tools/gplan-run" "$plan" --backend cpu --random-weights "$SEED" \
            --prompt-ids "$(ids "$PROMPT")" -n 1 --stats >/dev/null 2>"$OUT/$tag.prompt.log"
    rc=$?
    echo "gplan-run $tag (cpu): exit $rc"
    [ $rc -eq 0 ] || fail "gplan-run $tag: exit $rc (see $OUT/$tag.decode.log, $OUT/$tag.prompt.log)"
    d=$(sed -n 's/^stats: generation .*tokens, \([0-9.]*\) ms per eval.*/\1/p' "$OUT/$tag.decode.log")
    p=$(sed -n 's/^stats: prompt .*ms per eval, \([0-9.]*\) tokens\/s.*/\1/p' "$OUT/$tag.prompt.log")
    h=$(sed -n 's/^stats: host allocations during evals: \([0-9]*\) on the eval thread, \([0-9]*\) on other.*/\1\/-\/\2/p' \
        "$OUT/$tag.decode.log")
    dv=$(sed -n 's/^stats: device allocations during evals: \([0-9]*\).*/\1/p' "$OUT/$tag.decode.log")
    echo "$1 $2 ${d:--} ${p:--} - $(planned_mib "$plan") - - ${dv:--}/${h:--/-/-}/- $([ $rc -eq 0 ] && echo ok || echo run-failed)" \
        >>"$OUT/rows.txt"
}

# ---- 3. Per plan: the teacher-forced logits (CHECK_TOKENS evals of one token) ----
CHECK_IDS=$(ids "$CHECK_TOKENS")
check_run() { # NAME N: $OUT/NAME-dN.logits [CHECK_TOKENS, vocab] f32
    tag=$1-d$2
    LD_PRELOAD="$([ "$BACKEND" = cuda ] && echo "$SHIM")" timeout 420 "$B/tools/gplan-run" \
        "$B/plans/mgpu-$1-d$2-t1.plan" --backend "$BACKEND" --random-weights "$SEED" \
        --prompt-ids "$CHECK_IDS" -n 1 --logits-out "$OUT/$tag.logits" --stats \
        >"$OUT/$tag.check.out" 2>"$OUT/$tag.check.log"
}

# A parity fixture from the reference run (logits.f32 and each row's argmax in tokens.txt), so
# parity-compare measures every other device count against it.
make_ref() { # NAME N
    dir="$OUT/ref/$1"
    mkdir -p "$dir" && cp "$OUT/$1-d$2.logits" "$dir/logits.f32" || return 1
    size=$(wc -c <"$dir/logits.f32")
    [ "$size" -gt 0 ] && [ $((size % (4 * CHECK_TOKENS))) -eq 0 ] || return 1
    od -An -v -t f4 -w4 "$dir/logits.f32" |
        awk -v V=$((size / 4 / CHECK_TOKENS)) '{ i = (NR - 1) % V; x = $1 + 0
            if (i == 0 || x > best) { best = x; arg = i }
            if (i == V - 1) print arg }' >"$dir/tokens.txt"
    [ "$(wc -l <"$dir/tokens.txt")" -eq "$CHECK_TOKENS" ]
}

# Replaces the rel_err and argmax columns of the row NAME N, and its status "ok" by STATUS.
set_err() { # NAME N ERR ARGMAX STATUS
    awk -v m="$1" -v n="$2" -v e="$3" -v a="$4" -v st="$5" '$1 == m && $2 == n {
        $7 = e; $8 = a; if ($10 == "ok") $10 = st } { print }' \
        "$OUT/rows.txt" >"$OUT/rows.tmp" && mv "$OUT/rows.tmp" "$OUT/rows.txt"
}

for m in $MODELS; do
    for n in $DEVICES; do
        if [ ! -f "$B/plans/mgpu-$m-d$n.plan" ] || [ ! -f "$B/plans/mgpu-$m-d$n-t1.plan" ]; then
            echo "$m $n - - - - - - - no-plan" >>"$OUT/rows.txt"
            continue
        fi
        if [ "$BACKEND" = cuda ]; then bench_cuda "$m" "$n"; else bench_cpu "$m" "$n"; fi
        if ! check_run "$m" "$n"; then
            fail "gplan-run $m-d$n (teacher-forced check) failed: $(tail -1 "$OUT/$m-d$n.check.log")"
            set_err "$m" "$n" - - check-failed
            continue
        fi
        if [ "$n" = "$REF" ]; then
            make_ref "$m" "$n" || fail "$m: cannot make the reference from $OUT/$m-d$n.logits"
            set_err "$m" "$n" ref ref ok
        elif [ -f "$OUT/ref/$m/tokens.txt" ]; then
            "$B/tests/parity/parity-compare" "$OUT/ref/$m" "$OUT/$m-d$n.logits" --tol "$TOL" \
                --name "$m-d$n-vs-d$REF" >"$OUT/$m-d$n.cmp" 2>&1
            rc=$?
            cat "$OUT/$m-d$n.cmp"
            [ $rc -eq 0 ] || fail "$m: $n devices differ from $REF beyond $TOL"
            set_err "$m" "$n" "$(awk '$(NF) ~ /PASS|FAIL/ { print $3 }' "$OUT/$m-d$n.cmp")" \
                "$(awk '{ for (i = 1; i < NF; i++) if ($i == "argmax") print $(i + 1) }' "$OUT/$m-d$n.cmp")" \
                "$([ $rc -eq 0 ] && echo ok || echo mismatch)"
        else
            set_err "$m" "$n" no-ref - no-reference
        fi
    done
done

# ---- 4. Summary ----
echo
echo "elapsed $(($(date +%s) - START)) s; logs in $OUT"
if [ "$BACKEND" = cuda ]; then
    grep -h -m1 "NCCL version" "$OUT"/*.bench.log 2>/dev/null
    grep -h "NCCL INFO Channel 00.* via " "$OUT"/*.bench.log 2>/dev/null | sed 's/^.*NCCL INFO //' | sort -u | head -4
    grep -h -E "^(CHECK|RESULT .* FAILED|IDLE)" "$OUT"/*.bench.log 2>/dev/null
    grep -h "^ALLOC" "$OUT"/*.bench.log 2>/dev/null | cut -c1-300 | sort -k2,3 -u | head -8
    grep -h -E "device [0-9]+: weights" "$OUT"/*.bench.log 2>/dev/null
fi
grep -h -E "^stats: (host|device) allocations" "$OUT"/*-d*.check.log 2>/dev/null | sort | uniq -c
echo
echo "| model | devices | decode ms/token | tokens/s | speedup vs $REF | prompt tok/s ($([ "$BACKEND" = cuda ] && echo 512 || echo "$PROMPT")) | memory MiB per device: used (planned) | max rel err vs $REF (argmax) | allocs in evals: device / host eval thread / host device threads / host other (driver, NCCL) / CUDA calls | status |"
echo "|---|---|---|---|---|---|---|---|---|---|"
awk -v ref="$REF" '
    function num(x) { return x ~ /^[0-9.]+$/ }
    $2 == ref && num($3) { base[$1] = $3 }
    { rows[NR] = $0 }
    END { for (r = 1; r <= NR; r++) {
            $0 = rows[r]
            tps = num($3) && $3 > 0 ? sprintf("%.1f", 1000 / $3) : "-"
            sp = num($3) && $3 > 0 && ($1 in base) ? sprintf("%.2fx", base[$1] / $3) : "-"
            err = $7 == "ref" ? "(reference)" : $7 " (" $8 ")"
            printf "| %s | %s | %s | %s | %s | %s | %s (%s) | %s | %s | %s |\n", $1, $2, $3, tps, sp, $4, $5, $6, err, $9, $10 } }' \
    "$OUT/rows.txt"
echo
echo "== $FAILS failures"
[ "$FAILS" -eq 0 ]
