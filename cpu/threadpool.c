/* The CPU backend's thread pool: workers spin briefly on an atomic counter, then sleep on a
 * condition variable; the same scheme wakes them for a run and releases them from a barrier. */
#include "cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "ir/core.h"

/* Polls of an atomic (with a CPU pause between) before a waiter sleeps: about 0.1-1 ms, long
 * enough to cover the gap between two kernels, since waking a sleeper costs tens of microseconds;
 * short enough not to burn a core for long when the machine is oversubscribed. */
#define GP_POOL_SPIN 16384

/* One step of a spin: a CPU pause, and every 64th step a yield to the scheduler, so that with
 * more threads than cores the thread being waited for gets to run. */
static inline void spin_step(int i)
{
    if ((i & 63) == 63) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

typedef struct {
    struct gp_threadpool *pool;
    int ith;
} worker_arg;

struct gp_threadpool {
    int n;              /* threads in all, the caller included */
    pthread_t *workers; /* [n - 1] */
    worker_arg *args;   /* [n - 1] each worker's start argument, owned by the pool */

    /* One lock and condition for every sleep; a waker broadcasts only when someone sleeps. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int sleepers;

    /* The current run: published by bumping `run_gen`. */
    gp_threadpool_fn fn;
    void *ctx;
    atomic_uint run_gen;
    atomic_int done;  /* workers finished with the current run */
    atomic_int stop;  /* set with a run_gen bump to end the workers */

    /* Barrier: arrivals count up to n; the last one resets the count and bumps the phase. */
    atomic_int bar_count;
    atomic_uint bar_phase;
};

/* Wakes every sleeper. Sleepers register under the lock before they re-check their condition, so
 * with seq_cst atomics either the waker sees them or they see the waker's store. */
static void pool_wake(gp_threadpool *p)
{
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Waits until *v != old. */
static void wait_change(gp_threadpool *p, atomic_uint *v, unsigned old)
{
    for (int i = 0; i < GP_POOL_SPIN; i++) {
        if (atomic_load(v) != old)
            return;
        spin_step(i);
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (atomic_load(v) == old)
        pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
}

/* Waits until *v == want. */
static void wait_equal(gp_threadpool *p, atomic_int *v, int want)
{
    for (int i = 0; i < GP_POOL_SPIN; i++) {
        if (atomic_load(v) == want)
            return;
        spin_step(i);
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    while (atomic_load(v) != want)
        pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
}

/* The kernels keep their tiles on the stack (up to about 200 KiB: cpu/cpu_dot*.c, quant_amx.c),
 * and which thread runs which kernel varies from eval to eval (matmuls take their items from a
 * shared counter). Each thread of the pool touches this much of its stack once, when the pool is
 * made, so that a kernel a thread first runs in a late eval finds its pages resident: no page
 * faults and no growth of the resident set after creation (tests/alloc/long_run.sh). */
#define GP_POOL_STACK_TOUCH (512 * 1024)

static __attribute__((noinline)) void touch_stack(void)
{
    volatile char buf[GP_POOL_STACK_TOUCH];
    for (size_t i = 0; i < sizeof buf; i += 4096)
        buf[i] = 0;
    buf[sizeof buf - 1] = 0;
}

static void *worker_main(void *arg)
{
    worker_arg *w = arg;
    gp_threadpool *p = w->pool;
    int ith = w->ith;
    unsigned gen = 0;
    touch_stack();
    for (;;) {
        wait_change(p, &p->run_gen, gen);
        gen = atomic_load(&p->run_gen);
        if (atomic_load(&p->stop))
            return NULL;
        p->fn(p->ctx, ith, p->n);
        if (atomic_fetch_add(&p->done, 1) == p->n - 2)
            pool_wake(p); /* the last worker: the caller may be asleep */
    }
}

/* Joins the first `started` workers after telling them to stop. */
static void pool_stop(gp_threadpool *p, int started)
{
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->run_gen, 1);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < started; i++)
        pthread_join(p->workers[i], NULL);
}

static void noop(void *ctx, int ith, int nth)
{
    (void)ctx;
    (void)ith;
    (void)nth;
}

gp_threadpool *gp_threadpool_new(int n)
{
    if (n < 1)
        return NULL;
    gp_threadpool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n;
    p->workers = calloc((size_t)n, sizeof *p->workers);
    p->args = calloc((size_t)n, sizeof *p->args);
    if (!p->workers || !p->args || pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p->workers);
        free(p->args);
        free(p);
        return NULL;
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p->workers);
        free(p->args);
        free(p);
        return NULL;
    }
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->run_gen, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->stop, 0);
    atomic_init(&p->bar_count, 0);
    atomic_init(&p->bar_phase, 0);
    for (int i = 0; i < n - 1; i++) {
        worker_arg *w = &p->args[i];
        w->pool = p;
        w->ith = i + 1;
        if (pthread_create(&p->workers[i], NULL, worker_main, w) != 0) {
            pool_stop(p, i);
            pthread_cond_destroy(&p->cv);
            pthread_mutex_destroy(&p->mu);
            free(p->workers);
            free(p->args);
            free(p);
            return NULL;
        }
    }
    /* One empty run: every worker has then started (the C library may allocate a new thread's
     * buffers on its first steps), so none of that can fall inside a caller's first real run. */
    gp_threadpool_run(p, noop, NULL);
    touch_stack(); /* the calling thread runs share 0 of every run */
    return p;
}

int gp_threadpool_size(const gp_threadpool *pool)
{
    return pool ? pool->n : 1;
}

void gp_threadpool_run(gp_threadpool *p, gp_threadpool_fn fn, void *ctx)
{
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->done, 0);
    atomic_fetch_add(&p->run_gen, 1); /* publishes fn, ctx and done (seq_cst) */
    pool_wake(p);
    fn(ctx, 0, p->n);
    wait_equal(p, &p->done, p->n - 1);
}

void gp_threadpool_barrier(gp_threadpool *p)
{
    if (!p || p->n == 1)
        return;
    unsigned phase = atomic_load(&p->bar_phase);
    if (atomic_fetch_add(&p->bar_count, 1) == p->n - 1) {
        /* Nobody can arrive at the next barrier before the phase moves, so the reset is safe. */
        atomic_store(&p->bar_count, 0);
        atomic_fetch_add(&p->bar_phase, 1);
        pool_wake(p);
        return;
    }
    wait_change(p, &p->bar_phase, phase);
}

void gp_threadpool_free(gp_threadpool *p)
{
    if (!p)
        return;
    pool_stop(p, p->n - 1);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p->args);
    free(p);
}
