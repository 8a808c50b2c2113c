/* Collectives between the ranks of one tensor-parallel session on the host (the CPU and reference
 * backends): one thread per rank, the ranks' buffers in one address space. Allocates nothing after
 * gp_host_comm_new, so evals stay allocation-free. */
#ifndef GP_RUNTIME_COMM_H
#define GP_RUNTIME_COMM_H

#include <stdint.h>

#include "ir/core.h"

typedef struct gp_host_comm gp_host_comm;

/* A communicator for n ranks (1..GP_PLAN_MAX_DEVICES); NULL when out of memory or n is bad. */
gp_host_comm *gp_host_comm_new(int n);
void gp_host_comm_free(gp_host_comm *c); /* NULL is a no-op */

/*
 * Every rank calls it with its own data[count] (f32, f16 or bf16, contiguous) and the same count
 * and dtype; on return every rank's data holds the element-wise sum over ranks, added in rank order
 * in f32 (so all ranks get identical bytes). 0, or -1 when the communicator was aborted.
 */
int gp_host_comm_all_reduce(gp_host_comm *c, int rank, void *data, int64_t count, gp_dtype dt);

/* The host backends' comm_new and comm_free (runtime/backend.h); device ordinals are ignored. */
int gp_host_comm_create(int n, const int *devices, void **comm, char *err, size_t err_len);
void gp_host_comm_destroy(void *comm);

/* Wakes every rank waiting in a collective and makes collectives fail (-1) until reset: a rank that
 * gives up on an eval calls it, so the others do not wait for it forever. */
void gp_host_comm_abort(gp_host_comm *c);
/* Clears an abort; call when no rank is inside a collective (between evals). */
void gp_host_comm_reset(gp_host_comm *c);

#endif
