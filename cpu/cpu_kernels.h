/* The CPU backend's kernels: one entry point computes one node's output, on a share of threads.
 * Every op of ir/core.h (views are no-ops: the runtime computes their pointers). */
#ifndef GP_CPU_CPU_KERNELS_H
#define GP_CPU_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ir/core.h"

/* A tensor as a kernel sees it: the runtime's sizes for this eval. Unused dims need no values. */
typedef struct {
    void *data;              /* element 0 */
    gp_dtype dtype;
    int ndim;                /* 0..GP_MAX_DIMS; 0 is a scalar */
    int64_t ne[GP_MAX_DIMS]; /* [ndim] shape, outermost first */
    int64_t nb[GP_MAX_DIMS]; /* [ndim] strides in bytes (0 allowed: a broadcast) */
} gp_ktensor;

/* How many of a node's inputs device `device` passes gp_cpu_compute: all of them, except that
 * all_reduce(x, y) adds y on device 0 only (ir/core.h), so the others compute with x alone. */
static inline int gp_cpu_device_inputs(gp_op op, int n_inputs, int device)
{
    return op == GP_OP_ALL_REDUCE && device > 0 ? 1 : n_inputs;
}

/* Elements of t: the product of ne[0..ndim). */
static inline int64_t gp_ktensor_numel(const gp_ktensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->ne[d];
    return n;
}

/*
 * Computes node `op`'s output `out` from in[0..n_in). Called by nth threads with ith = 0..nth-1
 * (by gp_threadpool_run or serially); each call writes only its share of the output, so calls
 * need no barrier between them, only one after the node. Properties every kernel keeps:
 *  - Bit-identical results for every nth: work is split over output elements (rows or tiles) and
 *    each element's arithmetic, reductions included, runs in an order fixed by the shapes alone.
 *  - In place: where gp_op_get(op)->inplace >= 0, `out` may be that input's memory (same layout).
 *  - No allocation: scratch comes from ws (ws_size bytes, see gp_cpu_workspace_bytes) or from
 *    fixed-size stack buffers (at most ~180 KiB, in matmul's lanes path: threads need a stack of
 *    512 KiB or more).
 *  - Inputs of any float dtype (f32, f16, bf16) are read as f32; math is f32; results are converted
 *    to out->dtype. Products on weights with k or n contiguous and attention over caches with
 *    contiguous heads use fused multiply-adds (cpu/cpu_dot.h), the same bits in every build.
 *  - Index inputs (get_rows ids, store and attention pos) must be in range: the runtime checks them
 *    before the eval (gp_cpu_check); a kernel meeting a bad one stops with GP_ASSERT.
 * Op notes beyond core.h:
 *  - softmax: a row whose every element is masked (S < T) gives zeros.
 *  - store: writes in[0] (dst; `out` is the runtime's view of it). When pos repeats a row, the
 *    largest t wins, for any nth.
 *  - attention: uses min(nth, ws_size / (4 S)) threads (others return at once); a query row with
 *    pos[t] = p attends to cache rows 0..p.
 *  - moe: every product runs on f32 activations with the weights in their stored dtype (float or
 *    quantized, gp_quant_matmul_f32), whose results depend on K alone: a token's output is the
 *    same alone or in any batch. gp_cpu_compute runs it on thread 0 (see gp_cpu_phases).
 *  - cast between i32 and floats: i32 -> float rounds to nearest; float -> i32 truncates toward
 *    zero and saturates, NaN -> 0.
 */
void gp_cpu_compute(gp_op op, const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in,
                    int n_in, void *ws, size_t ws_size, int ith, int nth);

/*
 * The phased form of a node, for a thread pool with a barrier (runtime/cpu_backend.c):
 * gp_cpu_phases gives n (it depends on the op, shapes, dtypes and ws_size only); when n > 1,
 * every thread calls gp_cpu_compute_phase(..., p) for p = 0 .. n - 1 with all threads waiting at
 * a barrier between phases, in place of gp_cpu_compute; the results are gp_cpu_compute's bits
 * (phase 0 of a one-phase node is gp_cpu_compute itself). Today:
 *  - matmul on quantized weights when gp_quant_matmul_ws takes it (cpu/quant.h), 2 phases: the
 *    activations' halves into ws by rows, then the output columns (gp_cpu_compute splits the
 *    rows instead and unpacks the weights in every thread);
 *  - moe, GP_MOE_PHASES (cpu/cpu_internal.h): gp_cpu_compute runs them on one thread.
 */
int gp_cpu_phases(gp_op op, const gp_ktensor *out, const gp_ktensor *in, int n_in, const void *ws,
                  size_t ws_size);
void gp_cpu_compute_phase(gp_op op, const gp_attrs *a, const gp_ktensor *out,
                          const gp_ktensor *in, int n_in, void *ws, size_t ws_size, int ith,
                          int nth, int phase);

/*
 * Workspace bytes that gp_cpu_compute needs for this node at these shapes with nth threads (the
 * formulas agree with plan/plan.h):
 *   attention: min(nth, GP_WS_CPU_MAX_THREADS) * S * 4 (f32 scores [threads, S]; S = in[1]->ne[0],
 *              the cache rows, or a ragged batch's positions of a sequence, M * block); with
 *              less, fewer threads do the work (same results);
 *   matmul on quantized weights: gp_quant_matmul_ws_bytes(M, K) (cpu/quant.h: prompts on AMX,
 *              each activation as two bf16); with less, the f32 path (other bits);
 *   moe: gp_moe_ws(T, H, E, top_k, F).total (cpu/moe.h), required (a: the node's attributes);
 *   every other op: 0.
 */
size_t gp_cpu_workspace_bytes(gp_op op, const gp_attrs *a, const gp_ktensor *out,
                              const gp_ktensor *in, int n_in, int nth);

/*
 * Checks a node before it runs: input count, dtypes, shapes against core.h's rules and `out`, and
 * that index inputs are in range (get_rows ids in [0, V), store pos in [0, S), attention
 * pos in [0, S)). 0 when fine; else -1 with a message naming the op and the values in err.
 */
int gp_cpu_check(gp_op op, const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in, int n_in,
                 char *err, size_t err_size);

#endif
