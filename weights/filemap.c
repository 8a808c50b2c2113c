/* A whole file mapped read-only, with the checks and messages every checkpoint reader shares. */
#include "weights/filemap.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir/core.h"

/* What a path that is not a regular file is, for messages. */
static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? ": a folder" : S_ISFIFO(m) ? ": a FIFO" : S_ISCHR(m) ? ": a character device"
           : S_ISBLK(m) ? ": a block device" : S_ISSOCK(m) ? ": a socket" : "";
}

int gp_file_check(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        gp_errf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        gp_errf(err, errlen, "%s: cannot open (not a regular file%s)", path, kind_of(st.st_mode));
        return -1;
    }
    return 0;
}

int gp_filemap_open(gp_filemap *m, const char *path, char *err, size_t errlen)
{
    m->data = NULL;
    m->len = 0;
    /* O_NONBLOCK: a FIFO named in place of a file must not block the open (refused below). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        gp_errf(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        gp_errf(err, errlen, "%s: cannot open (not a regular file%s)", path,
                fstat(fd, &st) ? "" : kind_of(st.st_mode));
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
