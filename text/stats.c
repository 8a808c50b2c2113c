/* gp_seq_stats (include/gplan/text.h): a sequence's figures as text, for a program's report of a
 * run (gplan-run --stats): its generations' counts and times, its session's, its model's. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "cpu/cpu_dot.h"
#include "cpu/quant.h"
#include "text/lm_impl.h"

typedef struct {
    char *out;
    size_t cap;
    int64_t n; /* the text's length so far, past cap too */
} text_buf;

static void put(text_buf *b, const char *prefix, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put(text_buf *b, const char *prefix, const char *fmt, ...)
{
    for (int i = 0; i < 2; i++) {
        size_t at = (size_t)b->n < b->cap ? (size_t)b->n : b->cap;
        va_list ap;
        va_start(ap, fmt);
        int k = i ? vsnprintf(b->out + at, b->cap - at, fmt, ap)
                  : snprintf(b->out + at, b->cap - at, "%s", prefix);
        va_end(ap);
        b->n += k > 0 ? k : 0;
    }
}

int64_t gp_seq_stats(gp_seq *s, const char *prefix, char *out, size_t cap)
{
    char none[1];
    text_buf b = {cap ? out : none, cap ? cap : 1, 0};
    b.out[0] = '\0';
    const gp_lm *lm = gp_seq_lm(s);
    gp_session *ss = gp_seq_session(s);
    const char *plan = gp_lm_plan_path(lm);
    int threads = gp_lm_threads(lm);
    put(&b, prefix, "backend %s, %d thread%s, plan %s\n", gp_session_backend(ss), threads,
        threads == 1 ? "" : "s", *plan ? plan : "(in memory)");
    if (!strcmp(gp_session_backend(ss), "cpu")) /* which of the run-time paths this processor took */
        put(&b, prefix, "cpu kernels: float products %s, quantized %s\n", gp_cpu_dot_name(),
            gp_quant_isa_name(gp_quant_isa()));
    gp_gen_result t;
    gp_seq_totals(s, &t);
    /* A generated token is evaluated by one eval; a prompt's evals take their rows. */
    int64_t evals[2] = {t.prompt_evals, t.gen_evals}, tokens[2] = {t.prompt_rows, t.gen_evals};
    double ms[2] = {t.prompt_ms, t.gen_ms};
    put(&b, prefix, "evals %lld (prompt %lld, generation %lld)\n", (long long)(evals[0] + evals[1]),
        (long long)evals[0], (long long)evals[1]);
    for (int i = 0; i < 2; i++)
        if (evals[i])
            put(&b, prefix, "%s %lld tokens, %.3f ms per eval, %.1f tokens/s\n",
                i ? "generation" : "prompt    ", (long long)tokens[i], ms[i] / evals[i],
                ms[i] > 0 ? tokens[i] * 1e3 / ms[i] : 0.0);
    put(&b, prefix, "device allocations during evals: %lld\n",
        (long long)gp_session_backend_allocs(ss));
    gp_model_info info; /* now: a LoRA merge after the load adds loaded bytes */
    gp_model_get_info(lm->m, &info);
    put(&b, prefix, "weights %.1f MiB mapped, %.1f MiB loaded\n", info.weights_mapped / 1048576.0,
        info.weights_loaded / 1048576.0);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    put(&b, prefix, "peak RSS %.1f MiB\n", ru.ru_maxrss / 1024.0);
    return b.n;
}
