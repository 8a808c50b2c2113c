/* A fixed pool of worker threads for the CPU backend: one run executes fn on every thread (the
 * caller included) and returns when all are done; a barrier separates phases inside fn. Threads are
 * created once; a run allocates nothing. */
#ifndef GP_CPU_THREADPOOL_H
#define GP_CPU_THREADPOOL_H

typedef struct gp_threadpool gp_threadpool;

/* fn(ctx, ith, nth): ith in [0, nth), nth = the pool's thread count. */
typedef void (*gp_threadpool_fn)(void *ctx, int ith, int nth);

/* A pool of n threads in all: n - 1 workers are started here, the caller of each run is thread 0;
 * every worker has run once before it returns (their start-up allocations happen here).
 * NULL when n < 1 or a thread cannot be created (nothing leaks). */
gp_threadpool *gp_threadpool_new(int n);

/* Threads in the pool, the caller included; 1 for NULL. */
int gp_threadpool_size(const gp_threadpool *pool);

/* Runs fn(ctx, ith, n) on all n threads; returns when every call has returned. pool == NULL runs
 * fn(ctx, 0, 1) inline. Not reentrant: one run at a time, never from inside fn. */
void gp_threadpool_run(gp_threadpool *pool, gp_threadpool_fn fn, void *ctx);

/* Inside fn: waits until all n threads have reached this barrier (every thread must call it the
 * same number of times). Writes before it are visible to all threads after it. No-op for NULL or
 * a pool of one thread. */
void gp_threadpool_barrier(gp_threadpool *pool);

/* Stops and joins the workers; NULL is a no-op. Must not be called during a run. */
void gp_threadpool_free(gp_threadpool *pool);

#endif
