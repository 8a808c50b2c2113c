/* Tests of weights/gguf.c: round trips of every value type and several tensor types through the
 * test writer (tests/gguf_writer.c), the hostile-file catalogue with its exact messages (also
 * listed in docs/errors.md), every truncation of a valid file, gguf-py's own output
 * (tests/gguf/fixture.gguf) and llama.cpp's vocabulary files; and GGUF checkpoints through
 * gp_weights (weights/weights.c, weights/gguf_names.c), and gp_weights_scan's search for
 * non-finite values (weights/weights_scan.c). */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gplan/gplan.h"
#include "ir/f16.h"
#include "weights/gguf.h"
#include "weights/weights.h"
#include "tests/gguf_writer.h"
#include "tests/testutil.h"

static char err[4096];

/* Opens a copy of exactly the buffer's bytes (so a read past the end is a sanitizer error). */
static gp_gguf *open_copy(const gp_gw *w, void **copy)
{
    *copy = malloc(w->len ? w->len : 1);
    GP_ASSERT(*copy != NULL);
    if (w->len)
        memcpy(*copy, w->buf, w->len);
    return gp_gguf_open_mem(*copy, w->len, "t.gguf", err, sizeof err);
}

static int str_is(gp_gguf_str s, const char *want)
{
    return s.len == strlen(want) && memcmp(s.s, want, s.len) == 0;
}

/* ---- round trip of every value type ---- */

static const int64_t ne_f32[2] = {3, 2}, ne_q40[2] = {64, 2}, ne_q6k[1] = {256},
                     ne_q2k[2] = {256, 3};

/* Every scalar type, arrays of every scalar type and of strings, an empty array, alignment 64, and
 * tensors of f32, f16, bf16, i32, q4_0, q8_0, q6_k and q2_k (a type gplan does not compute with).
 * Tensor i's data bytes are (i * 16 + k) & 0xff. */
static void write_everything(gp_gw *w, uint32_t version)
{
    static const struct {
        const char *name;
        uint32_t type, ndim;
        const int64_t *ne;
        size_t nbytes;
    } ts[] = {
        {"w.f32", 0, 2, ne_f32, 24},          {"w.f16", 1, 1, ne_q6k, 512},
        {"w.bf16", 30, 2, ne_f32, 12},        {"w.i32", 26, 1, ne_q6k, 1024},
        {"w.q4_0", 2, 2, ne_q40, 2 * 2 * 18}, {"w.q8_0", 8, 2, ne_q40, 2 * 2 * 34},
        {"w.q6_k", 14, 1, ne_q6k, 210},       {"w.q2_k", 10, 2, ne_q2k, 3 * 84},
    };
    int nt = (int)(sizeof ts / sizeof ts[0]);
    gp_gw_header(w, version, (uint64_t)nt, 30);
    gp_gw_key(w, "v.u8", GP_GGUF_UINT8), gp_gw_u8(w, 250);
    gp_gw_key(w, "v.i8", GP_GGUF_INT8), gp_gw_u8(w, (uint8_t)-7);
    gp_gw_key(w, "v.u16", GP_GGUF_UINT16), gp_gw_u16(w, 65535);
    gp_gw_key(w, "v.i16", GP_GGUF_INT16), gp_gw_u16(w, (uint16_t)-32768);
    gp_gw_key(w, "v.u32", GP_GGUF_UINT32), gp_gw_u32(w, 4000000000u);
    gp_gw_key(w, "v.i32", GP_GGUF_INT32), gp_gw_u32(w, (uint32_t)-123456789);
    gp_gw_key(w, "v.f32", GP_GGUF_FLOAT32), gp_gw_f32(w, 0.25f);
    gp_gw_key(w, "v.bool", GP_GGUF_BOOL), gp_gw_u8(w, 1);
    gp_gw_kv_str(w, "v.str", "h\xc3\xa9llo");
    gp_gw_key(w, "v.u64", GP_GGUF_UINT64), gp_gw_u64(w, UINT64_MAX);
    gp_gw_key(w, "v.i64", GP_GGUF_INT64), gp_gw_u64(w, (uint64_t)INT64_MIN);
    gp_gw_key(w, "v.f64", GP_GGUF_FLOAT64), gp_gw_f64(w, -1e300);
    gp_gw_key(w, "v.empty_str", GP_GGUF_STRING), gp_gw_str(w, "");
    gp_gw_kv_arr(w, "a.u8", GP_GGUF_UINT8, 3), gp_gw_u8(w, 1), gp_gw_u8(w, 2), gp_gw_u8(w, 255);
    gp_gw_kv_arr(w, "a.i8", GP_GGUF_INT8, 2), gp_gw_u8(w, 0x80), gp_gw_u8(w, 0x7f);
    gp_gw_kv_arr(w, "a.u16", GP_GGUF_UINT16, 1), gp_gw_u16(w, 513);
    gp_gw_kv_arr(w, "a.i16", GP_GGUF_INT16, 2), gp_gw_u16(w, 0xffff), gp_gw_u16(w, 2);
    gp_gw_kv_arr(w, "a.u32", GP_GGUF_UINT32, 2), gp_gw_u32(w, 7), gp_gw_u32(w, 0xffffffffu);
    gp_gw_kv_arr(w, "a.i32", GP_GGUF_INT32, 3);
    gp_gw_u32(w, 1), gp_gw_u32(w, (uint32_t)-2), gp_gw_u32(w, 3);
    gp_gw_kv_arr(w, "a.f32", GP_GGUF_FLOAT32, 2), gp_gw_f32(w, 1.5f), gp_gw_f32(w, -0.0f);
    gp_gw_kv_arr(w, "a.bool", GP_GGUF_BOOL, 3), gp_gw_u8(w, 0), gp_gw_u8(w, 1), gp_gw_u8(w, 0);
    gp_gw_kv_arr(w, "a.str", GP_GGUF_STRING, 3);
    gp_gw_str(w, "one"), gp_gw_str(w, ""), gp_gw_str(w, "thr\xc3\xa9\xc3\xa9");
    gp_gw_kv_arr(w, "a.u64", GP_GGUF_UINT64, 2), gp_gw_u64(w, 1ull << 63), gp_gw_u64(w, 5);
    gp_gw_kv_arr(w, "a.i64", GP_GGUF_INT64, 1), gp_gw_u64(w, (uint64_t)-9);
    gp_gw_kv_arr(w, "a.f64", GP_GGUF_FLOAT64, 2), gp_gw_f64(w, 0.1), gp_gw_f64(w, 1e-300);
    gp_gw_kv_arr(w, "a.empty", GP_GGUF_INT32, 0);
    gp_gw_kv_arr(w, "a.empty_str", GP_GGUF_STRING, 0);
    gp_gw_kv_u32(w, "general.alignment", 64);
    gp_gw_kv_str(w, "general.architecture", "llama");
    gp_gw_kv_str(w, "z.last", "end");
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        gp_gw_tensor_info(w, ts[i].name, ts[i].ndim, ts[i].ne, ts[i].type, off);
        off += (ts[i].nbytes + 63) / 64 * 64;
    }
    gp_gw_pad(w, 64);
    for (int i = 0; i < nt; i++) {
        for (size_t k = 0; k < ts[i].nbytes; k++)
            gp_gw_u8(w, (uint8_t)(i * 16 + k));
        if (i + 1 < nt)
            gp_gw_pad(w, 64);
    }
}

static void check_everything(const gp_gguf *g, uint32_t version)
{
    int64_t iv;
    double fv;
    int bv;
    gp_gguf_str sv;
    gp_gguf_type et;
    uint64_t n;
    CU_ASSERT_EQUAL(gp_gguf_version(g), version);
    CU_ASSERT_EQUAL(gp_gguf_alignment(g), 64);
    CU_ASSERT_EQUAL(gp_gguf_kv_count(g), 30);
    CU_ASSERT_STRING_EQUAL(gp_gguf_kv_key(g, 0), "v.u8");
    CU_ASSERT_STRING_EQUAL(gp_gguf_kv_key(g, 29), "z.last");
    CU_ASSERT_PTR_NULL(gp_gguf_kv_key(g, 30));
    CU_ASSERT_PTR_NULL(gp_gguf_kv_key(g, -1));
    CU_ASSERT_EQUAL(gp_gguf_kv_type(g, 6), GP_GGUF_FLOAT32);
    CU_ASSERT_EQUAL(gp_gguf_kv_type(g, 13), GP_GGUF_ARRAY);
    CU_ASSERT_EQUAL(gp_gguf_find(g, "v.u8"), 0);
    CU_ASSERT_EQUAL(gp_gguf_find(g, "z.last"), 29);
    CU_ASSERT_EQUAL(gp_gguf_find(g, "v.u"), -1);
    CU_ASSERT_EQUAL(gp_gguf_find(g, ""), -1);

    /* scalars: each integer type read as int64, and as a double */
    static const struct {
        const char *key;
        int64_t v;
    } ints[] = {{"v.u8", 250},     {"v.i8", -7},          {"v.u16", 65535},
                {"v.i16", -32768}, {"v.u32", 4000000000}, {"v.i32", -123456789},
                {"v.bool", 1},     {"v.i64", INT64_MIN}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        iv = 0;
        CU_ASSERT_EQUAL(gp_gguf_get_int(g, ints[i].key, &iv), 0);
        CU_ASSERT_EQUAL(iv, ints[i].v);
        if (strcmp(ints[i].key, "v.bool") != 0) {
            CU_ASSERT_EQUAL(gp_gguf_get_float(g, ints[i].key, &fv), 0);
            CU_ASSERT_EQUAL(fv, (double)ints[i].v);
        }
    }
    CU_ASSERT_EQUAL(gp_gguf_get_int(g, "v.u64", &iv), -1); /* UINT64_MAX does not fit int64 */
    CU_ASSERT_EQUAL(gp_gguf_get_float(g, "v.u64", &fv), 0);
    CU_ASSERT_EQUAL(fv, 18446744073709551615.0);
    CU_ASSERT_EQUAL(gp_gguf_get_float(g, "v.f32", &fv), 0);
    CU_ASSERT_EQUAL(fv, 0.25);
    CU_ASSERT_EQUAL(gp_gguf_get_float(g, "v.f64", &fv), 0);
    CU_ASSERT_EQUAL(fv, -1e300);
    CU_ASSERT_EQUAL(gp_gguf_get_int(g, "v.f32", &iv), -1);
    CU_ASSERT_EQUAL(gp_gguf_get_float(g, "v.bool", &fv), -1);
    CU_ASSERT_EQUAL(gp_gguf_get_bool(g, "v.bool", &bv), 0);
    CU_ASSERT_EQUAL(bv, 1);
    CU_ASSERT_EQUAL(gp_gguf_get_bool(g, "v.u8", &bv), -1);
    CU_ASSERT_EQUAL(gp_gguf_get_str(g, "v.str", &sv), 0);
    CU_ASSERT(str_is(sv, "h\xc3\xa9llo"));
    CU_ASSERT_EQUAL(gp_gguf_get_str(g, "v.empty_str", &sv), 0);
    CU_ASSERT_EQUAL(sv.len, 0);
    CU_ASSERT_EQUAL(gp_gguf_get_str(g, "v.u8", &sv), -1);
    CU_ASSERT_EQUAL(gp_gguf_get_int(g, "v.str", &iv), -1);
    CU_ASSERT_EQUAL(gp_gguf_get_int(g, "a.u8", &iv), -1);
    CU_ASSERT_EQUAL(gp_gguf_get_int(g, "absent", &iv), 1);
    CU_ASSERT_EQUAL(gp_gguf_get_float(g, "absent", &fv), 1);
    CU_ASSERT_EQUAL(gp_gguf_get_bool(g, "absent", &bv), 1);
    CU_ASSERT_EQUAL(gp_gguf_get_str(g, "absent", &sv), 1);
    CU_ASSERT_EQUAL(gp_gguf_get_arr(g, "absent", &et, &n), 1);
    CU_ASSERT_EQUAL(gp_gguf_get_arr(g, "v.str", &et, &n), -1);

    /* arrays of every element type */
    static const struct {
        const char *key;
        gp_gguf_type elem;
        uint64_t n;
        int64_t v[3]; /* as int64 where they fit */
    } arrs[] = {
        {"a.u8", GP_GGUF_UINT8, 3, {1, 2, 255}},
        {"a.i8", GP_GGUF_INT8, 2, {-128, 127}},
        {"a.u16", GP_GGUF_UINT16, 1, {513}},
        {"a.i16", GP_GGUF_INT16, 2, {-1, 2}},
        {"a.u32", GP_GGUF_UINT32, 2, {7, 4294967295}},
        {"a.i32", GP_GGUF_INT32, 3, {1, -2, 3}},
        {"a.bool", GP_GGUF_BOOL, 3, {0, 1, 0}},
        {"a.i64", GP_GGUF_INT64, 1, {-9}},
        {"a.empty", GP_GGUF_INT32, 0, {0}},
    };
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) {
        int64_t kv = gp_gguf_find(g, arrs[i].key);
        CU_ASSERT_EQUAL_FATAL(gp_gguf_get_arr(g, arrs[i].key, &et, &n), 0);
        CU_ASSERT_EQUAL(et, arrs[i].elem);
        CU_ASSERT_EQUAL(n, arrs[i].n);
        CU_ASSERT_PTR_NOT_NULL(gp_gguf_arr_data(g, kv));
        for (uint64_t j = 0; j < arrs[i].n; j++) {
            iv = 0;
            CU_ASSERT_EQUAL(gp_gguf_arr_int(g, kv, j, &iv), 0);
            CU_ASSERT_EQUAL(iv, arrs[i].v[j]);
        }
        CU_ASSERT_EQUAL(gp_gguf_arr_int(g, kv, arrs[i].n, &iv), -1);
        CU_ASSERT_EQUAL(gp_gguf_arr_str(g, kv, 0, &sv), -1);
    }
    int64_t kv = gp_gguf_find(g, "a.u16");
    uint16_t u16;
    memcpy(&u16, gp_gguf_arr_data(g, kv), 2);
    CU_ASSERT_EQUAL(u16, 513);
    kv = gp_gguf_find(g, "a.u64");
    CU_ASSERT_EQUAL(gp_gguf_arr_int(g, kv, 0, &iv), -1); /* 2^63 */
    CU_ASSERT_EQUAL(gp_gguf_arr_int(g, kv, 1, &iv), 0);
    CU_ASSERT_EQUAL(iv, 5);
    CU_ASSERT_EQUAL(gp_gguf_arr_float(g, kv, 0, &fv), 0);
    CU_ASSERT_EQUAL(fv, 9223372036854775808.0);
    kv = gp_gguf_find(g, "a.f32");
    CU_ASSERT_EQUAL(gp_gguf_arr_float(g, kv, 0, &fv), 0);
    CU_ASSERT_EQUAL(fv, 1.5);
    CU_ASSERT_EQUAL(gp_gguf_arr_float(g, kv, 1, &fv), 0);
    CU_ASSERT(fv == 0.0 && signbit(fv));
    CU_ASSERT_EQUAL(gp_gguf_arr_int(g, kv, 0, &iv), -1);
    kv = gp_gguf_find(g, "a.f64");
    CU_ASSERT_EQUAL(gp_gguf_arr_float(g, kv, 0, &fv), 0);
    CU_ASSERT_EQUAL(fv, 0.1);
    CU_ASSERT_EQUAL(gp_gguf_arr_float(g, kv, 1, &fv), 0);
    CU_ASSERT_EQUAL(fv, 1e-300);
    CU_ASSERT_EQUAL(gp_gguf_arr_float(g, kv, 2, &fv), -1);
    kv = gp_gguf_find(g, "a.str");
    CU_ASSERT_EQUAL(gp_gguf_get_arr(g, "a.str", &et, &n), 0);
    CU_ASSERT_EQUAL(et, GP_GGUF_STRING);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_PTR_NULL(gp_gguf_arr_data(g, kv));
    CU_ASSERT_EQUAL(gp_gguf_arr_str(g, kv, 0, &sv), 0);
    CU_ASSERT(str_is(sv, "one"));
    CU_ASSERT_EQUAL(gp_gguf_arr_str(g, kv, 1, &sv), 0);
    CU_ASSERT(str_is(sv, ""));
    CU_ASSERT_EQUAL(gp_gguf_arr_str(g, kv, 2, &sv), 0);
    CU_ASSERT(str_is(sv, "thr\xc3\xa9\xc3\xa9"));
    CU_ASSERT_EQUAL(gp_gguf_arr_str(g, kv, 3, &sv), -1);
    CU_ASSERT_EQUAL(gp_gguf_arr_int(g, kv, 0, &iv), -1);
    CU_ASSERT_EQUAL(gp_gguf_arr_str(g, gp_gguf_find(g, "v.str"), 0, &sv), -1); /* not an array */
    CU_ASSERT_EQUAL(gp_gguf_arr_int(g, 99, 0, &iv), -1);
    CU_ASSERT_EQUAL(gp_gguf_get_arr(g, "a.empty_str", &et, &n), 0);
    CU_ASSERT_EQUAL(n, 0);

    /* tensors */
    static const struct {
        const char *name;
        uint32_t type;
        int supported;
        gp_dtype dtype;
        int ndim;
        int64_t ne0, ne1;
        size_t nbytes;
    } want[] = {
        {"w.f32", 0, 1, GP_F32, 2, 3, 2, 24},       {"w.f16", 1, 1, GP_F16, 1, 256, 0, 512},
        {"w.bf16", 30, 1, GP_BF16, 2, 3, 2, 12},    {"w.i32", 26, 1, GP_I32, 1, 256, 0, 1024},
        {"w.q4_0", 2, 1, GP_Q4_0, 2, 64, 2, 72},    {"w.q8_0", 8, 1, GP_Q8_0, 2, 64, 2, 136},
        {"w.q6_k", 14, 1, GP_Q6_K, 1, 256, 0, 210}, {"w.q2_k", 10, 0, GP_F32, 2, 256, 3, 252},
    };
    CU_ASSERT_EQUAL_FATAL(gp_gguf_tensor_count(g), 8);
    uint64_t off = 0;
    for (int i = 0; i < 8; i++) {
        const gp_gguf_tensor *t = gp_gguf_tensor_get(g, i);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_STRING_EQUAL(t->name, want[i].name);
        CU_ASSERT_PTR_EQUAL(gp_gguf_tensor_find(g, want[i].name), t);
        CU_ASSERT_EQUAL(t->ggml_type, want[i].type);
        CU_ASSERT_EQUAL(t->supported, want[i].supported);
        if (want[i].supported)
            CU_ASSERT_EQUAL(t->dtype, want[i].dtype);
        CU_ASSERT_EQUAL(t->ndim, want[i].ndim);
        CU_ASSERT_EQUAL(t->ne[0], want[i].ne0);
        if (t->ndim > 1)
            CU_ASSERT_EQUAL(t->ne[1], want[i].ne1);
        CU_ASSERT_EQUAL(t->nbytes, want[i].nbytes);
        CU_ASSERT_EQUAL(t->offset, off);
        off += (t->nbytes + 63) / 64 * 64;
        const unsigned char *d = t->data;
        int ok = 1;
        for (size_t k = 0; k < t->nbytes; k++)
            ok &= d[k] == (unsigned char)(i * 16 + k);
        CU_ASSERT(ok);
    }
    CU_ASSERT_PTR_NULL(gp_gguf_tensor_get(g, 8));
    CU_ASSERT_PTR_NULL(gp_gguf_tensor_get(g, -1));
    CU_ASSERT_PTR_NULL(gp_gguf_tensor_find(g, "w.f3"));
    CU_ASSERT_PTR_NULL(gp_gguf_tensor_find(g, "w.f32x"));
}

static void test_roundtrip(void)
{
    for (uint32_t version = 2; version <= 3; version++) {
        gp_gw w;
        gp_gw_init(&w);
        write_everything(&w, version);
        void *copy;
        gp_gguf *g = open_copy(&w, &copy);
        if (!g)
            fprintf(stderr, "\n%s\n", err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        CU_ASSERT_STRING_EQUAL(gp_gguf_path(g), "t.gguf");
        check_everything(g, version);
        gp_gguf_close(g);
        free(copy);

        /* the same through a file and mmap */
        const char *path = gp_test_tmpfile(".gguf");
        CU_ASSERT_EQUAL_FATAL(gp_gw_save(&w, path), 0);
        g = gp_gguf_open(path, err, sizeof err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        CU_ASSERT_STRING_EQUAL(gp_gguf_path(g), path);
        check_everything(g, version);
        gp_gguf_close(g);
        remove(path);
        gp_gw_free(&w);
    }
    gp_gguf_close(NULL);
}

static void test_type_names(void)
{
    CU_ASSERT_STRING_EQUAL(gp_gguf_type_name(0), "f32");
    CU_ASSERT_STRING_EQUAL(gp_gguf_type_name(2), "q4_0");
    CU_ASSERT_STRING_EQUAL(gp_gguf_type_name(14), "q6_k");
    CU_ASSERT_STRING_EQUAL(gp_gguf_type_name(30), "bf16");
    CU_ASSERT_STRING_EQUAL(gp_gguf_type_name(39), "mxfp4");
    CU_ASSERT_STRING_EQUAL(gp_gguf_type_name(4), "unknown");
    CU_ASSERT_STRING_EQUAL(gp_gguf_type_name(31), "unknown");
    CU_ASSERT_STRING_EQUAL(gp_gguf_type_name(1000), "unknown");
}

/* ---- the hostile-file catalogue ---- */

/* Header, general.architecture, one tensor info, padding to 32, then data_bytes zero bytes. */
static void one_tensor(gp_gw *w, uint32_t ndim, const int64_t *ne, uint32_t type, uint64_t offset,
                       size_t data_bytes)
{
    gp_gw_header(w, 3, 1, 1);
    gp_gw_kv_str(w, "general.architecture", "llama");
    gp_gw_tensor_info(w, "x", ndim, ne, type, offset);
    gp_gw_pad(w, 32);
    for (size_t i = 0; i < data_bytes; i++)
        gp_gw_u8(w, 0);
}

/* Two f32 tensors of n0 and n1 elements at offsets o0 and o1, data_bytes of data. */
static void two_tensors(gp_gw *w, const char *n1name, int64_t n0, uint64_t o0, int64_t n1,
                        uint64_t o1, size_t data_bytes)
{
    gp_gw_header(w, 3, 2, 0);
    gp_gw_tensor_info(w, "a", 1, &n0, 0, o0);
    gp_gw_tensor_info(w, n1name, 1, &n1, 0, o1);
    gp_gw_pad(w, 32);
    for (size_t i = 0; i < data_bytes; i++)
        gp_gw_u8(w, 0);
}

static void one_kv_alignment(gp_gw *w, gp_gguf_type type, uint64_t v)
{
    gp_gw_header(w, 3, 0, 1);
    gp_gw_key(w, "general.alignment", type);
    if (type == GP_GGUF_STRING)
        gp_gw_str(w, "32");
    else if (type == GP_GGUF_UINT64)
        gp_gw_u64(w, v);
    else
        gp_gw_u32(w, (uint32_t)v);
}

/* Each case: what it is, and the exact REASON of "t.gguf: bad GGUF file (REASON)". */
static const struct {
    const char *what;
    const char *reason;
} cases[] = {
    {"bad magic", "bad magic 47 47 4d 4c: not a GGUF file"},
    {"version 0", "unsupported version 0 (this reader takes versions 2 and 3)"},
    {"version 1", "version 1 is not supported (this reader takes versions 2 and 3)"},
    {"version 4", "unsupported version 4 (this reader takes versions 2 and 3)"},
    {"big-endian version 3",
     "version field 0x03000000 is byte-swapped: a big-endian file (this reader takes "
     "little-endian files only)"},
    {"tensor count 2^60",
     "tensor count 1152921504606846976 is too large: the 100 bytes left hold at most 3"},
    {"kv count 2^60",
     "kv count 1152921504606846976 is too large: the 100 bytes left hold at most 7"},
    {"key length 2^62",
     "kv 0 key at offset 32 needs 4611686018427387904 bytes, the file has 6 left"},
    {"empty key", "kv 0: empty name"},
    {"NUL in a key", "kv 0: name contains a NUL byte"},
    {"string length 2^62",
     "kv 0 (\"general.name\") value at offset 56 needs 4611686018427387904 bytes, the file has 4 "
     "left"},
    {"array count 2^60",
     "kv 0 (\"tokenizer.ggml.tokens\"): array count 1152921504606846976 is too large: the 24 "
     "bytes left hold at most 3"},
    {"array string length 2^62",
     "kv 0 (\"tokenizer.ggml.tokens\") element 1 at offset 101 needs 4611686018427387904 bytes, "
     "the file has 0 left"},
    {"u32 array count past the end",
     "kv 0 (\"a\"): array count 7 is too large: the 24 bytes left hold at most 6"},
    {"unknown value type", "kv 0 (\"k\"): unknown value type 13"},
    {"unknown array element type", "kv 0 (\"k\"): unknown array element type 4294967295"},
    {"nested array", "kv 0 (\"k\"): nested arrays are not supported"},
    {"bool 2", "kv 0 (\"k\"): bool value 2 is not 0 or 1"},
    {"bool array element 2", "kv 0 (\"k\"): element 1: bool value 2 is not 0 or 1"},
    {"duplicate key", "kv 2: duplicate key \"a\" (also kv 0)"},
    {"alignment 0", "general.alignment 0 is not a power of two"},
    {"alignment 3", "general.alignment 3 is not a power of two"},
    {"alignment a string", "general.alignment must be a uint32, not a string"},
    {"alignment a uint64", "general.alignment must be a uint32, not a uint64"},
    {"empty tensor name", "tensor info 0: empty name"},
    {"unknown ggml type 31 (removed)", "tensor \"x\": unknown ggml type id 31"},
    {"unknown ggml type 1000", "tensor \"x\": unknown ggml type id 1000"},
    {"ndim 0", "tensor \"x\": ndim 0 is outside [1, 4]"},
    {"ndim 5", "tensor \"x\": ndim 5 is outside [1, 4]"},
    {"a dim 0", "tensor \"x\": ne[1] = 0 is not positive"},
    {"a dim negative", "tensor \"x\": ne[0] = -4 is not positive"},
    {"dims overflowing", "tensor \"x\": element count overflows 63 bits"},
    {"bytes overflowing", "tensor \"x\": byte size overflows 63 bits"},
    {"row not whole blocks", "tensor \"x\": ne[0] = 48 is not a multiple of q4_0's block of 32"},
    {"offset not aligned", "tensor \"x\": offset 4 is not a multiple of the alignment 32"},
    {"offset past the end",
     "tensor \"x\": bytes [64, 80) past the end of the data section (16 bytes)"},
    {"size past the end",
     "tensor \"x\": bytes [0, 16) past the end of the data section (15 bytes)"},
    {"data section past the end",
     "data section at offset 128 is past the end of the file (102 bytes)"},
    {"overlapping tensors", "tensors \"a\" [0, 64) and \"b\" [32, 96) overlap"},
    {"duplicate tensor name", "tensor info 1: duplicate name \"a\" (also tensor info 0)"},
    {"one tensor info more than the count",
     "byte 102 of the padding before the data section is 0x01, not 0 (more tensor infos than "
     "tensor_count = 1?)"},
    {"bytes after the last tensor",
     "the data section holds 32 bytes after its last tensor \"x\" (more tensor infos than "
     "tensor_count = 1?)"},
    {"empty file", "magic at offset 0 needs 4 bytes, the file has 0 left"},
    {"header cut in the tensor count",
     "tensor count at offset 8 needs 8 bytes, the file has 3 left"},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static void build_case(int k, gp_gw *w)
{
    const char *what = cases[k].what;
    int64_t ne[5] = {4, 4, 4, 4, 4};
#define IS(s) (strcmp(what, s) == 0)
    if (IS("bad magic")) {
        gp_gw_bytes(w, "GGML", 4), gp_gw_u32(w, 3), gp_gw_u64(w, 0), gp_gw_u64(w, 0);
    } else if (IS("version 0") || IS("version 1") || IS("version 4")) {
        gp_gw_header(w, (uint32_t)(what[8] - '0'), 0, 0);
    } else if (IS("big-endian version 3")) {
        gp_gw_header(w, 0x03000000u, 0, 0);
    } else if (IS("tensor count 2^60") || IS("kv count 2^60")) {
        gp_gw_header(w, 3, IS("kv count 2^60") ? 0 : 1ull << 60,
                     IS("kv count 2^60") ? 1ull << 60 : 0);
        for (int i = 0; i < 100; i++)
            gp_gw_u8(w, 0);
    } else if (IS("key length 2^62")) {
        gp_gw_header(w, 3, 0, 1), gp_gw_u64(w, 1ull << 62), gp_gw_bytes(w, "abcdef", 6);
    } else if (IS("empty key")) {
        gp_gw_header(w, 3, 0, 1), gp_gw_key(w, "", GP_GGUF_UINT16), gp_gw_u16(w, 1);
    } else if (IS("NUL in a key")) {
        gp_gw_header(w, 3, 0, 1), gp_gw_u64(w, 3), gp_gw_bytes(w, "a\0b", 3);
        gp_gw_u32(w, GP_GGUF_UINT8), gp_gw_u8(w, 1);
    } else if (IS("string length 2^62")) {
        gp_gw_header(w, 3, 0, 1), gp_gw_key(w, "general.name", GP_GGUF_STRING);
        gp_gw_u64(w, 1ull << 62), gp_gw_u32(w, 0);
    } else if (IS("array count 2^60")) {
        gp_gw_header(w, 3, 0, 1),
            gp_gw_kv_arr(w, "tokenizer.ggml.tokens", GP_GGUF_STRING, 1ull << 60);
        gp_gw_str(w, "abcdefghijklmnop");
    } else if (IS("array string length 2^62")) {
        gp_gw_header(w, 3, 0, 1), gp_gw_kv_arr(w, "tokenizer.ggml.tokens", GP_GGUF_STRING, 2);
        gp_gw_str(w, "abcdefghijklmnop"), gp_gw_u64(w, 1ull << 62);
    } else if (IS("u32 array count past the end")) {
        gp_gw_header(w, 3, 0, 1), gp_gw_kv_arr(w, "a", GP_GGUF_UINT32, 7);
        for (int i = 0; i < 6; i++)
            gp_gw_u32(w, 1);
    } else if (IS("unknown value type")) {
        gp_gw_header(w, 3, 0, 1), gp_gw_key(w, "k", GP_GGUF_TYPE_COUNT), gp_gw_u64(w, 0);
    } else if (IS("unknown array element type")) {
        gp_gw_header(w, 3, 0, 1), gp_gw_kv_arr(w, "k", (gp_gguf_type)0xffffffffu, 0);
    } else if (IS("nested array")) {
        gp_gw_header(w, 3, 0, 1), gp_gw_kv_arr(w, "k", GP_GGUF_ARRAY, 1);
        gp_gw_u32(w, GP_GGUF_UINT8), gp_gw_u64(w, 1), gp_gw_u8(w, 1);
    } else if (IS("bool 2")) {
        gp_gw_header(w, 3, 0, 1), gp_gw_key(w, "k", GP_GGUF_BOOL), gp_gw_u8(w, 2);
    } else if (IS("bool array element 2")) {
        gp_gw_header(w, 3, 0, 1), gp_gw_kv_arr(w, "k", GP_GGUF_BOOL, 2);
        gp_gw_u8(w, 1), gp_gw_u8(w, 2);
    } else if (IS("duplicate key")) {
        gp_gw_header(w, 3, 0, 3), gp_gw_kv_u32(w, "a", 1), gp_gw_kv_u32(w, "b", 2);
        gp_gw_kv_str(w, "a", "again");
    } else if (IS("alignment 0") || IS("alignment 3")) {
        one_kv_alignment(w, GP_GGUF_UINT32, (uint64_t)(what[10] - '0'));
    } else if (IS("alignment a string")) {
        one_kv_alignment(w, GP_GGUF_STRING, 0);
    } else if (IS("alignment a uint64")) {
        one_kv_alignment(w, GP_GGUF_UINT64, 32);
    } else if (IS("empty tensor name")) {
        gp_gw_header(w, 3, 1, 0), gp_gw_tensor_info(w, "", 1, ne, 0, 0);
        gp_gw_pad(w, 32), gp_gw_bytes(w, "0123456789abcdef", 16);
    } else if (IS("unknown ggml type 31 (removed)")) {
        one_tensor(w, 1, ne, 31, 0, 16);
    } else if (IS("unknown ggml type 1000")) {
        one_tensor(w, 1, ne, 1000, 0, 16);
    } else if (IS("ndim 0")) {
        one_tensor(w, 0, ne, 0, 0, 16);
    } else if (IS("ndim 5")) {
        one_tensor(w, 5, ne, 0, 0, 16);
    } else if (IS("a dim 0")) {
        ne[1] = 0;
        one_tensor(w, 2, ne, 0, 0, 16);
    } else if (IS("a dim negative")) {
        ne[0] = -4;
        one_tensor(w, 2, ne, 0, 0, 16);
    } else if (IS("dims overflowing")) {
        ne[0] = ne[1] = 1ll << 32;
        one_tensor(w, 3, ne, 0, 0, 16);
    } else if (IS("bytes overflowing")) {
        ne[0] = 1ll << 62;
        one_tensor(w, 1, ne, 0, 0, 16);
    } else if (IS("row not whole blocks")) {
        ne[0] = 48;
        one_tensor(w, 1, ne, 2, 0, 64);
    } else if (IS("offset not aligned")) {
        one_tensor(w, 1, ne, 0, 4, 32);
    } else if (IS("offset past the end")) {
        one_tensor(w, 1, ne, 0, 64, 16);
    } else if (IS("size past the end")) {
        one_tensor(w, 1, ne, 0, 0, 15);
    } else if (IS("data section past the end")) {
        gp_gw_header(w, 3, 1, 1), gp_gw_kv_str(w, "general.architecture", "llama");
        gp_gw_tensor_info(w, "x", 1, ne, 0, 0);
    } else if (IS("overlapping tensors")) {
        two_tensors(w, "b", 16, 0, 16, 32, 96);
    } else if (IS("one tensor info more than the count")) {
        /* "y"'s info where the reader expects padding, its data where it expects the section. */
        gp_gw_header(w, 3, 1, 1), gp_gw_kv_str(w, "general.architecture", "llama");
        gp_gw_tensor_info(w, "x", 1, ne, 0, 0);
        gp_gw_tensor_info(w, "y", 1, ne, 0, 32);
        gp_gw_pad(w, 32);
        for (size_t i = 0; i < 64; i++)
            gp_gw_u8(w, 0);
    } else if (IS("bytes after the last tensor")) {
        one_tensor(w, 1, ne, 0, 0, 16 + 32);
    } else if (IS("duplicate tensor name")) {
        two_tensors(w, "a", 4, 0, 4, 32, 48);
    } else if (IS("empty file")) {
        /* nothing */
    } else if (IS("header cut in the tensor count")) {
        gp_gw_header(w, 3, 0, 0);
        w->len = 11;
    } else {
        GP_ASSERT(!"no such case");
    }
#undef IS
}

static void test_hostile(void)
{
    for (int k = 0; k < N_CASES; k++) {
        gp_gw w;
        gp_gw_init(&w);
        build_case(k, &w);
        void *copy;
        err[0] = '\0';
        gp_gguf *g = open_copy(&w, &copy);
        char want[1024];
        snprintf(want, sizeof want, "t.gguf: bad GGUF file (%s)", cases[k].reason);
        if (g || strcmp(err, want) != 0)
            fprintf(stderr, "\ncase \"%s\":\n  expected %s\n  got      %s\n", cases[k].what, want,
                    g ? "(opened)" : err);
        CU_ASSERT_PTR_NULL(g);
        CU_ASSERT_STRING_EQUAL(err, want);
        gp_gguf_close(g);
        free(copy);
        gp_gw_free(&w);
    }
}

/* Every reason of the catalogue is written in docs/errors.md, whole. */
static void test_catalogue_documented(void)
{
    char *doc = gp_test_read_file(gp_test_path("docs/errors.md"), NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    const char *section = strstr(doc, "## GGUF files");
    CU_ASSERT_PTR_NOT_NULL(section);
    for (int k = 0; k < N_CASES && section; k++) {
        char want[1024];
        snprintf(want, sizeof want, "t.gguf: bad GGUF file (%s)", cases[k].reason);
        if (!strstr(section, want))
            fprintf(stderr, "\ndocs/errors.md lacks: %s\n", want);
        CU_ASSERT_PTR_NOT_NULL(strstr(section, want));
    }
    free(doc);
}

/* Every prefix of a valid file fails with the loader's message; none reads past its bytes. */
static void test_truncated(void)
{
    gp_gw w;
    gp_gw_init(&w);
    write_everything(&w, 3);
    size_t full = w.len;
    int bad_form = 0, opened = 0;
    for (size_t len = 0; len < full; len++) {
        w.len = len;
        void *copy;
        gp_gguf *g = open_copy(&w, &copy);
        if (g)
            opened++;
        else if (strncmp(err, "t.gguf: bad GGUF file (", 23) != 0 || err[strlen(err) - 1] != ')')
            bad_form++;
        gp_gguf_close(g);
        free(copy);
    }
    CU_ASSERT_EQUAL(opened, 0);
    CU_ASSERT_EQUAL(bad_form, 0);
    w.len = full;
    void *copy;
    gp_gguf *g = open_copy(&w, &copy);
    CU_ASSERT_PTR_NOT_NULL(g); /* and the whole file opens */
    gp_gguf_close(g);
    free(copy);
    gp_gw_free(&w);
}

/* Every single-byte change of a valid file either opens or fails with the loader's message. */
static void test_damaged_bytes(void)
{
    gp_gw w;
    gp_gw_init(&w);
    write_everything(&w, 3);
    int bad_form = 0;
    for (size_t at = 0; at < w.len; at++) {
        unsigned char was = w.buf[at];
        for (int v = 0; v < 3; v++) {
            w.buf[at] = v == 0 ? (unsigned char)(was ^ 0x80) : v == 1 ? 0xff : 0x00;
            void *copy;
            gp_gguf *g = open_copy(&w, &copy);
            if (!g && strncmp(err, "t.gguf: bad GGUF file (", 23) != 0)
                bad_form++;
            gp_gguf_close(g);
            free(copy);
        }
        w.buf[at] = was;
    }
    CU_ASSERT_EQUAL(bad_form, 0);
    gp_gw_free(&w);
}

static void test_not_files(void)
{
    char want[4200];
    const char *missing = gp_test_tmpfile(".gguf");
    CU_ASSERT_PTR_NULL(gp_gguf_open(missing, err, sizeof err));
    snprintf(want, sizeof want, "%s: cannot open (No such file or directory)", missing);
    CU_ASSERT_STRING_EQUAL(err, want);
    CU_ASSERT_PTR_NULL(gp_gguf_open(GP_SOURCE_DIR, err, sizeof err));
    snprintf(want, sizeof want, "%s: cannot open (not a regular file: a folder)", GP_SOURCE_DIR);
    CU_ASSERT_STRING_EQUAL(err, want);
    const char *empty = gp_test_tmpfile(".gguf");
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(empty, "", 0), 0);
    CU_ASSERT_PTR_NULL(gp_gguf_open(empty, err, sizeof err));
    snprintf(want, sizeof want,
             "%s: bad GGUF file (magic at offset 0 needs 4 bytes, the file has 0 left)", empty);
    CU_ASSERT_STRING_EQUAL(err, want);
    remove(empty);
    /* a NULL or tiny error buffer is fine */
    CU_ASSERT_PTR_NULL(gp_gguf_open(missing, NULL, 0));
    char tiny[8];
    CU_ASSERT_PTR_NULL(gp_gguf_open_mem("GGML", 4, "t.gguf", tiny, sizeof tiny));
    CU_ASSERT_STRING_EQUAL(tiny, "t.gguf:");
}

/* ---- files written by others ---- */

/* tests/gguf/fixture.gguf, written by gguf-py's GGUFWriter (scripts/gguf/make_fixture.py). */
static void test_fixture(void)
{
    gp_gguf *g = gp_gguf_open(gp_test_path("tests/gguf/fixture.gguf"), err, sizeof err);
    if (!g)
        fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    int64_t iv;
    double fv;
    int bv;
    gp_gguf_str sv;
    gp_gguf_type et;
    uint64_t n;
    CU_ASSERT_EQUAL(gp_gguf_version(g), 3);
    CU_ASSERT_EQUAL(gp_gguf_alignment(g), 64);
    CU_ASSERT_EQUAL(gp_gguf_kv_count(g), 21);
    CU_ASSERT_STRING_EQUAL(gp_gguf_kv_key(g, 0), "general.architecture");
    CU_ASSERT_EQUAL(gp_gguf_get_str(g, "general.architecture", &sv), 0);
    CU_ASSERT(str_is(sv, "llama"));
    CU_ASSERT_EQUAL(gp_gguf_get_str(g, "general.name", &sv), 0);
    CU_ASSERT(str_is(sv, "gplan fixture"));
    CU_ASSERT_EQUAL(gp_gguf_get_int(g, "llama.block_count", &iv), 0);
    CU_ASSERT_EQUAL(iv, 2);
    CU_ASSERT_EQUAL(gp_gguf_kv_type(g, gp_gguf_find(g, "llama.block_count")), GP_GGUF_UINT32);
    CU_ASSERT_EQUAL(gp_gguf_get_int(g, "llama.context_length", &iv), 0);
    CU_ASSERT_EQUAL(iv, 128);
    CU_ASSERT_EQUAL(gp_gguf_get_float(g, "llama.rope.freq_base", &fv), 0);
    CU_ASSERT_EQUAL(fv, 10000.0);
    CU_ASSERT_EQUAL(gp_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &fv), 0);
    CU_ASSERT_EQUAL(fv, (double)1e-5f);
    static const struct {
        const char *key;
        gp_gguf_type type;
        int64_t v;
    } ints[] = {{"test.u8", GP_GGUF_UINT8, 200},          {"test.i8", GP_GGUF_INT8, -100},
                {"test.u16", GP_GGUF_UINT16, 60000},      {"test.i16", GP_GGUF_INT16, -30000},
                {"test.i32", GP_GGUF_INT32, -2000000000}, {"test.u64", GP_GGUF_UINT64, 1ll << 40},
                {"test.i64", GP_GGUF_INT64, -(1ll << 50)}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        CU_ASSERT_EQUAL(gp_gguf_kv_type(g, gp_gguf_find(g, ints[i].key)), ints[i].type);
        CU_ASSERT_EQUAL(gp_gguf_get_int(g, ints[i].key, &iv), 0);
        CU_ASSERT_EQUAL(iv, ints[i].v);
    }
    CU_ASSERT_EQUAL(gp_gguf_get_float(g, "test.f64", &fv), 0);
    CU_ASSERT_EQUAL(fv, 3.141592653589793);
    CU_ASSERT_EQUAL(gp_gguf_get_bool(g, "test.bool", &bv), 0);
    CU_ASSERT_EQUAL(bv, 1);
    CU_ASSERT_EQUAL(gp_gguf_get_str(g, "test.utf8", &sv), 0);
    CU_ASSERT(str_is(sv, "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c"));
    int64_t kv = gp_gguf_find(g, "test.arr_i32");
    CU_ASSERT_EQUAL(gp_gguf_get_arr(g, "test.arr_i32", &et, &n), 0);
    CU_ASSERT_EQUAL(et, GP_GGUF_INT32);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT(gp_gguf_arr_int(g, kv, 1, &iv) == 0 && iv == -2);
    kv = gp_gguf_find(g, "test.arr_f32");
    CU_ASSERT(gp_gguf_arr_float(g, kv, 1, &fv) == 0 && fv == -1.25);
    kv = gp_gguf_find(g, "test.arr_str");
    CU_ASSERT(gp_gguf_arr_str(g, kv, 1, &sv) == 0 && sv.len == 0);
    CU_ASSERT(gp_gguf_arr_str(g, kv, 2, &sv) == 0 && str_is(sv, "\xc3\xa9t\xc3\xa9"));
    kv = gp_gguf_find(g, "tokenizer.ggml.tokens");
    CU_ASSERT(gp_gguf_arr_str(g, kv, 3, &sv) == 0 && str_is(sv, " there"));

    CU_ASSERT_EQUAL_FATAL(gp_gguf_tensor_count(g), 4);
    const gp_gguf_tensor *t = gp_gguf_tensor_find(g, "blk.0.attn_norm.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT(t->ggml_type == 0 && t->ndim == 2 && t->ne[0] == 2 && t->ne[1] == 3);
    CU_ASSERT(t->offset == 0 && t->nbytes == 24);
    float f[6];
    memcpy(f, t->data, sizeof f);
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(f[i], 0.5f * (float)i);
    t = gp_gguf_tensor_find(g, "token_embd.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT(t->dtype == GP_F16 && t->ndim == 1 && t->ne[0] == 4 && t->offset == 64);
    uint16_t h[4];
    memcpy(h, t->data, sizeof h);
    CU_ASSERT(h[0] == 0x3c00 && h[1] == 0xc000 && h[2] == 0x3800 && h[3] == 0x7bff);
    t = gp_gguf_tensor_find(g, "test.ids");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    int32_t ids[5];
    memcpy(ids, t->data, sizeof ids);
    CU_ASSERT(t->dtype == GP_I32 && ids[0] == 7 && ids[1] == -1 && ids[3] == 2147483647);
    t = gp_gguf_tensor_find(g, "blk.0.attn_q.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT(t->dtype == GP_Q8_0 && t->ndim == 2 && t->ne[0] == 32 && t->ne[1] == 2);
    CU_ASSERT(t->nbytes == 68 && t->offset == 192);
    const unsigned char *q = t->data;
    CU_ASSERT(q[0] == 0 && q[34] == 34 && q[67] == 67);
    gp_gguf_close(g);
}

/* llama.cpp's vocabulary files (../shared/data/vocab); the values are what gguf-py 0.19 reads. */
static void test_vocab_files(void)
{
    static const struct {
        const char *file, *arch, *model;
        int64_t n_kv, n_tokens, bos, eos;
        const char *tok[5]; /* tokens 0, 1, 2, 100, 1000 */
        int64_t n_merges;
        const char *merge[3];
        int64_t type1000;
    } v[] = {
        {"ggml-vocab-gpt-2.gguf",
         "gpt2",
         "gpt2",
         16,
         50257,
         50256,
         50256,
         {"!", "\"", "#", "\xc2\xa7", "ale"},
         50000,
         {"\xc4\xa0 t", "\xc4\xa0 a", "h e"},
         1},
        {"ggml-vocab-llama-bpe.gguf",
         "llama",
         "gpt2",
         20,
         128256,
         128000,
         128001,
         {"!", "\"", "#", "\xc2\xa7", "indow"},
         280147,
         {"\xc4\xa0 \xc4\xa0", "\xc4\xa0 \xc4\xa0\xc4\xa0\xc4\xa0",
          "\xc4\xa0\xc4\xa0 \xc4\xa0\xc4\xa0"},
         1},
        {"ggml-vocab-llama-spm.gguf",
         "llama",
         "llama",
         22,
         32000,
         1,
         2,
         {"<unk>", "<s>", "</s>", "<0x61>", "ied"},
         -1,
         {0},
         1},
        {"ggml-vocab-phi-3.gguf",
         "phi3",
         "llama",
         26,
         32064,
         1,
         32000,
         {"<unk>", "<s>", "</s>", "<0x61>", "ied"},
         -1,
         {0},
         1},
    };
    char path[4200];
    snprintf(path, sizeof path, "%s/../shared/data/vocab/%s", GP_SOURCE_DIR, v[0].file);
    if (access(path, R_OK) != 0) {
        printf("(skipped: no ../shared/data/vocab) ");
        return;
    }
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        snprintf(path, sizeof path, "%s/../shared/data/vocab/%s", GP_SOURCE_DIR, v[i].file);
        gp_gguf *g = gp_gguf_open(path, err, sizeof err);
        if (!g)
            fprintf(stderr, "\n%s\n", err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        gp_gguf_str s;
        int64_t iv;
        gp_gguf_type et;
        uint64_t n;
        CU_ASSERT_EQUAL(gp_gguf_kv_count(g), v[i].n_kv);
        CU_ASSERT_EQUAL(gp_gguf_tensor_count(g), 0);
        CU_ASSERT(gp_gguf_get_str(g, "general.architecture", &s) == 0 && str_is(s, v[i].arch));
        CU_ASSERT(gp_gguf_get_str(g, "tokenizer.ggml.model", &s) == 0 && str_is(s, v[i].model));
        CU_ASSERT(gp_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &iv) == 0 && iv == v[i].bos);
        CU_ASSERT(gp_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &iv) == 0 && iv == v[i].eos);
        CU_ASSERT_EQUAL(gp_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n), 0);
        CU_ASSERT_EQUAL(et, GP_GGUF_STRING);
        CU_ASSERT_EQUAL(n, (uint64_t)v[i].n_tokens);
        int64_t kv = gp_gguf_find(g, "tokenizer.ggml.tokens");
        static const uint64_t at[5] = {0, 1, 2, 100, 1000};
        for (int j = 0; j < 5; j++)
            CU_ASSERT(gp_gguf_arr_str(g, kv, at[j], &s) == 0 && str_is(s, v[i].tok[j]));
        kv = gp_gguf_find(g, "tokenizer.ggml.token_type");
        CU_ASSERT(gp_gguf_arr_int(g, kv, 1000, &iv) == 0 && iv == v[i].type1000);
        kv = gp_gguf_find(g, "tokenizer.ggml.merges");
        if (v[i].n_merges < 0) {
            CU_ASSERT_EQUAL(kv, -1);
            double sc;
            kv = gp_gguf_find(g, "tokenizer.ggml.scores");
            CU_ASSERT(gp_gguf_arr_float(g, kv, 1000, &sc) == 0 && sc == -741.0);
        } else {
            CU_ASSERT(gp_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n) == 0 &&
                      n == (uint64_t)v[i].n_merges);
            for (int j = 0; j < 3; j++)
                CU_ASSERT(gp_gguf_arr_str(g, kv, (uint64_t)j, &s) == 0 && str_is(s, v[i].merge[j]));
        }
        gp_gguf_close(g);
    }
}

/* ---- GGUF files as checkpoints ---- */

static void test_name_aliases(void)
{
    static const struct {
        const char *arch, *gguf, *hf;
    } pairs[] = {
        {"llama", "token_embd.weight", "model.embed_tokens.weight"},
        {"llama", "output_norm.weight", "model.norm.weight"},
        {"llama", "output.weight", "lm_head.weight"},
        {"llama", "blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"},
        {"llama", "blk.3.attn_q.weight", "model.layers.3.self_attn.q_proj.weight"},
        {"llama", "blk.3.attn_q.bias", "model.layers.3.self_attn.q_proj.bias"},
        {"llama", "blk.12.attn_k.weight", "model.layers.12.self_attn.k_proj.weight"},
        {"llama", "blk.29.attn_v.weight", "model.layers.29.self_attn.v_proj.weight"},
        {"llama", "blk.7.attn_output.weight", "model.layers.7.self_attn.o_proj.weight"},
        {"llama", "blk.7.ffn_norm.weight", "model.layers.7.post_attention_layernorm.weight"},
        {"llama", "blk.100.ffn_gate.weight", "model.layers.100.mlp.gate_proj.weight"},
        {"llama", "blk.1.ffn_up.weight", "model.layers.1.mlp.up_proj.weight"},
        {"llama", "blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"},
        {NULL, "blk.2.attn_q.weight", "model.layers.2.self_attn.q_proj.weight"},
        {"qwen2", "blk.2.attn_k.bias", "model.layers.2.self_attn.k_proj.bias"},
        {"gpt2", "token_embd.weight", "transformer.wte.weight"},
        {"gpt2", "position_embd.weight", "transformer.wpe.weight"},
        {"gpt2", "output_norm.weight", "transformer.ln_f.weight"},
        {"gpt2", "output_norm.bias", "transformer.ln_f.bias"},
        {"gpt2", "output.weight", "lm_head.weight"},
        {"gpt2", "blk.0.attn_norm.weight", "transformer.h.0.ln_1.weight"},
        {"gpt2", "blk.0.attn_norm.bias", "transformer.h.0.ln_1.bias"},
        {"gpt2", "blk.11.attn_qkv.weight", "transformer.h.11.attn.c_attn.weight"},
        {"gpt2", "blk.11.attn_qkv.bias", "transformer.h.11.attn.c_attn.bias"},
        {"gpt2", "blk.4.attn_output.weight", "transformer.h.4.attn.c_proj.weight"},
        {"gpt2", "blk.4.ffn_norm.bias", "transformer.h.4.ln_2.bias"},
        {"gpt2", "blk.4.ffn_up.weight", "transformer.h.4.mlp.c_fc.weight"},
        {"gpt2", "blk.4.ffn_down.bias", "transformer.h.4.mlp.c_proj.bias"},
    };
    char out[256];
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        out[0] = '\0';
        CU_ASSERT_EQUAL(gp_gguf_name_to_hf(pairs[i].arch, pairs[i].gguf, out, sizeof out), 0);
        if (strcmp(out, pairs[i].hf) != 0)
            fprintf(stderr, "\n%s -> %s, expected %s\n", pairs[i].gguf, out, pairs[i].hf);
        CU_ASSERT_STRING_EQUAL(out, pairs[i].hf);
        out[0] = '\0';
        CU_ASSERT_EQUAL(gp_gguf_name_from_hf(pairs[i].arch, pairs[i].hf, out, sizeof out), 0);
        CU_ASSERT_STRING_EQUAL(out, pairs[i].gguf);
    }
    static const char *const none[] = {
        "blk.x.attn_q.weight",
        "blk.01.attn_q.weight",
        "blk.3.attn_q",
        "blk.3.attn_q.scale",
        "blk..attn_q.weight",
        "blk.3.attn_qkv.weight",
        "token_embd.weight.weight",
        "",
        "blk.1234567890.attn_q.weight",
        "model.layers.3.self_attn.q_proj.weight",
    };
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        CU_ASSERT_EQUAL(gp_gguf_name_to_hf("llama", none[i], out, sizeof out), -1);
    CU_ASSERT_EQUAL(gp_gguf_name_from_hf("llama", "transformer.h.0.ln_1.weight", out, sizeof out),
                    -1);
    CU_ASSERT_EQUAL(gp_gguf_name_from_hf("gpt2", "model.norm.weight", out, sizeof out), -1);
    CU_ASSERT_EQUAL(gp_gguf_name_to_hf("llama", NULL, out, sizeof out), -1);
    /* an alias that does not fit */
    CU_ASSERT_EQUAL(gp_gguf_name_to_hf("llama", "blk.3.attn_q.weight", out, 20), -1);
    CU_ASSERT_EQUAL(gp_gguf_name_to_hf("llama", "blk.3.attn_q.weight", out, 38), -1); /* 38 chars */
    CU_ASSERT_EQUAL(gp_gguf_name_to_hf("llama", "blk.3.attn_q.weight", out, 39), 0);

    /* gemma2 / gemma3 and phi3 tables: Gemma's ffn_norm is the norm before the MLP, phi3's
     * fused projections; each name both ways */
    static const struct {
        const char *arch, *gguf, *hf;
    } fam[] = {
        {"gemma2", "blk.0.post_attention_norm.weight",
         "model.layers.0.post_attention_layernorm.weight"},
        {"gemma2", "blk.1.ffn_norm.weight", "model.layers.1.pre_feedforward_layernorm.weight"},
        {"gemma2", "blk.1.post_ffw_norm.weight",
         "model.layers.1.post_feedforward_layernorm.weight"},
        {"gemma2", "blk.1.ffn_gate.weight", "model.layers.1.mlp.gate_proj.weight"},
        {"gemma3", "blk.2.attn_q_norm.weight", "model.layers.2.self_attn.q_norm.weight"},
        {"gemma3", "blk.2.attn_k_norm.weight", "model.layers.2.self_attn.k_norm.weight"},
        {"gemma3", "blk.2.attn_norm.weight", "model.layers.2.input_layernorm.weight"},
        {"gemma3", "output.weight", "lm_head.weight"},
        {"phi3", "blk.3.attn_qkv.weight", "model.layers.3.self_attn.qkv_proj.weight"},
        {"phi3", "blk.3.ffn_up.weight", "model.layers.3.mlp.gate_up_proj.weight"},
        {"phi3", "blk.3.ffn_norm.weight", "model.layers.3.post_attention_layernorm.weight"},
        {"phi3", "blk.3.attn_output.weight", "model.layers.3.self_attn.o_proj.weight"},
        /* the mixtures' routers and experts: merged (a stacked '*' name) or, in old Mixtral
         * files, one by one (two numbers: the layer, then the expert) */
        {"qwen3moe", "blk.5.ffn_gate_inp.weight", "model.layers.5.mlp.gate.weight"},
        {"qwen3moe", "blk.5.ffn_gate_exps.weight", "model.layers.5.mlp.experts.*.gate_proj.weight"},
        {"qwen3moe", "blk.5.ffn_up_exps.weight", "model.layers.5.mlp.experts.*.up_proj.weight"},
        {"qwen3moe", "blk.5.ffn_down_exps.weight", "model.layers.5.mlp.experts.*.down_proj.weight"},
        {"qwen3moe", "blk.5.attn_q_norm.weight", "model.layers.5.self_attn.q_norm.weight"},
        {"llama", "blk.3.ffn_gate_inp.weight", "model.layers.3.block_sparse_moe.gate.weight"},
        {"llama", "blk.3.ffn_gate_exps.weight",
         "model.layers.3.block_sparse_moe.experts.*.w1.weight"},
        {"llama", "blk.3.ffn_up_exps.weight", "model.layers.3.block_sparse_moe.experts.*.w3.weight"},
        {"llama", "blk.3.ffn_down_exps.weight",
         "model.layers.3.block_sparse_moe.experts.*.w2.weight"},
        {"llama", "blk.31.ffn_gate.7.weight", "model.layers.31.block_sparse_moe.experts.7.w1.weight"},
        {"llama", "blk.0.ffn_up.12.weight", "model.layers.0.block_sparse_moe.experts.12.w3.weight"},
        {"llama", "blk.2.ffn_down.0.weight", "model.layers.2.block_sparse_moe.experts.0.w2.weight"},
    };
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        out[0] = '\0';
        CU_ASSERT_EQUAL(gp_gguf_name_to_hf(fam[i].arch, fam[i].gguf, out, sizeof out), 0);
        CU_ASSERT_STRING_EQUAL(out, fam[i].hf);
        out[0] = '\0';
        CU_ASSERT_EQUAL(gp_gguf_name_from_hf(fam[i].arch, fam[i].hf, out, sizeof out), 0);
        CU_ASSERT_STRING_EQUAL(out, fam[i].gguf);
    }
    /* llama's names that these families do not use */
    CU_ASSERT_EQUAL(gp_gguf_name_from_hf("gemma2", "model.layers.0.mlp.gate_up_proj.weight", out,
                                         sizeof out), -1);
    CU_ASSERT_EQUAL(gp_gguf_name_to_hf("phi3", "blk.0.attn_q.weight", out, sizeof out), -1);
    /* a per-expert name's numbers are two, no more; a '*' is only itself */
    CU_ASSERT_EQUAL(gp_gguf_name_to_hf("llama", "blk.1.ffn_gate.2.3.weight", out, sizeof out), -1);
    CU_ASSERT_EQUAL(gp_gguf_name_to_hf("llama", "blk.1.ffn_gate.01.weight", out, sizeof out), -1);
    CU_ASSERT_EQUAL(gp_gguf_name_from_hf("qwen3moe", "model.layers.1.mlp.experts.3.up_proj.weight",
                                         out, sizeof out), -1);
}

/* Bytes 0, 1, 2, ... of n. */
static unsigned char *pattern(size_t n, unsigned seed)
{
    unsigned char *p = malloc(n);
    GP_ASSERT(p != NULL);
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 7 + seed);
    return p;
}

static void test_weights_gguf(void)
{
    uint16_t emb[16 * 8]; /* f16 [16, 8], ne {8, 16} */
    for (int i = 0; i < 16 * 8; i++)
        emb[i] = gp_f32_to_f16((float)i * 0.25f - 3.0f);
    float norm[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    unsigned char *q41 = pattern(4 * 20, 1);     /* q4_1 ne {32, 4}: 4 rows of one block */
    unsigned char *q80 = pattern(3 * 2 * 34, 2); /* q8_0 ne {64, 3} */
    unsigned char *q2k = pattern(2 * 84, 3);     /* q2_k ne {256, 2}: listed, not usable */
    uint16_t onorm[8];
    for (int i = 0; i < 8; i++)
        onorm[i] = gp_f32_to_bf16((float)i);
    const gp_gw_tensor ts[] = {
        {"token_embd.weight", 1, 2, {8, 16}, emb, sizeof emb},
        {"blk.0.attn_norm.weight", 0, 1, {8}, norm, sizeof norm},
        {"blk.0.attn_q.weight", 3, 2, {32, 4}, q41, 4 * 20},
        {"blk.1.ffn_down.weight", 8, 2, {64, 3}, q80, 3 * 2 * 34},
        {"blk.0.ffn_up.weight", 10, 2, {256, 2}, q2k, 2 * 84},
        {"output_norm.weight", 30, 1, {8}, onorm, sizeof onorm},
    };
    gp_gw w;
    gp_gw_init(&w);
    gp_gw_model(&w, "llama", 32, ts, 6);
    const char *p = gp_test_tmpfile(".bin"); /* told by its magic, not its name */
    char path[4200];
    snprintf(path, sizeof path, "%s", p);
    CU_ASSERT_EQUAL_FATAL(gp_gw_save(&w, path), 0);
    gp_gw_free(&w);

    gp_weights *wt = gp_weights_open(path, err, sizeof err);
    if (!wt)
        fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(wt);
    CU_ASSERT_EQUAL(gp_weights_count(wt), 6);
    CU_ASSERT_EQUAL(gp_weights_shard_count(wt), 1);
    /* listed in name order, by their GGUF names */
    CU_ASSERT_STRING_EQUAL(gp_weights_get(wt, 0)->name, "blk.0.attn_norm.weight");
    CU_ASSERT_STRING_EQUAL(gp_weights_get(wt, 5)->name, "token_embd.weight");
    CU_ASSERT_PTR_NULL(gp_weights_get(wt, 6));
    static const struct {
        const char *gguf, *hf;
        int supported;
        gp_dtype dtype;
        const char *file_dtype;
        int ndim;
        int64_t shape[2];
        int src; /* index into ts */
    } want[] = {
        {"token_embd.weight", "model.embed_tokens.weight", 1, GP_F16, "f16", 2, {16, 8}, 0},
        {"blk.0.attn_norm.weight",
         "model.layers.0.input_layernorm.weight",
         1,
         GP_F32,
         "f32",
         1,
         {8},
         1},
        {"blk.0.attn_q.weight",
         "model.layers.0.self_attn.q_proj.weight",
         1,
         GP_Q4_1,
         "q4_1",
         2,
         {4, 32},
         2},
        {"blk.1.ffn_down.weight",
         "model.layers.1.mlp.down_proj.weight",
         1,
         GP_Q8_0,
         "q8_0",
         2,
         {3, 64},
         3},
        {"blk.0.ffn_up.weight",
         "model.layers.0.mlp.up_proj.weight",
         0,
         GP_F32,
         "q2_k",
         2,
         {2, 256},
         4},
        {"output_norm.weight", "model.norm.weight", 1, GP_BF16, "bf16", 1, {8}, 5},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const gp_st_tensor *t = gp_weights_find(wt, want[i].gguf);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_PTR_EQUAL(gp_weights_find(wt, want[i].hf), t);
        CU_ASSERT_STRING_EQUAL(t->name, want[i].gguf);
        CU_ASSERT_EQUAL(t->supported, want[i].supported);
        if (t->supported)
            CU_ASSERT_EQUAL(t->dtype, want[i].dtype);
        CU_ASSERT_STRING_EQUAL(t->file_dtype, want[i].file_dtype);
        CU_ASSERT_EQUAL(t->ndim, want[i].ndim);
        CU_ASSERT_EQUAL(t->shape[0], want[i].shape[0]);
        if (t->ndim > 1)
            CU_ASSERT_EQUAL(t->shape[1], want[i].shape[1]);
        CU_ASSERT_EQUAL(t->nbytes, ts[want[i].src].nbytes);
        CU_ASSERT_EQUAL(memcmp(t->data, ts[want[i].src].data, t->nbytes), 0);
        CU_ASSERT_EQUAL((uintptr_t)t->data % 32, 0); /* the mapping is page-aligned */
    }
    CU_ASSERT_PTR_NULL(gp_weights_find(wt, "model.layers.2.self_attn.q_proj.weight"));
    CU_ASSERT_PTR_NULL(gp_weights_find(wt, "transformer.wte.weight")); /* a gpt2 name */

    /* declarations by Hugging Face names */
    gp_weight_decl ok[] = {
        {"model.embed_tokens.weight", GP_F32, 2, {16, 8}},
        {"model.layers.0.input_layernorm.weight", GP_F32, 1, {8}},
        {"model.layers.0.self_attn.q_proj.weight", GP_Q4_1, 2, {4, 32}},
        {"blk.1.ffn_down.weight", GP_Q8_0, 2, {3, 64}},
        {"model.norm.weight", GP_F16, 1, {8}},
    };
    unsigned char convert[5];
    CU_ASSERT_EQUAL(gp_weights_check(wt, ok, 5, convert, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(err, "");
    CU_ASSERT(convert[0] == 1 && convert[1] == 0 && convert[2] == 0 && convert[3] == 0 &&
              convert[4] == 1);
    gp_weight_decl badd[] = {
        {"model.embed_tokens.weight", GP_F16, 2, {8, 16}},
        {"model.layers.0.self_attn.q_proj.weight", GP_F32, 2, {4, 32}},
        {"model.layers.1.mlp.down_proj.weight", GP_Q4_0, 2, {3, 64}},
        {"model.layers.0.mlp.up_proj.weight", GP_F32, 2, {2, 256}},
        {"model.layers.5.mlp.up_proj.weight", GP_F32, 2, {2, 256}},
    };
    CU_ASSERT_EQUAL(gp_weights_check(wt, badd, 5, NULL, err, sizeof err), 5);
    CU_ASSERT_STRING_EQUAL(
        err, "weights: \"model.embed_tokens.weight\": expected shape [8, 16] f16, file has [16, 8] "
             "f16, the transpose (a plan compiled for another layout: for a GGUF file's, compile "
             "with --gguf FILE)\n"
             "weights: \"model.layers.0.self_attn.q_proj.weight\": expected shape [4, 32] f32, "
             "file has [4, 32] q4_1\n"
             "weights: \"model.layers.1.mlp.down_proj.weight\": expected shape [3, 64] q4_0, file "
             "has [3, 64] q8_0\n"
             "weights: \"model.layers.0.mlp.up_proj.weight\": expected shape [2, 256] f32, file "
             "has [2, 256] q2_k (unsupported dtype)\n"
             "weights: missing tensor \"model.layers.5.mlp.up_proj.weight\"");

    /* reads: quantized as itself is a copy; into f32 is refused; floats convert */
    const gp_st_tensor *tq = gp_weights_find(wt, "model.layers.0.self_attn.q_proj.weight");
    unsigned char qbuf[80];
    CU_ASSERT_EQUAL(gp_weights_read(tq, GP_Q4_1, qbuf, sizeof qbuf, err, sizeof err), 0);
    CU_ASSERT_EQUAL(memcmp(qbuf, q41, 80), 0);
    CU_ASSERT_EQUAL(gp_weights_read(tq, GP_Q4_1, qbuf, 79, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err,
                           "weights: \"blk.0.attn_q.weight\": 80 bytes of q4_1, buffer has 79");
    float f[128];
    CU_ASSERT_EQUAL(gp_weights_read(tq, GP_F32, f, 4 * 32 * 4, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "weights: \"blk.0.attn_q.weight\": reading q4_1 data as f32 needs "
                                "a dequantizer, not connected yet");
    const gp_st_tensor *te = gp_weights_find(wt, "model.embed_tokens.weight");
    CU_ASSERT_EQUAL(gp_weights_read(te, GP_F32, f, sizeof f, err, sizeof err), 0);
    CU_ASSERT(f[0] == -3.0f && f[9] == -0.75f && f[127] == 28.75f);
    const gp_st_tensor *tu = gp_weights_find(wt, "blk.0.ffn_up.weight");
    CU_ASSERT_EQUAL(gp_weights_read(tu, GP_F32, f, 4, err, sizeof err), -1);
    gp_weights_close(wt);
    remove(path);

    /* a gpt2 file answers to the gpt2 names; a damaged one gets the GGUF message */
    float bias[4] = {1, 2, 3, 4};
    const gp_gw_tensor g2[] = {{"blk.0.attn_qkv.bias", 0, 1, {4}, bias, sizeof bias}};
    gp_gw_init(&w);
    gp_gw_model(&w, "gpt2", 32, g2, 1);
    CU_ASSERT_EQUAL_FATAL(gp_gw_save(&w, path), 0);
    wt = gp_weights_open(path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(wt);
    CU_ASSERT_PTR_NOT_NULL(gp_weights_find(wt, "transformer.h.0.attn.c_attn.bias"));
    CU_ASSERT_PTR_NULL(gp_weights_find(wt, "model.layers.0.self_attn.q_proj.bias"));
    gp_weights_close(wt);
    w.len -= 1;
    CU_ASSERT_EQUAL_FATAL(gp_gw_save(&w, path), 0);
    CU_ASSERT_PTR_NULL(gp_weights_open(path, err, sizeof err));
    char want_err[4400];
    snprintf(want_err, sizeof want_err,
             "%s: bad GGUF file (tensor \"blk.0.attn_qkv.bias\": bytes [0, 16) past the end of "
             "the data section (15 bytes))",
             path);
    CU_ASSERT_STRING_EQUAL(err, want_err);
    gp_gw_free(&w);
    remove(path);
    free(q41);
    free(q80);
    free(q2k);
}

/* ---- gp_weights_scan ---- */

enum { SCAN_MAX = 16 };
typedef struct {
    int n;
    gp_tensor_scan t[SCAN_MAX];
    char names[SCAN_MAX][32], dtypes[SCAN_MAX][16]; /* copies: the scan's live until it returns */
} scan_log;

static void log_tensor(void *user, const gp_tensor_scan *t)
{
    scan_log *l = user;
    if (l->n == SCAN_MAX)
        return;
    l->t[l->n] = *t;
    l->t[l->n].name = strncpy(l->names[l->n], t->name, 31);
    l->t[l->n].dtype = strncpy(l->dtypes[l->n], t->dtype, 15);
    l->n++;
}

static void scan_is(const gp_tensor_scan *t, const char *name, int64_t values, int64_t bad,
                    int64_t first, const char *first_is)
{
    CU_ASSERT_STRING_EQUAL(t->name, name);
    CU_ASSERT_EQUAL(t->values, values);
    CU_ASSERT_EQUAL(t->nonfinite, bad);
    CU_ASSERT_EQUAL(t->first, first);
    CU_ASSERT_STRING_EQUAL(t->first_is, first_is);
    if (t->nonfinite != bad || t->first != first)
        fprintf(stderr, "\n%s: %lld non-finite from %lld, expected %lld from %lld\n", name,
                (long long)t->nonfinite, (long long)t->first, (long long)bad, (long long)first);
}

/* NaNs and infinities planted in f32, f16 and bf16 elements and in q4_1's and q6_k's scales are
 * found at their element; clean, integer and unscanned tensors are told apart. */
static void test_scan(void)
{
    float f32[12] = {1, -0.0f, 3e38f, 1e-40f, 0, 0, 0, NAN, 0, INFINITY, 0, 0};
    uint16_t f16[8] = {0, 0x3c00, 0x7bff, 0, 0, 0xfc00, 0, 0}; /* 1, 65504, -inf at 5 */
    uint16_t bf16[4] = {0x7fc0, 0x3f80, 0, 0};                 /* nan at 0 */
    unsigned char q41[3 * 20] = {0}, q6k[2 * 210] = {0}, q2k[84] = {0};
    q41[20 + 2] = 0x00, q41[20 + 3] = 0x7e;                    /* block 1's m: f16 nan */
    q6k[210 + 208] = 0x00, q6k[210 + 209] = 0x7c;              /* block 1's d: f16 inf */
    float clean[4] = {1, 2, 3, 4};
    int32_t ints[4] = {-1, 0x7fc00000, 0x7f800000, 3};          /* NaN's bits, as integers */
    const gp_gw_tensor ts[] = {
        {"a.f32", 0, 2, {4, 3}, f32, sizeof f32},   {"b.f16", 1, 1, {8}, f16, sizeof f16},
        {"c.bf16", 30, 1, {4}, bf16, sizeof bf16},  {"d.q4_1", 3, 2, {32, 3}, q41, sizeof q41},
        {"e.q6_k", 14, 2, {256, 2}, q6k, sizeof q6k}, {"f.clean", 0, 1, {4}, clean, sizeof clean},
        {"g.q2_k", 10, 1, {256}, q2k, sizeof q2k},  {"h.i32", 26, 1, {4}, ints, sizeof ints},
    };
    gp_gw w;
    gp_gw_init(&w);
    gp_gw_model(&w, "llama", 32, ts, 8);
    char path[4200];
    snprintf(path, sizeof path, "%s", gp_test_tmpfile(".gguf"));
    CU_ASSERT_EQUAL_FATAL(gp_gw_save(&w, path), 0);
    gp_gw_free(&w);
    scan_log l = {0};
    gp_weights_scan_totals tot;
    CU_ASSERT_EQUAL(gp_weights_scan(path, log_tensor, &l, &tot, err, sizeof err), 5);
    /* every tensor's elements but q2_k's, which is skipped */
    CU_ASSERT(tot.tensors == 8 && tot.values == 12 + 8 + 4 + 96 + 512 + 4 + 4 && tot.skipped == 1);
    CU_ASSERT_EQUAL_FATAL(l.n, 8); /* name order */
    scan_is(&l.t[0], "a.f32", 12, 2, 7, "nan");
    scan_is(&l.t[1], "b.f16", 8, 1, 5, "-inf");
    scan_is(&l.t[2], "c.bf16", 4, 1, 0, "nan");
    scan_is(&l.t[3], "d.q4_1", 96, 32, 32, "nan");
    scan_is(&l.t[4], "e.q6_k", 512, 256, 256, "inf");
    scan_is(&l.t[5], "f.clean", 4, 0, -1, "");
    scan_is(&l.t[6], "g.q2_k", 256, -1, -1, "");
    scan_is(&l.t[7], "h.i32", 4, 0, -1, "");
    CU_ASSERT_STRING_EQUAL(l.t[3].dtype, "q4_1");

    /* clean: 0; unreadable: -1 and the reader's message */
    gp_gw_init(&w);
    gp_gw_model(&w, "llama", 32, ts + 5, 3);
    CU_ASSERT_EQUAL_FATAL(gp_gw_save(&w, path), 0);
    CU_ASSERT_EQUAL(gp_weights_scan(path, NULL, NULL, &tot, err, sizeof err), 0);
    CU_ASSERT(tot.tensors == 3 && tot.values == 4 + 4 && tot.skipped == 1);
    w.len -= 1;
    CU_ASSERT_EQUAL_FATAL(gp_gw_save(&w, path), 0);
    gp_gw_free(&w);
    CU_ASSERT_EQUAL(gp_weights_scan(path, NULL, NULL, NULL, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, ": bad GGUF file ("));
    remove(path);

    /* safetensors, f64 among them */
    double f64[3] = {1, 2, -INFINITY};
    const gp_st_tensor st[] = {
        {.name = "x", .file_dtype = "F64", .ndim = 1, .shape = {3}, .data = f64, .nbytes = 24},
        {.name = "y", .dtype = GP_F32, .ndim = 2, .shape = {3, 4}, .data = f32, .nbytes = 48},
    };
    snprintf(path, sizeof path, "%s", gp_test_tmpfile(".safetensors"));
    CU_ASSERT_EQUAL_FATAL(gp_st_write(path, st, 2, NULL, err, sizeof err), 0);
    l.n = 0;
    CU_ASSERT_EQUAL(gp_weights_scan(path, log_tensor, &l, NULL, err, sizeof err), 2);
    CU_ASSERT_EQUAL_FATAL(l.n, 2);
    scan_is(&l.t[0], "x", 3, 1, 2, "-inf");
    scan_is(&l.t[1], "y", 12, 2, 7, "nan");
    remove(path);
}

void gp_suite_gguf(void)
{
    static const gp_test_case tests[] = {
        {"every value type and several tensor types round trip (v2, v3)", test_roundtrip},
        {"ggml type names", test_type_names},
        {"hostile files: each gets its exact message", test_hostile},
        {"every hostile-file message is in docs/errors.md", test_catalogue_documented},
        {"the valid file truncated at every length", test_truncated},
        {"every byte of the valid file damaged", test_damaged_bytes},
        {"missing, folder and empty files", test_not_files},
        {"gguf-py's GGUFWriter output (tests/gguf/fixture.gguf)", test_fixture},
        {"llama.cpp's vocabulary files", test_vocab_files},
        {"GGUF <-> Hugging Face name aliases", test_name_aliases},
        {"a GGUF file as a checkpoint: both names, shapes, check, read", test_weights_gguf},
        {"gp_weights_scan: planted NaNs and infinities found at their element", test_scan},
    };
    gp_test_add_suite("gguf", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
