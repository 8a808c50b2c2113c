/* gp_weights_scan (include/gplan/gplan.h): every tensor of a checkpoint checked for NaNs and
 * infinities where it lies in the mapped file, by its bit patterns (no conversion, no copy). */
#define _DEFAULT_SOURCE /* madvise */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gplan/gplan.h"
#include "weights/weights.h"

/* A float format's exponent and mantissa bits: all exponent bits set is NaN or an infinity. */
typedef struct {
    int bytes;
    uint64_t exp, man, sign;
} float_bits;

static const float_bits F16 = {2, 0x7c00, 0x03ff, 0x8000};
static const float_bits BF16 = {2, 0x7f80, 0x007f, 0x8000};
static const float_bits F32 = {4, 0x7f800000, 0x007fffff, 0x80000000};
static const float_bits F64 = {8, 0x7ff0000000000000ull, 0x000fffffffffffffull,
                               0x8000000000000000ull};

static uint64_t load(const unsigned char *p, int bytes)
{
    uint16_t h;
    uint32_t w;
    uint64_t d;
    switch (bytes) {
    case 2: return memcpy(&h, p, 2), h;
    case 4: return memcpy(&w, p, 4), w;
    default: return memcpy(&d, p, 8), d;
    }
}

static const char *what(uint64_t b, const float_bits *f)
{
    return b & f->man ? "nan" : b & f->sign ? "-inf" : "inf";
}

/* A hit of `count` values from element i; the first hit names the kind. */
static void note(gp_tensor_scan *s, int64_t i, int64_t count, uint64_t b, const float_bits *f)
{
    if (s->first < 0)
        s->first = i, s->first_is = what(b, f);
    s->nonfinite += count;
}

static void scan_elements(gp_tensor_scan *s, const unsigned char *p, const float_bits *f)
{
    for (int64_t i = 0; i < s->values; i++) {
        uint64_t b = load(p + i * f->bytes, f->bytes);
        if ((b & f->exp) == f->exp)
            note(s, i, 1, b, f);
    }
}

/* A block format: its f16 scales at these byte offsets of each block (the layouts of
 * include/gplan/gplan_types.h); a block whose scale is not finite dequantizes to no finite value. */
static void scan_blocks(gp_tensor_scan *s, const unsigned char *p, gp_dtype t)
{
    static const int d_only[] = {0, -1}, d_and_m[] = {0, 2, -1}, q6_k[] = {208, -1};
    const int *at = t == GP_Q4_1 || t == GP_Q5_1 || t == GP_Q4_K || t == GP_Q5_K ? d_and_m
                    : t == GP_Q6_K ? q6_k : d_only;
    int64_t block = gp_dtype_block(t), bytes = (int64_t)gp_dtype_block_bytes(t);
    for (int64_t k = 0; k < s->values / block; k++)
        for (const int *o = at; *o >= 0; o++) {
            uint64_t b = load(p + k * bytes + *o, 2);
            if ((b & F16.exp) == F16.exp) {
                note(s, k * block, block, b, &F16);
                break;
            }
        }
}

/* Gives the scanned pages back: the mapping is private and read-only, so they are read again if
 * touched, and a scan of a file larger than memory does not keep it all resident. */
static void drop_pages(const void *data, size_t n)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)data + page - 1) / page * page, hi = ((uintptr_t)data + n) / page * page;
    if (page > 0 && hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

int64_t gp_weights_scan(const char *path, gp_tensor_scan_fn fn, void *user,
                        gp_weights_scan_totals *totals, char *err, size_t err_len)
{
    gp_weights *w = gp_weights_open(path, err, err_len);
    if (!w)
        return -1;
    int64_t bad = 0;
    gp_weights_scan_totals sum = {gp_weights_count(w), 0, 0};
    for (int i = 0; i < gp_weights_count(w); i++) {
        const gp_st_tensor *t = gp_weights_get(w, i);
        gp_tensor_scan s = {t->name, t->file_dtype, 1, 0, -1, ""};
        for (int d = 0; d < t->ndim && d < GP_MAX_DIMS; d++)
            s.values *= t->shape[d];
        const unsigned char *p = t->data;
        int f64 = !strcmp(t->file_dtype, "F64") || !strcmp(t->file_dtype, "f64");
        if (f64 && (size_t)s.values * 8 == t->nbytes)
            scan_elements(&s, p, &F64);
        else if (!t->supported || t->ndim > GP_MAX_DIMS)
            s.nonfinite = -1;
        else if (gp_dtype_is_quant(t->dtype))
            scan_blocks(&s, p, t->dtype);
        else if (t->dtype != GP_I32)
            scan_elements(&s, p, t->dtype == GP_F32 ? &F32 : t->dtype == GP_F16 ? &F16 : &BF16);
        drop_pages(t->data, t->nbytes);
        bad += s.nonfinite > 0;
        sum.skipped += s.nonfinite < 0;
        sum.values += s.nonfinite < 0 ? 0 : s.values;
        if (fn)
            fn(user, &s);
    }
    gp_weights_close(w);
    if (totals)
        *totals = sum;
    return bad;
}
