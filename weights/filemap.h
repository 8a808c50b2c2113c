/* A whole file mapped read-only (filemap.c): how the checkpoint readers (gguf.c, safetensors.c)
 * open a file, check it and map it, once. Internal to the gp_weights library. */
#ifndef GP_WEIGHTS_FILEMAP_H
#define GP_WEIGHTS_FILEMAP_H

#include <stddef.h>

typedef struct {
    void *data; /* [len] the file's bytes, read-only; NULL for an empty file */
    size_t len;
} gp_filemap;

/* Opens path (a regular file) and maps all of it: 0, or -1 with m zeroed and err set to
 * "PATH: cannot open (strerror)", "PATH: cannot open (not a regular file)" or
 * "PATH: cannot map N bytes (strerror)". The file descriptor is closed either way. */
int gp_filemap_open(gp_filemap *m, const char *path, char *err, size_t errlen);
/* 0 when path is a regular file, else -1 with err "PATH: cannot open (strerror)" or "PATH: cannot
 * open (not a regular file: a FIFO)" and the like. Never blocks: readers call it before opening
 * a path the user gave (a FIFO would block fopen). */
int gp_file_check(const char *path, char *err, size_t errlen);
/* Unmaps; a zeroed or closed m is a no-op. */
void gp_filemap_close(gp_filemap *m);

#endif
