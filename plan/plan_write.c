/* The plan file writer: every field written one by one, fixed-width little-endian, in the layout
 * of docs/plan-format.md (read back by plan/plan_load.c). */
#include "plan/plan.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *data; /* [cap] */
    size_t len, cap;
    int failed; /* out of memory at some point: every later put is dropped */
} bytes;

static void put(bytes *b, const void *p, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *nd = realloc(b->data, cap);
        if (!nd) {
            b->failed = 1;
            return;
        }
        b->data = nd;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void put_u8(bytes *b, unsigned v)
{
    unsigned char c = (unsigned char)v;
    put(b, &c, 1);
}

static void put_u16(bytes *b, unsigned v)
{
    unsigned char c[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    put(b, c, 2);
}

static void put_u32(bytes *b, uint32_t v)
{
    unsigned char c[4];
    for (int i = 0; i < 4; i++)
        c[i] = (unsigned char)(v >> (8 * i));
    put(b, c, 4);
}

static void put_u64(bytes *b, uint64_t v)
{
    unsigned char c[8];
    for (int i = 0; i < 8; i++)
        c[i] = (unsigned char)(v >> (8 * i));
    put(b, c, 8);
}

static void put_i32(bytes *b, int32_t v)
{
    put_u32(b, (uint32_t)v);
}

static void put_i64(bytes *b, int64_t v)
{
    put_u64(b, (uint64_t)v);
}

static void put_f64(bytes *b, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_u64(b, u);
}

static void pad8(bytes *b)
{
    while (b->len % 8)
        put_u8(b, 0);
}

static void patch_u32(bytes *b, size_t at, uint32_t v)
{
    if (b->failed)
        return;
    for (int i = 0; i < 4; i++)
        b->data[at + i] = (unsigned char)(v >> (8 * i));
}

static void patch_u64(bytes *b, size_t at, uint64_t v)
{
    if (b->failed)
        return;
    for (int i = 0; i < 8; i++)
        b->data[at + i] = (unsigned char)(v >> (8 * i));
}

/* Appends s to the string table; returns its reference (GP_PLAN_STR_NONE for NULL when allowed). */
static uint32_t str_ref(bytes *strtab, const char *s, int null_is_none)
{
    if (!s) {
        if (null_is_none)
            return GP_PLAN_STR_NONE;
        s = "";
    }
    uint32_t ref = (uint32_t)strtab->len;
    put(strtab, s, strlen(s) + 1);
    return ref;
}

static void write_meta(bytes *b, bytes *st, const gp_plan *p)
{
    put_u32(b, (uint32_t)p->n_devices);
    put_u32(b, (uint32_t)p->strategy);
    put_u32(b, str_ref(st, p->graph_name, 0));
    put_u32(b, str_ref(st, p->source, 0));
    put_u32(b, str_ref(st, p->method, 0));
    put_u32(b, 0);
    put_f64(b, p->plan_seconds);
    put_i64(b, p->lower_bound);
    put_i64(b, p->naive_bytes);
}

static void write_regions(bytes *b, const gp_plan *p)
{
    put_u32(b, GP_REGION_COUNT);
    put_u32(b, GP_PLAN_REGION_BYTES);
    for (int r = 0; r < GP_REGION_COUNT; r++) {
        put_i64(b, p->regions[r].size);
        put_i64(b, p->regions[r].alignment);
    }
}

static void write_syms(bytes *b, bytes *st, const gp_plan *p)
{
    put_u32(b, (uint32_t)p->n_syms);
    put_u32(b, GP_PLAN_SYM_BYTES);
    for (int i = 0; i < p->n_syms; i++) {
        put_u32(b, str_ref(st, p->syms[i].name, 0));
        put_u32(b, 0);
        put_i64(b, p->syms[i].bound);
    }
}

static void write_tensors(bytes *b, bytes *st, const gp_plan *p)
{
    put_u32(b, (uint32_t)p->n_tensors);
    put_u32(b, GP_PLAN_TENSOR_BYTES);
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        put_u32(b, str_ref(st, t->name, 0));
        put_u32(b, str_ref(st, t->weight_name, 1));
        put_u8(b, (unsigned)t->kind);
        put_u8(b, (unsigned)t->dtype);
        put_u8(b, (unsigned)t->ndim);
        put_u8(b, (unsigned)t->region);
        put_i32(b, t->view_src);
        put_i32(b, t->inplace_of);
        put_i32(b, t->producer);
        put_i32(b, t->first);
        put_i32(b, t->last);
        for (int d = 0; d < GP_MAX_DIMS; d++)
            put_i64(b, t->dims[d]);
        for (int d = 0; d < GP_MAX_DIMS; d++)
            put_i32(b, t->sym[d]);
        for (int d = 0; d < GP_MAX_DIMS; d++)
            put_i64(b, t->stride[d]);
        put_i64(b, t->view_offset);
        put_i64(b, t->offset);
        put_i64(b, t->size);
        put_i64(b, t->extras_offset);
        put_u32(b, (uint32_t)t->line);
        put_u32(b, (uint32_t)t->col);
        put_i32(b, t->split.groups);
        put_i32(b, t->split.dim);
        put_i64(b, t->split.unit);
        put_i64(b, t->split.full);
    }
}

static void write_nodes(bytes *b, const gp_plan *p)
{
    put_u32(b, (uint32_t)p->n_nodes);
    put_u32(b, GP_PLAN_NODE_BYTES);
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        put_u16(b, (unsigned)nd->op);
        put_u8(b, (unsigned)nd->n_inputs);
        put_u8(b, 0);
        for (int k = 0; k < 4; k++)
            put_i32(b, nd->inputs[k]);
        put_i32(b, nd->output);
        put_i32(b, nd->workspace);
        put_u32(b, (uint32_t)nd->line);
        put_u32(b, (uint32_t)nd->col);
        put_u32(b, 0);
        int64_t iattr[GP_MAX_IATTRS];
        double fattr[GP_PLAN_FATTRS];
        gp_plan_attrs_encode(nd->op, &nd->attrs, iattr, fattr);
        for (int k = 0; k < GP_MAX_IATTRS; k++)
            put_i64(b, iattr[k]);
        for (int k = 0; k < GP_PLAN_FATTRS; k++)
            put_f64(b, fattr[k]);
        for (int k = 4; k < GP_MAX_INPUTS; k++) /* 4 and 5: version 1.2; 6..9: 1.3 */
            put_i32(b, nd->inputs[k]);
    }
}

int gp_plan_write_mem(const gp_plan *p, unsigned char **data, size_t *len, char *err,
                      size_t err_len)
{
    *data = NULL;
    *len = 0;
    char why[256];
    if (gp_plan_validate(p, why, sizeof why)) {
        snprintf(err, err_len, "refusing to write an invalid plan (%s)", why);
        return -1;
    }
    enum { N_SEC = 6 };
    /* Each section is built apart (the string table fills while the others are written), then
     * laid out after the table, padded to 8 bytes; the padding is part of the section and its CRC. */
    bytes sec[N_SEC + 1] = {{0}};
    bytes *st = &sec[GP_PLAN_SEC_STRINGS];
    write_meta(&sec[GP_PLAN_SEC_META], st, p);
    write_regions(&sec[GP_PLAN_SEC_REGIONS], p);
    write_syms(&sec[GP_PLAN_SEC_SYMS], st, p);
    write_tensors(&sec[GP_PLAN_SEC_TENSORS], st, p);
    write_nodes(&sec[GP_PLAN_SEC_NODES], p);
    for (int s = 1; s <= N_SEC; s++)
        pad8(&sec[s]);

    bytes out = {0};
    put(&out, GP_PLAN_MAGIC, 6);
    put(&out, GP_PLAN_TRIPWIRE, 4);
    put_u16(&out, GP_PLAN_VERSION_MAJOR);
    put_u16(&out, GP_PLAN_VERSION_MINOR);
    put_u16(&out, GP_PLAN_HEADER_BYTES);
    put_u32(&out, GP_PLAN_SENTINEL_U32);
    put_u32(&out, N_SEC);
    put_u64(&out, GP_PLAN_SENTINEL_U64);
    put_f64(&out, GP_PLAN_SENTINEL_F64);
    put_u64(&out, 0); /* file size, patched below */
    put_u64(&out, 0); /* reserved */
    put_u32(&out, 0); /* reserved */
    put_u32(&out, 0); /* header CRC, patched below */
    size_t off = GP_PLAN_HEADER_BYTES + N_SEC * GP_PLAN_SECTION_ENTRY_BYTES;
    for (int s = 1; s <= N_SEC; s++) {
        put_u32(&out, (uint32_t)s);
        put_u32(&out, sec[s].failed ? 0 : gp_plan_crc(0, sec[s].data, sec[s].len));
        put_u64(&out, off);
        put_u64(&out, sec[s].len);
        off += sec[s].len;
    }
    int failed = out.failed;
    for (int s = 1; s <= N_SEC; s++) {
        put(&out, sec[s].data, sec[s].len);
        failed |= sec[s].failed;
        free(sec[s].data);
    }
    if (failed || out.failed || st->len > UINT32_MAX) {
        free(out.data);
        snprintf(err, err_len, "out of memory writing the plan");
        return -1;
    }
    patch_u64(&out, 40, out.len);
    size_t table_end = GP_PLAN_HEADER_BYTES + N_SEC * GP_PLAN_SECTION_ENTRY_BYTES;
    uint32_t crc = gp_plan_crc(0, out.data, 60);
    crc = gp_plan_crc(crc, out.data + GP_PLAN_HEADER_BYTES, table_end - GP_PLAN_HEADER_BYTES);
    patch_u32(&out, 60, crc);
    *data = out.data;
    *len = out.len;
    return 0;
}

int gp_plan_write(const gp_plan *p, const char *path, char *err, size_t err_len)
{
    unsigned char *data;
    size_t len;
    char why[320];
    if (gp_plan_write_mem(p, &data, &len, why, sizeof why)) {
        snprintf(err, err_len, "%s: %s", path, why);
        return -1;
    }
    /* Write beside the target and rename, so a failed write never leaves a half plan at PATH. */
    size_t n = strlen(path) + 5;
    char *tmp = malloc(n);
    if (!tmp) {
        free(data);
        snprintf(err, err_len, "%s: out of memory", path);
        return -1;
    }
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int rc = -1;
    if (!f) {
        snprintf(err, err_len, "%s: cannot create: %s", tmp, strerror(errno));
    } else {
        size_t put_n = fwrite(data, 1, len, f);
        int close_rc = fclose(f);
        if (put_n != len || close_rc != 0)
            snprintf(err, err_len, "%s: write failed: %s", tmp, strerror(errno));
        else if (rename(tmp, path) != 0)
            snprintf(err, err_len, "%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
        else
            rc = 0;
        if (rc)
            remove(tmp);
    }
    free(tmp);
    free(data);
    return rc;
}
