/* The arena's map over the schedule: as text (gplan-inspect --timeline) and as an SVG picture
 * (gplan-inspect --svg). */
#include "plan/plan.h"

#include <stdlib.h>

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

int gp_plan_timeline_print(const gp_plan *p, int width, FILE *out)
{
    if (width < 1)
        width = 1;
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

void gp_plan_svg_print(const gp_plan *p, FILE *f)
{
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
        const char *fill = gp_plan_is_workspace(p, i) ? "#f28e2b"
                           : t->inplace_of >= 0         ? "#59a14f"
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
}
