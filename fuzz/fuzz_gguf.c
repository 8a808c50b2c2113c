/* Fuzz target: GGUF files through gp_gguf_open_mem, then every key, array element and tensor read
 * back through the accessors, and the same bytes as a checkpoint through gp_weights_open (a memfd,
 * so the path goes through the magic detection) with check and read of what it lists. */
#define _GNU_SOURCE /* memfd_create */
#include <string.h>
#include <unistd.h>

#include "fuzz/fuzz.h"
#include "fuzz/fuzz_memfd.h"
#include "weights/gguf.h"
#include "weights/weights.h"

/* Supported tensors up to this many bytes are read (copied) in full. */
enum { READ_MAX_BYTES = 1 << 20 };

static void walk_kvs(const gp_gguf *g)
{
    int64_t n = gp_gguf_kv_count(g);
    GP_FUZZ_CHECK(gp_gguf_kv_key(g, n) == NULL && gp_gguf_kv_key(g, -1) == NULL);
    for (int64_t i = 0; i < n; i++) {
        const char *key = gp_gguf_kv_key(g, i);
        GP_FUZZ_CHECK(key && key[0] && gp_gguf_find(g, key) == i); /* keys are unique */
        gp_gguf_type t = gp_gguf_kv_type(g, i);
        GP_FUZZ_CHECK((unsigned)t < GP_GGUF_TYPE_COUNT);
        int64_t iv;
        double fv;
        int bv;
        gp_gguf_str s;
        int ri = gp_gguf_get_int(g, key, &iv), rf = gp_gguf_get_float(g, key, &fv);
        int rb = gp_gguf_get_bool(g, key, &bv), rs = gp_gguf_get_str(g, key, &s);
        GP_FUZZ_CHECK(ri <= 0 && rf <= 0 && rb <= 0 && rs <= 0);
        GP_FUZZ_CHECK((rs == 0) == (t == GP_GGUF_STRING) && (rb == 0) == (t == GP_GGUF_BOOL));
        GP_FUZZ_CHECK(rb != 0 || bv == 0 || bv == 1);
        if (rs == 0 && s.len > 0)
            GP_FUZZ_CHECK(s.s[0] == s.s[0] && s.s[s.len - 1] == s.s[s.len - 1]); /* in bounds */
        gp_gguf_type et;
        uint64_t m;
        int ra = gp_gguf_get_arr(g, key, &et, &m);
        GP_FUZZ_CHECK((ra == 0) == (t == GP_GGUF_ARRAY));
        if (ra != 0)
            continue;
        GP_FUZZ_CHECK(et != GP_GGUF_ARRAY && (unsigned)et < GP_GGUF_TYPE_COUNT);
        GP_FUZZ_CHECK((gp_gguf_arr_data(g, i) == NULL) == (et == GP_GGUF_STRING));
        uint64_t sum = 0;
        for (uint64_t j = 0; j < m; j++) {
            if (et == GP_GGUF_STRING) {
                GP_FUZZ_CHECK(gp_gguf_arr_str(g, i, j, &s) == 0);
                for (uint64_t k = 0; k < s.len; k++)
                    sum += (unsigned char)s.s[k];
            } else if (gp_gguf_arr_int(g, i, j, &iv) == 0) {
                sum += (uint64_t)iv;
            } else {
                GP_FUZZ_CHECK(gp_gguf_arr_float(g, i, j, &fv) == 0);
            }
        }
        GP_FUZZ_CHECK(gp_gguf_arr_str(g, i, m, &s) == -1 && gp_gguf_arr_int(g, i, m, &iv) == -1);
        (void)sum;
    }
}

static void walk_tensors(const gp_gguf *g, const unsigned char *base, size_t size)
{
    int64_t n = gp_gguf_tensor_count(g);
    GP_FUZZ_CHECK(gp_gguf_tensor_get(g, n) == NULL);
    uint64_t align = gp_gguf_alignment(g);
    GP_FUZZ_CHECK(align > 0 && (align & (align - 1)) == 0);
    for (int64_t i = 0; i < n; i++) {
        const gp_gguf_tensor *t = gp_gguf_tensor_get(g, i);
        GP_FUZZ_CHECK(t && gp_gguf_tensor_find(g, t->name) == t);
        GP_FUZZ_CHECK(t->ndim >= 1 && t->ndim <= GP_MAX_DIMS && t->offset % align == 0);
        GP_FUZZ_CHECK(strcmp(gp_gguf_type_name(t->ggml_type), "unknown") != 0);
        const unsigned char *d = t->data;
        GP_FUZZ_CHECK(d >= base && t->nbytes <= size && (size_t)(d - base) <= size - t->nbytes);
        if (t->supported && gp_dtype_block(t->dtype) == 1) {
            int64_t numel = 1;
            for (int k = 0; k < t->ndim; k++)
                numel *= t->ne[k];
            GP_FUZZ_CHECK((size_t)numel * gp_dtype_size(t->dtype) == t->nbytes);
        }
        if (t->nbytes)
            GP_FUZZ_CHECK(d[0] == d[0] && d[t->nbytes - 1] == d[t->nbytes - 1]);
    }
}

/* The same bytes as a checkpoint: every tensor found by its name, checked and read. */
static void use_weights(const uint8_t *data, size_t size, int opened)
{
    char path[64], err[2048];
    int whole;
    int fd = gp_fuzz_memfd("fuzz.gguf", data, size, path, sizeof path, &whole);
    if (fd < 0)
        return;
    gp_weights *w = whole ? gp_weights_open(path, err, sizeof err) : NULL;
    if (whole && size >= 4 && memcmp(data, "GGUF", 4) == 0)
        GP_FUZZ_CHECK((w != NULL) == opened);
    if (w) {
        int n = gp_weights_count(w);
        for (int i = 0; i < n; i++) {
            const gp_st_tensor *t = gp_weights_get(w, i);
            GP_FUZZ_CHECK(t && gp_weights_find(w, t->name) == t);
            if (!t->supported || t->nbytes > READ_MAX_BYTES)
                continue;
            gp_weight_decl d = {
                t->name, t->dtype, t->ndim, {t->shape[0], t->shape[1], t->shape[2], t->shape[3]}};
            GP_FUZZ_CHECK(gp_weights_check(w, &d, 1, NULL, err, sizeof err) == 0);
            void *dst = malloc(t->nbytes ? t->nbytes : 1);
            GP_FUZZ_CHECK(dst != NULL);
            GP_FUZZ_CHECK(gp_weights_read(t, t->dtype, dst, t->nbytes, err, sizeof err) == 0);
            free(dst);
        }
    }
    gp_weights_close(w);
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[1024];
    gp_gguf *g = gp_gguf_open_mem(data, size, "fuzz.gguf", err, sizeof err);
    GP_FUZZ_CHECK(g || strncmp(err, "fuzz.gguf: bad GGUF file (", 26) == 0);
    if (g) {
        walk_kvs(g);
        walk_tensors(g, data, size);
    }
    use_weights(data, size, g != NULL);
    gp_gguf_close(g);
    return 0;
}
