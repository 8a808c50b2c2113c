/* Fuzz target: plan file bytes through the loader and its validator, the printers, a write-load
 * round trip, the runtime's own model checks and, for small plans, a session and one eval.
 * Each input is loaded as it is and again with its CRCs and file size recomputed, since almost
 * every mutation would otherwise stop at a CRC and never reach the checks behind it. */
#include <string.h>
#include <zlib.h>

#include "fuzz/fuzz.h"
#include "gplan/gplan.h"
#include "plan/plan.h"

/* Sessions allocate every region once; only run plans whose regions fit in this many bytes. */
#define EVAL_MAX_BYTES ((int64_t)48 << 20) /* tiny.plan: 32 MiB arena (the cuBLAS workspace) */

static FILE *null_out(void)
{
    static FILE *f;
    if (!f)
        f = fopen("/dev/null", "w");
    return f;
}

/* The loader accepted it: it must survive the printer and write back to bytes that load to the
 * same bytes again (a fixed point after one write). */
static void round_trip(const gp_plan *p)
{
    char err[512];
    unsigned char *b1 = NULL, *b2 = NULL;
    size_t n1 = 0, n2 = 0;
    gp_plan *q = NULL;
    if (null_out())
        gp_plan_summary_print(p, null_out());
    GP_FUZZ_CHECK(gp_plan_write_mem(p, &b1, &n1, err, sizeof err) == 0);
    if (gp_plan_load_mem(b1, n1, "rewritten.plan", &q, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        GP_FUZZ_CHECK(!"a plan that loaded does not load after writing it back");
    }
    GP_FUZZ_CHECK(gp_plan_write_mem(q, &b2, &n2, err, sizeof err) == 0);
    GP_FUZZ_CHECK(n1 == n2 && memcmp(b1, b2, n1) == 0);
    free(b1);
    free(b2);
    gp_plan_free(q);
}

/* The runtime's model checks, then one eval at the bounds with zeroed inputs for small plans. */
static void run_model(const uint8_t *data, size_t size)
{
    char err[1024];
    gp_model *m = gp_model_load_mem(data, size, "fuzz.plan", err, sizeof err);
    if (!m)
        return;
    gp_model_info info;
    gp_model_get_info(m, &info);
    int64_t total = 0;
    for (int r = 0; r < 5; r++)
        total += info.region_bytes[r] > 0 ? info.region_bytes[r] : 0;
    if (total <= EVAL_MAX_BYTES && gp_model_random_weights(m, 1, err, sizeof err) == 0) {
        gp_session_opts o = {"reference", 1, 0};
        gp_session *s = gp_session_new(m, &o, err, sizeof err);
        if (s) {
            (void)gp_session_eval(s);
            gp_session_free(s);
        }
    }
    gp_model_free(m);
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Rewrites file_size, every section CRC whose section lies in the file, then the header CRC
 * (docs/plan-format.md). Returns 0 when buf[0..size) has no room for the header or table. */
static int fix_crcs(uint8_t *buf, size_t size)
{
    if (size < GP_PLAN_HEADER_BYTES)
        return 0;
    uint64_t hb = get_le(buf + 14, 2), n = get_le(buf + 20, 4);
    if (hb < GP_PLAN_HEADER_BYTES || n > 1024 || hb + n * GP_PLAN_SECTION_ENTRY_BYTES > size)
        return 0;
    put_le(buf + 40, size, 8);
    for (uint64_t i = 0; i < n; i++) {
        uint8_t *e = buf + hb + i * GP_PLAN_SECTION_ENTRY_BYTES;
        uint64_t off = get_le(e + 8, 8), len = get_le(e + 16, 8);
        if (off <= size && len <= size - off && len <= UINT32_MAX)
            put_le(e + 4, crc32(0, buf + off, (uInt)len), 4);
    }
    uLong c = crc32(0, buf, 60);
    c = crc32(c, buf + hb, (uInt)(n * GP_PLAN_SECTION_ENTRY_BYTES));
    put_le(buf + 60, c, 4);
    return 1;
}

/* One load and everything that follows a successful one. */
static void load(const uint8_t *data, size_t size)
{
    char err[512];
    gp_plan *p = NULL;
    int rc = gp_plan_load_mem(data, size, "fuzz.plan", &p, err, sizeof err);
    GP_FUZZ_CHECK((rc == 0) == (p != NULL));
    GP_FUZZ_CHECK(rc == 0 || strstr(err, "fuzz.plan: ") == err);
    if (p) {
        GP_FUZZ_CHECK(gp_plan_validate(p, err, sizeof err) == 0);
        round_trip(p);
        gp_plan_free(p);
        run_model(data, size);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    load(data, size);
    uint8_t *fixed = malloc(size ? size : 1);
    GP_FUZZ_CHECK(fixed != NULL);
    memcpy(fixed, data, size);
    if (fix_crcs(fixed, size) && memcmp(fixed, data, size) != 0)
        load(fixed, size);
    free(fixed);
    return 0;
}
