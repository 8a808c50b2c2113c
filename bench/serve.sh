#!/bin/sh
# gplan-serve against llama.cpp's llama-server (from the llama-cpp-python 0.3.36 source, its server
# target) on the same GGUF file and thread count: N concurrent clients, each sending distinct
# prompts of 128 token ids to /v1/completions, streamed, for 128 tokens at temperature 0 with
# end-of-generation ignored (bench/serve_load.py). Both servers run N slots with continuous
# batching; llama-server with --no-cache-prompt and the requests with cache_prompt false on the
# plain rows; the shared-prefix row gives every prompt the same first 96 ids, prompt caching on in
# both. Servers alternate row by row; each row REPS times (the spread is printed). One table last.
#
# usage: bench/serve.sh [MODEL.gguf]   (default: SmolLM2-135M-Instruct Q4_1 from the cache)
# Env: LLAMA_SERVER (the binary), GPLAN_SERVE (default build/tools/gplan-serve), THREADS (2),
#      CLIENTS ("1 4 16 64"), REPS (2), GEN (128), PROMPT (128), BACKEND (cpu; cuda for gplan on
#      the GPU machine, llama-server then needs -ngl: LLAMA_ARGS="-ngl 99").
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-$HOME/.cache/gplan/SmolLM2-135M-Instruct.Q4_1.gguf}
ls_bin=${LLAMA_SERVER:-/work/cache/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server}
gs_bin=${GPLAN_SERVE:-$here/build/tools/gplan-serve}
threads=${THREADS:-2}
clients=${CLIENTS:-1 4 16 64}
reps=${REPS:-2}
gen=${GEN:-128}
prompt=${PROMPT:-128}
backend=${BACKEND:-cpu}
load=$here/bench/serve_load.py
[ -f "$model" ] || { echo "error: no model at $model" >&2; exit 1; }
[ -x "$ls_bin" ] || { echo "error: no llama-server at $ls_bin (set LLAMA_SERVER)" >&2; exit 1; }
[ -x "$gs_bin" ] || { echo "error: no gplan-serve at $gs_bin (set GPLAN_SERVE)" >&2; exit 1; }
work=${TMPDIR:-/tmp}/gplan-serve-bench.$$
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
ctx=$((prompt + gen + 16))
port=18190
results=$work/results.txt
: >"$results"

wait_up() { # port pid
  i=0
  while [ $i -lt 600 ]; do
    curl -s "http://127.0.0.1:$1/health" 2>/dev/null | grep -q '"ok"' && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.2
    i=$((i + 1))
  done
  return 1
}

# run TOOL N SHARED: one server up, one load, the server down; appends "TOOL N SHARED json".
run() {
  tool=$1 n=$2 shared=$3
  port=$((port + 1))
  if [ "$tool" = gplan ]; then
    GPLAN_CACHE_DIR=$work/plans "$gs_bin" "$model" --port $port --slots "$n" --threads "$threads" \
      --ctx "$ctx" --backend "$backend" >"$work/server.log" 2>&1 &
  else
    cache=--no-cache-prompt
    [ "$shared" -gt 0 ] && cache=--cache-prompt
    # shellcheck disable=SC2086
    "$ls_bin" -m "$model" -t "$threads" -np "$n" -c $((ctx * n)) --port $port --host 127.0.0.1 \
      -cb $cache ${LLAMA_ARGS:-} >"$work/server.log" 2>&1 &
  fi
  pid=$!
  if ! wait_up $port $pid; then
    echo "error: $tool did not come up:" >&2
    tail -5 "$work/server.log" >&2
    kill $pid 2>/dev/null || true
    exit 1
  fi
  out=$(python3 "$load" "http://127.0.0.1:$port" "$n" 1 "$prompt" "$gen" --pid $pid --shared "$shared")
  kill $pid
  wait $pid 2>/dev/null || true
  echo "$tool $n $shared $out" >>"$results"
  echo "  $tool clients=$n shared=$shared $out"
}

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
echo "== gplan-serve vs llama-server: $(basename "$model"), $threads threads, $cpu, $(date -u '+%Y-%m-%d %H:%M UTC')"
for r in $(seq 1 "$reps"); do
  for n in $clients; do
    if [ $((r % 2)) = 1 ]; then run gplan "$n" 0; run llama "$n" 0; else run llama "$n" 0; run gplan "$n" 0; fi
  done
  n=$(echo "$clients" | awk '{print $(NF > 2 ? 3 : NF)}')
  run gplan "$n" 96
  run llama "$n" 96
done

python3 - "$results" <<'EOF'
import json, sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    tool, n, shared, js = line.split(" ", 3)
    rows.setdefault((int(n), int(shared)), {}).setdefault(tool, []).append(json.loads(js))
def f(xs, k):
    v = [x[k] for x in xs]
    return "%.1f" % st.median(v) + ("" if len(v) < 2 else " (%.0f-%.0f)" % (min(v), max(v)))
print("\n| clients | prefix | gplan tok/s | llama tok/s | ratio | gplan TTFT p50/p99 ms | llama TTFT p50/p99 ms | gplan ITL p99 | llama ITL p99 | errors g/l | RSS MiB g/l |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for (n, shared) in sorted(rows):
    g, l = rows[(n, shared)].get("gplan", []), rows[(n, shared)].get("llama", [])
    if not g or not l:
        continue
    ratio = st.median([x["tok_s"] for x in g]) / st.median([x["tok_s"] for x in l])
    print("| %d | %s | %s | %s | %.2f | %s / %s | %s / %s | %s | %s | %d/%d | %s/%s |" % (
        n, shared or "-", f(g, "tok_s"), f(l, "tok_s"), ratio, f(g, "ttft_p50_ms"),
        f(g, "ttft_p99_ms"), f(l, "ttft_p50_ms"), f(l, "ttft_p99_ms"), f(g, "itl_p99_ms"),
        f(l, "itl_p99_ms"), sum(x["errors"] + x["short"] for x in g),
        sum(x["errors"] + x["short"] for x in l), f(g, "rss_mib"), f(l, "rss_mib")))
EOF
