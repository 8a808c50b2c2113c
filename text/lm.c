/* gp_lm: a language model from a GGUF file or a Hugging Face folder. The graph is the family's
 * (family/), compiled in process (compile/, planner/) and its plan kept in a cache folder keyed by
 * everything it is made from; then weights, tokenizer and chat template. */
#define _GNU_SOURCE /* realpath, st_mtim, dladdr */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compile/compile_impl.h"
#include "family/family.h"
#include "planner/planner.h"
#include "weights/filemap.h"
#include "runtime/lora.h" /* gp_model_plan */
#include "text/lm_impl.h"

/* The context a plan gets when the file allows more and the caller says nothing: a KV cache of
 * 128k positions would take gigabytes that a chat seldom uses. */
#define GP_LM_DEFAULT_CONTEXT 4096
/* The rows of a ragged batch's KV blocks (gp_lm_opts.n_seq). */
#define GP_LM_KV_BLOCK 16
#define GP_LM_MAX_DEFINES 64
/* Plans a cache folder keeps (a few hundred KiB each for a small model): past it, the least
 * recently used go when a new one is written (a load marks its plan used). */
#define GP_LM_CACHE_KEEP 32

gp_lm_opts gp_lm_defaults(void)
{
    gp_lm_opts o;
    memset(&o, 0, sizeof o);
    o.lora_scale = 1;
    return o;
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

static int is_gguf(const char *path)
{
    char magic[4] = {0};
    FILE *f = is_file(path) ? fopen(path, "rb") : NULL;
    size_t n = f ? fread(magic, 1, 4, f) : 0;
    if (f)
        fclose(f);
    return n == 4 && !memcmp(magic, "GGUF", 4);
}

int gp_lm_is_model(const char *path)
{
    struct stat st;
    return path && !stat(path, &st) && (!S_ISREG(st.st_mode) || is_gguf(path));
}

/* ---- the plan cache ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
    return fnv(h, s, strlen(s) + 1);
}

/* The identity of a file: its real path, size and modification time. */
static uint64_t fnv_file(uint64_t h, const char *path)
{
    char real[PATH_MAX];
    struct stat st;
    if (!realpath(path, real) || stat(real, &st))
        return fnv_str(h, path);
    int64_t v[3] = {(int64_t)st.st_size, (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec};
    return fnv(fnv_str(h, real), v, sizeof v);
}

/* The identity of the code that plans: the file holding this function (the shared library, or
 * the executable gplan is linked into; the main program's name is relative as it was run, so
 * /proc/self/exe stands for it), so that a rebuilt gplan never loads a plan an older build made
 * with the same version string (a planner fix would not reach cached plans). */
static uint64_t fnv_self(uint64_t h)
{
    Dl_info info;
    if (dladdr((void *)(uintptr_t)&fnv_self, &info) && info.dli_fname && info.dli_fname[0] == '/')
        return fnv_file(h, info.dli_fname);
    return fnv_file(h, "/proc/self/exe");
}

/* The cache folder: o->cache_dir, $GPLAN_CACHE_DIR, $XDG_CACHE_HOME/gplan, ~/.cache/gplan; 0 when
 * there is none (o->cache_dir "", or no home). */
static int cache_dir(const gp_lm_opts *o, char *out, size_t cap)
{
    const char *env;
    int n = -1;
    if (o->cache_dir)
        n = *o->cache_dir ? snprintf(out, cap, "%s", o->cache_dir) : -1;
    else if ((env = getenv("GPLAN_CACHE_DIR")) && *env)
        n = snprintf(out, cap, "%s", env);
    else if ((env = getenv("XDG_CACHE_HOME")) && *env)
        n = snprintf(out, cap, "%s/gplan", env);
    else if ((env = getenv("HOME")) && *env)
        n = snprintf(out, cap, "%s/.cache/gplan", env);
    return n > 0 && (size_t)n < cap;
}

/* mkdir -p. 0 or -1. */
static int make_dirs(char *path)
{
    for (char *p = path + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = '\0';
            int bad = mkdir(path, 0755) && errno != EEXIST;
            *p = c;
            if (bad || !c)
                return bad ? -1 : 0;
        }
    }
}

/* ---- compiling the family's graph ---- */

/* n_batch, the context, n_seq, kv_block, kv_pool, and the context and n_rows again. */
#define GP_LM_OWN_DEFINES 8

typedef struct {
    const char *defines[GP_LM_MAX_DEFINES];
    int n;
    char own[GP_LM_OWN_DEFINES][128]; /* the defines made here */
    int n_own;
} define_list;

static int define_add(define_list *d, const char *name, int64_t value)
{
    if (d->n == GP_LM_MAX_DEFINES || d->n_own == GP_LM_OWN_DEFINES)
        return -1;
    snprintf(d->own[d->n_own], sizeof d->own[0], "%s=%lld", name, (long long)value);
    d->defines[d->n++] = d->own[d->n_own++];
    return 0;
}

/* 1 when a define (the caller's) sets parameter name. */
static int defines_set(const gp_lm_opts *o, const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < o->n_defines; i++)
        if (!strncmp(o->defines[i], name, n) && o->defines[i][n] == '=')
            return 1;
    return 0;
}

typedef struct {
    const gp_family *fam;
    const char *path;        /* the GGUF file or the folder */
    char config[PATH_MAX];   /* the folder's config.json, "" for GGUF */
    int allow_unused;        /* gp_lm_opts.allow_unused */
    int random_weights;      /* gp_lm_opts.random_weights: the file's tensors are not read */
} source;

/* Compiles the family's graph with the file's parameters (the GGUF file's read into *gg once)
 * and defs; the resolved parameters in *params. The graph's source locations point into d, which
 * must outlive it (gp_plan_build reads them). NULL with err. */
static gp_graph *compile_graph(const source *src, const define_list *defs, gp_compile_gguf *gg,
                               char **params, gp_diag *d, char *err, size_t err_len)
{
    gp_compile_opts o = gp_compile_defaults();
    o.defines = defs->defines;
    o.n_defines = defs->n;
    o.config = src->config[0] ? src->config : NULL;
    o.gguf = src->config[0] ? NULL : src->path;
    o.allow_unused = src->allow_unused;
    gp_graph *g = gp_compile_graph(src->fam->graph_file, src->fam->graph_text, src->fam->graph_len,
                                   &o, gg, !src->random_weights, params, d, err, err_len);
    if (!g && !*err)
        snprintf(err, err_len, "%s: %s", src->path, gp_diag_text(d));
    return g;
}

/* The graph with the caller's defines, and these unless the caller set them: the context capped
 * at GP_LM_DEFAULT_CONTEXT, logits for one row (the graph's n_rows) unless asked otherwise. */
static gp_graph *compile_for(const source *src, const gp_lm_opts *o, gp_diag *d, int64_t *ctx,
                             char *err, size_t err_len)
{
    define_list defs;
    memset(&defs, 0, sizeof defs);
    for (int i = 0; i < o->n_defines && defs.n < GP_LM_MAX_DEFINES; i++)
        defs.defines[defs.n++] = o->defines[i];
    const char *ctx_param = src->fam->ctx_param;
    /* A ragged batch: a logits row for every sequence, its pool in blocks of the graph's rows. */
    int64_t pool = o->kv_positions > 0 ? (o->kv_positions + GP_LM_KV_BLOCK - 1) / GP_LM_KV_BLOCK
                                       : 0;
    if ((o->batch > 0 && define_add(&defs, "n_batch", o->batch)) ||
        (o->context > 0 && define_add(&defs, ctx_param, o->context)) ||
        (o->n_seq > 0 && (define_add(&defs, "n_seq", o->n_seq) ||
                          define_add(&defs, "kv_block", GP_LM_KV_BLOCK) ||
                          (pool && define_add(&defs, "kv_pool", pool))))) {
        snprintf(err, err_len, "%s: more than %d defines", src->path, GP_LM_MAX_DEFINES);
        return NULL;
    }
    char *params = NULL;
    gp_compile_gguf gg;
    memset(&gg, 0, sizeof gg);
    gp_graph *g = compile_graph(src, &defs, &gg, &params, d, err, err_len);
    int again = 0;
    *ctx = g ? gp_compile_param(params, ctx_param) : 0;
    if (g && !o->context && !defines_set(o, ctx_param) && *ctx > GP_LM_DEFAULT_CONTEXT) {
        again |= !define_add(&defs, ctx_param, GP_LM_DEFAULT_CONTEXT);
        *ctx = GP_LM_DEFAULT_CONTEXT;
    }
    int64_t rows = o->n_seq > 0 ? o->n_seq : 1;
    if (g && !defines_set(o, "n_rows") && gp_compile_param(params, "n_rows") > rows)
        again |= !define_add(&defs, "n_rows", rows);
    free(params); /* resolved also when a later check refuses the graph */
    if (again) {
        gp_graph_free(g);
        g = compile_graph(src, &defs, &gg, NULL, d, err, err_len);
    }
    gp_compile_gguf_close(&gg);
    return g;
}

/* The graph of src under o compiled and planned: 0 with *p and its context in *ctx, or -1 with
 * err. */
static int plan_for(const source *src, const gp_lm_opts *o, gp_plan **p, int64_t *ctx, char *err,
                    size_t err_len)
{
    gp_diag *d = gp_diag_new(NULL);
    gp_graph *g = d ? compile_for(src, o, d, ctx, err, err_len) : NULL;
    *p = NULL;
    int bad = !g || gp_plan_build(g, NULL, p, d);
    if (bad && g)
        snprintf(err, err_len, "%s: %s", src->path, gp_diag_text(d));
    else if (!d)
        snprintf(err, err_len, "out of memory");
    gp_graph_free(g);
    gp_diag_free(d); /* after the graph, whose locations point into it */
    return bad ? -1 : 0;
}

/* o->memory: *p as it is when it fits; else, when the context is not the caller's, the plan of
 * the largest context below it that fits (plans grow with the context: a bisection, each probe
 * compiled and planned); else, or when not even one position fits, -1 with err giving the
 * figures. */
static int fit_memory(const source *src, const gp_lm_opts *o, gp_plan **p, int64_t ctx,
                      char *err, size_t err_len)
{
    gp_plan_memory m;
    gp_plan_memory_of(*p, &m);
    if (o->memory <= 0 || m.total <= o->memory)
        return 0;
    char need[32], have[32];
    gp_plan_bytes_text(o->memory, have, sizeof have);
    int fixed = o->context > 0 || defines_set(o, src->fam->ctx_param);
    int64_t lo = 0, hi = ctx; /* lo fits (0: none yet), hi does not */
    gp_plan *best = NULL;
    gp_plan_memory bm = m;
    while (!fixed && hi - lo > 1) {
        gp_lm_opts t = *o;
        t.context = lo + (hi - lo) / 2;
        gp_plan *q;
        int64_t c;
        if (plan_for(src, &t, &q, &c, err, err_len)) {
            gp_plan_free(best);
            return -1;
        }
        gp_plan_memory qm;
        gp_plan_memory_of(q, &qm);
        if (qm.total <= o->memory) {
            gp_plan_free(best);
            best = q, lo = t.context;
        } else {
            gp_plan_free(q);
            hi = t.context, bm = qm;
        }
    }
    if (best) {
        gp_plan_free(*p);
        *p = best;
        return 0;
    }
    gp_plan_bytes_text(bm.total, need, sizeof need);
    snprintf(err, err_len, "%s: a context of %lld positions needs %s, over the budget of %s "
             "(weights %lld, state %lld, arena %lld, io %lld, extras %lld bytes)", src->path,
             (long long)(fixed ? ctx : hi), need, have, (long long)bm.weights,
             (long long)bm.state, (long long)bm.arena, (long long)bm.io, (long long)bm.extras);
    return -1;
}

typedef struct {
    char name[256];
    int64_t t; /* modification time, ns */
} cached_plan;

static int by_time(const void *a, const void *b)
{
    int64_t x = ((const cached_plan *)a)->t, y = ((const cached_plan *)b)->t;
    return (x > y) - (x < y);
}

/* The cache folder's plans past GP_LM_CACHE_KEEP removed, the least recently used first (by
 * modification time, which a load refreshes), never keep (the one just written). A plan another
 * process has open stays readable; one it is about to open is planned again there. */
static void cache_trim(const char *plans, const char *keep)
{
    DIR *d = opendir(plans);
    if (!d)
        return;
    cached_plan *all = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    char path[PATH_MAX];
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        struct stat st;
        if (e->d_name[0] == '.' || len < 6 || len >= sizeof all[0].name ||
            strcmp(e->d_name + len - 5, ".plan") ||
            snprintf(path, sizeof path, "%s/%s", plans, e->d_name) >= (int)sizeof path ||
            !strcmp(path, keep) || stat(path, &st) || !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            cached_plan *more = realloc(all, (cap = cap ? 2 * cap : 64) * sizeof *all);
            if (!more)
                break;
            all = more;
        }
        snprintf(all[n].name, sizeof all[n].name, "%s", e->d_name);
        all[n++].t = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    }
    closedir(d);
    if (n + 1 > GP_LM_CACHE_KEEP) { /* the others and keep */
        qsort(all, n, sizeof *all, by_time);
        for (size_t i = 0; i < n + 1 - GP_LM_CACHE_KEEP; i++)
            if (snprintf(path, sizeof path, "%s/%s", plans, all[i].name) < (int)sizeof path)
                unlink(path);
    }
    free(all);
}

/* The plan of src under o: from the cache when it has it, else compiled, planned and cached
 * (written to a file of this process, then renamed, so that loads never see half a plan). */
static gp_model *plan_model(gp_lm *lm, const source *src, const gp_lm_opts *o, char *err,
                            size_t err_len)
{
    uint64_t h = fnv_self(fnv_str(1469598103934665603ull, GPLAN_VERSION_STRING));
    h = fnv_file(h, src->config[0] ? src->config : src->path);
    h = fnv_str(fnv_str(h, src->fam->name), src->fam->graph_text);
    for (int i = 0; i < o->n_defines; i++)
        h = fnv_str(h, o->defines[i]);
    int64_t sizes[6] = {o->context, o->batch, o->allow_unused, o->n_seq, o->kv_positions,
                        o->memory};
    h = fnv(h, sizes, sizeof sizes);

    char dir[PATH_MAX - 64];
    int cached = cache_dir(o, dir, sizeof dir);
    if (cached) {
        snprintf(lm->plan_path, sizeof lm->plan_path, "%s/plans/%s-%016llx.plan", dir,
                 src->fam->name, (unsigned long long)h);
        if (is_file(lm->plan_path)) {
            gp_model *m = gp_model_load(lm->plan_path, err, err_len);
            if (m) {
                utimensat(AT_FDCWD, lm->plan_path, NULL, 0); /* used now (cache_trim) */
                return m;
            }
            /* else a stale or damaged file: planned again below */
        }
    }
    gp_plan *p;
    int64_t ctx;
    if (plan_for(src, o, &p, &ctx, err, err_len))
        return NULL;
    if (fit_memory(src, o, &p, ctx, err, err_len)) {
        gp_plan_free(p);
        return NULL;
    }
    gp_model *m = NULL;
    if (cached) {
        char tmp[sizeof lm->plan_path + 32];
        snprintf(tmp, sizeof tmp, "%s/plans", dir);
        static atomic_uint serial; /* threads of one process load at once too */
        snprintf(tmp + strlen(tmp), sizeof tmp - strlen(tmp), "/.%ld-%u.tmp", (long)getpid(),
                 atomic_fetch_add(&serial, 1));
        char plans[sizeof dir + 8];
        snprintf(plans, sizeof plans, "%s/plans", dir);
        if (!make_dirs(plans) && !gp_plan_write(p, tmp, err, err_len) &&
            !rename(tmp, lm->plan_path)) {
            cache_trim(plans, lm->plan_path);
            m = gp_model_load(lm->plan_path, err, err_len);
        } else {
            unlink(tmp);
        }
    }
    if (!m) { /* no cache, or it cannot be written: the plan stays in memory */
        lm->plan_path[0] = '\0';
        unsigned char *bytes = NULL;
        size_t len = 0;
        if (!gp_plan_write_mem(p, &bytes, &len, err, err_len))
            m = gp_model_load_mem(bytes, len, src->path, err, err_len);
        free(bytes);
    }
    gp_plan_free(p);
    return m;
}

/* ---- tokenizer and chat ---- */

/* o->tokenizer; else the GGUF file; else a tokenizer.json in the checkpoint folder or beside the
 * checkpoint file. NULL without err when there is none. */
static gp_tok *open_tokenizer(const char *path, const gp_lm_opts *o, int *failed, char *err,
                              size_t err_len)
{
    char buf[PATH_MAX];
    const char *use = o->tokenizer;
    if (use && !*use)
        return NULL;
    if (!use && path) {
        if (is_gguf(path)) {
            use = path;
        } else if (is_dir(path)) {
            snprintf(buf, sizeof buf, "%s/tokenizer.json", path);
            use = is_file(buf) ? path : NULL;
        } else {
            const char *slash = strrchr(path, '/');
            int dir_len = !slash || slash == path ? 1 : (int)(slash - path);
            snprintf(buf, sizeof buf, "%.*s/tokenizer.json", dir_len, slash ? path : ".");
            if (is_file(buf)) {
                snprintf(buf, sizeof buf, "%.*s", dir_len, slash ? path : ".");
                use = buf;
            }
        }
    }
    if (!use)
        return NULL;
    gp_tok *t = gp_tok_load(use, err, err_len);
    *failed = !t;
    return t;
}

static void setup_chat(gp_lm *lm, const gp_family *fam)
{
    const char *tmpl = gp_tok_chat_template(lm->tok);
    gp_chat_format f;
    if (tmpl) {
        lm->has_chat = !gp_chat_detect(tmpl, &lm->tpl, lm->chat_err, sizeof lm->chat_err);
    } else if (fam && fam->chat_format && !gp_chat_format_parse(fam->chat_format, &f)) {
        lm->tpl = gp_chat_builtin(f);
        lm->has_chat = 1;
    } else {
        snprintf(lm->chat_err, sizeof lm->chat_err, "the tokenizer has no chat template: choose "
                 "one with --chat-format NAME (%s)", gp_chat_format_list());
    }
    int32_t bos = gp_tok_bos(lm->tok), eos = gp_tok_eos(lm->tok);
    int nb = bos >= 0 ? gp_tok_piece(lm->tok, bos, 1, lm->bos, sizeof lm->bos) : -1;
    int ne = eos >= 0 ? gp_tok_piece(lm->tok, eos, 1, lm->eos, sizeof lm->eos) : -1;
    lm->bos[nb > 0 && (size_t)nb < sizeof lm->bos ? nb : 0] = '\0';
    lm->eos[ne > 0 && (size_t)ne < sizeof lm->eos ? ne : 0] = '\0';
}

/* ---- loading ---- */

static int find_family(const char *path, source *src, char *err, size_t err_len)
{
    memset(src, 0, sizeof *src);
    src->path = path;
    if (is_dir(path)) {
        snprintf(src->config, sizeof src->config, "%s/config.json", path);
        if (!is_file(src->config)) {
            snprintf(err, err_len, "%s: a folder without config.json (a Hugging Face model "
                     "folder holds config.json, the safetensors and tokenizer.json)", path);
            return -1;
        }
        return gp_family_from_hf_config(src->config, &src->fam, err, err_len);
    }
    if (gp_file_check(path, err, err_len))
        return -1;
    return gp_family_from_gguf(path, &src->fam, err, err_len);
}

gp_lm *gp_lm_load(const char *path, const gp_lm_opts *opts, char *err, size_t err_len)
{
    gp_lm_opts o = opts ? *opts : gp_lm_defaults();
    gp_lm *lm = calloc(1, sizeof *lm);
    if (!lm) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    source src;
    memset(&src, 0, sizeof src);
    snprintf(lm->backend, sizeof lm->backend, "%s", o.backend ? o.backend : "cpu");
    lm->device = o.device;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    lm->n_threads = o.n_threads > 0 ? o.n_threads : cores < 1 ? 1 : cores > 64 ? 64 : (int)cores;
    if (o.context < 0 || o.batch < 0 || o.n_defines < 0 || o.n_seq < 0 || o.kv_positions < 0 ||
        o.memory < 0) {
        snprintf(err, err_len, "negative context, batch, define count, n_seq, kv_positions or "
                 "memory");
        goto fail;
    }
    if (o.plan) {
        if (o.n_defines || o.context || o.batch || o.n_seq || o.kv_positions || o.memory) {
            snprintf(err, err_len, "%s: defines, context, batch and n_seq are for a model file (a plan's "
                     "are fixed by gplan-compile)", o.plan);
            goto fail;
        }
        if (!path && !o.random_weights) {
            snprintf(err, err_len, "%s: no weights: give a checkpoint or random weights", o.plan);
            goto fail;
        }
        if (!(lm->m = gp_model_load(o.plan, err, err_len)))
            goto fail;
        snprintf(lm->plan_path, sizeof lm->plan_path, "%s", o.plan);
    } else {
        if (!path) {
            snprintf(err, err_len, "no model given");
            goto fail;
        }
        if (find_family(path, &src, err, err_len))
            goto fail;
        src.allow_unused = o.allow_unused;
        src.random_weights = o.random_weights;
        if (!(lm->m = plan_model(lm, &src, &o, err, err_len)))
            goto fail;
        snprintf(lm->arch, sizeof lm->arch, "%s", src.fam->gguf_arch);
    }
    gp_model_get_info(lm->m, &lm->info);
    if (!lm->info.tokens || !lm->info.positions || !lm->info.logits || lm->info.vocab < 1) {
        snprintf(err, err_len, "%s: not a language model (needs a token-id input read by "
                 "get_rows, a positions input and a logits output)",
                 o.plan ? o.plan : path);
        goto fail;
    }
    int tok_failed = 0;
    lm->tok = open_tokenizer(path, &o, &tok_failed, err, err_len);
    if (tok_failed)
        goto fail;
    if (lm->tok) {
        if (gp_tok_vocab_size(lm->tok) > lm->info.vocab) {
            snprintf(err, err_len, "the tokenizer has %d tokens, more than the plan's vocabulary "
                     "of %lld", gp_tok_vocab_size(lm->tok), (long long)lm->info.vocab);
            goto fail;
        }
        for (int32_t id = 0; id < gp_tok_vocab_size(lm->tok); id++) {
            char piece[8];
            int n = gp_tok_piece(lm->tok, id, 1, piece, sizeof piece);
            if (n > 0 && (size_t)n > lm->max_piece)
                lm->max_piece = (size_t)n;
        }
        setup_chat(lm, o.plan ? NULL : src.fam);
    }
    if (o.chat_format && gp_lm_set_chat_format(lm, o.chat_format, err, err_len))
        goto fail;
    if (o.random_weights ? gp_model_random_weights(lm->m, o.random_seed, err, err_len)
                         : gp_model_bind_weights(lm->m, path, err, err_len))
        goto fail;
    if (o.lora && (o.lora_merge_plan ? gp_model_apply_lora(lm->m, o.lora, o.lora_merge_plan,
                                                           o.lora_scale, err, err_len)
                                     : gp_model_bind_adapter(lm->m, o.lora, o.lora_scale, err,
                                                             err_len)))
        goto fail;
    gp_model_get_info(lm->m, &lm->info);
    lm->ctx = lm->info.context > 0 ? lm->info.context : INT64_MAX;
    const gp_plan *plan = gp_model_plan(lm->m);
    for (int i = 0; i < plan->n_tensors; i++) /* a ragged batch's block table: its sequences */
        if (plan->tensors[i].kind == GP_TENSOR_INPUT && plan->tensors[i].name &&
            !strcmp(plan->tensors[i].name, "kv_table") && plan->tensors[i].ndim == 2)
            lm->n_seq = (int)plan->tensors[i].dims[0];
    lm->n_pick = lm->tok ? gp_tok_vocab_size(lm->tok) : lm->info.vocab;
    if (lm->n_pick < lm->info.vocab)
        snprintf(lm->note, sizeof lm->note, "the tokenizer has %lld ids, the embedding %lld rows: "
                 "the ids past the tokenizer's are never sampled", (long long)lm->n_pick,
                 (long long)lm->info.vocab);
    return lm;
fail:
    gp_lm_free(lm);
    return NULL;
}

void gp_lm_free(gp_lm *lm)
{
    if (!lm)
        return;
    gp_tok_free(lm->tok);
    gp_model_free(lm->m);
    free(lm);
}

gp_model *gp_lm_model(gp_lm *lm) { return lm->m; }
const char *gp_lm_plan_path(const gp_lm *lm) { return lm->plan_path; }
const char *gp_lm_arch(const gp_lm *lm) { return lm->arch; }
int64_t gp_lm_context(const gp_lm *lm) { return lm->ctx == INT64_MAX ? 0 : lm->ctx; }
int64_t gp_lm_vocab(const gp_lm *lm) { return lm->info.vocab; }
int gp_lm_threads(const gp_lm *lm) { return lm->n_threads; }
const char *gp_lm_note(const gp_lm *lm) { return lm->note; }
int64_t gp_lm_tokenizer_vocab(const gp_lm *lm) { return lm->tok ? gp_tok_vocab_size(lm->tok) : 0; }
int gp_lm_has_tokenizer(const gp_lm *lm) { return lm->tok != NULL; }
int gp_lm_has_chat(const gp_lm *lm) { return lm->has_chat; }
const char *gp_lm_chat_formats(void) { return gp_chat_format_list(); }

int gp_lm_is_eog(const gp_lm *lm, int32_t id)
{
    return lm->tok && gp_tok_is_eog(lm->tok, id);
}

int64_t gp_utf8_invalid_at(const char *text, size_t n)
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

static int need_tokenizer(const gp_lm *lm, char *err, size_t err_len)
{
    if (lm->tok)
        return 0;
    snprintf(err, err_len, "the model has no tokenizer: give one (a .gguf, a tokenizer.json or a "
             "folder holding one)");
    return -1;
}

int64_t gp_lm_tokenize(const gp_lm *lm, const char *text, size_t len, int add_special,
                       int32_t *ids, int64_t cap, char *err, size_t err_len)
{
    if (need_tokenizer(lm, err, err_len))
        return -1;
    int64_t bad = gp_utf8_invalid_at(text, len);
    if (bad >= 0) {
        snprintf(err, err_len, "invalid UTF-8 at byte %lld", (long long)bad);
        return -1;
    }
    return gp_tok_encode(lm->tok, text, len, add_special, 1, ids, cap, err, err_len);
}

int64_t gp_lm_detokenize(const gp_lm *lm, const int32_t *ids, int64_t n, char *out, size_t cap)
{
    return lm->tok ? gp_tok_decode(lm->tok, ids, n, 1, out, cap) : -1;
}

_Static_assert(sizeof(gp_msg) == sizeof(gp_chat_msg) &&
                   offsetof(gp_msg, content) == offsetof(gp_chat_msg, content),
               "gp_msg is gp_chat_msg's public twin");

int64_t gp_lm_chat_apply(const gp_lm *lm, const gp_msg *msgs, size_t n, int add_assistant,
                         char *out, size_t cap, char *err, size_t err_len)
{
    if (need_tokenizer(lm, err, err_len))
        return -1;
    if (!lm->has_chat) {
        snprintf(err, err_len, "%s", lm->chat_err);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            snprintf(err, err_len, "message %zu: no role or content", i);
            return -1;
        }
    }
    return gp_chat_apply(&lm->tpl, (const gp_chat_msg *)msgs, n, add_assistant, lm->bos, lm->eos,
                         out, cap, err, err_len);
}

int gp_lm_set_chat_format(gp_lm *lm, const char *name, char *err, size_t err_len)
{
    gp_chat_format f;
    if (!name || gp_chat_format_parse(name, &f)) {
        snprintf(err, err_len, "unknown chat format: %s (formats: %s)", name ? name : "(null)",
                 gp_chat_format_list());
        return -1;
    }
    lm->tpl = gp_chat_builtin(f);
    lm->has_chat = 1;
    return 0;
}
