/* A device's share of a split weight (runtime/split.h). With the split dim viewed as
 * [groups, units, unit], device r holds units [r * share, (r + 1) * share) of every group. */
#include "runtime/split.h"

#include <string.h>

int64_t gp_split_full_numel(const gp_plan_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->split.groups && d == t->split.dim ? t->split.full : t->dims[d];
    return n;
}

void gp_split_copy(const gp_plan_tensor *t, int rank, const void *full, void *out)
{
    const gp_split *s = &t->split;
    size_t es = gp_dtype_size(t->dtype);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < s->dim; d++)
        outer *= t->dims[d];
    for (int d = s->dim + 1; d < t->ndim; d++)
        inner *= t->dims[d];
    int64_t units = s->full / (s->groups * s->unit);
    int64_t share = t->dims[s->dim] / (s->groups * s->unit);
    size_t run = (size_t)(s->unit * inner) * es; /* bytes of one unit across the inner dims */
    const unsigned char *src = full;
    unsigned char *dst = out;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t g = 0; g < s->groups; g++) {
            const unsigned char *block = src + (size_t)((o * s->groups + g) * units) * run;
            for (int64_t u = 0; u < share; u++, dst += run) {
                int64_t from = rank * share + u;
                if (from < units)
                    memcpy(dst, block + (size_t)from * run, run);
                else
                    memset(dst, 0, run);
            }
        }
    }
}
