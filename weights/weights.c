/* Checkpoint sources (one safetensors file, an indexed folder of shards, or a GGUF file), the check
 * of a graph's declared weights against them, and reads with f32/f16/bf16 conversion
 * (ir/f16.h). */
#include "weights/filemap.h"
#include "weights/weights.h"

#include "ir/f16.h"
#include "weights/gguf.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct gp_weights {
    char *path;
    gp_st_file **shards; /* [n_shards] */
    int n_shards;
    const gp_st_tensor **by_name; /* [count] sorted by name; into the shards or gguf_tensors */
    int count;
    gp_gguf *gguf;              /* a GGUF source (then n_shards is 0), else NULL */
    gp_st_tensor *gguf_tensors; /* [count] the GGUF tensors as records; names and data in gguf */
    char arch[64];              /* the GGUF file's general.architecture, for the name aliases */
};

/* "PATH: bad safetensors index (REASON)" */
static void bad_index(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "%s: bad safetensors index (%s)", path, reason);
}

static int cmp_tensor_ptr(const void *a, const void *b)
{
    return strcmp((*(const gp_st_tensor *const *)a)->name, (*(const gp_st_tensor *const *)b)->name);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int is_regular(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s", dir, name);
    return s;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A shard is named by a plain file name in the index's folder: nothing that climbs out of it. */
static int plain_file_name(const char *s)
{
    return s[0] != '\0' && strlen(s) < 256 && !strchr(s, '/') && !strchr(s, '\\') &&
           !strstr(s, "..");
}

static int add_shard(gp_weights *w, const char *path, char *err, size_t errlen)
{
    gp_st_file **ns = realloc(w->shards, (size_t)(w->n_shards + 1) * sizeof *ns);
    if (!ns) {
        gp_errf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    w->shards = ns;
    gp_st_file *f = gp_st_open(path, err, errlen);
    if (!f)
        return -1;
    w->shards[w->n_shards++] = f;
    return 0;
}

static int open_single(gp_weights *w, const char *path, char *err, size_t errlen)
{
    if (add_shard(w, path, err, errlen) != 0)
        return -1;
    gp_st_file *f = w->shards[0];
    int n = gp_st_count(f);
    w->by_name = malloc((size_t)(n ? n : 1) * sizeof *w->by_name);
    if (!w->by_name) {
        gp_errf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (int i = 0; i < n; i++)
        w->by_name[i] = gp_st_get(f, i); /* already in name order */
    w->count = n;
    return 0;
}

/* Whether the file starts with GGUF's magic. */
static int is_gguf(const char *path)
{
    unsigned char m[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t got = fread(m, 1, 4, f);
    fclose(f);
    return got == 4 && memcmp(m, "GGUF", 4) == 0;
}

/* A GGUF file: its tensors as records, the shape in gplan's order (outermost first, the reverse of
 * ggml's ne), the data in place in the mapping. */
static int open_gguf(gp_weights *w, const char *path, char *err, size_t errlen)
{
    w->gguf = gp_gguf_open(path, err, errlen);
    if (!w->gguf)
        return -1;
    int64_t n = gp_gguf_tensor_count(w->gguf);
    if (n > INT32_MAX) {
        gp_errf(err, errlen, "%s: %lld tensors is too many", path, (long long)n);
        return -1;
    }
    w->gguf_tensors = calloc((size_t)(n ? n : 1), sizeof *w->gguf_tensors);
    w->by_name = malloc((size_t)(n ? n : 1) * sizeof *w->by_name);
    if (!w->gguf_tensors || !w->by_name) {
        gp_errf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        const gp_gguf_tensor *g = gp_gguf_tensor_get(w->gguf, i);
        gp_st_tensor *t = &w->gguf_tensors[i];
        t->name = g->name;
        t->file_dtype = gp_gguf_type_name(g->ggml_type);
        t->supported = g->supported;
        t->dtype = g->dtype;
        t->ndim = g->ndim;
        for (int d = 0; d < g->ndim; d++)
            t->shape[d] = g->ne[g->ndim - 1 - d];
        t->data = g->data;
        t->nbytes = g->nbytes;
        w->by_name[i] = t;
    }
    w->count = (int)n;
    qsort(w->by_name, (size_t)w->count, sizeof *w->by_name, cmp_tensor_ptr);
    gp_gguf_str a;
    if (gp_gguf_get_str(w->gguf, "general.architecture", &a) == 0 && a.len < sizeof w->arch) {
        memcpy(w->arch, a.s, (size_t)a.len);
        w->arch[a.len] = '\0';
    }
    return 0;
}

/* model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor name: shard file}}. */
static int open_index(gp_weights *w, const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        gp_errf(err, errlen, "%s: cannot open (not a regular file)", path);
        return -1;
    }
    if ((uint64_t)st.st_size > GP_ST_MAX_HEADER) {
        bad_index(err, errlen, path, "%lld bytes is over the cap of %u", (long long)st.st_size,
                  GP_ST_MAX_HEADER);
        return -1;
    }
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        bad_index(err, errlen, path, "JSON: %s at line %d, column %d", je.text, je.line, je.column);
        return -1;
    }
    int rc = -1;
    const char **names = NULL; /* [n_map] distinct shard names after sort + unique */
    char *dir = NULL;
    json_t *map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(map)) {
        bad_index(err, errlen, path, "no \"weight_map\" object");
        goto out;
    }
    size_t n_map = json_object_size(map);
    if (n_map > (size_t)INT32_MAX) {
        bad_index(err, errlen, path, "too many entries");
        goto out;
    }
    names = malloc((n_map ? n_map : 1) * sizeof *names);
    w->by_name = malloc((n_map ? n_map : 1) * sizeof *w->by_name);
    const char *slash = strrchr(path, '/');
    dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
    if (slash == path && dir) {
        free(dir);
        dir = strdup("/");
    }
    if (!names || !w->by_name || !dir) {
        gp_errf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    size_t n_names = 0;
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        if (!json_is_string(v) || !plain_file_name(json_string_value(v))) {
            bad_index(err, errlen, path, "\"%s\" maps to %s, not a plain shard file name", key,
                      json_is_string(v) ? json_string_value(v) : "a non-string");
            goto out;
        }
        names[n_names++] = json_string_value(v);
    }
    qsort(names, n_names, sizeof *names, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < n_names; i++)
        if (u == 0 || strcmp(names[u - 1], names[i]) != 0)
            names[u++] = names[i];
    n_names = u;
    /* Shards open in name order, so shard k is names[k]. */
    for (size_t i = 0; i < n_names; i++) {
        char *sp = join(dir, names[i]);
        if (!sp) {
            gp_errf(err, errlen, "%s: out of memory", path);
            goto out;
        }
        int ok = add_shard(w, sp, err, errlen) == 0;
        free(sp);
        if (!ok)
            goto out;
    }
    json_object_foreach(map, key, v) {
        const char *shard = json_string_value(v);
        const char **at = bsearch(&shard, names, n_names, sizeof *names, cmp_str);
        const gp_st_tensor *t = gp_st_find(w->shards[at - names], key);
        if (!t) {
            bad_index(err, errlen, path, "\"%s\" is mapped to %s, which has no such tensor", key,
                      shard);
            goto out;
        }
        w->by_name[w->count++] = t;
    }
    qsort(w->by_name, (size_t)w->count, sizeof *w->by_name, cmp_tensor_ptr);
    rc = 0;
out:
    free(dir);
    free(names);
    json_decref(root);
    return rc;
}

gp_weights *gp_weights_open(const char *path, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    gp_weights *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        gp_errf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    struct stat st;
    int rc;
    if (stat(path, &st) != 0) {
        gp_errf(err, errlen, "%s: cannot open (no such file or folder)", path);
        rc = -1;
    } else if (S_ISDIR(st.st_mode)) {
        char *single = join(path, "model.safetensors");
        char *index = join(path, "model.safetensors.index.json");
        if (!single || !index) {
            gp_errf(err, errlen, "%s: out of memory", path);
            rc = -1;
        } else if (is_regular(single)) {
            rc = open_single(w, single, err, errlen);
        } else if (is_regular(index)) {
            rc = open_index(w, index, err, errlen);
        } else {
            gp_errf(err, errlen,
                    "%s: no model.safetensors or model.safetensors.index.json in this folder",
                    path);
            rc = -1;
        }
        free(single);
        free(index);
    } else if (gp_file_check(path, err, errlen)) {
        rc = -1; /* a FIFO or a device: reading its magic would block or mean nothing */
    } else if (ends_with(path, ".index.json")) {
        rc = open_index(w, path, err, errlen);
    } else if (is_gguf(path)) {
        rc = open_gguf(w, path, err, errlen);
    } else {
        rc = open_single(w, path, err, errlen);
    }
    if (rc != 0) {
        gp_weights_close(w);
        return NULL;
    }
    return w;
}

void gp_weights_close(gp_weights *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n_shards; i++)
        gp_st_close(w->shards[i]);
    free(w->shards);
    free(w->by_name);
    free(w->gguf_tensors);
    gp_gguf_close(w->gguf);
    free(w->path);
    free(w);
}

int gp_weights_count(const gp_weights *w)
{
    return w->count;
}

int gp_weights_shard_count(const gp_weights *w)
{
    return w->gguf ? 1 : w->n_shards;
}

const gp_st_tensor *gp_weights_get(const gp_weights *w, int i)
{
    return i >= 0 && i < w->count ? w->by_name[i] : NULL;
}

static const gp_st_tensor *find_exact(const gp_weights *w, const char *name)
{
    gp_st_tensor key = {.name = name};
    const gp_st_tensor *kp = &key;
    const gp_st_tensor **at =
        bsearch(&kp, w->by_name, (size_t)w->count, sizeof *w->by_name, cmp_tensor_ptr);
    return at ? *at : NULL;
}

/* A GGUF source also answers to the Hugging Face name of each tensor (gguf_names.c). */
const gp_st_tensor *gp_weights_find(const gp_weights *w, const char *name)
{
    const gp_st_tensor *t = find_exact(w, name);
    char alias[512];
    if (!t && w->gguf && gp_gguf_name_from_hf(w->arch, name, alias, sizeof alias) == 0)
        t = find_exact(w, alias);
    return t;
}

/* ---- stacked weights: dim 0 held as one tensor per index ---- */

int gp_weights_is_stacked(const char *name)
{
    return name && strchr(name, '*') != NULL;
}

/* name with its '*' replaced by e, into out[cap]; -1 when it does not fit. */
static int slice_name(const char *name, int64_t e, char *out, size_t cap)
{
    const char *star = strchr(name, '*');
    int k = snprintf(out, cap, "%.*s%lld%s", (int)(star - name), name, (long long)e, star + 1);
    return k >= 0 && (size_t)k < cap ? 0 : -1;
}

const gp_st_tensor *gp_weights_slice(const gp_weights *w, const char *name, int64_t e)
{
    char part[512];
    if (!gp_weights_is_stacked(name) || e < 0 || slice_name(name, e, part, sizeof part))
        return NULL;
    return gp_weights_find(w, part);
}

int gp_weights_parts(const gp_weights *w, const char *name, int64_t n, const gp_st_tensor **parts,
                     char *missing, size_t cap)
{
    if (missing && cap)
        missing[0] = '\0';
    const gp_st_tensor *t = gp_weights_find(w, name);
    if (t) {
        parts[0] = t;
        return 1;
    }
    if (!gp_weights_is_stacked(name) || n < 1 || n > INT32_MAX) {
        gp_errf(missing, cap, "%s", name);
        return 0;
    }
    for (int64_t e = 0; e < n; e++)
        if (!(parts[e] = gp_weights_slice(w, name, e))) {
            char part[512];
            if (slice_name(name, e, part, sizeof part))
                snprintf(part, sizeof part, "%s", name);
            gp_errf(missing, cap, "%s", part);
            return 0;
        }
    return (int)n;
}

int gp_weights_parts_adjacent(const gp_st_tensor *const *parts, int64_t n)
{
    for (int64_t e = 1; e < n; e++)
        if (parts[e]->dtype != parts[0]->dtype || parts[e]->nbytes != parts[0]->nbytes ||
            (const char *)parts[e]->data !=
                (const char *)parts[0]->data + (size_t)e * parts[0]->nbytes)
            return 0;
    return 1;
}

/* ---- checking declarations ---- */

static int is_float(gp_dtype t)
{
    return t == GP_F32 || t == GP_F16 || t == GP_BF16;
}

/* gp_weights_read converts among f32, f16 and bf16; a float tensor declared quantized is read as
 * f32 and quantized by the runtime (runtime/session.c), so it passes the check too. */
static int convertible(gp_dtype from, gp_dtype to)
{
    return from == to || (is_float(from) && (is_float(to) || gp_dtype_is_quant(to)));
}

/* "[50257, 768]" into buf. */
static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t at = 0;
    at += (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && d < GP_MAX_DIMS && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < n)
        snprintf(buf + at, n - at, "]");
}

/* Appends one line to err (which may already hold earlier lines). */
static void add_line(char *err, size_t errlen, size_t *at, const char *fmt, ...)
{
    if (!err || *at + 1 >= errlen)
        return;
    if (*at > 0)
        err[(*at)++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(err + *at, errlen - *at, fmt, ap);
    va_end(ap);
    if (k > 0)
        *at = *at + (size_t)k < errlen ? *at + (size_t)k : errlen - 1;
}

/* A stacked declaration d [n, ...] whose name no tensor has: its n slices must exist with the
 * shape [...] in one dtype the plan's converts from. A GGUF file's must lie one after the
 * other in the file in the plan's dtype (they are mapped in place as one tensor, never copied:
 * only llama.cpp's old Mixtral files hold experts one by one). Returns 1 when the slices are
 * fine but must be copied into one buffer, 0 when they map in place or on a problem (line set). */
static int check_stacked(const gp_weights *w, const gp_weight_decl *d, char *line, size_t cap)
{
    int64_t n = d->shape[0];
    const gp_st_tensor **parts = malloc((size_t)(n > 0 ? n : 1) * sizeof *parts);
    char missing[512], want[128], have[128];
    int copy = 0;
    if (!parts) {
        snprintf(line, cap, "weights: \"%s\": out of memory", d->name);
        return 0;
    }
    fmt_shape(want, sizeof want, d->ndim - 1, d->shape + 1);
    if (!gp_weights_parts(w, d->name, n, parts, missing, sizeof missing)) {
        snprintf(line, cap, "weights: missing tensor \"%s\" (the stacked \"%s\" is one tensor "
                 "or %lld, '*' standing for the index)", missing, d->name, (long long)n);
        goto out;
    }
    for (int64_t e = 0; e < n; e++) {
        const gp_st_tensor *t = parts[e];
        int same = t->ndim == d->ndim - 1;
        for (int k = 0; k + 1 < d->ndim && same; k++)
            same = t->shape[k] == d->shape[k + 1];
        if (!same || !t->supported || !convertible(t->dtype, d->dtype) ||
            t->dtype != parts[0]->dtype) {
            fmt_shape(have, sizeof have, t->ndim < GP_MAX_DIMS ? t->ndim : GP_MAX_DIMS, t->shape);
            snprintf(line, cap,
                     "weights: \"%s\" (slice %lld of \"%s\"): expected shape %s %s, file has "
                     "%s %s", t->name, (long long)e, d->name, want,
                     e ? gp_dtype_name(parts[0]->dtype) : gp_dtype_name(d->dtype), have,
                     t->supported ? gp_dtype_name(t->dtype) : t->file_dtype);
            goto out;
        }
    }
    copy = !gp_weights_parts_adjacent(parts, n) || parts[0]->dtype != d->dtype;
    if (copy && w->gguf) {
        snprintf(line, cap,
                 "weights: \"%s\": the file holds its %lld slices as separate tensors (%s, ...) "
                 "%s; gplan maps a GGUF file's experts in place only: convert the model again "
                 "with a current llama.cpp, which merges them (ffn_*_exps)", d->name,
                 (long long)n, parts[0]->name,
                 parts[0]->dtype != d->dtype ? "of another dtype than the plan's"
                                             : "that are not adjacent in the file");
        copy = 0;
    }
out:
    free(parts);
    return copy;
}

int gp_weights_check(const gp_weights *w, const gp_weight_decl *decls, int n,
                     unsigned char *convert, char *err, size_t errlen)
{
    size_t at = 0;
    if (err && errlen)
        err[0] = '\0';
    int problems = 0;
    for (int i = 0; i < n; i++) {
        const gp_weight_decl *d = &decls[i];
        if (convert)
            convert[i] = 0;
        char line[600] = "";
        char want[128], have[128];
        if (!d->name || d->ndim < 0 || d->ndim > GP_MAX_DIMS || (int)d->dtype < 0 ||
            d->dtype >= GP_DTYPE_COUNT) {
            snprintf(line, sizeof line, "weights: declaration %d is malformed", i);
        } else {
            const gp_st_tensor *t = gp_weights_find(w, d->name);
            fmt_shape(want, sizeof want, d->ndim, d->shape);
            if (!t && gp_weights_is_stacked(d->name) && d->ndim >= 2) {
                if (check_stacked(w, d, line, sizeof line) && convert)
                    convert[i] = 1; /* read slice by slice into one buffer */
            } else if (!t) {
                snprintf(line, sizeof line, "weights: missing tensor \"%s\"", d->name);
            } else if (t->ndim > GP_MAX_DIMS) {
                snprintf(line, sizeof line,
                         "weights: \"%s\": expected shape %s %s, file has a rank-%d %s tensor "
                         "(at most %d dims supported)",
                         d->name, want, gp_dtype_name(d->dtype), t->ndim, t->file_dtype,
                         GP_MAX_DIMS);
            } else {
                int same_shape = t->ndim == d->ndim;
                for (int k = 0; k < d->ndim && same_shape; k++)
                    same_shape = t->shape[k] == d->shape[k];
                fmt_shape(have, sizeof have, t->ndim, t->shape);
                int dtype_ok = t->supported && convertible(t->dtype, d->dtype);
                /* [in, out] against [out, in]: a plan made for another layout (GPT-2's Conv1D
                 * weights in a Hugging Face checkpoint and in llama.cpp's GGUF files) */
                int transposed = !same_shape && t->ndim == 2 && d->ndim == 2 &&
                                 t->shape[0] == d->shape[1] && t->shape[1] == d->shape[0];
                if (!same_shape || !dtype_ok)
                    snprintf(line, sizeof line,
                             "weights: \"%s\": expected shape %s %s, file has %s %s%s%s", d->name,
                             want, gp_dtype_name(d->dtype), have,
                             t->supported ? gp_dtype_name(t->dtype) : t->file_dtype,
                             t->supported ? "" : " (unsupported dtype)",
                             transposed ? ", the transpose (a plan compiled for another layout: "
                                          "for a GGUF file's, compile with --gguf FILE)"
                                        : "");
                else if (convert && t->dtype != d->dtype)
                    convert[i] = 1;
            }
        }
        if (line[0]) {
            problems++;
            if (problems <= GP_WEIGHTS_MAX_REPORTED)
                add_line(err, errlen, &at, "%s", line);
        }
    }
    if (problems > GP_WEIGHTS_MAX_REPORTED)
        add_line(err, errlen, &at, "weights: ... and %d more problems",
                 problems - GP_WEIGHTS_MAX_REPORTED);
    return problems;
}

/* ---- conversion ---- */

static float load_float(const unsigned char *p, gp_dtype t)
{
    if (t == GP_F32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return t == GP_F16 ? gp_f16_to_f32(h) : gp_bf16_to_f32(h);
}

static void store_float(unsigned char *p, gp_dtype t, float f)
{
    if (t == GP_F32) {
        memcpy(p, &f, 4);
        return;
    }
    uint16_t h = t == GP_F16 ? gp_f32_to_f16(f) : gp_f32_to_bf16(f);
    memcpy(p, &h, 2);
}

int gp_weights_read(const gp_st_tensor *t, gp_dtype dtype, void *dst, size_t dst_bytes, char *err,
                    size_t errlen)
{
    /* Block-quantized data is copied as it is; dequantizing reads are not connected yet. */
    if (t->supported && (gp_dtype_is_quant(t->dtype) || gp_dtype_is_quant(dtype))) {
        if (t->dtype != dtype) {
            gp_errf(err, errlen,
                    "weights: \"%s\": reading %s data as %s needs a dequantizer, not connected yet",
                    t->name, gp_dtype_name(t->dtype), gp_dtype_name(dtype));
            return -1;
        }
        if (t->nbytes != dst_bytes) {
            gp_errf(err, errlen, "weights: \"%s\": %zu bytes of %s, buffer has %zu", t->name,
                    t->nbytes, gp_dtype_name(dtype), dst_bytes);
            return -1;
        }
        memcpy(dst, t->data, dst_bytes);
        return 0;
    }
    if (!t->supported || !convertible(t->dtype, dtype)) {
        gp_errf(err, errlen, "weights: \"%s\": cannot read %s data (rank %d) as %s", t->name,
                t->file_dtype, t->ndim, gp_dtype_name(dtype));
        return -1;
    }
    size_t n = (size_t)gp_st_numel(t);
    size_t need = n * gp_dtype_size(dtype);
    if (need != dst_bytes) {
        gp_errf(err, errlen, "weights: \"%s\": %zu elements of %s need %zu bytes, buffer has %zu",
                t->name, n, gp_dtype_name(dtype), need, dst_bytes);
        return -1;
    }
    if (t->dtype == dtype) {
        if (n)
            memcpy(dst, t->data, dst_bytes);
        return 0;
    }
    const unsigned char *src = t->data;
    unsigned char *out = dst;
    size_t si = gp_dtype_size(t->dtype), di = gp_dtype_size(dtype);
    for (size_t i = 0; i < n; i++)
        store_float(out + i * di, dtype, load_float(src + i * si, t->dtype));
    return 0;
}
