/* Tests of tokenizer/: llama.cpp's vocabulary test files (exact ids through the GGUF and the
 * tokenizer.json loaders), round trips, streaming decode, special tokens, bad vocabularies and
 * bad input. The vocabularies come from $GPLAN_VOCAB_DIR (scripts/fetch_vocab.sh) and
 * ../shared/data/vocab; one found in neither is reported skipped by name. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/testutil.h"
#include "tokenizer/tokenizer.h"

static char err[2048];

/* ---- finding the vocabularies ---- */

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* dir/ggml-vocab-NAME.gguf in the first folder that has it (and its .inp/.out), or NULL. */
static const char *vocab_file(const char *name, const char *suffix)
{
    static char buf[4096];
    const char *env = getenv("GPLAN_VOCAB_DIR");
    const char *dirs[3] = {env, gp_test_path("../shared/data/vocab"), NULL};
    char shared[4096];
    snprintf(shared, sizeof shared, "%s", dirs[1]);
    dirs[1] = shared;
    for (int i = 0; i < 2; i++) {
        if (!dirs[i] || !*dirs[i])
            continue;
        snprintf(buf, sizeof buf, "%s/ggml-vocab-%s.gguf.out", dirs[i], name);
        if (!exists(buf))
            continue;
        snprintf(buf, sizeof buf, "%s/ggml-vocab-%s.gguf%s", dirs[i], name, suffix);
        return buf;
    }
    return NULL;
}

/* The tokenizer.json folder made by scripts/tokenizer/make_json.py: committed under
 * tests/tokenizer/json/NAME, or made into $GPLAN_VOCAB_DIR/json/NAME. */
static const char *json_dir(const char *name)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/tokenizer.json", gp_test_path("tests/tokenizer/json"));
    snprintf(buf, sizeof buf, "%s/%s/tokenizer.json", gp_test_path("tests/tokenizer/json"), name);
    if (exists(buf)) {
        buf[strlen(buf) - strlen("/tokenizer.json")] = '\0';
        return buf;
    }
    const char *env = getenv("GPLAN_VOCAB_DIR");
    if (env && *env) {
        snprintf(buf, sizeof buf, "%s/json/%s/tokenizer.json", env, name);
        if (exists(buf)) {
            buf[strlen(buf) - strlen("/tokenizer.json")] = '\0';
            return buf;
        }
    }
    return NULL;
}

/* ---- the .inp/.out pairs ---- */

typedef struct {
    char **text; /* [n] the test strings */
    size_t *len;
    char **ids;  /* [n] the expected lines */
    int n;
} cases;

static void cases_free(cases *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->text[i]);
        free(c->ids[i]);
    }
    free(c->text);
    free(c->len);
    free(c->ids);
    memset(c, 0, sizeof *c);
}

static int cases_read(const char *name, cases *c)
{
    memset(c, 0, sizeof *c);
    char inp_path[4096], out_path[4096];
    snprintf(inp_path, sizeof inp_path, "%s", vocab_file(name, ".inp"));
    snprintf(out_path, sizeof out_path, "%s", vocab_file(name, ".out"));
    size_t ni, no;
    char *inp = gp_test_read_file(inp_path, &ni), *out = gp_test_read_file(out_path, &no);
    if (!inp || !out) {
        free(inp);
        free(out);
        return -1;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int cap = 0;
    char *p = inp, *q = out;
    for (;;) {
        char *e = strstr(p, sep);
        char *nl = strchr(q, '\n');
        if (!e || !nl)
            break;
        if (c->n == cap) {
            cap = cap ? 2 * cap : 64;
            c->text = realloc(c->text, (size_t)cap * sizeof *c->text);
            c->len = realloc(c->len, (size_t)cap * sizeof *c->len);
            c->ids = realloc(c->ids, (size_t)cap * sizeof *c->ids);
        }
        c->len[c->n] = (size_t)(e - p);
        c->text[c->n] = malloc(c->len[c->n] + 1);
        memcpy(c->text[c->n], p, c->len[c->n]);
        c->text[c->n][c->len[c->n]] = '\0';
        c->ids[c->n] = malloc((size_t)(nl - q) + 1);
        memcpy(c->ids[c->n], q, (size_t)(nl - q));
        c->ids[c->n][nl - q] = '\0';
        c->n++;
        p = e + strlen(sep);
        q = nl + 1;
    }
    free(inp);
    free(out);
    return c->n > 0 ? 0 : -1;
}

/* Encodes every case; counts those whose ids differ from the .out line, printing the first few. */
static int check_cases(const gp_tok *t, const cases *c, const char *what)
{
    int bad = 0;
    for (int i = 0; i < c->n; i++) {
        int32_t ids[4096];
        int64_t n = gp_tok_encode(t, c->text[i], c->len[i], 0, 0, ids, 4096, err, sizeof err);
        char got[65536];
        size_t pos = 0;
        got[0] = '\0';
        for (int64_t k = 0; k < n && k < 4096 && pos + 16 < sizeof got; k++)
            pos += (size_t)snprintf(got + pos, sizeof got - pos, " %d", ids[k]);
        /* the .out files differ in leading spaces: compare the numbers */
        int same = n >= 0;
        const char *w = c->ids[i];
        for (int64_t k = 0; same && k < n; k++) {
            char *end;
            long v = strtol(w, &end, 10);
            same = end != w && v == ids[k];
            w = end;
        }
        while (same && *w == ' ')
            w++;
        if (!same || *w) {
            if (bad < 3)
                printf("\n  %s case %d %.40s%s\n    want%s\n    got %s%s\n", what, i, c->text[i],
                       c->len[i] > 40 ? "..." : "", c->ids[i], got, n < 0 ? err : "");
            bad++;
        }
    }
    if (bad)
        printf("  %s: %d of %d cases differ\n", what, bad, c->n);
    return bad;
}

static void run_vocab(const char *name, int json)
{
    cases c;
    CU_ASSERT_FATAL(cases_read(name, &c) == 0);
    char what[256];
    snprintf(what, sizeof what, "%s (%s)", name, json ? "tokenizer.json" : "GGUF");
    gp_tok *t = gp_tok_load(json ? json_dir(name) : vocab_file(name, ""), err, sizeof err);
    if (!t)
        printf("\n  %s: %s\n", what, err);
    CU_ASSERT_FATAL(t != NULL);
    CU_ASSERT_EQUAL(check_cases(t, &c, what), 0);
    gp_tok_free(t);
    cases_free(&c);
}

/* Every vocabulary with llama.cpp test files whose type the tokenizer implements. */
#define VOCABS(X)                                                                                \
    X(gpt_2, "gpt-2") X(llama_bpe, "llama-bpe") X(llama_spm, "llama-spm") X(phi_3, "phi-3")      \
    X(qwen2, "qwen2") X(qwen35, "qwen35") X(deepseek_llm, "deepseek-llm")                        \
    X(deepseek_coder, "deepseek-coder") X(falcon, "falcon") X(starcoder, "starcoder")            \
    X(refact, "refact") X(mpt, "mpt") X(command_r, "command-r")

#define DEF(id, name)                                                                            \
    static void test_gguf_##id(void) { run_vocab(name, 0); }                                     \
    static void test_json_##id(void) { run_vocab(name, 1); }
VOCABS(DEF)

void gp_suite_tokenizer(void)
{
    CU_pSuite s = CU_add_suite("tokenizer", NULL, NULL);
    char title[256];
#define REG(id, name)                                                                            \
    if (vocab_file(name, "")) {                                                                  \
        snprintf(title, sizeof title, "llama.cpp's %s ids (GGUF)", name);                        \
        CU_add_test(s, strdup(title), test_gguf_##id);                                           \
        if (json_dir(name)) {                                                                    \
            snprintf(title, sizeof title, "llama.cpp's %s ids (tokenizer.json)", name);          \
            CU_add_test(s, strdup(title), test_json_##id);                                       \
        } else                                                                                   \
            printf("tokenizer: %s tokenizer.json skipped (not in tests/tokenizer/json or "       \
                   "$GPLAN_VOCAB_DIR/json)\n", name);                                            \
    } else                                                                                       \
        printf("tokenizer: vocabulary %s skipped (ggml-vocab-%s.gguf.out in neither "            \
               "$GPLAN_VOCAB_DIR nor ../shared/data/vocab)\n", name, name);
    VOCABS(REG)
}
