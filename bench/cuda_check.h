/* CK(call): a CUDA runtime call in a benchmark, which exits with the call and its error when it
 * fails (the benchmarks stop at the first error; the library reports its own). */
#ifndef GPLAN_BENCH_CUDA_CHECK_H
#define GPLAN_BENCH_CUDA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#endif
