/* gplan-run: runs a plan on a backend: evaluates a prompt in chunks, then generates tokens one eval
 * at a time, and with --stats reports timings, allocations during evals and memory.
 * Exit status: 0 ok, 1 bad input (plan, weights, token ids, prompt too long), 2 bad usage. */
#define _GNU_SOURCE /* RTLD_NEXT for the allocation counter */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "runtime/gplan.h"

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

/* ---- host allocations during evals, counted in-process ----
 * The executable defines malloc & co., so every call in the process (libraries included) reaches
 * them first; they count calls while `in_eval` is set (apart: those of the thread that runs the
 * eval, `on_eval_thread`) and forward to the next definition
 * (dlsym(RTLD_NEXT)). dlsym itself may call calloc before the forwards are known: a small static
 * buffer serves those calls. Sanitizer builds own malloc, so there the counter is off. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GP_NO_ALLOC_INTERPOSE 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define GP_NO_ALLOC_INTERPOSE 1
#endif
#endif

static atomic_int in_eval;
static _Thread_local int on_eval_thread; /* set around gp_session_eval on the thread calling it */

#ifndef GP_NO_ALLOC_INTERPOSE
static atomic_llong eval_allocs, eval_thread_allocs; /* all threads; the eval thread's */
static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);

static _Alignas(64) unsigned char boot_buf[4096]; /* dlsym's own allocations while resolving */
static size_t boot_used;
static int resolving;

static int from_boot(const void *p)
{
    return (const unsigned char *)p >= boot_buf && (const unsigned char *)p < boot_buf + sizeof boot_buf;
}

static void *boot_alloc(size_t n)
{
    n = (n + 15) / 16 * 16;
    if (n > sizeof boot_buf - boot_used)
        return NULL;
    void *p = boot_buf + boot_used;
    boot_used += n;
    return p;
}

static void resolve(void)
{
    if (real_malloc || resolving)
        return;
    resolving = 1;
    real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    real_posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
    real_mmap = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
    resolving = 0;
}

static void count(void)
{
    if (atomic_load_explicit(&in_eval, memory_order_relaxed)) {
        atomic_fetch_add(&eval_allocs, 1);
        if (on_eval_thread)
            atomic_fetch_add(&eval_thread_allocs, 1);
    }
}

void *malloc(size_t n)
{
    resolve();
    if (!real_malloc)
        return boot_alloc(n);
    count();
    return real_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    resolve();
    if (!real_calloc) {
        if (size && n > SIZE_MAX / size)
            return NULL;
        return boot_alloc(n * size); /* static, hence zeroed */
    }
    count();
    return real_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    resolve();
    count();
    if (from_boot(p)) { /* never happens in practice; copy what fits */
        void *q = malloc(n);
        if (q)
            memcpy(q, p, n < sizeof boot_buf ? n : sizeof boot_buf);
        return q;
    }
    return real_realloc(p, n);
}

void free(void *p)
{
    if (!p || from_boot(p))
        return;
    resolve();
    count();
    real_free(p);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    resolve();
    count();
    return real_posix_memalign(out, align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    resolve();
    count();
    return real_aligned_alloc(align, n);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    resolve();
    count();
    return real_mmap(addr, len, prot, flags, fd, off);
}
#endif

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
    double temp;
    uint64_t seed;
    const char *logits_out;
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
            "their ids as they come.\n"
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
            "  -n N                  tokens to generate (default 16)\n"
            "  --eos ID              stop at this token (default: none)\n"
            "  --ignore-eos          keep generating after --eos\n"
            "  --temp T              sampling temperature; 0 (default) is greedy\n"
            "  --seed S              seed of the sampler (default 1)\n"
            "  --logits-out FILE     append the last row of logits of every eval (raw f32)\n"
            "  --stats               print evals, ms per eval, tokens/s, allocations during evals\n"
            "                        and memory use to stderr\n"
            "  --loop                at the end of the planned context start again at position 0\n"
            "                        (without it generation stops there)\n"
            "  -h, --help            print this help\n"
            "  --version             print the version\n"
            "\n"
            "exit status: 0 success, 1 bad input (plan, weights, token ids, prompt longer than the\n"
            "context), 2 bad usage\n");
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

static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->backend = "cpu";
    o->n_gen = 16;
    o->eos = -1;
    o->seed = 1;
    o->lora_scale = 1.0;
    int lora_scale_set = 0, lora_mode_set = 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = cores < 1 ? 1 : cores > 64 ? 64 : (int)cores;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
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
        } else if (a[0] == '-' && a[1] != '\0') {
            static const char *const with_value[] = {
                "--weights", "--random-weights", "--backend", "--threads", "--prompt-ids", "-n",
                "--eos", "--temp", "--seed", "--logits-out", "--lora", "--lora-scale",
                "--lora-mode", "--lora-merge-plan"};
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
                char *end;
                o->temp = strtod(v, &end);
                if (end == v || *end || !(o->temp >= 0) || !isfinite(o->temp))
                    return usage_error("bad --temp (a number >= 0)", v);
            } else if (!strcmp(a, "--seed")) {
                if (parse_u64(v, &o->seed))
                    return usage_error("bad --seed", v);
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
                char *end;
                o->lora_scale = strtod(v, &end);
                if (end == v || *end || !isfinite(o->lora_scale))
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
    if ((lora_scale_set || lora_mode_set || o->lora_merge_plan) && !o->lora)
        return usage_error("--lora-scale, --lora-mode and --lora-merge-plan need --lora", NULL);
    if (o->lora && !o->lora_runtime && !o->lora_merge_plan)
        return usage_error("--lora in merge mode needs --lora-merge-plan FILE (gplan-compile "
                           "MODEL -D lora_r=R --lora-merge -o FILE)", NULL);
    if (o->lora_runtime && o->lora_merge_plan)
        return usage_error("--lora-merge-plan is for merge mode, not --lora-mode runtime", NULL);
    if (!o->prompt) {
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

/* ---- sampling (no allocation: two passes over the logits row) ---- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* best: the row's argmax when the plan computed it (its "next" output), else -1. */
static int32_t pick(const float *row, int64_t vocab, int64_t best, double temp, uint64_t *rng)
{
    if (best < 0 || best >= vocab)
        best = gp_argmax(row, vocab);
    if (temp <= 0)
        return (int32_t)best;
    double max = row[best], sum = 0;
    for (int64_t i = 0; i < vocab; i++)
        sum += exp((row[i] - max) / temp);
    double u = (double)(rng_next(rng) >> 11) * 0x1.0p-53 * sum, acc = 0;
    for (int64_t i = 0; i < vocab; i++) {
        acc += exp((row[i] - max) / temp);
        if (acc > u)
            return (int32_t)i;
    }
    return (int32_t)best;
}

/* ---- running ---- */

typedef struct {
    gp_session *s;
    gp_model_info info;
    FILE *logits_out;
    int64_t next;            /* the last row's argmax from the plan's "next" output, or -1 */
    int64_t evals_prompt, evals_gen, tokens_prompt, tokens_gen;
    double ms_prompt, ms_gen;
} runner;

/* One eval of n tokens at positions pos0 .. pos0 + n - 1; leaves the last logits row in *row. */
static int eval_chunk(runner *r, const int32_t *ids, int32_t *pos, int64_t n, int64_t pos0,
                      const float **row, int is_prompt)
{
    for (int64_t i = 0; i < n; i++)
        pos[i] = (int32_t)(pos0 + i);
    if (gp_session_set_tokens(r->s, ids, pos, n)) {
        fprintf(stderr, "gplan-run: %s\n", gp_session_error(r->s));
        return -1;
    }
    double t0 = now_ms();
    on_eval_thread = 1;
    atomic_store(&in_eval, 1);
    int rc = gp_session_eval(r->s);
    atomic_store(&in_eval, 0);
    on_eval_thread = 0;
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
    gp_tensor_info li;
    const float *logits = gp_session_output(r->s, r->info.logits, &li);
    *row = logits + (n - 1) * r->info.vocab;
    gp_tensor_info ni;
    const int32_t *next = gp_session_output(r->s, "next", &ni);
    r->next = next && ni.ndim == 1 && ni.ne[0] == n && ni.bytes == (size_t)n * 4 ? next[n - 1] : -1;
    if (r->logits_out &&
        fwrite(*row, sizeof(float), (size_t)r->info.vocab, r->logits_out) != (size_t)r->info.vocab) {
        fprintf(stderr, "gplan-run: cannot write the logits file\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) {
        free(o.prompt);
        return rc;
    }
    char err[4096];
    int status = EXIT_INPUT;
    gp_model *m = NULL;
    runner r;
    memset(&r, 0, sizeof r);
    r.next = -1;
    int32_t *pos = NULL;

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
    int64_t ctx = r.info.context > 0 ? r.info.context : INT64_MAX;
    for (int64_t i = 0; i < o.n_prompt; i++) {
        if (o.prompt[i] < 0 || o.prompt[i] >= r.info.vocab) {
            fprintf(stderr, "gplan-run: prompt token %lld is %d, outside the vocabulary [0, %lld)\n",
                    (long long)i, o.prompt[i], (long long)r.info.vocab);
            goto done;
        }
    }
    if (o.n_prompt > ctx) {
        fprintf(stderr, "gplan-run: the prompt has %lld tokens, more than the planned context of "
                "%lld positions\n", (long long)o.n_prompt, (long long)ctx);
        goto done;
    }
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
    int64_t chunk_max = r.info.max_tokens;
    pos = malloc((size_t)chunk_max * sizeof *pos);
    if (!pos) {
        fprintf(stderr, "gplan-run: out of memory\n");
        goto done;
    }

    /* The prompt, in chunks of at most the planned tokens per eval. */
    const float *row = NULL;
    int64_t n_past = 0;
    for (int64_t i = 0; i < o.n_prompt; i += chunk_max) {
        int64_t n = o.n_prompt - i < chunk_max ? o.n_prompt - i : chunk_max;
        if (eval_chunk(&r, o.prompt + i, pos, n, n_past, &row, 1))
            goto done;
        n_past += n;
    }

    /* Generation, one token per eval. */
    uint64_t rng = o.seed;
    long rss_start = rss_kib();
    int32_t tok = o.n_gen > 0 ? pick(row, r.info.vocab, r.next, o.temp, &rng) : 0;
    int64_t made = 0;
    int at_context = 0;
    while (made < o.n_gen) {
        printf("%s%d", made ? " " : "", tok);
        fflush(stdout);
        made++;
        if ((tok == o.eos && !o.ignore_eos) || made == o.n_gen)
            break;
        if (n_past >= ctx) {
            if (!o.loop) {
                at_context = 1;
                break;
            }
            /* A new sequence from position 0, continuing from the last token. */
            if (gp_session_reset(r.s)) {
                fprintf(stderr, "gplan-run: %s\n", gp_session_error(r.s));
                goto done;
            }
            n_past = 0;
        }
        if (eval_chunk(&r, &tok, pos, 1, n_past, &row, 0))
            goto done;
        n_past++;
        tok = pick(row, r.info.vocab, r.next, o.temp, &rng);
    }
    if (made)
        printf("\n");
    fflush(stdout); /* before the messages and stats on stderr */
    if (at_context)
        fprintf(stderr, "gplan-run: reached the planned context (%lld positions); stopping "
                "(--loop starts again at position 0)\n", (long long)ctx);
    long rss_end = rss_kib();
    status = EXIT_OK;

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
        long long all = atomic_load(&eval_allocs), mine = atomic_load(&eval_thread_allocs);
        fprintf(stderr,
                "stats: host allocations during evals: %lld on the eval thread, %lld on other "
                "threads%s\n",
                mine, all - mine, strcmp(gp_session_backend(r.s), "cuda") ? "" : " (driver)");
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
    free(pos);
    gp_session_free(r.s);
    gp_model_free(m);
    free(o.prompt);
    return status;
}
