/* The GGUF reader (weights/gguf.h): maps the file and validates header, metadata, tensor infos and
 * data layout in one pass with one bounds-checked cursor. The format is in docs/gguf.md. */
#include "weights/gguf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/core.h"
#include "weights/filemap.h"

#define GGUF_DEFAULT_ALIGNMENT 32
/* Smallest encodings, for bounding counts by the bytes left before anything is allocated:
 * a kv is a key length (8), a key byte, a value type (4) and a 1-byte value; a tensor info a name
 * length (8), a name byte, ndim (4), one dim (8), a type (4) and an offset (8); an array element
 * is 1 byte (8 for a string: its length). */
#define MIN_KV_BYTES 14
#define MIN_TENSOR_INFO_BYTES 33

typedef struct {
    char *key;         /* NUL-terminated copy */
    gp_gguf_type type; /* of the value */
    /* Scalars: val points at the value's bytes in the map. Strings: str. Arrays: elem, n and val
     * (the first element); string arrays also have str_at[n], each element's offset in the map. */
    const unsigned char *val;
    gp_gguf_str str;
    gp_gguf_type elem;
    uint64_t n;
    uint64_t *str_at; /* [n] for string arrays, else NULL */
} gguf_kv;

struct gp_gguf {
    char *path;
    gp_filemap map; /* the file when this reader mapped it; zeroed for open_mem */
    const unsigned char *base; /* [len] the file's bytes */
    size_t len;
    uint32_t version;
    uint64_t alignment;
    gguf_kv *kv; /* [n_kv] file order */
    int64_t n_kv;
    int64_t *kv_sorted;      /* [n_kv] indices sorted by key */
    gp_gguf_tensor *tensors; /* [n_tensors] file order */
    int64_t n_tensors;
    int64_t *t_sorted; /* [n_tensors] indices sorted by name */
    char *err;
    size_t errlen;
};

/* Every ggml type id of ggml.h's enum ggml_type (llama.cpp as vendored by llama-cpp-python 0.3.36;
 * gguf-py 0.19 lists the same up to 41): 4, 5, 31-33 and 36-38 were removed and are unknown, as is
 * anything past the table. */
static const struct {
    const char *name; /* NULL: no such id */
    int block;        /* elements per block */
    int bytes;        /* bytes per block */
} ggml_types[] = {
    [0] = {"f32", 1, 4},
    [1] = {"f16", 1, 2},
    [2] = {"q4_0", 32, 18},
    [3] = {"q4_1", 32, 20},
    [6] = {"q5_0", 32, 22},
    [7] = {"q5_1", 32, 24},
    [8] = {"q8_0", 32, 34},
    [9] = {"q8_1", 32, 40},
    [10] = {"q2_k", 256, 84},
    [11] = {"q3_k", 256, 110},
    [12] = {"q4_k", 256, 144},
    [13] = {"q5_k", 256, 176},
    [14] = {"q6_k", 256, 210},
    [15] = {"q8_k", 256, 292},
    [16] = {"iq2_xxs", 256, 66},
    [17] = {"iq2_xs", 256, 74},
    [18] = {"iq3_xxs", 256, 98},
    [19] = {"iq1_s", 256, 50},
    [20] = {"iq4_nl", 32, 18},
    [21] = {"iq3_s", 256, 110},
    [22] = {"iq2_s", 256, 82},
    [23] = {"iq4_xs", 256, 136},
    [24] = {"i8", 1, 1},
    [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},
    [27] = {"i64", 1, 8},
    [28] = {"f64", 1, 8},
    [29] = {"iq1_m", 256, 56},
    [30] = {"bf16", 1, 2},
    [34] = {"tq1_0", 256, 54},
    [35] = {"tq2_0", 256, 66},
    [39] = {"mxfp4", 32, 17},
    [40] = {"nvfp4", 64, 36},
    [41] = {"q1_0", 128, 18},
    [42] = {"q2_0", 64, 18},
};
#define N_GGML_TYPES (sizeof ggml_types / sizeof ggml_types[0])

static int ggml_known(uint32_t t)
{
    return t < N_GGML_TYPES && ggml_types[t].name != NULL;
}

const char *gp_gguf_type_name(uint32_t ggml_type)
{
    return ggml_known(ggml_type) ? ggml_types[ggml_type].name : "unknown";
}

/* The metadata value types: name, and bytes of a scalar (0 for string and array). */
static const struct {
    const char *name;
    size_t size;
} value_types[GP_GGUF_TYPE_COUNT] = {
    {"uint8", 1},  {"int8", 1},    {"uint16", 2},  {"int16", 2},  {"uint32", 4},
    {"int32", 4},  {"float32", 4}, {"bool", 1},    {"string", 0}, {"array", 0},
    {"uint64", 8}, {"int64", 8},   {"float64", 8},
};

const char *gp_gguf_value_type_name(gp_gguf_type t)
{
    return (unsigned)t < GP_GGUF_TYPE_COUNT ? value_types[t].name : "unknown";
}

static size_t scalar_size(gp_gguf_type t)
{
    return (unsigned)t < GP_GGUF_TYPE_COUNT ? value_types[t].size : 0;
}

/* The one error function: "PATH: bad GGUF file (REASON)". Returns -1. */
#define bad(g, ...) gp_err_bad((g)->err, (g)->errlen, (g)->path, "GGUF file", __VA_ARGS__)

/* ---- the cursor: every read checks the bytes left first ---- */

typedef struct {
    gp_gguf *g;
    size_t pos;
    char what[160]; /* the item being read, for messages: "kv 3 (\"general.name\") value" */
} cursor;

static void cur_what(cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cur_what(cursor *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->what, sizeof c->what, fmt, ap);
    va_end(ap);
}

static size_t cur_left(const cursor *c)
{
    return c->g->len - c->pos;
}

/* Claims n bytes at the cursor: their address, or NULL with the error set. */
static const unsigned char *cur_take(cursor *c, uint64_t n)
{
    if (n > cur_left(c)) {
        bad(c->g, "%s at offset %zu needs %llu bytes, the file has %zu left", c->what, c->pos,
            (unsigned long long)n, cur_left(c));
        return NULL;
    }
    const unsigned char *p = c->g->base + c->pos;
    c->pos += (size_t)n;
    return p;
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static int cur_u32(cursor *c, uint32_t *out)
{
    const unsigned char *p = cur_take(c, 4);
    if (!p)
        return -1;
    *out = (uint32_t)le(p, 4);
    return 0;
}

static int cur_u64(cursor *c, uint64_t *out)
{
    const unsigned char *p = cur_take(c, 8);
    if (!p)
        return -1;
    *out = le(p, 8);
    return 0;
}

static int cur_str(cursor *c, gp_gguf_str *out)
{
    uint64_t n;
    if (cur_u64(c, &n) != 0)
        return -1;
    const unsigned char *p = cur_take(c, n);
    if (!p)
        return -1;
    out->s = (const char *)p;
    out->len = n;
    return 0;
}

/* A count read from the file, refused when even its smallest encoding cannot fit in what is left.
 */
static int check_count(cursor *c, const char *what, uint64_t n, size_t min_bytes)
{
    if (n > cur_left(c) / min_bytes)
        return bad(c->g, "%s %llu is too large: the %zu bytes left hold at most %zu", what,
                   (unsigned long long)n, cur_left(c), cur_left(c) / min_bytes);
    return 0;
}

/* A key or tensor name as a NUL-terminated copy; empty names and NUL bytes are refused. */
static char *name_copy(cursor *c, const char *what, int64_t i)
{
    gp_gguf_str s;
    if (cur_str(c, &s) != 0)
        return NULL;
    if (s.len == 0 || memchr(s.s, 0, (size_t)s.len)) {
        bad(c->g, "%s %lld: %s", what, (long long)i,
            s.len == 0 ? "empty name" : "name contains a NUL byte");
        return NULL;
    }
    char *k = malloc((size_t)s.len + 1);
    if (!k) {
        bad(c->g, "out of memory");
        return NULL;
    }
    memcpy(k, s.s, (size_t)s.len);
    k[s.len] = '\0';
    return k;
}

/* ---- metadata ---- */

static int read_value(cursor *c, gguf_kv *kv, int64_t i)
{
    uint32_t t;
    cur_what(c, "kv %lld (\"%.64s\") type", (long long)i, kv->key);
    if (cur_u32(c, &t) != 0)
        return -1;
    if (t >= GP_GGUF_TYPE_COUNT)
        return bad(c->g, "kv %lld (\"%.64s\"): unknown value type %u", (long long)i, kv->key, t);
    kv->type = (gp_gguf_type)t;
    cur_what(c, "kv %lld (\"%.64s\") value", (long long)i, kv->key);
    if (kv->type == GP_GGUF_STRING)
        return cur_str(c, &kv->str);
    if (kv->type != GP_GGUF_ARRAY) {
        if (!(kv->val = cur_take(c, scalar_size(kv->type))))
            return -1;
        if (kv->type == GP_GGUF_BOOL && kv->val[0] > 1)
            return bad(c->g, "kv %lld (\"%.64s\"): bool value %u is not 0 or 1", (long long)i,
                       kv->key, kv->val[0]);
        return 0;
    }
    uint32_t et;
    cur_what(c, "kv %lld (\"%.64s\") array type", (long long)i, kv->key);
    if (cur_u32(c, &et) != 0)
        return -1;
    if (et >= GP_GGUF_TYPE_COUNT)
        return bad(c->g, "kv %lld (\"%.64s\"): unknown array element type %u", (long long)i,
                   kv->key, et);
    if (et == GP_GGUF_ARRAY)
        return bad(c->g, "kv %lld (\"%.64s\"): nested arrays are not supported", (long long)i,
                   kv->key);
    kv->elem = (gp_gguf_type)et;
    cur_what(c, "kv %lld (\"%.64s\") array count", (long long)i, kv->key);
    if (cur_u64(c, &kv->n) != 0)
        return -1;
    char what[128];
    snprintf(what, sizeof what, "kv %lld (\"%.64s\"): array count", (long long)i, kv->key);
    if (check_count(c, what, kv->n, kv->elem == GP_GGUF_STRING ? 8 : scalar_size(kv->elem)) != 0)
        return -1;
    kv->val = c->g->base + c->pos;
    if (kv->elem != GP_GGUF_STRING) {
        cur_what(c, "kv %lld (\"%.64s\") array data", (long long)i, kv->key);
        if (!cur_take(c, kv->n * scalar_size(kv->elem)))
            return -1;
        if (kv->elem == GP_GGUF_BOOL)
            for (uint64_t j = 0; j < kv->n; j++)
                if (kv->val[j] > 1)
                    return bad(c->g,
                               "kv %lld (\"%.64s\"): element %llu: bool value %u is not 0 or 1",
                               (long long)i, kv->key, (unsigned long long)j, kv->val[j]);
        return 0;
    }
    kv->str_at = malloc((size_t)(kv->n ? kv->n : 1) * sizeof *kv->str_at);
    if (!kv->str_at)
        return bad(c->g, "out of memory for %llu strings", (unsigned long long)kv->n);
    for (uint64_t j = 0; j < kv->n; j++) {
        gp_gguf_str s;
        kv->str_at[j] = c->pos;
        cur_what(c, "kv %lld (\"%.64s\") element %llu", (long long)i, kv->key,
                 (unsigned long long)j);
        if (cur_str(c, &s) != 0)
            return -1;
    }
    return 0;
}

/* Sorts idx[n] by names[i] and finds the first repeat in file order: the smallest index that
 * repeats an earlier name. Returns it (and the earlier one in *first), -1 when none, -2 out of
 * memory. */
typedef struct {
    const char *name;
    int64_t i;
} named;

static int cmp_named(const void *a, const void *b)
{
    const named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

static int64_t sort_and_find_repeat(int64_t *idx, int64_t n, const char *const *names,
                                    int64_t *first)
{
    named *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v)
        return -2;
    for (int64_t i = 0; i < n; i++)
        v[i] = (named){names[i], i};
    qsort(v, (size_t)n, sizeof *v, cmp_named);
    int64_t rep = -1;
    for (int64_t i = 0; i < n; i++) {
        idx[i] = v[i].i;
        /* the second of a run of equal names is the run's first repeat in file order */
        if (i > 0 && strcmp(v[i - 1].name, v[i].name) == 0 &&
            (i < 2 || strcmp(v[i - 2].name, v[i].name) != 0) && (rep < 0 || v[i].i < rep)) {
            rep = v[i].i;
            *first = v[i - 1].i;
        }
    }
    free(v);
    return rep;
}

static int read_kvs(cursor *c)
{
    gp_gguf *g = c->g;
    g->kv = calloc((size_t)(g->n_kv ? g->n_kv : 1), sizeof *g->kv);
    g->kv_sorted = malloc((size_t)(g->n_kv ? g->n_kv : 1) * sizeof *g->kv_sorted);
    const char **keys = malloc((size_t)(g->n_kv ? g->n_kv : 1) * sizeof *keys);
    if (!g->kv || !g->kv_sorted || !keys) {
        free(keys);
        return bad(g, "out of memory for %lld kvs", (long long)g->n_kv);
    }
    int64_t done = 0;
    for (; done < g->n_kv; done++) {
        gguf_kv *kv = &g->kv[done];
        cur_what(c, "kv %lld key", (long long)done);
        if (!(kv->key = name_copy(c, "kv", done)) || read_value(c, kv, done) != 0)
            break;
        keys[done] = kv->key;
    }
    int64_t first = 0, rep = -1;
    if (done == g->n_kv)
        rep = sort_and_find_repeat(g->kv_sorted, g->n_kv, keys, &first);
    free(keys);
    if (done < g->n_kv)
        return -1;
    if (rep == -2)
        return bad(g, "out of memory");
    if (rep >= 0)
        return bad(g, "kv %lld: duplicate key \"%.64s\" (also kv %lld)", (long long)rep,
                   g->kv[rep].key, (long long)first);
    return 0;
}

static int read_alignment(gp_gguf *g)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = gp_gguf_find(g, "general.alignment");
    if (i < 0)
        return 0;
    if (g->kv[i].type != GP_GGUF_UINT32)
        return bad(g, "general.alignment must be a uint32, not a %s",
                   value_types[g->kv[i].type].name);
    uint32_t a = (uint32_t)le(g->kv[i].val, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return bad(g, "general.alignment %u is not a power of two", a);
    g->alignment = a;
    return 0;
}

/* ---- tensor infos and data ---- */

static int read_tensor_info(cursor *c, gp_gguf_tensor *t, int64_t i)
{
    gp_gguf *g = c->g;
    cur_what(c, "tensor info %lld name", (long long)i);
    char *name = name_copy(c, "tensor info", i);
    if (!name)
        return -1;
    t->name = name;
    uint32_t nd, type;
    cur_what(c, "tensor info %lld (\"%.64s\") ndim", (long long)i, name);
    if (cur_u32(c, &nd) != 0)
        return -1;
    if (nd < 1 || nd > GP_MAX_DIMS)
        return bad(g, "tensor \"%.64s\": ndim %u is outside [1, %d]", name, nd, GP_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t numel = 1;
    int overflow = 0;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t v;
        cur_what(c, "tensor info %lld (\"%.64s\") ne[%d]", (long long)i, name, d);
        if (cur_u64(c, &v) != 0)
            return -1;
        t->ne[d] = (int64_t)v;
        if (t->ne[d] <= 0)
            return bad(g, "tensor \"%.64s\": ne[%d] = %lld is not positive", name, d,
                       (long long)t->ne[d]);
        if (v > (uint64_t)INT64_MAX / numel)
            overflow = 1;
        else
            numel *= v;
    }
    cur_what(c, "tensor info %lld (\"%.64s\") type", (long long)i, name);
    if (cur_u32(c, &type) != 0)
        return -1;
    cur_what(c, "tensor info %lld (\"%.64s\") offset", (long long)i, name);
    if (cur_u64(c, &t->offset) != 0)
        return -1;
    if (overflow)
        return bad(g, "tensor \"%.64s\": element count overflows 63 bits", name);
    if (!ggml_known(type))
        return bad(g, "tensor \"%.64s\": unknown ggml type id %u", name, type);
    t->ggml_type = type;
    int gp = gp_dtype_from_ggml(type); /* -1: gplan cannot compute with it */
    t->supported = gp >= 0;
    t->dtype = t->supported ? (gp_dtype)gp : GP_F32;
    uint64_t block = (uint64_t)ggml_types[type].block, rows = numel / (uint64_t)t->ne[0];
    if ((uint64_t)t->ne[0] % block != 0)
        return bad(g, "tensor \"%.64s\": ne[0] = %lld is not a multiple of %s's block of %llu",
                   name, (long long)t->ne[0], ggml_types[type].name, (unsigned long long)block);
    uint64_t blocks = (uint64_t)t->ne[0] / block, bpb = (uint64_t)ggml_types[type].bytes;
    uint64_t row = blocks * bpb;
    if (blocks > (uint64_t)INT64_MAX / bpb || row > (uint64_t)INT64_MAX / rows)
        return bad(g, "tensor \"%.64s\": byte size overflows 63 bits", name);
    t->nbytes = (size_t)(row * rows);
    if (t->offset % g->alignment != 0)
        return bad(g, "tensor \"%.64s\": offset %llu is not a multiple of the alignment %llu", name,
                   (unsigned long long)t->offset, (unsigned long long)g->alignment);
    return 0;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const gp_gguf_tensor *x = *(const gp_gguf_tensor *const *)a;
    const gp_gguf_tensor *y = *(const gp_gguf_tensor *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* The data section starts at the first multiple of the alignment after the tensor infos; every
 * tensor lies inside it and no two share a byte. */
static int place_data(gp_gguf *g, size_t infos_end)
{
    uint64_t start = infos_end + (g->alignment - infos_end % g->alignment) % g->alignment;
    if (g->n_tensors == 0)
        return 0; /* a metadata-only file (a vocabulary) may end right after its kvs */
    if (start > g->len)
        return bad(g, "data section at offset %llu is past the end of the file (%zu bytes)",
                   (unsigned long long)start, g->len);
    /* Padding is zeros: anything else there is more tensor infos than tensor_count says, and the
     * data would be read from the wrong place. */
    for (uint64_t i = infos_end; i < start; i++)
        if (g->base[i] != 0)
            return bad(g, "byte %llu of the padding before the data section is 0x%02x, not 0 (more "
                       "tensor infos than tensor_count = %lld?)", (unsigned long long)i,
                       g->base[i], (long long)g->n_tensors);
    uint64_t size = g->len - start;
    const gp_gguf_tensor **by = malloc((size_t)g->n_tensors * sizeof *by);
    if (!by)
        return bad(g, "out of memory");
    int rc = 0;
    for (int64_t i = 0; i < g->n_tensors && rc == 0; i++) {
        gp_gguf_tensor *t = &g->tensors[i];
        by[i] = t;
        if (t->offset > size || t->nbytes > size - t->offset)
            rc = bad(g,
                     "tensor \"%.64s\": bytes [%llu, %llu) past the end of the data section "
                     "(%llu bytes)",
                     t->name, (unsigned long long)t->offset,
                     (unsigned long long)(t->offset + t->nbytes), (unsigned long long)size);
        else
            t->data = g->base + start + t->offset;
    }
    if (rc == 0) {
        qsort(by, (size_t)g->n_tensors, sizeof *by, cmp_by_offset);
        /* The data ends with its last tensor (and at most its padding): more bytes after it mean
         * the section starts later than the header says. */
        const gp_gguf_tensor *last = by[g->n_tensors - 1];
        uint64_t end = last->offset + last->nbytes;
        if (size - end >= g->alignment)
            rc = bad(g, "the data section holds %llu bytes after its last tensor \"%.64s\" (more "
                     "tensor infos than tensor_count = %lld?)", (unsigned long long)(size - end),
                     last->name, (long long)g->n_tensors);
        for (int64_t i = 1; i < g->n_tensors && rc == 0; i++)
            if (by[i - 1]->offset + by[i - 1]->nbytes > by[i]->offset)
                rc = bad(g, "tensors \"%.64s\" [%llu, %llu) and \"%.64s\" [%llu, %llu) overlap",
                         by[i - 1]->name, (unsigned long long)by[i - 1]->offset,
                         (unsigned long long)(by[i - 1]->offset + by[i - 1]->nbytes), by[i]->name,
                         (unsigned long long)by[i]->offset,
                         (unsigned long long)(by[i]->offset + by[i]->nbytes));
    }
    free(by);
    return rc;
}

static int read_tensors(cursor *c)
{
    gp_gguf *g = c->g;
    size_t n = (size_t)(g->n_tensors ? g->n_tensors : 1);
    g->tensors = calloc(n, sizeof *g->tensors);
    g->t_sorted = malloc(n * sizeof *g->t_sorted);
    const char **names = malloc(n * sizeof *names);
    if (!g->tensors || !g->t_sorted || !names) {
        free(names);
        return bad(g, "out of memory for %lld tensor infos", (long long)g->n_tensors);
    }
    int64_t done = 0;
    for (; done < g->n_tensors; done++) {
        if (read_tensor_info(c, &g->tensors[done], done) != 0)
            break;
        names[done] = g->tensors[done].name;
    }
    int64_t first = 0, rep = -1;
    if (done == g->n_tensors)
        rep = sort_and_find_repeat(g->t_sorted, g->n_tensors, names, &first);
    free(names);
    if (done < g->n_tensors)
        return -1;
    if (rep == -2)
        return bad(g, "out of memory");
    if (rep >= 0)
        return bad(g, "tensor info %lld: duplicate name \"%.64s\" (also tensor info %lld)",
                   (long long)rep, g->tensors[rep].name, (long long)first);
    return place_data(g, c->pos);
}

static int parse(gp_gguf *g)
{
    cursor c = {.g = g};
    cur_what(&c, "magic");
    const unsigned char *m = cur_take(&c, 4);
    if (!m)
        return -1;
    if (memcmp(m, "GGUF", 4) != 0)
        return bad(g, "bad magic %02x %02x %02x %02x: not a GGUF file", m[0], m[1], m[2], m[3]);
    cur_what(&c, "version");
    if (cur_u32(&c, &g->version) != 0)
        return -1;
    if (g->version == 1)
        return bad(g, "version 1 is not supported (this reader takes versions 2 and 3)");
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && (g->version >> 16) != 0)
            return bad(g,
                       "version field 0x%08x is byte-swapped: a big-endian file (this reader "
                       "takes little-endian files only)",
                       g->version);
        return bad(g, "unsupported version %u (this reader takes versions 2 and 3)", g->version);
    }
    uint64_t nt, nkv;
    cur_what(&c, "tensor count");
    if (cur_u64(&c, &nt) != 0)
        return -1;
    cur_what(&c, "kv count");
    if (cur_u64(&c, &nkv) != 0)
        return -1;
    if (check_count(&c, "kv count", nkv, MIN_KV_BYTES) != 0 ||
        check_count(&c, "tensor count", nt, MIN_TENSOR_INFO_BYTES) != 0)
        return -1;
    g->n_kv = (int64_t)nkv;
    if (read_kvs(&c) != 0 || read_alignment(g) != 0)
        return -1;
    g->n_tensors = (int64_t)nt;
    if (check_count(&c, "tensor count", nt, MIN_TENSOR_INFO_BYTES) != 0)
        return -1;
    return read_tensors(&c);
}

/* ---- open and close ---- */

static gp_gguf *reader_new(const char *name, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    gp_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(name ? name : "(memory)"))) {
        free(g);
        gp_errf(err, errlen, "%s: out of memory", name ? name : "(memory)");
        return NULL;
    }
    g->err = err;
    g->errlen = errlen;
    return g;
}

static gp_gguf *finish(gp_gguf *g)
{
    int rc = parse(g);
    g->err = NULL;
    if (rc != 0) {
        gp_gguf_close(g);
        return NULL;
    }
    return g;
}

gp_gguf *gp_gguf_open_mem(const void *data, size_t len, const char *name, char *err, size_t errlen)
{
    gp_gguf *g = reader_new(name, err, errlen);
    if (!g)
        return NULL;
    g->base = data;
    g->len = data ? len : 0;
    return finish(g);
}

gp_gguf *gp_gguf_open(const char *path, char *err, size_t errlen)
{
    gp_gguf *g = reader_new(path, err, errlen);
    if (!g)
        return NULL;
    if (gp_filemap_open(&g->map, path, err, errlen) != 0) {
        gp_gguf_close(g);
        return NULL;
    }
    g->base = g->map.data;
    g->len = g->map.len;
    return finish(g);
}

void gp_gguf_close(gp_gguf *g)
{
    if (!g)
        return;
    for (int64_t i = 0; g->kv && i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str_at);
    }
    for (int64_t i = 0; g->tensors && i < g->n_tensors; i++)
        free((char *)g->tensors[i].name);
    free(g->kv);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->t_sorted);
    gp_filemap_close(&g->map);
    free(g->path);
    free(g);
}

const char *gp_gguf_path(const gp_gguf *g)
{
    return g->path;
}

uint32_t gp_gguf_version(const gp_gguf *g)
{
    return g->version;
}

uint64_t gp_gguf_alignment(const gp_gguf *g)
{
    return g->alignment;
}

/* ---- metadata access ---- */

int64_t gp_gguf_kv_count(const gp_gguf *g)
{
    return g->n_kv;
}

const char *gp_gguf_kv_key(const gp_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

gp_gguf_type gp_gguf_kv_type(const gp_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kv[i].type : GP_GGUF_TYPE_COUNT;
}

int64_t gp_gguf_find(const gp_gguf *g, const char *key)
{
    int64_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->kv[g->kv_sorted[mid]].key, key);
        if (c == 0)
            return g->kv_sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* A scalar of type t at p as int64 (0) or -1 when it is not an integer or does not fit. */
static int to_int(gp_gguf_type t, const unsigned char *p, int64_t *out)
{
    uint64_t v = le(p, (int)scalar_size(t));
    switch (t) {
    case GP_GGUF_UINT8:
    case GP_GGUF_UINT16:
    case GP_GGUF_UINT32:
    case GP_GGUF_BOOL: *out = (int64_t)v; return 0;
    case GP_GGUF_UINT64:
        if (v > (uint64_t)INT64_MAX)
            return -1;
        *out = (int64_t)v;
        return 0;
    case GP_GGUF_INT8: *out = (int8_t)(uint8_t)v; return 0;
    case GP_GGUF_INT16: *out = (int16_t)(uint16_t)v; return 0;
    case GP_GGUF_INT32: *out = (int32_t)(uint32_t)v; return 0;
    case GP_GGUF_INT64: *out = (int64_t)v; return 0;
    default: return -1;
    }
}

static int to_float(gp_gguf_type t, const unsigned char *p, double *out)
{
    int64_t i;
    if (t == GP_GGUF_FLOAT32) {
        float f;
        uint32_t v = (uint32_t)le(p, 4);
        memcpy(&f, &v, 4);
        *out = f;
    } else if (t == GP_GGUF_FLOAT64) {
        uint64_t v = le(p, 8);
        memcpy(out, &v, 8);
    } else if (t == GP_GGUF_UINT64) {
        *out = (double)le(p, 8);
    } else if (t != GP_GGUF_BOOL && to_int(t, p, &i) == 0) {
        *out = (double)i;
    } else {
        return -1;
    }
    return 0;
}

static const gguf_kv *kv_by_key(const gp_gguf *g, const char *key)
{
    int64_t i = gp_gguf_find(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

int gp_gguf_get_int(const gp_gguf *g, const char *key, int64_t *out)
{
    const gguf_kv *kv = kv_by_key(g, key);
    if (!kv)
        return 1;
    return scalar_size(kv->type) ? to_int(kv->type, kv->val, out) : -1;
}

int gp_gguf_get_float(const gp_gguf *g, const char *key, double *out)
{
    const gguf_kv *kv = kv_by_key(g, key);
    if (!kv)
        return 1;
    return scalar_size(kv->type) ? to_float(kv->type, kv->val, out) : -1;
}

int gp_gguf_get_bool(const gp_gguf *g, const char *key, int *out)
{
    const gguf_kv *kv = kv_by_key(g, key);
    if (!kv)
        return 1;
    if (kv->type != GP_GGUF_BOOL)
        return -1;
    *out = kv->val[0];
    return 0;
}

int gp_gguf_get_str(const gp_gguf *g, const char *key, gp_gguf_str *out)
{
    const gguf_kv *kv = kv_by_key(g, key);
    if (!kv)
        return 1;
    if (kv->type != GP_GGUF_STRING)
        return -1;
    *out = kv->str;
    return 0;
}

int gp_gguf_get_arr(const gp_gguf *g, const char *key, gp_gguf_type *elem, uint64_t *n)
{
    const gguf_kv *kv = kv_by_key(g, key);
    if (!kv)
        return 1;
    if (kv->type != GP_GGUF_ARRAY)
        return -1;
    *elem = kv->elem;
    *n = kv->n;
    return 0;
}

/* Array kv i's element j when the array is numeric, else NULL. */
static const unsigned char *arr_elem(const gp_gguf *g, int64_t i, uint64_t j)
{
    if (i < 0 || i >= g->n_kv || g->kv[i].type != GP_GGUF_ARRAY ||
        g->kv[i].elem == GP_GGUF_STRING || j >= g->kv[i].n)
        return NULL;
    return g->kv[i].val + j * scalar_size(g->kv[i].elem);
}

int gp_gguf_arr_int(const gp_gguf *g, int64_t kv, uint64_t j, int64_t *out)
{
    const unsigned char *p = arr_elem(g, kv, j);
    return p ? to_int(g->kv[kv].elem, p, out) : -1;
}

int gp_gguf_arr_float(const gp_gguf *g, int64_t kv, uint64_t j, double *out)
{
    const unsigned char *p = arr_elem(g, kv, j);
    return p ? to_float(g->kv[kv].elem, p, out) : -1;
}

int gp_gguf_arr_str(const gp_gguf *g, int64_t kv, uint64_t j, gp_gguf_str *out)
{
    if (kv < 0 || kv >= g->n_kv || g->kv[kv].type != GP_GGUF_ARRAY ||
        g->kv[kv].elem != GP_GGUF_STRING || j >= g->kv[kv].n)
        return -1;
    const unsigned char *p = g->base + g->kv[kv].str_at[j];
    out->len = le(p, 8);
    out->s = (const char *)p + 8;
    return 0;
}

const void *gp_gguf_arr_data(const gp_gguf *g, int64_t kv)
{
    if (kv < 0 || kv >= g->n_kv || g->kv[kv].type != GP_GGUF_ARRAY ||
        g->kv[kv].elem == GP_GGUF_STRING)
        return NULL;
    return g->kv[kv].val;
}

/* ---- tensors ---- */

int64_t gp_gguf_tensor_count(const gp_gguf *g)
{
    return g->n_tensors;
}

const gp_gguf_tensor *gp_gguf_tensor_get(const gp_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const gp_gguf_tensor *gp_gguf_tensor_find(const gp_gguf *g, const char *name)
{
    int64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(g->tensors[g->t_sorted[mid]].name, name);
        if (c == 0)
            return &g->tensors[g->t_sorted[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
