/* Host allocations counted in-process: alloc_interpose.c defines malloc, calloc, realloc, free,
 * posix_memalign, aligned_alloc, memalign, mmap and pthread_create, each forwarding to the next
 * definition (dlsym(RTLD_NEXT)), so that linked into an executable (gplan-run) or preloaded
 * (tests/alloc/shim.c) it sees every such call of the process, libraries' included. It counts
 * nothing before gp_alloc_interpose_on. It allocates nothing itself: counters are atomics, and
 * what dlsym allocates while the forwards are resolved comes from a static buffer.
 * Sanitizer builds own malloc: there (GP_NO_ALLOC_INTERPOSE, defined below or by the build) it
 * defines none of them, and every count reads 0. */
#ifndef GP_TOOLS_ALLOC_INTERPOSE_H
#define GP_TOOLS_ALLOC_INTERPOSE_H

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GP_NO_ALLOC_INTERPOSE 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || \
    __has_feature(thread_sanitizer)
#define GP_NO_ALLOC_INTERPOSE 1
#endif
#endif

/* Hidden: a preloaded copy and an executable's copy each keep their own counts. */
#define GP_ALLOC_INTERPOSE_API __attribute__((visibility("hidden")))

/* Starts counting (resolving the forwards first, so that dlsym's own calls never count). */
GP_ALLOC_INTERPOSE_API void gp_alloc_interpose_on(void);
/* 1 when an eval starts on the calling thread, 0 when it ends. In between every thread's calls
 * count as `eval`, the calling thread's also as `eval_thread`, and pthread_create as `threads`. */
GP_ALLOC_INTERPOSE_API void gp_alloc_interpose_eval(int in_eval);
/* 1 while the calling thread generates (samples, decodes, prints between evals): its calls
 * outside evals count as `generation`. */
GP_ALLOC_INTERPOSE_API void gp_alloc_interpose_generation(int on);
/* 1 on a thread whose every call counts as `marked`, in evals or not (a server's engine thread,
 * which must allocate nothing once warm while other threads do). */
GP_ALLOC_INTERPOSE_API void gp_alloc_interpose_mark_thread(int on);
/* 1: abort() at the first call counted during an eval (under a debugger: who allocated). */
GP_ALLOC_INTERPOSE_API void gp_alloc_interpose_abort_at_first(int on);

typedef struct {
    long eval;        /* malloc & co. and mmap during evals, every thread's */
    long eval_thread; /* those of the threads that marked the evals */
    long generation;  /* those of a generating thread outside evals */
    long threads;     /* pthread_create during evals */
    long marked;      /* those of the threads marked with gp_alloc_interpose_mark_thread */
} gp_alloc_interpose_counts;

GP_ALLOC_INTERPOSE_API void gp_alloc_interpose_read(gp_alloc_interpose_counts *c);

#endif
