/* What every fuzz target shares: libFuzzer's entry point (also called by the regression replayer,
 * tests/fuzz_regress/replay.c) and an always-on check that turns a broken invariant into a crash. */
#ifndef GP_FUZZ_FUZZ_H
#define GP_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A target's own invariant (e.g. "a plan the planner wrote loads again"): abort so the fuzzer keeps
 * the input. */
#define GP_FUZZ_CHECK(cond)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond);      \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
