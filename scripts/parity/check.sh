#!/bin/sh
# Hugging Face parity, end to end: regenerates the fixtures with transformers
# (scripts/parity/make_fixtures.py), runs gplan-run on them on each backend in f32 and f16 and prints
# a table. Run it where torch and transformers are (and a GPU for the cuda backend).
#
# usage: scripts/parity/check.sh [--build DIR] [--fixtures DIR] [--no-regen] [--update]
#                                [--backends "cpu cuda"]
#   --build DIR     a build folder with gplan-compile, gplan-run and parity-compare (default
#                   build-parity; configure it with -DCMAKE_CUDA_ARCHITECTURES=90 for an H100/H200)
#   --fixtures DIR  where the fixtures are made (default DIR_OF_BUILD/parity-fixtures)
#   --no-regen      use the fixtures already in --fixtures (e.g. --fixtures tests/parity)
#   --update        copy the regenerated fixtures into tests/parity (the committed ones)
#   --backends L    backends to run (default: cpu, and cuda when nvidia-smi finds a GPU)
# Tolerances (max relative error of a step, max|a-b| / max|b| over its logits): f32 1e-4 with
# identical greedy tokens, f16 1e-2 teacher-forced (tests/parity/parity.sh says how).
# Exit status: 0 when every row passes.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-parity fixtures= regen=1 update=0 backends=
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --fixtures) fixtures=$2; shift 2 ;;
    --no-regen) regen=0; shift ;;
    --update) update=1; shift ;;
    --backends) backends=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$fixtures" ] || fixtures=$build/parity-fixtures
if [ -z "$backends" ]; then
  backends=cpu
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    backends="cpu cuda"
  fi
fi
# A build carried from another machine may bring libraries that this one lacks (e.g. libjansson).
[ -d "$build/lib" ] && export LD_LIBRARY_PATH="$build/lib:${LD_LIBRARY_PATH:-}"
[ -d /usr/local/cuda/lib64 ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"

if [ $regen -eq 1 ]; then
  echo "== fixtures (transformers) -> $fixtures"
  PYTHONUNBUFFERED=1 python3 "$root/scripts/parity/make_fixtures.py" "$fixtures" || exit 1
fi
if [ $update -eq 1 ]; then
  for f in gpt2 llama llama_tied; do
    rm -rf "${root:?}/tests/parity/$f" && cp -r "$fixtures/$f" "$root/tests/parity/$f" || exit 1
  done
  echo "== copied the fixtures into tests/parity"
fi

graph_of() { case "$1" in gpt2) echo gpt2 ;; *) echo llama ;; esac; }
work=$build/parity-work
fails=0 rows=0
echo "== gplan vs transformers ($(date -u +%Y-%m-%dT%H:%MZ))"
printf '%-34s %5s  %-27s %-16s %-12s %s\n' "check" "steps" "max rel err (worst step) <= tol" \
  "greedy tokens" "argmax" "result"
for f in gpt2 llama llama_tied; do
  [ -f "$fixtures/$f/config.json" ] || { echo "$f: no fixture"; fails=$((fails + 1)); continue; }
  g=$root/examples/$(graph_of $f).gplan
  for b in $backends; do
    for d in f32 f16; do
      sh "$root/tests/parity/parity.sh" --tools "$build" --fixture "$fixtures/$f" --graph "$g" \
        --work "$work" --backend "$b" --dtype "$d" --name "$f/$b/$d" ||
        fails=$((fails + 1))
      rows=$((rows + 1))
    done
    if [ -f "$fixtures/$f/model.safetensors.index.json" ]; then
      sh "$root/tests/parity/parity.sh" --tools "$build" --fixture "$fixtures/$f" --graph "$g" \
        --work "$work" --backend "$b" --dtype f32 --name "$f/$b/f32/index.json" \
        --weights "$fixtures/$f/model.safetensors.index.json" || fails=$((fails + 1))
      rows=$((rows + 1))
    fi
  done
done
echo "== $((rows - fails)) passed, $fails failed"
[ $fails -eq 0 ]
