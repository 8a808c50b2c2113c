/* gplan-run: runs a plan on a backend: evaluates a prompt (token ids, or text through a tokenizer)
 * in chunks, then generates tokens one eval at a time, printing ids or streaming text; --chat keeps
 * the KV cache across the turns of a conversation on stdin. With --stats it reports timings,
 * allocations during evals and memory.
 * Exit status: 0 ok, 1 bad input (plan, weights, token ids, text, prompt too long), 2 bad usage. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gplan/gplan.h"
#include "runtime/sample.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "tools/alloc_interpose.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

/* ---- options ---- */

typedef struct {
    const char *plan;
    const char *weights;
    int random_weights;
    uint64_t weights_seed;
    const char *backend;
    int threads;
    int32_t *prompt; /* [n_prompt] */
    int64_t n_prompt;
    int64_t n_gen;
    int ignore_eos;
    int64_t eos; /* -1: none */
    gp_sampler_opts sampling;
    const char *text;        /* --prompt, or NULL */
    const char *text_file;   /* --prompt-file, or NULL */
    const char *tokenizer;   /* --tokenizer, or NULL: found beside the weights */
    const char *stops[16];   /* --stop strings [n_stops] */
    int n_stops;
    int chat;                /* --chat */
    const char *system;      /* --system, or NULL */
    const char *chat_format; /* --chat-format, or NULL: from the template */
    const char *logits_out;
    int logits_all;    /* --logits-all: every row of each eval to --logits-out, not the last */
    const char *lora;  /* a PEFT adapter folder, or NULL */
    double lora_scale; /* multiplies the adapter's lora_alpha / r */
    int lora_runtime;  /* --lora-mode runtime: bind into the plan's adapter slots, don't merge */
    const char *lora_merge_plan; /* merge mode: the plan of gplan-compile --lora-merge */
    int stats, loop;
} options;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gplan-run PLAN (--weights FILE|DIR | --random-weights SEED) [options]\n"
            "\n"
            "Runs a plan made by gplan-compile: evaluates the prompt in chunks of at most the\n"
            "planned number of tokens per eval, then generates tokens one eval at a time, printing\n"
            "their ids as they come, or with --prompt or --prompt-file streaming the text.\n"
            "\n"
            "options:\n"
            "  --weights PATH        a safetensors file, a model.safetensors.index.json, or a folder\n"
            "  --random-weights SEED deterministic random weights instead of a checkpoint\n"
            "  --lora DIR            merge a PEFT LoRA adapter (adapter_config.json,\n"
            "                        adapter_model.safetensors) into the weights\n"
            "  --lora-merge-plan F   merge mode's plan: gplan-compile MODEL -D lora_r=R\n"
            "                        --lora-merge -o F (same graph and parameters as PLAN)\n"
            "  --lora-scale S        multiply the adapter's lora_alpha / r by S (default 1)\n"
            "  --lora-mode MODE      merge (default: added into the weights at load, evals cost\n"
            "                        what they cost without it) or runtime (bound into the\n"
            "                        adapter branches of a plan compiled with -D lora_r=R)\n"
            "  --backend NAME        cpu (default), reference, or cuda (when built)\n"
            "  --threads N           CPU threads (default: the online cores)\n"
            "  --prompt-ids LIST     comma-separated token ids (default: 0)\n"
            "  -n N                  tokens to generate (default 16; with --chat, per reply)\n"
            "  --eos ID              stop at this token (default: none; with a tokenizer also at\n"
            "                        its end-of-generation tokens)\n"
            "  --ignore-eos          keep generating after --eos and end-of-generation tokens\n"
            "  --logits-out FILE     append the last row of logits of every eval (raw f32)\n"
            "  --logits-all          with --logits-out: every token's row of each eval (the plan\n"
            "                        computes them all: its rows input's bound, gplan-compile\n"
            "                        -D n_rows, must hold the prompt's evals)\n"
            "  --stats               print evals, ms per eval, tokens/s, allocations during evals\n"
            "                        and memory use to stderr (with --chat, tokens a turn)\n"
            "  --loop                at the end of the planned context start again at position 0\n"
            "                        (without it generation stops there)\n"
            "  -h, --help            print this help\n"
            "  --version             print the version\n"
            "\n"
            "text:\n"
            "  --prompt TEXT         tokenize TEXT (special tokens' texts become their ids) and\n"
            "                        stream the generated text to stdout, whole UTF-8 characters\n"
            "  --prompt-file F       the same with the contents of F\n"
            "  --tokenizer PATH      a .gguf, a tokenizer.json or a folder holding one (default:\n"
            "                        the --weights .gguf, or the tokenizer.json in its folder);\n"
            "                        a generation_config.json beside it adds its eos_token_id\n"
            "  --stop STRING         stop when the text contains STRING, which is not printed\n"
            "                        (repeatable, up to 16)\n"
            "  --chat                a conversation: each line on stdin is a user turn, the reply\n"
            "                        streams to stdout and ends at the end-of-turn token or -n;\n"
            "                        the KV cache is kept across turns, so only a turn's new\n"
            "                        tokens are evaluated. When a turn does not fit in the\n"
            "                        context left, gplan-run says so on stderr and starts over\n"
            "                        with the system prompt and that turn alone. EOF ends it\n"
            "  --system TEXT         the conversation's system prompt (default: the template's\n"
            "                        own, if it has one)\n"
            "  --chat-format NAME    one of %s\n"
            "                        (default: recognized from the model's chat template)\n"
            "\n"
            "sampling (filters in this order; each off at its default):\n"
            "  --repeat-penalty P    divide a recent token's positive logit by P, multiply a\n"
            "                        negative one (default 1)\n"
            "  --repeat-last-n N     how many recent tokens (prompt included) the penalty sees\n"
            "                        (default 64)\n"
            "  --temp T              temperature; 0 (default) is greedy\n"
            "  --top-k K             keep the K most likely tokens (default 0: all)\n"
            "  --top-p P             keep the smallest most-likely set with mass >= P (default 1)\n"
            "  --min-p P             keep tokens at least P times as likely as the best\n"
            "                        (default 0)\n"
            "  --seed S              seed of the sampler (default 1)\n"
            "\n"
            "exit status: 0 success, 1 bad input (plan, weights, token ids, text, prompt longer\n"
            "than the context), 2 bad usage\n",
            gp_chat_format_list());
}

static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "gplan-run: %s%s%s\ntry 'gplan-run --help'\n", msg, arg ? ": " : "",
            arg ? arg : "");
    return EXIT_USAGE;
}

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_ids(const char *s, options *o)
{
    int64_t n = 1;
    for (const char *c = s; *c; c++)
        n += *c == ',';
    o->prompt = malloc((size_t)n * sizeof *o->prompt);
    if (!o->prompt)
        return -1;
    o->n_prompt = 0;
    const char *p = s;
    for (;;) {
        char buf[32];
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int64_t v;
        if (len == 0 || len >= sizeof buf)
            return -1;
        memcpy(buf, p, len);
        buf[len] = '\0';
        if (parse_i64(buf, INT32_MIN, INT32_MAX, &v))
            return -1;
        o->prompt[o->n_prompt++] = (int32_t)v;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

static int parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno || end == s || *end || !isfinite(*out) ? -1 : 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->backend = "cpu";
    o->n_gen = 16;
    o->eos = -1;
    o->sampling = gp_sampler_defaults();
    o->lora_scale = 1.0;
    int lora_scale_set = 0, lora_mode_set = 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = cores < 1 ? 1 : cores > 64 ? 64 : (int)cores;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        double d;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(EXIT_OK);
        } else if (!strcmp(a, "--version")) {
            printf("gplan-run %s\n", GPLAN_VERSION_STRING);
            exit(EXIT_OK);
        } else if (!strcmp(a, "--ignore-eos")) {
            o->ignore_eos = 1;
        } else if (!strcmp(a, "--stats")) {
            o->stats = 1;
        } else if (!strcmp(a, "--loop")) {
            o->loop = 1;
        } else if (!strcmp(a, "--logits-all")) {
            o->logits_all = 1;
        } else if (!strcmp(a, "--chat")) {
            o->chat = 1;
        } else if (a[0] == '-' && a[1] != '\0') {
            static const char *const with_value[] = {
                "--weights", "--random-weights", "--backend", "--threads", "--prompt-ids", "-n",
                "--eos", "--temp", "--seed", "--logits-out", "--lora", "--lora-scale",
                "--lora-mode", "--lora-merge-plan", "--prompt", "--prompt-file", "--tokenizer",
                "--stop", "--system", "--chat-format", "--top-k", "--top-p", "--min-p",
                "--repeat-penalty", "--repeat-last-n"};
            int known = 0;
            for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
                known |= !strcmp(a, with_value[k]);
            if (!known)
                return usage_error("unknown option", a);
            if (!v)
                return usage_error("missing value for", a);
            i++;
            if (!strcmp(a, "--weights")) {
                o->weights = v;
            } else if (!strcmp(a, "--random-weights")) {
                if (parse_u64(v, &o->weights_seed))
                    return usage_error("bad --random-weights seed", v);
                o->random_weights = 1;
            } else if (!strcmp(a, "--backend")) {
                o->backend = v;
            } else if (!strcmp(a, "--threads")) {
                if (parse_i64(v, 1, 256, &x))
                    return usage_error("--threads needs 1..256", v);
                o->threads = (int)x;
            } else if (!strcmp(a, "--prompt-ids")) {
                free(o->prompt);
                o->prompt = NULL;
                if (parse_ids(v, o))
                    return usage_error("bad --prompt-ids (comma-separated integers)", v);
            } else if (!strcmp(a, "-n")) {
                if (parse_i64(v, 0, INT64_MAX / 2, &x))
                    return usage_error("bad -n", v);
                o->n_gen = x;
            } else if (!strcmp(a, "--eos")) {
                if (parse_i64(v, 0, INT32_MAX, &x))
                    return usage_error("bad --eos", v);
                o->eos = x;
            } else if (!strcmp(a, "--temp")) {
                if (parse_double(v, &d) || !(d >= 0))
                    return usage_error("bad --temp (a number >= 0)", v);
                o->sampling.temp = d;
            } else if (!strcmp(a, "--seed")) {
                if (parse_u64(v, &o->sampling.seed))
                    return usage_error("bad --seed", v);
            } else if (!strcmp(a, "--top-k")) {
                if (parse_i64(v, 0, INT32_MAX, &x))
                    return usage_error("bad --top-k (an integer >= 0)", v);
                o->sampling.top_k = x;
            } else if (!strcmp(a, "--top-p")) {
                if (parse_double(v, &d) || !(d > 0 && d <= 1))
                    return usage_error("bad --top-p (a number in (0, 1])", v);
                o->sampling.top_p = d;
            } else if (!strcmp(a, "--min-p")) {
                if (parse_double(v, &d) || !(d >= 0 && d <= 1))
                    return usage_error("bad --min-p (a number in [0, 1])", v);
                o->sampling.min_p = d;
            } else if (!strcmp(a, "--repeat-penalty")) {
                if (parse_double(v, &d) || !(d > 0))
                    return usage_error("bad --repeat-penalty (a number > 0)", v);
                o->sampling.repeat_penalty = d;
            } else if (!strcmp(a, "--repeat-last-n")) {
                if (parse_i64(v, 0, INT32_MAX, &x))
                    return usage_error("bad --repeat-last-n (an integer >= 0)", v);
                o->sampling.repeat_last_n = x;
            } else if (!strcmp(a, "--prompt")) {
                o->text = v;
            } else if (!strcmp(a, "--prompt-file")) {
                o->text_file = v;
            } else if (!strcmp(a, "--tokenizer")) {
                o->tokenizer = v;
            } else if (!strcmp(a, "--stop")) {
                if (!*v)
                    return usage_error("--stop needs a non-empty string", NULL);
                if (o->n_stops == (int)(sizeof o->stops / sizeof o->stops[0]))
                    return usage_error("more than 16 --stop strings", NULL);
                o->stops[o->n_stops++] = v;
            } else if (!strcmp(a, "--system")) {
                o->system = v;
            } else if (!strcmp(a, "--chat-format")) {
                gp_chat_format f;
                if (gp_chat_format_parse(v, &f)) {
                    fprintf(stderr, "gplan-run: unknown --chat-format: %s (formats: %s)\n"
                            "try 'gplan-run --help'\n", v, gp_chat_format_list());
                    return EXIT_USAGE;
                }
                o->chat_format = v;
            } else if (!strcmp(a, "--logits-out")) {
                o->logits_out = v;
            } else if (!strcmp(a, "--lora")) {
                o->lora = v;
            } else if (!strcmp(a, "--lora-merge-plan")) {
                o->lora_merge_plan = v;
            } else if (!strcmp(a, "--lora-mode")) {
                if (strcmp(v, "merge") && strcmp(v, "runtime"))
                    return usage_error("bad --lora-mode (merge or runtime)", v);
                o->lora_runtime = !strcmp(v, "runtime");
                lora_mode_set = 1;
            } else if (!strcmp(a, "--lora-scale")) {
                if (parse_double(v, &o->lora_scale))
                    return usage_error("bad --lora-scale (a number)", v);
                lora_scale_set = 1;
            }
        } else if (!o->plan) {
            o->plan = a;
        } else {
            return usage_error("unexpected argument", a);
        }
    }
    if (!o->plan)
        return usage_error("no plan given", NULL);
    if (!o->weights == !o->random_weights)
        return usage_error("give exactly one of --weights and --random-weights", NULL);
    if (o->logits_all && !o->logits_out)
        return usage_error("--logits-all needs --logits-out FILE", NULL);
    if ((lora_scale_set || lora_mode_set || o->lora_merge_plan) && !o->lora)
        return usage_error("--lora-scale, --lora-mode and --lora-merge-plan need --lora", NULL);
    if (o->lora && !o->lora_runtime && !o->lora_merge_plan)
        return usage_error("--lora in merge mode needs --lora-merge-plan FILE (gplan-compile "
                           "MODEL -D lora_r=R --lora-merge -o FILE)", NULL);
    if (o->lora_runtime && o->lora_merge_plan)
        return usage_error("--lora-merge-plan is for merge mode, not --lora-mode runtime", NULL);
    int texts = !!o->text + !!o->text_file + !!o->chat + !!o->prompt;
    if (texts > 1)
        return usage_error("give at most one of --prompt-ids, --prompt, --prompt-file and --chat",
                           NULL);
    int text_mode = o->text || o->text_file || o->chat;
    if (!text_mode && (o->n_stops || o->tokenizer))
        return usage_error("--stop and --tokenizer need --prompt, --prompt-file or --chat", NULL);
    if (!o->chat && (o->system || o->chat_format))
        return usage_error("--system and --chat-format need --chat", NULL);
    if (o->loop && text_mode)
        return usage_error("--loop is for --prompt-ids (text stops at the end of the context)",
                           NULL);
    if (!o->prompt && !text_mode) {
        o->prompt = malloc(sizeof *o->prompt);
        if (!o->prompt)
            return usage_error("out of memory", NULL);
        o->prompt[0] = 0;
        o->n_prompt = 1;
    }
    return -1;
}

/* ---- measurements ---- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* ---- running ---- */

typedef struct {
    gp_session *s;
    gp_model_info info;
    FILE *logits_out;
    int logits_all;          /* write every row of an eval's logits, not only the last */
    gp_sampler *sampler;
    int32_t *pos;            /* [max_tokens] positions of one eval */
    int64_t ctx;             /* positions the KV cache holds (INT64_MAX: no limit) */
    int64_t next;            /* the last row's argmax from the plan's "next" output, or -1 */
    int64_t evals_prompt, evals_gen, tokens_prompt, tokens_gen;
    double ms_prompt, ms_gen;
} runner;

/* One eval of n tokens at positions pos0 .. pos0 + n - 1; leaves the last logits row in *row. */
static int eval_chunk(runner *r, const int32_t *ids, int64_t n, int64_t pos0, const float **row,
                      int is_prompt)
{
    for (int64_t i = 0; i < n; i++)
        r->pos[i] = (int32_t)(pos0 + i);
    /* set_tokens asks for the last row's logits only when the plan has a rows input. */
    if (gp_session_set_tokens(r->s, ids, r->pos, n) ||
        (r->logits_all && r->info.rows && gp_session_set_rows(r->s, NULL, n))) {
        fprintf(stderr, "gplan-run: %s\n", gp_session_error(r->s));
        return -1;
    }
    double t0 = now_ms();
    gp_alloc_interpose_eval(1);
    int rc = gp_session_eval(r->s);
    gp_alloc_interpose_eval(0);
    double dt = now_ms() - t0;
    if (rc) {
        fprintf(stderr, "gplan-run: %s\n", gp_session_error(r->s));
        return -1;
    }
    if (is_prompt) {
        r->evals_prompt++;
        r->tokens_prompt += n;
        r->ms_prompt += dt;
    } else {
        r->evals_gen++;
        r->tokens_gen += n;
        r->ms_gen += dt;
    }
    /* logits [R, vocab]: R = 1 (the last token) with a rows input, else every token's. */
    gp_tensor_info li;
    const float *logits = gp_session_output(r->s, r->info.logits, &li);
    int64_t nrows = li.ndim >= 1 ? li.ne[0] : 1;
    *row = logits + (nrows - 1) * r->info.vocab;
    gp_tensor_info ni;
    const int32_t *next = gp_session_output(r->s, "next", &ni);
    r->next = next && ni.ndim == 1 && ni.ne[0] == nrows && ni.bytes == (size_t)nrows * 4
                  ? next[nrows - 1]
                  : -1;
    const float *out = r->logits_all ? logits : *row;
    size_t nout = (size_t)(r->logits_all ? nrows : 1) * (size_t)r->info.vocab;
    if (r->logits_out && fwrite(out, sizeof(float), nout, r->logits_out) != nout) {
        fprintf(stderr, "gplan-run: cannot write the logits file\n");
        return -1;
    }
    return 0;
}

/* ids[n] at positions pos0.., in evals of at most the planned tokens each; each id is seen by the
 * sampler's repetition window. */
static int eval_prompt(runner *r, const int32_t *ids, int64_t n, int64_t pos0, const float **row)
{
    for (int64_t i = 0; i < n; i += r->info.max_tokens) {
        int64_t k = n - i < r->info.max_tokens ? n - i : r->info.max_tokens;
        if (eval_chunk(r, ids + i, k, pos0 + i, row, 1))
            return -1;
    }
    for (int64_t i = 0; i < n; i++)
        gp_sampler_accept(r->sampler, ids[i]);
    return 0;
}

/* The next token from the last row: the plan's own argmax when the pick is greedy. */
static int32_t next_token(runner *r, const float *row)
{
    if (gp_sampler_is_greedy(r->sampler) && r->next >= 0 && r->next < r->info.vocab)
        return (int32_t)r->next;
    return gp_sampler_sample(r->sampler, row);
}

static void context_message(const runner *r)
{
    fprintf(stderr, "gplan-run: reached the planned context (%lld positions); stopping "
            "(--loop starts again at position 0)\n", (long long)r->ctx);
}

/* --prompt-ids: ids in, ids out, as they come. */
static int run_ids(runner *r, const options *o, long *rss_start)
{
    const float *row = NULL;
    if (eval_prompt(r, o->prompt, o->n_prompt, 0, &row))
        return -1;
    int64_t n_past = o->n_prompt;
    *rss_start = rss_kib();
    gp_alloc_interpose_generation(1);
    int32_t tok = o->n_gen > 0 ? next_token(r, row) : 0;
    int64_t made = 0;
    int at_context = 0;
    while (made < o->n_gen) {
        printf("%s%d", made ? " " : "", tok);
        fflush(stdout);
        made++;
        if ((tok == o->eos && !o->ignore_eos) || made == o->n_gen)
            break;
        if (n_past >= r->ctx) {
            if (!o->loop) {
                at_context = 1;
                break;
            }
            /* A new sequence from position 0, continuing from the last token. */
            if (gp_session_reset(r->s)) {
                fprintf(stderr, "gplan-run: %s\n", gp_session_error(r->s));
                return -1;
            }
            n_past = 0;
        }
        if (eval_chunk(r, &tok, 1, n_past, &row, 0)) {
            gp_alloc_interpose_generation(0);
            return -1;
        }
        gp_sampler_accept(r->sampler, tok);
        n_past++;
        tok = next_token(r, row);
    }
    gp_alloc_interpose_generation(0);
    if (made)
        printf("\n");
    fflush(stdout); /* before the messages and stats on stderr */
    if (at_context)
        context_message(r);
    return 0;
}

/* ---- text ---- */

/* The offset of the first byte that is not part of well-formed UTF-8 (no overlong forms,
 * surrogates or code points past U+10FFFF), or -1 when all of it is. */
static int64_t utf8_invalid_at(const char *text, size_t n)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || (len == 2 && c < 0xc2) || i + len > n)
            return (int64_t)i;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xc0) != 0x80)
                return (int64_t)i;
        unsigned c1 = len > 1 ? s[i + 1] : 0;
        if ((c == 0xe0 && c1 < 0xa0) || (c == 0xf0 && c1 < 0x90) || /* overlong */
            (c == 0xed && c1 >= 0xa0) ||                              /* surrogates */
            c > 0xf4 || (c == 0xf4 && c1 >= 0x90))                    /* past U+10FFFF */
            return (int64_t)i;
        i += len;
    }
    return -1;
}

static char *read_text_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "gplan-run: %s: cannot open: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            fprintf(stderr, "gplan-run: %s: out of memory\n", path);
            return NULL;
        }
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        char *more = realloc(buf, cap * 2);
        if (!more)
            free(buf);
        buf = more;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "gplan-run: %s: cannot read\n", path);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int is_dir(const char *path)
{
    struct stat st;
    return !stat(path, &st) && S_ISDIR(st.st_mode);
}

static int is_file(const char *path)
{
    struct stat st;
    return !stat(path, &st) && S_ISREG(st.st_mode);
}

/* --tokenizer, else the weights when they are a .gguf, else the tokenizer.json in the weights'
 * folder (or the folder the weights file is in). */
static gp_tok *open_tokenizer(const options *o, char *err, size_t err_len)
{
    char path[4096];
    const char *use = o->tokenizer;
    if (!use && o->weights) {
        size_t n = strlen(o->weights);
        if (n >= 5 && !strcmp(o->weights + n - 5, ".gguf")) {
            use = o->weights;
        } else if (is_dir(o->weights)) {
            snprintf(path, sizeof path, "%s/tokenizer.json", o->weights);
            use = is_file(path) ? o->weights : NULL;
        } else {
            const char *slash = strrchr(o->weights, '/');
            int dir_len = !slash || slash == o->weights ? 1 : (int)(slash - o->weights);
            snprintf(path, sizeof path, "%.*s/tokenizer.json", dir_len, slash ? o->weights : ".");
            if (is_file(path)) {
                snprintf(path, sizeof path, "%.*s", dir_len, slash ? o->weights : ".");
                use = path;
            }
        }
    }
    if (!use) {
        snprintf(err, err_len, "%s needs a tokenizer: give --tokenizer PATH (a .gguf, a "
                 "tokenizer.json or a folder holding one)%s", o->chat ? "--chat" : "the prompt",
                 o->weights ? "; none was found beside the weights" : "");
        return NULL;
    }
    return gp_tok_load(use, err, err_len);
}

/* Encodes text with special tokens' texts as their ids; add_special as the vocabulary says (BOS).
 * Returns the count (may exceed cap: nothing past cap is written), -1 with the message printed. */
static int64_t encode_text(const gp_tok *t, const char *text, size_t n, int add_special,
                           int32_t *ids, int64_t cap, const char *what)
{
    int64_t bad = utf8_invalid_at(text, n);
    if (bad >= 0) {
        fprintf(stderr, "gplan-run: %s: invalid UTF-8 at byte %lld\n", what, (long long)bad);
        return -1;
    }
    char err[1024];
    int64_t k = gp_tok_encode(t, text, n, add_special, 1, ids, cap, err, sizeof err);
    if (k < 0)
        fprintf(stderr, "gplan-run: %s: %s\n", what, err);
    return k;
}

/* Streamed text: whole UTF-8 characters (gp_tok_stream), with text that may be the start of a stop
 * string held back until it is known not to be one. No allocation after text_out_init. */
typedef struct {
    const gp_tok *tok;
    gp_tok_stream st;
    const char *const *stops; /* [n_stops] */
    int n_stops;
    size_t max_stop;
    size_t cap;   /* gp_tok_stream_cap: the most one token's text can be */
    char *hold;   /* [max_stop + cap] text not yet printed: it may begin a stop string; then
                     piece [cap], one token's text, in the same allocation */
    char *piece;
    size_t n_hold;
    int stopped;  /* a stop string came: nothing more is printed */
} text_out;

static int text_out_init(text_out *t, const gp_tok *tok, const options *o)
{
    memset(t, 0, sizeof *t);
    t->tok = tok;
    gp_tok_stream_init(&t->st);
    t->stops = o->stops;
    t->n_stops = o->n_stops;
    for (int i = 0; i < o->n_stops; i++)
        if (strlen(o->stops[i]) > t->max_stop)
            t->max_stop = strlen(o->stops[i]);
    t->cap = gp_tok_stream_cap(tok);
    t->hold = malloc(t->max_stop + 2 * t->cap);
    if (!t->hold)
        fprintf(stderr, "gplan-run: out of memory\n");
    t->piece = t->hold ? t->hold + t->max_stop + t->cap : NULL;
    return t->hold ? 0 : -1;
}

static void text_out_restart(text_out *t)
{
    gp_tok_stream_init(&t->st);
    t->n_hold = 0;
    t->stopped = 0;
}

/* Appends n <= cap bytes; prints what can no longer be part of a stop string. */
static void text_out_put(text_out *t, const char *s, size_t n)
{
    if (t->stopped || !n)
        return;
    if (!t->n_stops) {
        fwrite(s, 1, n, stdout);
        return;
    }
    memcpy(t->hold + t->n_hold, s, n);
    t->n_hold += n;
    size_t cut = SIZE_MAX;
    for (int i = 0; i < t->n_stops; i++) {
        const char *at = memmem(t->hold, t->n_hold, t->stops[i], strlen(t->stops[i]));
        if (at && (size_t)(at - t->hold) < cut)
            cut = (size_t)(at - t->hold);
    }
    if (cut != SIZE_MAX) {
        fwrite(t->hold, 1, cut, stdout);
        t->n_hold = 0;
        t->stopped = 1;
        return;
    }
    /* Keep the longest end of the held text that begins some stop string. */
    size_t keep = 0;
    for (size_t k = t->n_hold < t->max_stop ? t->n_hold : t->max_stop - 1; k > 0 && !keep; k--)
        for (int i = 0; i < t->n_stops && !keep; i++)
            if (strlen(t->stops[i]) > k && !memcmp(t->hold + t->n_hold - k, t->stops[i], k))
                keep = k;
    fwrite(t->hold, 1, t->n_hold - keep, stdout);
    memmove(t->hold, t->hold + t->n_hold - keep, keep);
    t->n_hold = keep;
}

static void text_out_token(text_out *t, int32_t id)
{
    int n = gp_tok_stream_push(t->tok, &t->st, id, t->piece, t->cap);
    if (n > 0)
        text_out_put(t, t->piece, (size_t)n);
    fflush(stdout);
}

/* The end of a reply: what the stream and the stop check still hold. */
static void text_out_finish(text_out *t)
{
    char buf[16];
    int n = gp_tok_stream_flush(&t->st, buf, sizeof buf);
    if (n > 0)
        text_out_put(t, buf, (size_t)n);
    if (!t->stopped)
        fwrite(t->hold, 1, t->n_hold, stdout);
    t->n_hold = 0;
    fflush(stdout);
}

static int ends_generation(const options *o, const gp_tok *tok, int32_t id)
{
    return !o->ignore_eos && (id == o->eos || gp_tok_is_eog(tok, id));
}

/* --prompt / --prompt-file: text in, streamed text out. */
static int run_text(runner *r, const options *o, const gp_tok *tok, long *rss_start)
{
    size_t len = 0;
    char *text = o->text_file ? read_text_file(o->text_file, &len) : NULL;
    if (o->text_file && !text)
        return -1;
    if (!text)
        len = strlen(o->text);
    const char *what = o->text_file ? o->text_file : "--prompt";
    const char *src = text ? text : o->text;
    int32_t *ids = NULL;
    text_out out;
    out.hold = NULL;
    int rc = -1;
    int64_t n = encode_text(tok, src, len, 1, NULL, 0, what);
    if (n < 0)
        goto done;
    if (n == 0) {
        fprintf(stderr, "gplan-run: %s: the prompt is empty (no tokens)\n", what);
        goto done;
    }
    if (n > r->ctx) {
        fprintf(stderr, "gplan-run: the prompt has %lld tokens, more than the planned context of "
                "%lld positions\n", (long long)n, (long long)r->ctx);
        goto done;
    }
    ids = malloc((size_t)n * sizeof *ids);
    if (!ids || encode_text(tok, src, len, 1, ids, n, what) != n || text_out_init(&out, tok, o))
        goto done;
    const float *row = NULL;
    if (eval_prompt(r, ids, n, 0, &row))
        goto done;
    int64_t n_past = n;
    *rss_start = rss_kib();
    int64_t made = 0;
    int at_context = 0, failed = 0;
    gp_alloc_interpose_generation(1);
    int32_t id = o->n_gen > 0 ? next_token(r, row) : 0;
    while (made < o->n_gen && !ends_generation(o, tok, id)) {
        text_out_token(&out, id);
        made++;
        if (out.stopped || made == o->n_gen)
            break;
        if (n_past >= r->ctx) {
            at_context = 1;
            break;
        }
        if ((failed = eval_chunk(r, &id, 1, n_past, &row, 0)))
            break;
        gp_sampler_accept(r->sampler, id);
        n_past++;
        id = next_token(r, row);
    }
    text_out_finish(&out);
    printf("\n");
    fflush(stdout);
    gp_alloc_interpose_generation(0);
    if (failed)
        goto done;
    if (at_context)
        fprintf(stderr, "gplan-run: reached the planned context (%lld positions); stopping\n",
                (long long)r->ctx);
    rc = 0;
done:
    free(out.hold);
    free(ids);
    free(text);
    return rc;
}

/* ---- chat ---- */

typedef struct {
    gp_chat_template tpl;
    char bos[256], eos[256]; /* the vocabulary's BOS/EOS texts ("" when none) */
    gp_chat_msg *msgs;       /* [n_msgs], the contents owned (malloc'd) */
    size_t n_msgs, cap_msgs;
    int32_t *ids;            /* [ctx] the ids in the KV cache, at positions 0 .. n_past - 1 */
    int64_t n_past;
    int32_t *fresh;          /* [ctx] the ids a turn adds */
    char *text;              /* [text_cap] the conversation's text that the cache holds */
    size_t n_text, text_cap;
    size_t max_piece;        /* the longest token text of the vocabulary */
} chat;

static int chat_push(chat *c, const char *role, const char *content, size_t n)
{
    if (c->n_msgs == c->cap_msgs) {
        size_t cap = c->cap_msgs ? c->cap_msgs * 2 : 8;
        gp_chat_msg *m = realloc(c->msgs, cap * sizeof *m);
        if (!m)
            return -1;
        c->msgs = m;
        c->cap_msgs = cap;
    }
    char *copy = malloc(n + 1);
    if (!copy)
        return -1;
    memcpy(copy, content, n);
    copy[n] = '\0';
    c->msgs[c->n_msgs].role = role;
    c->msgs[c->n_msgs].content = copy;
    c->n_msgs++;
    return 0;
}

static void chat_pop(chat *c)
{
    free((char *)c->msgs[--c->n_msgs].content);
}

/* Keeps the system message (if any) and the last one. */
static void chat_keep_last(chat *c)
{
    size_t first = c->n_msgs && !strcmp(c->msgs[0].role, "system");
    for (size_t i = first; i + 1 < c->n_msgs; i++)
        free((char *)c->msgs[i].content);
    c->msgs[first] = c->msgs[c->n_msgs - 1];
    c->n_msgs = first + 1;
}

/* The conversation formatted with the assistant's prompt, in *out (malloc'd); its length, or -1
 * with the message printed. */
static int64_t chat_format(chat *c, char **out)
{
    char err[512];
    const char *bos = c->bos[0] ? c->bos : NULL, *eos = c->eos[0] ? c->eos : NULL;
    int64_t n = gp_chat_apply(&c->tpl, c->msgs, c->n_msgs, 1, bos, eos, NULL, 0, err, sizeof err);
    if (n < 0) {
        fprintf(stderr, "gplan-run: %s\n", err);
        return -1;
    }
    if (!(*out = malloc((size_t)n + 1))) {
        fprintf(stderr, "gplan-run: out of memory\n");
        return -1;
    }
    gp_chat_apply(&c->tpl, c->msgs, c->n_msgs, 1, bos, eos, *out, (size_t)n + 1, err, sizeof err);
    return n;
}

/* The ids of the formatted conversation f[n] that the cache lacks, into c->fresh: encoded from
 * where the cache's text ends when f continues it (the usual case), else all of f, the cache then
 * kept up to the first id that differs (n_past lowered). The count (may exceed ctx), or -1. */
static int64_t chat_fresh(chat *c, const gp_tok *tok, int64_t ctx, const char *f, size_t n,
                          const char *what)
{
    if (c->n_past > 0 && c->n_text < n && !memcmp(f, c->text, c->n_text))
        return encode_text(tok, f + c->n_text, n - c->n_text, 0, c->fresh, ctx, what);
    int64_t k = encode_text(tok, f, n, 0, c->fresh, ctx, what);
    if (k < 0 || k > ctx)
        return k;
    int64_t same = 0;
    while (same < k && same < c->n_past && c->fresh[same] == c->ids[same])
        same++;
    if (same == k && same > 0) /* one id at least is evaluated: its logits start the reply */
        same--;
    c->n_past = same;
    memmove(c->fresh, c->fresh + same, (size_t)(k - same) * sizeof *c->fresh);
    return k - same;
}

/* One user turn and the reply. 0, 1 when the turn was refused (bad input, too long), -1 on a
 * failure that ends the chat. */
static int chat_turn(chat *c, runner *r, const options *o, const gp_tok *tok, text_out *out,
                     const char *line, size_t len, int turn)
{
    char what[64];
    snprintf(what, sizeof what, "stdin line %d", turn);
    int64_t bad = utf8_invalid_at(line, len);
    if (bad >= 0) {
        fprintf(stderr, "gplan-run: %s: invalid UTF-8 at byte %lld; turn skipped\n", what,
                (long long)bad);
        return 1;
    }
    if (chat_push(c, "user", line, len)) {
        fprintf(stderr, "gplan-run: out of memory\n");
        return -1;
    }
    char *f = NULL;
    int64_t n = chat_format(c, &f), k = -1;
    if (n >= 0)
        k = chat_fresh(c, tok, r->ctx, f, (size_t)n, what);
    if (n < 0 || (k < 0 && c->n_past == 0)) {
        free(f);
        chat_pop(c);
        return n < 0 ? -1 : 1;
    }
    if (k < 0 || c->n_past + k >= r->ctx) {
        /* Start over: the system prompt and this turn, at position 0. */
        fprintf(stderr, "gplan-run: the context is full (%lld positions): starting over with the "
                "system prompt and this turn\n", (long long)r->ctx);
        chat_keep_last(c);
        free(f);
        f = NULL;
        if ((n = chat_format(c, &f)) < 0 || gp_session_reset(r->s)) {
            free(f);
            return -1;
        }
        c->n_past = 0;
        c->n_text = 0;
        k = encode_text(tok, f, (size_t)n, 0, c->fresh, r->ctx, what);
        if (k < 0 || k >= r->ctx) {
            if (k >= 0)
                fprintf(stderr, "gplan-run: %s: the turn needs %lld tokens, more than the %lld "
                        "positions of the context; turn skipped\n", what, (long long)k,
                        (long long)r->ctx);
            free(f);
            chat_pop(c);
            return 1;
        }
    }
    if (k == 0) { /* only an empty conversation encodes to nothing */
        fprintf(stderr, "gplan-run: %s: the conversation encodes to no tokens; turn skipped\n",
                what);
        free(f);
        chat_pop(c);
        return 1;
    }
    const float *row = NULL;
    int64_t cached = c->n_past;
    if (eval_prompt(r, c->fresh, k, c->n_past, &row)) {
        free(f);
        return -1;
    }
    memcpy(c->ids + c->n_past, c->fresh, (size_t)k * sizeof *c->ids);
    c->n_past += k;
    /* Room for the reply's text before it starts: nothing is allocated per token. */
    size_t need = (size_t)n + (size_t)(r->ctx - c->n_past + 1) * c->max_piece + 1;
    if (need > c->text_cap) {
        char *t = realloc(c->text, need);
        if (!t) {
            free(f);
            fprintf(stderr, "gplan-run: out of memory\n");
            return -1;
        }
        c->text = t;
        c->text_cap = need;
    }
    memcpy(c->text, f, (size_t)n);
    c->n_text = (size_t)n;
    free(f);

    size_t reply_at = c->n_text;
    text_out_restart(out);
    int64_t made = 0;
    int full = 0;
    gp_alloc_interpose_generation(1);
    int32_t id = o->n_gen > 0 ? next_token(r, row) : 0;
    while (made < o->n_gen && !ends_generation(o, tok, id)) {
        text_out_token(out, id);
        made++;
        if (c->n_past >= r->ctx) {
            full = 1;
            break;
        }
        /* Every printed token goes into the cache, so the next turn continues from it. */
        if (eval_chunk(r, &id, 1, c->n_past, &row, 0)) {
            gp_alloc_interpose_generation(0);
            return -1;
        }
        gp_sampler_accept(r->sampler, id);
        c->ids[c->n_past++] = id;
        int pn = gp_tok_piece(tok, id, 1, c->text + c->n_text, c->text_cap - c->n_text);
        if (pn > 0 && (size_t)pn < c->text_cap - c->n_text)
            c->n_text += (size_t)pn;
        if (out->stopped)
            break;
        id = next_token(r, row);
    }
    text_out_finish(out);
    printf("\n");
    fflush(stdout);
    gp_alloc_interpose_generation(0);
    if (full)
        fprintf(stderr, "gplan-run: the reply reached the end of the context (%lld positions); "
                "the next turn starts over\n", (long long)r->ctx);
    if (o->stats)
        fprintf(stderr, "stats: turn %d: %lld tokens evaluated (%lld already in the cache), %lld "
                "generated\n", turn, (long long)k, (long long)cached, (long long)made);
    if (chat_push(c, "assistant", c->text + reply_at, c->n_text - reply_at)) {
        fprintf(stderr, "gplan-run: out of memory\n");
        return -1;
    }
    return 0;
}

static int run_chat(runner *r, const options *o, const gp_tok *tok)
{
    chat c;
    memset(&c, 0, sizeof c);
    text_out out;
    out.hold = NULL;
    char *line = NULL;
    size_t line_cap = 0;
    int rc = -1, refused = 0;
    if (o->chat_format) {
        gp_chat_format f;
        gp_chat_format_parse(o->chat_format, &f);
        c.tpl = gp_chat_builtin(f);
    } else {
        char err[512];
        const char *tmpl = gp_tok_chat_template(tok);
        if (!tmpl) {
            fprintf(stderr, "gplan-run: the tokenizer has no chat template: choose one with "
                    "--chat-format NAME (%s)\n", gp_chat_format_list());
            return -1;
        }
        if (gp_chat_detect(tmpl, &c.tpl, err, sizeof err)) {
            fprintf(stderr, "gplan-run: %s\n", err);
            return -1;
        }
    }
    if (r->ctx == INT64_MAX) {
        fprintf(stderr, "gplan-run: --chat needs a plan with a KV cache (an attention context)\n");
        return -1;
    }
    int32_t bos = gp_tok_bos(tok), eos = gp_tok_eos(tok);
    int nb = bos >= 0 ? gp_tok_piece(tok, bos, 1, c.bos, sizeof c.bos) : -1;
    int ne = eos >= 0 ? gp_tok_piece(tok, eos, 1, c.eos, sizeof c.eos) : -1;
    c.bos[nb > 0 && (size_t)nb < sizeof c.bos ? nb : 0] = '\0';
    c.eos[ne > 0 && (size_t)ne < sizeof c.eos ? ne : 0] = '\0';
    for (int32_t id = 0; id < gp_tok_vocab_size(tok); id++) {
        char buf[8];
        int pn = gp_tok_piece(tok, id, 1, buf, sizeof buf);
        if (pn > 0 && (size_t)pn > c.max_piece)
            c.max_piece = (size_t)pn;
    }
    c.ids = malloc((size_t)r->ctx * sizeof *c.ids);
    c.fresh = malloc((size_t)r->ctx * sizeof *c.fresh);
    if (!c.ids || !c.fresh || text_out_init(&out, tok, o) ||
        (o->system && chat_push(&c, "system", o->system, strlen(o->system)))) {
        fprintf(stderr, "gplan-run: out of memory\n");
        goto done;
    }
    int interactive = isatty(STDIN_FILENO);
    for (int turn = 1;; turn++) {
        if (interactive)
            fprintf(stderr, "> ");
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0)
            break;
        size_t len = (size_t)got;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        if (!len) {
            turn--;
            continue;
        }
        int t = chat_turn(&c, r, o, tok, &out, line, len, turn);
        if (t < 0)
            goto done;
        refused |= t;
    }
    rc = refused;
done:
    free(line);
    free(out.hold);
    while (c.n_msgs)
        chat_pop(&c);
    free(c.msgs);
    free(c.ids);
    free(c.fresh);
    free(c.text);
    return rc;
}

int main(int argc, char **argv)
{
    gp_alloc_interpose_on();
    /* stdout's buffer, static: glibc would allocate one at the first token printed. */
    static char stdout_buf[1 << 16];
    setvbuf(stdout, stdout_buf, _IOFBF, sizeof stdout_buf);
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) {
        free(o.prompt);
        return rc;
    }
    char err[4096];
    int status = EXIT_INPUT;
    gp_model *m = NULL;
    gp_tok *tok = NULL;
    runner r;
    memset(&r, 0, sizeof r);
    r.next = -1;
    int text_mode = o.text || o.text_file || o.chat;

    m = gp_model_load(o.plan, err, sizeof err);
    if (!m) {
        fprintf(stderr, "gplan-run: %s\n", err);
        goto done;
    }
    gp_model_get_info(m, &r.info);
    if (!r.info.tokens || !r.info.positions || !r.info.logits || r.info.vocab < 1) {
        fprintf(stderr, "gplan-run: %s: not a language model (needs a token-id input read by "
                "get_rows, a positions input and a logits output)\n", o.plan);
        goto done;
    }
    if (text_mode) {
        if (!(tok = open_tokenizer(&o, err, sizeof err))) {
            fprintf(stderr, "gplan-run: %s\n", err);
            goto done;
        }
        if (gp_tok_vocab_size(tok) > r.info.vocab) {
            fprintf(stderr, "gplan-run: the tokenizer has %d tokens, more than the plan's "
                    "vocabulary of %lld\n", gp_tok_vocab_size(tok), (long long)r.info.vocab);
            goto done;
        }
    }
    int rcw = o.random_weights ? gp_model_random_weights(m, o.weights_seed, err, sizeof err)
                               : gp_model_bind_weights(m, o.weights, err, sizeof err);
    int rcl = 0;
    if (!rcw && o.lora)
        rcl = o.lora_runtime ? gp_model_bind_adapter(m, o.lora, o.lora_scale, err, sizeof err)
                             : gp_model_apply_lora(m, o.lora, o.lora_merge_plan, o.lora_scale,
                                                   err, sizeof err);
    if (rcw || rcl) {
        fprintf(stderr, "gplan-run: %s\n", err);
        goto done;
    }
    gp_model_get_info(m, &r.info);
    r.ctx = r.info.context > 0 ? r.info.context : INT64_MAX;
    for (int64_t i = 0; i < o.n_prompt; i++) {
        if (o.prompt[i] < 0 || o.prompt[i] >= r.info.vocab) {
            fprintf(stderr, "gplan-run: prompt token %lld is %d, outside the vocabulary [0, %lld)\n",
                    (long long)i, o.prompt[i], (long long)r.info.vocab);
            goto done;
        }
    }
    if (o.n_prompt > r.ctx) {
        fprintf(stderr, "gplan-run: the prompt has %lld tokens, more than the planned context of "
                "%lld positions\n", (long long)o.n_prompt, (long long)r.ctx);
        goto done;
    }
    r.logits_all = o.logits_all;
    if (o.logits_out && !(r.logits_out = fopen(o.logits_out, "wb"))) {
        fprintf(stderr, "gplan-run: %s: cannot open: %s\n", o.logits_out, strerror(errno));
        goto done;
    }
    gp_session_opts so = {o.backend, o.threads, 0};
    r.s = gp_session_new(m, &so, err, sizeof err);
    if (!r.s) {
        fprintf(stderr, "gplan-run: %s\n", err);
        goto done;
    }
    r.sampler = gp_sampler_new(r.info.vocab, &o.sampling, err, sizeof err);
    r.pos = malloc((size_t)r.info.max_tokens * sizeof *r.pos);
    if (!r.sampler || !r.pos) {
        fprintf(stderr, "gplan-run: %s\n", r.sampler ? "out of memory" : err);
        goto done;
    }

    long rss_start = o.chat ? rss_kib() : -1;
    rc = o.chat ? run_chat(&r, &o, tok) : text_mode ? run_text(&r, &o, tok, &rss_start)
                                                    : run_ids(&r, &o, &rss_start);
    if (rc < 0)
        goto done;
    long rss_end = rss_kib();
    status = rc ? EXIT_INPUT : EXIT_OK;

    if (o.stats) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        int64_t evals = r.evals_prompt + r.evals_gen;
        fprintf(stderr, "stats: backend %s, %d thread%s, plan %s\n", gp_session_backend(r.s),
                o.threads, o.threads == 1 ? "" : "s", o.plan);
        fprintf(stderr, "stats: evals %lld (prompt %lld, generation %lld)\n", (long long)evals,
                (long long)r.evals_prompt, (long long)r.evals_gen);
        if (r.evals_prompt)
            fprintf(stderr, "stats: prompt     %lld tokens, %.3f ms per eval, %.1f tokens/s\n",
                    (long long)r.tokens_prompt, r.ms_prompt / r.evals_prompt,
                    r.ms_prompt > 0 ? r.tokens_prompt * 1e3 / r.ms_prompt : 0.0);
        if (r.evals_gen)
            fprintf(stderr, "stats: generation %lld tokens, %.3f ms per eval, %.1f tokens/s\n",
                    (long long)r.tokens_gen, r.ms_gen / r.evals_gen,
                    r.ms_gen > 0 ? r.tokens_gen * 1e3 / r.ms_gen : 0.0);
#ifdef GP_NO_ALLOC_INTERPOSE
        fprintf(stderr, "stats: host allocations during evals: n/a (sanitizer build)\n");
#else
        /* Other threads: the CPU backend's workers, or the CUDA driver's own thread, which
         * allocates about 10 times a second even when idle (bench/gpu-notes.md). */
        gp_alloc_interpose_counts ac;
        gp_alloc_interpose_read(&ac);
        long long all = ac.eval, mine = ac.eval_thread;
        fprintf(stderr,
                "stats: host allocations during evals: %lld on the eval thread, %lld on other "
                "threads%s\n",
                mine, all - mine, strcmp(gp_session_backend(r.s), "cuda") ? "" : " (driver)");
        fprintf(stderr, "stats: host allocations while generating, outside evals (sampling, "
                "decoding, printing): %lld\n", (long long)ac.generation);
#endif
        fprintf(stderr, "stats: device allocations during evals: %lld\n",
                (long long)gp_session_backend_allocs(r.s));
        fprintf(stderr, "stats: weights %.1f MiB mapped, %.1f MiB loaded\n",
                r.info.weights_mapped / 1048576.0, r.info.weights_loaded / 1048576.0);
        fprintf(stderr, "stats: peak RSS %.1f MiB; RSS at start of generation %.1f MiB, at end "
                "%.1f MiB\n", ru.ru_maxrss / 1024.0, rss_start / 1024.0, rss_end / 1024.0);
    }
done:
    if (r.logits_out && fclose(r.logits_out) && status == EXIT_OK) {
        fprintf(stderr, "gplan-run: cannot write the logits file\n");
        status = EXIT_INPUT;
    }
    free(r.pos);
    gp_sampler_free(r.sampler);
    gp_session_free(r.s);
    gp_tok_free(tok);
    gp_model_free(m);
    free(o.prompt);
    return status;
}
