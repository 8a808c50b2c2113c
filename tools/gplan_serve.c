/* gplan-serve: an OpenAI-compatible HTTP server for a model: chat and text completions, streamed
 * or not, for several clients at once (one sequence a slot), on loopback by default. A thin main
 * over <gplan/server.h> and <gplan/text.h>. SIGTERM or SIGINT: stop accepting, let running
 * requests finish (cancelled after --grace seconds), exit 0.
 * Exit status: 0 after a signal, 1 bad input (model, address), 2 bad usage. */
#define _GNU_SOURCE /* sigtimedwait */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gplan/alloc_interpose.h"
#include "gplan/cli.h"
#include "gplan/compile.h"
#include "gplan/server.h"
#include "gplan/text.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1 };

typedef struct {
    const char *model, *host, *backend, *tokenizer, *weights, *alias, *chat_format, *cache_dir;
    const char *memory_text; /* --memory DEV=SIZE */
    const char *defines[64];
    int n_defines, port, slots, queue, threads, max_conns, timeout, grace, allow_unused, verbose;
    int wseed;
    uint64_t seed;
    int64_t ctx, batch, max_body, kv_positions, prompt_chunk, memory;
} options;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gplan-serve MODEL [options]     (MODEL: a .gguf file or a Hugging Face folder)\n"
            "       gplan-serve PLAN (--weights PATH | --random-weights SEED) [options]\n"
            "Serves the model over HTTP/1.1 with OpenAI's API: POST /v1/chat/completions and\n"
            "/v1/completions (streamed as server-sent events with \"stream\": true), GET /v1/models,\n"
            "/health (503 while loading) and /metrics (Prometheus text). Up to --slots sequences\n"
            "run in one batched eval a step (continuous batching), their KV caches blocks of one\n"
            "pool planned ahead (--kv-positions); a request starts when its prompt and max_tokens\n"
            "fit, else waits in a queue of --queue; past it the answer is 503 with Retry-After.\n"
            "A PLAN must hold a ragged batch of at least --slots sequences (gplan-compile -D n_seq).\n"
            "  --host ADDR             address to listen on (default 127.0.0.1)\n"
            "  --port N                port (default 8080; 0: any free one, printed at start)\n"
            "  --slots N               sequences generating at once (default 4)\n"
            "  --queue N               requests waiting beyond the slots (default 16)\n"
            "  --ctx N                 positions per sequence (default: the model's, at most 4096)\n"
            "  --kv-positions N        the KV pool's positions, all sequences together (default:\n"
            "                          --slots times --ctx)\n"
            "  --batch N               tokens per eval at most (default 512)\n"
            "  --memory DEV=SIZE       the plan within SIZE on cpu or cuda: without --ctx, the\n"
            "                          largest context that fits (docs/memory.md)\n"
            "  --prompt-chunk N        prompt tokens an eval takes while others generate (default\n"
            "                          64: their next tokens keep coming)\n"
            "  --threads N             CPU threads (default: the online cores)\n"
            "  --backend NAME          cpu (default), reference or cuda (when built)\n"
            "  --max-body BYTES        largest request body (default 1048576); more: 413\n"
            "  --max-connections N     connections at once (default 256)\n"
            "  --timeout S             an idle connection is closed after S seconds (default 60)\n"
            "  --grace S               at SIGTERM, running requests get S seconds (default 10)\n"
            "  --alias NAME            the model's name in responses (default: the file's)\n"
            "  --chat-format NAME      a built-in chat format instead of the template's (%s)\n"
            "  -D NAME=VALUE           a MODEL's graph parameter; --allow-unused: tensors need not\n"
            "                          all be in the graph\n"
            "  --tokenizer PATH        a .gguf, tokenizer.json or folder (default: the model's)\n"
            "  --weights PATH, --random-weights SEED  a PLAN's weights\n"
            "  --cache-dir DIR         plans' cache (default $GPLAN_CACHE_DIR or ~/.cache/gplan)\n"
            "  --verbose               libmicrohttpd's messages on stderr\n"
            "exit status: 0 after SIGTERM or SIGINT, 1 bad input (model, address), 2 bad usage\n",
            gp_lm_chat_formats());
}

static int usage_error(const char *msg, const char *arg)
{
    return gp_cli_usage_error("gplan-serve", msg, arg);
}

/* A GGUF file or a folder: a model; another regular file is taken for a plan. */
static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->slots = 4;
    o->prompt_chunk = 64;
    o->queue = 16;
    o->max_body = 1 << 20;
    o->max_conns = 256;
    o->timeout = 60;
    o->grace = 10;
    o->backend = "cpu";
    const gp_cli_opt opts[] = {
        {"--port", GP_CLI_INT, &o->port, 0, 65535, "--port needs 0..65535", NULL},
        {"--slots", GP_CLI_INT, &o->slots, 1, 1024, "--slots needs 1..1024", NULL},
        {"--queue", GP_CLI_INT, &o->queue, 0, 1 << 20, "--queue needs 0..1048576", NULL},
        {"--threads", GP_CLI_INT, &o->threads, 1, 256, "--threads needs 1..256", NULL},
        {"--max-connections", GP_CLI_INT, &o->max_conns, 1, 65536,
         "--max-connections needs 1..65536", NULL},
        {"--timeout", GP_CLI_INT, &o->timeout, 1, 86400, "--timeout needs 1..86400 seconds", NULL},
        {"--grace", GP_CLI_INT, &o->grace, 0, 86400, "--grace needs 0..86400 seconds", NULL},
        {"--ctx", GP_CLI_I64, &o->ctx, 1, INT32_MAX, "bad --ctx (an integer >= 1)", NULL},
        {"--batch", GP_CLI_I64, &o->batch, 1, INT32_MAX, "bad --batch (an integer >= 1)", NULL},
        {"--max-body", GP_CLI_I64, &o->max_body, 1, 1099511627776.0,
         "bad --max-body (bytes, >= 1)", NULL},
        {"--kv-positions", GP_CLI_I64, &o->kv_positions, 1, 1099511627776.0,
         "bad --kv-positions (an integer >= 1)", NULL},
        {"--prompt-chunk", GP_CLI_I64, &o->prompt_chunk, 1, INT32_MAX,
         "bad --prompt-chunk (an integer >= 1)", NULL},
        {"--host", GP_CLI_STR, &o->host, 0, 0, NULL, NULL},
        {"--backend", GP_CLI_STR, &o->backend, 0, 0, NULL, NULL},
        {"--tokenizer", GP_CLI_STR, &o->tokenizer, 0, 0, NULL, NULL},
        {"--weights", GP_CLI_STR, &o->weights, 0, 0, NULL, NULL},
        {"--alias", GP_CLI_STR, &o->alias, 0, 0, NULL, NULL},
        {"--chat-format", GP_CLI_STR, &o->chat_format, 0, 0, NULL, NULL},
        {"--cache-dir", GP_CLI_STR, &o->cache_dir, 0, 0, NULL, NULL},
        {"--memory", GP_CLI_STR, &o->memory_text, 0, 0, NULL, NULL},
        {"--random-weights", GP_CLI_U64, &o->seed, 0, 0, "bad --random-weights seed", &o->wseed},
        {"-D", GP_CLI_DEFINES, o->defines, 0, 64, "bad -D (NAME=VALUE, at most 64)",
         &o->n_defines},
        {"--allow-unused", GP_CLI_FLAG, &o->allow_unused, 0, 0, NULL, NULL},
        {"--verbose", GP_CLI_FLAG, &o->verbose, 0, 0, NULL, NULL},
    };
    int rc = gp_cli_parse("gplan-serve", GPLAN_VERSION_STRING, usage, opts,
                          sizeof opts / sizeof opts[0], argc, argv, &o->model);
    if (rc >= 0)
        return rc;
    if (!o->model)
        return usage_error("no model given", NULL);
    int plan = !gp_lm_is_model(o->model);
    if (plan && !o->weights == !o->wseed)
        return usage_error("a plan needs exactly one of --weights and --random-weights", NULL);
    if (!plan && o->weights)
        return usage_error("--weights is for a plan; a model file holds its weights", NULL);
    if (plan && (o->n_defines || o->ctx || o->batch || o->kv_positions || o->memory_text))
        return usage_error("-D, --ctx, --batch, --kv-positions and --memory need a model file (a "
                           "plan's are fixed by gplan-compile)", NULL);
    char dev[16], msg[256];
    if (o->memory_text &&
        gp_budget_parse(o->memory_text, dev, sizeof dev, &o->memory, msg, sizeof msg))
        return usage_error(msg, NULL);
    if (o->memory_text && strcmp(dev, o->backend && !strcmp(o->backend, "cuda") ? "cuda" : "cpu"))
        return usage_error("--memory names another device than --backend's", dev);
    return -1;
}

/* What responses call the model: --alias, else the file's name without .gguf. */
static void model_name(const options *o, char *out, size_t cap)
{
    if (o->alias) {
        snprintf(out, cap, "%s", o->alias);
        return;
    }
    const char *p = o->model + strlen(o->model);
    while (p > o->model && p[-1] == '/')
        p--;
    const char *end = p;
    while (p > o->model && p[-1] != '/')
        p--;
    size_t n = (size_t)(end - p);
    if (n > 5 && !strncmp(end - 5, ".gguf", 5))
        n -= 5;
    snprintf(out, cap, "%.*s", (int)n, p);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The next SIGTERM/SIGINT within ms (0 when none came). */
static int wait_signal(const sigset_t *set, int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    int sig = sigtimedwait(set, NULL, &ts);
    return sig > 0 ? sig : 0;
}

int main(int argc, char **argv)
{
    gp_alloc_interpose_on();
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    /* Every thread (libmicrohttpd's, the engine's, the backend's) inherits the mask: the signals
     * come to sigtimedwait here. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[4096], name[256];
    model_name(&o, name, sizeof name);
    gp_http_opts ho = {o.host, o.port, (size_t)o.max_body, o.max_conns, o.timeout, name,
                       o.verbose};
    gp_http *h = gp_http_start(&ho, err, sizeof err);
    if (!h) {
        fprintf(stderr, "gplan-serve: %s\n", err);
        return EXIT_INPUT;
    }
    printf("gplan-serve: listening on http://%s%s%s:%d\n", strchr(o.host, ':') ? "[" : "",
           o.host, strchr(o.host, ':') ? "]" : "", gp_http_port(h));
    fflush(stdout);

    int plan = !gp_lm_is_model(o.model);
    gp_lm_opts lo = gp_lm_defaults();
    lo.plan = plan ? o.model : NULL;
    lo.tokenizer = o.tokenizer;
    lo.defines = o.defines;
    lo.n_defines = o.n_defines;
    lo.context = o.ctx;
    lo.batch = o.batch;
    lo.n_seq = plan ? 0 : o.slots; /* a plan's batch is its own (-D n_seq) */
    lo.kv_positions = o.kv_positions;
    lo.memory = o.memory;
    lo.cache_dir = o.cache_dir;
    lo.backend = o.backend;
    lo.n_threads = o.threads; /* 0: the online cores */
    lo.chat_format = o.chat_format;
    lo.allow_unused = o.allow_unused;
    lo.random_weights = o.wseed;
    lo.random_seed = o.seed;
    gp_lm *lm = gp_lm_load(plan ? o.weights : o.model, &lo, err, sizeof err);
    gp_engine *e = NULL;
    if (lm) {
        gp_engine_opts eo = {o.slots, o.queue, 1, o.prompt_chunk};
        e = gp_engine_new(lm, &eo, err, sizeof err);
    }
    if (lm && *gp_lm_note(lm))
        fprintf(stderr, "gplan-serve: note: %s\n", gp_lm_note(lm));
    if (!e) {
        fprintf(stderr, "gplan-serve: %s\n", err);
        gp_http_stop(h);
        gp_lm_free(lm);
        return EXIT_INPUT;
    }
    gp_http_serve(h, lm, e);
    int sig = 0;
    while (!gp_engine_ready(e) && !*gp_engine_error(e) && !(sig = wait_signal(&set, 50)))
        ;
    if (*gp_engine_error(e)) {
        fprintf(stderr, "gplan-serve: %s\n", gp_engine_error(e));
        gp_http_stop(h);
        gp_engine_free(e);
        gp_lm_free(lm);
        return EXIT_INPUT;
    }
    if (!sig) {
        printf("gplan-serve: ready: %s, %d slots of %lld positions, %d threads, backend %s\n",
               name, o.slots, (long long)gp_lm_context(lm), gp_lm_threads(lm), o.backend);
        fflush(stdout);
        while (!(sig = wait_signal(&set, 1000)))
            ;
    }
    /* Draining: no new connections or requests; running ones get the grace period, then are
     * cancelled (a second signal cancels at once). */
    fprintf(stderr, "gplan-serve: %s: finishing %d requests\n", strsignal(sig),
            gp_http_active(h));
    gp_http_drain(h);
    gp_engine_close(e);
    double until = now_s() + o.grace;
    int cancelled = 0;
    while (gp_http_active(h) > 0) {
        if (!cancelled && (now_s() > until || wait_signal(&set, 20))) {
            gp_engine_cancel_all(e);
            cancelled = 1;
            until = now_s() + 5;
        } else if (cancelled && now_s() > until) {
            break; /* a client that reads nothing: closed by gp_http_stop */
        } else if (cancelled) {
            struct timespec ts = {0, 20000000L};
            nanosleep(&ts, NULL);
        }
    }
    gp_http_stop(h);
    gp_engine_free(e);
    gp_lm_free(lm);
    return EXIT_OK;
}
