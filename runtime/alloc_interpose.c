/* The allocation interposer (include/gplan/alloc_interpose.h): malloc & co., mmap and
 * pthread_create counted while an eval or a generation is marked, and forwarded. */
#define _GNU_SOURCE /* RTLD_NEXT */
#include "gplan/alloc_interpose.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static atomic_int counting, in_eval, abort_at_first;
/* Initial-exec: a preloaded copy's first use allocates nothing. */
static _Thread_local int on_eval_thread __attribute__((tls_model("initial-exec")));
static _Thread_local int in_generation __attribute__((tls_model("initial-exec")));
static _Thread_local int marked_thread __attribute__((tls_model("initial-exec")));
static atomic_long n_eval, n_eval_thread, n_generation, n_threads, n_marked;

#ifndef GP_NO_ALLOC_INTERPOSE
static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static int (*real_pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

/* dlsym may allocate while the forwards are being resolved: serve it from here. */
static _Alignas(64) unsigned char boot[8192];
static size_t boot_used;
static int resolving;

static int from_boot(const void *p)
{
    return (const unsigned char *)p >= boot && (const unsigned char *)p < boot + sizeof boot;
}

static void *boot_alloc(size_t n)
{
    n = (n + 15) / 16 * 16;
    if (n > sizeof boot - boot_used)
        return NULL;
    void *p = boot + boot_used;
    boot_used += n;
    return p;
}

static void resolve(void)
{
    if (real_malloc || resolving)
        return;
    resolving = 1;
    real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    real_posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
    real_memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
    real_mmap = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
    real_pthread_create = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *),
                                   void *))dlsym(RTLD_NEXT, "pthread_create");
    resolving = 0;
}

/* One call of malloc & co. (thread 0) or of pthread_create (1). */
static void count(int thread)
{
    if (!atomic_load_explicit(&counting, memory_order_relaxed))
        return;
    if (!thread && marked_thread)
        atomic_fetch_add(&n_marked, 1);
    if (atomic_load_explicit(&in_eval, memory_order_relaxed)) {
        atomic_fetch_add(thread ? &n_threads : &n_eval, 1);
        if (!thread && on_eval_thread)
            atomic_fetch_add(&n_eval_thread, 1);
        if (atomic_load_explicit(&abort_at_first, memory_order_relaxed))
            abort(); /* run under a debugger to see who allocated */
    } else if (!thread && in_generation) {
        atomic_fetch_add(&n_generation, 1);
    }
}

void *malloc(size_t n)
{
    resolve();
    if (!real_malloc)
        return boot_alloc(n);
    count(0);
    return real_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    resolve();
    if (!real_calloc) {
        if (size && n > SIZE_MAX / size)
            return NULL;
        return boot_alloc(n * size); /* static, hence zeroed */
    }
    count(0);
    return real_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    resolve();
    count(0);
    if (from_boot(p)) { /* never happens in practice; copy what fits */
        void *q = real_malloc ? real_malloc(n) : boot_alloc(n);
        if (q)
            memcpy(q, p, n < sizeof boot ? n : sizeof boot);
        return q;
    }
    return real_realloc(p, n);
}

void free(void *p)
{
    if (!p || from_boot(p))
        return;
    resolve();
    count(0);
    real_free(p);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    resolve();
    count(0);
    return real_posix_memalign(out, align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    resolve();
    count(0);
    return real_aligned_alloc(align, n);
}

void *memalign(size_t align, size_t n);
void *memalign(size_t align, size_t n)
{
    resolve();
    count(0);
    return real_memalign(align, n);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    resolve();
    count(0);
    return real_mmap(addr, len, prot, flags, fd, off);
}

int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
    resolve();
    count(1);
    return real_pthread_create(t, a, fn, arg);
}
#endif

int gp_alloc_interpose_active(void)
{
#ifdef GP_NO_ALLOC_INTERPOSE
    return 0;
#else
    return 1;
#endif
}

void gp_alloc_interpose_on(void)
{
#ifndef GP_NO_ALLOC_INTERPOSE
    resolve();
#endif
    atomic_store(&counting, 1);
}

void gp_alloc_interpose_eval(int on)
{
    on_eval_thread = on;
    atomic_store(&in_eval, on);
}

void gp_alloc_interpose_generation(int on)
{
    in_generation = on;
}

void gp_alloc_interpose_mark_thread(int on)
{
    marked_thread = on;
}

void gp_alloc_interpose_abort_at_first(int on)
{
    atomic_store(&abort_at_first, on);
}

void gp_alloc_interpose_read(gp_alloc_interpose_counts *c)
{
    c->eval = atomic_load(&n_eval);
    c->eval_thread = atomic_load(&n_eval_thread);
    c->generation = atomic_load(&n_generation);
    c->threads = atomic_load(&n_threads);
    c->marked = atomic_load(&n_marked);
}
