/* The communicator of a tensor-parallel CUDA session (one process, one communicator and one eval
 * thread per device) and the all-reduce the backend enqueues. Internal to cuda/.
 *
 * Two ways to sum. Where every pair of the devices can access each other's memory
 * (cudaDeviceCanAccessPeer: NVLink, or P2P over PCIe) and there are at most GP_AR_P2P_RANKS of
 * them, all-reduces of at most GP_AR_P2P_MAX bytes run the one-shot kernel of cuda_allreduce.cu:
 * each rank pushes its term into every peer's receive buffer, raises a flag there, waits for the
 * peers' flags and sums. Larger ones, and all of them when peers cannot access each other or the
 * environment says GPLAN_ALLREDUCE=nccl (read at comm_new), go to NCCL. Built without NCCL,
 * creating a communicator fails with "cuda: built without NCCL".
 *
 * What the P2P path owns, allocated once at comm_new (nothing per all-reduce): per rank, on its
 * device, a receive buffer [n][2 parities][GP_AR_P2P_MAX bytes], flags [n][GP_AR_BLOCKS] and
 * epoch counters [GP_AR_BLOCKS] (uint64, zeroed); one host-mapped pinned block shared by the
 * ranks: the abort word and a status word per rank. A kernel waits at most 10 s for a peer
 * (GPLAN_ALLREDUCE_TIMEOUT_MS overrides it), then writes its status and sets abort, which ends
 * every other rank's waits; gp_cuda_comm_wait reports it. The protocol is described at the top of
 * cuda_allreduce.cu. One stream per rank: a rank's all-reduces must run in the order issued, and
 * every rank must issue the same all-reduces (sizes included) in the same order.
 */
#ifndef GP_CUDA_COMM_H
#define GP_CUDA_COMM_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "ir/core.h"

typedef struct gp_cuda_comm gp_cuda_comm;

/* All-reduces of at most this many bytes take the P2P kernel (larger ones: NCCL). */
#define GP_AR_P2P_MAX (256 * 1024)
/* The most ranks the P2P kernel serves (its per-peer pointers are kernel parameters). */
#define GP_AR_P2P_RANKS 8
/* The kernel's most blocks, each with its own epoch counter, flag per rank and slot of
 * GP_AR_SLOT bytes in every receive row. (More blocks are much slower: bench/multi-gpu-notes.md.)
 */
#define GP_AR_BLOCKS 16
#define GP_AR_SLOT (GP_AR_P2P_MAX / GP_AR_BLOCKS)

/*
 * gp_backend_ops.comm_new / comm_free of gp_backend_cuda (runtime/backend.h): one communicator per
 * device over devices[0..n) (rank r on devices[r]), connected and warmed up here by all-reduces on
 * every rank, so that no eval and no graph capture sets anything up. 0 and *comm, or -1 with err
 * ("cuda: the plan needs 2 devices, 1 visible", "cuda: built without NCCL", NCCL's message).
 * NCCL_RUNTIME_CONNECT and NCCL_NVLS_ENABLE are set to 0 when the environment leaves them unset.
 * Environment, read here: GPLAN_ALLREDUCE=nccl (every all-reduce over NCCL) or p2p (the default:
 * the P2P kernel where possible); GPLAN_ALLREDUCE_TIMEOUT_MS (the P2P kernel's wait, default
 * 10000); GPLAN_ALLREDUCE_BLOCK_BYTES (bytes per block of the P2P kernel while it has fewer than
 * GP_AR_BLOCKS blocks, a power of two in [512, GP_AR_SLOT], default 4096; for measurements).
 */
int gp_cuda_comm_new(int n, const int *devices, void **comm, char *err, size_t err_len);
void gp_cuda_comm_free(void *comm); /* NULL: no-op */

/* The device ordinal of rank's communicator (-1 when rank is out of range). */
int gp_cuda_comm_device(const gp_cuda_comm *c, int rank);

/* 1 when an all-reduce of `bytes` bytes takes the P2P kernel on this communicator (0 with NCCL). */
int gp_cuda_comm_uses_p2p(const gp_cuda_comm *c, size_t bytes);

/* 1 when all-reduce sums this dtype (f32, f16, bf16). */
int gp_cuda_comm_dtype_ok(gp_dtype dt);

/* Enqueues out[count] = sum over the ranks of in[count] on stream s for rank `rank` (in == out:
 * in place). Works inside a stream capture. 0, or -1 with err. */
int gp_cuda_comm_all_reduce(gp_cuda_comm *c, int rank, const void *in, void *out, size_t count,
                            gp_dtype dt, cudaStream_t s, char *err, size_t err_len);

/* A norm of an all-reduce's sum (Llama's rms_norm after each tensor-parallel residual add),
 * computed by the P2P kernel: out = norm(sum), the sum being one f32 row of n <= 4096, which one
 * block of the kernel then sums whole. */
typedef struct {
    int is_ln;          /* 1: layer_norm, 0: rms_norm */
    float eps;
    const void *w, *b;  /* [n] contiguous; b NULL: none */
    gp_dtype w_dt, b_dt;
    void *out;          /* [n] contiguous, disjoint from the all-reduce's output */
    gp_dtype out_dt;
    size_t n;           /* the norm's row: only an all-reduce of exactly n elements takes it */
} gp_cuda_ar_norm;

/* gp_cuda_comm_all_reduce, and when the P2P kernel serves it and the sum is one f32 row
 * (count == norm->n), norm (may be NULL) too: *norm_done = 1 (else 0: the caller runs the norm).
 * not_after: 1 when the last work enqueued on s before this is not an all-reduce (the P2P kernel
 * may then read its epochs before waiting for that work); 0 when unknown. */
int gp_cuda_comm_all_reduce_norm(gp_cuda_comm *c, int rank, const void *in, void *out, size_t count,
                                 gp_dtype dt, cudaStream_t s, const gp_cuda_ar_norm *norm,
                                 int not_after, int *norm_done, char *err, size_t err_len);

/*
 * Waits until stream s (rank's eval) has finished, like cudaStreamSynchronize, but gives up when
 * another rank has failed (gp_cuda_comm_fail), or NCCL reports an error: it then stops this rank's
 * communicator so that its pending collectives return, and returns -1 with err. A P2P all-reduce
 * of rank's that timed out or was aborted is an error too (the sums are then garbage), and marks
 * the communicator failed. 0 when done.
 */
int gp_cuda_comm_wait(gp_cuda_comm *c, int rank, cudaStream_t s, char *err, size_t err_len);

/* Rank `rank` failed during an eval after (possibly) launching work: marks the communicator failed,
 * so every other rank's wait gives up, sets the P2P abort word, so that P2P all-reduces waiting on
 * any device stop, and stops rank's own NCCL communicator. Called by rank's thread. */
void gp_cuda_comm_fail(gp_cuda_comm *c, int rank);

/* The first rank that failed, or -1. A failed communicator serves no more evals. */
int gp_cuda_comm_failed(const gp_cuda_comm *c);

/* Registers device bytes [p, p + n) of rank with NCCL (ncclCommRegister); *handle NULL when it
 * declined. 0 or -1 with err. Deregistered with gp_cuda_comm_deregister (NULL handle: no-op). */
int gp_cuda_comm_register(gp_cuda_comm *c, int rank, void *p, size_t n, void **handle, char *err,
                          size_t err_len);
void gp_cuda_comm_deregister(gp_cuda_comm *c, int rank, void *handle);

/* ---- the P2P kernel's launch (cuda_allreduce.cu), for cuda_comm.c ---- */

/* Status words a P2P all-reduce writes (host-mapped) when it stops waiting. */
enum { GP_AR_OK = 0, GP_AR_ABORTED = 1, GP_AR_TIMEOUT = 2 }; /* TIMEOUT | peer << 8 */

/* What one rank's kernel needs: passed by value as the kernel's parameter. */
typedef struct {
    unsigned char *recv[GP_AR_P2P_RANKS]; /* [n] rank r's receive buffer on its device:
                                             [n][2][GP_AR_BLOCKS][GP_AR_SLOT] bytes (sender,
                                             parity, block) */
    unsigned long long *flags[GP_AR_P2P_RANKS]; /* [n] rank r's flags [n][GP_AR_BLOCKS]: the last
                                                   epoch sender s's block b announced */
    unsigned long long *seq;                  /* [GP_AR_BLOCKS] this rank's epoch per block */
    unsigned *abort;       /* host-mapped, shared: 0, else 1 + the rank that stopped everything */
    unsigned *status;      /* host-mapped: this rank's GP_AR_* word */
    int n, rank;
    unsigned block_bytes;  /* bytes per block below GP_AR_BLOCKS blocks (a multiple of 16) */
    unsigned long long timeout_ns;
} gp_cuda_ar_peers;

/* Enqueues rank p->rank's one-shot all-reduce of count elements (count * size <= GP_AR_P2P_MAX)
 * on s; pdl: the launch may overlap the kernel before it (which the kernel waits for). A CUDA
 * error code (0: cudaSuccess). */
int gp_cuda_ar_launch(const gp_cuda_ar_peers *p, const void *in, void *out, size_t count,
                      gp_dtype dt, cudaStream_t s, int pdl, const gp_cuda_ar_norm *norm,
                      int not_after);
/* 1 when gp_cuda_ar_launch computes norm for a sum of count elements of dt. */
int gp_cuda_ar_norm_ok(const gp_cuda_ar_norm *norm, size_t count, gp_dtype dt);

/* Loads every instantiation of the kernel on the current device (lazy loading would load one at
 * its first launch, which may be inside a capture). A CUDA error code. */
int gp_cuda_ar_load(void);

#ifdef __cplusplus
}
#endif

#endif
