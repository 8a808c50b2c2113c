/* The CUDA backend's extras beyond runtime/backend.h (gp_backend_cuda is declared there). */
#ifndef GP_CUDA_BACKEND_H
#define GP_CUDA_BACKEND_H

#include <stdint.h>

/* Seconds spent inside the CUDA backend's evals (input copies, graph replay, waiting for the GPU,
 * output copies) and the number of evals, summed over every session of the process: what a
 * benchmark subtracts from gp_session_eval's time to see the session's own overhead. */
void gp_cuda_eval_stats(double *seconds, int64_t *evals);

/* Copies evals enqueued (into graphs too), summed over every session: all of them, or (merged)
 * those carrying more than one of an eval's transfers (its sizes and inputs in one, or a run of
 * outputs: "copies" in cuda/cuda_backend.c). */
int64_t gp_cuda_copies_count(int merged);

/* LoRA branches merged into their products' weights at creation ("lora" in cuda/cuda_plan.c),
 * every session. */
int64_t gp_cuda_lora_merged_count(void);

/* Kernels and library calls that evals enqueued (eagerly or into graphs at capture), every
 * session: what a fusion saves, for tests. */
int64_t gp_cuda_launch_count(void);

/* One-token evals that replayed the graph for long contexts (their position past the rows the
 * block-a-head attention loads early: "atthead" in cuda/cuda_backend.c), every session. */
int64_t gp_cuda_long_evals(void);

#endif
