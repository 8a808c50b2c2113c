/* The compiler's API (include/gplan/compile.h): programs from files and texts, their parameters,
 * errors in err or printed once, plans, memory budgets and the fit search. */
#define _GNU_SOURCE /* open_memstream */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gplan/compile.h"
#include "tests/testutil.h"

static const char *const small_gpt2[] = {"n_layer=1", "n_embd=64", "n_head=4", "vocab_size=256",
                                         "n_positions=256", "n_batch=16"};

static void test_params(void)
{
    char err[1024];
    gp_program *g = gp_program_compile(gp_test_path("examples/tiny.gplan"), NULL, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_STRING_EQUAL(gp_program_name(g), "tiny");
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_program_params(g), "n_layer=2"));
    CU_ASSERT_EQUAL(gp_program_param(g, "n_layer"), 2);
    CU_ASSERT_EQUAL(gp_program_param(g, "wtype"), -1);              /* a dtype */
    CU_ASSERT_EQUAL(gp_program_param(g, "layer_norm_epsilon"), -1); /* a number */
    CU_ASSERT_EQUAL(gp_program_param(g, "n_lay"), -1);
    CU_ASSERT_PTR_NULL(gp_program_fit_param(g, NULL)); /* no family, no n_seq */
    gp_program *one = gp_program_define(g, "n_layer", 1, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(one);
    CU_ASSERT_EQUAL(gp_program_param(one, "n_layer"), 1);
    CU_ASSERT_EQUAL(gp_program_param(g, "n_layer"), 2);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    gp_program_summary_print(one, f);
    fclose(f);
    CU_ASSERT_EQUAL(strncmp(text, "tiny: params n_layer=1 ", 23), 0);
    CU_ASSERT(len > 0 && text[len - 1] == '\n');
    free(text);
    gp_program_free(one);
    gp_program_free(g);
    gp_program_free(NULL);
}

static const char bad_src[] = "graph bad() {\n  input x: f32[4];\n  output y: f32[4] = x + $;\n}\n";

static void test_errors(void)
{
    char err[1024];
    CU_ASSERT_PTR_NULL(gp_program_compile_text("bad.gplan", bad_src, strlen(bad_src), NULL, err,
                                               sizeof err));
    CU_ASSERT_EQUAL(strncmp(err, "bad.gplan:3:", 12), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, ": error: "));
    CU_ASSERT_PTR_NOT_NULL(strchr(err, '^')); /* the source line and its caret */
    CU_ASSERT(strlen(err) > 0 && err[strlen(err) - 1] != '\n');
    /* With diag set the diagnostics are printed there, whole, and not in err. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    gp_compile_opts o = gp_compile_defaults();
    o.diag = f;
    CU_ASSERT_PTR_NULL(gp_program_compile_text("bad.gplan", bad_src, strlen(bad_src), &o, err,
                                               sizeof err));
    fclose(f);
    CU_ASSERT_STRING_EQUAL(err, "");
    CU_ASSERT_EQUAL(strncmp(text, "bad.gplan:3:", 12), 0);
    CU_ASSERT(len > 0 && text[len - 1] == '\n');
    free(text);
    /* A folder is refused before opening, by gp_compile_check_file's message. */
    const char *dir = gp_test_path("examples");
    char want_msg[1200];
    snprintf(want_msg, sizeof want_msg, "%s: cannot open (not a regular file: a folder)", dir);
    CU_ASSERT_EQUAL(gp_compile_check_file(dir, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, want_msg);
    CU_ASSERT_PTR_NULL(gp_program_compile(dir, NULL, err, sizeof err));
    CU_ASSERT_STRING_EQUAL(err, want_msg);
    CU_ASSERT_EQUAL(gp_compile_check_file("/nonexistent/x.gplan", err, sizeof err), 0);
    CU_ASSERT_EQUAL(gp_compile_check_file(NULL, err, sizeof err), 0);
}

static void test_plan(void)
{
    char err[1024];
    gp_program *g = gp_program_compile(gp_test_path("examples/tiny.gplan"), NULL, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    gp_plan *p = NULL;
    CU_ASSERT_EQUAL_FATAL(gp_program_plan(g, NULL, &p, err, sizeof err), 0);
    gp_plan_memory m;
    gp_plan_memory_of(p, &m);
    CU_ASSERT(m.weights > 0 && m.state > 0 && m.arena > 0);
    CU_ASSERT_EQUAL(m.total, m.weights + m.state + m.arena + m.io + m.extras);
    gp_plan_free(p);
    gp_plan_opts o = gp_plan_defaults();
    o.alignment = 3;
    p = NULL;
    CU_ASSERT_EQUAL(gp_program_plan(g, &o, &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_STRING_EQUAL(err, "error: plan: alignment 3 is not a power of two in [1, 1048576]");
    gp_program_free(g);
}

static void test_budget(void)
{
    char dev[8], err[256];
    int64_t b = 0;
    CU_ASSERT_EQUAL(gp_budget_parse("cuda=8GiB", dev, sizeof dev, &b, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(dev, "cuda");
    CU_ASSERT_EQUAL(b, (int64_t)8 << 30);
    CU_ASSERT_EQUAL(gp_budget_parse("cpu=1.5k", dev, sizeof dev, &b, err, sizeof err), 0);
    CU_ASSERT_EQUAL(b, 1536);
    CU_ASSERT_EQUAL(gp_budget_parse("gpu=1", dev, sizeof dev, &b, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "'gpu=1': a budget is DEVICE=SIZE, DEVICE cpu or cuda (cuda=8GiB)");
    CU_ASSERT_EQUAL(gp_budget_parse("cpu=2X", dev, sizeof dev, &b, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "'cpu=2X': unknown unit 'X' (B, KiB, MiB, GiB, TiB)");
}

/* The fit finds exactly the largest context whose plan fits: a budget of the plan of 100
 * positions gives 100 (the KV cache grows with every position). */
static void test_fit(void)
{
    char err[1024];
    gp_compile_opts o = gp_compile_defaults();
    o.defines = small_gpt2;
    o.n_defines = (int)GP_TEST_COUNT(small_gpt2);
    gp_program *g = gp_program_compile(gp_test_path("examples/gpt2.gplan"), &o, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    int64_t limit = 0, best = 0;
    const char *param = gp_program_fit_param(g, &limit);
    CU_ASSERT_PTR_NOT_NULL_FATAL(param);
    CU_ASSERT_STRING_EQUAL(param, "n_positions");
    CU_ASSERT_EQUAL(limit, 256);
    gp_program *g100 = gp_program_define(g, param, 100, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g100);
    gp_plan *p = NULL;
    gp_plan_opts po = gp_plan_defaults();
    po.strategy = GP_STRATEGY_GREEDY;
    CU_ASSERT_EQUAL_FATAL(gp_program_plan(g100, &po, &p, err, sizeof err), 0);
    gp_plan_memory m100, m;
    gp_plan_memory_of(p, &m100);
    gp_plan_free(p);
    gp_program_free(g100);
    CU_ASSERT_EQUAL(gp_program_fit(g, param, limit, NULL, m100.total, &best, &m, err, sizeof err), 1);
    CU_ASSERT_EQUAL(best, 100);
    CU_ASSERT_EQUAL(m.total, m100.total);
    CU_ASSERT_EQUAL(gp_program_fit(g, param, limit, NULL, (int64_t)1 << 40, &best, &m, err,
                                   sizeof err), 1);
    CU_ASSERT_EQUAL(best, 256);
    CU_ASSERT_EQUAL(gp_program_fit(g, param, limit, NULL, 1, &best, &m, err, sizeof err), 0);
    CU_ASSERT(m.total > 1);
    /* A define the graph refuses: the message names it, on one line. */
    CU_ASSERT_EQUAL(gp_program_fit(g, "frob", 0, NULL, (int64_t)1 << 40, &best, &m, err,
                                   sizeof err), -1);
    const char *tail = "gpt2.gplan: with frob=1: error: -D frob: graph 'gpt2' has no parameter "
                       "'frob'";
    CU_ASSERT(strlen(err) > strlen(tail) && !strcmp(err + strlen(err) - strlen(tail), tail));
    gp_program_free(g);
}

void gp_suite_compile(void)
{
    static const gp_test_case tests[] = {
        {"a program's name, parameters, summary and a define more", test_params},
        {"errors in err, or printed once to diag; folders refused first", test_errors},
        {"plans and their bytes; bad planning options", test_plan},
        {"memory budgets' text", test_budget},
        {"the fit search: the largest context within a budget", test_fit},
    };
    gp_test_add_suite("compile", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
