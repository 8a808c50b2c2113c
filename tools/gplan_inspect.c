/* gplan-inspect: shows what a plan file holds: the summary, the tensor table, an ASCII memory map
 * over the steps, JSON, or an SVG of the arena. A thin main over <gplan/plan.h>.
 * Exit status: 0 ok, 1 bad plan (or an output that cannot be written), 2 bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gplan/cli.h"
#include "gplan/gplan_version.h" /* generated from include/gplan/gplan_version.h.in */
#include "gplan/plan.h"

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

static int write_svg(const gp_plan *p, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return -1;
    }
    gp_plan_svg_print(p, f);
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
        if (gp_plan_json_print(p, stdout))
            rc = EXIT_BAD;
    } else {
        gp_plan_summary_print(p, stdout);
        if (!o.timeline) {
            gp_plan_table_print(p, stdout);
        } else if (gp_plan_timeline_print(p, o.width, stdout)) {
            fprintf(stderr, "gplan-inspect: out of memory\n");
            rc = EXIT_BAD;
        }
    }
    if (o.svg && write_svg(p, o.svg))
        rc = EXIT_BAD;
    gp_plan_free(p);
    return rc;
}
