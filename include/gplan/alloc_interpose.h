/* gplan's allocation counter: host allocations counted in-process, to check the runtime's promise
 * of no allocation per eval in a program of one's own (gplan-run --stats and gplan-serve's
 * /metrics use it). Library libgplan_alloc.a (CMake gplan::gplan_alloc; link it with -ldl
 * -pthread), installed as <gplan/alloc_interpose.h>; apart from libgplan because it defines
 * malloc, calloc, realloc, free, posix_memalign, aligned_alloc, memalign, mmap and pthread_create,
 * each forwarding to the next definition (dlsym(RTLD_NEXT)): linked into an executable (or built
 * into an LD_PRELOAD shim, tests/alloc/shim.c) it sees every such call of the process, libraries'
 * included. It counts nothing before gp_alloc_interpose_on and allocates nothing itself (atomic
 * counters; what dlsym allocates while the forwards are resolved comes from a static buffer).
 *
 *     gp_alloc_interpose_on();                       // first thing in main
 *     gp_eval_hooks h = {gp_alloc_interpose_before, gp_alloc_interpose_after, NULL, 0};
 *     gp_seq_set_eval_hooks(seq, &h);                // <gplan/text.h>: every eval marked
 *     ... generate ...
 *     gp_alloc_interpose_counts c;
 *     gp_alloc_interpose_read(&c);                   // c.eval_thread: 0 expected
 *
 * Sanitizer builds own malloc: there (GP_NO_ALLOC_INTERPOSE, defined below or by the build) it
 * defines none of them, every count reads 0 and gp_alloc_interpose_active says 0. */
#ifndef GPLAN_ALLOC_INTERPOSE_H
#define GPLAN_ALLOC_INTERPOSE_H

#include <stdint.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GP_NO_ALLOC_INTERPOSE 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || \
    __has_feature(thread_sanitizer)
#define GP_NO_ALLOC_INTERPOSE 1
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Hidden: a preloaded copy and an executable's copy each keep their own counts. */
#define GP_ALLOC_INTERPOSE_API __attribute__((visibility("hidden")))

/* 1 when this build counts (it defines malloc & co.), 0 in a sanitizer build. */
GP_ALLOC_INTERPOSE_API int gp_alloc_interpose_active(void);
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

/* gp_eval_hooks' before and after (<gplan/text.h>) that mark each eval for the counter. */
static inline void gp_alloc_interpose_before(void *user, int64_t n_tokens)
{
    (void)user, (void)n_tokens;
    gp_alloc_interpose_eval(1);
}

static inline void gp_alloc_interpose_after(void *user, const float *logits, int64_t n_rows,
                                            int64_t vocab)
{
    (void)user, (void)logits, (void)n_rows, (void)vocab;
    gp_alloc_interpose_eval(0);
}

#ifdef __cplusplus
}
#endif

#endif
