/* The allocation interposer's counts (gplan_alloc, linked in as gplan-run links it):
 * nothing before gp_alloc_interpose_on or outside a window; each call of malloc & co. and mmap
 * inside an eval, on the marking thread and on another; pthread_create during an eval; a
 * generating thread's calls outside evals only; an abort at the first counted call when asked.
 * Exit status 0, 1 on a failed check, 77 (skipped) where the interposer is compiled out. */
#define _GNU_SOURCE /* memalign, MAP_ANONYMOUS */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gplan/alloc_interpose.h"

static int failed;
static void *volatile sink; /* the compiler may drop an allocation nobody reads */

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "interpose_test:%d: check failed: %s\n", __LINE__, #cond); \
            failed = 1;                                                              \
        }                                                                            \
    } while (0)

/* One malloc and one free. */
static void alloc_free(void)
{
    sink = malloc(24);
    free(sink);
}

/* The counts since *base, then *base moved to now. */
static gp_alloc_interpose_counts since(gp_alloc_interpose_counts *base)
{
    gp_alloc_interpose_counts now, d;
    gp_alloc_interpose_read(&now);
    d.eval = now.eval - base->eval;
    d.eval_thread = now.eval_thread - base->eval_thread;
    d.generation = now.generation - base->generation;
    d.threads = now.threads - base->threads;
    d.marked = now.marked - base->marked;
    *base = now;
    return d;
}

static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5; i++)
        alloc_free();
    return NULL;
}

int main(void)
{
    if (!gp_alloc_interpose_active()) {
        printf("interpose_test: skipped (sanitizer build: no interposer)\n");
        return 77;
    }
    gp_alloc_interpose_counts base = {0, 0, 0, 0, 0}, d;
    /* Before gp_alloc_interpose_on nothing counts, eval or not. */
    gp_alloc_interpose_eval(1);
    alloc_free();
    gp_alloc_interpose_eval(0);
    d = since(&base);
    CHECK(d.eval == 0 && d.eval_thread == 0 && d.generation == 0 && d.threads == 0);

    gp_alloc_interpose_on();
    alloc_free(); /* outside any window */
    d = since(&base);
    CHECK(d.eval == 0 && d.eval_thread == 0 && d.generation == 0);

    /* In an eval: every entry point, each call once, all on the marking thread. */
    gp_alloc_interpose_eval(1);
    alloc_free();                                         /* 2 */
    sink = calloc(3, 8);                                  /* 3 */
    sink = realloc(sink, 100);                            /* 4 */
    free(sink);                                           /* 5 */
    void *p = NULL;
    CHECK(posix_memalign(&p, 64, 128) == 0);              /* 6 */
    free(p);                                              /* 7 */
    sink = aligned_alloc(64, 128);                        /* 8 */
    free(sink);                                           /* 9 */
    sink = memalign(64, 128);                             /* 10 */
    free(sink);                                           /* 11 */
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); /* 12 */
    gp_alloc_interpose_eval(0);
    d = since(&base);
    CHECK(m != MAP_FAILED);
    CHECK(d.eval == 12 && d.eval_thread == 12 && d.generation == 0 && d.threads == 0);
    munmap(m, 4096);
    alloc_free(); /* after the eval */
    d = since(&base);
    CHECK(d.eval == 0 && d.eval_thread == 0);

    /* Another thread's calls during the eval count, not as the eval thread's; its creation counts
     * as a thread (pthread_create's own allocations, if any, are the marking thread's). */
    gp_alloc_interpose_eval(1);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, worker, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    gp_alloc_interpose_eval(0);
    d = since(&base);
    CHECK(d.threads == 1);
    CHECK(d.eval - d.eval_thread == 10);

    /* The eval hooks for gp_eval_hooks mark the same window. */
    gp_alloc_interpose_before(NULL, 1);
    alloc_free();
    gp_alloc_interpose_after(NULL, NULL, 1, 1);
    alloc_free();
    d = since(&base);
    CHECK(d.eval == 2 && d.eval_thread == 2);

    /* Generating: the thread's calls outside evals count as generation, inside as eval. */
    gp_alloc_interpose_generation(1);
    alloc_free();
    gp_alloc_interpose_eval(1);
    alloc_free();
    gp_alloc_interpose_eval(0);
    gp_alloc_interpose_generation(0);
    alloc_free();
    d = since(&base);
    CHECK(d.generation == 2 && d.eval == 2 && d.eval_thread == 2);

    /* A marked thread: its calls count in evals and out, another thread's do not. */
    gp_alloc_interpose_mark_thread(1);
    alloc_free();
    gp_alloc_interpose_eval(1);
    alloc_free();
    gp_alloc_interpose_eval(0);
    CHECK(pthread_create(&t, NULL, worker, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    gp_alloc_interpose_mark_thread(0);
    alloc_free();
    d = since(&base);
    CHECK(d.marked == 4 && d.eval_thread == 2);

    /* Abort at the first counted call: none outside an eval, one at the first inside. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        gp_alloc_interpose_abort_at_first(1);
        alloc_free();
        gp_alloc_interpose_eval(1);
        alloc_free();
        _exit(3);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);

    if (!failed)
        printf("interpose_test: ok\n");
    return failed;
}
