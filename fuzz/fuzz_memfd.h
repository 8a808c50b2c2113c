/* The fuzz input as a file, for targets whose readers take a path (gp_weights_open, gp_st_open).
 * The including file defines _GNU_SOURCE (memfd_create) before its first include. */
#ifndef GP_FUZZ_FUZZ_MEMFD_H
#define GP_FUZZ_FUZZ_MEMFD_H

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

/* A memfd named name holding data, its /proc/self/fd/N path in path[path_len]. Returns the fd (the
 * caller closes it) or -1; *whole is set when all size bytes went in (a short write stops early). */
static inline int gp_fuzz_memfd(const char *name, const uint8_t *data, size_t size, char *path,
                                size_t path_len, int *whole)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t k = write(fd, data + done, size - done);
        if (k <= 0)
            break;
        done += (size_t)k;
    }
    snprintf(path, path_len, "/proc/self/fd/%d", fd);
    *whole = done == size;
    return fd;
}

#endif
