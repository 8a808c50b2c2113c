/* The test-only GGUF writer (tests/gguf_writer.h): every field appended one by one, little-endian.
 */
#include "tests/gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/core.h"

void gp_gw_init(gp_gw *w)
{
    memset(w, 0, sizeof *w);
}

void gp_gw_free(gp_gw *w)
{
    free(w->buf);
    memset(w, 0, sizeof *w);
}

void gp_gw_bytes(gp_gw *w, const void *p, size_t n)
{
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n)
            cap *= 2;
        unsigned char *b = realloc(w->buf, cap);
        GP_ASSERT(b != NULL);
        w->buf = b;
        w->cap = cap;
    }
    if (n)
        memcpy(w->buf + w->len, p, n);
    w->len += n;
}

static void put_le(gp_gw *w, uint64_t v, int n)
{
    unsigned char b[8];
    for (int i = 0; i < n; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    gp_gw_bytes(w, b, (size_t)n);
}

void gp_gw_u8(gp_gw *w, uint8_t v)
{
    put_le(w, v, 1);
}

void gp_gw_u16(gp_gw *w, uint16_t v)
{
    put_le(w, v, 2);
}

void gp_gw_u32(gp_gw *w, uint32_t v)
{
    put_le(w, v, 4);
}

void gp_gw_u64(gp_gw *w, uint64_t v)
{
    put_le(w, v, 8);
}

void gp_gw_f32(gp_gw *w, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    put_le(w, u, 4);
}

void gp_gw_f64(gp_gw *w, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    put_le(w, u, 8);
}

void gp_gw_str(gp_gw *w, const char *s)
{
    size_t n = strlen(s);
    gp_gw_u64(w, n);
    gp_gw_bytes(w, s, n);
}

void gp_gw_pad(gp_gw *w, size_t alignment)
{
    while (w->len % alignment)
        gp_gw_u8(w, 0);
}

void gp_gw_header(gp_gw *w, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gp_gw_bytes(w, "GGUF", 4);
    gp_gw_u32(w, version);
    gp_gw_u64(w, n_tensors);
    gp_gw_u64(w, n_kv);
}

void gp_gw_key(gp_gw *w, const char *key, gp_gguf_type type)
{
    gp_gw_str(w, key);
    gp_gw_u32(w, (uint32_t)type);
}

void gp_gw_kv_u32(gp_gw *w, const char *key, uint32_t v)
{
    gp_gw_key(w, key, GP_GGUF_UINT32);
    gp_gw_u32(w, v);
}

void gp_gw_kv_str(gp_gw *w, const char *key, const char *s)
{
    gp_gw_key(w, key, GP_GGUF_STRING);
    gp_gw_str(w, s);
}

void gp_gw_kv_arr(gp_gw *w, const char *key, gp_gguf_type elem, uint64_t n)
{
    gp_gw_key(w, key, GP_GGUF_ARRAY);
    gp_gw_u32(w, (uint32_t)elem);
    gp_gw_u64(w, n);
}

void gp_gw_tensor_info(gp_gw *w, const char *name, uint32_t ndim, const int64_t *ne,
                       uint32_t ggml_type, uint64_t offset)
{
    gp_gw_str(w, name);
    gp_gw_u32(w, ndim);
    for (uint32_t d = 0; d < ndim; d++)
        gp_gw_u64(w, (uint64_t)ne[d]);
    gp_gw_u32(w, ggml_type);
    gp_gw_u64(w, offset);
}

void gp_gw_model(gp_gw *w, const char *arch, uint32_t alignment, const gp_gw_tensor *t, int n)
{
    gp_gw_header(w, 3, (uint64_t)n, alignment != 32 ? 2 : 1);
    gp_gw_kv_str(w, "general.architecture", arch);
    if (alignment != 32)
        gp_gw_kv_u32(w, "general.alignment", alignment);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        gp_gw_tensor_info(w, t[i].name, t[i].ndim, t[i].ne, t[i].ggml_type, off);
        off += (t[i].nbytes + alignment - 1) / alignment * alignment;
    }
    gp_gw_pad(w, alignment);
    for (int i = 0; i < n; i++) {
        gp_gw_bytes(w, t[i].data, t[i].nbytes);
        if (i + 1 < n)
            gp_gw_pad(w, alignment); /* the last tensor ends the file */
    }
}

int gp_gw_save(const gp_gw *w, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(w->buf, 1, w->len, f) == w->len;
    return fclose(f) == 0 && ok ? 0 : -1;
}
