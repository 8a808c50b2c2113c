/* An LD_PRELOAD allocation counter for the long-generation test: counts malloc & co., mmap and
 * pthread_create between the runtime's eval markers (gp_alloc_shim_eval, looked up by
 * gp_session_new), and samples the resident set at the end of eval 100 and of the last eval.
 * At exit it writes one line to $GP_ALLOC_SHIM_OUT (or stderr):
 *   evals=N allocs=A threads=P rss100=PAGES rssend=PAGES eval_thread=E other_threads=O
 * (A: all threads; E of them on the thread between the markers, O on others, e.g. a driver's).
 * With $GP_ALLOC_SHIM_ABORT set it aborts at the first call it counts (for a debugger's backtrace).
 * It allocates nothing itself: counters are atomics, /proc/self/statm is read with read(2). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define RSS_SAMPLE_EVAL 100

static atomic_int in_eval;
/* The thread between the markers (initial-exec: no allocation on first use from a preload). */
static __thread int on_eval_thread __attribute__((tls_model("initial-exec")));
static atomic_llong evals, allocs, allocs_eval_thread, threads;
static atomic_llong rss100 = -1, rssend = -1;

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

static int abort_on_count = -1; /* $GP_ALLOC_SHIM_ABORT set: abort at the first counted call */

static void count(atomic_llong *c)
{
    if (!atomic_load_explicit(&in_eval, memory_order_relaxed))
        return;
    atomic_fetch_add(c, 1);
    if (c == &allocs && on_eval_thread)
        atomic_fetch_add(&allocs_eval_thread, 1);
    if (abort_on_count < 0)
        abort_on_count = getenv("GP_ALLOC_SHIM_ABORT") != NULL;
    if (abort_on_count)
        abort(); /* run under a debugger to see who allocated */
}

/* Resident pages, from the second field of /proc/self/statm; -1 on error. */
static long long rss_pages(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    const char *p = strchr(buf, ' ');
    return p ? strtoll(p + 1, NULL, 10) : -1;
}

void gp_alloc_shim_eval(int on);
void gp_alloc_shim_eval(int on)
{
    on_eval_thread = on;
    if (on) {
        atomic_store(&in_eval, 1);
        return;
    }
    atomic_store(&in_eval, 0);
    long long n = atomic_fetch_add(&evals, 1) + 1;
    long long r = rss_pages();
    if (n == RSS_SAMPLE_EVAL)
        atomic_store(&rss100, r);
    atomic_store(&rssend, r);
}

void *malloc(size_t n)
{
    resolve();
    if (!real_malloc)
        return boot_alloc(n);
    count(&allocs);
    return real_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    resolve();
    if (!real_calloc)
        return size && n > SIZE_MAX / size ? NULL : boot_alloc(n * size);
    count(&allocs);
    return real_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    resolve();
    count(&allocs);
    if (from_boot(p)) {
        void *q = real_malloc(n);
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
    count(&allocs);
    real_free(p);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    resolve();
    count(&allocs);
    return real_posix_memalign(out, align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    resolve();
    count(&allocs);
    return real_aligned_alloc(align, n);
}

void *memalign(size_t align, size_t n)
{
    resolve();
    count(&allocs);
    return real_memalign(align, n);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    resolve();
    count(&allocs);
    return real_mmap(addr, len, prot, flags, fd, off);
}

int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
    resolve();
    count(&threads);
    return real_pthread_create(t, a, fn, arg);
}

__attribute__((destructor)) static void report(void)
{
    char line[256];
    long long all = atomic_load(&allocs), mine = atomic_load(&allocs_eval_thread);
    int n = snprintf(line, sizeof line, "evals=%lld allocs=%lld threads=%lld rss100=%lld "
                     "rssend=%lld eval_thread=%lld other_threads=%lld\n",
                     (long long)atomic_load(&evals), all, (long long)atomic_load(&threads),
                     (long long)atomic_load(&rss100), (long long)atomic_load(&rssend), mine,
                     all - mine);
    const char *path = getenv("GP_ALLOC_SHIM_OUT");
    int fd = path ? open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : 2;
    if (fd < 0 || n <= 0)
        return;
    if (write(fd, line, (size_t)n) < 0) {
        /* nothing to do: the test fails on the missing report */
    }
    if (fd != 2)
        close(fd);
}
