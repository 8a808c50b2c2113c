/* Reading and writing safetensors files: an 8-byte little-endian header length N, N bytes of JSON
 * (tensor name -> dtype, shape, data_offsets; optional "__metadata__"), then the tensor data.
 * Files are memory-mapped read-only; every header field is checked before it is used. */
#ifndef GP_WEIGHTS_SAFETENSORS_H
#define GP_WEIGHTS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ir/core.h"

/* Headers longer than this are refused before anything is parsed or allocated. */
#define GP_ST_MAX_HEADER (100u * 1000u * 1000u)

/* One tensor of a file. The pointers live as long as the gp_st_file (or, when writing, are the
 * caller's). */
typedef struct {
    const char *name;
    const char *file_dtype; /* as written in the file: "F32", "F64", "BOOL", ... */
    int supported;  /* 1 when gplan can use it: dtype f32/f16/bf16/i32 and ndim <= GP_MAX_DIMS */
    gp_dtype dtype; /* meaningful only for the dtypes gplan knows (see gp_st_dtype_supported) */
    int ndim;       /* the file's rank; may exceed GP_MAX_DIMS (then only 4 dims are kept) */
    int64_t shape[GP_MAX_DIMS]; /* [ndim], outermost first; zero-filled past ndim */
    const void *data;           /* [nbytes] little-endian, NOT aligned: read with memcpy */
    size_t nbytes;
} gp_st_tensor;

typedef struct gp_st_file gp_st_file;

/* Maps the file and validates its header. NULL on failure, with a message in err:
 * "PATH: bad safetensors file (REASON)" or "PATH: cannot open (strerror)". */
gp_st_file *gp_st_open(const char *path, char *err, size_t errlen);
void gp_st_close(gp_st_file *f); /* NULL is a no-op */

const char *gp_st_path(const gp_st_file *f);
int gp_st_count(const gp_st_file *f);
/* The i-th tensor in name order (strcmp), 0 <= i < count; NULL otherwise. */
const gp_st_tensor *gp_st_get(const gp_st_file *f, int i);
/* Lookup by exact name (binary search); NULL when absent. */
const gp_st_tensor *gp_st_find(const gp_st_file *f, const char *name);
/* A "__metadata__" value, or NULL. */
const char *gp_st_metadata(const gp_st_file *f, const char *key);

/* Element count of a tensor (product of its shape; 1 for rank 0); for ndim <= GP_MAX_DIMS. */
int64_t gp_st_numel(const gp_st_tensor *t);

/* Safetensors dtype name <-> gplan dtype. gp_st_dtype_supported returns 0 and sets *out for
 * F32/F16/BF16/I32, -1 for anything else. gp_st_dtype_name gives "F32", ... or NULL. */
int gp_st_dtype_supported(const char *file_dtype, gp_dtype *out);
const char *gp_st_dtype_name(gp_dtype t);

/* Writes a safetensors file with the tensors in the given order, their data packed back to back.
 * Each tensor's dtype is file_dtype when non-NULL (any dtype safetensors defines, so tests can
 * write F64 or BOOL), else dtype; ndim <= GP_MAX_DIMS; nbytes must equal numel * dtype size; names
 * must be unique. meta is NULL or a NULL-terminated list of key, value strings for "__metadata__".
 * The header is padded with spaces to a multiple of 8 bytes. 0 on success, -1 with err set. */
int gp_st_write(const char *path, const gp_st_tensor *tensors, int n, const char *const *meta,
                char *err, size_t errlen);

#endif
