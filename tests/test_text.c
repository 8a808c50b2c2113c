/* Tests of the text API (suite "text", include/gplan/text.h): loading and its errors, the plan
 * cache of a GGUF file, tokenizing, generation against the ids it picks, prompt chunks, the kept
 * prefix, stop strings, end of generation, the context, cancelling, sampling, chat turns over the
 * cache, eval hooks and no allocation per step. A tiny random-weights GPT-2 (2 layers, 64 wide,
 * 16 tokens an eval) with the 384-token byte-level BPE of tests/cli/tokenizer. */
#define _GNU_SOURCE /* utimensat, st_mtim */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dsl/dsl.h"
#include "gplan/plan.h"
#include "gplan/text.h"
#include "planner/planner.h"
#include "tests/alloc/alloc_count.h"
#include "tests/gguf_writer.h"
#include "tests/testutil.h"
#include "weights/safetensors.h"

/* ---- fixtures ---- */

static char plan256[4096]; /* gpt2.gplan, 384 tokens, n_batch 16, n_positions 256 */
static char plan64[4096];  /* the same with n_positions 64 */
static char plan_row1[4096]; /* plan256 with n_rows 1: one logits row an eval */
static char tiny_plan[4096]; /* tiny.gplan: a 256-token vocabulary */
static char no_tmpl[4096];   /* a tokenizer folder without tokenizer_config.json */
static char with_bos[4096];  /* a tokenizer folder that adds BOS and EOS */
static const char *tok_dir;

static int compile_plan(const char *example, const char *const *defs, int n, char *out,
                        size_t cap)
{
    snprintf(out, cap, "%s", gp_test_tmpfile(".plan"));
    gp_diag *d = gp_diag_new(NULL);
    gp_dsl_opts o = {.defines = (const char **)defs, .n_defines = n};
    gp_graph *g = gp_dsl_compile_file(gp_test_path(example), &o, d);
    gp_plan *p = NULL;
    char err[1024] = "";
    int rc = !g || gp_plan_build(g, NULL, &p, d) || gp_plan_write(p, out, err, sizeof err);
    if (rc)
        fprintf(stderr, "\n  %s: %s%s\n", example, gp_diag_text(d), err);
    gp_plan_free(p);
    gp_graph_free(g);
    gp_diag_free(d);
    return rc ? -1 : 0;
}

/* A fresh folder under the build tree holding tokenizer.json and, when config, tokenizer_config. */
static int tokenizer_folder(char *out, size_t cap, const char *config)
{
    snprintf(out, cap, "%s", gp_test_tmpfile(".tok"));
    char path[4200];
    size_t len;
    char *json = gp_test_read_file(gp_test_path("tests/cli/tokenizer/tokenizer.json"), &len);
    snprintf(path, sizeof path, "%s/tokenizer.json", out);
    int rc = !json || mkdir(out, 0755) || gp_test_write_file(path, json, len);
    free(json);
    if (!rc && config) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", out);
        rc = gp_test_write_file(path, config, strlen(config));
    }
    return rc ? -1 : 0;
}

static int text_init(void)
{
    static const char *const small[] = {"n_layer=2", "n_embd=64", "n_head=4", "vocab_size=384",
                                        "n_batch=16", "n_positions=256", "n_rows=1"};
    static const char *const ctx64[] = {"n_layer=2", "n_embd=64", "n_head=4", "vocab_size=384",
                                        "n_batch=16", "n_positions=64"};
    tok_dir = strdup(gp_test_path("tests/cli/tokenizer"));
    return !tok_dir || compile_plan("examples/gpt2.gplan", small, 6, plan256, sizeof plan256) ||
           compile_plan("examples/gpt2.gplan", ctx64, 6, plan64, sizeof plan64) ||
           compile_plan("examples/gpt2.gplan", small, 7, plan_row1, sizeof plan_row1) ||
           compile_plan("examples/tiny.gplan", NULL, 0, tiny_plan, sizeof tiny_plan) ||
           tokenizer_folder(no_tmpl, sizeof no_tmpl, NULL) ||
           tokenizer_folder(with_bos, sizeof with_bos,
                            "{\"add_bos_token\": true, \"add_eos_token\": true, "
                            "\"bos_token\": \"<|endoftext|>\", \"eos_token\": \"<|im_end|>\"}");
}

static int text_cleanup(void)
{
    gp_test_tmp_remove_all();
    free((void *)tok_dir);
    return 0;
}

/* The model of a plan with random weights of seed and a tokenizer ("" none, NULL tok_dir). */
static gp_lm *load_plan(const char *plan, uint64_t seed, const char *tok)
{
    gp_lm_opts o = gp_lm_defaults();
    o.plan = plan;
    o.random_weights = 1;
    o.random_seed = seed;
    o.tokenizer = tok ? tok : tok_dir;
    o.n_threads = 2;
    char err[1024];
    gp_lm *lm = gp_lm_load(NULL, &o, err, sizeof err);
    if (!lm)
        fprintf(stderr, "\n  %s: %s\n", plan, err);
    return lm;
}

static gp_seq *new_seq(gp_lm *lm, const gp_sampler_opts *so)
{
    char err[1024];
    gp_seq *s = gp_seq_new(lm, so, err, sizeof err);
    if (!s)
        fprintf(stderr, "\n  gp_seq_new: %s\n", err);
    return s;
}

/* What a generation streamed: the text pieces and the ids, with optional cancels. */
typedef struct {
    char text[8192];
    size_t n_text;
    int text_calls;
    int32_t ids[1024];
    int n_ids;
    int ids_at_first_text; /* n_ids when on_text was first called */
    int cancel_at_id;      /* on_token returns 1 at this many ids (0: never) */
    int cancel_on_text;    /* on_text returns 1 */
} sink;

static int on_text(void *user, const char *p, size_t n)
{
    sink *k = user;
    if (k->text_calls++ == 0)
        k->ids_at_first_text = k->n_ids;
    if (k->n_text + n < sizeof k->text) {
        memcpy(k->text + k->n_text, p, n);
        k->n_text += n;
        k->text[k->n_text] = '\0';
    }
    return k->cancel_on_text;
}

static int on_token(void *user, int32_t id)
{
    sink *k = user;
    if (k->n_ids < 1024)
        k->ids[k->n_ids++] = id;
    return k->cancel_at_id && k->n_ids == k->cancel_at_id;
}

static gp_gen_opts gen_opts(sink *k, int64_t max_tokens, int ignore_eos)
{
    memset(k, 0, sizeof *k);
    gp_gen_opts g = gp_gen_defaults();
    g.max_tokens = max_tokens;
    g.ignore_eos = ignore_eos;
    g.on_text = on_text;
    g.on_token = on_token;
    g.user = k;
    return g;
}

/* Steps until finished: the finish reason, or -1. */
static int run_steps(gp_seq *s)
{
    int rc;
    while ((rc = gp_seq_step(s)) == GP_FINISH_NONE)
        ;
    return rc;
}

static int64_t tokenize(const gp_lm *lm, const char *text, int32_t *ids, int64_t cap)
{
    char err[512] = "";
    int64_t n = gp_lm_tokenize(lm, text, strlen(text), 0, ids, cap, err, sizeof err);
    if (n < 0)
        fprintf(stderr, "\n  tokenize: %s\n", err);
    return n;
}

/* 'a b c ... z ' three times: 136 tokens, nine evals of 16. */
static const char *long_prompt(void)
{
    static char buf[256];
    buf[0] = '\0';
    for (int r = 0; r < 3; r++)
        for (char c = 'a'; c <= 'z'; c++)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%c ", c);
    return buf;
}

/* ---- loading ---- */

/* A GGUF file with general.architecture arch and, for gpt2, the shape of the test plans
 * (context_length ctx) and an f32 token embedding of 384 rows. */
static int write_gguf(const char *path, const char *arch, uint32_t ctx)
{
    static float embd[384 * 64];
    gp_gw w;
    gp_gw_init(&w);
    gp_gw_header(&w, 3, 1, 5);
    gp_gw_kv_str(&w, "general.architecture", arch);
    gp_gw_kv_u32(&w, "gpt2.block_count", 2);
    gp_gw_kv_u32(&w, "gpt2.embedding_length", 64);
    gp_gw_kv_u32(&w, "gpt2.attention.head_count", 4);
    gp_gw_kv_u32(&w, "gpt2.context_length", ctx);
    const int64_t ne[2] = {64, 384};
    gp_gw_tensor_info(&w, "token_embd.weight", 2, ne, 0, 0);
    gp_gw_pad(&w, 32);
    gp_gw_bytes(&w, embd, sizeof embd);
    int rc = gp_gw_save(&w, path);
    gp_gw_free(&w);
    return rc;
}

static void test_load_errors(void)
{
    char err[1024] = "";
    gp_lm_opts o = gp_lm_defaults();
    o.cache_dir = "";
    CU_ASSERT_PTR_NULL(gp_lm_load("/nonexistent/model.gguf", &o, err, sizeof err));
    CU_ASSERT_STRING_EQUAL(err, "/nonexistent/model.gguf: cannot open (No such file or directory)");
    CU_ASSERT_PTR_NULL(gp_lm_load(NULL, NULL, err, sizeof err));
    CU_ASSERT_STRING_EQUAL(err, "no model given");

    /* An architecture no family has: the file and the supported ones. */
    char path[4096];
    snprintf(path, sizeof path, "%s", gp_test_tmpfile(".gguf"));
    CU_ASSERT_EQUAL_FATAL(write_gguf(path, "mamba", 64), 0);
    CU_ASSERT_PTR_NULL(gp_lm_load(path, &o, err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unsupported architecture 'mamba' (supported: "));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "gpt2"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "llama"));
    remove(path);

    /* A folder that is no Hugging Face model. */
    CU_ASSERT_PTR_NULL(gp_lm_load(tok_dir, &o, err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "a folder without config.json"));

    /* A plan and nothing to bind. */
    o.plan = plan256;
    CU_ASSERT_PTR_NULL(gp_lm_load(NULL, &o, err, sizeof err));
    char want[4200];
    snprintf(want, sizeof want, "%s: no weights: give a checkpoint or random weights", plan256);
    CU_ASSERT_STRING_EQUAL(err, want);
    /* A file that is no plan. */
    snprintf(path, sizeof path, "%s", gp_test_tmpfile(".plan"));
    CU_ASSERT_EQUAL(gp_test_write_file(path, "not a plan", 10), 0);
    o.plan = path;
    o.random_weights = 1;
    CU_ASSERT_PTR_NULL(gp_lm_load(NULL, &o, err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
    remove(path);

    /* A tokenizer larger than the plan's vocabulary. */
    o.plan = tiny_plan;
    o.tokenizer = tok_dir;
    CU_ASSERT_PTR_NULL(gp_lm_load(NULL, &o, err, sizeof err));
    CU_ASSERT_STRING_EQUAL(err, "the tokenizer has 384 tokens, more than the plan's vocabulary "
                                "of 256");
    /* A tokenizer path that is none. */
    o.plan = plan256;
    o.tokenizer = "/nonexistent/tokenizer.json";
    CU_ASSERT_PTR_NULL(gp_lm_load(NULL, &o, err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent/tokenizer.json"));
    o.tokenizer = tok_dir;
    o.context = -1;
    CU_ASSERT_PTR_NULL(gp_lm_load(NULL, &o, err, sizeof err));
    CU_ASSERT_STRING_EQUAL(err, "negative context, batch, define count, n_seq, kv_positions or "
                                "memory");
    gp_lm_free(NULL);
    gp_seq_free(NULL);

    /* The defaults: every field 0 but lora_scale, 1. */
    gp_lm_opts z = gp_lm_defaults(), zero;
    memset(&zero, 0, sizeof zero);
    CU_ASSERT_EQUAL(z.lora_scale, 1.0);
    zero.lora_scale = 1;
    CU_ASSERT_EQUAL(memcmp(&z, &zero, sizeof z), 0);
}

static void test_plan_model(void)
{
    gp_lm *lm = load_plan(plan256, 4, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_STRING_EQUAL(gp_lm_plan_path(lm), plan256);
    CU_ASSERT_STRING_EQUAL(gp_lm_arch(lm), "");
    CU_ASSERT_EQUAL(gp_lm_context(lm), 256);
    CU_ASSERT_EQUAL(gp_lm_vocab(lm), 384);
    CU_ASSERT_EQUAL(gp_lm_has_tokenizer(lm), 1);
    CU_ASSERT_EQUAL(gp_lm_has_chat(lm), 1);
    CU_ASSERT_PTR_NOT_NULL(gp_lm_model(lm));
    /* generation_config.json's end ids: <|endoftext|> and <|im_end|>. */
    CU_ASSERT_EQUAL(gp_lm_is_eog(lm, 0), 1);
    CU_ASSERT_EQUAL(gp_lm_is_eog(lm, 2), 1);
    CU_ASSERT_EQUAL(gp_lm_is_eog(lm, 1), 0);
    CU_ASSERT_EQUAL(gp_lm_is_eog(lm, 100), 0);
    gp_lm_free(lm);
    lm = load_plan(plan256, 4, "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_EQUAL(gp_lm_has_tokenizer(lm), 0);
    CU_ASSERT_EQUAL(gp_lm_has_chat(lm), 0);
    CU_ASSERT_EQUAL(gp_lm_is_eog(lm, 0), 0);
    gp_lm_free(lm);
}

/* The plan files in dir/plans (dot files, the temporaries, included). */
static int count_plans(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/plans", dir);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* The options of the GGUF tests: the tokenizer folder, random weights of seed 4, 2 threads. */
static gp_lm_opts gguf_opts(const char *cache, int64_t context)
{
    gp_lm_opts o = gp_lm_defaults();
    o.cache_dir = cache;
    o.context = context;
    o.tokenizer = tok_dir;
    o.random_weights = 1;
    o.random_seed = 4;
    o.n_threads = 2;
    return o;
}

static gp_lm *load_gguf(const char *path, const char *cache, const char *const *defs, int n,
                        int64_t context)
{
    gp_lm_opts o = gguf_opts(cache, context);
    o.defines = defs;
    o.n_defines = n;
    char err[1024];
    gp_lm *lm = gp_lm_load(path, &o, err, sizeof err);
    if (!lm)
        fprintf(stderr, "\n  %s: %s\n", path, err);
    return lm;
}

/* Greedy text of 8 tokens from "Hello, how are you?" into out. */
static void greedy8(gp_lm *lm, char *out, size_t cap)
{
    out[0] = '\0';
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    gp_gen_opts g = gp_gen_defaults();
    g.max_tokens = 8;
    g.ignore_eos = 1;
    gp_gen_result r;
    CU_ASSERT_EQUAL(gp_seq_generate(s, "Hello, how are you?", &g, &r), 0);
    CU_ASSERT_EQUAL(r.completion_tokens, 8);
    snprintf(out, cap, "%s", gp_seq_text(s, NULL));
    gp_seq_free(s);
}

/* A file's inode number (a rewrite by rename gives another), -1 when it is missing. */
static int64_t inode_of(const char *path)
{
    struct stat st;
    return stat(path, &st) ? -1 : (int64_t)st.st_ino;
}

/* The cache keeps 32 plans: writing one more removes the least recently used (modification
 * times, which a load refreshes), never the new one; other files stay. */
static void test_plan_cache_trim(void)
{
    char gguf[4096], cache[4096], path[4300];
    snprintf(gguf, sizeof gguf, "%s", gp_test_tmpfile(".gguf"));
    snprintf(cache, sizeof cache, "%s", gp_test_tmpfile(".cache"));
    CU_ASSERT_EQUAL_FATAL(write_gguf(gguf, "gpt2", 1024), 0);
    gp_lm *lm = load_gguf(gguf, cache, NULL, 0, 64); /* makes cache/plans */
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    char used[4300];
    snprintf(used, sizeof used, "%s", gp_lm_plan_path(lm));
    gp_lm_free(lm);
    /* 40 older plans, aged 1000 + i seconds, and one file that is no plan */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (int i = 0; i < 40; i++) {
        snprintf(path, sizeof path, "%s/plans/old-%02d.plan", cache, i);
        FILE *f = fopen(path, "wb");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fclose(f);
        struct timespec t[2] = {{now.tv_sec - 1000 - i, 0}, {now.tv_sec - 1000 - i, 0}};
        CU_ASSERT_EQUAL(utimensat(AT_FDCWD, path, t, 0), 0);
    }
    snprintf(path, sizeof path, "%s/plans/notes.txt", cache);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fclose(f);
    /* the first plan, aged past them all, then loaded: used now, so kept */
    struct timespec t[2] = {{now.tv_sec - 5000, 0}, {now.tv_sec - 5000, 0}};
    CU_ASSERT_EQUAL(utimensat(AT_FDCWD, used, t, 0), 0);
    lm = load_gguf(gguf, cache, NULL, 0, 64);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_STRING_EQUAL(gp_lm_plan_path(lm), used);
    gp_lm_free(lm);
    CU_ASSERT_EQUAL(count_plans(cache), 42); /* nothing written, nothing removed */
    lm = load_gguf(gguf, cache, NULL, 0, 65); /* a new plan: 42 plans become 32 */
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    struct stat st;
    CU_ASSERT_EQUAL(stat(gp_lm_plan_path(lm), &st), 0);
    gp_lm_free(lm);
    CU_ASSERT_EQUAL(count_plans(cache), 32 + 1); /* and notes.txt */
    CU_ASSERT_EQUAL(stat(used, &st), 0);
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    int kept = 0;
    for (int i = 0; i < 40; i++) { /* the 30 youngest of them stay */
        char p[4300];
        snprintf(p, sizeof p, "%s/plans/old-%02d.plan", cache, i);
        int here = stat(p, &st) == 0;
        kept += here;
        CU_ASSERT_EQUAL(here, i < 30);
    }
    CU_ASSERT_EQUAL(kept, 30);
}

/* The bytes on its device of lm's plan (gp_plan_memory.total), read from its cached file. */
static int64_t plan_bytes(const gp_lm *lm)
{
    gp_plan *p;
    char err[256];
    if (gp_plan_load(gp_lm_plan_path(lm), &p, err, sizeof err))
        return -1;
    gp_plan_memory m;
    gp_plan_memory_of(p, &m);
    gp_plan_free(p);
    return m.total;
}

static gp_lm *load_budget(const char *gguf, const char *cache, int64_t context, int64_t memory,
                          char *err, size_t err_len)
{
    gp_lm_opts o = gguf_opts(cache, context);
    o.memory = memory;
    err[0] = '\0';
    return gp_lm_load(gguf, &o, err, err_len);
}

/* A memory budget: with no context given, the largest context whose plan fits (one more does
 * not), cached under the budget; a given context over it, or a budget below one position,
 * refused with the figures; a plan file with a budget refused. */
static void test_memory_budget(void)
{
    char gguf[4096], cache[4096], err[1024];
    snprintf(gguf, sizeof gguf, "%s", gp_test_tmpfile(".gguf"));
    snprintf(cache, sizeof cache, "%s", gp_test_tmpfile(".cache"));
    CU_ASSERT_EQUAL_FATAL(write_gguf(gguf, "gpt2", 1024), 0);
    gp_lm *lm = load_budget(gguf, cache, 0, 0, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_EQUAL(gp_lm_context(lm), 1024);
    int64_t full = plan_bytes(lm);
    gp_lm_free(lm);
    lm = load_budget(gguf, cache, 100, 0, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    int64_t at100 = plan_bytes(lm);
    gp_lm_free(lm);
    CU_ASSERT(at100 > 0 && at100 < full);

    lm = load_budget(gguf, cache, 0, at100, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    int64_t ctx = gp_lm_context(lm);
    CU_ASSERT(ctx >= 100 && ctx < 1024);
    CU_ASSERT(plan_bytes(lm) <= at100);
    gp_lm_free(lm);
    lm = load_budget(gguf, cache, ctx, at100, err, sizeof err); /* the answer, given, fits */
    CU_ASSERT_PTR_NOT_NULL(lm);
    gp_lm_free(lm);
    lm = load_budget(gguf, cache, ctx + 1, at100, err, sizeof err); /* one more does not */
    CU_ASSERT_PTR_NULL(lm);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "over the budget of"));
    char want[64];
    snprintf(want, sizeof want, "a context of %lld positions needs", (long long)(ctx + 1));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    gp_lm_free(lm);

    lm = load_budget(gguf, cache, 0, 1000, err, sizeof err);
    CU_ASSERT_PTR_NULL(lm);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "a context of 1 positions needs"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "weights "));
    gp_lm_free(lm);
    lm = load_budget(gguf, cache, 0, -1, err, sizeof err);
    CU_ASSERT_PTR_NULL(lm);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "negative"));

    gp_lm_opts o = gp_lm_defaults();
    o.plan = gguf; /* any path: refused before it is read */
    o.memory = at100;
    o.random_weights = 1;
    CU_ASSERT_PTR_NULL(gp_lm_load(NULL, &o, err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "fixed by gplan-compile"));
}

static void test_gguf_plan_cache(void)
{
    char gguf[4096], cache[4096], first[4096], want[256], got[256];
    snprintf(gguf, sizeof gguf, "%s", gp_test_tmpfile(".gguf"));
    snprintf(cache, sizeof cache, "%s", gp_test_tmpfile(".cache"));
    CU_ASSERT_EQUAL_FATAL(write_gguf(gguf, "gpt2", 8192), 0);

    /* The first load plans and writes the plan under cache/plans. */
    gp_lm *lm = load_gguf(gguf, cache, NULL, 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    snprintf(first, sizeof first, "%s", gp_lm_plan_path(lm));
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/plans/gpt2-", cache);
    CU_ASSERT_EQUAL(strncmp(first, prefix, strlen(prefix)), 0);
    CU_ASSERT(strlen(first) > 5 && !strcmp(first + strlen(first) - 5, ".plan"));
    CU_ASSERT_EQUAL(count_plans(cache), 1);
    int64_t ino = inode_of(first);
    CU_ASSERT(ino > 0);
    CU_ASSERT_STRING_EQUAL(gp_lm_arch(lm), "gpt2");
    CU_ASSERT_EQUAL(gp_lm_context(lm), 4096); /* the file's 8192, capped */
    CU_ASSERT_EQUAL(gp_lm_vocab(lm), 384);
    gp_model_info info;
    gp_model_get_info(gp_lm_model(lm), &info);
    CU_ASSERT_EQUAL(info.max_rows, 1); /* one logits row unless asked */
    greedy8(lm, want, sizeof want);
    CU_ASSERT(strlen(want) > 0);
    /* gpt2 has no chat format and the tokenizer's template is used. */
    CU_ASSERT_EQUAL(gp_lm_has_chat(lm), 1);
    gp_lm_free(lm);

    /* The second load reads that plan: same path, the file not rewritten, the same text. */
    lm = load_gguf(gguf, cache, NULL, 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_STRING_EQUAL(gp_lm_plan_path(lm), first);
    CU_ASSERT_EQUAL(inode_of(first), ino);
    CU_ASSERT_EQUAL(count_plans(cache), 1);
    greedy8(lm, got, sizeof got);
    CU_ASSERT_STRING_EQUAL(got, want);
    gp_lm_free(lm);

    /* A define, the context or the batch: another plan. */
    static const char *const batch16[] = {"n_batch=16"};
    lm = load_gguf(gguf, cache, batch16, 1, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_STRING_NOT_EQUAL(gp_lm_plan_path(lm), first);
    CU_ASSERT_EQUAL(count_plans(cache), 2);
    gp_model_get_info(gp_lm_model(lm), &info);
    CU_ASSERT_EQUAL(info.max_tokens, 16);
    CU_ASSERT_EQUAL(gp_lm_context(lm), 4096);
    gp_lm_free(lm);
    lm = load_gguf(gguf, cache, NULL, 0, 100);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_EQUAL(gp_lm_context(lm), 100);
    CU_ASSERT_STRING_NOT_EQUAL(gp_lm_plan_path(lm), first);
    CU_ASSERT_EQUAL(count_plans(cache), 3);
    gp_lm_free(lm);
    /* A define of the context wins over the cap. */
    static const char *const ctx_def[] = {"n_positions=5000"};
    lm = load_gguf(gguf, cache, ctx_def, 1, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_EQUAL(gp_lm_context(lm), 5000);
    gp_lm_free(lm);

    /* A damaged cached plan is planned again. */
    CU_ASSERT_EQUAL(truncate(first, 100), 0);
    lm = load_gguf(gguf, cache, NULL, 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_STRING_EQUAL(gp_lm_plan_path(lm), first);
    struct stat st;
    CU_ASSERT(stat(first, &st) == 0 && st.st_size > 100);
    greedy8(lm, got, sizeof got);
    CU_ASSERT_STRING_EQUAL(got, want);
    gp_lm_free(lm);

    /* The model file's modification time is part of the key. */
    struct timespec times[2] = {{1000000, 0}, {1000000, 0}};
    CU_ASSERT_EQUAL(utimensat(AT_FDCWD, gguf, times, 0), 0);
    lm = load_gguf(gguf, cache, NULL, 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_STRING_NOT_EQUAL(gp_lm_plan_path(lm), first);
    gp_lm_free(lm);

    /* No cache: the plan stays in memory, and works the same. */
    int before = count_plans(cache);
    lm = load_gguf(gguf, "", NULL, 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_STRING_EQUAL(gp_lm_plan_path(lm), "");
    CU_ASSERT_EQUAL(count_plans(cache), before);
    greedy8(lm, got, sizeof got);
    CU_ASSERT_STRING_EQUAL(got, want);
    gp_lm_free(lm);

    /* A file whose context is under the cap keeps it. */
    CU_ASSERT_EQUAL_FATAL(write_gguf(gguf, "gpt2", 128), 0);
    lm = load_gguf(gguf, "", NULL, 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_EQUAL(gp_lm_context(lm), 128);
    gp_lm_free(lm);
    remove(gguf);
}

/* A Hugging Face folder: config.json, model.safetensors and a tokenizer beside them. */
static void test_hf_folder(void)
{
    char err[1024];
    gp_lm_opts o = gp_lm_defaults();
    o.cache_dir = "";
    o.tokenizer = tok_dir;
    o.n_threads = 2;
    gp_lm *lm = gp_lm_load(gp_test_path("tests/parity/gpt2"), &o, err, sizeof err);
    if (!lm)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_STRING_EQUAL(gp_lm_arch(lm), "gpt2");
    CU_ASSERT_EQUAL(gp_lm_context(lm), 64);
    CU_ASSERT_EQUAL(gp_lm_vocab(lm), 384);
    gp_model_info info;
    gp_model_get_info(gp_lm_model(lm), &info);
    CU_ASSERT(info.weights_loaded + info.weights_mapped > 0); /* the checkpoint's, bound */
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    gp_gen_result r;
    CU_ASSERT_EQUAL(gp_seq_generate(s, "Hello", NULL, &r), 0);
    CU_ASSERT(r.completion_tokens > 0);
    gp_seq_free(s);
    gp_lm_free(lm);
}

/* The parity GPT-2 with one weight NaN: every logit is NaN, and generating stops with an error
 * naming the eval, never picking an id. */
static void test_non_finite_logits(void)
{
    char err[1024], dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s", gp_test_tmpfile(".nan"));
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    gp_st_file *f = gp_st_open(gp_test_path("tests/parity/gpt2/model.safetensors"), err,
                               sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    int n = gp_st_count(f);
    gp_st_tensor *t = calloc((size_t)n, sizeof *t);
    float *ln = NULL;
    for (int i = 0; t && i < n; i++) {
        t[i] = *gp_st_get(f, i);
        if (!strcmp(t[i].name, "transformer.ln_f.bias") && (ln = malloc(t[i].nbytes))) {
            memcpy(ln, t[i].data, t[i].nbytes);
            ln[3] = NAN;
            t[i].data = ln;
        }
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(ln);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL(gp_st_write(path, t, n, NULL, err, sizeof err), 0);
    size_t len;
    char *cfg = gp_test_read_file(gp_test_path("tests/parity/gpt2/config.json"), &len);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CU_ASSERT_EQUAL(cfg ? gp_test_write_file(path, cfg, len) : -1, 0);
    free(cfg);
    free(ln);
    free(t);
    gp_st_close(f);

    gp_lm_opts o = gp_lm_defaults();
    o.cache_dir = "";
    o.tokenizer = tok_dir;
    gp_lm *lm = gp_lm_load(dir, &o, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    sink k = {0};
    gp_gen_opts g = gen_opts(&k, 8, 1);
    CU_ASSERT_EQUAL(gp_seq_start_text(s, "Hello", 5, 0, &g), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_seq_error(s), "eval 1 (prompt, 0 tokens generated): logit 0 "
                                                   "is nan"));
    CU_ASSERT_EQUAL(k.n_ids, 0);
    gp_seq_free(s);
    gp_lm_free(lm);
}

/* An embedding of 400 rows with a 384-token vocabulary: the 16 ids the tokenizer cannot print are
 * never sampled, even at a temperature that makes every id likely. */
static void test_padded_vocab(void)
{
    static const char *const pad[] = {"n_layer=2", "n_embd=64", "n_head=4", "vocab_size=400",
                                      "n_batch=16", "n_positions=256"};
    char plan[4096];
    CU_ASSERT_EQUAL_FATAL(compile_plan("examples/gpt2.gplan", pad, 6, plan, sizeof plan), 0);
    gp_lm *lm = load_plan(plan, 3, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_EQUAL(gp_lm_vocab(lm), 400);
    CU_ASSERT_EQUAL(gp_lm_tokenizer_vocab(lm), 384);
    CU_ASSERT_STRING_EQUAL(gp_lm_note(lm), "the tokenizer has 384 ids, the embedding 400 rows: the "
                           "ids past the tokenizer's are never sampled");
    for (int greedy = 0; greedy < 2; greedy++) {
        gp_sampler_opts so = gp_sampler_defaults();
        so.temp = greedy ? 0.0 : 50.0;
        gp_seq *s = new_seq(lm, &so);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s);
        sink k = {0};
        gp_gen_opts g = gen_opts(&k, 200, 1);
        CU_ASSERT_EQUAL(gp_seq_start_text(s, "Hello", 5, 0, &g), 0);
        CU_ASSERT_EQUAL(run_steps(s), GP_FINISH_LENGTH);
        CU_ASSERT_EQUAL(k.n_ids, 200);
        int over = 0, spread = 0;
        for (int i = 0; i < k.n_ids; i++) {
            over += k.ids[i] >= 384;
            spread += k.ids[i] >= 300; /* the hot sampler reaches the top of the vocabulary */
        }
        CU_ASSERT_EQUAL(over, 0);
        if (!greedy)
            CU_ASSERT(spread > 10);
        gp_seq_free(s);
    }
    gp_lm_free(lm);
}

/* ---- tokens ---- */

static void test_tokenize(void)
{
    gp_lm *lm = load_plan(plan256, 1, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    const char *text = "Hello, how are you? Gr\xc3\xbc\xc3\x9f" "e, \xe4\xb8\x96\xe7\x95\x8c "
                       "\xf0\x9f\x99\x82";
    int32_t ids[256];
    char out[512], err[512];
    int64_t n = tokenize(lm, text, ids, 256);
    CU_ASSERT(n > 5 && n < 256);
    CU_ASSERT_EQUAL(gp_lm_detokenize(lm, ids, n, out, sizeof out), (int64_t)strlen(text));
    CU_ASSERT_STRING_EQUAL(out, text);

    /* Special tokens' texts are their ids. */
    CU_ASSERT_EQUAL(tokenize(lm, "<|im_start|>user<|im_end|>", ids, 256), 5); /* u se r */
    CU_ASSERT_EQUAL(ids[0], 1);
    CU_ASSERT_EQUAL(ids[4], 2);
    CU_ASSERT_EQUAL(gp_lm_detokenize(lm, ids, 5, out, sizeof out), 26);
    CU_ASSERT_STRING_EQUAL(out, "<|im_start|>user<|im_end|>");

    /* More ids than cap: the count, and nothing written past cap. */
    int32_t few[8];
    for (int i = 0; i < 8; i++)
        few[i] = -7;
    CU_ASSERT_EQUAL(gp_lm_tokenize(lm, text, strlen(text), 0, few, 3, err, sizeof err), n);
    n = tokenize(lm, text, ids, 256);
    CU_ASSERT(few[0] == ids[0] && few[1] == ids[1] && few[2] == ids[2]);
    for (int i = 3; i < 8; i++)
        CU_ASSERT_EQUAL(few[i], -7);
    CU_ASSERT_EQUAL(gp_lm_tokenize(lm, text, strlen(text), 0, NULL, 0, err, sizeof err), n);
    /* The same for text: the length, a NUL-terminated prefix. */
    char small[6];
    memset(small, 'x', sizeof small);
    CU_ASSERT_EQUAL(gp_lm_detokenize(lm, ids, n, small, sizeof small), (int64_t)strlen(text));
    CU_ASSERT_EQUAL(memcmp(small, text, 5), 0);
    CU_ASSERT_EQUAL(small[5], '\0');
    CU_ASSERT_EQUAL(gp_lm_detokenize(lm, ids, n, NULL, 0), (int64_t)strlen(text));

    /* Errors: invalid UTF-8, an id outside the vocabulary. */
    CU_ASSERT_EQUAL(gp_lm_tokenize(lm, "ab\xff" "cd", 5, 0, ids, 256, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "invalid UTF-8 at byte 2");
    int32_t bad[2] = {5, 384};
    CU_ASSERT_EQUAL(gp_lm_detokenize(lm, bad, 2, out, sizeof out), -1);
    CU_ASSERT_EQUAL(gp_lm_detokenize(lm, bad, 1, out, sizeof out), 1);

    /* This vocabulary adds nothing; one whose config says so adds BOS and EOS. */
    int64_t plain = tokenize(lm, "Hello", ids, 256);
    CU_ASSERT_EQUAL(gp_lm_tokenize(lm, "Hello", 5, 1, ids, 256, err, sizeof err), plain);
    gp_lm_free(lm);
    lm = load_plan(plan256, 1, with_bos);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_EQUAL(tokenize(lm, "Hello", ids, 256), plain);
    CU_ASSERT_EQUAL(gp_lm_tokenize(lm, "Hello", 5, 1, ids, 256, err, sizeof err), plain + 2);
    CU_ASSERT_EQUAL(ids[0], 0);
    CU_ASSERT_EQUAL(ids[plain + 1], 2);
    gp_lm_free(lm);

    /* No tokenizer: ids only. */
    lm = load_plan(plan256, 1, "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    err[0] = '\0';
    CU_ASSERT_EQUAL(gp_lm_tokenize(lm, "Hello", 5, 0, ids, 256, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "no tokenizer"));
    CU_ASSERT_EQUAL(gp_lm_detokenize(lm, bad, 1, out, sizeof out), -1);
    gp_lm_free(lm);
}

static void test_utf8(void)
{
    CU_ASSERT_EQUAL(gp_utf8_invalid_at("abc", 3), -1);
    CU_ASSERT_EQUAL(gp_utf8_invalid_at("", 0), -1);
    CU_ASSERT_EQUAL(gp_utf8_invalid_at("\xf0\x9f\x99\x82 \xe4\xb8\x96", 8), -1);
    CU_ASSERT_EQUAL(gp_utf8_invalid_at("ab\xff", 3), 2);
    CU_ASSERT_EQUAL(gp_utf8_invalid_at("caf\xc3", 4), 3);          /* cut short */
    CU_ASSERT_EQUAL(gp_utf8_invalid_at("x\xc0\x80", 3), 1);        /* overlong */
    CU_ASSERT_EQUAL(gp_utf8_invalid_at("\xe0\x80\x80", 3), 0);     /* overlong */
    CU_ASSERT_EQUAL(gp_utf8_invalid_at("ok\xed\xa0\x80", 5), 2);   /* a surrogate */
    CU_ASSERT_EQUAL(gp_utf8_invalid_at("\xf4\x90\x80\x80", 4), 0); /* past U+10FFFF */
    CU_ASSERT_EQUAL(gp_utf8_invalid_at("\xf4\x8f\xbf\xbf", 4), -1);
    CU_ASSERT_EQUAL(gp_utf8_invalid_at("a\xc3(", 3), 1);           /* a bad continuation */
}

/* ---- generation ---- */

/* Greedy text is the text of the ids it picked, from text or from the same ids. */
static void test_greedy_is_its_ids(void)
{
    static const struct {
        uint64_t seed;
        const char *prompt;
    } cases[] = {{4, "Hello, how are you?"}, {7, "The quick brown fox"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gp_lm *lm = load_plan(plan256, cases[c].seed, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
        gp_seq *a = new_seq(lm, NULL), *b = new_seq(lm, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(a);
        CU_ASSERT_PTR_NOT_NULL_FATAL(b);
        int32_t ids[64];
        int64_t n = tokenize(lm, cases[c].prompt, ids, 64);
        sink ka, kb;
        gp_gen_opts ga = gen_opts(&ka, 24, 1), gb = gen_opts(&kb, 24, 1);
        CU_ASSERT_EQUAL(gp_seq_start(a, ids, n, 0, &ga), 0);
        /* Greedy: the first id is the argmax of the prompt's last row. */
        const float *l = gp_seq_logits(a);
        CU_ASSERT_PTR_NOT_NULL_FATAL(l);
        int32_t best = 0;
        for (int32_t i = 1; i < 384; i++)
            best = l[i] > l[best] ? i : best;
        CU_ASSERT_EQUAL(run_steps(a), GP_FINISH_LENGTH);
        CU_ASSERT_EQUAL(ka.ids[0], best);
        CU_ASSERT_PTR_NOT_NULL(gp_seq_session(a));
        gp_gen_result r;
        CU_ASSERT_EQUAL(gp_seq_generate(b, cases[c].prompt, &gb, &r), 0);
        CU_ASSERT_EQUAL(r.finish, GP_FINISH_LENGTH);
        CU_ASSERT_EQUAL(r.prompt_tokens, n);
        CU_ASSERT_EQUAL(r.completion_tokens, 24);
        CU_ASSERT_EQUAL(ka.n_ids, 24);
        CU_ASSERT_EQUAL(kb.n_ids, 24);
        CU_ASSERT_EQUAL(memcmp(ka.ids, kb.ids, sizeof ka.ids[0] * 24), 0);
        char want[2048];
        CU_ASSERT(gp_lm_detokenize(lm, ka.ids, ka.n_ids, want, sizeof want) > 0);
        size_t len;
        const char *got = gp_seq_text(b, &len);
        CU_ASSERT_STRING_EQUAL(got, want);
        CU_ASSERT_EQUAL(len, strlen(want));
        CU_ASSERT_STRING_EQUAL(kb.text, want); /* the streamed pieces */
        CU_ASSERT_STRING_EQUAL(gp_seq_text(a, NULL), want);
        /* The cache: the prompt and every generated id but the last. */
        CU_ASSERT_EQUAL(gp_seq_length(a), n + 23);
        CU_ASSERT_EQUAL(memcmp(gp_seq_tokens(a), ids, (size_t)n * sizeof ids[0]), 0);
        CU_ASSERT_EQUAL(memcmp(gp_seq_tokens(a) + n, ka.ids, 23 * sizeof ids[0]), 0);
        gp_seq_free(a);
        gp_seq_free(b);
        gp_lm_free(lm);
    }
}

static void test_counts(void)
{
    gp_lm *lm = load_plan(plan256, 1, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    sink k;
    gp_gen_opts g = gen_opts(&k, 5, 1);
    gp_gen_result r;
    CU_ASSERT_EQUAL(gp_seq_generate(s, "Hello", &g, &r), 0);
    CU_ASSERT_EQUAL(r.finish, GP_FINISH_LENGTH);
    CU_ASSERT_EQUAL(r.completion_tokens, 5);
    CU_ASSERT_EQUAL(r.prompt_evals, 1);
    CU_ASSERT_EQUAL(r.gen_evals, 4); /* the last token is not evaluated */
    CU_ASSERT_EQUAL(r.stop_token, -1);
    gp_gen_result again;
    gp_seq_result(s, &again);
    CU_ASSERT_EQUAL(memcmp(&again, &r, sizeof r), 0);
    CU_ASSERT_EQUAL(gp_seq_step(s), GP_FINISH_LENGTH); /* a finished sequence stays so */

    /* max_tokens 0: nothing. */
    g = gen_opts(&k, 0, 1);
    CU_ASSERT_EQUAL(gp_seq_generate(s, "Hello", &g, &r), 0);
    CU_ASSERT_EQUAL(r.finish, GP_FINISH_LENGTH);
    CU_ASSERT_EQUAL(r.completion_tokens, 0);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(s, NULL), "");
    CU_ASSERT_EQUAL(k.text_calls, 0);

    /* A prompt over the batch: evals of 16. */
    const char *lp = long_prompt();
    int32_t ids[256];
    int64_t n = tokenize(lm, lp, ids, 256);
    CU_ASSERT(n > 64);
    g = gen_opts(&k, 2, 1);
    gp_seq_reset(s);
    CU_ASSERT_EQUAL(gp_seq_length(s), 0);
    CU_ASSERT_EQUAL(gp_seq_generate(s, lp, &g, &r), 0);
    CU_ASSERT_EQUAL(r.prompt_tokens, n);
    CU_ASSERT_EQUAL(r.cached_tokens, 0);
    CU_ASSERT_EQUAL(r.prompt_evals, (n + 15) / 16);
    CU_ASSERT_EQUAL(r.prompt_rows, n);
    CU_ASSERT_EQUAL(r.gen_evals, 1);
    CU_ASSERT_EQUAL(r.completion_tokens, 2);

    /* Names and defaults. */
    CU_ASSERT_STRING_EQUAL(gp_finish_name(GP_FINISH_LENGTH), "length");
    CU_ASSERT_STRING_EQUAL(gp_finish_name(GP_FINISH_STOP), "stop");
    CU_ASSERT_STRING_EQUAL(gp_finish_name(GP_FINISH_CONTEXT), "context");
    CU_ASSERT_STRING_EQUAL(gp_finish_name(GP_FINISH_CANCEL), "cancel");
    CU_ASSERT_STRING_EQUAL(gp_finish_name(GP_FINISH_NONE), "");
    CU_ASSERT_STRING_EQUAL(gp_finish_name((gp_finish)99), "");
    gp_gen_opts d = gp_gen_defaults();
    CU_ASSERT(d.max_tokens == 16 && d.eos == -1 && d.n_stop == 0 && !d.on_text && !d.ignore_eos);
    gp_sampler_opts so = gp_sampler_defaults();
    CU_ASSERT(so.temp == 0 && so.top_k == 0 && so.top_p == 1 && so.min_p == 0 &&
              so.repeat_penalty == 1 && so.repeat_last_n == 64 && so.seed == 1);
    gp_seq_free(s);
    gp_lm_free(lm);
}

static void test_keep_prefix(void)
{
    gp_lm *lm = load_plan(plan256, 7, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_seq *s = new_seq(lm, NULL), *fresh = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fresh);
    int32_t p[256];
    int64_t n = tokenize(lm, "The quick brown fox", p, 128);
    sink k, kf;
    gp_gen_opts g = gen_opts(&k, 6, 1);
    CU_ASSERT_EQUAL(gp_seq_start(s, p, n, 1, &g), 0);
    CU_ASSERT_EQUAL(run_steps(s), GP_FINISH_LENGTH);
    int64_t held = gp_seq_length(s);
    CU_ASSERT_EQUAL(held, n + 5);

    /* The prompt, the reply and more: only what the cache lacks is evaluated. */
    memcpy(p + n, k.ids, 6 * sizeof p[0]);
    int64_t more = tokenize(lm, " jumps over the lazy dog and on and on", p + n + 6, 64);
    int64_t q = n + 6 + more;
    g = gen_opts(&k, 8, 1);
    CU_ASSERT_EQUAL(gp_seq_start(s, p, q, 1, &g), 0);
    gp_gen_result r;
    gp_seq_result(s, &r);
    CU_ASSERT_EQUAL(r.prompt_tokens, q);
    CU_ASSERT_EQUAL(r.cached_tokens, held);
    CU_ASSERT_EQUAL(r.prompt_rows, q - held);
    CU_ASSERT_EQUAL(r.prompt_evals, (q - held + 15) / 16);
    CU_ASSERT_EQUAL(gp_seq_length(s), q);
    CU_ASSERT_EQUAL(memcmp(gp_seq_tokens(s), p, (size_t)q * sizeof p[0]), 0);
    CU_ASSERT_EQUAL(run_steps(s), GP_FINISH_LENGTH);
    /* The same ids as a sequence that evaluates the whole prompt. */
    gp_gen_opts gf = gen_opts(&kf, 8, 1);
    CU_ASSERT_EQUAL(gp_seq_start(fresh, p, q, 0, &gf), 0);
    CU_ASSERT_EQUAL(run_steps(fresh), GP_FINISH_LENGTH);
    gp_seq_result(fresh, &r);
    CU_ASSERT_EQUAL(r.cached_tokens, 0);
    CU_ASSERT_EQUAL(r.prompt_rows, q);
    CU_ASSERT_EQUAL(k.n_ids, 8);
    CU_ASSERT_EQUAL(memcmp(k.ids, kf.ids, 8 * sizeof k.ids[0]), 0);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(s, NULL), gp_seq_text(fresh, NULL));

    /* The same prompt again: its last id is evaluated anew. */
    g = gen_opts(&k, 8, 1);
    CU_ASSERT_EQUAL(gp_seq_start(s, p, q, 1, &g), 0);
    gp_seq_result(s, &r);
    CU_ASSERT_EQUAL(r.cached_tokens, q - 1);
    CU_ASSERT_EQUAL(r.prompt_rows, 1);
    CU_ASSERT_EQUAL(run_steps(s), GP_FINISH_LENGTH);
    CU_ASSERT_EQUAL(memcmp(k.ids, kf.ids, 8 * sizeof k.ids[0]), 0);
    /* A prompt that parts from the cache at id 3: three kept. */
    int32_t other[8] = {p[0], p[1], p[2], (p[3] + 1) % 384, 5, 6};
    CU_ASSERT_EQUAL(gp_seq_start(s, other, 6, 1, &g), 0);
    gp_seq_result(s, &r);
    CU_ASSERT_EQUAL(r.cached_tokens, 3);
    CU_ASSERT_EQUAL(gp_seq_length(s), 6);
    /* keep_prefix 0 and a reset start over. */
    CU_ASSERT_EQUAL(gp_seq_start(s, other, 6, 0, &g), 0);
    gp_seq_result(s, &r);
    CU_ASSERT_EQUAL(r.cached_tokens, 0);
    gp_seq_reset(s);
    CU_ASSERT_EQUAL(gp_seq_start(s, other, 6, 1, &g), 0);
    gp_seq_result(s, &r);
    CU_ASSERT_EQUAL(r.cached_tokens, 0);
    gp_seq_free(s);
    gp_seq_free(fresh);
    gp_lm_free(lm);
}

/* gp_seq_text of a generation with stop strings, and its streamed pieces. */
static void gen_stop(gp_seq *s, const char *prompt, const char *const *stops, int n_stop,
                     sink *k, gp_gen_result *r)
{
    gp_gen_opts g = gen_opts(k, 24, 1);
    g.stop = stops;
    g.n_stop = n_stop;
    CU_ASSERT_EQUAL(gp_seq_generate(s, prompt, &g, r), 0);
    CU_ASSERT_STRING_EQUAL(k->text, gp_seq_text(s, NULL));
}

static void test_stop_strings(void)
{
    gp_lm *lm = load_plan(plan256, 7, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const char *prompt = "The quick brown fox";
    sink k;
    gp_gen_result r;
    gen_stop(s, prompt, NULL, 0, &k, &r);
    char full[4096];
    snprintf(full, sizeof full, "%s", gp_seq_text(s, NULL));
    CU_ASSERT_FATAL(strlen(full) > 8);
    int32_t ids[32];
    int n_ids = k.n_ids;
    memcpy(ids, k.ids, sizeof ids);

    /* Three characters from the middle: the text up to their first occurrence. */
    char stop[4], want[4096];
    memcpy(stop, full + 3, 3);
    stop[3] = '\0';
    const char *stops[2] = {stop, "no such text"};
    snprintf(want, sizeof want, "%.*s", (int)(strstr(full, stop) - full), full);
    gen_stop(s, prompt, stops, 1, &k, &r);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(s, NULL), want);
    CU_ASSERT_EQUAL(r.finish, GP_FINISH_STOP);
    CU_ASSERT_EQUAL(r.stop_token, -1);
    CU_ASSERT(r.completion_tokens < 24);
    /* Two stop strings, one absent; the absent one alone changes nothing. */
    gen_stop(s, prompt, stops, 2, &k, &r);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(s, NULL), want);
    gen_stop(s, prompt, stops + 1, 1, &k, &r);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(s, NULL), full);
    CU_ASSERT_EQUAL(r.finish, GP_FINISH_LENGTH);

    /* Where two tokens meet: the last byte of one and the first of the next (the first such
     * pair whose first occurrence is at that boundary). */
    char at[4096] = "";
    int found = 0;
    for (int i = 0; i + 1 < n_ids && !found; i++) {
        char a[64], b[64];
        int64_t la = gp_lm_detokenize(lm, ids, i + 1, at, sizeof at);
        int64_t n1 = gp_lm_detokenize(lm, ids + i, 1, a, sizeof a);
        int64_t n2 = gp_lm_detokenize(lm, ids + i + 1, 1, b, sizeof b);
        if (n1 < 1 || n2 < 1 || (a[n1 - 1] & 0x80) || (b[0] & 0x80))
            continue;
        stop[0] = a[n1 - 1];
        stop[1] = b[0];
        stop[2] = '\0';
        found = strstr(full, stop) == full + la - 1;
    }
    CU_ASSERT_FATAL(found);
    snprintf(want, sizeof want, "%.*s", (int)(strstr(full, stop) - full), full);
    gen_stop(s, prompt, stops, 1, &k, &r);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(s, NULL), want);
    CU_ASSERT_EQUAL(r.finish, GP_FINISH_STOP);
    /* A stop string over several tokens. */
    CU_ASSERT_FATAL(strlen(full) >= 14);
    char longer[16];
    snprintf(longer, sizeof longer, "%.12s", full + 2);
    stops[0] = longer;
    snprintf(want, sizeof want, "%.*s", (int)(strstr(full, longer) - full), full);
    gen_stop(s, prompt, stops, 1, &k, &r);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(s, NULL), want);
    CU_ASSERT_EQUAL(r.finish, GP_FINISH_STOP);

    /* Bad stop strings. */
    const char *many[17];
    for (int i = 0; i < 17; i++)
        many[i] = "x";
    gp_gen_opts g = gp_gen_defaults();
    g.stop = many;
    g.n_stop = 17;
    CU_ASSERT_EQUAL(gp_seq_generate(s, prompt, &g, NULL), -1);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(s), "more than 16 stop strings");
    const char *empty[1] = {""};
    g.stop = empty;
    g.n_stop = 1;
    CU_ASSERT_EQUAL(gp_seq_generate(s, prompt, &g, NULL), -1);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(s), "a stop string is empty or longer than 256 bytes");
    g.n_stop = 0;
    CU_ASSERT_EQUAL(gp_seq_generate(s, prompt, &g, NULL), 0);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(s), "");
    gp_seq_free(s);
    gp_lm_free(lm);
}

static void test_end_of_generation(void)
{
    /* Seed 4 answers "Hello" with "llo", then <|im_end|>. */
    gp_lm *lm = load_plan(plan256, 4, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    sink k;
    gp_gen_opts g = gen_opts(&k, 16, 0);
    gp_gen_result r;
    CU_ASSERT_EQUAL(gp_seq_generate(s, "Hello", &g, &r), 0);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(s, NULL), "llo");
    CU_ASSERT_EQUAL(r.finish, GP_FINISH_STOP);
    CU_ASSERT_EQUAL(gp_lm_is_eog(lm, r.stop_token), 1);
    CU_ASSERT_EQUAL(r.completion_tokens, 1);
    CU_ASSERT_EQUAL(r.gen_evals, 1);
    CU_ASSERT_EQUAL(k.n_ids, 1); /* the end id is not emitted */
    int32_t stop_id = r.stop_token;
    g = gen_opts(&k, 16, 1);
    CU_ASSERT_EQUAL(gp_seq_generate(s, "Hello", &g, &r), 0);
    CU_ASSERT_EQUAL(r.finish, GP_FINISH_LENGTH);
    CU_ASSERT_EQUAL(r.completion_tokens, 16);
    CU_ASSERT_EQUAL(r.stop_token, -1);
    CU_ASSERT_EQUAL(k.ids[1], stop_id);
    CU_ASSERT_EQUAL(strncmp(gp_seq_text(s, NULL), "llo", 3), 0);
    gp_seq_free(s);
    gp_lm_free(lm);

    /* eos: another id that ends generation (the third id seed 7 picks). */
    lm = load_plan(plan256, 7, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    g = gen_opts(&k, 24, 0);
    CU_ASSERT_EQUAL(gp_seq_generate(s, "The quick brown fox", &g, &r), 0);
    int32_t ids[32];
    memcpy(ids, k.ids, sizeof ids);
    int first = 0;
    while (ids[first] != ids[2])
        first++;
    char want[1024];
    CU_ASSERT(gp_lm_detokenize(lm, ids, first, want, sizeof want) >= 0);
    g = gen_opts(&k, 24, 0);
    g.eos = ids[2];
    CU_ASSERT_EQUAL(gp_seq_generate(s, "The quick brown fox", &g, &r), 0);
    CU_ASSERT_EQUAL(r.finish, GP_FINISH_STOP);
    CU_ASSERT_EQUAL(r.stop_token, ids[2]);
    CU_ASSERT_EQUAL(r.completion_tokens, first);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(s, NULL), want);
    gp_seq_free(s);
    gp_lm_free(lm);
}

static void test_context(void)
{
    gp_lm *lm = load_plan(plan64, 1, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_EQUAL(gp_lm_context(lm), 64);
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    int32_t ids[256];
    int64_t n = tokenize(lm, "Hello", ids, 256);
    sink k;
    for (int64_t max = -1; max <= 1000; max += 1001) {
        gp_gen_opts g = gen_opts(&k, max, 1);
        CU_ASSERT_EQUAL(gp_seq_start(s, ids, n, 0, &g), 0);
        CU_ASSERT_EQUAL(run_steps(s), GP_FINISH_CONTEXT);
        gp_gen_result r;
        gp_seq_result(s, &r);
        CU_ASSERT_EQUAL(r.finish, GP_FINISH_CONTEXT);
        CU_ASSERT_EQUAL(r.completion_tokens, 64 - n + 1); /* the last one is not evaluated */
        CU_ASSERT_EQUAL(gp_seq_length(s), 64);
        CU_ASSERT_EQUAL(k.n_ids, 64 - n + 1);
    }

    /* A prompt longer than the context: refused with the numbers, the sequence unchanged. */
    gp_gen_opts g = gen_opts(&k, 4, 1);
    CU_ASSERT_EQUAL(gp_seq_start(s, ids, n, 0, &g), 0);
    CU_ASSERT_EQUAL(run_steps(s), GP_FINISH_LENGTH);
    int64_t held = gp_seq_length(s);
    int32_t before[64];
    memcpy(before, gp_seq_tokens(s), (size_t)held * sizeof before[0]);
    const char *lp = long_prompt();
    int64_t n_long = tokenize(lm, lp, ids, 256);
    CU_ASSERT_FATAL(n_long > 64 && n_long <= 256);
    char want[256];
    snprintf(want, sizeof want, "the prompt has %lld tokens, more than the planned context of 64 "
             "positions",
             (long long)n_long);
    CU_ASSERT_EQUAL(gp_seq_start(s, ids, n_long, 1, &g), GP_SEQ_TOO_LONG);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(s), want);
    gp_gen_result r;
    gp_seq_result(s, &r);
    CU_ASSERT_EQUAL(r.prompt_tokens, n_long);
    CU_ASSERT_EQUAL(gp_seq_length(s), held);
    CU_ASSERT_EQUAL(memcmp(gp_seq_tokens(s), before, (size_t)held * sizeof before[0]), 0);
    CU_ASSERT_EQUAL(gp_seq_start_text(s, lp, strlen(lp), 1, &g), GP_SEQ_TOO_LONG);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(s), want);
    CU_ASSERT_EQUAL(gp_seq_length(s), held);
    CU_ASSERT_EQUAL(gp_seq_generate(s, lp, &g, &r), GP_SEQ_TOO_LONG);
    CU_ASSERT_EQUAL(r.prompt_tokens, n_long);
    CU_ASSERT_EQUAL(gp_seq_length(s), held);
    /* Exactly the context fits. */
    CU_ASSERT_EQUAL(gp_seq_start(s, ids, 64, 0, &g), 0);
    CU_ASSERT_EQUAL(run_steps(s), GP_FINISH_CONTEXT);
    gp_seq_result(s, &r);
    CU_ASSERT_EQUAL(r.completion_tokens, 1);

    /* Other bad prompts. */
    CU_ASSERT_EQUAL(gp_seq_start(s, ids, 0, 0, &g), -1);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(s), "the prompt is empty (no tokens)");
    CU_ASSERT_EQUAL(gp_seq_start_text(s, "", 0, 0, &g), -1);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(s), "the prompt is empty (no tokens)");
    int32_t bad[2] = {5, 384};
    CU_ASSERT_EQUAL(gp_seq_start(s, bad, 2, 0, &g), -1);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(s), "prompt token 1 is 384, outside the vocabulary "
                                            "[0, 384)");
    CU_ASSERT_EQUAL(gp_seq_start_text(s, "a\xff", 2, 0, &g), -1);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(s), "invalid UTF-8 at byte 1");
    gp_seq_free(s);
    s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(gp_seq_step(s), -1);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(s), "no generation started");
    gp_seq_free(s);
    gp_lm_free(lm);
}

static void test_cancel(void)
{
    gp_lm *lm = load_plan(plan256, 4, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const char *prompt = "Hello, how are you?";
    sink k;
    gp_gen_result r;
    /* on_text returning nonzero: the step after that text's token stops. */
    gp_gen_opts g = gen_opts(&k, 24, 1);
    k.cancel_on_text = 1;
    CU_ASSERT_EQUAL(gp_seq_generate(s, prompt, &g, &r), 0);
    CU_ASSERT_EQUAL(r.finish, GP_FINISH_CANCEL);
    CU_ASSERT_EQUAL(k.text_calls, 1);
    CU_ASSERT(k.ids_at_first_text >= 1);
    CU_ASSERT_EQUAL(r.completion_tokens, k.ids_at_first_text);
    /* on_token: at the third id. */
    g = gen_opts(&k, 24, 1);
    k.cancel_at_id = 3;
    CU_ASSERT_EQUAL(gp_seq_generate(s, prompt, &g, &r), 0);
    CU_ASSERT_EQUAL(r.finish, GP_FINISH_CANCEL);
    CU_ASSERT_EQUAL(r.completion_tokens, 3);
    CU_ASSERT_EQUAL(k.n_ids, 3);
    /* gp_seq_cancel before a step; the next start runs again. */
    g = gen_opts(&k, 24, 1);
    CU_ASSERT_EQUAL(gp_seq_start_text(s, prompt, strlen(prompt), 0, &g), 0);
    gp_seq_cancel(s);
    CU_ASSERT_EQUAL(gp_seq_step(s), GP_FINISH_CANCEL);
    gp_seq_result(s, &r);
    CU_ASSERT_EQUAL(r.completion_tokens, 0);
    CU_ASSERT_EQUAL(gp_seq_generate(s, prompt, &g, &r), 0);
    CU_ASSERT_EQUAL(r.finish, GP_FINISH_LENGTH);
    gp_seq_free(s);
    gp_lm_free(lm);
}

/* 16 ids sampled with so from "Hello" on s, into ids. */
static void sample16(gp_seq *s, int32_t *ids)
{
    sink k;
    gp_gen_opts g = gen_opts(&k, 16, 1);
    gp_gen_result r;
    CU_ASSERT_EQUAL(gp_seq_generate(s, "Hello", &g, &r), 0);
    CU_ASSERT_EQUAL(k.n_ids, 16);
    memcpy(ids, k.ids, 16 * sizeof ids[0]);
}

static void test_sampling(void)
{
    gp_lm *lm = load_plan(plan256, 3, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_sampler_opts so = gp_sampler_defaults();
    so.temp = 0.9;
    so.top_p = 0.95;
    so.min_p = 0.01;
    so.repeat_penalty = 1.3;
    so.repeat_last_n = 8;
    so.seed = 11;
    gp_seq *a = new_seq(lm, &so), *b = new_seq(lm, &so), *greedy = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(greedy);
    int32_t ia[16], ib[16], ig[16], ic[16];
    sample16(a, ia);
    sample16(b, ib);
    sample16(greedy, ig);
    CU_ASSERT_EQUAL(memcmp(ia, ib, sizeof ia), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(ia, ig, sizeof ia), 0);
    /* The same sequence again: the same draws (the sampler restarts at each start). */
    sample16(a, ic);
    CU_ASSERT_EQUAL(memcmp(ia, ic, sizeof ia), 0);
    /* Another seed, other draws. */
    so.seed = 12;
    CU_ASSERT_EQUAL(gp_seq_set_sampler(b, &so), 0);
    sample16(b, ib);
    CU_ASSERT_NOT_EQUAL(memcmp(ia, ib, sizeof ia), 0);
    so.seed = 11;
    CU_ASSERT_EQUAL(gp_seq_set_sampler(b, &so), 0);
    sample16(b, ib);
    CU_ASSERT_EQUAL(memcmp(ia, ib, sizeof ia), 0);
    /* top-k 1 at any temperature is greedy. */
    gp_sampler_opts k1 = gp_sampler_defaults();
    k1.temp = 1.5;
    k1.top_k = 1;
    k1.seed = 4;
    CU_ASSERT_EQUAL(gp_seq_set_sampler(b, &k1), 0);
    sample16(b, ib);
    CU_ASSERT_EQUAL(memcmp(ig, ib, sizeof ig), 0);

    /* Bad options: refused, the old sampler kept. */
    char err[512] = "";
    gp_sampler_opts bad = gp_sampler_defaults();
    bad.top_p = 0;
    CU_ASSERT_PTR_NULL(gp_seq_new(lm, &bad, err, sizeof err));
    CU_ASSERT_STRING_EQUAL(err, "sampler: top-p must be in (0, 1]");
    bad = gp_sampler_defaults();
    bad.temp = -1;
    CU_ASSERT_EQUAL(gp_seq_set_sampler(greedy, &bad), -1);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(greedy), "sampler: temperature must be a number >= 0");
    bad = gp_sampler_defaults();
    bad.repeat_penalty = 0;
    CU_ASSERT_EQUAL(gp_seq_set_sampler(greedy, &bad), -1);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(greedy), "sampler: repeat penalty must be a number > 0");
    bad = gp_sampler_defaults();
    bad.top_k = -1;
    CU_ASSERT_EQUAL(gp_seq_set_sampler(greedy, &bad), -1);
    bad = gp_sampler_defaults();
    bad.min_p = 2;
    CU_ASSERT_EQUAL(gp_seq_set_sampler(greedy, &bad), -1);
    sample16(greedy, ic);
    CU_ASSERT_EQUAL(memcmp(ig, ic, sizeof ig), 0);
    gp_seq_free(a);
    gp_seq_free(b);
    gp_seq_free(greedy);
    gp_lm_free(lm);
}

/* ---- chat ---- */

static void test_chat_apply(void)
{
    gp_lm *lm = load_plan(plan256, 4, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    char out[1024], err[512];
    /* The tokenizer's template: ChatML with its default system prompt. */
    const gp_msg hello[1] = {{"user", "Hello"}};
    const char *want = "<|im_start|>system\nYou are a tiny model<|im_end|>\n"
                       "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n";
    CU_ASSERT_EQUAL(gp_lm_chat_apply(lm, hello, 1, 1, out, sizeof out, err, sizeof err),
                    (int64_t)strlen(want));
    CU_ASSERT_STRING_EQUAL(out, want);
    const gp_msg sys[3] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}};
    const char *want3 = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                        "<|im_start|>assistant\nHello!<|im_end|>\n";
    CU_ASSERT_EQUAL(gp_lm_chat_apply(lm, sys, 3, 0, out, sizeof out, err, sizeof err),
                    (int64_t)strlen(want3));
    CU_ASSERT_STRING_EQUAL(out, want3);
    /* A short buffer: the length, a NUL-terminated prefix. */
    char small[8];
    CU_ASSERT_EQUAL(gp_lm_chat_apply(lm, sys, 3, 0, small, sizeof small, err, sizeof err),
                    (int64_t)strlen(want3));
    CU_ASSERT_EQUAL(memcmp(small, want3, 7), 0);
    CU_ASSERT_EQUAL(small[7], '\0');
    const gp_msg none[1] = {{"user", NULL}};
    CU_ASSERT_EQUAL(gp_lm_chat_apply(lm, none, 1, 1, out, sizeof out, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "message 0: no role or content");
    /* Llama 3's format over the template. */
    CU_ASSERT_EQUAL(gp_lm_set_chat_format(lm, "llama3", err, sizeof err), 0);
    CU_ASSERT(gp_lm_chat_apply(lm, hello, 1, 1, out, sizeof out, err, sizeof err) > 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "<|start_header_id|>user<|end_header_id|>\n\nHello"
                                       "<|eot_id|>"));
    CU_ASSERT_EQUAL(gp_lm_set_chat_format(lm, "vicuna", err, sizeof err), -1);
    char names[512];
    snprintf(names, sizeof names, "unknown chat format: vicuna (formats: %s)",
             gp_lm_chat_formats());
    CU_ASSERT_STRING_EQUAL(err, names);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_lm_chat_formats(), "chatml"));
    gp_lm_free(lm);

    /* A tokenizer without a template (and a plan: no family's format): refused until a format
     * is chosen. */
    lm = load_plan(plan256, 4, no_tmpl);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_EQUAL(gp_lm_has_chat(lm), 0);
    CU_ASSERT_EQUAL(gp_lm_chat_apply(lm, hello, 1, 1, out, sizeof out, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "the tokenizer has no chat template"));
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    gp_gen_result r;
    CU_ASSERT_EQUAL(gp_seq_chat(s, hello, 1, NULL, &r), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_seq_error(s), "the tokenizer has no chat template"));
    CU_ASSERT_EQUAL(gp_lm_set_chat_format(lm, "chatml", err, sizeof err), 0);
    CU_ASSERT_EQUAL(gp_lm_has_chat(lm), 1);
    const char *plain = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n";
    CU_ASSERT_EQUAL(gp_lm_chat_apply(lm, hello, 1, 1, out, sizeof out, err, sizeof err),
                    (int64_t)strlen(plain));
    CU_ASSERT_STRING_EQUAL(out, plain);
    CU_ASSERT_EQUAL(gp_seq_chat(s, hello, 1, NULL, &r), 0);
    CU_ASSERT(r.completion_tokens > 0);
    gp_seq_free(s);
    gp_lm_free(lm);
}

/* The tokens of a text with its special tokens. */
static int64_t count_of(const gp_lm *lm, const char *text)
{
    int32_t ids[512];
    return tokenize(lm, text, ids, 512);
}

static void test_chat_turns(void)
{
    gp_lm *lm = load_plan(plan256, 4, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_seq *s = new_seq(lm, NULL), *one = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(one);
    const char *turn1 = "<|im_start|>system\nYou are a tiny model<|im_end|>\n"
                        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n";
    const char *turn2 = "<|im_end|>\n<|im_start|>user\nHow are you?<|im_end|>\n"
                        "<|im_start|>assistant\n";
    sink k;
    gp_gen_opts g = gen_opts(&k, 6, 1);
    gp_gen_result r1, r2;
    gp_msg msgs[4] = {{"user", "Hello"}, {"assistant", ""}, {"user", "How are you?"}};
    CU_ASSERT_EQUAL(gp_seq_chat(s, msgs, 1, &g, &r1), 0);
    CU_ASSERT_EQUAL(r1.prompt_tokens, count_of(lm, turn1));
    CU_ASSERT_EQUAL(r1.cached_tokens, 0);
    CU_ASSERT_EQUAL(r1.completion_tokens, 6);
    CU_ASSERT_EQUAL(r1.gen_evals, 6); /* a chat evaluates its last token too */
    CU_ASSERT_EQUAL(gp_seq_length(s), r1.prompt_tokens + 6);
    char reply[1024];
    size_t len;
    snprintf(reply, sizeof reply, "%s", gp_seq_reply(s, &len));
    CU_ASSERT_EQUAL(len, strlen(reply));
    CU_ASSERT_STRING_EQUAL(reply, gp_seq_text(s, NULL));
    CU_ASSERT_STRING_EQUAL(k.text, reply);
    /* The reply is what one prompt of the same text gives. */
    gp_gen_opts g1 = gp_gen_defaults();
    g1.max_tokens = 6;
    g1.ignore_eos = 1;
    CU_ASSERT_EQUAL(gp_seq_generate(one, turn1, &g1, NULL), 0);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(one, NULL), reply);

    /* The second turn continues the cache: only its own tokens are evaluated. */
    msgs[1].content = reply;
    g = gen_opts(&k, 6, 1);
    CU_ASSERT_EQUAL(gp_seq_chat(s, msgs, 3, &g, &r2), 0);
    CU_ASSERT_EQUAL(r2.cached_tokens, r1.prompt_tokens + r1.completion_tokens);
    CU_ASSERT_EQUAL(r2.prompt_tokens - r2.cached_tokens, count_of(lm, turn2));
    CU_ASSERT_EQUAL(r2.prompt_rows, count_of(lm, turn2));
    CU_ASSERT_EQUAL(r2.completion_tokens, 6);

    /* A conversation that is not the cache's: kept up to the first id that differs. */
    gp_msg other[1] = {{"user", "Hello there"}};
    CU_ASSERT_EQUAL(gp_seq_chat(s, other, 1, &g, &r2), 0);
    CU_ASSERT(r2.cached_tokens > 0 && r2.cached_tokens < r1.prompt_tokens);
    gp_seq_free(s);
    gp_seq_free(one);
    gp_lm_free(lm);
}

/* A stop string ends a reply; the cache holds the reply up to the token that completed it, which
 * gp_seq_reply gives, so the next turn still continues the cache. */
static void test_chat_stop(void)
{
    gp_lm *lm = load_plan(plan256, 8, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    sink k;
    gp_gen_opts g = gen_opts(&k, 12, 1);
    const char *stops[1] = {"KK"};
    g.stop = stops;
    g.n_stop = 1;
    gp_msg msgs[3] = {{"user", "Hello"}, {"assistant", ""}, {"user", "How are you?"}};
    gp_gen_result r1, r2;
    CU_ASSERT_EQUAL(gp_seq_chat(s, msgs, 1, &g, &r1), 0);
    CU_ASSERT_EQUAL(r1.finish, GP_FINISH_STOP);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(s, NULL), "\n\n\n\n\n");
    CU_ASSERT_EQUAL(r1.completion_tokens, 7);
    char reply[1024];
    snprintf(reply, sizeof reply, "%s", gp_seq_reply(s, NULL));
    CU_ASSERT_EQUAL(strncmp(reply, "\n\n\n\n\n", 5), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(reply, "KK"));
    CU_ASSERT_EQUAL(gp_seq_length(s), r1.prompt_tokens + 7);
    msgs[1].content = reply;
    CU_ASSERT_EQUAL(gp_seq_chat(s, msgs, 3, &g, &r2), 0);
    CU_ASSERT_EQUAL(r2.cached_tokens, r1.prompt_tokens + 7);
    gp_seq_free(s);
    gp_lm_free(lm);
}

/* A plain start between two chat turns: the next turn must not take the cache for the chat's. */
static void test_chat_after_start(void)
{
    gp_lm *lm = load_plan(plan256, 4, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_seq *s = new_seq(lm, NULL), *ref = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    sink k;
    gp_gen_opts g = gen_opts(&k, 4, 1);
    gp_msg msgs[3] = {{"user", "Hello"}, {"assistant", ""}, {"user", "How are you?"}};
    gp_gen_result r, rr;
    CU_ASSERT_EQUAL(gp_seq_chat(s, msgs, 1, &g, &r), 0);
    CU_ASSERT_EQUAL(gp_seq_chat(ref, msgs, 1, &g, &rr), 0);
    char reply[1024];
    snprintf(reply, sizeof reply, "%s", gp_seq_reply(s, NULL));
    CU_ASSERT_STRING_EQUAL(reply, gp_seq_reply(ref, NULL));
    /* The cache's ids and a few more, kept, then generated from. */
    int32_t ids[256];
    int64_t n = gp_seq_length(s);
    memcpy(ids, gp_seq_tokens(s), (size_t)n * sizeof ids[0]);
    ids[n] = 300;
    ids[n + 1] = 301;
    CU_ASSERT_EQUAL(gp_seq_start(s, ids, n + 2, 1, &g), 0);
    CU_ASSERT_EQUAL(run_steps(s), GP_FINISH_LENGTH);
    msgs[1].content = reply;
    CU_ASSERT_EQUAL(gp_seq_chat(s, msgs, 3, &g, &r), 0);
    CU_ASSERT_EQUAL(gp_seq_chat(ref, msgs, 3, &g, &rr), 0);
    CU_ASSERT_EQUAL(r.prompt_tokens, rr.prompt_tokens);
    CU_ASSERT_EQUAL(gp_seq_length(s), gp_seq_length(ref));
    CU_ASSERT_EQUAL(memcmp(gp_seq_tokens(s), gp_seq_tokens(ref),
                           (size_t)gp_seq_length(ref) * sizeof ids[0]), 0);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(s, NULL), gp_seq_text(ref, NULL));
    gp_seq_free(s);
    gp_seq_free(ref);
    gp_lm_free(lm);
}

static void test_chat_too_long(void)
{
    gp_lm *lm = load_plan(plan64, 4, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    gp_msg msgs[1] = {{"user", long_prompt()}};
    char text[1024], err[256];
    CU_ASSERT(gp_lm_chat_apply(lm, msgs, 1, 1, text, sizeof text, err, sizeof err) > 0);
    int64_t n = count_of(lm, text);
    CU_ASSERT(n > 64);
    gp_gen_result r;
    CU_ASSERT_EQUAL(gp_seq_chat(s, msgs, 1, NULL, &r), GP_SEQ_TOO_LONG);
    char want[256];
    snprintf(want, sizeof want, "the conversation has %lld tokens, more than the planned context of "
             "64 positions (with a position for the reply)", (long long)n);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(s), want);
    CU_ASSERT_EQUAL(r.prompt_tokens, n);
    CU_ASSERT_EQUAL(gp_seq_length(s), 0);
    gp_seq_free(s);
    gp_lm_free(lm);
}

/* ---- allocation, hooks ---- */

static int quiet_text(void *user, const char *p, size_t n)
{
    size_t *total = user;
    (void)p;
    *total += n;
    return 0;
}

/* Steps after a start allocate nothing: sampling, stop strings, streaming, chat. */
static void test_steps_no_alloc(void)
{
    gp_lm *lm = load_plan(plan256, 3, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_sampler_opts so = gp_sampler_defaults();
    so.temp = 0.8;
    so.top_k = 20;
    so.top_p = 0.9;
    so.repeat_penalty = 1.1;
    gp_seq *s = new_seq(lm, &so);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    size_t total = 0;
    const char *stops[2] = {"zzz", "qq"};
    gp_gen_opts g = gp_gen_defaults();
    g.max_tokens = 40;
    g.ignore_eos = 1;
    g.stop = stops;
    g.n_stop = 2;
    g.on_text = quiet_text;
    g.user = &total;
    for (int chat = 0; chat < 2; chat++) {
        const gp_msg m[1] = {{"user", "Hello"}};
        CU_ASSERT_EQUAL(chat ? gp_seq_start_chat(s, m, 1, &g)
                             : gp_seq_start_text(s, "Hello", 5, 0, &g), 0);
        int steps = 0, rc;
        gp_alloc_count_start();
        while ((rc = gp_seq_step(s)) == GP_FINISH_NONE)
            steps++;
        int64_t allocs = gp_alloc_count_stop();
        CU_ASSERT_EQUAL(allocs, 0);
        CU_ASSERT(rc > 0);
        CU_ASSERT(steps > 10);
    }
    CU_ASSERT(total > 0);
    gp_seq_free(s);
    gp_lm_free(lm);
}

/* ---- batches ---- */

static gp_lm *load_folder(const char *rel, int n_seq, int64_t kv_positions)
{
    char err[1024];
    gp_lm_opts o = gp_lm_defaults();
    o.cache_dir = "";
    o.tokenizer = tok_dir;
    o.n_threads = 2;
    o.n_seq = n_seq;
    o.kv_positions = kv_positions;
    gp_lm *lm = gp_lm_load(gp_test_path(rel), &o, err, sizeof err);
    if (!lm)
        fprintf(stderr, "\n  %s: %s\n", rel, err);
    return lm;
}

/* Four requests of different prompts, lengths, stop strings and starts, in a batch of 4 slots:
 * each one's text, ids and finish are those of the same request alone; the steps allocate
 * nothing; a request that the pool cannot hold is refused; a prompt sharing a finished one's
 * prefix reuses its cache. */
static void test_batch(void)
{
    gp_lm *one = load_folder("tests/parity/gpt2", 0, 0), *many = load_folder("tests/parity/gpt2", 4, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(one);
    CU_ASSERT_PTR_NOT_NULL_FATAL(many);
    char err[1024];
    CU_ASSERT_PTR_NULL(gp_seq_new(many, NULL, err, sizeof err));
    CU_ASSERT(strstr(err, "gp_batch_new") != NULL);
    CU_ASSERT_PTR_NULL(gp_batch_new(one, err, sizeof err));
    CU_ASSERT(strstr(err, "n_seq") != NULL);
    gp_batch *b = gp_batch_new(many, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(gp_batch_slots(b), 4);
    CU_ASSERT_EQUAL(gp_batch_blocks(b), 4 * 64 / 16);
    const char *prompts[4] = {"Hello world, this is a longer prompt of", "Hi", "abc abc abc",
                              "The quick brown fox jumps over"};
    const int64_t max[4] = {20, 33, 12, 25};
    const int start_at[4] = {0, 0, 3, 5};
    /* Request 3 stops at two bytes of what it generates alone, 6 bytes in (whole characters). */
    sink want[4], got[4];
    gp_gen_result wr[4], gr[4];
    char stop3[8] = "";
    const char *stop[1] = {stop3};
    {
        gp_seq *s = new_seq(one, NULL);
        gp_gen_opts g = gen_opts(&want[3], max[3], 1);
        CU_ASSERT_EQUAL(gp_seq_generate(s, prompts[3], &g, &wr[3]), 0);
        size_t at = 6;
        while (at < want[3].n_text && ((unsigned char)want[3].text[at] & 0xc0) == 0x80)
            at++;
        CU_ASSERT_FATAL(at + 2 < want[3].n_text);
        memcpy(stop3, want[3].text + at, 2);
        gp_seq_free(s);
    }
    for (int i = 0; i < 4; i++) {
        gp_seq *s = new_seq(one, NULL);
        gp_gen_opts g = gen_opts(&want[i], max[i], 1);
        if (i == 3) {
            g.stop = stop;
            g.n_stop = 1;
        }
        CU_ASSERT_EQUAL(gp_seq_generate(s, prompts[i], &g, &wr[i]), 0);
        gp_seq_free(s);
    }
    gp_gen_opts gs[4];
    for (int i = 0; i < 4; i++) {
        gs[i] = gen_opts(&got[i], max[i], 1);
        if (i == 3) {
            gs[i].stop = stop;
            gs[i].n_stop = 1;
        }
    }
    /* Warm-up: the starts may grow text buffers; the steps must not allocate. */
    int64_t allocs = 0;
    int running = 0, steps = 0;
    for (int e = 0; e < 200; e++) {
        for (int i = 0; i < 4; i++)
            if (e == start_at[i])
                CU_ASSERT_EQUAL(gp_seq_start_text(gp_batch_seq(b, i), prompts[i], strlen(prompts[i]),
                                                  1, &gs[i]), 0);
        gp_alloc_count_start();
        running = gp_batch_step(b);
        allocs += gp_alloc_count_stop();
        steps++;
        if (running <= 0 && e >= 5)
            break;
    }
    CU_ASSERT_EQUAL(running, 0);
    CU_ASSERT_EQUAL(allocs, 0);
    CU_ASSERT(gp_batch_evals(b) < 40); /* the four shared evals: far fewer than their sum */
    for (int i = 0; i < 4; i++) {
        gp_seq_result(gp_batch_seq(b, i), &gr[i]);
        CU_ASSERT_EQUAL(gr[i].finish, wr[i].finish);
        CU_ASSERT_EQUAL(gr[i].completion_tokens, wr[i].completion_tokens);
        CU_ASSERT_EQUAL(got[i].n_ids, want[i].n_ids);
        CU_ASSERT(!memcmp(got[i].ids, want[i].ids, sizeof(int32_t) * (size_t)want[i].n_ids));
        CU_ASSERT_STRING_EQUAL(got[i].text, want[i].text);
        if (strcmp(got[i].text, want[i].text))
            fprintf(stderr, "\n  request %d: batch \"%s\", alone \"%s\"\n", i, got[i].text,
                    want[i].text);
    }
    CU_ASSERT_EQUAL(gr[3].finish, GP_FINISH_STOP);
    CU_ASSERT_EQUAL(gr[0].finish, GP_FINISH_LENGTH);

    /* A prompt budget of 2 tokens a step while another generates: the long prompt takes one
     * eval alone, then 2 tokens a step beside the generated ones; the texts stay the same. */
    gp_batch_set_prompt_budget(b, 2);
    sink kb0, kb1;
    gp_gen_opts gb0 = gen_opts(&kb0, 30, 1), gb1 = gen_opts(&kb1, max[0], 1);
    CU_ASSERT_EQUAL(gp_seq_start_text(gp_batch_seq(b, 1), "Hi", 2, 0, &gb0), 0);
    CU_ASSERT_EQUAL(gp_batch_step(b), 1); /* the prompt "Hi", alone: one eval */
    CU_ASSERT_EQUAL(gp_seq_start_text(gp_batch_seq(b, 0), prompts[0], strlen(prompts[0]), 0, &gb1), 0);
    int32_t pids[64];
    int64_t np0 = tokenize(many, prompts[0], pids, 64), before_ev = gp_batch_evals(b);
    while (gp_batch_state(b, 0) == 2)
        CU_ASSERT(gp_batch_step(b) > 0);
    CU_ASSERT_EQUAL(gp_batch_evals(b) - before_ev, (np0 + 1) / 2);
    while (gp_batch_step(b) > 0)
        ;
    CU_ASSERT_STRING_EQUAL(kb1.text, want[0].text);
    gp_batch_set_prompt_budget(b, 0);

    /* The same prompt again: the slot with the longest common prefix, its cache reused. */
    int32_t ids[64];
    int64_t n = tokenize(many, prompts[0], ids, 64), common = 0;
    int slot = gp_batch_pick_slot(b, ids, n, &common);
    CU_ASSERT_EQUAL(slot, 0);
    CU_ASSERT_EQUAL(common, n);
    sink again;
    gp_gen_opts ga = gen_opts(&again, max[0], 1);
    CU_ASSERT_EQUAL(gp_seq_start(gp_batch_seq(b, slot), ids, n, 1, &ga), 0);
    while (gp_batch_step(b) > 0)
        ;
    gp_gen_result ra;
    gp_seq_result(gp_batch_seq(b, slot), &ra);
    CU_ASSERT_EQUAL(ra.cached_tokens, n - 1);
    CU_ASSERT_STRING_EQUAL(again.text, want[0].text);

    /* A longer prompt on another slot shares slot 0's whole blocks of the common prefix; slot 0
     * restarted on another prompt writes its own block, never the shared one: slot 2's cache
     * still gives the same text. */
    int32_t longer[64];
    memcpy(longer, ids, sizeof(int32_t) * (size_t)n);
    int64_t nl = n + tokenize(many, " and more", longer + n, 64 - n);
    CU_ASSERT_FATAL(n >= 17);
    sink ref, shared;
    gp_seq *alone = new_seq(one, NULL);
    gp_gen_opts gr0 = gen_opts(&ref, 10, 1), gsh = gen_opts(&shared, 10, 1);
    CU_ASSERT_EQUAL(gp_seq_start(alone, longer, nl, 0, &gr0), 0);
    while (gp_seq_step(alone) == GP_FINISH_NONE)
        ;
    gp_seq_free(alone);
    CU_ASSERT_EQUAL(gp_seq_start(gp_batch_seq(b, 2), longer, nl, 1, &gsh), 0);
    gp_seq_result(gp_batch_seq(b, 2), &ra);
    CU_ASSERT_EQUAL(ra.cached_tokens, n / 16 * 16);
    sink other;
    gp_gen_opts go = gen_opts(&other, 5, 1);
    CU_ASSERT_EQUAL(gp_seq_start_text(gp_batch_seq(b, 0), "Zz", 2, 1, &go), 0);
    gp_seq_result(gp_batch_seq(b, 0), &ra);
    CU_ASSERT_EQUAL(ra.cached_tokens, 0);
    while (gp_batch_step(b) > 0)
        ;
    CU_ASSERT_STRING_EQUAL(shared.text, ref.text);
    gsh = gen_opts(&shared, 10, 1);
    CU_ASSERT_EQUAL(gp_seq_start(gp_batch_seq(b, 2), longer, nl, 1, &gsh), 0);
    while (gp_batch_step(b) > 0)
        ;
    CU_ASSERT_STRING_EQUAL(shared.text, ref.text);
    gp_batch_free(b);
    gp_lm_free(many);

    /* A pool of 3 blocks (48 positions): a request for 40 positions fits, a second does not
     * while the first runs (nothing changes), and fits once the first is done. */
    gp_lm *small = load_folder("tests/parity/gpt2", 2, 48);
    CU_ASSERT_PTR_NOT_NULL_FATAL(small);
    b = gp_batch_new(small, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(gp_batch_blocks(b), 3);
    sink k1, k2;
    gp_gen_opts g1 = gen_opts(&k1, 38, 1), g2 = gen_opts(&k2, 38, 1);
    CU_ASSERT_EQUAL(gp_seq_start_text(gp_batch_seq(b, 0), "Hi", 2, 1, &g1), 0);
    CU_ASSERT_EQUAL(gp_batch_free_blocks(b), 0);
    CU_ASSERT_EQUAL(gp_seq_start_text(gp_batch_seq(b, 1), "Ho", 2, 1, &g2), GP_SEQ_NO_ROOM);
    CU_ASSERT(strstr(gp_seq_error(gp_batch_seq(b, 1)), "KV pool") != NULL);
    CU_ASSERT_EQUAL(gp_batch_state(b, 1), 0);
    while (gp_batch_step(b) > 0)
        ;
    CU_ASSERT_EQUAL(gp_seq_start_text(gp_batch_seq(b, 1), "Ho", 2, 1, &g2), 0);
    CU_ASSERT_EQUAL(gp_batch_state(b, 1), 2);
    CU_ASSERT_EQUAL(gp_seq_length(gp_batch_seq(b, 0)), 0); /* its idle cache was dropped */
    while (gp_batch_step(b) > 0)
        ;
    CU_ASSERT_EQUAL(k2.n_ids, 38);
    gp_batch_free(b);
    gp_lm_free(small);
    gp_lm_free(one);
}

typedef struct {
    int64_t before[32], after[32];
    int n_before, n_after;
    int64_t vocab;
    const float *last;
    float last_row[384];
} hook_log;

static void hook_before(void *user, int64_t n)
{
    hook_log *h = user;
    if (h->n_before < 32)
        h->before[h->n_before++] = n;
}

static void hook_after(void *user, const float *logits, int64_t n_rows, int64_t vocab)
{
    hook_log *h = user;
    if (h->n_after < 32)
        h->after[h->n_after++] = n_rows;
    h->vocab = vocab;
    h->last = logits + (n_rows - 1) * vocab;
    memcpy(h->last_row, h->last, (size_t)(vocab < 384 ? vocab : 384) * sizeof h->last_row[0]);
}

static void test_eval_hooks(void)
{
    gp_lm *lm = load_plan(plan256, 1, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const char *lp = long_prompt();
    int32_t ids[256];
    int64_t n = tokenize(lm, lp, ids, 256);
    hook_log h, all;
    memset(&h, 0, sizeof h);
    gp_eval_hooks hooks = {hook_before, hook_after, &h, 0};
    CU_ASSERT_EQUAL(gp_seq_set_eval_hooks(s, &hooks), 0);
    sink k;
    gp_gen_opts g = gen_opts(&k, 4, 1);
    CU_ASSERT_EQUAL(gp_seq_start(s, ids, n, 0, &g), 0);
    CU_ASSERT_EQUAL(run_steps(s), GP_FINISH_LENGTH);
    int64_t chunks = (n + 15) / 16;
    CU_ASSERT_EQUAL(h.n_before, chunks + 3);
    CU_ASSERT_EQUAL(h.n_after, chunks + 3);
    for (int i = 0; i < h.n_before; i++) {
        int64_t want = i < chunks - 1 ? 16 : i == chunks - 1 ? n - 16 * (chunks - 1) : 1;
        CU_ASSERT_EQUAL(h.before[i], want);
        CU_ASSERT_EQUAL(h.after[i], 1);
    }
    CU_ASSERT_EQUAL(h.vocab, 384);
    CU_ASSERT_PTR_EQUAL(h.last, gp_seq_logits(s));

    /* Every row: the chunks' sizes, the last row the same logits. */
    memset(&all, 0, sizeof all);
    gp_eval_hooks every = {hook_before, hook_after, &all, 1};
    CU_ASSERT_EQUAL(gp_seq_set_eval_hooks(s, &every), 0);
    g = gen_opts(&k, 4, 1);
    CU_ASSERT_EQUAL(gp_seq_start(s, ids, n, 0, &g), 0);
    CU_ASSERT_EQUAL(run_steps(s), GP_FINISH_LENGTH);
    CU_ASSERT_EQUAL(all.n_after, chunks + 3);
    for (int i = 0; i < all.n_after; i++)
        CU_ASSERT_EQUAL(all.after[i], all.before[i]);
    CU_ASSERT(gp_test_rel_err(all.last_row, h.last_row, 384, GP_TEST_MAX) < 1e-5);
    /* None: no more calls. */
    CU_ASSERT_EQUAL(gp_seq_set_eval_hooks(s, NULL), 0);
    int calls = all.n_before;
    CU_ASSERT_EQUAL(gp_seq_start(s, ids, n, 0, &g), 0);
    CU_ASSERT_EQUAL(run_steps(s), GP_FINISH_LENGTH);
    CU_ASSERT_EQUAL(all.n_before, calls);
    gp_seq_free(s);
    gp_lm_free(lm);

    /* A plan of one logits row cannot give every row of a longer eval: the eval says so. */
    lm = load_plan(plan_row1, 1, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(gp_seq_set_eval_hooks(s, &every), 0);
    int32_t two[2] = {1, 2};
    CU_ASSERT_EQUAL(gp_seq_start(s, two, 2, 0, &g), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_seq_error(s), "set_rows: 2 rows asked for, the plan computes "
                                                   "at most 1"));
    CU_ASSERT_EQUAL(gp_seq_set_eval_hooks(s, &hooks), 0);
    gp_seq_free(s);
    gp_lm_free(lm);

    /* A graph without a rows input computes every row anyway: allowed. */
    lm = load_plan(tiny_plan, 1, "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    memset(&all, 0, sizeof all);
    CU_ASSERT_EQUAL(gp_seq_set_eval_hooks(s, &every), 0);
    int32_t three[3] = {1, 2, 3};
    g = gen_opts(&k, 2, 1);
    CU_ASSERT_EQUAL(gp_seq_start(s, three, 3, 0, &g), 0);
    CU_ASSERT_EQUAL(run_steps(s), GP_FINISH_LENGTH);
    CU_ASSERT_EQUAL(all.n_after, 2);
    CU_ASSERT_EQUAL(all.after[0], 3);
    CU_ASSERT_EQUAL(all.after[1], 1);
    CU_ASSERT_EQUAL(all.vocab, 256);
    /* Without a tokenizer the ids still come, and no text. */
    CU_ASSERT_EQUAL(k.n_ids, 2);
    CU_ASSERT_EQUAL(k.text_calls, 0);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(s, NULL), "");
    gp_seq_free(s);
    gp_lm_free(lm);
}

/* ---- a real model ---- */

static void test_smollm2(void)
{
    char path[4096];
    const char *env = getenv("GPLAN_SMOLLM2"), *home = getenv("HOME");
    if (env && *env)
        snprintf(path, sizeof path, "%s", env);
    else
        snprintf(path, sizeof path, "%s/.cache/gplan/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : "");
    if (access(path, R_OK)) {
        printf("\n  text: SmolLM2 skipped (no %s) ", path);
        return;
    }
    char err[1024];
    gp_lm_opts o = gp_lm_defaults();
    o.cache_dir = "";
    o.context = 64;
    o.n_threads = 2;
    gp_lm *lm = gp_lm_load(path, &o, err, sizeof err);
    if (!lm)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_STRING_EQUAL(gp_lm_arch(lm), "llama");
    CU_ASSERT_EQUAL(gp_lm_context(lm), 64);
    CU_ASSERT_EQUAL(gp_lm_vocab(lm), 49152);
    CU_ASSERT_EQUAL(gp_lm_has_chat(lm), 1);
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    /* One token, one eval (the prompt's): half a minute under valgrind already. */
    gp_gen_opts g = gp_gen_defaults();
    g.max_tokens = 1;
    gp_gen_result r;
    CU_ASSERT_EQUAL(gp_seq_generate(s, "The capital of France is", &g, &r), 0);
    CU_ASSERT_STRING_EQUAL(gp_seq_text(s, NULL), " Paris");
    CU_ASSERT_EQUAL(r.prompt_tokens, 5);
    gp_seq_free(s);
    gp_lm_free(lm);
}


/* ---- generation past the context, totals, figures, notes, loading options ---- */

/* gp_gen_opts.restart against what it stands for: a full context, then a start of the last id
 * alone at position 0 for the tokens still to come, again and again (sampled, so the sampler's
 * restart from its seed is checked too). The same ids; the restarts' evals counted as
 * generation's. */
static void test_restart(void)
{
    gp_lm *lm = load_plan(plan64, 4, "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_sampler_opts so = gp_sampler_defaults();
    so.temp = 0.9;
    so.seed = 7;
    int32_t prompt[60];
    for (int i = 0; i < 60; i++)
        prompt[i] = i + 1;
    enum { N = 150 };
    /* By hand: 60 + 4 positions give 5 ids, then each start of one id 64 more. */
    gp_seq *a = new_seq(lm, &so);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    sink ka;
    gp_gen_opts g = gen_opts(&ka, N, 1);
    int32_t want[N];
    int n_want = 0, f = -1, starts = 0;
    int64_t evals = 0;
    gp_gen_result r;
    for (int rc = gp_seq_start(a, prompt, 60, 0, &g); !rc && n_want < N;) {
        int from = ka.n_ids;
        starts++;
        f = run_steps(a);
        gp_seq_result(a, &r);
        evals += r.prompt_evals + r.gen_evals;
        for (int i = from; i < ka.n_ids && n_want < N; i++)
            want[n_want++] = ka.ids[i];
        if (f != GP_FINISH_CONTEXT)
            break;
        gp_gen_opts more = g;
        more.max_tokens = N - n_want;
        gp_seq_reset(a);
        rc = gp_seq_start(a, &want[n_want - 1], 1, 0, &more);
    }
    CU_ASSERT_EQUAL(f, GP_FINISH_LENGTH);
    CU_ASSERT_EQUAL(n_want, N);
    CU_ASSERT_EQUAL(starts, 4); /* 5 + 64 + 64 + 17 */
    gp_seq_free(a);

    gp_seq *b = new_seq(lm, &so);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    sink kb;
    g = gen_opts(&kb, N, 1);
    g.restart = 1;
    CU_ASSERT_EQUAL_FATAL(gp_seq_start(b, prompt, 60, 0, &g), 0);
    CU_ASSERT_EQUAL(run_steps(b), GP_FINISH_LENGTH);
    CU_ASSERT_EQUAL_FATAL(kb.n_ids, N);
    CU_ASSERT_EQUAL(memcmp(kb.ids, want, sizeof want), 0);
    gp_seq_result(b, &r);
    CU_ASSERT(r.completion_tokens == N && r.prompt_evals == 4 && r.prompt_rows == 60);
    CU_ASSERT_EQUAL(r.prompt_evals + r.gen_evals, evals);
    CU_ASSERT_EQUAL(gp_seq_length(b), 17); /* the last restart's id, 16 more; the last not evaluated */

    /* Not for chats. */
    gp_lm *chat = load_plan(plan64, 4, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(chat);
    gp_seq *c = new_seq(chat, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    gp_msg m = {"user", "Hello"};
    CU_ASSERT_EQUAL(gp_seq_start_chat(c, &m, 1, &g), -1);
    CU_ASSERT_STRING_EQUAL(gp_seq_error(c),
                           "restart is for a sequence of its own, not a chat or a batch's");
    gp_seq_free(c);
    gp_lm_free(chat);
    gp_seq_free(b);
    gp_lm_free(lm);
}

/* gp_seq_totals sums the generations; gp_seq_stats writes the figures, cut to its buffer. */
static void test_totals_stats(void)
{
    gp_lm *lm = load_plan(plan256, 4, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    CU_ASSERT_EQUAL(gp_lm_threads(lm), 2);
    CU_ASSERT_STRING_EQUAL(gp_lm_note(lm), ""); /* the tokenizer covers the embedding */
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    sink k;
    gp_gen_opts g = gen_opts(&k, 5, 1);
    gp_gen_result a, b, t;
    CU_ASSERT_EQUAL(gp_seq_generate(s, "Hello there", &g, &a), 0);
    CU_ASSERT_EQUAL(gp_seq_generate(s, "Hi", &g, &b), 0);
    gp_seq_totals(s, &t);
    CU_ASSERT(t.completion_tokens == 10 && t.gen_evals == a.gen_evals + b.gen_evals);
    CU_ASSERT(t.prompt_tokens == a.prompt_tokens + b.prompt_tokens &&
              t.prompt_rows == a.prompt_rows + b.prompt_rows &&
              t.prompt_evals == a.prompt_evals + b.prompt_evals && t.finish == b.finish);
    CU_ASSERT(t.prompt_ms == a.prompt_ms + b.prompt_ms && t.gen_ms == a.gen_ms + b.gen_ms);
    char text[8192], line[4200], small[16];
    int64_t n = gp_seq_stats(s, "stats: ", text, sizeof text);
    CU_ASSERT_EQUAL(n, (int64_t)strlen(text));
    snprintf(line, sizeof line, "stats: backend cpu, 2 threads, plan %s\n", plan256);
    CU_ASSERT_EQUAL(strncmp(text, line, strlen(line)), 0);
    snprintf(line, sizeof line, "\nstats: evals %lld (prompt %lld, generation %lld)\n",
             (long long)(t.prompt_evals + t.gen_evals), (long long)t.prompt_evals,
             (long long)t.gen_evals);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, line));
    snprintf(line, sizeof line, "\nstats: prompt     %lld tokens, ", (long long)t.prompt_rows);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, line));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\nstats: cpu kernels: float products "));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\nstats: device allocations during evals: 0\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\nstats: peak RSS "));
    CU_ASSERT_EQUAL(gp_seq_stats(s, "stats: ", small, sizeof small), n);
    CU_ASSERT_STRING_EQUAL(small, "stats: backend ");
    CU_ASSERT_EQUAL(gp_seq_stats(s, "stats: ", NULL, 0), n);
    gp_seq_free(s);
    gp_lm_free(lm);
}

/* A conversation needs a chat format (and a KV cache, which every example graph has);
 * gp_lm_opts.chat_format chooses one. */
static void test_conv_needs(void)
{
    char err[1024];
    gp_lm *lm = load_plan(plan256, 4, "");
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_seq *s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NULL(gp_conv_new(s, NULL, err, sizeof err));
    CU_ASSERT_EQUAL(strncmp(err, "the model has no tokenizer", 26), 0);
    gp_seq_free(s);
    gp_lm_free(lm);
    lm = load_plan(plan256, 4, no_tmpl);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    s = new_seq(lm, NULL);
    CU_ASSERT_PTR_NULL(gp_conv_new(s, NULL, err, sizeof err));
    CU_ASSERT_EQUAL(strncmp(err, "the tokenizer has no chat template", 34), 0);
    gp_seq_free(s);
    gp_lm_free(lm);

    gp_lm_opts o = gp_lm_defaults();
    o.plan = plan256;
    o.random_weights = 1;
    o.tokenizer = no_tmpl;
    o.chat_format = "llama3";
    lm = gp_lm_load(NULL, &o, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
    gp_msg m = {"user", "Hi"};
    char out[256];
    CU_ASSERT(gp_lm_chat_apply(lm, &m, 1, 0, out, sizeof out, err, sizeof err) > 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "<|start_header_id|>user<|end_header_id|>\n\nHi"));
    s = new_seq(lm, NULL);
    gp_conv *c = gp_conv_new(s, NULL, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL(c);
    gp_conv_free(c);
    gp_seq_free(s);
    gp_lm_free(lm);
    o.chat_format = "vicuna";
    CU_ASSERT_PTR_NULL(gp_lm_load(NULL, &o, err, sizeof err));
    CU_ASSERT_EQUAL(strncmp(err, "unknown chat format: vicuna (formats: chatml, ", 46), 0);
}

/* What gp_lm_is_model takes for a model: folders, GGUF files, what is no regular file. */
static void test_is_model(void)
{
    char gguf[4096], fifo[4096];
    snprintf(gguf, sizeof gguf, "%s", gp_test_tmpfile(".gguf"));
    snprintf(fifo, sizeof fifo, "%s", gp_test_tmpfile(".fifo"));
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(gguf, "GGUF\3\0\0\0", 8), 0);
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0600), 0);
    CU_ASSERT_EQUAL(gp_lm_is_model(gguf), 1);
    CU_ASSERT_EQUAL(gp_lm_is_model(tok_dir), 1);
    CU_ASSERT_EQUAL(gp_lm_is_model(fifo), 1); /* not opened: the loader says what it is */
    CU_ASSERT_EQUAL(gp_lm_is_model(plan256), 0);
    CU_ASSERT_EQUAL(gp_lm_is_model("/nonexistent/x.gguf"), 0);
    CU_ASSERT_EQUAL(gp_lm_is_model(NULL), 0);
    remove(gguf);
    remove(fifo);
}

/* gp_lm_opts.lora: an adapter bound at load into a plan of -D lora_r=4 (runtime mode), as
 * gp_model_bind_adapter after the load would; refused by a plan without slots. */
static void test_lora_opts(void)
{
    static const char *const dims[] = {"n_layer=1", "n_embd=64", "n_head=4", "vocab_size=256",
                                       "n_positions=64", "n_batch=16", "lora_r=4"};
    char plan[4096], err[1024];
    CU_ASSERT_EQUAL_FATAL(compile_plan("examples/gpt2.gplan", dims, 7, plan, sizeof plan), 0);
    char adapter[4096];
    snprintf(adapter, sizeof adapter, "%s", gp_test_path("tests/cli/lora_adapter"));
    float rows[3][256];
    for (int k = 0; k < 3; k++) {
        gp_lm_opts o = gp_lm_defaults();
        o.plan = k == 2 ? tiny_plan : plan;
        o.random_weights = 1;
        o.random_seed = 5;
        o.tokenizer = "";
        o.lora = k ? adapter : NULL;
        gp_lm *lm = gp_lm_load(NULL, &o, err, sizeof err);
        if (k == 2) {
            CU_ASSERT_PTR_NULL(lm);
            CU_ASSERT_PTR_NOT_NULL(strstr(err, "has no adapter slots"));
            break;
        }
        CU_ASSERT_PTR_NOT_NULL_FATAL(lm);
        if (k == 1) { /* the same adapter bound by hand gives the same logits */
            CU_ASSERT_EQUAL(gp_model_bind_adapter(gp_lm_model(lm), adapter, 1.0, err, sizeof err),
                            0);
        }
        gp_seq *s = new_seq(lm, NULL);
        int32_t ids[3] = {1, 2, 3};
        gp_gen_opts g = gp_gen_defaults();
        g.max_tokens = 1;
        CU_ASSERT_EQUAL(gp_seq_start(s, ids, 3, 0, &g), 0);
        memcpy(rows[k], gp_seq_logits(s), sizeof rows[k]);
        gp_seq_free(s);
        gp_lm_free(lm);
    }
    CU_ASSERT(memcmp(rows[0], rows[1], sizeof rows[0]) != 0); /* the adapter changes them */
}

void gp_suite_text(void)
{
    static const gp_test_case tests[] = {
        {"load errors", test_load_errors},
        {"a plan and random weights", test_plan_model},
        {"a GGUF file's plan, cached", test_gguf_plan_cache},
        {"a memory budget: the largest context that fits, refusals", test_memory_budget},
        {"the plan cache keeps 32, the least recently used go", test_plan_cache_trim},
        {"a Hugging Face folder", test_hf_folder},
        {"non-finite logits stop with an error", test_non_finite_logits},
        {"ids past the tokenizer's are never sampled", test_padded_vocab},
        {"tokenize and detokenize", test_tokenize},
        {"UTF-8 checks", test_utf8},
        {"greedy text is its ids' text", test_greedy_is_its_ids},
        {"counts, max_tokens, prompt chunks", test_counts},
        {"keep_prefix evaluates the rest", test_keep_prefix},
        {"stop strings", test_stop_strings},
        {"end of generation, ignore_eos, eos", test_end_of_generation},
        {"the context: full, too long", test_context},
        {"cancel", test_cancel},
        {"sampling: seeds, bad options", test_sampling},
        {"chat templates and formats", test_chat_apply},
        {"chat turns over the cache", test_chat_turns},
        {"chat with a stop string", test_chat_stop},
        {"chat after a plain start", test_chat_after_start},
        {"chat too long", test_chat_too_long},
        {"no allocation per step", test_steps_no_alloc},
        {"eval hooks", test_eval_hooks},
        {"a batch: requests together = each alone, no allocation, the pool", test_batch},
        {"SmolLM2 (when present)", test_smollm2},
        {"restart past a full context = restarting by hand", test_restart},
        {"totals over generations, the figures as text", test_totals_stats},
        {"a conversation's needs, chat_format at load", test_conv_needs},
        {"what gp_lm_is_model takes for a model", test_is_model},
        {"a LoRA adapter at load", test_lora_opts},
    };
    gp_test_add_suite("text", text_init, text_cleanup, tests, GP_TEST_COUNT(tests));
}
