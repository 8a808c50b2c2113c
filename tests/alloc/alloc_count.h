/* In-process allocation counting for tests: the test executable is linked with
 * -Wl,--wrap=malloc,... (target gp_alloc_wrap, tests/alloc/alloc.cmake), so every call that
 * gplan's code (and the test's) makes to malloc & co., mmap or pthread_create reaches wrap.c. */
#ifndef GP_TESTS_ALLOC_COUNT_H
#define GP_TESTS_ALLOC_COUNT_H

#include <stdint.h>

/* Zeroes the counter and starts counting (from every thread). */
void gp_alloc_count_start(void);
/* Stops counting; returns the calls counted since start: malloc, calloc, realloc, free,
 * posix_memalign, aligned_alloc, strdup, strndup, mmap, munmap, pthread_create. */
int64_t gp_alloc_count_stop(void);

#endif
