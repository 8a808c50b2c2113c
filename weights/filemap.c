/* A whole file mapped read-only, with the checks and messages every checkpoint reader shares. */
#include "weights/filemap.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir/core.h"

int gp_filemap_open(gp_filemap *m, const char *path, char *err, size_t errlen)
{
    m->data = NULL;
    m->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        gp_errf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        gp_errf(err, errlen, "%s: cannot open (not a regular file)", path);
        close(fd);
        return -1;
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            gp_errf(err, errlen, "%s: cannot map %lld bytes (%s)", path, (long long)st.st_size,
                    strerror(errno));
            close(fd);
            return -1;
        }
        m->data = p;
        m->len = (size_t)st.st_size;
    }
    close(fd); /* the mapping keeps the file alive */
    return 0;
}

void gp_filemap_close(gp_filemap *m)
{
    if (m->data)
        munmap(m->data, m->len);
    m->data = NULL;
    m->len = 0;
}
