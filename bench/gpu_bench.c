/* GPU benchmark of one plan on the CUDA backend (bench/gpu.sh runs it): for each configuration
 * (the backend's switches: fusions, PDL, graphs or eager), checks the
 * logits of a 4-token prompt and one decode step against the CPU backend, times decode (a 32-token
 * prompt, or GPLAN_BENCH_PROMPT tokens up to 512, then 128 tokens fed back by argmax) and a
 * 512-token prompt, and counts allocations during
 * evals: the backend's own count, host mallocs (defined here; by the eval thread and by others,
 * with the callers of the first ones: their return addresses, named with dladdr at the end), CUDA
 * calls (the LD_PRELOAD shim, when loaded) and device free memory.
 * usage: gpu_bench PLAN [--label NAME] [--no-check|--check] [--configs NAME,NAME,...|all]
 *        [--weights FILE]   (a checkpoint bound as gplan-run --weights does; random weights else)
 * Prints one line per configuration: "RESULT label config decode_ms eval_ms ...", and after each
 * session's creation one line per device it uses: "device D: weights W bytes, state S bytes,
 * arena A bytes, io I bytes" (a tensor-parallel plan: every device has the plan's regions, with
 * its share of the weights). The CPU check is skipped for plans of more than 8 GiB of weights
 * over all devices (minutes on the CPU) unless --check. In a build with -DGPLAN_STAMPS=1 (CUDA
 * flags), GPLAN_STAMPS_OUT=FILE appends the kernels' phase stamps there at the end. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.h"
#include "gplan/gplan.h"
#include "plan/plan.h"

/* ---- host allocations during evals: malloc & co. defined here, forwarding to glibc ---- */

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

enum { REC_MAX = 48, REC_DEPTH = 40 };
typedef struct {
    int main_thread; /* 1: the eval thread, 2: another thread running gplan's code (a device thread
                        of a tensor-parallel session), 0: any other (driver, NCCL) */
    int depth;
    void *frames[REC_DEPTH];
} alloc_rec;

static int counting;
static long host_allocs, host_allocs_main, host_allocs_gplan;
static pthread_t main_tid;
static alloc_rec recs[REC_MAX]; /* the first REC_MAX allocations counted (static: no malloc) */
static int n_recs;
static __thread int in_hook;    /* backtrace() itself may allocate: not recorded */
static void *self_base;         /* where this program is loaded (dladdr's dli_fbase) */

static void count_alloc(void *caller)
{
    if (!counting || in_hook)
        return;
    in_hook = 1;
    int is_main = pthread_equal(pthread_self(), main_tid);
    __atomic_fetch_add(&host_allocs, 1, __ATOMIC_RELAXED);
    if (is_main)
        host_allocs_main++;
    /* Another thread counts as gplan's when this program's code (the session's device threads
     * run in it) is on its stack. */
    void *frames[REC_DEPTH];
    int depth = backtrace(frames, REC_DEPTH), ours = 0, from = 0;
    while (from < depth && frames[from] != caller) /* skip this hook and the malloc wrapper */
        from++;
    if (from == depth)
        from = 2; /* the caller was not found (a tail call): skip the two hooks' frames */
    for (int f = from; f < depth && !is_main && !ours; f++) {
        Dl_info di;
        ours = dladdr(frames[f], &di) && di.dli_fbase == self_base;
    }
    if (ours)
        __atomic_fetch_add(&host_allocs_gplan, 1, __ATOMIC_RELAXED);
    int i = __atomic_fetch_add(&n_recs, 1, __ATOMIC_RELAXED);
    if (i < REC_MAX) {
        recs[i].main_thread = is_main ? 1 : ours ? 2 : 0;
        recs[i].depth = depth;
        memcpy(recs[i].frames, frames, sizeof frames);
    }
    in_hook = 0;
}

void *malloc(size_t n)
{
    count_alloc(__builtin_return_address(0));
    return __libc_malloc(n);
}

void *calloc(size_t a, size_t b)
{
    count_alloc(__builtin_return_address(0));
    return __libc_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
    count_alloc(__builtin_return_address(0));
    return __libc_realloc(p, n);
}

int posix_memalign(void **p, size_t al, size_t n)
{
    count_alloc(__builtin_return_address(0));
    *p = __libc_memalign(al, n);
    return *p ? 0 : 12; /* ENOMEM */
}

void *aligned_alloc(size_t al, size_t n)
{
    count_alloc(__builtin_return_address(0));
    return __libc_memalign(al, n);
}

/* Prints the recorded allocations (frames 1..: frame 0 is count_alloc's caller chain start) and
 * forgets them. */
static void print_recs(const char *label, const char *config)
{
    int n = n_recs < REC_MAX ? n_recs : REC_MAX;
    for (int i = 0; i < n; i++) {
        printf("ALLOC %s %s #%d thread=%s:", label, config, i,
               recs[i].main_thread == 1 ? "eval" : recs[i].main_thread == 2 ? "device" : "other");
        for (int f = 1; f < recs[i].depth; f++) {
            Dl_info di;
            void *a = recs[i].frames[f];
            if (dladdr(a, &di) && di.dli_fname) {
                const char *lib = strrchr(di.dli_fname, '/');
                printf(" %s(%s+0x%lx)", lib ? lib + 1 : di.dli_fname, di.dli_sname ? di.dli_sname : "?",
                       (unsigned long)((char *)a - (char *)(di.dli_sname ? di.dli_saddr : di.dli_fbase)));
            } else {
                printf(" %p", a);
            }
        }
        printf("\n");
    }
    n_recs = 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long shim_count(void)
{
    void *f = dlsym(RTLD_DEFAULT, "gp_cuda_allocshim_count");
    long (*fn)(void) = NULL;
    memcpy(&fn, &f, sizeof fn);
    return fn ? fn() : -1;
}

/* The CUDA shim's eval marker, or NULL: looked up once at the start (find_mark), since a dlsym in
 * every eval would be timed with it and a failed one allocates its message. */
static void (*mark_fn)(int);

static void find_mark(void)
{
    void *f = dlsym(RTLD_DEFAULT, "gp_alloc_shim_eval");
    memcpy(&mark_fn, &f, sizeof mark_fn);
}

/* Marks evals for the CUDA shim too (the session looks the marker up itself when it is exported;
 * this program calls it directly so the count does not depend on that). */
static void mark(int on)
{
    if (mark_fn)
        mark_fn(on);
}

/* all: every row's logits; else the last row's only (set_tokens' default on a plan with a rows
 * input, as gplan-run evaluates prompts). */
static int eval_rows(gp_session *s, const int32_t *ids, const int32_t *pos, int n, int all,
                     double *secs)
{
    double t0 = now();
    counting = 1;
    mark(1);
    int r = gp_session_set_tokens(s, ids, pos, n) || (all && gp_session_set_rows(s, NULL, n)) ||
            gp_session_eval(s);
    mark(0);
    counting = 0;
    *secs += now() - t0;
    if (r)
        fprintf(stderr, "gpu_bench: eval: %s\n", gp_session_error(s));
    return r;
}

static int eval(gp_session *s, const int32_t *ids, const int32_t *pos, int n, double *secs)
{
    return eval_rows(s, ids, pos, n, 0, secs);
}

/* Rows of logits the last eval computed: [R, V]. */
static int64_t logit_rows(gp_session *s)
{
    gp_tensor_info ti;
    return gp_session_output(s, "logits", &ti) && ti.ndim >= 1 ? ti.ne[0] : 0;
}

/* How many of the last eval's n rows of logits have the argmax that the plan's output "next"
 * (the argmax op on the device) holds; -1 when the plan has no "next". */
static int next_agree(gp_session *s, int n, int64_t V)
{
    const int32_t *nx = gp_session_output(s, "next", NULL);
    const float *lg = gp_session_output(s, "logits", NULL);
    int same = 0;
    for (int t = 0; nx && t < n; t++)
        same += nx[t] == gp_argmax(lg + t * V, V);
    return nx ? same : -1;
}

/* Logits of a 4-token prompt and one decode step on session s (reset first), into out [5, V];
 * *dev_same: how many of the 5 rows "next" agrees with (-1: no "next"). */
static int session_logits(gp_session *s, float *out, int64_t V, int *dev_same)
{
    int32_t ids[4] = {464 % (int32_t)V, 2068 % (int32_t)V, 7586 % (int32_t)V, 21831 % (int32_t)V};
    int32_t pos[4] = {0, 1, 2, 3}, id5 = 11, p5 = 4;
    double t = 0;
    int r = gp_session_reset(s) || eval_rows(s, ids, pos, 4, 1, &t);
    *dev_same = -1;
    if (!r) {
        memcpy(out, gp_session_output(s, "logits", NULL), sizeof(float) * 4 * (size_t)V);
        *dev_same = next_agree(s, 4, V);
    }
    if (!r)
        r = eval(s, &id5, &p5, 1, &t);
    if (!r) {
        memcpy(out + 4 * V, gp_session_output(s, "logits", NULL), sizeof(float) * (size_t)V);
        int one = next_agree(s, 1, V);
        *dev_same = *dev_same < 0 || one < 0 ? -1 : *dev_same + one;
    }
    return r;
}

/* Greedy decoding's next token from the last row of the last eval: the plan's "next" (computed on
 * the device) when it has one, else the host's argmax of the logits row. */
static int32_t next_token(gp_session *s, int64_t V)
{
    int64_t t = logit_rows(s) - 1;
    const int32_t *nx = gp_session_output(s, "next", NULL);
    return nx ? nx[t] : (int32_t)gp_argmax(gp_session_output(s, "logits", NULL) + t * V, V);
}

/* ‖g − c‖ / ‖c‖ over n values and how many of the 5 rows' argmax agree. */
static double compare(const float *g, const float *c, int64_t V, int *same)
{
    double num = 0, den = 0;
    *same = 0;
    for (int t = 0; t < 5; t++)
        *same += gp_argmax(g + t * V, V) == gp_argmax(c + t * V, V);
    for (int64_t i = 0; i < 5 * V; i++) {
        double d = (double)g[i] - c[i];
        num += d * d;
        den += (double)c[i] * c[i];
    }
    return sqrt(num / den);
}

/* The configurations: a name and the environment it runs under (NAME=VALUE, space separated):
 * the switches docs/cuda.md lists, each against the default. */
typedef struct {
    const char *name, *env;
} config;

static const config configs[] = {
    {"default", ""},
    {"no-attnfuse", "GPLAN_CUDA_DISABLE=attnfuse"},
    {"no-qkvatt", "GPLAN_CUDA_DISABLE=qkvatt"},
    {"no-atthead", "GPLAN_CUDA_DISABLE=atthead"},
    {"no-tiles", "GPLAN_CUDA_DISABLE=tiles"},
    {"no-tensor", "GPLAN_CUDA_DISABLE=tensor"},
    {"no-atomic", "GPLAN_CUDA_DISABLE=atomic"},
    {"no-fold", "GPLAN_CUDA_DISABLE=fold"},
    {"no-accum", "GPLAN_CUDA_DISABLE=accum"},
    {"no-typed", "GPLAN_CUDA_DISABLE=atttyped,kctyped,optyped"},
    {"no-copies", "GPLAN_CUDA_DISABLE=copies"},
    {"no-trig", "GPLAN_CUDA_TRIG=none"},
    {"trig-0", "GPLAN_CUDA_TRIG=0"},
    {"no-pdl", "GPLAN_CUDA_PDL=0"},
    {"nofuse", "GPLAN_CUDA_DISABLE=all"},
    {"eager", "GPLAN_CUDA_GRAPHS=0"},
    {"nccl", "GPLAN_ALLREDUCE=nccl"},
};

/* Sets (on = 1) or unsets the variables of env. */
static void apply_env(const char *env, int on)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", env);
    for (char *save = NULL, *kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq)
            continue;
        *eq = '\0';
        if (on)
            setenv(kv, eq + 1, 1);
        else
            unsetenv(kv);
    }
}

/* The plan's devices and region sizes, for the per-device lines (loaded once in main). */
static const gp_plan *plan_info;

/* One line per device a session of this plan uses (rank r on device r: gp_session_opts.device 0). */
static void print_devices(void)
{
    if (!plan_info)
        return;
    const gp_plan_region *rg = plan_info->regions;
    for (int d = 0; d < plan_info->n_devices; d++)
        printf("device %d: weights %lld bytes, state %lld bytes, arena %lld bytes, io %lld bytes\n",
               d, (long long)rg[GP_REGION_WEIGHTS].size, (long long)rg[GP_REGION_STATE].size,
               (long long)rg[GP_REGION_ARENA].size, (long long)rg[GP_REGION_IO].size);
}

/* The logits of the first configuration's timed prompt: the others' are compared with them. */
static float *prompt_ref;

/* Prints how far the last prompt's T rows of logits (its last row only with a rows input) are
 * from the first configuration's (normalized error, rows with the same argmax): a kernel for
 * prompts against the one before it. */
static void prompt_diff(gp_session *s, const char *label, const char *name, int64_t T, int64_t V)
{
    const float *lg = gp_session_output(s, "logits", NULL);
    T = logit_rows(s);
    size_t n = (size_t)T * (size_t)V;
    if (!lg)
        return;
    if (!prompt_ref) {
        prompt_ref = malloc(sizeof(float) * n);
        if (prompt_ref)
            memcpy(prompt_ref, lg, sizeof(float) * n);
        return;
    }
    double num = 0, den = 0;
    int same = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)lg[i] - prompt_ref[i]) * ((double)lg[i] - prompt_ref[i]);
        den += (double)prompt_ref[i] * prompt_ref[i];
    }
    for (int64_t t = 0; t < T; t++)
        same += gp_argmax(lg + t * V, V) == gp_argmax(prompt_ref + t * V, V);
    printf("PROMPTDIFF %s %s rel_err %.3g argmax_same %d/%lld\n", label, name,
           den > 0 ? sqrt(num / den) : sqrt(num), same, (long long)T);
}

/* One configuration: the check against the CPU logits `ref` (when given), then decode and prompt
 * timings. */
static int run_config(gp_model *m, const char *label, const config *cf, int64_t V, int64_t maxT,
                      const float *ref)
{
    char err[1024];
    gp_session_opts o = {"cuda", 1, 0};
    apply_env(cf->env, 1);
    double t0 = now();
    gp_session *s = gp_session_new(m, &o, err, sizeof err);
    apply_env(cf->env, 0);
    if (!s) {
        printf("RESULT %s %s FAILED: %s\n", label, cf->name, err);
        fflush(stdout);
        return -1;
    }
    double create_s = now() - t0;
    print_devices();
    int r = 0;
    if (ref) {
        float *lg = malloc(sizeof(float) * 5 * (size_t)V);
        int dev_same = -1;
        r = session_logits(s, lg, V, &dev_same);
        int same = 0;
        double e = r ? INFINITY : compare(lg, ref, V, &same);
        int ok = !r && e < 1e-2 && e == e && (dev_same < 0 || dev_same == 5);
        printf("CHECK %s %s cuda-vs-cpu logits rel_err %.3g argmax_agree %d/5 next_agree %d/5 %s\n",
               label, cf->name, e, same, dev_same, ok ? "ok" : "FAIL");
        free(lg);
        if (!ok) {
            gp_session_free(s);
            fflush(stdout);
            return -1;
        }
    }
    /* GPLAN_BENCH_PROMPT=P: decode after a prompt of P tokens (default 32, at most 512) */
    enum { N = 128 };
    const char *pe = getenv("GPLAN_BENCH_PROMPT");
    int P = pe && atoi(pe) >= 1 && atoi(pe) <= 512 ? atoi(pe) : 32;
    int32_t ids[512], pos[512];
    for (int i = 0; i < 512; i++) {
        ids[i] = (i * 7919) % (int32_t)V;
        pos[i] = i;
    }
    double te = 0, dec[2] = {0, 0}, argmax_ms = 0;
    n_recs = 0;
    long host0 = host_allocs, main0 = host_allocs_main, gplan0 = host_allocs_gplan;
    long shim0 = shim_count();
    size_t free0 = 0, free1 = 0, total = 0;
    /* Warm-up sequence, then the timed one after a reset. */
    for (int rep = 0; rep < 2 && !r; rep++) {
        r = gp_session_reset(s) || eval(s, ids, pos, P, &te);
        if (r)
            break;
        if (rep == 1)
            cudaMemGetInfo(&free0, &total);
        int tok = next_token(s, V);
        te = 0;
        double bs0, bs1;
        int64_t be0, be1;
        gp_cuda_eval_stats(&bs0, &be0);
        double tl = now();
        double ta = 0;
        for (int i = 0; i < N && !r; i++) {
            int32_t p = P + i;
            r = eval(s, &tok, &p, 1, &te);
            double a0 = now();
            if (!r)
                tok = next_token(s, V);
            ta += now() - a0;
        }
        argmax_ms = ta / N * 1e3;
        tl = now() - tl;
        dec[rep] = tl / N * 1e3;
        gp_cuda_eval_stats(&bs1, &be1);
        if (rep == 1 && !r) {
            cudaMemGetInfo(&free1, &total);
            /* Prompt throughput: the longest prompt the plan takes, up to 512 tokens, median of 5. */
            int64_t T = maxT < 512 ? maxT : 512;
            double best[5];
            for (int k = 0; k < 5 && !r; k++) {
                best[k] = 0;
                r = gp_session_reset(s) || eval(s, ids, pos, (int)T, &best[k]);
            }
            for (int a = 0; a < 5; a++)
                for (int b = a + 1; b < 5; b++)
                    if (best[b] < best[a]) {
                        double x = best[a];
                        best[a] = best[b];
                        best[b] = x;
                    }
            if (!r)
                prompt_diff(s, label, cf->name, T, V);
            if (!r)
                printf("RESULT %s %s decode_ms %.4f eval_ms %.4f backend_ms %.4f prompt%lld_ms %.3f prompt_tok_s %.0f "
                       "backend_allocs %lld host_allocs %ld cuda_calls %ld free_mem_delta %lld "
                       "create_s %.2f host_allocs_eval_thread %ld host_allocs_device_threads %ld decode_rep0_ms %.4f "
                       "host_argmax_ms %.4f\n",
                       label, cf->name, dec[1], te / N * 1e3, (bs1 - bs0) / (double)(be1 - be0) * 1e3,
                       (long long)T, best[2] * 1e3,
                       (double)T / best[2], (long long)gp_session_backend_allocs(s),
                       host_allocs - host0, shim0 < 0 ? -1 : shim_count() - shim0,
                       (long long)free0 - (long long)free1, create_s, host_allocs_main - main0,
                       host_allocs_gplan - gplan0, dec[0], argmax_ms);
        }
    }
    print_recs(label, cf->name);
    fflush(stdout);
    gp_session_free(s);
    return r;
}

int main(int argc, char **argv)
{
    const char *plan = NULL, *label = "model", *which = "default", *weights = NULL;
    int check = 1, force_check = 0;
    main_tid = pthread_self();
    Dl_info self;
    if (dladdr((void *)&print_recs, &self))
        self_base = self.dli_fbase;
    void *warm[4];
    backtrace(warm, 4); /* loads the unwinder now, not inside a counted allocation */
    find_mark();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--label") && i + 1 < argc)
            label = argv[++i];
        else if (!strcmp(argv[i], "--no-check"))
            check = 0;
        else if (!strcmp(argv[i], "--check"))
            force_check = 1;
        else if (!strcmp(argv[i], "--configs") && i + 1 < argc)
            which = argv[++i];
        else if (!strcmp(argv[i], "--variants"))
            which = "all";
        else if (!strcmp(argv[i], "--weights") && i + 1 < argc)
            weights = argv[++i];
        else
            plan = argv[i];
    }
    if (!plan) {
        fprintf(stderr, "usage: gpu_bench PLAN [--label NAME] [--no-check] [--configs A,B,..|all] "
                        "[--weights FILE]\n");
        return 2;
    }
    char err[4096];
    gp_model *m = gp_model_load(plan, err, sizeof err);
    if (!m || (weights ? gp_model_bind_weights(m, weights, err, sizeof err)
                       : gp_model_random_weights(m, 1234, err, sizeof err))) {
        fprintf(stderr, "gpu_bench: %s\n", err);
        gp_model_free(m);
        return 1;
    }
    gp_model_info info;
    gp_model_get_info(m, &info);
    int64_t V = info.vocab;
    int rc = 0;
    float *ref = NULL;
    gp_plan *pl = NULL;
    if (gp_plan_load(plan, &pl, err, sizeof err))
        fprintf(stderr, "gpu_bench: %s (no per-device lines)\n", err);
    plan_info = pl;
    int ndev = pl ? pl->n_devices : 1;
    double wbytes = (double)info.region_bytes[GP_REGION_WEIGHTS] * ndev;
    if (check && !force_check && wbytes > 8.0 * (1 << 30)) {
        printf("CHECK %s skipped: %.1f GiB of weights over %d device%s (the CPU reference would take "
               "minutes; --check forces it)\n", label, wbytes / (1 << 30), ndev, ndev > 1 ? "s" : "");
        check = 0;
    }
    if (check) {
        const char *nt = getenv("GPLAN_BENCH_CPU_THREADS");
        gp_session_opts o = {"cpu", nt ? atoi(nt) : 8, 0};
        gp_session *s = gp_session_new(m, &o, err, sizeof err);
        ref = malloc(sizeof(float) * 5 * (size_t)V);
        int cpu_same = -1;
        if (!s || session_logits(s, ref, V, &cpu_same) || (cpu_same >= 0 && cpu_same != 5)) {
            fprintf(stderr, "gpu_bench: cpu reference: %s\n",
                    !s ? err : cpu_same >= 0 && cpu_same != 5 ? "next is not the logits' argmax"
                                                               : gp_session_error(s));
            gp_session_free(s);
            gp_model_free(m);
            gp_plan_free(pl);
            free(ref);
            return 1;
        }
        gp_session_free(s);
    }
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, ",%s,", configs[i].name);
        char list[512];
        snprintf(list, sizeof list, ",%s,", which);
        if (strcmp(which, "all") && !strstr(list, key))
            continue;
        rc |= run_config(m, label, &configs[i], V, info.max_tokens, ref) != 0;
    }
    /* Allocations by other threads while nothing runs: the CUDA driver's own threads. */
    long idle0 = host_allocs;
    n_recs = 0;
    counting = 1;
    struct timespec one = {1, 0};
    nanosleep(&one, NULL);
    counting = 0;
    printf("IDLE %s: %ld host allocations in 1.0 s with no eval running\n", label, host_allocs - idle0);
    print_recs(label, "idle");
    const char *stamps = getenv("GPLAN_STAMPS_OUT"); /* diagnostic builds: -DGPLAN_STAMPS=1 */
    if (stamps)
        gp_cuda_stamps_dump(stamps);
    free(ref);
    free(prompt_ref);
    gp_plan_free(pl);
    gp_model_free(m);
    return rc;
}
