/* A kernel timeline for benchmarks on machines without Nsight Systems: a CUPTI injection library.
 * Load it with CUDA_INJECTION64_PATH=libgp_kernel_trace.so (the driver calls InitializeInjection
 * at cuInit); every kernel, graph nodes included, is recorded, and with GPLAN_TRACE_COPIES=1
 * every copy too, and at exit one line per kernel or copy goes to $GPLAN_TRACE_OUT (default
 * kernel_trace.csv):
 *   device,start_ns,end_ns,correlation,grid_blocks,name
 * (a copy: name memcpy_HtoD, memcpy_DtoH or memcpy_other, its bytes as grid_blocks). Copies are
 * opt-in because recording them changes the graph's own timing (they run far apart), where with
 * kernels alone a graph spans about what an untraced eval takes. The host's loop around
 * the evals is slower under tracing either way.
 * Kernels of one graph launch share the launch's correlation id; bench/kernel_trace.py sums the
 * one-token evals by kernel. A measuring tool: not linked into anything gplan ships. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>

enum { BUF_BYTES = 8 << 20 };

typedef struct {
    uint32_t dev, corr;
    uint64_t start, end, blocks;
    const char *name; /* CUPTI's (or a literal): lives until the process ends */
} rec;

static rec *recs;
static size_t n_recs, cap_recs;

static void CUPTIAPI buf_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
    *buf = aligned_alloc(8, BUF_BYTES);
    *size = *buf ? BUF_BYTES : 0;
    *max_records = 0;
}

static void keep(rec x)
{
    if (n_recs == cap_recs) {
        size_t cap = cap_recs ? 2 * cap_recs : 1 << 16;
        rec *r = realloc(recs, cap * sizeof *r);
        if (!r)
            return;
        recs = r;
        cap_recs = cap;
    }
    recs[n_recs++] = x;
}

static void keep_kernel(const CUpti_ActivityKernel10 *k)
{
    keep((rec){k->deviceId, k->correlationId, k->start, k->end,
               (uint64_t)k->gridX * k->gridY * k->gridZ, k->name});
}

/* A copy: named by its direction, its bytes in the blocks column. */
static void keep_copy(const CUpti_ActivityMemcpy6 *m)
{
    keep((rec){m->deviceId, m->correlationId, m->start, m->end, m->bytes,
               m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? "memcpy_HtoD"
               : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? "memcpy_DtoH"
                                                                : "memcpy_other"});
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                   size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *a = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &a) == CUPTI_SUCCESS) {
        if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
            keep_kernel((const CUpti_ActivityKernel10 *)a);
        else if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY)
            keep_copy((const CUpti_ActivityMemcpy6 *)a);
    }
    free(buf);
}

/* The kernel's identifier from its mangled name (_Z<len><id>...), else the name as is. */
static void short_name(const char *m, char *out, size_t n)
{
    if (m && m[0] == '_' && m[1] == 'Z') {
        char *end;
        long len = strtol(m + 2, &end, 10);
        if (len > 0 && (size_t)len < n && end != m + 2) {
            memcpy(out, end, (size_t)len);
            out[len] = 0;
            return;
        }
    }
    snprintf(out, n, "%s", m ? m : "?");
}

static void dump(void)
{
    cuptiActivityFlushAll(1);
    const char *path = getenv("GPLAN_TRACE_OUT");
    FILE *f = fopen(path ? path : "kernel_trace.csv", "w");
    if (!f)
        return;
    for (size_t i = 0; i < n_recs; i++) {
        char nm[128];
        short_name(recs[i].name, nm, sizeof nm);
        fprintf(f, "%u,%llu,%llu,%u,%llu,%s\n", recs[i].dev, (unsigned long long)recs[i].start,
                (unsigned long long)recs[i].end, recs[i].corr, (unsigned long long)recs[i].blocks, nm);
    }
    fclose(f);
    fprintf(stderr, "kernel_trace: %zu kernels\n", n_recs);
}

int InitializeInjection(void)
{
    const char *copies = getenv("GPLAN_TRACE_COPIES");
    if (cuptiActivityRegisterCallbacks(buf_requested, buf_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        (copies && *copies == '1' &&
         cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS)) {
        fprintf(stderr, "kernel_trace: CUPTI activity tracing unavailable\n");
        return 0;
    }
    atexit(dump);
    return 1;
}
