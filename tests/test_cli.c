/* Tests of the command-line helpers (suite "cli", include/gplan/cli.h): options parsed into each
 * kind of destination, every usage error with its message and status, help and version, lists,
 * token ids, gp_cli_in_list and gp_cli_read_all. */
#define _POSIX_C_SOURCE 200809L
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gplan/cli.h"
#include "tests/testutil.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: t [options]\n");
}

typedef struct {
    int flag, n, seen, n_list, n_ids, n_defs;
    int64_t big;
    uint64_t seed;
    double x;
    const char *s, *pos, *list[2], *defs[2];
    int32_t *ids;
} dests;

/* gp_cli_parse of the words (NULL-terminated) with stdout and stderr in *out (freed by the
 * caller); its status. */
static int parse(dests *d, char **out, const char *const *words)
{
    const gp_cli_opt opts[] = {
        {"--flag", GP_CLI_FLAG, &d->flag, 0, 0, NULL, NULL},
        {"-n", GP_CLI_INT, &d->n, 1, 8, "-n needs 1..8", &d->seen},
        {"--big", GP_CLI_I64, &d->big, 0, 1e12, NULL, NULL},
        {"--seed", GP_CLI_U64, &d->seed, 0, 0, "bad --seed", NULL},
        {"--x", GP_CLI_NUM, &d->x, 0, 1, "bad --x (in [0, 1])", NULL},
        {"--s", GP_CLI_STR, &d->s, 0, 0, NULL, NULL},
        {"--l", GP_CLI_LIST, d->list, 0, 2, "--l needs a non-empty string", &d->n_list},
        {"--ids", GP_CLI_IDS, &d->ids, 0, 0, "bad --ids", &d->n_ids},
        {"-D", GP_CLI_DEFINES, d->defs, 0, 2, "bad -D (NAME=VALUE)", &d->n_defs},
    };
    char *argv[32] = {"t"};
    int argc = 1;
    while (words[argc - 1])
        argv[argc] = (char *)words[argc - 1], argc++;
    const char *path = gp_test_tmpfile(".txt");
    fflush(stdout);
    fflush(stderr);
    int o1 = dup(1), o2 = dup(2);
    FILE *f = fopen(path, "w");
    dup2(fileno(f), 1);
    dup2(fileno(f), 2);
    int rc = gp_cli_parse("t", "1.2", usage, opts, sizeof opts / sizeof opts[0], argc, argv,
                          &d->pos);
    fflush(stdout);
    fflush(stderr);
    dup2(o1, 1);
    dup2(o2, 2);
    close(o1);
    close(o2);
    fclose(f);
    *out = gp_test_read_file(path, NULL);
    remove(path);
    return rc;
}

static void test_values(void)
{
    dests d = {0};
    char *out;
    const char *const w[] = {"--flag", "-n", "3", "--big", "1000000000000", "--seed", "0x10",
                             "--x", "0.25", "--s", "abc", "--l", "a", "--l", "b", "--ids",
                             "1,-2,3", "-D", "a=1", "model", NULL};
    CU_ASSERT_EQUAL(parse(&d, &out, w), -1);
    CU_ASSERT_STRING_EQUAL(out, "");
    CU_ASSERT(d.flag == 1 && d.n == 3 && d.seen == 1 && d.big == 1000000000000LL);
    CU_ASSERT(d.seed == 16 && d.x == 0.25 && !strcmp(d.s, "abc") && !strcmp(d.pos, "model"));
    CU_ASSERT(d.n_list == 2 && !strcmp(d.list[0], "a") && !strcmp(d.list[1], "b"));
    CU_ASSERT(d.n_defs == 1 && !strcmp(d.defs[0], "a=1"));
    CU_ASSERT_FATAL(d.n_ids == 3);
    CU_ASSERT(d.ids[0] == 1 && d.ids[1] == -2 && d.ids[2] == 3);
    free(d.ids);
    free(out);
}

static void test_errors(void)
{
    static const struct {
        const char *words[5]; /* NULL-terminated */
        int rc;
        const char *out;
    } cases[] = {
        {{"--frob"}, 2, "t: unknown option: --frob\ntry 't --help'\n"},
        {{"-n"}, 2, "t: missing value for: -n\ntry 't --help'\n"},
        {{"-n", "9"}, 2, "t: -n needs 1..8: 9\ntry 't --help'\n"},
        {{"-n", "2x"}, 2, "t: -n needs 1..8: 2x\ntry 't --help'\n"},
        {{"--big", "-1"}, 2, "t: bad --big: -1\ntry 't --help'\n"},
        {{"--seed", "-1"}, 2, "t: bad --seed: -1\ntry 't --help'\n"},
        {{"--x", "1.5"}, 2, "t: bad --x (in [0, 1]): 1.5\ntry 't --help'\n"},
        {{"--l", ""}, 2, "t: --l needs a non-empty string\ntry 't --help'\n"},
        {{"--l", "a", "--l", "b"}, -1, ""},
        {{"-D", "a"}, 2, "t: bad -D (NAME=VALUE)\ntry 't --help'\n"},
        {{"--ids", "1,,2"}, 2, "t: bad --ids: 1,,2\ntry 't --help'\n"},
        {{"--ids", "3000000000"}, 2, "t: bad --ids: 3000000000\ntry 't --help'\n"},
        {{"a", "b"}, 2, "t: unexpected argument: b\ntry 't --help'\n"},
        {{"--help"}, 0, "usage: t [options]\n"},
        {{"--version"}, 0, "t 1.2\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dests d = {0};
        char *out;
        CU_ASSERT_EQUAL(parse(&d, &out, cases[i].words), cases[i].rc);
        CU_ASSERT_STRING_EQUAL(out ? out : "(none)", cases[i].out);
        free(out);
        free(d.ids);
    }
    /* A full list: its third value. */
    dests d = {0};
    char *out;
    const char *const w[] = {"--l", "a", "--l", "b", "--l", "c", NULL};
    CU_ASSERT_EQUAL(parse(&d, &out, w), 2);
    CU_ASSERT_STRING_EQUAL(out, "t: more than 2 --l values\ntry 't --help'\n");
    free(out);
}

static void test_in_list(void)
{
    const char *list = "chatml, llama3, llama2";
    CU_ASSERT(gp_cli_in_list("chatml", list) && gp_cli_in_list("llama2", list));
    CU_ASSERT(!gp_cli_in_list("llama", list) && !gp_cli_in_list("chatml, llama3", list));
    CU_ASSERT(!gp_cli_in_list("", list) && !gp_cli_in_list("hatml", list));
    CU_ASSERT(gp_cli_in_list("runtime", "merge, runtime") && !gp_cli_in_list("x", ""));
}

static void test_read_all(void)
{
    /* Across the first buffer's size, and empty. */
    size_t sizes[] = {0, 1, 4096, 4097, 20000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        char *data = malloc(sizes[k] + 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(data);
        for (size_t i = 0; i < sizes[k]; i++)
            data[i] = (char)('a' + i % 26);
        const char *path = gp_test_tmpfile(".txt");
        CU_ASSERT_EQUAL_FATAL(gp_test_write_file(path, data, sizes[k]), 0);
        FILE *f = fopen(path, "rb");
        size_t len = 99;
        char *got = gp_cli_read_all(f, &len);
        fclose(f);
        CU_ASSERT_PTR_NOT_NULL_FATAL(got);
        CU_ASSERT(len == sizes[k] && got[len] == '\0' && !memcmp(got, data, len));
        free(got);
        got = gp_cli_read_file(path, &len, NULL, 0);
        CU_ASSERT(got && len == sizes[k] && !memcmp(got, data, len));
        free(got);
        free(data);
        remove(path);
    }
    char err[256];
    size_t len;
    CU_ASSERT_PTR_NULL(gp_cli_read_file("/nonexistent/x.txt", &len, err, sizeof err));
    CU_ASSERT_STRING_EQUAL(err, "/nonexistent/x.txt: cannot open: No such file or directory");
}

void gp_suite_cli(void)
{
    static const gp_test_case tests[] = {
        {"every kind of option into its destination", test_values},
        {"usage errors, help and version: messages and statuses", test_errors},
        {"gp_cli_in_list", test_in_list},
        {"gp_cli_read_all and gp_cli_read_file", test_read_all},
    };
    gp_test_add_suite("cli", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
