/* The safetensors reader (mmap + jansson header parse with every field validated) and writer.
 * Format: u64 little-endian header length N, N bytes of UTF-8 JSON, then the data area; each
 * tensor's data_offsets [begin, end) are relative to the first byte after the header. */
#include "weights/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/core.h"
#include "weights/filemap.h"

struct gp_st_file {
    char *path;
    gp_filemap map; /* the whole file, read-only */
    const unsigned char *data; /* [data_len] the data area, just after the header */
    size_t data_len;
    json_t *header;        /* owns every name and dtype string the tensors point to */
    json_t *meta;          /* borrowed from header; NULL when absent */
    gp_st_tensor *tensors; /* [count] sorted by name */
    int count;
};

/* Every dtype the safetensors format defines; gplan computes with the four that map to gp_dtype. */
static const struct {
    const char *name;
    size_t size;
    int gp; /* gp_dtype, or -1 when gplan does not support it */
} st_dtypes[] = {
    {"F32", 4, GP_F32}, {"F16", 2, GP_F16}, {"BF16", 2, GP_BF16}, {"I32", 4, GP_I32},
    {"F64", 8, -1},     {"I64", 8, -1},     {"U64", 8, -1},       {"U32", 4, -1},
    {"I16", 2, -1},     {"U16", 2, -1},     {"I8", 1, -1},        {"U8", 1, -1},
    {"BOOL", 1, -1},    {"F8_E4M3", 1, -1}, {"F8_E5M2", 1, -1},
};
#define N_ST_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

static int st_dtype_index(const char *name)
{
    for (int i = 0; i < N_ST_DTYPES; i++)
        if (strcmp(name, st_dtypes[i].name) == 0)
            return i;
    return -1;
}

int gp_st_dtype_supported(const char *file_dtype, gp_dtype *out)
{
    int i = file_dtype ? st_dtype_index(file_dtype) : -1;
    if (i < 0 || st_dtypes[i].gp < 0)
        return -1;
    if (out)
        *out = (gp_dtype)st_dtypes[i].gp;
    return 0;
}

const char *gp_st_dtype_name(gp_dtype t)
{
    for (int i = 0; i < N_ST_DTYPES; i++)
        if (st_dtypes[i].gp >= 0 && st_dtypes[i].gp == (int)t)
            return st_dtypes[i].name;
    return NULL;
}

/* The one error function of the loader: "PATH: bad safetensors file (REASON)". Returns -1. */
#define bad(err, errlen, path, ...) gp_err_bad(err, errlen, path, "safetensors file", __VA_ARGS__)

static uint64_t read_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* a * b into *out; 0 on success, -1 on overflow past INT64_MAX. Both operands are >= 0. */
static int mul_checked(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > (uint64_t)INT64_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

/* A JSON integer >= 0 (2.0, -1 and "1" are not), into *out. */
static int json_nonneg(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* Fills t from one header entry; checks everything that does not involve other tensors. */
static int parse_entry(gp_st_file *f, const char *name, json_t *e, gp_st_tensor *t, uint64_t *begin,
                       char *err, size_t errlen)
{
    const char *p = f->path;
    if (!json_is_object(e))
        return bad(err, errlen, p, "tensor \"%s\": entry is not an object", name);
    json_t *jd = json_object_get(e, "dtype");
    json_t *js = json_object_get(e, "shape");
    json_t *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd))
        return bad(err, errlen, p, "tensor \"%s\": dtype missing or not a string", name);
    int di = st_dtype_index(json_string_value(jd));
    if (di < 0)
        return bad(err, errlen, p, "tensor \"%s\": bad dtype \"%s\"", name, json_string_value(jd));
    if (!json_is_array(js))
        return bad(err, errlen, p, "tensor \"%s\": shape missing or not an array", name);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return bad(err, errlen, p, "tensor \"%s\": data_offsets missing or not [begin, end]", name);

    t->name = name;
    t->file_dtype = st_dtypes[di].name;
    if (json_array_size(js) > 64)
        return bad(err, errlen, p, "tensor \"%s\": rank %zu is absurd", name, json_array_size(js));
    t->ndim = (int)json_array_size(js);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t dim;
        if (json_nonneg(json_array_get(js, (size_t)d), &dim) != 0)
            return bad(err, errlen, p,
                       "tensor \"%s\": shape entry %d is not a non-negative integer", name, d);
        if (d < GP_MAX_DIMS)
            t->shape[d] = (int64_t)dim;
        if (mul_checked(numel, dim, &numel) != 0)
            return bad(err, errlen, p, "tensor \"%s\": shape overflows 64 bits", name);
    }
    uint64_t b, en, need;
    if (json_nonneg(json_array_get(jo, 0), &b) != 0 || json_nonneg(json_array_get(jo, 1), &en) != 0)
        return bad(err, errlen, p, "tensor \"%s\": data_offsets are not non-negative integers",
                   name);
    if (b > en)
        return bad(err, errlen, p, "tensor \"%s\": data_offsets reversed [%llu, %llu]", name,
                   (unsigned long long)b, (unsigned long long)en);
    if (en > f->data_len)
        return bad(err, errlen, p,
                   "tensor \"%s\": data_offsets [%llu, %llu] out of range: data area is %zu bytes",
                   name, (unsigned long long)b, (unsigned long long)en, f->data_len);
    if (mul_checked(numel, st_dtypes[di].size, &need) != 0)
        return bad(err, errlen, p, "tensor \"%s\": shape overflows 64 bits", name);
    if (need != en - b)
        return bad(
            err, errlen, p,
            "tensor \"%s\": size mismatch: shape needs %llu bytes of %s, data_offsets give %llu",
            name, (unsigned long long)need, t->file_dtype, (unsigned long long)(en - b));
    t->data = f->data + b;
    t->nbytes = (size_t)(en - b);
    t->supported = st_dtypes[di].gp >= 0 && t->ndim <= GP_MAX_DIMS;
    t->dtype = st_dtypes[di].gp >= 0 ? (gp_dtype)st_dtypes[di].gp : GP_F32;
    *begin = b;
    return 0;
}

static int cmp_by_name(const void *a, const void *b)
{
    return strcmp(((const gp_st_tensor *)a)->name, ((const gp_st_tensor *)b)->name);
}

static int cmp_by_data(const void *a, const void *b)
{
    const gp_st_tensor *x = *(const gp_st_tensor *const *)a, *y = *(const gp_st_tensor *const *)b;
    const unsigned char *px = x->data, *py = y->data;
    return px < py ? -1 : px > py ? 1 : 0;
}

/* Tensors must not share bytes: sort by start, then each must end before the next non-empty starts.
 */
static int check_overlap(gp_st_file *f, char *err, size_t errlen)
{
    if (f->count < 2)
        return 0;
    const gp_st_tensor **by = malloc((size_t)f->count * sizeof *by);
    if (!by)
        return bad(err, errlen, f->path, "out of memory");
    for (int i = 0; i < f->count; i++)
        by[i] = &f->tensors[i];
    qsort(by, (size_t)f->count, sizeof *by, cmp_by_data);
    const gp_st_tensor *prev = NULL;
    int rc = 0;
    for (int i = 0; i < f->count && rc == 0; i++) {
        const gp_st_tensor *t = by[i];
        if (t->nbytes == 0)
            continue;
        if (prev &&
            (const unsigned char *)prev->data + prev->nbytes > (const unsigned char *)t->data) {
            size_t pb = (size_t)((const unsigned char *)prev->data - f->data);
            size_t tb = (size_t)((const unsigned char *)t->data - f->data);
            rc =
                bad(err, errlen, f->path, "tensors \"%s\" [%zu, %zu) and \"%s\" [%zu, %zu) overlap",
                    prev->name, pb, pb + prev->nbytes, t->name, tb, tb + t->nbytes);
        }
        prev = t;
    }
    free(by);
    return rc;
}

static int parse_header(gp_st_file *f, char *err, size_t errlen)
{
    const unsigned char *base = f->map.data;
    const char *p = f->path;
    if (f->map.len < 8)
        return bad(err, errlen, p, "file of %zu bytes is too short for the 8-byte header length",
                   f->map.len);
    uint64_t n = read_le64(base);
    if (n > GP_ST_MAX_HEADER)
        return bad(err, errlen, p, "header length %llu over the cap of %u bytes",
                   (unsigned long long)n, GP_ST_MAX_HEADER);
    if (n > f->map.len - 8)
        return bad(err, errlen, p, "header length %llu past the end of the file (%zu bytes)",
                   (unsigned long long)n, f->map.len);
    if (n < 2)
        return bad(err, errlen, p, "header length %llu too short for a JSON object",
                   (unsigned long long)n);
    f->data = base + 8 + n;
    f->data_len = f->map.len - 8 - (size_t)n;

    json_error_t je;
    /* Duplicate names would make lookup ambiguous; jansson also rejects invalid UTF-8 and NULs. */
    f->header = json_loadb((const char *)base + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!f->header)
        return bad(err, errlen, p, "header JSON: %s at line %d, column %d", je.text, je.line,
                   je.column);
    if (!json_is_object(f->header))
        return bad(err, errlen, p, "header is not a JSON object");

    size_t n_entries = json_object_size(f->header);
    f->meta = json_object_get(f->header, "__metadata__");
    if (f->meta) {
        if (!json_is_object(f->meta))
            return bad(err, errlen, p, "__metadata__ is not an object");
        const char *k;
        json_t *v;
        json_object_foreach(f->meta, k, v) {
            if (!json_is_string(v))
                return bad(err, errlen, p, "__metadata__ value \"%s\" is not a string", k);
        }
        n_entries--;
    }
    if (n_entries > (size_t)INT32_MAX)
        return bad(err, errlen, p, "%zu tensors is too many", n_entries);
    f->tensors = calloc(n_entries ? n_entries : 1, sizeof *f->tensors);
    if (!f->tensors)
        return bad(err, errlen, p, "out of memory for %zu tensors", n_entries);

    const char *name;
    json_t *e;
    json_object_foreach(f->header, name, e) {
        if (e == f->meta)
            continue;
        uint64_t begin;
        if (parse_entry(f, name, e, &f->tensors[f->count], &begin, err, errlen) != 0)
            return -1;
        f->count++;
    }
    if (check_overlap(f, err, errlen) != 0)
        return -1;
    qsort(f->tensors, (size_t)f->count, sizeof *f->tensors, cmp_by_name);
    return 0;
}

gp_st_file *gp_st_open(const char *path, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    /* The format is little-endian and the data is handed out in place. */
    const uint16_t probe = 1;
    if (*(const unsigned char *)&probe != 1) {
        bad(err, errlen, path, "big-endian hosts are not supported");
        return NULL;
    }
    gp_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        gp_errf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    if (gp_filemap_open(&f->map, path, err, errlen) != 0) {
        gp_st_close(f);
        return NULL;
    }
    if (parse_header(f, err, errlen) != 0) {
        gp_st_close(f);
        return NULL;
    }
    return f;
}

void gp_st_close(gp_st_file *f)
{
    if (!f)
        return;
    gp_filemap_close(&f->map);
    json_decref(f->header);
    free(f->tensors);
    free(f->path);
    free(f);
}

const char *gp_st_path(const gp_st_file *f)
{
    return f->path;
}

int gp_st_count(const gp_st_file *f)
{
    return f->count;
}

const gp_st_tensor *gp_st_get(const gp_st_file *f, int i)
{
    if (i < 0 || i >= f->count)
        return NULL;
    return &f->tensors[i];
}

const gp_st_tensor *gp_st_find(const gp_st_file *f, const char *name)
{
    gp_st_tensor key = {.name = name};
    return bsearch(&key, f->tensors, (size_t)f->count, sizeof *f->tensors, cmp_by_name);
}

const char *gp_st_metadata(const gp_st_file *f, const char *key)
{
    return f->meta ? json_string_value(json_object_get(f->meta, key)) : NULL;
}

int64_t gp_st_numel(const gp_st_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim && d < GP_MAX_DIMS; d++)
        n *= t->shape[d];
    return n;
}

/* ---- writer ---- */

/* Builds the header object; data offsets follow the order of tensors. -1 with err set. */
static json_t *build_header(const char *path, const gp_st_tensor *ts, int n,
                            const char *const *meta, char *err, size_t errlen)
{
    json_t *root = json_object();
    if (!root)
        goto oom;
    if (meta && meta[0]) {
        json_t *m = json_object();
        if (!m || json_object_set_new(root, "__metadata__", m) != 0)
            goto oom;
        for (int i = 0; meta[i]; i += 2) {
            if (!meta[i + 1]) {
                gp_errf(err, errlen, "%s: metadata key \"%s\" has no value", path, meta[i]);
                goto fail;
            }
            if (json_object_set_new(m, meta[i], json_string(meta[i + 1])) != 0) {
                gp_errf(err, errlen, "%s: metadata \"%s\" is not valid UTF-8", path, meta[i]);
                goto fail;
            }
        }
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const gp_st_tensor *t = &ts[i];
        const char *dn = t->file_dtype ? t->file_dtype : gp_st_dtype_name(t->dtype);
        int di = dn ? st_dtype_index(dn) : -1;
        if (!t->name || strcmp(t->name, "__metadata__") == 0 || json_object_get(root, t->name)) {
            gp_errf(err, errlen, "%s: tensor %d: name missing, reserved or repeated (\"%s\")", path,
                    i, t->name ? t->name : "");
            goto fail;
        }
        if (di < 0 || t->ndim < 0 || t->ndim > GP_MAX_DIMS) {
            gp_errf(err, errlen, "%s: tensor \"%s\": bad dtype or rank", path, t->name);
            goto fail;
        }
        uint64_t numel = 1, need;
        json_t *shape = json_array();
        if (!shape)
            goto oom;
        int shape_ok = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0 || mul_checked(numel, (uint64_t)t->shape[d], &numel) != 0)
                shape_ok = 0;
            json_array_append_new(shape, json_integer(t->shape[d]));
        }
        if (!shape_ok || mul_checked(numel, st_dtypes[di].size, &need) != 0 || need != t->nbytes ||
            (t->nbytes > 0 && !t->data)) {
            json_decref(shape);
            gp_errf(err, errlen, "%s: tensor \"%s\": shape, dtype and %zu data bytes disagree",
                    path, t->name, t->nbytes);
            goto fail;
        }
        json_t *e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", st_dtypes[di].name, "shape", shape,
                              "data_offsets", (json_int_t)off, (json_int_t)(off + t->nbytes));
        if (!e || json_object_set_new(root, t->name, e) != 0) {
            gp_errf(err, errlen, "%s: tensor \"%s\": name is not valid UTF-8", path, t->name);
            goto fail;
        }
        off += t->nbytes;
    }
    return root;
oom:
    gp_errf(err, errlen, "%s: out of memory", path);
fail:
    json_decref(root);
    return NULL;
}

int gp_st_write(const char *path, const gp_st_tensor *tensors, int n, const char *const *meta,
                char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (n < 0 || (n > 0 && !tensors)) {
        gp_errf(err, errlen, "%s: bad tensor list", path);
        return -1;
    }
    json_t *root = build_header(path, tensors, n, meta, err, errlen);
    if (!root)
        return -1;
    char *js = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!js) {
        gp_errf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    size_t len = strlen(js);
    size_t padded = (len + 7) / 8 * 8; /* keeps the data area 8-byte aligned in the file */
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        gp_errf(err, errlen, "%s: cannot create (%s)", path, strerror(errno));
        free(js);
        return -1;
    }
    unsigned char hl[8];
    for (int i = 0; i < 8; i++)
        hl[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int ok = fwrite(hl, 1, 8, fp) == 8 && fwrite(js, 1, len, fp) == len;
    for (size_t i = len; ok && i < padded; i++)
        ok = fputc(' ', fp) != EOF;
    for (int i = 0; ok && i < n; i++)
        ok = tensors[i].nbytes == 0 ||
             fwrite(tensors[i].data, 1, tensors[i].nbytes, fp) == tensors[i].nbytes;
    free(js);
    if (fclose(fp) != 0)
        ok = 0;
    if (!ok) {
        gp_errf(err, errlen, "%s: write failed (%s)", path, strerror(errno));
        remove(path);
        return -1;
    }
    return 0;
}
