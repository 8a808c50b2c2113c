#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang into build-fuzz and runs each for SECONDS
# (default 60), then prints executions per target. Exits non-zero on any crash, leak, timeout or
# out-of-memory; the input that did it is left in build-fuzz/artifacts/TARGET/ (copy it into
# fuzz/regressions/TARGET/ once fixed). Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
GP_ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$GP_ROOT"
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(dsl plan safetensors csv gguf tokenizer request)
case $secs in '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2; exit 2 ;; esac

# Longest input per target: a little over the largest seed, so mutations stay near real files.
max_len() {
  case $1 in
    plan) echo 32768 ;;
    dsl) echo 16384 ;;
    tokenizer) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

CC=${CC:-clang}
command -v "$CC" >/dev/null || { echo "error: $CC not found (apt-get install clang)" >&2; exit 1; }
B=build-fuzz
echo "== build $B with $CC (libFuzzer, address and undefined-behaviour sanitizers)"
cmake -S . -B $B -DCMAKE_C_COMPILER="$CC" -DGPLAN_FUZZ=ON -DGPLAN_CUDA=OFF \
  -DGPLAN_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo >$B.configure.log 2>&1 ||
  { cat $B.configure.log >&2; echo "error: cmake configure failed" >&2; exit 1; }
if ! cmake --build $B -j "$(nproc)" --target gplan-compile "${targets[@]/#/fuzz_}" >$B.build.log 2>&1; then
  grep -E 'error|Error' $B.build.log | head -40 >&2
  echo "error: build failed (full log: $B.build.log)" >&2
  exit 1
fi

echo "== seeds"
rm -rf $B/seeds
sh fuzz/seeds.sh $B/seeds $B/tools/gplan-compile

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
declare -A runs speed status
failed=0
for t in "${targets[@]}"; do
  echo "== fuzz_$t for $secs s"
  mkdir -p $B/corpus/$t $B/artifacts/$t
  seeds=()
  for d in fuzz/corpus/$t fuzz/regressions/$t $B/seeds/$t; do
    [ -d "$d" ] && seeds+=("$d")
  done
  [ "$t" = dsl ] && seeds+=(examples)
  log=$B/fuzz-$t.log
  rc=0
  $B/fuzz/fuzz_$t $B/corpus/$t "${seeds[@]}" -max_total_time="$secs" -max_len="$(max_len "$t")" \
    -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix=$B/artifacts/$t/ >"$log" 2>&1 || rc=$?
  runs[$t]=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed[$t]=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [ "$rc" -ne 0 ]; then
    failed=1
    status[$t]="FAILED (exit $rc)"
    grep -E '^==[0-9]+==ERROR|runtime error|fuzz invariant|Test unit written|ALARM|out-of-memory' "$log" |
      head -10 >&2 || true
    echo "   log: $log" >&2
  else
    status[$t]=ok
  fi
done

echo
printf '%-12s %8s %12s %10s %8s  %s\n' target seconds executions exec/s corpus result
for t in "${targets[@]}"; do
  printf '%-12s %8s %12s %10s %8s  %s\n' "$t" "$secs" "${runs[$t]:-?}" "${speed[$t]:-?}" \
    "$(find $B/corpus/$t -type f | wc -l)" "${status[$t]}"
done
exit $failed
