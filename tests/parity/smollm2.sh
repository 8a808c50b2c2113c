#!/bin/sh
# SmolLM2-135M-Instruct (Q4_1 GGUF with one Q8_0 tensor) against transformers, which dequantizes
# the file to f32 (tests/parity/smollm2/fixture.txt, from scripts/parity/make_smollm2_fixture.py):
# compiled with --gguf, the prompt in one eval then 32 greedy tokens; every eval's last logits row
# within TOL (default 1e-3) of the fixture's entries and the tokens identical.
# The model comes from scripts/fetch_models.sh: $GPLAN_SMOLLM2, else the default cache path; when
# it is absent the test is skipped (exit 77), never passed.
# usage: smollm2.sh BUILD_DIR FIXTURE_DIR WORK_DIR GRAPH [TOL]   (tests/parity/real_model.sh runs it)
model=${GPLAN_SMOLLM2:-${GPLAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gplan}/SmolLM2-135M-Instruct.Q4_1.gguf}
exec sh "$(dirname "$0")/real_model.sh" "$1" "$2" "$3" "$4" "${5:-1e-3}" smollm2 "$model" \
  scripts/fetch_models.sh 49152 smollm2-135m/q4_1/cpu -D max_position_embeddings=256 -D n_batch=32
