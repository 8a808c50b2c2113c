/* Tests of weights/safetensors.c, weights.c and weights_random.c: write/read round trips, every
 * header check, sharded folders, declared-weight checks, conversion and random weights. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir/f16.h"
#include "weights/safetensors.h"
#include "weights/weights.h"
#include "tests/testutil.h"

static char err[4096];

static gp_st_tensor mk(const char *name, gp_dtype dt, int ndim, const int64_t *shape,
                       const void *data)
{
    gp_st_tensor t = {.name = name, .dtype = dt, .ndim = ndim, .data = data};
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        t.shape[d] = shape[d];
        n *= (size_t)shape[d];
    }
    t.nbytes = n * gp_dtype_size(dt);
    return t;
}

/* A file made of a header length, the header text and data_len zero bytes. */
static const char *write_raw(uint64_t hlen, const char *header, size_t header_bytes,
                             size_t data_len)
{
    const char *path = gp_test_tmpfile(".safetensors");
    size_t total = 8 + header_bytes + data_len;
    unsigned char *buf = calloc(1, total);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, header, header_bytes);
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, buf, total), 0);
    free(buf);
    return path;
}

/* The file must be refused with "PATH: bad safetensors file (...REASON...)". */
static void expect_bad_file(const char *path, const char *reason)
{
    gp_st_file *f = gp_st_open(path, err, sizeof err);
    CU_ASSERT_PTR_NULL(f);
    gp_st_close(f);
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s: bad safetensors file (", path);
    CU_ASSERT_EQUAL(strncmp(err, prefix, strlen(prefix)), 0);
    if (!strstr(err, reason))
        fprintf(stderr, "\nexpected \"%s\" in: %s\n", reason, err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, reason));
    remove(path);
}

static void expect_bad(const char *header, size_t data_len, const char *reason)
{
    expect_bad_file(write_raw(strlen(header), header, strlen(header), data_len), reason);
}

static uint64_t rd64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* ---- round trips ---- */

static void test_roundtrip(void)
{
    float a[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
    uint16_t h[5] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000};
    uint16_t b[3] = {0x3f80, 0x4049, 0xff80};
    int32_t ints[8] = {0, 1, -1, 2147483647, -2147483647 - 1, 42, 7, -7};
    double dbl[2] = {1.0, -2.0};
    float scalar = 7.0f;
    const int64_t s_a[2] = {2, 3}, s_h[1] = {5}, s_b[4] = {1, 1, 3, 1}, s_i[3] = {2, 2, 2};
    const int64_t s_e[2] = {0, 4}, s_d[1] = {2};
    gp_st_tensor ts[7] = {
        mk("model.a.weight", GP_F32, 2, s_a, a),
        mk("h16", GP_F16, 1, s_h, h),
        mk("bf", GP_BF16, 4, s_b, b),
        mk("ids", GP_I32, 3, s_i, ints),
        mk("scalar", GP_F32, 0, NULL, &scalar),
        mk("empty", GP_F32, 2, s_e, NULL),
        mk("f64", GP_F32, 1, s_d, dbl),
    };
    ts[6].file_dtype = "F64"; /* a dtype gplan does not compute with still round-trips */
    ts[6].nbytes = sizeof dbl;
    const char *meta[] = {"format", "pt", "note", "caf\xc3\xa9", NULL};
    const char *path = gp_test_tmpfile(".safetensors");
    CU_ASSERT_EQUAL_FATAL(gp_st_write(path, ts, 7, meta, err, sizeof err), 0);

    /* The header is padded to 8 bytes, so the data area is 8-byte aligned in the file. */
    size_t len;
    unsigned char *raw = (unsigned char *)gp_test_read_file(path, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
    uint64_t hl = rd64(raw);
    CU_ASSERT_EQUAL(hl % 8, 0);
    CU_ASSERT_EQUAL(len, 8 + hl + sizeof a + sizeof h + sizeof b + sizeof ints + 4 + sizeof dbl);
    CU_ASSERT_EQUAL(raw[8], '{');
    free(raw);

    gp_st_file *f = gp_st_open(path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(gp_st_count(f), 7);
    CU_ASSERT_STRING_EQUAL(gp_st_path(f), path);
    CU_ASSERT_STRING_EQUAL(gp_st_metadata(f, "format"), "pt");
    CU_ASSERT_STRING_EQUAL(gp_st_metadata(f, "note"), "caf\xc3\xa9");
    CU_ASSERT_PTR_NULL(gp_st_metadata(f, "absent"));
    for (int i = 0; i < 7; i++) {
        const gp_st_tensor *t = gp_st_find(f, ts[i].name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_STRING_EQUAL(t->name, ts[i].name);
        CU_ASSERT_EQUAL(t->ndim, ts[i].ndim);
        for (int d = 0; d < GP_MAX_DIMS; d++)
            CU_ASSERT_EQUAL(t->shape[d], d < ts[i].ndim ? ts[i].shape[d] : 0);
        CU_ASSERT_EQUAL(t->nbytes, ts[i].nbytes);
        if (t->nbytes)
            CU_ASSERT_EQUAL(memcmp(t->data, ts[i].data, t->nbytes), 0);
        if (i < 6) {
            CU_ASSERT_EQUAL(t->supported, 1);
            CU_ASSERT_EQUAL(t->dtype, ts[i].dtype);
            CU_ASSERT_STRING_EQUAL(t->file_dtype, gp_st_dtype_name(ts[i].dtype));
        }
    }
    const gp_st_tensor *d = gp_st_find(f, "f64");
    CU_ASSERT_EQUAL(d->supported, 0);
    CU_ASSERT_STRING_EQUAL(d->file_dtype, "F64");
    CU_ASSERT_EQUAL(gp_st_numel(gp_st_find(f, "scalar")), 1);
    CU_ASSERT_EQUAL(gp_st_numel(gp_st_find(f, "empty")), 0);
    CU_ASSERT_EQUAL(gp_st_numel(gp_st_find(f, "ids")), 8);
    /* gp_st_get walks names in strcmp order. */
    CU_ASSERT_STRING_EQUAL(gp_st_get(f, 0)->name, "bf");
    CU_ASSERT_STRING_EQUAL(gp_st_get(f, 6)->name, "scalar");
    for (int i = 1; i < 7; i++)
        CU_ASSERT(strcmp(gp_st_get(f, i - 1)->name, gp_st_get(f, i)->name) < 0);
    CU_ASSERT_PTR_NULL(gp_st_get(f, 7));
    CU_ASSERT_PTR_NULL(gp_st_get(f, -1));
    gp_st_close(f);
    gp_st_close(NULL);
    remove(path);
}

static void test_find_many(void)
{
    enum { N = 300 };
    static char names[N][32];
    static int32_t vals[N];
    gp_st_tensor ts[N];
    const int64_t one[1] = {1};
    uint64_t rng = 12345;
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "layer.%d.w%llu", i,
                 (unsigned long long)(gp_test_rand(&rng) % 1000));
        vals[i] = i * 3 + 1;
        ts[i] = mk(names[i], GP_I32, 1, one, &vals[i]);
    }
    const char *path = gp_test_tmpfile(".safetensors");
    CU_ASSERT_EQUAL_FATAL(gp_st_write(path, ts, N, NULL, err, sizeof err), 0);
    gp_st_file *f = gp_st_open(path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(gp_st_count(f), N);
    for (int i = 0; i < N; i++) {
        const gp_st_tensor *t = gp_st_find(f, names[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        int32_t v;
        memcpy(&v, t->data, 4);
        CU_ASSERT_EQUAL(v, i * 3 + 1);
    }
    CU_ASSERT_PTR_NULL(gp_st_find(f, "layer.1"));
    CU_ASSERT_PTR_NULL(gp_st_find(f, ""));
    CU_ASSERT_PTR_NULL(gp_st_find(f, "zzz"));
    gp_st_close(f);
    remove(path);
}

static void test_write_errors(void)
{
    float a[2] = {1, 2};
    const int64_t s2[1] = {2}, s3[1] = {3}, neg[1] = {-2};
    const char *path = gp_test_tmpfile(".safetensors");
    gp_st_tensor dup[2] = {mk("x", GP_F32, 1, s2, a), mk("x", GP_F32, 1, s2, a)};
    CU_ASSERT_EQUAL(gp_st_write(path, dup, 2, NULL, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "repeated"));
    gp_st_tensor wrong = mk("x", GP_F32, 1, s2, a);
    wrong.shape[0] = 3;
    CU_ASSERT_EQUAL(gp_st_write(path, &wrong, 1, NULL, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "disagree"));
    gp_st_tensor ng = mk("x", GP_F32, 1, s3, a);
    ng.shape[0] = neg[0];
    CU_ASSERT_EQUAL(gp_st_write(path, &ng, 1, NULL, err, sizeof err), -1);
    gp_st_tensor rsv = mk("__metadata__", GP_F32, 1, s2, a);
    CU_ASSERT_EQUAL(gp_st_write(path, &rsv, 1, NULL, err, sizeof err), -1);
    gp_st_tensor bad_dt = mk("x", GP_F32, 1, s2, a);
    bad_dt.file_dtype = "F65";
    CU_ASSERT_EQUAL(gp_st_write(path, &bad_dt, 1, NULL, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "bad dtype"));
    gp_st_tensor bad_utf8 = mk("x\xff", GP_F32, 1, s2, a);
    CU_ASSERT_EQUAL(gp_st_write(path, &bad_utf8, 1, NULL, err, sizeof err), -1);
    CU_ASSERT_EQUAL(gp_st_write("/nonexistent-dir/x.safetensors", &wrong, 0, NULL, err, sizeof err),
                    -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot create"));
    /* An empty file (no tensors) is valid. */
    CU_ASSERT_EQUAL(gp_st_write(path, NULL, 0, NULL, err, sizeof err), 0);
    gp_st_file *f = gp_st_open(path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL(f);
    if (f)
        CU_ASSERT_EQUAL(gp_st_count(f), 0);
    gp_st_close(f);
    remove(path);
}

/* ---- malformed files: every loader check ---- */

static void test_bad_lengths(void)
{
    const char *p = gp_test_tmpfile(".safetensors");
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(p, "\x02\0\0\0\0", 5), 0);
    expect_bad_file(p, "too short for the 8-byte header length");
    p = gp_test_tmpfile(".safetensors");
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(p, "", 0), 0);
    expect_bad_file(p, "file of 0 bytes");
    expect_bad_file(write_raw(0, "", 0, 16), "header length 0 too short");
    /* The length claims more than the file holds. */
    expect_bad_file(write_raw(100, "{}", 2, 0),
                    "header length 100 past the end of the file (10 bytes)");
    /* Huge lengths are refused before anything is read or allocated. */
    expect_bad_file(write_raw(1ull << 40, "{}", 2, 0), "over the cap");
    expect_bad_file(write_raw(UINT64_MAX, "{}", 2, 0),
                    "header length 18446744073709551615 over the cap");
    expect_bad_file(write_raw(GP_ST_MAX_HEADER + 1ull, "{}", 2, 0), "over the cap");
    /* Truncated: the length cuts the JSON short. */
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    expect_bad_file(write_raw(20, h, strlen(h), 4), "header JSON");
}

static void test_bad_json(void)
{
    expect_bad("[1, 2]", 0, "header is not a JSON object");
    expect_bad("\"text\"", 0, "header JSON"); /* jansson takes only arrays and objects */
    expect_bad("{\"a\": 1,}", 0, "header JSON");
    expect_bad("{} trailing", 0, "header JSON");
    expect_bad("\xff\xfe\x01junk\x80\x81", 0, "header JSON");
    /* Invalid UTF-8 inside a name. */
    expect_bad("{\"a\xc3\x28\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
               "header JSON");
    /* A NUL inside the header. */
    const char nul[] = "{\"a\0b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    expect_bad_file(write_raw(sizeof nul - 1, nul, sizeof nul - 1, 4), "header JSON");
    /* Duplicate names would make lookups ambiguous. */
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
               8, "header JSON: duplicate");
    expect_bad("{\"__metadata__\": [1]}", 0, "__metadata__ is not an object");
    expect_bad("{\"__metadata__\": {\"k\": 3}}", 0, "__metadata__ value \"k\" is not a string");
    expect_bad("{\"w\": [1, 2]}", 0, "tensor \"w\": entry is not an object");
}

static void test_bad_entries(void)
{
    expect_bad("{\"w\":{\"dtype\":\"F65\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
               "tensor \"w\": bad dtype \"F65\"");
    expect_bad("{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
               "bad dtype \"f32\"");
    expect_bad("{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
               "tensor \"w\": dtype missing or not a string");
    expect_bad("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype missing");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
               "tensor \"w\": shape entry 0 is not a non-negative integer");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1, 2.0],\"data_offsets\":[0,8]}}", 8,
               "shape entry 1 is not a non-negative integer");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8,
               "shape entry 0 is not a non-negative integer");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":3,\"data_offsets\":[0,12]}}", 12,
               "shape missing or not an array");
    expect_bad(
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}",
        4, "shape overflows");
    expect_bad("{\"w\":{\"dtype\":\"F64\",\"shape\":[1152921504606846976],\"data_offsets\":[0,4]}}",
               4, "shape overflows");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4,
               "tensor \"w\": data_offsets reversed [4, 0]");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8,
               "data_offsets missing or not [begin, end]");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 8, "data_offsets missing");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8,
               "data_offsets are not non-negative integers");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.0,4]}}", 8,
               "data_offsets are not non-negative integers");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 8,
               "tensor \"w\": data_offsets [4, 12] out of range: data area is 8 bytes");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2, 2],\"data_offsets\":[0,12]}}", 16,
               "tensor \"w\": size mismatch: shape needs 16 bytes of F32, data_offsets give 12");
    expect_bad("{\"w\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,4]}}", 16,
               "size mismatch: shape needs 6 bytes of BF16");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, "tensors \"a\" [0, 8) and \"b\" [4, 12) overlap");
    /* Overlap found whatever the header order; a tensor inside another one too. */
    expect_bad("{\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[8,12]},"
               "\"z\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[12,14]},"
               "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
               16, "overlap");
    /* Rank 65 (past any sane rank) is refused before the shape is walked. */
    char big[512] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[0";
    for (int i = 1; i < 65; i++)
        strcat(big, ",1");
    strcat(big, "],\"data_offsets\":[0,0]}}");
    expect_bad(big, 0, "rank 65 is absurd");
}

/* Every truncation of a valid file is refused; random byte damage to the header is either refused
 * with the loader's message or yields tensors that all lie inside the data area. */
static void test_damage(void)
{
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[3] = {1, 2, 3};
    const int64_t s_a[2] = {3, 2}, s_h[1] = {3};
    gp_st_tensor ts[2] = {mk("alpha", GP_F32, 2, s_a, a), mk("beta", GP_BF16, 1, s_h, h)};
    const char *path = gp_test_tmpfile(".safetensors");
    CU_ASSERT_EQUAL_FATAL(gp_st_write(path, ts, 2, NULL, err, sizeof err), 0);
    size_t len;
    unsigned char *good = (unsigned char *)gp_test_read_file(path, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(good);
    remove(path);
    for (size_t cut = 0; cut < len; cut++) {
        path = gp_test_tmpfile(".safetensors");
        CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, good, cut), 0);
        gp_st_file *f = gp_st_open(path, err, sizeof err);
        CU_ASSERT_PTR_NULL(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "bad safetensors file ("));
        gp_st_close(f);
        remove(path);
    }
    uint64_t hl = rd64(good);
    unsigned char *bad = malloc(len);
    uint64_t rng = 99;
    int opened = 0;
    for (int iter = 0; iter < 2000; iter++) {
        memcpy(bad, good, len);
        int flips = 1 + (int)(gp_test_rand(&rng) % 3);
        for (int k = 0; k < flips; k++)
            bad[8 + gp_test_rand(&rng) % hl] = (unsigned char)gp_test_rand(&rng);
        path = gp_test_tmpfile(".safetensors");
        CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, bad, len), 0);
        gp_st_file *f = gp_st_open(path, err, sizeof err);
        if (f) {
            opened++;
            /* All tensors together span at most the data area (the bytes after the header). */
            const unsigned char *lo = NULL, *hi = NULL;
            for (int i = 0; i < gp_st_count(f); i++) {
                const gp_st_tensor *t = gp_st_get(f, i);
                const unsigned char *p = t->data;
                if (t->nbytes == 0)
                    continue;
                if (t->supported)
                    CU_ASSERT_EQUAL((int64_t)t->nbytes,
                                    gp_st_numel(t) * (int64_t)gp_dtype_size(t->dtype));
                lo = !lo || p < lo ? p : lo;
                hi = !hi || p + t->nbytes > hi ? p + t->nbytes : hi;
                unsigned sum = 0;
                for (size_t b = 0; b < t->nbytes; b++)
                    sum += p[b]; /* touches every byte: a bad range would fault */
                (void)sum;
            }
            CU_ASSERT(!lo || (size_t)(hi - lo) <= len - 8 - hl);
        } else {
            CU_ASSERT_PTR_NOT_NULL(strstr(err, "bad safetensors file ("));
        }
        gp_st_close(f);
        remove(path);
    }
    CU_ASSERT(opened > 0); /* some damage (inside a name, say) leaves a valid file */
    free(bad);
    free(good);
}

static void test_not_files(void)
{
    gp_st_file *f = gp_st_open("/nonexistent/x.safetensors", err, sizeof err);
    CU_ASSERT_PTR_NULL(f);
    CU_ASSERT_STRING_EQUAL(err,
                           "/nonexistent/x.safetensors: cannot open (No such file or directory)");
    f = gp_st_open(GP_SOURCE_DIR, err, sizeof err);
    CU_ASSERT_PTR_NULL(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a regular file"));
    /* err may be NULL. */
    CU_ASSERT_PTR_NULL(gp_st_open("/nonexistent/x.safetensors", NULL, 0));
}

/* Valid files gplan cannot fully use: F64/BOOL tensors and rank 5 open fine, and zero-size tensors
 * may share an offset with anything. */
static void test_unsupported_listed(void)
{
    const char *h = "{\"d\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
                    "\"m\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[16,19]},"
                    "\"r5\":{\"dtype\":\"F32\",\"shape\":[1,1,1,2,1],\"data_offsets\":[20,28]},"
                    "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
                    "\"ok\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[28,32]},"
                    "\"__metadata__\":{\"format\":\"pt\"}}   ";
    const char *path = write_raw(strlen(h), h, strlen(h), 32);
    gp_st_file *f = gp_st_open(path, err, sizeof err);
    if (!f)
        fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(gp_st_count(f), 5);
    CU_ASSERT_EQUAL(gp_st_find(f, "d")->supported, 0);
    CU_ASSERT_STRING_EQUAL(gp_st_find(f, "m")->file_dtype, "BOOL");
    CU_ASSERT_EQUAL(gp_st_find(f, "m")->supported, 0);
    const gp_st_tensor *r5 = gp_st_find(f, "r5");
    CU_ASSERT_EQUAL(r5->ndim, 5);
    CU_ASSERT_EQUAL(r5->supported, 0);
    CU_ASSERT_EQUAL(r5->dtype, GP_F32);
    CU_ASSERT_EQUAL(gp_st_find(f, "z")->nbytes, 0);
    CU_ASSERT_EQUAL(gp_st_find(f, "ok")->supported, 1);
    CU_ASSERT_EQUAL(gp_st_find(f, "ok")->dtype, GP_F16);
    gp_st_close(f);

    /* They fail only when a graph asks for them. */
    gp_weights *w = gp_weights_open(path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    gp_weight_decl ok = {"ok", GP_F16, 1, {2}};
    CU_ASSERT_EQUAL(gp_weights_check(w, &ok, 1, NULL, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(err, "");
    gp_weight_decl ds[3] = {
        {"d", GP_F32, 1, {2}}, {"r5", GP_F32, 4, {1, 1, 2, 1}}, {"m", GP_I32, 1, {3}}};
    CU_ASSERT_EQUAL(gp_weights_check(w, ds, 3, NULL, err, sizeof err), 3);
    CU_ASSERT_STRING_EQUAL(
        err, "weights: \"d\": expected shape [2] f32, file has [2] F64 (unsupported dtype)\n"
             "weights: \"r5\": expected shape [1, 1, 2, 1] f32, file has a rank-5 F32 "
             "tensor (at most 4 dims supported)\n"
             "weights: \"m\": expected shape [3] i32, file has [3] BOOL (unsupported dtype)");
    gp_weights_close(w);
    remove(path);
}

/* ---- checkpoint sources ---- */

static char *tmpdir(void)
{
    char *d = strdup(gp_test_tmpfile(".d"));
    CU_ASSERT_EQUAL_FATAL(mkdir(d, 0755), 0);
    return d;
}

static const char *in_dir(const char *dir, const char *name)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static void rm_dir(char *dir, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        remove(in_dir(dir, names[i]));
    CU_ASSERT_EQUAL(rmdir(dir), 0);
    free(dir);
}

static void write_text(const char *path, const char *text)
{
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, text, strlen(text)), 0);
}

static const char *const shard_files[] = {
    "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
    "model.safetensors.index.json", "model.safetensors", NULL};

/* Two shards: "a", "b" in shard 1 (plus "stray", not in the index); "c" in shard 2. */
static void write_shards(const char *dir)
{
    static const float va[2] = {1, 2}, vb[3] = {3, 4, 5}, vc[1] = {6};
    const int64_t s2[1] = {2}, s3[1] = {3}, s1[1] = {1};
    gp_st_tensor one[3] = {mk("a", GP_F32, 1, s2, va), mk("b", GP_F32, 1, s3, vb),
                           mk("stray", GP_F32, 1, s1, vc)};
    gp_st_tensor two[1] = {mk("c", GP_F32, 1, s1, vc)};
    CU_ASSERT_EQUAL_FATAL(gp_st_write(in_dir(dir, shard_files[0]), one, 3, NULL, err, sizeof err),
                          0);
    CU_ASSERT_EQUAL_FATAL(gp_st_write(in_dir(dir, shard_files[1]), two, 1, NULL, err, sizeof err),
                          0);
}

static void test_sharded(void)
{
    char *dir = tmpdir();
    write_shards(dir);
    write_text(in_dir(dir, "model.safetensors.index.json"),
               "{\"metadata\": {\"total_size\": 24}, \"weight_map\": {"
               "\"c\": \"model-00002-of-00002.safetensors\","
               "\"a\": \"model-00001-of-00002.safetensors\","
               "\"b\": \"model-00001-of-00002.safetensors\"}}");
    const char *paths[2] = {dir, NULL};
    char index_path[4096];
    snprintf(index_path, sizeof index_path, "%s", in_dir(dir, "model.safetensors.index.json"));
    paths[1] = index_path;
    for (int k = 0; k < 2; k++) {
        gp_weights *w = gp_weights_open(paths[k], err, sizeof err);
        if (!w)
            fprintf(stderr, "\n%s\n", err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(w);
        CU_ASSERT_EQUAL(gp_weights_shard_count(w), 2);
        CU_ASSERT_EQUAL(gp_weights_count(w), 3);
        CU_ASSERT_STRING_EQUAL(gp_weights_get(w, 0)->name, "a");
        CU_ASSERT_STRING_EQUAL(gp_weights_get(w, 2)->name, "c");
        CU_ASSERT_PTR_NULL(gp_weights_get(w, 3));
        const gp_st_tensor *c = gp_weights_find(w, "c");
        CU_ASSERT_PTR_NOT_NULL_FATAL(c);
        float v;
        memcpy(&v, c->data, 4);
        CU_ASSERT_EQUAL(v, 6.0f);
        const gp_st_tensor *b = gp_weights_find(w, "b");
        CU_ASSERT_PTR_NOT_NULL_FATAL(b);
        memcpy(&v, (const char *)b->data + 8, 4);
        CU_ASSERT_EQUAL(v, 5.0f);
        /* Only what the index maps is visible. */
        CU_ASSERT_PTR_NULL(gp_weights_find(w, "stray"));
        gp_weights_close(w);
    }
    /* A folder with model.safetensors uses it (and ignores the index). */
    char single[4096];
    snprintf(single, sizeof single, "%s", in_dir(dir, "model.safetensors"));
    CU_ASSERT_EQUAL(rename(in_dir(dir, shard_files[0]), single), 0);
    write_shards(dir);
    gp_weights *w = gp_weights_open(dir, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_EQUAL(gp_weights_shard_count(w), 1);
    CU_ASSERT_EQUAL(gp_weights_count(w), 3);
    CU_ASSERT_PTR_NOT_NULL(gp_weights_find(w, "stray"));
    CU_ASSERT_PTR_NULL(gp_weights_find(w, "c"));
    gp_weights_close(w);
    gp_weights_close(NULL);
    rm_dir(dir, shard_files);
}

static void expect_bad_index(const char *index, const char *reason)
{
    char *dir = tmpdir();
    write_shards(dir);
    write_text(in_dir(dir, "model.safetensors.index.json"), index);
    gp_weights *w = gp_weights_open(dir, err, sizeof err);
    CU_ASSERT_PTR_NULL(w);
    gp_weights_close(w);
    if (!strstr(err, reason))
        fprintf(stderr, "\nexpected \"%s\" in: %s\n", reason, err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, reason));
    rm_dir(dir, shard_files);
}

static void test_bad_index(void)
{
    expect_bad_index(
        "{\"weight_map\": {\"a\": \"../model-00001-of-00002.safetensors\"}}",
        "bad safetensors index (\"a\" maps to ../model-00001-of-00002.safetensors, not a "
        "plain shard file name)");
    expect_bad_index("{\"weight_map\": {\"a\": \"/etc/passwd\"}}", "not a plain shard file name");
    expect_bad_index("{\"weight_map\": {\"a\": \"..\"}}", "not a plain shard file name");
    expect_bad_index("{\"weight_map\": {\"a\": \"\"}}", "not a plain shard file name");
    expect_bad_index("{\"weight_map\": {\"a\": 3}}", "maps to a non-string");
    expect_bad_index("{\"weight_map\": [\"a\"]}",
                     "bad safetensors index (no \"weight_map\" object)");
    expect_bad_index("[]", "no \"weight_map\" object");
    expect_bad_index("{\"weight_map\": {\"a\": \"x\",}", "bad safetensors index (JSON:");
    expect_bad_index("{\"weight_map\": {\"a\": \"model-00003-of-00003.safetensors\"}}",
                     "model-00003-of-00003.safetensors: cannot open (No such file or directory)");
    expect_bad_index(
        "{\"weight_map\": {\"c\": \"model-00001-of-00002.safetensors\"}}",
        "\"c\" is mapped to model-00001-of-00002.safetensors, which has no such tensor");
    /* A broken shard reports the shard's own error. */
    char *dir = tmpdir();
    write_text(in_dir(dir, shard_files[0]), "junk");
    write_text(in_dir(dir, "model.safetensors.index.json"),
               "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\"}}");
    CU_ASSERT_PTR_NULL(gp_weights_open(dir, err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(err, "model-00001-of-00002.safetensors: bad safetensors file (file of 4"));
    rm_dir(dir, shard_files);
    /* An empty folder, a missing path. */
    dir = tmpdir();
    CU_ASSERT_PTR_NULL(gp_weights_open(dir, err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "no model.safetensors or model.safetensors.index.json"));
    rm_dir(dir, shard_files);
    CU_ASSERT_PTR_NULL(gp_weights_open("/nonexistent/model", err, sizeof err));
    CU_ASSERT_STRING_EQUAL(err, "/nonexistent/model: cannot open (no such file or folder)");
}

/* ---- checking a graph's declared weights ---- */

static gp_weights *gpt_like(const char **path_out)
{
    static float wte[6 * 4], bias[4];
    static uint16_t ln[4] = {0x3c00, 0x3c00, 0x3c00, 0x3c00};
    static int32_t pos[3] = {0, 1, 2};
    const int64_t s_wte[2] = {6, 4}, s4[1] = {4}, s3[1] = {3};
    gp_st_tensor ts[4] = {mk("transformer.wte.weight", GP_F32, 2, s_wte, wte),
                          mk("transformer.ln_f.weight", GP_F16, 1, s4, ln),
                          mk("transformer.ln_f.bias", GP_F32, 1, s4, bias),
                          mk("pos_ids", GP_I32, 1, s3, pos)};
    const char *path = gp_test_tmpfile(".safetensors");
    CU_ASSERT_EQUAL(gp_st_write(path, ts, 4, NULL, err, sizeof err), 0);
    *path_out = path;
    return gp_weights_open(path, err, sizeof err);
}

static void test_check(void)
{
    const char *path;
    gp_weights *w = gpt_like(&path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    unsigned char conv[8];
    /* All good; the f16 file tensor declared f32 (and the f32 one declared bf16) need conversion.
     */
    gp_weight_decl good[3] = {{"transformer.wte.weight", GP_F32, 2, {6, 4}},
                              {"transformer.ln_f.weight", GP_F32, 1, {4}},
                              {"transformer.ln_f.bias", GP_BF16, 1, {4}}};
    memset(conv, 7, sizeof conv);
    CU_ASSERT_EQUAL(gp_weights_check(w, good, 3, conv, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(err, "");
    CU_ASSERT_EQUAL(conv[0], 0);
    CU_ASSERT_EQUAL(conv[1], 1);
    CU_ASSERT_EQUAL(conv[2], 1);

    /* Every problem is reported, in declaration order. */
    gp_weight_decl bad[6] = {
        {"transformer.h.3.attn.c_attn.weight", GP_F32, 2, {4, 12}},
        {"transformer.wte.weight", GP_F32, 2, {6, 8}},
        {"transformer.ln_f.weight", GP_F16, 1, {4}},
        {"pos_ids", GP_F32, 1, {3}}, /* i32 in the file: no conversion */
        {"transformer.ln_f.bias", GP_I32, 1, {4}},
        {"transformer.wte.weight", GP_F16, 3, {1, 6, 4}},
    };
    CU_ASSERT_EQUAL(gp_weights_check(w, bad, 6, conv, err, sizeof err), 5);
    CU_ASSERT_STRING_EQUAL(
        err,
        "weights: missing tensor \"transformer.h.3.attn.c_attn.weight\"\n"
        "weights: \"transformer.wte.weight\": expected shape [6, 8] f32, file has [6, 4] f32\n"
        "weights: \"pos_ids\": expected shape [3] f32, file has [3] i32\n"
        "weights: \"transformer.ln_f.bias\": expected shape [4] i32, file has [4] f32\n"
        "weights: \"transformer.wte.weight\": expected shape [1, 6, 4] f16, file has [6, 4] f32");
    CU_ASSERT_EQUAL(conv[2], 0);

    /* Past the cap the rest are counted. */
    enum { N = GP_WEIGHTS_MAX_REPORTED + 4 };
    gp_weight_decl many[N];
    static char names[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "w%d", i);
        many[i] = (gp_weight_decl){names[i], GP_F32, 1, {1}};
    }
    CU_ASSERT_EQUAL(gp_weights_check(w, many, N, NULL, err, sizeof err), N);
    int lines = 1;
    for (const char *p = err; *p; p++)
        lines += *p == '\n';
    CU_ASSERT_EQUAL(lines, GP_WEIGHTS_MAX_REPORTED + 1);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(err, "weights: missing tensor \"w15\"\nweights: ... and 4 more problems"));
    /* A small err buffer truncates without overflowing; the count is still right. */
    char small[20];
    CU_ASSERT_EQUAL(gp_weights_check(w, many, N, NULL, small, sizeof small), N);
    CU_ASSERT_EQUAL(strlen(small), sizeof small - 1);
    CU_ASSERT_EQUAL(gp_weights_check(w, many, N, NULL, NULL, 0), N);
    /* Malformed declarations are problems, not crashes. */
    gp_weight_decl odd[2] = {{NULL, GP_F32, 1, {1}}, {"pos_ids", GP_I32, 9, {3}}};
    CU_ASSERT_EQUAL(gp_weights_check(w, odd, 2, NULL, err, sizeof err), 2);
    CU_ASSERT_STRING_EQUAL(
        err, "weights: declaration 0 is malformed\nweights: declaration 1 is malformed");
    gp_weights_close(w);
    remove(path);
}

/* ---- reading with conversion ---- */

static void test_read_convert(void)
{
    const float v[5] = {1.0f, -2.5f, 0.15625f, 65504.0f, 0.0f};
    const uint16_t as_f16[5] = {0x3c00, 0xc100, 0x3100, 0x7bff, 0x0000};
    const uint16_t as_bf16[5] = {0x3f80, 0xc020, 0x3e20, 0x4780,
                                 0x0000}; /* 65504 rounds up to 65536 */
    const int64_t s5[1] = {5}, s2[1] = {2};
    const int32_t iv[2] = {3, -4};
    gp_st_tensor ts[3] = {mk("f", GP_F32, 1, s5, v), mk("h", GP_F16, 1, s5, as_f16),
                          mk("i", GP_I32, 1, s2, iv)};
    const char *path = gp_test_tmpfile(".safetensors");
    CU_ASSERT_EQUAL_FATAL(gp_st_write(path, ts, 3, NULL, err, sizeof err), 0);
    gp_weights *w = gp_weights_open(path, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    const gp_st_tensor *f = gp_weights_find(w, "f"), *h = gp_weights_find(w, "h");
    uint16_t h16[5], b16[5];
    float f32[5];
    CU_ASSERT_EQUAL(gp_weights_read(f, GP_F16, h16, sizeof h16, err, sizeof err), 0);
    CU_ASSERT_EQUAL(gp_weights_read(f, GP_BF16, b16, sizeof b16, err, sizeof err), 0);
    CU_ASSERT_EQUAL(gp_weights_read(h, GP_F32, f32, sizeof f32, err, sizeof err), 0);
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(h16[i], as_f16[i]);
        CU_ASSERT_EQUAL(b16[i], as_bf16[i]);
        CU_ASSERT_EQUAL(f32[i], v[i]);
    }
    /* f16 -> bf16 goes through f32 exactly once. */
    CU_ASSERT_EQUAL(gp_weights_read(h, GP_BF16, b16, sizeof b16, err, sizeof err), 0);
    for (int i = 0; i < 5; i++)
        CU_ASSERT_EQUAL(b16[i], as_bf16[i]);
    int32_t i32[2];
    CU_ASSERT_EQUAL(
        gp_weights_read(gp_weights_find(w, "i"), GP_I32, i32, sizeof i32, err, sizeof err), 0);
    CU_ASSERT_EQUAL(i32[1], -4);
    CU_ASSERT_EQUAL(gp_weights_read(gp_weights_find(w, "i"), GP_F32, f32, 8, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "weights: \"i\": cannot read I32 data (rank 1) as f32");
    CU_ASSERT_EQUAL(gp_weights_read(f, GP_F32, f32, sizeof f32 - 4, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "weights: \"f\": 5 elements of f32 need 20 bytes, buffer has 16");
    gp_weights_close(w);
    remove(path);
}

/* ---- random weights ---- */

static void test_random_determinism(void)
{
    enum { N = 4096 };
    static float a[N], b[N], c[N], d[N];
    uint64_t k = gp_weights_name_key("transformer.h.0.attn.c_attn.weight");
    gp_weights_random_fill(a, GP_F32, 0, N, 42, k, 0.0f, 0.02f);
    gp_weights_random_fill(b, GP_F32, 0, N, 42, k, 0.0f, 0.02f);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
    /* Filling in chunks (as threads would, in any order) gives the same bytes. */
    gp_weights_random_fill(c + 3000, GP_F32, 3000, N - 3000, 42, k, 0.0f, 0.02f);
    gp_weights_random_fill(c + 17, GP_F32, 17, 2983, 42, k, 0.0f, 0.02f);
    gp_weights_random_fill(c, GP_F32, 0, 17, 42, k, 0.0f, 0.02f);
    CU_ASSERT_EQUAL(memcmp(a, c, sizeof a), 0);
    /* Another name or another seed gives other values (elementwise, not shifted copies). */
    gp_weights_random_fill(c, GP_F32, 0, N, 42,
                           gp_weights_name_key("transformer.h.1.attn.c_attn.weight"), 0.0f, 0.02f);
    gp_weights_random_fill(d, GP_F32, 0, N, 43, k, 0.0f, 0.02f);
    int same_c = 0, same_d = 0, shifted = 0;
    for (int i = 0; i < N; i++) {
        same_c += a[i] == c[i];
        same_d += a[i] == d[i];
        shifted += i + 1 < N && a[i + 1] == c[i];
    }
    CU_ASSERT(same_c < 8);
    CU_ASSERT(same_d < 8);
    CU_ASSERT(shifted < 8);
    CU_ASSERT_NOT_EQUAL(gp_weights_name_key("a"), gp_weights_name_key("b"));
    CU_ASSERT_EQUAL(gp_weights_name_key(""), 0xcbf29ce484222325ull); /* FNV-1a offset basis */
    CU_ASSERT_EQUAL(gp_weights_name_key("a"),
                    0xaf63dc4c8601ec8cull); /* published FNV-1a 64 of "a" */
    /* The named fill is the keyed fill with the name's defaults. */
    gp_weights_random_named(b, GP_F32, N, 42, "transformer.h.0.attn.c_attn.weight");
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
}

static void test_random_range(void)
{
    enum { N = 20000 };
    static float a[N];
    static uint16_t h[N], bf[N];
    static int32_t ints[N];
    uint64_t k = gp_weights_name_key("w");
    gp_weights_random_fill(a, GP_F32, 0, N, 7, k, 0.0f, 0.02f);
    float lo = 1, hi = -1;
    double sum = 0;
    for (int i = 0; i < N; i++) {
        CU_ASSERT(a[i] >= -0.02f && a[i] < 0.02f);
        lo = fminf(lo, a[i]);
        hi = fmaxf(hi, a[i]);
        sum += a[i];
    }
    CU_ASSERT(lo < -0.0195f && hi > 0.0195f); /* the whole range is used */
    CU_ASSERT(fabs(sum / N) < 0.001);         /* std of the mean is about 0.00008 */
    /* f16/bf16 fills are the f32 values rounded once. */
    gp_weights_random_fill(h, GP_F16, 0, N, 7, k, 0.0f, 0.02f);
    gp_weights_random_fill(bf, GP_BF16, 0, N, 7, k, 0.0f, 0.02f);
    for (int i = 0; i < N; i++) {
        CU_ASSERT_EQUAL(h[i], gp_f32_to_f16(a[i]));
        CU_ASSERT_EQUAL(bf[i], gp_f32_to_bf16(a[i]));
    }
    /* Norm-like: centred at 1. */
    gp_weights_random_fill(a, GP_F32, 0, N, 7, k, 1.0f, 0.05f);
    for (int i = 0; i < N; i++)
        CU_ASSERT(a[i] >= 0.95f && a[i] <= 1.05f);
    gp_weights_random_fill(ints, GP_I32, 0, N, 7, k, 0.0f, 3.0f);
    int seen[7] = {0};
    for (int i = 0; i < N; i++) {
        CU_ASSERT(ints[i] >= -3 && ints[i] <= 3);
        if (ints[i] >= -3 && ints[i] <= 3)
            seen[ints[i] + 3] = 1;
    }
    for (int i = 0; i < 7; i++)
        CU_ASSERT_EQUAL(seen[i], 1);
}

static void test_init_for(void)
{
    static const struct {
        const char *name;
        float center, scale;
    } cases[] = {
        {"transformer.h.0.ln_1.weight", 1.0f, 0.05f},
        {"transformer.ln_f.weight", 1.0f, 0.05f},
        {"model.norm.weight", 1.0f, 0.05f},
        {"model.layers.3.input_layernorm.weight", 1.0f, 0.05f},
        {"model.layers.3.post_attention_layernorm.weight", 1.0f, 0.05f},
        {"encoder.LayerNorm.weight", 1.0f, 0.05f},
        {"model.layers.0.self_attn.q_norm.weight", 1.0f, 0.05f},
        {"transformer.h.0.ln_1.bias", 0.0f, 0.01f},
        {"transformer.h.0.attn.c_attn.bias", 0.0f, 0.01f},
        {"transformer.wte.weight", 0.0f, 0.02f},
        {"lm_head.weight", 0.0f, 0.02f},
        {"model.layers.0.mlp.down_proj.weight", 0.0f, 0.02f},
        {"transformer.h.0.attn.c_proj.weight", 0.0f, 0.02f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gp_weights_init in = gp_weights_init_for(cases[i].name);
        if (in.center != cases[i].center || in.scale != cases[i].scale)
            fprintf(stderr, "\n%s: %g +- %g\n", cases[i].name, in.center, in.scale);
        CU_ASSERT_EQUAL(in.center, cases[i].center);
        CU_ASSERT_EQUAL(in.scale, cases[i].scale);
    }
}

void gp_suite_weights(void)
{
    static const gp_test_case tests[] = {
        {"write and read back every dtype", test_roundtrip},
        {"find among many names", test_find_many},
        {"writer refuses bad tensors", test_write_errors},
        {"bad header lengths", test_bad_lengths},
        {"bad header JSON", test_bad_json},
        {"bad tensor entries", test_bad_entries},
        {"truncated and damaged files", test_damage},
        {"missing files and folders", test_not_files},
        {"unsupported tensors fail only when asked for", test_unsupported_listed},
        {"sharded folder with an index", test_sharded},
        {"bad index files", test_bad_index},
        {"declared weights are checked", test_check},
        {"reads convert f32/f16/bf16", test_read_convert},
        {"random fill is deterministic", test_random_determinism},
        {"random fill range", test_random_range},
        {"default init by name", test_init_for},
    };
    gp_test_add_suite("weights", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
