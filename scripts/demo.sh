#!/usr/bin/env bash
# The main job: installs what is missing, builds gplan, then checks the example models and shows
# what gplan makes of them. Usage: scripts/demo.sh
set -euo pipefail
GP_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$GP_ROOT/scripts/setup.sh"
gp_setup
cd "$GP_ROOT"

echo "== build"
gp_build build -DCMAKE_BUILD_TYPE=Release
bin=build/tools

for m in tiny gpt2 llama; do
  echo "== gplan-compile --check examples/$m.gplan"
  "$bin/gplan-compile" --check "examples/$m.gplan"
done
