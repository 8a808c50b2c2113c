/* gplan-run: runs a model (a GGUF file or a Hugging Face folder, planned on the fly) or a plan of
 * gplan-compile: a prompt of token ids or text, then generated tokens, printed as they come; --chat
 * keeps the KV cache across the turns of a conversation on stdin. --check-weights scans a
 * checkpoint for NaNs and infinities instead. Argument parsing and output over the installed
 * headers alone (gplan/text.h, gplan/cli.h, gplan/alloc_interpose.h); usage() says the rest. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gplan/alloc_interpose.h"
#include "gplan/cli.h"
#include "gplan/compile.h"
#include "gplan/text.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = GP_CLI_EXIT_USAGE };
static const char PROG[] = "gplan-run";

/* The flags, parsed straight into the text API's option structs where they are its options. */
typedef struct {
    const char *model, *weights, *text, *text_file, *system, *logits_out, *check_weights;
    const char *lora_mode, *memory;
    const char *defines[64], *stops[16];
    int chat, logits_all, stats, is_plan, lora_set;
    int32_t *prompt; /* [n_prompt] --prompt-ids */
    int n_prompt;
    gp_lm_opts lm;
    gp_gen_opts gen;
    gp_sampler_opts sampling;
} options;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: gplan-run MODEL [options]     (MODEL: a .gguf file or a Hugging Face folder)\n"
        "       gplan-run PLAN (--weights PATH | --random-weights SEED) [options]\n"
        "       gplan-run --check-weights PATH   (a .gguf, safetensors, index.json or folder)\n"
        "Evaluates a prompt in chunks of the planned tokens per eval, then generates a token an\n"
        "eval, printing ids, or streaming text with --prompt, --prompt-file or --chat. A MODEL's\n"
        "graph is its architecture's; its plan is cached ($GPLAN_CACHE_DIR, ~/.cache/gplan).\n"
        "  -D NAME=VALUE, --ctx N  a MODEL's parameter; its context (default: the file's, <= 4096)\n"
        "  --memory DEV=SIZE       a MODEL's plan within SIZE on cpu or cuda (the context shrunk)\n"
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

#define FL(name, dst) {name, GP_CLI_FLAG, dst, 0, 0, NULL, NULL}
#define ST(name, dst) {name, GP_CLI_STR, dst, 0, 0, NULL, NULL}

static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->lm = gp_lm_defaults(); /* n_threads 0: the online cores */
    o->lm.backend = "cpu";
    o->lm.defines = o->defines;
    o->gen = gp_gen_defaults();
    o->gen.stop = o->stops;
    o->sampling = gp_sampler_defaults();
    gp_lm_opts *lm = &o->lm;
    gp_gen_opts *g = &o->gen;
    gp_sampler_opts *so = &o->sampling;
    const gp_cli_opt opts[] = {
        FL("--ignore-eos", &g->ignore_eos), FL("--stats", &o->stats),
        FL("--loop", &g->restart), FL("--logits-all", &o->logits_all),
        FL("--chat", &o->chat), FL("--allow-unused", &lm->allow_unused),
        ST("--weights", &o->weights),
        {"--random-weights", GP_CLI_U64, &lm->random_seed, 0, 0, "bad --random-weights seed",
         &lm->random_weights},
        {"--seed", GP_CLI_U64, &so->seed, 0, 0, "bad --seed", NULL},
        {"--prompt-ids", GP_CLI_IDS, &o->prompt, 0, 0,
         "bad --prompt-ids (comma-separated integers)", &o->n_prompt},
        ST("--backend", &lm->backend),
        ST("--prompt", &o->text), ST("--prompt-file", &o->text_file),
        ST("--tokenizer", &lm->tokenizer), ST("--system", &o->system),
        ST("--chat-format", &lm->chat_format), ST("--logits-out", &o->logits_out),
        ST("--lora", &lm->lora), ST("--check-weights", &o->check_weights),
        ST("--memory", &o->memory),
        {"--lora-merge-plan", GP_CLI_STR, &lm->lora_merge_plan, 0, 0, NULL, &o->lora_set},
        {"--lora-mode", GP_CLI_STR, &o->lora_mode, 0, 0, NULL, &o->lora_set},
        {"--stop", GP_CLI_LIST, o->stops, 0, 16, "--stop needs a non-empty string", &g->n_stop},
        {"-D", GP_CLI_DEFINES, o->defines, 0, 64, "bad -D (NAME=VALUE, at most 64)",
         &lm->n_defines},
        {"--threads", GP_CLI_INT, &lm->n_threads, 1, 256, "--threads needs 1..256", NULL},
        {"-n", GP_CLI_I64, &g->max_tokens, 0, 1e15, "bad -n", NULL},
        {"--eos", GP_CLI_I64, &g->eos, 0, INT32_MAX, "bad --eos", NULL},
        {"--ctx", GP_CLI_I64, &lm->context, 1, INT32_MAX, "bad --ctx (an integer >= 1)", NULL},
        {"--top-k", GP_CLI_I64, &so->top_k, 0, INT32_MAX, "bad --top-k (an integer >= 0)", NULL},
        {"--repeat-last-n", GP_CLI_I64, &so->repeat_last_n, 0, INT32_MAX,
         "bad --repeat-last-n (an integer >= 0)", NULL},
        {"--temp", GP_CLI_NUM, &so->temp, 0, 1e300, "bad --temp (a number >= 0)", NULL},
        {"--top-p", GP_CLI_NUM, &so->top_p, 1e-300, 1, "bad --top-p (a number in (0, 1])", NULL},
        {"--min-p", GP_CLI_NUM, &so->min_p, 0, 1, "bad --min-p (a number in [0, 1])", NULL},
        {"--repeat-penalty", GP_CLI_NUM, &so->repeat_penalty, 1e-300, 1e300,
         "bad --repeat-penalty (a number > 0)", NULL},
        {"--lora-scale", GP_CLI_NUM, &lm->lora_scale, -1e300, 1e300, "bad --lora-scale (a number)",
         &o->lora_set},
    };
    int rc = gp_cli_parse(PROG, GPLAN_VERSION_STRING, usage, opts, sizeof opts / sizeof opts[0],
                          argc, argv, &o->model);
    if (rc >= 0)
        return rc;
    const char *alone = "--check-weights PATH takes no other arguments";
    if (o->check_weights)
        return argc == 3 ? -1 : gp_cli_usage_error(PROG, alone, NULL);
    if (o->lora_mode && !gp_cli_in_list(o->lora_mode, "merge, runtime"))
        return gp_cli_usage_error(PROG, "bad --lora-mode (merge or runtime)", o->lora_mode);
    if (lm->chat_format && !gp_cli_in_list(lm->chat_format, gp_lm_chat_formats())) {
        fprintf(stderr, "gplan-run: unknown --chat-format: %s (formats: %s)\n"
                "try 'gplan-run --help'\n", o->lm.chat_format, gp_lm_chat_formats());
        return EXIT_USAGE;
    }
    int runtime = o->lora_mode && !strcmp(o->lora_mode, "runtime");
    int text = o->text || o->text_file || o->chat;
    const char *why =
        !o->model ? "no model or plan given"
        : (o->is_plan = !gp_lm_is_model(o->model)) && !o->weights == !o->lm.random_weights
            ? "give exactly one of --weights and --random-weights"
        : !o->is_plan && o->weights ? "--weights is for a plan; a model file holds its weights"
        : o->is_plan && (o->lm.n_defines || o->lm.context || o->memory)
            ? "-D, --ctx and --memory need a model file (a plan's are fixed by gplan-compile)"
        : o->logits_all && !o->logits_out ? "--logits-all needs --logits-out FILE"
        : o->lora_set && !lm->lora ? "--lora-scale, --lora-mode and --lora-merge-plan need --lora"
        : lm->lora && !runtime && !lm->lora_merge_plan
            ? "--lora in merge mode needs --lora-merge-plan FILE (gplan-compile MODEL -D "
              "lora_r=R --lora-merge -o FILE)"
        : runtime && lm->lora_merge_plan
            ? "--lora-merge-plan is for merge mode, not --lora-mode runtime"
        : !!o->text + !!o->text_file + !!o->chat + !!o->prompt > 1
            ? "give at most one of --prompt-ids, --prompt, --prompt-file and --chat"
        : !text && (o->gen.n_stop || o->lm.tokenizer)
            ? "--stop and --tokenizer need --prompt, --prompt-file or --chat"
        : !o->chat && (o->system || o->lm.chat_format) ? "--system and --chat-format need --chat"
        : g->restart && text ? "--loop is for --prompt-ids (text stops at the end of the context)"
                          : NULL;
    if (why)
        return gp_cli_usage_error(PROG, why, NULL);
    char dev[16], msg[256];
    if (o->memory && gp_budget_parse(o->memory, dev, sizeof dev, &lm->memory, msg, sizeof msg))
        return gp_cli_usage_error(PROG, msg, NULL);
    if (o->memory && strcmp(dev, lm->backend && !strcmp(lm->backend, "cuda") ? "cuda" : "cpu"))
        return gp_cli_usage_error(PROG, "--memory names another device than --backend's", dev);
    if (!o->prompt && !text) { /* the default prompt: id 0 */
        o->n_prompt = 1;
        if (!(o->prompt = calloc(1, sizeof *o->prompt)))
            return gp_cli_usage_error(PROG, "out of memory", NULL);
    }
    return -1;
}

/* ---- running ---- */

typedef struct {
    const options *o;
    gp_lm *lm;
    gp_seq *s;
    FILE *logits;
    int failed, printed, text;
} runner;

/* The eval hooks: the allocation counter's window, and --logits-out's rows. */
static void after_eval(void *user, const float *logits, int64_t rows, int64_t vocab)
{
    runner *r = user;
    gp_alloc_interpose_after(user, logits, rows, vocab);
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
    if (!r->text)
        printf("%s%d", r->printed++ ? " " : "", id);
    fflush(stdout);
    return 0;
}

/* A started generation, stepped until it ends (with --loop, gp_gen_opts.restart goes on past a
 * full context), then the line ended. The finish reason, or -1 with the message printed. */
static int steps(runner *r, gp_gen_result *res)
{
    int f;
    gp_alloc_interpose_generation(1);
    while ((f = gp_seq_step(r->s)) == GP_FINISH_NONE)
        ;
    gp_seq_result(r->s, res);
    if (res->stop_token >= 0 && !r->text)
        put_id(r, res->stop_token); /* ids mode prints the --eos id that ended it */
    gp_alloc_interpose_generation(0);
    if (r->printed || r->text)
        printf("\n");
    fflush(stdout);
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
    gp_conv *c = gp_conv_new(r->s, r->o->system, err, sizeof err); /* a template, a KV cache */
    if (!c)
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
        int f = steps(r, &res);
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

/* --stats: the run's figures (every prompt, chat turn and restart of the sequence), on stderr. */
static void print_stats(runner *r)
{
    char text[2048];
    gp_seq_stats(r->s, "stats: ", text, sizeof text);
    fputs(text, stderr);
    /* Other threads: the CPU backend's workers, or the CUDA driver's own thread, which
     * allocates about 10 times a second even when idle (bench/gpu-notes.md). */
    gp_alloc_interpose_counts ac;
    gp_alloc_interpose_read(&ac);
    if (!gp_alloc_interpose_active()) {
        fprintf(stderr, "stats: host allocations during evals: n/a (sanitizer build)\n");
        return;
    }
    fprintf(stderr, "stats: host allocations during evals: %lld on the eval thread, %lld on other "
            "threads%s\n", (long long)ac.eval_thread, (long long)(ac.eval - ac.eval_thread),
            strcmp(gp_session_backend(gp_seq_session(r->s)), "cuda") ? "" : " (driver)");
    fprintf(stderr, "stats: host allocations while generating, outside evals (sampling, decoding, "
            "printing): %lld\n", (long long)ac.generation);
}

/* --check-weights: a line per tensor holding non-finite values or not scanned, then a summary. */
static void on_tensor(void *user, const gp_tensor_scan *t)
{
    const char *path = user;
    if (t->nonfinite < 0)
        printf("%s: tensor %s: not scanned (%s values)\n", path, t->name, t->dtype);
    else if (t->nonfinite > 0)
        printf("%s: tensor %s: %lld non-finite value%s (first at element %lld: %s)\n", path,
               t->name, (long long)t->nonfinite, t->nonfinite == 1 ? "" : "s",
               (long long)t->first, t->first_is);
}

static int check_weights(const char *path)
{
    char err[4096];
    gp_weights_scan_totals c;
    int64_t bad = gp_weights_scan(path, on_tensor, (void *)path, &c, err, sizeof err);
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
    o.lm.plan = o.is_plan ? o.model : NULL;
    o.lm.tokenizer = r.text ? o.lm.tokenizer : ""; /* ids in and out: none loaded */
    o.gen.on_text = put_text;
    o.gen.on_token = put_id;
    o.gen.user = &r;
    gp_eval_hooks hooks = {gp_alloc_interpose_before, after_eval, &r, o.logits_all};
    gp_model *m = (r.lm = gp_lm_load(o.is_plan ? o.weights : o.model, &o.lm, err, sizeof err))
                      ? gp_lm_model(r.lm) : NULL;
    if (m && *gp_lm_note(r.lm))
        fprintf(stderr, "gplan-run: note: %s\n", gp_lm_note(r.lm));
    rc = EXIT_INPUT;
    if (!m) {
        fprintf(stderr, "gplan-run: %s\n", err);
    } else if (r.text && !gp_lm_has_tokenizer(r.lm)) {
        fprintf(stderr, "gplan-run: %s needs a tokenizer: give --tokenizer PATH (a .gguf, a "
                "tokenizer.json or a folder holding one)%s\n", o.chat ? "--chat" : "the prompt",
                o.weights ? "; none was found beside the weights" : "");
    } else if (o.logits_out && !(r.logits = fopen(o.logits_out, "wb"))) {
        fprintf(stderr, "gplan-run: %s: cannot open: %s\n", o.logits_out, strerror(errno));
    } else if ((o.text_file && !(file = gp_cli_read_file(o.text_file, &len, err, sizeof err))) ||
               !(r.s = gp_seq_new(r.lm, &o.sampling, err, sizeof err))) {
        fprintf(stderr, "gplan-run: %s\n", err); /* --prompt-file's, or the sequence's */
    } else if (o.chat) {
        gp_seq_set_eval_hooks(r.s, &hooks);
        rc = run_chat(&r, &o.gen) ? EXIT_INPUT : EXIT_OK;
    } else {
        gp_seq_set_eval_hooks(r.s, &hooks);
        const char *text = file ? file : o.text;
        int st = r.text ? gp_seq_start_text(r.s, text, file ? len : strlen(text), 0, &o.gen)
                        : gp_seq_start(r.s, o.prompt, o.n_prompt, 0, &o.gen);
        int named = r.text && st != GP_SEQ_TOO_LONG; /* the context's message names no file */
        gp_gen_result res;
        int f = st ? -2 : steps(&r, &res);
        if (st)
            fprintf(stderr, "gplan-run: %s%s%s\n", named ? file ? o.text_file : "--prompt" : "",
                    named ? ": " : "", gp_seq_error(r.s));
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
