#!/usr/bin/env bash
# The CPU backend side by side with llama.cpp's llama-bench on the same GGUF files (random weights,
# f16 matrices, f16 KV caches in both), in one run: decode ms per token and prompt-128 tokens/s at
# THREADS threads, plus a STREAM-style copy bandwidth and a sequential read bandwidth
# (bench/copy_bw.c). Rounds alternate the tools (bandwidths, gplan, llama.cpp per model) so a
# shared machine's load hits both alike; the table gives each figure's best round and its spread
# (worst/best), and decode's weight stream as a fraction of each bandwidth. Record the output in
# bench/cpu-notes.md.
# Usage: bench/cpu.sh [ROUNDS (default 3)] [MODELS (default "tinyllama gpt2")]
# Env: LLAMA_BENCH (the llama-bench binary), GP_BENCH_DIR (the GGUF files; made when missing),
#      THREADS (default 2), TOKENS (decode tokens per round, default 32), LLAMA_ENV (variables
#      for llama-bench only, e.g. OMP_WAIT_POLICY=passive: its OpenMP threads spin-wait, which a
#      loaded machine punishes; see bench/cpu-notes.md), VOCAB_DIR (the vocab GGUFs the files are
#      made with; default ../shared/data/vocab beside the checkout).
set -euo pipefail
GP_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$GP_ROOT/scripts/setup.sh"
gp_setup
cd "$GP_ROOT"
rounds=${1:-3} models=${2:-"tinyllama gpt2"}
threads=${THREADS:-2} tokens=${TOKENS:-32}
dir=${GP_BENCH_DIR:-/work/cache/bench}
lb=${LLAMA_BENCH:-/work/cache/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-bench}
vocab=${VOCAB_DIR:-$GP_ROOT/../shared/data/vocab}
[ -x "$lb" ] || { echo "error: no llama-bench at $lb (set LLAMA_BENCH)" >&2; exit 1; }

echo "== build (Release)"
gp_build build-bench -DCMAKE_BUILD_TYPE=Release -DGPLAN_CUDA=OFF
cc -O2 -march=native -o build-bench/bench/copy_bw bench/copy_bw.c -lpthread

mkdir -p "$dir"
# Positions up to 512 for TinyLlama (GPT-2's position table fixes its 1024), f16 KV caches
# (llama-bench's default cache type).
declare -A gguf graph defs
gguf[tinyllama]=$dir/tinyllama-f16.gguf graph[tinyllama]=examples/llama.gplan
defs[tinyllama]="-D max_position_embeddings=512 -D kv_type=f16"
gguf[gpt2]=$dir/gpt2-f16.gguf graph[gpt2]=bench/gpt2_gguf.gplan defs[gpt2]="-D kv_type=f16"
for m in $models; do
  f=${gguf[$m]}
  [ -f "$f" ] && continue
  echo "== making $f"
  case $m in
    tinyllama) python3 scripts/bench/make_random_gguf.py "$f.tmp" "$vocab/ggml-vocab-llama-spm.gguf" ;;
    gpt2) python3 bench/make_gpt2_gguf.py "$f.tmp" "$vocab/ggml-vocab-gpt-2.gguf" ;;
  esac
  mv "$f.tmp" "$f"
done
for m in $models; do
  # shellcheck disable=SC2086
  build-bench/tools/gplan-compile "${graph[$m]}" --gguf "${gguf[$m]}" ${defs[$m]} \
    -o "build-bench/$m-f16.plan" > /dev/null
done

echo "== machine: $(scripts/bench/machine.sh avx2 avx512f avx512_bf16 avx512_fp16 amx_tile asimdhp \
     bf16), $(nproc) cores, $threads threads, $(date -u '+%Y-%m-%d %H:%M UTC'), llama-bench env:" \
     "${LLAMA_ENV:-none}"
raw=build-bench/cpu-bench.tsv
: > "$raw"
prompt=$(seq -s, 1 128) kernels=
for r in $(seq 1 "$rounds"); do
  echo "== round $r, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  bw=$(build-bench/bench/copy_bw "$threads" 3)
  printf 'copy\t-\t%s\n' "$(echo "$bw" | sed -nE 's/^copy .*: ([0-9.]+) GB.*/\1/p')" >> "$raw"
  printf 'read\t-\t%s\n' "$(echo "$bw" | sed -nE 's/^read .*: ([0-9.]+) GB.*/\1/p')" >> "$raw"
  for m in $models; do
    out=$(build-bench/tools/gplan-run "build-bench/$m-f16.plan" --weights "${gguf[$m]}" \
          --prompt-ids "$prompt" -n "$((tokens + 1))" --threads "$threads" --stats 2>&1 >/dev/null)
    pp=$(echo "$out" | sed -nE 's/^stats: prompt .* ([0-9.]+) tokens\/s.*/\1/p')
    tg=$(echo "$out" | sed -nE 's/^stats: generation .*, ([0-9.]+) ms per eval.*/\1/p')
    al=$(echo "$out" | sed -nE 's/^stats: host allocations during evals: ([0-9]+) on the eval thread, ([0-9]+) on.*/\1+\2/p')
    kernels=$(echo "$out" | sed -n 's/^stats: cpu kernels: //p')
    printf 'gplan\t%s\t%s\t%s\t%s\n' "$m" "$pp" "$tg" "$al" >> "$raw"
    # shellcheck disable=SC2086
    js=$(env ${LLAMA_ENV:-} "$lb" -m "${gguf[$m]}" -t "$threads" -p 128 -n "$tokens" -r 1 -o json 2>/dev/null)
    echo "$js" | python3 -c '
import json, sys
pp = tg = ""
for t in json.load(sys.stdin):
    if t["n_prompt"] and not t["n_gen"]: pp = "%.2f" % t["avg_ts"]
    if t["n_gen"] and not t["n_prompt"]: tg = "%.2f" % (1000.0 / t["avg_ts"])
print("llama\t%s\t%s\t%s\t-" % (sys.argv[1], pp, tg))' "$m" >> "$raw"
    tail -n 2 "$raw" | sed 's/^/   /'
  done
done

echo "== table: best round (spread = worst / best); decode after the 128-token prompt in gplan,"
echo "   from an empty cache in llama-bench (tg$tokens)"
wargs=""
for m in $models; do wargs="$wargs $m=${gguf[$m]}"; done
# shellcheck disable=SC2086
python3 - "$raw" "$threads" $wargs <<'PY'
import sys, collections
import gguf
# Weight bytes a decode token reads: every tensor, less the embedding tables read by row (the
# token table too when a separate output matrix exists; a tied one is read whole as the LM head).
wbytes = {}
for a in sys.argv[3:]:
    m, path = a.split("=", 1)
    t = {x.name: int(x.n_bytes) for x in gguf.GGUFReader(path).tensors}
    skip = {"position_embd.weight"} | ({"token_embd.weight"} if "output.weight" in t else set())
    wbytes[m] = sum(v for k, v in t.items() if k not in skip)
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
bw = [float(r[2]) for r in rows if r[0] == "copy"]
rd = [float(r[2]) for r in rows if r[0] == "read" and r[2]]
d = collections.defaultdict(lambda: collections.defaultdict(list))
alloc = collections.defaultdict(set)
for r in rows:
    if r[0] in ("gplan", "llama"):
        if r[2]: d[(r[0], r[1])]["pp"].append(float(r[2]))
        if r[3]: d[(r[0], r[1])]["tg"].append(float(r[3]))
        if r[0] == "gplan": alloc[r[1]].add(r[4])
def best(v, hi):
    if not v: return "-", "-"
    b = round(max(v) if hi else min(v), 1)
    w = min(v) if hi else max(v)
    return b, "%.2f" % (w / b if not hi else b / w)
print("| model (f16) | decode ms/token gplan | llama.cpp | ratio | prompt-128 tok/s gplan | llama.cpp | ratio | gplan decode GB/s of weights | of copy / of read | allocs |")
print("|---|---|---|---|---|---|---|---|---|---|")
sizes = {}
for m in sorted({k[1] for k in d}):
    g, l = d[("gplan", m)], d[("llama", m)]
    gt, gs = best(g["tg"], False); lt, ls = best(l["tg"], False)
    gp, gps = best(g["pp"], True); lp, lps = best(l["pp"], True)
    rt = "%.2f" % (gt / lt) if gt != "-" and lt != "-" else "-"
    rp = "%.2f" % (gp / lp) if gp != "-" and lp != "-" else "-"
    gbs = wbytes[m] / gt * 1e-6 if gt != "-" else None
    frac = "%.0f%% / %.0f%%" % (100 * gbs / max(bw), 100 * gbs / max(rd)) if gbs and bw and rd else "-"
    print("| %s | %s (x%s) | %s (x%s) | %s | %s (x%s) | %s (x%s) | %s | %s | %s | %s |" % (
        m, gt, gs, lt, ls, rt, gp, gps, lp, lps, rp,
        "%.2f" % gbs if gbs else "-", frac, ",".join(sorted(alloc[m]))))
if bw:
    print("copy bandwidth, %s threads: best %.2f GB/s read + write (spread x%.2f)" % (
        sys.argv[2], max(bw), max(bw) / min(bw)))
if rd:
    print("read bandwidth, %s threads: best %.2f GB/s, one sequential stream a thread (spread x%.2f)" % (
        sys.argv[2], max(rd), max(rd) / min(rd)))
PY
echo "   ratio: gplan / llama.cpp (decode: under 1 is faster; prompt: over 1 is faster)"
echo "   gplan's kernels on this processor: $kernels"
