/* A test-only GGUF writer: an in-memory byte buffer filled field by field (little-endian), so tests
 * can write valid files and, one wrong field at a time, every kind of hostile one. */
#ifndef GP_TESTS_GGUF_WRITER_H
#define GP_TESTS_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "weights/gguf.h"

typedef struct {
    unsigned char *buf; /* [len], capacity cap */
    size_t len, cap;
} gp_gw;

void gp_gw_init(gp_gw *w);
void gp_gw_free(gp_gw *w);

/* Raw fields. */
void gp_gw_bytes(gp_gw *w, const void *p, size_t n);
void gp_gw_u8(gp_gw *w, uint8_t v);
void gp_gw_u16(gp_gw *w, uint16_t v);
void gp_gw_u32(gp_gw *w, uint32_t v);
void gp_gw_u64(gp_gw *w, uint64_t v);
void gp_gw_f32(gp_gw *w, float v);
void gp_gw_f64(gp_gw *w, double v);
void gp_gw_str(gp_gw *w, const char *s);    /* u64 length, then the bytes (no NUL) */
void gp_gw_pad(gp_gw *w, size_t alignment); /* zero bytes up to a multiple of alignment */

/* "GGUF", version, tensor count, kv count. */
void gp_gw_header(gp_gw *w, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* A kv's key and value type; the caller writes the value. */
void gp_gw_key(gp_gw *w, const char *key, gp_gguf_type type);
void gp_gw_kv_u32(gp_gw *w, const char *key, uint32_t v);
void gp_gw_kv_str(gp_gw *w, const char *key, const char *s);
/* Key, ARRAY, element type and count; the caller writes the n elements. */
void gp_gw_kv_arr(gp_gw *w, const char *key, gp_gguf_type elem, uint64_t n);
/* name, ndim, ne[ndim] (ggml order, innermost first), ggml type id, offset. */
void gp_gw_tensor_info(gp_gw *w, const char *name, uint32_t ndim, const int64_t *ne,
                       uint32_t ggml_type, uint64_t offset);

/* A whole file: version 3, general.architecture = arch, general.alignment when alignment != 32,
 * then the tensors, their data packed in order, each at the next multiple of the alignment.
 * data[i] holds nbytes[i] bytes (the exact size for its type and ne). */
typedef struct {
    const char *name;
    uint32_t ggml_type;
    uint32_t ndim;
    int64_t ne[4];
    const void *data;
    size_t nbytes;
} gp_gw_tensor;
void gp_gw_model(gp_gw *w, const char *arch, uint32_t alignment, const gp_gw_tensor *t, int n);

/* Writes the buffer to path; 0 on success. */
int gp_gw_save(const gp_gw *w, const char *path);

#endif
