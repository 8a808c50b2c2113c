/* gplan-run: runs a model (a GGUF file or a Hugging Face folder, planned on the fly) or a plan of
 * gplan-compile: a prompt of token ids or text, then generated tokens, printed as they come; --chat
 * keeps the KV cache across the turns of a conversation on stdin. Built on gplan/text.h alone.
 * Exit status: 0 ok, 1 bad input (model, plan, weights, ids, text, prompt too long), 2 bad usage. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "gplan/text.h"
#include "tools/alloc_interpose.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

typedef struct {
    const char *model, *weights, *tokenizer, *backend, *text, *text_file, *system, *chat_format;
    const char *logits_out, *lora, *lora_merge_plan;
    const char *defines[64], *stops[16];
    int n_defines, n_stops, random_weights, threads, ignore_eos, chat, logits_all, stats, loop;
    int lora_runtime, is_plan;
    uint64_t weights_seed;
    int32_t *prompt; /* [n_prompt] --prompt-ids */
    int64_t n_prompt, n_gen, eos, ctx;
    double lora_scale;
    gp_sampler_opts sampling;
} options;

static void usage(void)
{
    printf("usage: gplan-run MODEL [options]            (a .gguf file or a Hugging Face folder)\n"
           "       gplan-run PLAN (--weights PATH | --random-weights SEED) [options]\n\n"
           "Evaluates a prompt in chunks of the planned tokens per eval, then generates one token\n"
           "an eval, printing ids, or with --prompt, --prompt-file or --chat streaming text. A\n"
           "MODEL's graph is chosen by its architecture and its plan cached ($GPLAN_CACHE_DIR,\n"
           "else ~/.cache/gplan).\n\noptions:\n"
           "  -D NAME=VALUE         a graph parameter of a MODEL (as gplan-compile -D)\n"
           "  --ctx N               a MODEL's context in positions (default: the file's, <= 4096)\n"
           "  --weights PATH        a PLAN's checkpoint: .gguf, safetensors, index.json or folder\n"
           "  --random-weights SEED deterministic random weights instead of a checkpoint\n"
           "  --lora DIR            a PEFT LoRA adapter, merged into the weights (--lora-mode merge,\n"
           "                        the default, with --lora-merge-plan F from gplan-compile -D\n"
           "                        lora_r=R --lora-merge) or bound into the adapter branches of a\n"
           "                        plan compiled with -D lora_r=R (--lora-mode runtime)\n"
           "  --lora-scale S        multiply the adapter's lora_alpha / r by S (default 1)\n"
           "  --backend NAME        cpu (default), reference, or cuda (when built)\n"
           "  --threads N           CPU threads (default: the online cores)\n"
           "  --prompt-ids LIST     comma-separated token ids (default: 0)\n"
           "  -n N                  tokens to generate (default 16; with --chat, per reply)\n"
           "  --eos ID              also stop at this id (the tokenizer's end ids always stop)\n"
           "  --ignore-eos          keep generating past end-of-generation ids\n"
           "  --logits-out FILE     append the last logits row of every eval (raw f32)\n"
           "  --logits-all          with --logits-out: every row of each eval (the plan's rows\n"
           "                        input, gplan-compile -D n_rows, must hold them)\n"
           "  --stats               evals, ms per eval, tokens/s, allocations, memory (stderr)\n"
           "  --loop                at the end of the context start again at position 0 (ids)\n"
           "  -h, --help, --version\n\ntext:\n"
           "  --prompt TEXT         tokenize TEXT (special tokens' texts become their ids) and\n"
           "                        stream the generated text, whole UTF-8 characters\n"
           "  --prompt-file F       the same with the contents of F\n"
           "  --tokenizer PATH      a .gguf, tokenizer.json or folder (default: the model's, or one\n"
           "                        beside the --weights)\n"
           "  --stop STRING         stop before STRING (repeatable, up to 16)\n"
           "  --chat                each stdin line a user turn; the reply streams to stdout; the\n"
           "                        KV cache is kept across turns; a turn that does not fit starts\n"
           "                        over with the system prompt and that turn. EOF ends it\n"
           "  --system TEXT         the system prompt (default: the template's own, if any)\n"
           "  --chat-format NAME    one of %s (default: from the template)\n\n"
           "sampling (in this order; each off at its default):\n"
           "  --repeat-penalty P    divide a recent id's positive logit by P, multiply a negative\n"
           "  --repeat-last-n N     the recent ids the penalty sees (default 64)\n"
           "  --temp T              temperature; 0 (default) is greedy\n"
           "  --top-k K, --top-p P, --min-p P, --seed S (defaults 0, 1, 0, 1)\n\n"
           "exit status: 0 success, 1 bad input (model, plan, weights, ids, text, a prompt longer\n"
           "than the context), 2 bad usage\n", gp_lm_chat_formats());
}

static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "gplan-run: %s%s%s\ntry 'gplan-run --help'\n", msg, arg ? ": " : "",
            arg ? arg : "");
    return EXIT_USAGE;
}

static int parse_num(const char *s, double lo, double hi, int integer, double *out)
{
    char *end;
    errno = 0;
    double v = integer ? (double)strtoll(s, &end, 10) : strtod(s, &end);
    if (!*s || *end || errno || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
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

/* 1 when word is one of list's comma-separated names. */
static int in_list(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; *p; p += strspn(p, ", ")) {
        size_t k = strcspn(p, ", ");
        if (k == n && !strncmp(p, word, n))
            return 1;
        p += k;
    }
    return 0;
}

static int is_model(const char *path)
{
    char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(magic, 1, 4, f) : 0;
    int dir = f && n == 0 && ferror(f); /* a folder opens but does not read */
    if (f)
        fclose(f);
    return dir || (n == 4 && !memcmp(magic, "GGUF", 4));
}

static int parse_args(int argc, char **argv, options *o)
{
    static const char *const valued[] = {
        "--weights", "--random-weights", "--backend", "--threads", "--prompt-ids", "-n", "--eos",
        "--temp", "--seed", "--logits-out", "--lora", "--lora-scale", "--lora-mode",
        "--lora-merge-plan", "--prompt", "--prompt-file", "--tokenizer", "--stop", "--system",
        "--chat-format", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--repeat-last-n",
        "-D", "--ctx"};
    memset(o, 0, sizeof *o);
    o->backend = "cpu";
    o->n_gen = 16;
    o->eos = -1;
    o->lora_scale = 1;
    o->sampling = gp_sampler_defaults();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = cores < 1 ? 1 : cores > 64 ? 64 : (int)cores;
    int lora_opts = 0, lora_mode = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        int flag = 1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            usage(), exit(EXIT_OK);
        else if (!strcmp(a, "--version"))
            printf("gplan-run %s\n", GPLAN_VERSION_STRING), exit(EXIT_OK);
        else if (!strcmp(a, "--ignore-eos"))
            o->ignore_eos = 1;
        else if (!strcmp(a, "--stats"))
            o->stats = 1;
        else if (!strcmp(a, "--loop"))
            o->loop = 1;
        else if (!strcmp(a, "--logits-all"))
            o->logits_all = 1;
        else if (!strcmp(a, "--chat"))
            o->chat = 1;
        else
            flag = 0;
        if (flag)
            continue;
        if (a[0] != '-' || !a[1]) {
            if (o->model)
                return usage_error("unexpected argument", a);
            o->model = a;
            continue;
        }
        int known = 0;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
            known |= !strcmp(a, valued[k]);
        if (!known)
            return usage_error("unknown option", a);
        if (!v)
            return usage_error("missing value for", a);
        i++;
#define NUM(name, lo, hi, integer, msg, dst)                                                       \
    else if (!strcmp(a, name)) {                                                                   \
        if (parse_num(v, lo, hi, integer, &d))                                                     \
            return usage_error(msg, v);                                                            \
        dst = d;                                                                                   \
    }
        if (!strcmp(a, "--weights"))
            o->weights = v;
        else if (!strcmp(a, "--random-weights")) {
            char *end;
            errno = 0;
            o->weights_seed = strtoull(v, &end, 0);
            if (!*v || *end || errno || *v == '-')
                return usage_error("bad --random-weights seed", v);
            o->random_weights = 1;
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            o->sampling.seed = strtoull(v, &end, 0);
            if (!*v || *end || errno || *v == '-')
                return usage_error("bad --seed", v);
        }
        NUM("--threads", 1, 256, 1, "--threads needs 1..256", o->threads)
        NUM("-n", 0, 1e15, 1, "bad -n", o->n_gen)
        NUM("--eos", 0, INT32_MAX, 1, "bad --eos", o->eos)
        NUM("--ctx", 1, INT32_MAX, 1, "bad --ctx (an integer >= 1)", o->ctx)
        NUM("--temp", 0, 1e300, 0, "bad --temp (a number >= 0)", o->sampling.temp)
        NUM("--top-k", 0, INT32_MAX, 1, "bad --top-k (an integer >= 0)", o->sampling.top_k)
        NUM("--top-p", 1e-300, 1, 0, "bad --top-p (a number in (0, 1])", o->sampling.top_p)
        NUM("--min-p", 0, 1, 0, "bad --min-p (a number in [0, 1])", o->sampling.min_p)
        NUM("--repeat-penalty", 1e-300, 1e300, 0, "bad --repeat-penalty (a number > 0)",
            o->sampling.repeat_penalty)
        NUM("--repeat-last-n", 0, INT32_MAX, 1, "bad --repeat-last-n (an integer >= 0)",
            o->sampling.repeat_last_n)
        NUM("--lora-scale", -1e300, 1e300, 0, "bad --lora-scale (a number)", o->lora_scale)
#undef NUM
        else if (!strcmp(a, "--prompt-ids")) {
            free(o->prompt);
            o->prompt = NULL;
            o->n_prompt = 0;
            if (parse_ids(v, o))
                return usage_error("bad --prompt-ids (comma-separated integers)", v);
        } else if (!strcmp(a, "--backend")) o->backend = v;
        else if (!strcmp(a, "--prompt")) o->text = v;
        else if (!strcmp(a, "--prompt-file")) o->text_file = v;
        else if (!strcmp(a, "--tokenizer")) o->tokenizer = v;
        else if (!strcmp(a, "--system")) o->system = v;
        else if (!strcmp(a, "--logits-out")) o->logits_out = v;
        else if (!strcmp(a, "--lora")) o->lora = v;
        else if (!strcmp(a, "--lora-merge-plan")) o->lora_merge_plan = v;
        else if (!strcmp(a, "--stop")) {
            if (!*v)
                return usage_error("--stop needs a non-empty string", NULL);
            if (o->n_stops == 16)
                return usage_error("more than 16 --stop strings", NULL);
            o->stops[o->n_stops++] = v;
        } else if (!strcmp(a, "-D")) {
            if (!strchr(v, '=') || o->n_defines == 64)
                return usage_error("bad -D (NAME=VALUE, at most 64)", v);
            o->defines[o->n_defines++] = v;
        } else if (!strcmp(a, "--chat-format")) {
            if (!in_list(gp_lm_chat_formats(), v)) {
                fprintf(stderr, "gplan-run: unknown --chat-format: %s (formats: %s)\ntry "
                        "'gplan-run --help'\n", v, gp_lm_chat_formats());
                return EXIT_USAGE;
            }
            o->chat_format = v;
        } else if (!strcmp(a, "--lora-mode")) {
            if (strcmp(v, "merge") && strcmp(v, "runtime"))
                return usage_error("bad --lora-mode (merge or runtime)", v);
            o->lora_runtime = !strcmp(v, "runtime");
            lora_mode = 1;
        }
        lora_opts |= !strcmp(a, "--lora-scale");
    }
    if (!o->model)
        return usage_error("no model or plan given", NULL);
    o->is_plan = !is_model(o->model);
    if (o->is_plan && !o->weights == !o->random_weights)
        return usage_error("give exactly one of --weights and --random-weights", NULL);
    if (!o->is_plan && o->weights)
        return usage_error("--weights is for a plan; a model file holds its weights", NULL);
    if (o->is_plan && (o->n_defines || o->ctx))
        return usage_error("-D and --ctx need a model file (a plan's are fixed by gplan-compile)",
                           NULL);
    if (o->logits_all && !o->logits_out)
        return usage_error("--logits-all needs --logits-out FILE", NULL);
    if ((lora_opts || lora_mode || o->lora_merge_plan) && !o->lora)
        return usage_error("--lora-scale, --lora-mode and --lora-merge-plan need --lora", NULL);
    if (o->lora && !o->lora_runtime && !o->lora_merge_plan)
        return usage_error("--lora in merge mode needs --lora-merge-plan FILE (gplan-compile "
                           "MODEL -D lora_r=R --lora-merge -o FILE)", NULL);
    if (o->lora_runtime && o->lora_merge_plan)
        return usage_error("--lora-merge-plan is for merge mode, not --lora-mode runtime", NULL);
    if (!!o->text + !!o->text_file + !!o->chat + !!o->prompt > 1)
        return usage_error("give at most one of --prompt-ids, --prompt, --prompt-file and --chat",
                           NULL);
    int text = o->text || o->text_file || o->chat;
    if (!text && (o->n_stops || o->tokenizer))
        return usage_error("--stop and --tokenizer need --prompt, --prompt-file or --chat", NULL);
    if (!o->chat && (o->system || o->chat_format))
        return usage_error("--system and --chat-format need --chat", NULL);
    if (o->loop && text)
        return usage_error("--loop is for --prompt-ids (text stops at the end of the context)",
                           NULL);
    if (!o->prompt && !text) {
        if (!(o->prompt = calloc(1, sizeof *o->prompt)))
            return usage_error("out of memory", NULL);
        o->n_prompt = 1;
    }
    return -1;
}

/* ---- running ---- */

typedef struct {
    options *o;
    gp_lm *lm;
    gp_seq *s;
    FILE *logits;
    int failed, printed, text;
    int32_t last;                          /* the last id generated */
    int64_t evals[2], tokens[2];           /* prompt, generation */
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
    if (r->logits && fwrite(logits, sizeof *logits, n, r->logits) != n)
        r->failed = 1;
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

static void tally(runner *r, const gp_gen_result *g, int restarted)
{
    r->evals[restarted] += g->prompt_evals;
    r->tokens[restarted] += g->prompt_rows;
    r->ms[restarted] += g->prompt_ms;
    r->evals[1] += g->gen_evals;
    r->tokens[1] += g->gen_evals;
    r->ms[1] += g->gen_ms;
}

/* Steps until the generation ends; with --loop a full context starts again at position 0 from
 * the last id. The finish reason, or -1. */
static int steps(runner *r, const gp_gen_opts *g)
{
    int f, restarted = 0;
    int64_t made = 0;
    gp_alloc_interpose_generation(1);
    for (;;) {
        while ((f = gp_seq_step(r->s)) == GP_FINISH_NONE)
            ;
        gp_gen_result res;
        gp_seq_result(r->s, &res);
        tally(r, &res, restarted); /* a restart's eval is a generated token's */
        made += res.completion_tokens;
        if (res.stop_token >= 0 && !r->text)
            put_id(r, res.stop_token); /* ids mode prints the --eos id that ended it */
        if (f != GP_FINISH_CONTEXT || !r->o->loop || made >= g->max_tokens)
            break;
        gp_gen_opts more = *g;
        more.max_tokens = g->max_tokens - made;
        gp_seq_reset(r->s);
        if (gp_seq_start(r->s, &r->last, 1, 0, &more)) {
            f = -1;
            break;
        }
        restarted = 1;
    }
    gp_alloc_interpose_generation(0);
    if (f < 0)
        fprintf(stderr, "gplan-run: %s\n", gp_seq_error(r->s));
    return r->failed || f < 0 ? -1 : f;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0, got = 1;
    while (f && got) {
        char *more = n + 4097 > cap ? realloc(buf, cap = 2 * cap + 4097) : buf;
        if (!more)
            break;
        buf = more;
        n += got = fread(buf + n, 1, cap - n - 1, f);
    }
    if (!f || got || ferror(f)) {
        fprintf(stderr, "gplan-run: %s: cannot %s: %s\n", path, f ? "read" : "open",
                strerror(errno));
        free(buf);
        buf = NULL;
    } else {
        buf[n] = '\0';
        *len = n;
    }
    if (f)
        fclose(f);
    return buf;
}

/* One user turn and its reply. 0, 1 when the turn was refused, -1 when the chat must end. */
static int chat_turn(runner *r, gp_msg *msgs, size_t *n, int sys, const gp_gen_opts *g,
                     char *line, size_t len, int turn)
{
    int64_t bad = gp_utf8_invalid_at(line, len), ctx = gp_lm_context(r->lm);
    if (bad >= 0) {
        fprintf(stderr, "gplan-run: stdin line %d: invalid UTF-8 at byte %lld; turn skipped\n",
                turn, (long long)bad);
        return 1;
    }
    msgs[(*n)++] = (gp_msg){"user", line};
    int rc = gp_seq_start_chat(r->s, msgs, *n, g);
    if (rc == GP_SEQ_TOO_LONG && *n > (size_t)sys + 1) {
        fprintf(stderr, "gplan-run: the context is full (%lld positions): starting over with the "
                "system prompt and this turn\n", (long long)ctx);
        for (size_t i = sys; i < *n - 1; i++)
            free((char *)msgs[i].content);
        msgs[sys] = msgs[*n - 1];
        *n = (size_t)sys + 1;
        gp_seq_reset(r->s);
        rc = gp_seq_start_chat(r->s, msgs, *n, g);
    }
    gp_gen_result res;
    gp_seq_result(r->s, &res);
    if (rc) {
        if (rc == GP_SEQ_TOO_LONG)
            fprintf(stderr, "gplan-run: stdin line %d: the turn needs %lld tokens, more than the "
                    "%lld positions of the context; turn skipped\n", turn,
                    (long long)res.prompt_tokens, (long long)ctx);
        else
            fprintf(stderr, "gplan-run: stdin line %d: %s; turn skipped\n", turn,
                    gp_seq_error(r->s));
        (*n)--;
        return 1;
    }
    int f = steps(r, g);
    printf("\n");
    fflush(stdout);
    if (f < 0)
        return -1;
    gp_seq_result(r->s, &res);
    if (f == GP_FINISH_CONTEXT)
        fprintf(stderr, "gplan-run: the reply reached the end of the context (%lld positions); "
                "the next turn starts over\n", (long long)ctx);
    if (r->o->stats)
        fprintf(stderr, "stats: turn %d: %lld tokens evaluated (%lld already in the cache), %lld "
                "generated\n", turn, (long long)(res.prompt_tokens - res.cached_tokens),
                (long long)res.cached_tokens, (long long)res.completion_tokens);
    size_t rn;
    const char *reply = gp_seq_reply(r->s, &rn);
    char *own = malloc(rn + 1);
    if (!own || !(line = strdup(line)))
        return free(own), -1;
    memcpy(own, reply, rn);
    own[rn] = '\0';
    msgs[*n - 1].content = line;
    msgs[(*n)++] = (gp_msg){"assistant", own};
    return 0;
}

static int run_chat(runner *r, const gp_gen_opts *g)
{
    char err[1024], *line = NULL;
    size_t cap_line = 0, n = 0, cap = 64;
    int sys = !!r->o->system, refused = 0, rc = 0;
    if (r->o->chat_format ? gp_lm_set_chat_format(r->lm, r->o->chat_format, err, sizeof err)
                          : gp_lm_chat_apply(r->lm, NULL, 0, 0, NULL, 0, err, sizeof err) < 0) {
        fprintf(stderr, "gplan-run: %s\n", err);
        return -1;
    }
    if (!gp_lm_context(r->lm)) {
        fprintf(stderr, "gplan-run: --chat needs a plan with a KV cache (an attention context)\n");
        return -1;
    }
    gp_msg *msgs = malloc(cap * sizeof *msgs);
    if (!msgs)
        return -1;
    if (sys)
        msgs[n++] = (gp_msg){"system", r->o->system};
    for (int turn = 1; rc >= 0; turn++) {
        if (isatty(STDIN_FILENO))
            fprintf(stderr, "> ");
        ssize_t got = getline(&line, &cap_line, stdin);
        if (got < 0)
            break;
        while (got && (line[got - 1] == '\n' || line[got - 1] == '\r'))
            line[--got] = '\0';
        if (!got) {
            turn--;
            continue;
        }
        gp_msg *more = n + 2 > cap ? realloc(msgs, (cap *= 2) * sizeof *msgs) : msgs;
        if (!more)
            break;
        msgs = more;
        rc = chat_turn(r, msgs, &n, sys, g, line, (size_t)got, turn);
        refused |= rc > 0;
    }
    for (size_t i = sys; i < n; i++)
        free((char *)msgs[i].content);
    free(msgs);
    free(line);
    return rc < 0 ? -1 : refused;
}

static void print_stats(runner *r)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const char *plan = gp_lm_plan_path(r->lm);
    fprintf(stderr, "stats: backend %s, %d thread%s, plan %s\n",
            gp_session_backend(gp_seq_session(r->s)), r->o->threads, r->o->threads == 1 ? "" : "s",
            *plan ? plan : "(in memory)");
    fprintf(stderr, "stats: evals %lld (prompt %lld, generation %lld)\n",
            (long long)(r->evals[0] + r->evals[1]), (long long)r->evals[0], (long long)r->evals[1]);
    static const char *const what[2] = {"prompt    ", "generation"};
    for (int i = 0; i < 2; i++)
        if (r->evals[i])
            fprintf(stderr, "stats: %s %lld tokens, %.3f ms per eval, %.1f tokens/s\n", what[i],
                    (long long)r->tokens[i], r->ms[i] / r->evals[i],
                    r->ms[i] > 0 ? r->tokens[i] * 1e3 / r->ms[i] : 0.0);
#ifdef GP_NO_ALLOC_INTERPOSE
    fprintf(stderr, "stats: host allocations during evals: n/a (sanitizer build)\n");
#else
    /* Other threads: the CPU backend's workers, or the CUDA driver's own thread, which
     * allocates about 10 times a second even when idle (bench/gpu-notes.md). */
    gp_alloc_interpose_counts ac;
    gp_alloc_interpose_read(&ac);
    int cuda = !strcmp(gp_session_backend(gp_seq_session(r->s)), "cuda");
    fprintf(stderr, "stats: host allocations during evals: %lld on the eval thread, %lld on other "
            "threads%s\n", (long long)ac.eval_thread, (long long)(ac.eval - ac.eval_thread),
            cuda ? " (driver)" : "");
    fprintf(stderr, "stats: host allocations while generating, outside evals (sampling, decoding, "
            "printing): %lld\n", (long long)ac.generation);
#endif
    gp_model_info info;
    gp_model_get_info(gp_lm_model(r->lm), &info);
    fprintf(stderr, "stats: device allocations during evals: %lld\n",
            (long long)gp_session_backend_allocs(gp_seq_session(r->s)));
    fprintf(stderr, "stats: weights %.1f MiB mapped, %.1f MiB loaded\n",
            info.weights_mapped / 1048576.0, info.weights_loaded / 1048576.0);
    fprintf(stderr, "stats: peak RSS %.1f MiB\n", ru.ru_maxrss / 1024.0);
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
    char err[4096], *file_text = NULL;
    size_t len = 0;
    runner r = {.o = &o, .text = o.text || o.text_file || o.chat};
    gp_lm_opts lo = gp_lm_defaults();
    lo.plan = o.is_plan ? o.model : NULL;
    lo.tokenizer = r.text ? o.tokenizer : "";
    lo.defines = o.defines;
    lo.n_defines = o.n_defines;
    lo.context = o.ctx;
    lo.backend = o.backend;
    lo.n_threads = o.threads;
    lo.random_weights = o.random_weights;
    lo.random_seed = o.weights_seed;
    gp_gen_opts g = gp_gen_defaults();
    g.max_tokens = o.n_gen;
    g.stop = o.stops;
    g.n_stop = o.n_stops;
    g.ignore_eos = o.ignore_eos;
    g.eos = o.eos;
    g.on_text = put_text;
    g.on_token = put_id;
    g.user = &r;
    gp_eval_hooks hooks = {before_eval, after_eval, &r, o.logits_all};
    rc = EXIT_INPUT;
    if (!(r.lm = gp_lm_load(o.is_plan ? o.weights : o.model, &lo, err, sizeof err)) ||
        (o.lora && (o.lora_runtime ? gp_model_bind_adapter(gp_lm_model(r.lm), o.lora,
                                                           o.lora_scale, err, sizeof err)
                                   : gp_model_apply_lora(gp_lm_model(r.lm), o.lora,
                                                         o.lora_merge_plan, o.lora_scale, err,
                                                         sizeof err)))) {
        fprintf(stderr, "gplan-run: %s\n", err);
        goto done;
    }
    if (r.text && !gp_lm_has_tokenizer(r.lm)) {
        fprintf(stderr, "gplan-run: %s needs a tokenizer: give --tokenizer PATH (a .gguf, a "
                "tokenizer.json or a folder holding one)%s\n", o.chat ? "--chat" : "the prompt",
                o.weights ? "; none was found beside the weights" : "");
        goto done;
    }
    if (o.logits_out && !(r.logits = fopen(o.logits_out, "wb"))) {
        fprintf(stderr, "gplan-run: %s: cannot open: %s\n", o.logits_out, strerror(errno));
        goto done;
    }
    if (o.text_file && !(file_text = read_file(o.text_file, &len)))
        goto done;
    if (!(r.s = gp_seq_new(r.lm, &o.sampling, err, sizeof err))) {
        fprintf(stderr, "gplan-run: %s\n", err);
        goto done;
    }
    gp_seq_set_eval_hooks(r.s, &hooks);
    if (o.chat) {
        int c = run_chat(&r, &g);
        rc = c < 0 ? EXIT_INPUT : c ? EXIT_INPUT : EXIT_OK;
    } else {
        const char *what = o.text_file ? o.text_file : "--prompt";
        int st = r.text ? gp_seq_start_text(r.s, file_text ? file_text : o.text,
                                            file_text ? len : strlen(o.text), 0, &g)
                        : gp_seq_start(r.s, o.prompt, o.n_prompt, 0, &g);
        if (st) {
            int named = r.text && st != GP_SEQ_TOO_LONG;
            fprintf(stderr, "gplan-run: %s%s%s\n", named ? what : "", named ? ": " : "",
                    gp_seq_error(r.s));
            goto done;
        }
        int f = steps(&r, &g);
        if (r.printed || r.text)
            printf("\n");
        fflush(stdout);
        if (f < 0)
            goto done;
        if (f == GP_FINISH_CONTEXT)
            fprintf(stderr, "gplan-run: reached the planned context (%lld positions); stopping%s\n",
                    (long long)gp_lm_context(r.lm),
                    r.text ? "" : " (--loop starts again at position 0)");
        rc = EXIT_OK;
    }
    if (o.stats && r.s)
        print_stats(&r);
done:
    if (r.logits && fclose(r.logits) && rc == EXIT_OK) {
        fprintf(stderr, "gplan-run: cannot write the logits file\n");
        rc = EXIT_INPUT;
    }
    gp_seq_free(r.s);
    gp_lm_free(r.lm);
    free(file_text);
    free(o.prompt);
    return rc;
}
