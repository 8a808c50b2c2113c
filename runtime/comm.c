/* Host collectives for tensor-parallel sessions (runtime/comm.h). An all-reduce is a reduce-scatter
 * then an all-gather over shared memory: rank r sums chunk r of every rank's buffer into its own,
 * then copies the other chunks from their owners; a barrier separates the phases. */
#include "runtime/comm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/f16.h"
#include "plan/plan.h"

struct gp_host_comm {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int waiting;            /* ranks inside the current barrier */
    unsigned generation;    /* barriers completed; a waiter leaves when it changes */
    int aborted;
    void *data[GP_PLAN_MAX_DEVICES]; /* each rank's buffer in the current collective */
};

gp_host_comm *gp_host_comm_new(int n)
{
    if (n < 1 || n > GP_PLAN_MAX_DEVICES)
        return NULL;
    gp_host_comm *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->n = n;
    if (pthread_mutex_init(&c->mu, NULL)) {
        free(c);
        return NULL;
    }
    if (pthread_cond_init(&c->cv, NULL)) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        return NULL;
    }
    return c;
}

void gp_host_comm_free(gp_host_comm *c)
{
    if (!c)
        return;
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Waits until all n ranks arrived (writes before it are visible after it); -1 when aborted. */
static int barrier(gp_host_comm *c)
{
    pthread_mutex_lock(&c->mu);
    unsigned gen = c->generation;
    if (!c->aborted && ++c->waiting == c->n) {
        c->waiting = 0;
        c->generation++;
        pthread_cond_broadcast(&c->cv);
    } else {
        while (!c->aborted && c->generation == gen)
            pthread_cond_wait(&c->cv, &c->mu);
    }
    int rc = c->aborted ? -1 : 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void gp_host_comm_abort(gp_host_comm *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->aborted = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void gp_host_comm_reset(gp_host_comm *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->aborted = 0;
    c->waiting = 0;
    pthread_mutex_unlock(&c->mu);
}

int gp_host_comm_create(int n, const int *devices, void **comm, char *err, size_t err_len)
{
    (void)devices;
    *comm = gp_host_comm_new(n);
    if (!*comm) {
        snprintf(err, err_len, "cannot make a communicator for %d devices", n);
        return -1;
    }
    return 0;
}

void gp_host_comm_destroy(void *comm)
{
    gp_host_comm_free(comm);
}

static float load(const void *p, gp_dtype dt, int64_t i)
{
    switch (dt) {
    case GP_F16: return gp_f16_to_f32(((const uint16_t *)p)[i]);
    case GP_BF16: return gp_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static void store(void *p, gp_dtype dt, int64_t i, float v)
{
    switch (dt) {
    case GP_F16: ((uint16_t *)p)[i] = gp_f32_to_f16(v); break;
    case GP_BF16: ((uint16_t *)p)[i] = gp_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

int gp_host_comm_all_reduce(gp_host_comm *c, int rank, void *data, int64_t count, gp_dtype dt)
{
    if (c->n == 1)
        return 0;
    size_t es = gp_dtype_size(dt);
    c->data[rank] = data;
    if (barrier(c))
        return -1;
    /* Reduce-scatter: chunk r of every buffer, summed in rank order, into this rank's buffer. */
    int64_t lo = count * rank / c->n, hi = count * (rank + 1) / c->n;
    for (int64_t i = lo; i < hi; i++) {
        float s = 0;
        for (int q = 0; q < c->n; q++)
            s += load(c->data[q], dt, i);
        store(data, dt, i, s);
    }
    if (barrier(c))
        return -1;
    /* All-gather: every other chunk from the rank that owns it. */
    for (int q = 0; q < c->n; q++) {
        if (q == rank)
            continue;
        int64_t qlo = count * q / c->n, qhi = count * (q + 1) / c->n;
        memcpy((unsigned char *)data + qlo * es, (const unsigned char *)c->data[q] + qlo * es,
               (size_t)(qhi - qlo) * es);
    }
    /* No rank may reuse its buffer before every other one has copied from it. */
    return barrier(c);
}
