/* An LD_PRELOAD allocation counter for the long-generation test, on runtime/alloc_interpose.c:
 * counts malloc & co., mmap and pthread_create between the runtime's eval markers
 * (gp_alloc_shim_eval, looked up by gp_session_new), and samples the resident set at the end of
 * eval 100 and of the last eval. At exit it writes one line to $GP_ALLOC_SHIM_OUT (or stderr):
 *   evals=N allocs=A threads=P rss100=PAGES rssend=PAGES eval_thread=E other_threads=O
 * (A: all threads; E of them on the thread between the markers, O on others, e.g. a driver's).
 * With $GP_ALLOC_SHIM_ABORT set it aborts at the first call it counts (for a debugger's backtrace).
 * It allocates nothing itself: counters are atomics, /proc/self/statm is read with read(2). */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gplan/alloc_interpose.h"

#define RSS_SAMPLE_EVAL 100

static atomic_llong evals, rss100 = -1, rssend = -1;

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

__attribute__((constructor)) static void start(void)
{
    gp_alloc_interpose_abort_at_first(getenv("GP_ALLOC_SHIM_ABORT") != NULL);
    gp_alloc_interpose_on();
}

void gp_alloc_shim_eval(int on);
void gp_alloc_shim_eval(int on)
{
    gp_alloc_interpose_eval(on);
    if (on)
        return;
    long long n = atomic_fetch_add(&evals, 1) + 1;
    long long r = rss_pages();
    if (n == RSS_SAMPLE_EVAL)
        atomic_store(&rss100, r);
    atomic_store(&rssend, r);
}

__attribute__((destructor)) static void report(void)
{
    char line[256];
    gp_alloc_interpose_counts c;
    gp_alloc_interpose_read(&c);
    int n = snprintf(line, sizeof line, "evals=%lld allocs=%ld threads=%ld rss100=%lld "
                     "rssend=%lld eval_thread=%ld other_threads=%ld\n",
                     (long long)atomic_load(&evals), c.eval, c.threads,
                     (long long)atomic_load(&rss100), (long long)atomic_load(&rssend),
                     c.eval_thread, c.eval - c.eval_thread);
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
