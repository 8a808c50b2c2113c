/* The interface an execution backend implements (CPU: runtime/cpu_backend.c, the reference executor:
 * runtime/reference.c, CUDA: cuda/). The session (runtime/session.c) owns the plan, the host weights,
 * the extras block, the runtime dims and input validation; a backend owns its device memory and runs
 * the node list. Not part of the embedding API (include/gplan/gplan.h). */
#ifndef GP_RUNTIME_BACKEND_H
#define GP_RUNTIME_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "plan/plan.h"

/*
 * What a backend gets at creation. Everything here outlives the backend instance.
 *
 * Lifetime of a session, as the backend sees it:
 *   1. create(init): allocate every region this backend needs ONCE, from plan->regions[r].size and
 *      .alignment (arena, state, io and, unless the host weights are used in place, weights); zero
 *      the state region; upload the weights; then write, for every tensor that is not a view
 *      (view_src < 0), the address of its element 0 on this backend into slot `slot` of its extras
 *      record: GP_EXTRAS_DATA_OFF(n_devices) + 8 * slot, a u64 (0 for an empty tensor). The session
 *      fills every other field (ne, nb, and views' data) before each eval.
 *   2. eval(extras), any number of times. Before each call the session has
 *        - written this eval's inputs (INPUT tensors) into the host io block `init->io`, each at its
 *          plan offset, packed (contiguous) at its runtime shape;
 *        - written every tensor's extras record for this eval: ne (runtime shape), nb (byte strides)
 *          and the data address of every view (from its source's address on this slot);
 *        - checked every node with gp_cpu_check (ids and positions in range, shapes consistent),
 *          reading index inputs from the host io block (they must be io tensors: the session
 *          refuses other plans), so a backend may trust the node list and the index inputs.
 *      The backend then makes the inputs visible to its kernels (a device copies them from the host
 *      io block: bytes [offset, offset + ne product * dtype size) of each INPUT tensor), runs every
 *      node in schedule order (views: nothing to do; their output's record is already set), and
 *      before returning writes every OUTPUT tensor back to the host io block at its plan offset,
 *      packed at its runtime shape (a host backend whose io region IS init->io has nothing to copy).
 *      eval must not allocate host or device memory, create threads, or print: errors go to err
 *      (the session's preallocated buffer). Returns 0, or -1 with err set.
 *   3. destroy: frees everything create made.
 * The STATE region keeps its contents across evals (KV cache); reset_state zeroes it again.
 */
typedef struct {
    const gp_plan *plan;
    int slot;        /* which data/sync slot of the extras records is this backend's: [0, n_devices) */
    int device;      /* device ordinal (CUDA: cudaSetDevice); 0 on the CPU */
    int n_threads;   /* CPU: threads in the pool, the caller included; >= 1 */
    /* [n_tensors]: for each WEIGHT tensor, its host bytes: plan dtype, plan dims, contiguous,
     * aligned to at least the dtype size; NULL for every other tensor. Read-only; may point into a
     * memory-mapped checkpoint, so a host backend may use the pointers in place. */
    const void *const *weight_data;
    /* The session's host io block: [regions[GP_REGION_IO].size] bytes, aligned to
     * regions[GP_REGION_IO].alignment. A host backend may use it as its io region. */
    unsigned char *io;
    /* The session's host extras block: [regions[GP_REGION_EXTRAS].size] bytes; records at each
     * tensor's extras_offset (layout: GP_EXTRAS_* in plan/plan.h). */
    unsigned char *extras;
    /* Tensor parallelism (plans with n_devices > 1; see "Several devices" below): this instance's
     * rank (== slot) among n_ranks (== plan->n_devices), and the communicator made by comm_new
     * for all of them; NULL when n_ranks == 1. */
    int rank, n_ranks;
    void *comm;
} gp_backend_init;

typedef struct gp_backend_ops {
    const char *name; /* "cpu", "reference", "cuda" */
    /* Creates an instance (step 1 above). 0 and *ctx, or -1 with err set ("cuda: no CUDA device",
     * "cpu: cannot allocate the arena (N bytes)", ...) and nothing leaked. */
    int (*create)(const gp_backend_init *init, void **ctx, char *err, size_t err_len);
    /* One eval (step 2 above). extras is init->extras, passed again for clarity. */
    int (*eval)(void *ctx, const unsigned char *extras, char *err, size_t err_len);
    /* Zeroes the STATE region (the session calls it to restart a sequence). 0 or -1 with err. */
    int (*reset_state)(void *ctx, char *err, size_t err_len);
    /* Host and device allocations this instance made after create returned (should stay 0: the
     * figure gplan-run --stats reports as "device allocations during evals"); NULL when the
     * backend allocates everything in create, so the count is always 0. */
    int64_t (*alloc_count)(void *ctx);
    void (*destroy)(void *ctx); /* NULL ctx: no-op */
    /* Several devices: makes the communicator the n instances of one session share (devices[r]:
     * rank r's device ordinal), before any of them is created; NULL when the backend runs on one
     * device only. Frees with comm_free after every instance is destroyed (NULL: no-op). */
    int (*comm_new)(int n, const int *devices, void **comm, char *err, size_t err_len);
    void (*comm_free)(void *comm);
    /* Copies weights ids[0..n) again from init->weight_data (their host bytes changed: a LoRA
     * adapter bound into its slots by gp_model_bind_adapter) to where the backend keeps them,
     * with no allocation; NULL when the backend reads the host bytes in place. */
    int (*reload_weights)(void *ctx, const int *ids, int n, char *err, size_t err_len);
} gp_backend_ops;

/*
 * Several devices. A plan with n_devices = N > 1 is SPMD: every rank runs the same nodes on its own
 * regions (same layout), with its own share of each split weight (init->weight_data is rank r's),
 * and GP_OP_ALL_REDUCE nodes sum a tensor over the ranks (in rank order, so every rank gets the same
 * bytes). The session makes one instance per rank, rank r on device o->device + r, each with its
 * own host io block (the inputs copied into every one before each eval; outputs read from rank 0),
 * and calls the N evals at once, one thread per rank (the same thread for a rank at every eval).
 * An eval that fails on one rank must not leave the others waiting forever in a collective.
 */

/* The backends gp_runtime carries. */
extern const gp_backend_ops gp_backend_cpu;       /* runtime/cpu_backend.c: the plan's regions,
                                                     a thread pool, gp_cpu_compute */
extern const gp_backend_ops gp_backend_reference; /* runtime/reference.c: every tensor its own
                                                     allocation, one thread, the same kernels */
/* cuda/ (library gp_cuda, linked into gp_runtime when GPLAN_HAVE_CUDA) defines:
 *   extern const gp_backend_ops gp_backend_cuda;   */

/* The backend called `name`, or NULL when unknown or not built. */
const gp_backend_ops *gp_backend_find(const char *name);

/* Address of a tensor's extras record and of its fields (n = plan->n_devices). */
static inline unsigned char *gp_extras_record(unsigned char *extras, const gp_plan_tensor *t)
{
    return extras + t->extras_offset;
}

/* Everything a kernel needs about tensor t for this eval, read from its extras record (slot `slot`
 * for the data address). The record's fields are host words at native alignment. */
typedef struct {
    uint64_t data;
    int64_t ne[GP_MAX_DIMS];
    int64_t nb[GP_MAX_DIMS];
} gp_extras_view;

void gp_extras_read(const unsigned char *extras, const gp_plan *p, int tensor, int slot,
                    gp_extras_view *out);
void gp_extras_set_data(unsigned char *extras, const gp_plan *p, int tensor, int slot,
                        uint64_t addr);

/*
 * runtime/views.c: writes every tensor's record for this eval's dims (sym_values[n_syms], each in
 * [1, bound]) on every slot in [0, n_slots):
 *   ne: the tensor's dims with each symbolic dim at its value; unused dims 1;
 *   nb: tensors that are not views: packed from the runtime shape (INPUT, OUTPUT, INTERMEDIATE),
 *       or the plan's strides (WEIGHT, STATE: their bytes persist, so their layout must not move);
 *       views by their op: reshape and view: packed from their own runtime shape (a reshape's
 *       source is contiguous; a view is contiguous by definition); permute: the source's strides
 *       permuted; slice: the source's strides; store: the dst's record (ne too);
 *   data: views only (not-view tensors keep what their backend wrote at creation): reshape, permute:
 *       the source's; slice: source + start * source nb[axis]; view: source + offset; store: dst's.
 * Unused nb are 0. Allocates nothing.
 */
void gp_views_update(const gp_plan *p, const int64_t *sym_values, unsigned char *extras,
                     int n_slots);

/* Bytes spanned by a packed tensor of this runtime shape: product of ne[0..ndim) times the dtype
 * size. */
int64_t gp_extras_packed_bytes(const gp_plan_tensor *t, const gp_extras_view *v);

#endif
