/* Tests of ragged batches (suite "batch"): every family's graph planned with -D n_seq (several
 * sequences in one eval over a pool of KV blocks) against the same graph and weights planned for
 * one sequence: sequences of different lengths, started at different evals and scattered over the
 * pool, give each sequence's logits alone (within 1e-5) and the same 32 greedy tokens; bad seq,
 * kv_row and kv_table values are refused with the state untouched. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family/family.h"
#include "gplan/gplan.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"

enum { N_SEQ = 3, BLOCK = 4, STEPS = 32, MAX_T = 64 };

/* The three sequences' prompts (lengths 7, 12 and 3) and the eval at which each starts. */
static const int prompt_len[N_SEQ] = {7, 12, 3};
static const int start_at[N_SEQ] = {0, 0, 1};

static int32_t prompt_id(int s, int i, int64_t vocab)
{
    return (int32_t)((s * 31 + i * 7 + 1) % vocab);
}

static gp_model *family_model(const gp_family *f, const char **defs, int n_defs)
{
    char rel[128], config[256];
    snprintf(rel, sizeof rel, "examples/%s", f->graph_file);
    snprintf(config, sizeof config, "tests/parity/%s/config.json", f->name);
    snprintf(config, sizeof config, "%s", gp_test_path(config));
    gp_test_model_opts o = {defs, n_defs, config, 1, 11};
    return gp_test_model(rel, &o, NULL);
}

static const char *backend = "cpu"; /* the sessions' */

static gp_session *new_session(const gp_model *m)
{
    char err[512];
    gp_session_opts o = {backend, 2, 0};
    gp_session *s = gp_session_new(m, &o, err, sizeof err);
    if (!s)
        fprintf(stderr, "gp_session_new: %s\n", err);
    return s;
}

/* A graph without a rows input computes every token's logits: then logits row r is token
 * rows[r]'s row of them. */
static int has_rows(const gp_model *m)
{
    gp_model_info info;
    gp_model_get_info(m, &info);
    return info.rows != NULL;
}

/* Each sequence alone: its prompt in one eval, then STEPS greedy tokens; want[s][k] the logits of
 * step k (k = 0: after the prompt), ids[s][k] the token picked there. */
static int run_alone(const gp_model *m, int64_t vocab, float *want, int32_t ids[N_SEQ][STEPS + 1])
{
    for (int s = 0; s < N_SEQ; s++) {
        gp_session *ss = new_session(m);
        if (!ss)
            return -1;
        int32_t tok[MAX_T], pos[MAX_T];
        int n = prompt_len[s];
        for (int i = 0; i < n; i++) {
            tok[i] = prompt_id(s, i, vocab);
            pos[i] = i;
        }
        for (int k = 0; k <= STEPS; k++) {
            if (gp_session_set_tokens(ss, tok, pos, n) || gp_session_eval(ss)) {
                fprintf(stderr, "alone: %s\n", gp_session_error(ss));
                gp_session_free(ss);
                return -1;
            }
            const float *lg = gp_session_output(ss, "logits", NULL);
            if (!has_rows(m)) /* every token's logits: the last one's */
                lg += (n - 1) * vocab;
            memcpy(want + ((size_t)s * (STEPS + 1) + (size_t)k) * (size_t)vocab, lg,
                   (size_t)vocab * sizeof(float));
            ids[s][k] = (int32_t)gp_argmax(lg, vocab);
            tok[0] = ids[s][k];
            pos[0] = pos[n - 1] + 1;
            n = 1;
        }
        gp_session_free(ss);
    }
    return 0;
}

/* The kv_table: sequence s's blocks taken from a shuffled pool, so that no sequence's blocks are
 * in order and some are adjacent. */
static void make_table(int32_t *table, int64_t seq_blocks, int64_t pool)
{
    int32_t *perm = malloc(sizeof *perm * (size_t)pool);
    uint64_t rng = 5;
    for (int64_t i = 0; i < pool; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = pool - 1; i > 0; i--) {
        int64_t j = (int64_t)(gp_test_rand(&rng) % (uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int64_t i = 0; i < N_SEQ * seq_blocks; i++)
        table[i] = perm[i % pool];
    free(perm);
}

typedef struct {
    int32_t tok[MAX_T], pos[MAX_T], seq[MAX_T], row[MAX_T], rows[N_SEQ];
    int n, n_rows, who[N_SEQ]; /* who[r]: the sequence of logits row r */
} batch;

static void add_token(batch *b, const int32_t *table, int s, int32_t tok, int32_t pos)
{
    b->tok[b->n] = tok;
    b->pos[b->n] = pos;
    b->seq[b->n] = s;
    b->row[b->n] = table[(size_t)s * (size_t)(MAX_T / BLOCK) + (size_t)(pos / BLOCK)] * BLOCK +
                   pos % BLOCK;
    b->n++;
}

static int set_batch(gp_session *s, const gp_model *m, const batch *b, const int32_t *table,
                     size_t table_bytes)
{
    return gp_session_set_tokens(s, b->tok, b->pos, b->n) ||
           gp_session_set_input(s, "seq", b->seq, sizeof(int32_t) * (size_t)b->n) ||
           gp_session_set_input(s, "kv_row", b->row, sizeof(int32_t) * (size_t)b->n) ||
           gp_session_set_input(s, "kv_table", table, table_bytes) ||
           (has_rows(m) && gp_session_set_rows(s, b->rows, b->n_rows));
}

static const float *logits_row(gp_session *s, const gp_model *m, const batch *b, int r,
                               int64_t vocab)
{
    const float *lg = gp_session_output(s, "logits", NULL);
    return lg + (has_rows(m) ? r : b->rows[r]) * vocab;
}

static void check_family(const gp_family *f)
{
    if (!strcmp(f->name, "gpt_oss")) /* no ragged batch: attention's sinks take its input 4 */
        return;
    /* A context of MAX_T positions, MAX_T / BLOCK blocks a sequence; the pool holds them all. */
    char ctx[64], nb[64], blk[64];
    snprintf(ctx, sizeof ctx, "%s=%d", f->ctx_param, MAX_T);
    snprintf(nb, sizeof nb, "n_seq=%d", N_SEQ);
    snprintf(blk, sizeof blk, "kv_block=%d", BLOCK);
    const char *one[] = {ctx, "n_batch=16"}, *many[] = {ctx, "n_batch=32", nb, blk};
    gp_model *m1 = family_model(f, one, 2), *mn = family_model(f, many, 4);
    CU_ASSERT_PTR_NOT_NULL(m1);
    CU_ASSERT_PTR_NOT_NULL(mn);
    if (!m1 || !mn) {
        fprintf(stderr, "\n%s: the plans do not compile\n", f->name);
        gp_model_free(m1);
        gp_model_free(mn);
        return;
    }
    int64_t vocab = gp_test_vocab(m1), seq_blocks = MAX_T / BLOCK, pool = N_SEQ * seq_blocks;
    float *want = malloc(sizeof(float) * (size_t)(N_SEQ * (STEPS + 1)) * (size_t)vocab);
    int32_t ids[N_SEQ][STEPS + 1], got_ids[N_SEQ][STEPS + 1];
    int32_t *table = malloc(sizeof *table * (size_t)(N_SEQ * seq_blocks));
    size_t table_bytes = sizeof *table * (size_t)(N_SEQ * seq_blocks);
    make_table(table, seq_blocks, pool);
    gp_session *s = new_session(mn);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL_FATAL(run_alone(m1, vocab, want, ids), 0);

    /* Together: eval 0 holds the prompts of sequences 0 and 1, eval 1 their first tokens and
     * sequence 2's prompt, then one token of each a step. */
    int done[N_SEQ] = {0}, len[N_SEQ] = {0};
    int32_t next[N_SEQ];
    double worst = 0;
    for (int e = 0; e < STEPS + 2; e++) {
        batch b = {.n = 0};
        for (int q = 0; q < N_SEQ; q++) {
            if (e < start_at[q] || done[q] > STEPS)
                continue;
            if (e == start_at[q])
                for (int i = 0; i < prompt_len[q]; i++)
                    add_token(&b, table, q, prompt_id(q, i, vocab), len[q]++);
            else
                add_token(&b, table, q, next[q], len[q]++);
            b.rows[b.n_rows] = b.n - 1;
            b.who[b.n_rows++] = q;
        }
        if (!b.n)
            break;
        if (set_batch(s, mn, &b, table, table_bytes) || gp_session_eval(s)) {
            fprintf(stderr, "\n%s: ragged eval %d: %s\n", f->name, e, gp_session_error(s));
            CU_FAIL("ragged eval");
            break;
        }
        for (int r = 0; r < b.n_rows; r++) {
            int q = b.who[r], k = done[q]++;
            const float *w = want + ((size_t)q * (STEPS + 1) + (size_t)k) * (size_t)vocab;
            const float *lg = logits_row(s, mn, &b, r, vocab);
            for (int64_t i = 0; i < vocab; i++) {
                double d = fabs((double)lg[i] - w[i]) / (1.0 + fabs(w[i]));
                worst = d > worst ? d : worst;
            }
            got_ids[q][k] = next[q] = (int32_t)gp_argmax(lg, vocab);
        }
    }
    if (worst > 1e-5)
        fprintf(stderr, "\n%s: a ragged batch's logits differ from each sequence alone by %g\n",
                f->name, worst);
    CU_ASSERT(worst <= 1e-5);
    for (int q = 0; q < N_SEQ; q++) {
        CU_ASSERT_EQUAL(done[q], STEPS + 1);
        CU_ASSERT(!memcmp(got_ids[q], ids[q], sizeof ids[q]));
    }

    /* Refused with the state untouched: a sequence past n_seq, a kv_table entry past the pool, a
     * kv_row past the cache; then a good eval gives what it gave before. */
    batch b = {.n = 0};
    add_token(&b, table, 1, 5, 3);
    b.rows[0] = 0;
    b.n_rows = 1;
    CU_ASSERT_EQUAL(set_batch(s, mn, &b, table, table_bytes) || gp_session_eval(s), 0);
    float *before = malloc(sizeof(float) * (size_t)vocab);
    memcpy(before, logits_row(s, mn, &b, 0, vocab), sizeof(float) * (size_t)vocab);
    b.seq[0] = N_SEQ;
    CU_ASSERT_EQUAL(set_batch(s, mn, &b, table, table_bytes), 0);
    CU_ASSERT_EQUAL(gp_session_eval(s), -1);
    CU_ASSERT(strstr(gp_session_error(s), "seq[0] = 3 is out of range") != NULL);
    b.seq[0] = 1;
    int32_t saved = table[seq_blocks];
    table[seq_blocks] = (int32_t)pool;
    CU_ASSERT_EQUAL(set_batch(s, mn, &b, table, table_bytes), 0);
    CU_ASSERT_EQUAL(gp_session_eval(s), -1);
    CU_ASSERT(strstr(gp_session_error(s), "blocks[1, 0]") != NULL);
    table[seq_blocks] = saved;
    int32_t good = b.row[0];
    b.row[0] = (int32_t)(pool * BLOCK);
    CU_ASSERT_EQUAL(set_batch(s, mn, &b, table, table_bytes), 0);
    CU_ASSERT_EQUAL(gp_session_eval(s), -1);
    CU_ASSERT(strstr(gp_session_error(s), "kv_row") != NULL);
    b.row[0] = good;
    CU_ASSERT_EQUAL(set_batch(s, mn, &b, table, table_bytes) || gp_session_eval(s), 0);
    /* the same logits (CUDA's launches may sum in another order after a first eval) */
    const float *after = logits_row(s, mn, &b, 0, vocab);
    double d = 0;
    for (int64_t i = 0; i < vocab; i++)
        d = fmax(d, fabs((double)after[i] - before[i]) / (1.0 + fabs(before[i])));
    CU_ASSERT(d <= 1e-5);
    free(before);
    gp_session_free(s);
    free(table);
    free(want);
    gp_model_free(m1);
    gp_model_free(mn);
}

static void test_families(void)
{
    backend = "cpu";
    for (int i = 0; i < gp_family_count(); i++)
        check_family(gp_family_at(i));
}

/* The same on the CUDA backend, where this build has it and a device is present. */
static void test_families_cuda(void)
{
    const gp_family *f = gp_family_at(0);
    const char *defs[] = {"n_seq=2"};
    gp_model *m = family_model(f, defs, 1);
    char err[512];
    gp_session_opts o = {"cuda", 1, 0};
    gp_session *s = m ? gp_session_new(m, &o, err, sizeof err) : NULL;
    gp_session_free(s);
    gp_model_free(m);
    if (!s) {
        gp_test_skip("batch (cuda)", err);
        return;
    }
    backend = "cuda";
    for (int i = 0; i < gp_family_count(); i++)
        check_family(gp_family_at(i));
    backend = "cpu";
}

void gp_suite_batch(void);
void gp_suite_batch(void)
{
    CU_pSuite s = CU_add_suite("batch", NULL, NULL);
    CU_add_test(s, "every family: sequences in one ragged eval = each alone", test_families);
    CU_add_test(s, "the same on CUDA", test_families_cuda);
}
