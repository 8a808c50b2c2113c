/* gplan-inspect: shows what a plan file holds: the summary, the tensor table, an ASCII memory map
 * over the steps, JSON, or an SVG of the arena. A thin main over gp_plan_load and gp_plan's
 * summary. Exit status: 0 ok, 1 bad plan (or an output that cannot be written), 2 bad usage. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gplan/cli.h"
#include "gplan/gplan_version.h" /* generated from include/gplan/gplan_version.h.in */
#include "plan/plan.h"

enum { EXIT_OK = 0, EXIT_BAD = 1, EXIT_USAGE = 2 };

static const char prog[] = "gplan-inspect";

typedef struct {
    const char *plan;
    int timeline; /* --timeline */
    int json;     /* --json */
    const char *svg; /* --svg FILE */
    int width;    /* --width N: timeline columns */
} options;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gplan-inspect [options] PLAN\n"
            "\n"
            "Shows a plan file written by gplan-compile -o (format: docs/plan-format.md).\n"
            "With no option: the summary and the tensor table (name, kind, dtype, shape,\n"
            "region, offset, size, first/last step, in-place or view target).\n"
            "\n"
            "options:\n"
            "  --timeline      the summary and an ASCII map of the arena over the steps: one\n"
            "                  row per step, one column per slice of the arena; each live tensor\n"
            "                  is drawn with its symbol (legend below; symbols repeat after 62\n"
            "                  tensors), '!' where two tensors that do not share storage overlap\n"
            "  --width N       columns of the timeline (default 64, 8..1000)\n"
            "  --json          everything as JSON on stdout instead (arena_bytes,\n"
            "                  lower_bound_bytes, naive_bytes, extras_bytes, n_tensors, n_nodes,\n"
            "                  syms, regions, tensors, nodes)\n"
            "  --svg FILE      also write an SVG of the arena: x = step, y = offset, one\n"
            "                  rectangle per tensor (blue intermediate, green in-place, orange\n"
            "                  workspace; hover for its name), the lower bound as a red line\n"
            "  -h, --help      print this help and exit\n"
            "  --version       print the version and exit\n"
            "\n"
            "exit status: 0 success, 1 bad plan file (or FILE cannot be written), 2 bad usage\n");
}

/* ---- the tensor table ---- */

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

static int is_workspace(const gp_plan *p, int i)
{
    int pr = p->tensors[i].producer;
    return pr >= 0 && p->nodes[pr].workspace == i;
}

static void print_table(const gp_plan *p, FILE *out)
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
        else if (is_workspace(p, i))
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

/* ---- the timeline ---- */

/* The storage a tensor's bytes belong to: through views and in-place targets, so tensors that
 * legitimately share bytes compare equal. The loader has made every chain finite. */
static int storage_of(const gp_plan *p, int t)
{
    for (int guard = 0; guard <= p->n_tensors; guard++) {
        while (p->tensors[t].view_src >= 0)
            t = p->tensors[t].view_src;
        if (p->tensors[t].inplace_of < 0)
            return t;
        t = p->tensors[t].inplace_of;
    }
    return t;
}

static const char symbols[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

static int print_timeline(const gp_plan *p, int width, FILE *out)
{
    int64_t arena = p->regions[GP_REGION_ARENA].size;
    if (arena == 0) {
        fprintf(out, "\nthe arena is empty\n");
        return 0;
    }
    int n = p->n_tensors;
    int *ids = malloc(((size_t)n + 1) * sizeof *ids);  /* [n] arena tensors with storage */
    int *store = malloc(((size_t)n + 1) * sizeof *store); /* [n] storage_of per tensor */
    int *owner = malloc((size_t)width * sizeof *owner); /* [width] a tensor per column, or -1 */
    int *seen = malloc(((size_t)n + 1) * sizeof *seen); /* [n] storage counted at step seen[] */
    char *row = malloc((size_t)width + 1);
    if (!ids || !store || !owner || !seen || !row) {
        free(ids);
        free(store);
        free(seen);
        free(owner);
        free(row);
        fprintf(stderr, "gplan-inspect: out of memory\n");
        return -1;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        store[i] = storage_of(p, i);
        seen[i] = -1;
        if (p->tensors[i].region == GP_REGION_ARENA && p->tensors[i].view_src < 0)
            ids[m++] = i;
    }
    double per_col = (double)arena / width;
    fprintf(out, "\narena map: %d columns of %.0f bytes each; one row per step\n", width, per_col);
    fprintf(out, "%5s  %12s  |%*s|\n", "step", "live bytes", width, "");
    int steps = p->n_nodes > 0 ? p->n_nodes : 1;
    for (int s = 0; s < steps; s++) {
        int64_t live = 0;
        for (int c = 0; c < width; c++) {
            row[c] = '.';
            owner[c] = -1;
        }
        for (int k = 0; k < m; k++) {
            const gp_plan_tensor *t = &p->tensors[ids[k]];
            if (t->first > s || t->last < s)
                continue;
            /* In-place successors share their target's bytes: count each storage once. */
            if (seen[store[ids[k]]] != s) {
                seen[store[ids[k]]] = s;
                live += p->tensors[store[ids[k]]].size;
            }
            int c0 = (int)((double)t->offset / per_col);
            int c1 = (int)((double)(t->offset + t->size - 1) / per_col);
            if (c1 >= width)
                c1 = width - 1;
            for (int c = c0; c <= c1; c++) {
                int o = owner[c];
                int clash = 0;
                if (o >= 0 && store[o] != store[ids[k]]) {
                    const gp_plan_tensor *u = &p->tensors[o];
                    clash = t->offset < u->offset + u->size && u->offset < t->offset + t->size;
                }
                if (clash) {
                    row[c] = '!';
                } else if (row[c] != '!') {
                    row[c] = symbols[k % (int)(sizeof symbols - 1)];
                    owner[c] = ids[k];
                }
            }
        }
        row[width] = '\0';
        fprintf(out, "%5d  %12lld  |%s|\n", s, (long long)live, row);
    }
    fprintf(out, "legend (symbol: tensor):");
    for (int k = 0; k < m; k++)
        fprintf(out, "%s %c: %s", k % 6 ? "," : "\n ", symbols[k % (int)(sizeof symbols - 1)],
                p->tensors[ids[k]].name);
    fprintf(out, "\n");
    free(ids);
    free(store);
    free(seen);
    free(owner);
    free(row);
    return 0;
}

/* ---- JSON ---- */

static json_t *jname(const gp_plan *p, int id)
{
    return id >= 0 ? json_string(p->tensors[id].name) : json_null();
}

static json_t *plan_json(const gp_plan *p)
{
    json_t *o = json_object();
    char ver[32];
    snprintf(ver, sizeof ver, "%d.%d", p->version_major, p->version_minor);
    json_object_set_new(o, "graph", json_string(p->graph_name));
    json_object_set_new(o, "source", json_string(p->source));
    json_object_set_new(o, "format_version", json_string(ver));
    json_object_set_new(o, "n_devices", json_integer(p->n_devices));
    json_object_set_new(o, "method", json_string(p->method));
    json_object_set_new(o, "plan_seconds", json_real(p->plan_seconds));
    json_object_set_new(o, "alignment", json_integer(p->regions[GP_REGION_ARENA].alignment));
    json_object_set_new(o, "arena_bytes", json_integer(p->regions[GP_REGION_ARENA].size));
    json_object_set_new(o, "lower_bound_bytes", json_integer(p->lower_bound));
    json_object_set_new(o, "naive_bytes", json_integer(p->naive_bytes));
    json_object_set_new(o, "extras_bytes", json_integer(p->regions[GP_REGION_EXTRAS].size));
    json_object_set_new(o, "extras_record_bytes",
                        json_integer(GP_EXTRAS_RECORD_BYTES(p->n_devices)));
    json_object_set_new(o, "n_tensors", json_integer(p->n_tensors));
    json_object_set_new(o, "n_nodes", json_integer(p->n_nodes));
    json_t *regions = json_object();
    for (int r = 0; r < GP_REGION_COUNT; r++) {
        json_t *rj = json_object();
        json_object_set_new(rj, "size", json_integer(p->regions[r].size));
        json_object_set_new(rj, "alignment", json_integer(p->regions[r].alignment));
        json_object_set_new(regions, gp_region_name((gp_region)r), rj);
    }
    json_object_set_new(o, "regions", regions);
    /* Each device's memory: the same regions (one layout), its own split-weight padding. */
    json_t *devs = json_array();
    for (int d = 0; d < p->n_devices; d++) {
        json_t *dj = json_object();
        json_object_set_new(dj, "device", json_integer(d));
        for (int r = 0; r < GP_REGION_EXTRAS; r++)
            json_object_set_new(dj, gp_region_name((gp_region)r), json_integer(p->regions[r].size));
        json_object_set_new(dj, "split_padding", json_integer(gp_plan_split_padding(p, d)));
        json_array_append_new(devs, dj);
    }
    json_object_set_new(o, "devices", devs);
    json_t *syms = json_array();
    for (int s = 0; s < p->n_syms; s++) {
        json_t *sj = json_object();
        json_object_set_new(sj, "name", json_string(p->syms[s].name));
        json_object_set_new(sj, "bound", json_integer(p->syms[s].bound));
        json_array_append_new(syms, sj);
    }
    json_object_set_new(o, "syms", syms);
    json_t *tensors = json_array();
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        json_t *tj = json_object();
        json_t *shape = json_array(), *tsyms = json_array();
        for (int d = 0; d < t->ndim; d++) {
            json_array_append_new(shape, json_integer(t->dims[d]));
            json_array_append_new(tsyms, t->sym[d] >= 0 ? json_string(p->syms[t->sym[d]].name)
                                                        : json_null());
        }
        json_object_set_new(tj, "id", json_integer(i));
        json_object_set_new(tj, "name", json_string(t->name));
        json_object_set_new(tj, "kind", json_string(gp_tensor_kind_name(t->kind)));
        json_object_set_new(tj, "dtype", json_string(gp_dtype_name(t->dtype)));
        json_object_set_new(tj, "shape", shape);
        json_object_set_new(tj, "syms", tsyms);
        json_object_set_new(tj, "region", json_string(gp_region_name(t->region)));
        json_object_set_new(tj, "offset", json_integer(t->offset));
        json_object_set_new(tj, "size", json_integer(t->size));
        json_object_set_new(tj, "first", json_integer(t->first));
        json_object_set_new(tj, "last", json_integer(t->last));
        json_object_set_new(tj, "inplace_of", jname(p, t->inplace_of));
        json_object_set_new(tj, "view_of", jname(p, t->view_src));
        json_object_set_new(tj, "view_offset", json_integer(t->view_offset));
        json_object_set_new(tj, "workspace", json_boolean(is_workspace(p, i)));
        json_object_set_new(tj, "weight_name",
                            t->weight_name ? json_string(t->weight_name) : json_null());
        json_object_set_new(tj, "extras_offset", json_integer(t->extras_offset));
        json_t *sj = json_null();
        if (t->split.groups) {
            sj = json_object();
            json_object_set_new(sj, "dim", json_integer(t->split.dim));
            json_object_set_new(sj, "groups", json_integer(t->split.groups));
            json_object_set_new(sj, "unit", json_integer(t->split.unit));
            json_object_set_new(sj, "full", json_integer(t->split.full));
        }
        json_object_set_new(tj, "split", sj);
        json_array_append_new(tensors, tj);
    }
    json_object_set_new(o, "tensors", tensors);
    json_t *nodes = json_array();
    for (int s = 0; s < p->n_nodes; s++) {
        const gp_plan_node *nd = &p->nodes[s];
        json_t *nj = json_object(), *ins = json_array();
        for (int k = 0; k < nd->n_inputs; k++)
            json_array_append_new(ins, jname(p, nd->inputs[k]));
        json_object_set_new(nj, "step", json_integer(s));
        json_object_set_new(nj, "op", json_string(gp_op_get(nd->op)->name));
        json_object_set_new(nj, "inputs", ins);
        json_object_set_new(nj, "output", jname(p, nd->output));
        json_object_set_new(nj, "workspace", jname(p, nd->workspace));
        json_object_set_new(nj, "line", json_integer(nd->line));
        json_object_set_new(nj, "col", json_integer(nd->col));
        json_array_append_new(nodes, nj);
    }
    json_object_set_new(o, "nodes", nodes);
    return o;
}

/* ---- SVG ---- */

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

static int write_svg(const gp_plan *p, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return -1;
    }
    const double W = 1200, H = 700, left = 90, right = 20, top = 40, bottom = 50;
    const double pw = W - left - right, ph = H - top - bottom;
    int steps = p->n_nodes > 0 ? p->n_nodes : 1;
    int64_t arena = p->regions[GP_REGION_ARENA].size;
    double ymax = (double)(arena > p->lower_bound ? arena : p->lower_bound);
    if (ymax <= 0)
        ymax = 1;
#define SX(s) (left + pw * (double)(s) / steps)
#define SY(o) (top + ph * (1.0 - (double)(o) / ymax))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<title>");
    xml_text(f, p->graph_name);
    fprintf(f, ": arena %lld bytes, lower bound %lld</title>\n", (long long)arena,
            (long long)p->lower_bound);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f7f7f7\" "
            "stroke=\"#999\"/>\n", left, top, pw, ph);
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->region != GP_REGION_ARENA || t->view_src >= 0)
            continue;
        const char *fill = is_workspace(p, i) ? "#f28e2b" : t->inplace_of >= 0 ? "#59a14f"
                                                                              : "#4e79a7";
        double x0 = SX(t->first), x1 = SX(t->last + 1);
        double y0 = SY(t->offset + t->size), y1 = SY(t->offset);
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\" "
                "fill-opacity=\"0.75\" stroke=\"#222\" stroke-width=\"0.3\"><title>", x0, y0,
                x1 - x0, y1 - y0 > 0.5 ? y1 - y0 : 0.5, fill);
        xml_text(f, t->name);
        fprintf(f, " (%s, %lld bytes at %lld, steps %d-%d", gp_tensor_kind_name(t->kind),
                (long long)t->size, (long long)t->offset, t->first, t->last);
        if (t->inplace_of >= 0) {
            fprintf(f, ", in place of ");
            xml_text(f, p->tensors[t->inplace_of].name);
        }
        fprintf(f, ")</title></rect>\n");
    }
    double ylb = SY(p->lower_bound);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#e15759\" "
            "stroke-width=\"1.5\" stroke-dasharray=\"6,4\"><title>lower bound %lld bytes</title>"
            "</line>\n", left, ylb, left + pw, ylb, (long long)p->lower_bound);
    fprintf(f, "<text x=\"%.1f\" y=\"%.2f\" fill=\"#e15759\" text-anchor=\"end\">lower bound"
            "</text>\n", left + pw, ylb - 4);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step (0..%d)</text>\n",
            left + pw / 2, H - 15, steps - 1);
    fprintf(f, "<text x=\"15\" y=\"%.1f\" transform=\"rotate(-90 15 %.1f)\" "
            "text-anchor=\"middle\">offset (bytes, 0..%lld)</text>\n", top + ph / 2, top + ph / 2,
            (long long)ymax);
    fprintf(f, "<text x=\"%.1f\" y=\"25\">", left);
    xml_text(f, p->graph_name);
    fprintf(f, ": arena %lld B, lower bound %lld B; blue intermediate, green in-place, orange "
            "workspace</text>\n", (long long)arena, (long long)p->lower_bound);
    fprintf(f, "</svg>\n");
#undef SX
#undef SY
    if (fclose(f) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    options o = {.width = 64};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (gp_cli_help_version(a, prog, GPLAN_VERSION_STRING, usage)) {
            return EXIT_OK;
        } else if (!strcmp(a, "--timeline")) {
            o.timeline = 1;
        } else if (!strcmp(a, "--json")) {
            o.json = 1;
        } else if (!strcmp(a, "--svg")) {
            if (++i >= argc)
                return gp_cli_usage_error(prog, "--svg needs a FILE", NULL);
            o.svg = argv[i];
        } else if (!strcmp(a, "--width")) {
            char *end;
            if (++i >= argc)
                return gp_cli_usage_error(prog, "--width needs a number", NULL);
            long v = strtol(argv[i], &end, 10);
            if (*end || end == argv[i] || v < 8 || v > 1000)
                return gp_cli_usage_error(prog, "--width wants a number in 8..1000, not", argv[i]);
            o.width = (int)v;
        } else if (a[0] == '-' && a[1]) {
            return gp_cli_usage_error(prog, "unknown option", a);
        } else if (o.plan) {
            return gp_cli_usage_error(prog, "one PLAN only; extra argument", a);
        } else {
            o.plan = a;
        }
    }
    if (!o.plan)
        return gp_cli_usage_error(prog, "no PLAN given", NULL);

    gp_plan *p = NULL;
    char err[1024];
    if (gp_plan_load(o.plan, &p, err, sizeof err)) {
        fprintf(stderr, "gplan-inspect: %s\n", err);
        return EXIT_BAD;
    }
    int rc = EXIT_OK;
    if (o.json) {
        json_t *j = plan_json(p);
        if (!j || json_dumpf(j, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0)
            rc = EXIT_BAD;
        fputc('\n', stdout);
        json_decref(j);
    } else {
        gp_plan_summary_print(p, stdout);
        if (o.timeline) {
            if (print_timeline(p, o.width, stdout))
                rc = EXIT_BAD;
        } else {
            print_table(p, stdout);
        }
    }
    if (o.svg && write_svg(p, o.svg))
        rc = EXIT_BAD;
    gp_plan_free(p);
    return rc;
}
