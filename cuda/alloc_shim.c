/* LD_PRELOAD shim that counts CUDA allocation calls (runtime cudaMalloc family and driver cuMemAlloc
 * family, frees and host registrations too) made during gplan evals, as marked by the session through
 * gp_alloc_shim_eval (include/gplan/gplan.h). Prints the counts at exit:
 *   LD_PRELOAD=build/cuda/libgp_cuda_allocshim.so gplan-run --backend cuda ...
 * It sees calls that resolve through the dynamic linker (gplan's own, and libraries calling the
 * shared libcudart or libcuda by name); calls a library makes through private entry points (a
 * statically linked runtime inside cuBLAS) are invisible to it: bench/gpu.sh also compares the
 * device's free memory before and after the evals. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

static atomic_int in_eval;
static atomic_long n_eval, n_total;

/* Another shim's marker (host allocations, tests/alloc/), called too when both are preloaded.
 * Looked up at load time: a failed dlsym allocates its error message, which inside the first
 * eval would count against the eval. */
static void (*next_marker)(int);

__attribute__((constructor)) static void find_next_marker(void)
{
    void *p = dlsym(RTLD_NEXT, "gp_alloc_shim_eval");
    memcpy(&next_marker, &p, sizeof next_marker);
}

void gp_alloc_shim_eval(int on)
{
    void (*next)(int) = next_marker;
    atomic_store(&in_eval, on);
    if (next)
        next(on);
}

/* Calls made during evals so far (for a program that links the shim to read directly). */
long gp_cuda_allocshim_count(void)
{
    return atomic_load(&n_eval);
}

static void count(void)
{
    atomic_fetch_add(&n_total, 1);
    if (atomic_load(&in_eval))
        atomic_fetch_add(&n_eval, 1);
}

static void *next_fn(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

/* Defines `int NAME(PARAMS)` that counts, then forwards ARGS to the next definition (999 when there
 * is none: cudaErrorUnknown / CUDA_ERROR_UNKNOWN). */
#define WRAP(name, params, args)                                 \
    int name params                                              \
    {                                                            \
        static int(*real) params;                                \
        if (!real) {                                             \
            void *p = next_fn(#name);                            \
            memcpy(&real, &p, sizeof real);                      \
        }                                                        \
        count();                                                 \
        return real ? real args : 999;                           \
    }

WRAP(cudaMalloc, (void **p, size_t n), (p, n))
WRAP(cudaMallocAsync, (void **p, size_t n, void *s), (p, n, s))
WRAP(cudaMallocFromPoolAsync, (void **p, size_t n, void *pool, void *s), (p, n, pool, s))
WRAP(cudaMallocHost, (void **p, size_t n), (p, n))
WRAP(cudaHostAlloc, (void **p, size_t n, unsigned f), (p, n, f))
WRAP(cudaMallocManaged, (void **p, size_t n, unsigned f), (p, n, f))
WRAP(cudaMallocPitch, (void **p, size_t *pitch, size_t w, size_t h), (p, pitch, w, h))
WRAP(cudaHostRegister, (void *p, size_t n, unsigned f), (p, n, f))
WRAP(cudaFree, (void *p), (p))
WRAP(cudaFreeAsync, (void *p, void *s), (p, s))
WRAP(cudaFreeHost, (void *p), (p))
WRAP(cuMemAlloc_v2, (unsigned long long *p, size_t n), (p, n))
WRAP(cuMemAllocAsync, (unsigned long long *p, size_t n, void *s), (p, n, s))
WRAP(cuMemAllocManaged, (unsigned long long *p, size_t n, unsigned f), (p, n, f))
WRAP(cuMemAllocHost_v2, (void **p, size_t n), (p, n))
WRAP(cuMemHostAlloc, (void **p, size_t n, unsigned f), (p, n, f))
WRAP(cuMemAllocPitch_v2, (unsigned long long *p, size_t *pitch, size_t w, size_t h, unsigned e),
     (p, pitch, w, h, e))
WRAP(cuMemCreate, (void *h, size_t n, const void *prop, unsigned long long f), (h, n, prop, f))
WRAP(cuMemFree_v2, (unsigned long long p), (p))

__attribute__((destructor)) static void report(void)
{
    fprintf(stderr, "gp_cuda_allocshim: %ld CUDA allocation calls during evals (%ld in all)\n",
            atomic_load(&n_eval), atomic_load(&n_total));
}
