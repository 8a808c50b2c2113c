/* The communicator of a tensor-parallel CUDA session (NCCL: one process, one communicator and one
 * eval thread per device) and the all-reduce the backend enqueues. Built without NCCL, creating one
 * fails with "cuda: built without NCCL". Internal to cuda/. */
#ifndef GP_CUDA_COMM_H
#define GP_CUDA_COMM_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "ir/core.h"

typedef struct gp_cuda_comm gp_cuda_comm;

/*
 * gp_backend_ops.comm_new / comm_free of gp_backend_cuda (runtime/backend.h): one communicator per
 * device over devices[0..n) (rank r on devices[r]), connected and warmed up here by all-reduces on
 * every rank, so that no eval and no graph capture sets anything up. 0 and *comm, or -1 with err
 * ("cuda: the plan needs 2 devices, 1 visible", "cuda: built without NCCL", NCCL's message).
 * NCCL_RUNTIME_CONNECT and NCCL_NVLS_ENABLE are set to 0 when the environment leaves them unset.
 */
int gp_cuda_comm_new(int n, const int *devices, void **comm, char *err, size_t err_len);
void gp_cuda_comm_free(void *comm); /* NULL: no-op */

/* The device ordinal of rank's communicator (-1 when rank is out of range). */
int gp_cuda_comm_device(const gp_cuda_comm *c, int rank);

/* 1 when all-reduce sums this dtype (f32, f16, bf16). */
int gp_cuda_comm_dtype_ok(gp_dtype dt);

/* Enqueues out[count] = sum over the ranks of in[count] on stream s for rank `rank` (in == out:
 * in place). Works inside a stream capture. 0, or -1 with err. */
int gp_cuda_comm_all_reduce(gp_cuda_comm *c, int rank, const void *in, void *out, size_t count,
                            gp_dtype dt, cudaStream_t s, char *err, size_t err_len);

/*
 * Waits until stream s (rank's eval) has finished, like cudaStreamSynchronize, but gives up when
 * another rank has failed (gp_cuda_comm_fail), or NCCL reports an error: it then stops this rank's
 * communicator so that its pending collectives return, and returns -1 with err. 0 when done.
 */
int gp_cuda_comm_wait(gp_cuda_comm *c, int rank, cudaStream_t s, char *err, size_t err_len);

/* Rank `rank` failed during an eval after (possibly) launching work: marks the communicator failed,
 * so every other rank's wait gives up, and stops rank's own communicator. Called by rank's thread. */
void gp_cuda_comm_fail(gp_cuda_comm *c, int rank);

/* The first rank that failed, or -1. A failed communicator serves no more evals. */
int gp_cuda_comm_failed(const gp_cuda_comm *c);

/* Registers device bytes [p, p + n) of rank with NCCL (ncclCommRegister); *handle NULL when it
 * declined. 0 or -1 with err. Deregistered with gp_cuda_comm_deregister (NULL handle: no-op). */
int gp_cuda_comm_register(gp_cuda_comm *c, int rank, void *p, size_t n, void **handle, char *err,
                          size_t err_len);
void gp_cuda_comm_deregister(gp_cuda_comm *c, int rank, void *handle);

#endif
