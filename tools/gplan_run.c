/* gplan-run: runs a model (a GGUF file or a Hugging Face folder, planned on the fly) or a plan of
 * gplan-compile: a prompt of token ids or text, then generated tokens, printed as they come; --chat
 * keeps the KV cache across the turns of a conversation on stdin. Built on gplan/text.h alone.
 * --check-weights scans a checkpoint for NaNs and infinities instead.
 * Exit status: 0 ok, 1 bad input (model, plan, weights, ids, text, prompt too long), 2 bad usage;
 * --check-weights: 0 all finite, 1 non-finite values found, 2 an unreadable file. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gplan/alloc_interpose.h"
#include "gplan/text.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

typedef struct {
    const char *model, *weights, *tokenizer, *backend, *text, *text_file, *system, *chat_format;
    const char *logits_out, *lora, *lora_merge_plan, *lora_mode, *ids, *check_weights;
    const char *defines[64], *stops[16];
    int n_defines, n_stops, threads, ignore_eos, chat, logits_all, stats, loop, is_plan, lora_set;
    int allow_unused;
    int wseed; /* --random-weights given */
    uint64_t weights_seed;
    int32_t *prompt; /* [n_prompt] --prompt-ids */
    int64_t n_prompt, n_gen, eos, ctx;
    double lora_scale;
    gp_sampler_opts sampling;
} options;

static void usage(void)
{
    printf("usage: gplan-run MODEL [options]     (MODEL: a .gguf file or a Hugging Face folder)\n"
           "       gplan-run PLAN (--weights PATH | --random-weights SEED) [options]\n"
           "       gplan-run --check-weights PATH   (a .gguf, safetensors, index.json or folder)\n"
           "Evaluates a prompt in chunks of the planned tokens per eval, then generates a token an\n"
           "eval, printing ids, or streaming text with --prompt, --prompt-file or --chat. A MODEL's\n"
           "graph is its architecture's; its plan is cached ($GPLAN_CACHE_DIR, ~/.cache/gplan).\n"
           "  -D NAME=VALUE, --ctx N  a MODEL's parameter; its context (default: the file's, <= 4096)\n"
           "  --allow-unused          a MODEL's tensors need not all be in the graph\n"
           "  --weights PATH          a PLAN's checkpoint (.gguf, safetensors, index.json, folder)\n"
           "  --random-weights SEED   deterministic random weights\n"
           "  --lora DIR              a PEFT adapter: --lora-mode merge (default; --lora-merge-plan F\n"
           "                          of gplan-compile -D lora_r=R --lora-merge) or runtime (a plan\n"
           "                          of -D lora_r=R); --lora-scale S multiplies lora_alpha / r\n"
           "  --backend NAME          cpu (default), reference, or cuda (when built); --threads N\n"
           "  --prompt-ids LIST       comma-separated token ids (default: 0)\n"
           "  --prompt TEXT, --prompt-file F  text in (special tokens' texts become their ids)\n"
           "  --tokenizer PATH        a .gguf, tokenizer.json or folder (default: the model's)\n"
           "  -n N                    tokens to generate (default 16; with --chat, per reply)\n"
           "  --eos ID, --ignore-eos  also stop at ID; go on past end-of-generation ids\n"
           "  --stop STRING           stop before STRING (repeatable, up to 16)\n"
           "  --chat                  a user turn a stdin line, the KV cache kept across turns\n"
           "  --system TEXT, --chat-format NAME  (%s)\n"
           "  sampling, in this order: --repeat-penalty P (1), --repeat-last-n N (64), --temp T\n"
           "                          (0: greedy), --top-k K (0), --top-p P (1), --min-p P (0),\n"
           "                          --seed S (1)\n"
           "  --logits-out FILE       the last logits row of each eval (f32); --logits-all: all rows\n"
           "  --stats, --loop         figures on stderr; at the context's end restart (ids)\n"
           "  --check-weights PATH    scan every tensor for NaN and infinite values (f32, f16,\n"
           "                          bf16, f64, the block formats' scales): a line per tensor\n"
           "                          holding any, then a summary; runs nothing\n"
           "exit status: 0 success, 1 bad input (model, plan, weights, ids, text, a prompt longer\n"
           "than the context), 2 bad usage; --check-weights: 0 all finite, 1 non-finite values\n"
           "found, 2 the file cannot be read\n", gp_lm_chat_formats());
}

static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "gplan-run: %s%s%s\ntry 'gplan-run --help'\n", msg, arg ? ": " : "",
            arg ? arg : "");
    return EXIT_USAGE;
}

static int parse_ids(const char *s, options *o)
{
    size_t n = 1;
    for (const char *p = s; *p; p++)
        n += *p == ',';
    if (!(o->prompt = malloc(n * sizeof *o->prompt)))
        return -1;
    for (const char *p = s;; p++) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX || (*end && *end != ','))
            return -1;
        o->prompt[o->n_prompt++] = (int32_t)v;
        if (!*(p = end))
            return 0;
    }
}

/* A GGUF file or a folder: a model; another regular file is taken for a plan. What is neither
 * (a FIFO, a device) goes to the model loader too, which says what it is without opening it. */
static int is_model(const char *path)
{
    struct stat st;
    return gp_lm_is_model(path) || (!stat(path, &st) && !S_ISREG(st.st_mode));
}

typedef enum { FLAG, STR, INT, I64, U64, NUM, LIST } kind;
typedef struct {
    const char *name;
    kind kind;
    void *dst;
    double lo, hi;     /* INT, I64, NUM: the values allowed; LIST: hi the most */
    const char *msg;   /* INT, I64, NUM: the message for others */
    int *n;            /* LIST: the count; U64: set to 1 */
} opt;
#define FL(name, dst) {name, FLAG, dst, 0, 0, NULL, NULL}
#define ST(name, dst) {name, STR, dst, 0, 0, NULL, NULL}

static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = cores < 1 ? 1 : cores > 64 ? 64 : (int)cores;
    o->backend = "cpu";
    o->n_gen = 16;
    o->eos = -1;
    o->lora_scale = 1;
    o->sampling = gp_sampler_defaults();
    gp_sampler_opts *so = &o->sampling;
    const opt opts[] = {
        FL("--ignore-eos", &o->ignore_eos), FL("--stats", &o->stats),
        FL("--loop", &o->loop), FL("--logits-all", &o->logits_all),
        FL("--chat", &o->chat), FL("--allow-unused", &o->allow_unused),
        ST("--weights", &o->weights),
        {"--random-weights", U64, &o->weights_seed, 0, 0, "bad --random-weights seed", &o->wseed},
        {"--seed", U64, &so->seed, 0, 0, "bad --seed", NULL},
        ST("--backend", &o->backend), ST("--prompt-ids", &o->ids),
        ST("--prompt", &o->text), ST("--prompt-file", &o->text_file),
        ST("--tokenizer", &o->tokenizer), ST("--system", &o->system),
        ST("--chat-format", &o->chat_format), ST("--logits-out", &o->logits_out),
        ST("--lora", &o->lora), ST("--lora-merge-plan", &o->lora_merge_plan),
        ST("--lora-mode", &o->lora_mode), ST("--check-weights", &o->check_weights),
        {"--stop", LIST, o->stops, 0, 16, NULL, &o->n_stops},
        {"-D", LIST, o->defines, 0, 64, NULL, &o->n_defines},
        {"--threads", INT, &o->threads, 1, 256, "--threads needs 1..256", NULL},
        {"-n", I64, &o->n_gen, 0, 1e15, "bad -n", NULL},
        {"--eos", I64, &o->eos, 0, INT32_MAX, "bad --eos", NULL},
        {"--ctx", I64, &o->ctx, 1, INT32_MAX, "bad --ctx (an integer >= 1)", NULL},
        {"--top-k", I64, &so->top_k, 0, INT32_MAX, "bad --top-k (an integer >= 0)", NULL},
        {"--repeat-last-n", I64, &so->repeat_last_n, 0, INT32_MAX,
         "bad --repeat-last-n (an integer >= 0)", NULL},
        {"--temp", NUM, &so->temp, 0, 1e300, "bad --temp (a number >= 0)", NULL},
        {"--top-p", NUM, &so->top_p, 1e-300, 1, "bad --top-p (a number in (0, 1])", NULL},
        {"--min-p", NUM, &so->min_p, 0, 1, "bad --min-p (a number in [0, 1])", NULL},
        {"--repeat-penalty", NUM, &so->repeat_penalty, 1e-300, 1e300,
         "bad --repeat-penalty (a number > 0)", NULL},
        {"--lora-scale", NUM, &o->lora_scale, -1e300, 1e300, "bad --lora-scale (a number)", NULL},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            usage(), exit(EXIT_OK);
        if (!strcmp(a, "--version"))
            printf("gplan-run %s\n", GPLAN_VERSION_STRING), exit(EXIT_OK);
        if (a[0] != '-' || !a[1]) {
            if (o->model)
                return usage_error("unexpected argument", a);
            o->model = a;
            continue;
        }
        const opt *p = opts;
        while (p < opts + sizeof opts / sizeof opts[0] && strcmp(p->name, a))
            p++;
        if (p == opts + sizeof opts / sizeof opts[0])
            return usage_error("unknown option", a);
        if (p->kind == FLAG) {
            *(int *)p->dst = 1;
            continue;
        }
        if (!v)
            return usage_error("missing value for", a);
        i++;
        o->lora_set |= !strncmp(a, "--lora-", 7);
        char *end;
        errno = 0;
        double d = p->kind == NUM ? strtod(v, &end) : (double)strtoll(v, &end, 10);
        int bad = !*v || *end || errno || !(d >= p->lo && d <= p->hi);
        if (p->kind == U64) {
            errno = 0;
            *(uint64_t *)p->dst = strtoull(v, &end, 0);
            if (!*v || *end || errno || *v == '-')
                return usage_error(p->msg, v);
            if (p->n)
                *p->n = 1;
        } else if (p->kind == STR) {
            *(const char **)p->dst = v;
        } else if (p->kind == LIST) {
            int *n = p->n;
            if (!*v || *n == (int)p->hi || (p->hi == 64 && !strchr(v, '=')))
                return usage_error(p->hi == 64 ? "bad -D (NAME=VALUE, at most 64)"
                                   : *v ? "more than 16 --stop strings"
                                        : "--stop needs a non-empty string", NULL);
            ((const char **)p->dst)[(*n)++] = v;
        } else if (bad) {
            return usage_error(p->msg, v);
        } else if (p->kind == INT) {
            *(int *)p->dst = (int)d;
        } else if (p->kind == I64) {
            *(int64_t *)p->dst = (int64_t)d;
        } else {
            *(double *)p->dst = d;
        }
    }
    if (o->check_weights)
        return argc == 3 ? -1 : usage_error("--check-weights PATH takes no other arguments", NULL);
    if (o->ids && parse_ids(o->ids, o))
        return usage_error("bad --prompt-ids (comma-separated integers)", o->ids);
    if (o->lora_mode && strcmp(o->lora_mode, "merge") && strcmp(o->lora_mode, "runtime"))
        return usage_error("bad --lora-mode (merge or runtime)", o->lora_mode);
    char list[256], word[64];
    snprintf(list, sizeof list, ", %s, ", gp_lm_chat_formats());
    snprintf(word, sizeof word, ", %s, ", o->chat_format ? o->chat_format : "");
    if (o->chat_format && (strchr(o->chat_format, ',') || !strstr(list, word))) {
        fprintf(stderr, "gplan-run: unknown --chat-format: %s (formats: %s)\n"
                "try 'gplan-run --help'\n", o->chat_format, gp_lm_chat_formats());
        return EXIT_USAGE;
    }
    int runtime = o->lora_mode && !strcmp(o->lora_mode, "runtime");
    int text = o->text || o->text_file || o->chat;
    const char *why =
        !o->model ? "no model or plan given"
        : (o->is_plan = !is_model(o->model)) && !o->weights == !o->wseed
            ? "give exactly one of --weights and --random-weights"
        : !o->is_plan && o->weights ? "--weights is for a plan; a model file holds its weights"
        : o->is_plan && (o->n_defines || o->ctx)
            ? "-D and --ctx need a model file (a plan's are fixed by gplan-compile)"
        : o->logits_all && !o->logits_out ? "--logits-all needs --logits-out FILE"
        : o->lora_set && !o->lora ? "--lora-scale, --lora-mode and --lora-merge-plan need --lora"
        : o->lora && !runtime && !o->lora_merge_plan
            ? "--lora in merge mode needs --lora-merge-plan FILE (gplan-compile MODEL -D "
              "lora_r=R --lora-merge -o FILE)"
        : runtime && o->lora_merge_plan
            ? "--lora-merge-plan is for merge mode, not --lora-mode runtime"
        : !!o->text + !!o->text_file + !!o->chat + !!o->ids > 1
            ? "give at most one of --prompt-ids, --prompt, --prompt-file and --chat"
        : !text && (o->n_stops || o->tokenizer)
            ? "--stop and --tokenizer need --prompt, --prompt-file or --chat"
        : !o->chat && (o->system || o->chat_format) ? "--system and --chat-format need --chat"
        : o->loop && text ? "--loop is for --prompt-ids (text stops at the end of the context)"
                          : NULL;
    if (why)
        return usage_error(why, NULL);
    if (!o->prompt && !text && !(o->prompt = calloc(1, sizeof *o->prompt)))
        return usage_error("out of memory", NULL);
    o->n_prompt += !o->ids && !text;
    return -1;
}

/* ---- running ---- */

typedef struct {
    options *o;
    gp_lm *lm;
    gp_seq *s;
    FILE *logits;
    int failed, printed, text;
    int32_t last;                /* the last id generated */
    int64_t evals[2], tokens[2]; /* prompt, generation */
    double ms[2];
} runner;

static void before_eval(void *user, int64_t n)
{
    (void)user, (void)n;
    gp_alloc_interpose_eval(1);
}

static void after_eval(void *user, const float *logits, int64_t rows, int64_t vocab)
{
    runner *r = user;
    gp_alloc_interpose_eval(0);
    size_t n = (size_t)(rows * vocab);
    r->failed |= r->logits && fwrite(logits, sizeof *logits, n, r->logits) != n;
}

static int put_text(void *user, const char *text, size_t n)
{
    (void)user;
    fwrite(text, 1, n, stdout);
    return 0;
}

static int put_id(void *user, int32_t id)
{
    runner *r = user;
    r->last = id;
    if (!r->text)
        printf("%s%d", r->printed++ ? " " : "", id);
    fflush(stdout);
    return 0;
}

/* Steps until the generation ends; with --loop a full context starts again at position 0 from
 * the last id (that eval counted as a generated token's). The finish reason, or -1. */
static int steps(runner *r, const gp_gen_opts *g, gp_gen_result *res)
{
    int f, again = 0;
    int64_t made = 0;
    gp_alloc_interpose_generation(1);
    for (;;) {
        while ((f = gp_seq_step(r->s)) == GP_FINISH_NONE)
            ;
        gp_seq_result(r->s, res);
        r->evals[again] += res->prompt_evals, r->evals[1] += res->gen_evals;
        r->tokens[again] += res->prompt_rows, r->tokens[1] += res->gen_evals;
        r->ms[again] += res->prompt_ms, r->ms[1] += res->gen_ms;
        made += res->completion_tokens;
        if (res->stop_token >= 0 && !r->text)
            put_id(r, res->stop_token); /* ids mode prints the --eos id that ended it */
        if (f != GP_FINISH_CONTEXT || !r->o->loop || made >= g->max_tokens)
            break;
        gp_gen_opts more = *g;
        more.max_tokens = g->max_tokens - made;
        gp_seq_reset(r->s);
        if ((again = 1, gp_seq_start(r->s, &r->last, 1, 0, &more)))
            f = -1;
    }
    gp_alloc_interpose_generation(0);
    if (f < 0)
        fprintf(stderr, "gplan-run: %s\n", gp_seq_error(r->s));
    return r->failed || f < 0 ? -1 : f;
}

/* --chat: a turn a line of stdin. 0, 1 when a turn was refused, -1 on a failure. */
static int run_chat(runner *r, const gp_gen_opts *g)
{
    char err[1024], *line = NULL;
    size_t cap = 0;
    int refused = 0, rc = 0;
    int64_t ctx = gp_lm_context(r->lm);
    gp_conv *c = NULL;
    if (r->o->chat_format ? gp_lm_set_chat_format(r->lm, r->o->chat_format, err, sizeof err)
                          : gp_lm_chat_apply(r->lm, NULL, 0, 0, NULL, 0, err, sizeof err) < 0)
        fprintf(stderr, "gplan-run: %s\n", err), rc = -1;
    else if (!ctx)
        fprintf(stderr, "gplan-run: --chat needs a plan with a KV cache (an attention context)\n"),
            rc = -1;
    else if (!(c = gp_conv_new(r->s, r->o->system, err, sizeof err)))
        fprintf(stderr, "gplan-run: %s\n", err), rc = -1;
    for (int turn = 1; rc >= 0; turn++) {
        if (isatty(STDIN_FILENO))
            fprintf(stderr, "> ");
        ssize_t got = getline(&line, &cap, stdin);
        if (got < 0)
            break;
        while (got && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = '\0';
        if (!got) {
            turn--;
            continue;
        }
        int st = gp_conv_start(c, line, (size_t)got, g);
        if (gp_conv_dropped(c))
            fprintf(stderr, "gplan-run: the context is full (%lld positions): the oldest %zu "
                    "messages dropped, the cache started over\n", (long long)ctx,
                    gp_conv_dropped(c));
        if (st) {
            fprintf(stderr, "gplan-run: stdin line %d: %s; turn skipped\n", turn,
                    gp_seq_error(r->s));
            refused = 1;
            continue;
        }
        gp_gen_result res;
        int f = steps(r, g, &res);
        printf("\n");
        fflush(stdout);
        if (f == GP_FINISH_CONTEXT)
            fprintf(stderr, "gplan-run: the reply reached the end of the context (%lld "
                    "positions)\n", (long long)ctx);
        if (f >= 0 && r->o->stats)
            fprintf(stderr, "stats: turn %d: %lld tokens evaluated (%lld already in the cache), "
                    "%lld generated\n", turn, (long long)(res.prompt_tokens - res.cached_tokens),
                    (long long)res.cached_tokens, (long long)res.completion_tokens);
        rc = f < 0 || gp_conv_end(c) ? -1 : 0;
    }
    gp_conv_free(c);
    free(line);
    return rc < 0 ? -1 : refused;
}

static void print_stats(runner *r)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const char *plan = gp_lm_plan_path(r->lm), *be = gp_session_backend(gp_seq_session(r->s));
    fprintf(stderr, "stats: backend %s, %d thread%s, plan %s\n", be, r->o->threads,
            r->o->threads == 1 ? "" : "s", *plan ? plan : "(in memory)");
    fprintf(stderr, "stats: evals %lld (prompt %lld, generation %lld)\n",
            (long long)(r->evals[0] + r->evals[1]), (long long)r->evals[0], (long long)r->evals[1]);
    for (int i = 0; i < 2; i++)
        if (r->evals[i])
            fprintf(stderr, "stats: %s %lld tokens, %.3f ms per eval, %.1f tokens/s\n",
                    i ? "generation" : "prompt    ", (long long)r->tokens[i],
                    r->ms[i] / r->evals[i], r->ms[i] > 0 ? r->tokens[i] * 1e3 / r->ms[i] : 0.0);
    /* Other threads: the CPU backend's workers, or the CUDA driver's own thread, which
     * allocates about 10 times a second even when idle (bench/gpu-notes.md). */
    gp_alloc_interpose_counts ac;
    gp_alloc_interpose_read(&ac);
    if (!gp_alloc_interpose_active()) {
        fprintf(stderr, "stats: host allocations during evals: n/a (sanitizer build)\n");
    } else {
        fprintf(stderr, "stats: host allocations during evals: %lld on the eval thread, %lld on "
                "other threads%s\n", (long long)ac.eval_thread,
                (long long)(ac.eval - ac.eval_thread), strcmp(be, "cuda") ? "" : " (driver)");
        fprintf(stderr, "stats: host allocations while generating, outside evals (sampling, "
                "decoding, printing): %lld\n", (long long)ac.generation);
    }
    gp_model_info info;
    gp_model_get_info(gp_lm_model(r->lm), &info);
    fprintf(stderr, "stats: device allocations during evals: %lld\nstats: weights %.1f MiB "
            "mapped, %.1f MiB loaded\nstats: peak RSS %.1f MiB\n",
            (long long)gp_session_backend_allocs(gp_seq_session(r->s)),
            info.weights_mapped / 1048576.0, info.weights_loaded / 1048576.0, ru.ru_maxrss / 1024.0);
}

/* --prompt-file's text, NUL-terminated; NULL with the message printed. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL, *more;
    size_t cap = 0, got = 1;
    for (*len = 0; f && got && (more = realloc(buf, cap = 2 * cap + 4097)); *len += got)
        got = fread((buf = more) + *len, 1, cap - *len - 1, f);
    if (!f || got || ferror(f))
        fprintf(stderr, "gplan-run: %s: cannot %s: %s\n", path, f ? "read" : "open",
                strerror(errno));
    else
        buf[*len] = '\0';
    if (f && (got || ferror(f)))
        free(buf), buf = NULL;
    return f ? fclose(f), buf : NULL;
}

/* --check-weights: a line per tensor holding non-finite values or not scanned, then a summary. */
typedef struct {
    const char *path;
    int64_t tensors, values, skipped;
} scan_totals;

static void on_tensor(void *user, const gp_tensor_scan *t)
{
    scan_totals *c = user;
    c->tensors++;
    if (t->nonfinite < 0) {
        c->skipped++;
        printf("%s: tensor %s: not scanned (%s values)\n", c->path, t->name, t->dtype);
        return;
    }
    c->values += t->values;
    if (t->nonfinite > 0)
        printf("%s: tensor %s: %lld non-finite value%s (first at element %lld: %s)\n", c->path,
               t->name, (long long)t->nonfinite, t->nonfinite == 1 ? "" : "s",
               (long long)t->first, t->first_is);
}

static int check_weights(const char *path)
{
    char err[4096];
    scan_totals c = {.path = path};
    int64_t bad = gp_weights_scan(path, on_tensor, &c, NULL, err, sizeof err);
    if (bad < 0) {
        fprintf(stderr, "gplan-run: %s\n", err);
        return 2;
    }
    if (bad)
        printf("%s: %lld of %lld tensors hold non-finite values\n", path, (long long)bad,
               (long long)c.tensors);
    else
        printf("%s: %lld tensors, %lld values, all finite\n", path, (long long)c.tensors,
               (long long)c.values);
    if (c.skipped)
        printf("%s: %lld tensor%s of a dtype the scan does not read\n", path, (long long)c.skipped,
               c.skipped == 1 ? "" : "s");
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    gp_alloc_interpose_on();
    static char stdout_buf[1 << 16]; /* static: glibc would allocate one at the first print */
    setvbuf(stdout, stdout_buf, _IOFBF, sizeof stdout_buf);
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return free(o.prompt), rc;
    if (o.check_weights)
        return check_weights(o.check_weights);
    char err[4096], *file = NULL;
    size_t len = 0;
    runner r = {.o = &o, .text = o.text || o.text_file || o.chat};
    gp_lm_opts lo = {.plan = o.is_plan ? o.model : NULL, .tokenizer = r.text ? o.tokenizer : "",
                     .defines = o.defines, .n_defines = o.n_defines, .context = o.ctx,
                     .backend = o.backend, .n_threads = o.threads, .allow_unused = o.allow_unused,
                     .random_weights = o.wseed, .random_seed = o.weights_seed};
    gp_gen_opts g = {.max_tokens = o.n_gen, .stop = o.stops, .n_stop = o.n_stops,
                     .ignore_eos = o.ignore_eos, .eos = o.eos, .on_text = put_text,
                     .on_token = put_id, .user = &r};
    gp_eval_hooks hooks = {before_eval, after_eval, &r, o.logits_all};
    gp_model *m = (r.lm = gp_lm_load(o.is_plan ? o.weights : o.model, &lo, err, sizeof err))
                      ? gp_lm_model(r.lm) : NULL;
    int runtime = o.lora_mode && !strcmp(o.lora_mode, "runtime");
    if (m && gp_lm_has_tokenizer(r.lm) && gp_lm_tokenizer_vocab(r.lm) < gp_lm_vocab(r.lm))
        fprintf(stderr, "gplan-run: note: the tokenizer has %lld ids, the embedding %lld rows: the "
                "ids past the tokenizer's are never sampled\n",
                (long long)gp_lm_tokenizer_vocab(r.lm), (long long)gp_lm_vocab(r.lm));
    rc = EXIT_INPUT;
    if (!m || (o.lora && (runtime ? gp_model_bind_adapter(m, o.lora, o.lora_scale, err, sizeof err)
                                  : gp_model_apply_lora(m, o.lora, o.lora_merge_plan, o.lora_scale,
                                                        err, sizeof err)))) {
        fprintf(stderr, "gplan-run: %s\n", err);
    } else if (r.text && !gp_lm_has_tokenizer(r.lm)) {
        fprintf(stderr, "gplan-run: %s needs a tokenizer: give --tokenizer PATH (a .gguf, a "
                "tokenizer.json or a folder holding one)%s\n", o.chat ? "--chat" : "the prompt",
                o.weights ? "; none was found beside the weights" : "");
    } else if (o.logits_out && !(r.logits = fopen(o.logits_out, "wb"))) {
        fprintf(stderr, "gplan-run: %s: cannot open: %s\n", o.logits_out, strerror(errno));
    } else if ((!o.text_file || (file = read_file(o.text_file, &len))) &&
               !(r.s = gp_seq_new(r.lm, &o.sampling, err, sizeof err))) {
        fprintf(stderr, "gplan-run: %s\n", err);
    } else if (r.s && o.chat) {
        gp_seq_set_eval_hooks(r.s, &hooks);
        rc = run_chat(&r, &g) ? EXIT_INPUT : EXIT_OK;
    } else if (r.s) {
        gp_seq_set_eval_hooks(r.s, &hooks);
        const char *text = file ? file : o.text;
        int st = r.text ? gp_seq_start_text(r.s, text, file ? len : strlen(text), 0, &g)
                        : gp_seq_start(r.s, o.prompt, o.n_prompt, 0, &g);
        int named = r.text && st != GP_SEQ_TOO_LONG; /* the context's message names no file */
        gp_gen_result res;
        int f = st ? -2 : steps(&r, &g, &res);
        if (st)
            fprintf(stderr, "gplan-run: %s%s%s\n", named ? file ? o.text_file : "--prompt" : "",
                    named ? ": " : "", gp_seq_error(r.s));
        else if (r.printed || r.text)
            printf("\n");
        fflush(stdout);
        if (f == GP_FINISH_CONTEXT)
            fprintf(stderr, "gplan-run: reached the planned context (%lld positions); stopping%s\n",
                    (long long)gp_lm_context(r.lm),
                    r.text ? "" : " (--loop starts again at position 0)");
        rc = f >= 0 ? EXIT_OK : EXIT_INPUT;
    }
    if (o.stats && r.s && rc == EXIT_OK)
        print_stats(&r);
    if (r.logits && fclose(r.logits) && rc == EXIT_OK)
        fprintf(stderr, "gplan-run: cannot write the logits file\n"), rc = EXIT_INPUT;
    gp_seq_free(r.s);
    gp_lm_free(r.lm);
    free(file);
    free(o.prompt);
    return rc;
}
