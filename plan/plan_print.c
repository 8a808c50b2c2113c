/* The plan summary the tools print (gplan-compile -o, gplan-inspect): region sizes, the arena
 * against its lower bound and against no reuse at all, in-place and workspace counts; the tensor
 * table (gplan-inspect) and a device's bytes (gplan-compile --memory). */
#include "plan/plan.h"

#include <string.h>

/* The META section's strategy (gp_strategy's values, fixed by the file format). */
static const char *strategy_name(int s)
{
    switch (s) {
    case GP_STRATEGY_AUTO: return "auto";
    case GP_STRATEGY_GREEDY: return "greedy";
    case GP_STRATEGY_EXACT: return "exact";
    default: return "?";
    }
}

/* "12.50 MiB" into buf. */
const char *gp_plan_bytes_text(int64_t bytes, char *buf, size_t n)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%lld B", (long long)bytes);
    else
        snprintf(buf, n, "%.2f %s", v, units[u]);
    return buf;
}

int64_t gp_plan_split_padding(const gp_plan *p, int device)
{
    int64_t pad = 0;
    for (int i = 0; i < p->n_tensors && device >= 0 && device < p->n_devices; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        const gp_split *s = &t->split;
        if (!s->groups)
            continue;
        int64_t units = s->full / (s->groups * s->unit);
        int64_t share = t->dims[s->dim] / (s->groups * s->unit);
        int64_t real = units - device * share; /* its units that exist in the checkpoint */
        real = real < 0 ? 0 : real > share ? share : real;
        int64_t unit_bytes = t->size / (s->groups * share); /* one unit across the other dims */
        pad += (share - real) * s->groups * unit_bytes;
    }
    return pad;
}

/* Tensor parallelism: each device's bytes (one layout, its own copy) and the zero padding of the
 * split weights it holds. */
static void print_devices(const gp_plan *p, FILE *out)
{
    char h[6][32];
    int64_t split = 0, whole = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind == GP_TENSOR_WEIGHT && t->view_src < 0)
            *(t->split.groups ? &split : &whole) += t->size;
    }
    fprintf(out, "tensor parallel over %d devices, one layout: each device holds every region "
            "above; weights %s split (a 1/%d share each), %s whole on every device\n",
            p->n_devices, gp_plan_bytes_text(split, h[0], sizeof h[0]), p->n_devices,
            gp_plan_bytes_text(whole, h[1], sizeof h[1]));
    for (int d = 0; d < p->n_devices; d++) {
        int64_t pad = gp_plan_split_padding(p, d), total = 0;
        for (int r = 0; r < GP_REGION_EXTRAS; r++)
            total += p->regions[r].size;
        fprintf(out, "  device %d: arena %s, state %s, weights %s (%s zero padding), io %s; "
                "%s\n", d, gp_plan_bytes_text(p->regions[GP_REGION_ARENA].size, h[0], sizeof h[0]),
                gp_plan_bytes_text(p->regions[GP_REGION_STATE].size, h[1], sizeof h[1]),
                gp_plan_bytes_text(p->regions[GP_REGION_WEIGHTS].size, h[2], sizeof h[2]),
                gp_plan_bytes_text(pad, h[3], sizeof h[3]),
                gp_plan_bytes_text(p->regions[GP_REGION_IO].size, h[4], sizeof h[4]),
                gp_plan_bytes_text(total, h[5], sizeof h[5]));
    }
}

void gp_plan_summary_print(const gp_plan *p, FILE *out)
{
    char h1[32], h2[32], h3[32];
    int n_inplace = 0, n_ws = 0;
    for (int i = 0; i < p->n_tensors; i++)
        n_inplace += p->tensors[i].inplace_of >= 0;
    for (int i = 0; i < p->n_nodes; i++)
        n_ws += p->nodes[i].workspace >= 0;
    fprintf(out, "plan %s (%s), format %d.%d: %d tensors, %d nodes, %d device%s\n",
            p->graph_name ? p->graph_name : "", p->source && p->source[0] ? p->source : "no source",
            p->version_major, p->version_minor, p->n_tensors, p->n_nodes, p->n_devices,
            p->n_devices == 1 ? "" : "s");
    if (p->n_syms > 0) {
        fprintf(out, "symbolic dims:");
        for (int s = 0; s < p->n_syms; s++)
            fprintf(out, "%s %s <= %lld", s ? "," : "", p->syms[s].name,
                    (long long)p->syms[s].bound);
        fprintf(out, "\n");
    }
    int64_t arena = p->regions[GP_REGION_ARENA].size;
    fprintf(out, "  arena    %12lld B  %-11s lower bound %s, ratio %.3f; naive %s (%.2fx)\n",
            (long long)arena, gp_plan_bytes_text(arena, h1, sizeof h1),
            gp_plan_bytes_text(p->lower_bound, h2, sizeof h2),
            p->lower_bound > 0 ? (double)arena / (double)p->lower_bound : 1.0,
            gp_plan_bytes_text(p->naive_bytes, h3, sizeof h3),
            arena > 0 ? (double)p->naive_bytes / (double)arena : 1.0);
    for (int r = GP_REGION_STATE; r < GP_REGION_COUNT; r++) {
        int64_t sz = p->regions[r].size;
        fprintf(out, "  %-8s %12lld B  %s", gp_region_name((gp_region)r), (long long)sz,
                gp_plan_bytes_text(sz, h1, sizeof h1));
        if (r == GP_REGION_EXTRAS)
            fprintf(out, "  (%d records of %lld B)", p->n_tensors,
                    (long long)GP_EXTRAS_RECORD_BYTES(p->n_devices));
        fprintf(out, "\n");
    }
    fprintf(out, "alignment %lld B, strategy %s (%s), %d in-place, %d workspaces, planned in "
            "%.3f ms\n", (long long)p->regions[GP_REGION_ARENA].alignment,
            strategy_name(p->strategy), p->method ? p->method : "?", n_inplace, n_ws,
            p->plan_seconds * 1e3);
    if (p->n_devices > 1)
        print_devices(p, out);
}

/* ---- the tensor table ---- */

int gp_plan_is_workspace(const gp_plan *p, int i)
{
    int pr = p->tensors[i].producer;
    return pr >= 0 && p->nodes[pr].workspace == i;
}

/* "[T=8, 16]": symbolic dims by name at their bound. */
static const char *shape_str(const gp_plan *p, const gp_plan_tensor *t, char *buf, size_t n)
{
    size_t pos = 0;
    pos += (size_t)snprintf(buf + pos, n - pos, "[");
    for (int d = 0; d < t->ndim && pos < n; d++) {
        const char *sep = d ? ", " : "";
        if (t->sym[d] >= 0)
            pos += (size_t)snprintf(buf + pos, n - pos, "%s%s=%lld", sep, p->syms[t->sym[d]].name,
                                    (long long)t->dims[d]);
        else
            pos += (size_t)snprintf(buf + pos, n - pos, "%s%lld", sep, (long long)t->dims[d]);
    }
    if (pos < n)
        snprintf(buf + pos, n - pos, "]");
    return buf;
}

void gp_plan_table_print(const gp_plan *p, FILE *out)
{
    int w = 4;
    for (int i = 0; i < p->n_tensors; i++) {
        int len = (int)strlen(p->tensors[i].name);
        if (len > w)
            w = len;
    }
    if (w > 40)
        w = 40;
    fprintf(out, "\n%5s  %-*s  %-12s  %-5s  %-18s  %-7s  %12s  %12s  %5s  %5s  %s\n", "id", w,
            "name", "kind", "dtype", "shape", "region", "offset", "size", "first", "last",
            "alias");
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        char shape[128], alias[160] = "";
        if (t->inplace_of >= 0)
            snprintf(alias, sizeof alias, "in-place of %s", p->tensors[t->inplace_of].name);
        else if (t->view_src >= 0)
            snprintf(alias, sizeof alias, "view of %s +%lld", p->tensors[t->view_src].name,
                     (long long)t->view_offset);
        else if (gp_plan_is_workspace(p, i))
            snprintf(alias, sizeof alias, "workspace of node %d", t->producer);
        else if (t->weight_name && t->split.groups)
            snprintf(alias, sizeof alias, "weight %s, split dim %d of %lld (%d group%s, unit %lld)",
                     t->weight_name, t->split.dim, (long long)t->split.full, t->split.groups,
                     t->split.groups == 1 ? "" : "s", (long long)t->split.unit);
        else if (t->weight_name)
            snprintf(alias, sizeof alias, "weight %s", t->weight_name);
        fprintf(out, "%5d  %-*.*s  %-12s  %-5s  %-18s  %-7s  %12lld  %12lld  %5d  %5d  %s\n", i, w,
                w, t->name, gp_tensor_kind_name(t->kind), gp_dtype_name(t->dtype),
                shape_str(p, t, shape, sizeof shape), gp_region_name(t->region),
                (long long)t->offset, (long long)t->size, t->first, t->last, alias);
    }
}

/* ---- a device's bytes ---- */

void gp_plan_memory_of(const gp_plan *p, gp_plan_memory *m)
{
    m->weights = p->regions[GP_REGION_WEIGHTS].size;
    m->state = p->regions[GP_REGION_STATE].size;
    m->arena = p->regions[GP_REGION_ARENA].size;
    m->io = p->regions[GP_REGION_IO].size;
    m->extras = p->regions[GP_REGION_EXTRAS].size;
    m->total = m->weights + m->state + m->arena + m->io + m->extras;
}

void gp_plan_memory_print(const gp_plan_memory *m, FILE *out)
{
    char h[5][32];
    fprintf(out, "weights %s, state %s, arena %s, io %s, extras %s",
            gp_plan_bytes_text(m->weights, h[0], sizeof h[0]),
            gp_plan_bytes_text(m->state, h[1], sizeof h[1]),
            gp_plan_bytes_text(m->arena, h[2], sizeof h[2]),
            gp_plan_bytes_text(m->io, h[3], sizeof h[3]),
            gp_plan_bytes_text(m->extras, h[4], sizeof h[4]));
}
