/* The --wrap side of tests/alloc/alloc_count.h: each __wrap_F counts the call while counting is on
 * and forwards to __real_F (the linker's name for the original). */
#define _GNU_SOURCE
#include "tests/alloc/alloc_count.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static atomic_int counting;
static atomic_llong calls;

void gp_alloc_count_start(void)
{
    atomic_store(&calls, 0);
    atomic_store(&counting, 1);
}

int64_t gp_alloc_count_stop(void)
{
    atomic_store(&counting, 0);
    return atomic_load(&calls);
}

static void count(void)
{
    if (atomic_load_explicit(&counting, memory_order_relaxed))
        atomic_fetch_add(&calls, 1);
}

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
int __real_posix_memalign(void **out, size_t align, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_munmap(void *addr, size_t len);
int __real_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);
int __wrap_posix_memalign(void **out, size_t align, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __wrap_munmap(void *addr, size_t len);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);

void *__wrap_malloc(size_t n)
{
    count();
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    count();
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    count();
    return __real_realloc(p, n);
}

void __wrap_free(void *p)
{
    count();
    __real_free(p);
}

int __wrap_posix_memalign(void **out, size_t align, size_t n)
{
    count();
    return __real_posix_memalign(out, align, n);
}

void *__wrap_aligned_alloc(size_t align, size_t n)
{
    count();
    return __real_aligned_alloc(align, n);
}

char *__wrap_strdup(const char *s)
{
    count();
    return __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
    count();
    return __real_strndup(s, n);
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    count();
    return __real_mmap(addr, len, prot, flags, fd, off);
}

int __wrap_munmap(void *addr, size_t len)
{
    count();
    return __real_munmap(addr, len);
}

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
    count();
    return __real_pthread_create(t, a, fn, arg);
}
