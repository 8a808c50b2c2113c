/* ggml's block formats written from their definition (cpu/quant.h): dequantize, quantize, and
 * the selector of gp_quant_matmul_f32's SIMD paths. */
#define _DEFAULT_SOURCE /* syscall (the AMX permission, below) */
#include "cpu/quant.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu/quant_internal.h"
#include "ir/f16.h"

static float rd16(const uint8_t *p) /* a little-endian binary16 as f32 */
{
    return gp_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static void wr16(uint8_t *p, float f)
{
    uint16_t h = gp_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

/* ---- dequantize ---- */

/* A 32-block's low nibbles are elements 0..15, its high nibbles 16..31. Loops of 16 with fixed
 * shifts so the compiler vectorizes them. */
static void deq_block(gp_dtype t, const uint8_t *b, float *y)
{
    switch (t) {
    case GP_Q4_0: {
        float d = rd16(b);
        for (int i = 0; i < 16; i++) {
            y[i] = d * (float)((b[2 + i] & 15) - 8);
            y[i + 16] = d * (float)((b[2 + i] >> 4) - 8);
        }
        break;
    }
    case GP_Q4_1: {
        float d = rd16(b), m = rd16(b + 2);
        for (int i = 0; i < 16; i++) {
            y[i] = d * (float)(b[4 + i] & 15) + m;
            y[i + 16] = d * (float)(b[4 + i] >> 4) + m;
        }
        break;
    }
    case GP_Q5_0: {
        float d = rd16(b);
        uint32_t qh = rd32(b + 2);
        for (int i = 0; i < 16; i++) {
            y[i] = d * (float)(((b[6 + i] & 15) | (int)(qh >> i & 1) << 4) - 16);
            y[i + 16] = d * (float)(((b[6 + i] >> 4) | (int)(qh >> (i + 16) & 1) << 4) - 16);
        }
        break;
    }
    case GP_Q5_1: {
        float d = rd16(b), m = rd16(b + 2);
        uint32_t qh = rd32(b + 4);
        for (int i = 0; i < 16; i++) {
            y[i] = d * (float)((b[8 + i] & 15) | (int)(qh >> i & 1) << 4) + m;
            y[i + 16] = d * (float)((b[8 + i] >> 4) | (int)(qh >> (i + 16) & 1) << 4) + m;
        }
        break;
    }
    case GP_Q8_0: {
        float d = rd16(b);
        for (int i = 0; i < 32; i++)
            y[i] = (float)(int8_t)b[2 + i] * d;
        break;
    }
    case GP_Q4_K:
    case GP_Q5_K: {
        float d = rd16(b), dmin = rd16(b + 2);
        uint8_t sc[8], mn[8];
        gp_quant_k_scales(b + 4, sc, mn);
        const uint8_t *qh = b + 16, *qs = t == GP_Q5_K ? b + 48 : b + 16;
        for (int j = 0; j < 8; j++) {
            float dl = d * (float)sc[j], ml = dmin * (float)mn[j];
            for (int l = 0; l < 32; l++) {
                int q = qs[32 * (j >> 1) + l] >> 4 * (j & 1) & 15;
                if (t == GP_Q5_K)
                    q |= (qh[l] >> j & 1) << 4;
                y[32 * j + l] = dl * (float)q - ml;
            }
        }
        break;
    }
    case GP_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = rd16(b + 208);
        for (int h = 0; h < 2; h++) {
            for (int k = 0; k < 4; k++) {
                const uint8_t *lo = ql + 64 * h + 32 * (k & 1), *hi = qh + 32 * h;
                float *yk = y + 128 * h + 32 * k;
                float s0 = d * (float)sc[8 * h + 2 * k], s1 = d * (float)sc[8 * h + 2 * k + 1];
                for (int l = 0; l < 32; l++) {
                    int q = (lo[l] >> 4 * (k >> 1) & 15) | (hi[l] >> 2 * k & 3) << 4;
                    yk[l] = (l < 16 ? s0 : s1) * (float)(q - 32);
                }
            }
        }
        break;
    }
    default:
        GP_ASSERT(!"not a quantized dtype");
    }
}

void gp_quant_dequantize_row(gp_dtype t, const void *src, float *dst, int64_t n)
{
    GP_ASSERT(gp_dtype_is_quant(t));
    int64_t qk = gp_dtype_block(t);
    size_t bb = gp_dtype_block_bytes(t);
    GP_ASSERT(n % qk == 0);
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / qk; i++)
        deq_block(t, b + (size_t)i * bb, dst + i * qk);
}

/* ---- quantize ---- */

/* ggml's rounding for its reference quantizers: to nearest, ties away from zero. */
static int round_away(float x)
{
    return (int)roundf(x);
}

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* q4_0 / q5_0: the element of largest magnitude (the first on ties) maps to q = 0. */
static void quant_sym(const float *x, int levels, uint8_t *dp, uint8_t *q)
{
    float amax = 0, max = 0;
    for (int i = 0; i < 32; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    float d = max / (float)-(levels / 2), id = d != 0 ? 1.0f / d : 0;
    for (int i = 0; i < 32; i++) /* truncation of x / d + levels / 2 + 0.5: ggml's rounding */
        q[i] = (uint8_t)clampi((int)(x[i] * id + ((float)(levels / 2) + 0.5f)), 0, levels - 1);
    wr16(dp, d);
}

/* q4_1 / q5_1: q = 0 at the minimum, levels - 1 at the maximum. */
static void quant_asym(const float *x, int levels, uint8_t *dp, uint8_t *mp, uint8_t *q)
{
    float mn = x[0], mx = x[0];
    for (int i = 1; i < 32; i++) {
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    float d = (mx - mn) / (float)(levels - 1), id = d != 0 ? 1.0f / d : 0;
    for (int i = 0; i < 32; i++)
        q[i] = (uint8_t)clampi((int)((x[i] - mn) * id + 0.5f), 0, levels - 1);
    wr16(dp, d);
    wr16(mp, mn);
}

static void pack_nibbles(const uint8_t *q, uint8_t *qs)
{
    for (int i = 0; i < 16; i++)
        qs[i] = (uint8_t)((q[i] & 15) | (q[i + 16] & 15) << 4);
}

static uint32_t pack_high(const uint8_t *q)
{
    uint32_t qh = 0;
    for (int i = 0; i < 32; i++)
        qh |= (uint32_t)(q[i] >> 4 & 1) << i;
    return qh;
}

/* q4_k / q5_k super-block (see quant.h for the scheme); levels 16 or 32. */
static void quant_k45(const float *x, int levels, uint8_t *b)
{
    float scale[8], minv[8], smax = 0, mmax = 0;
    for (int j = 0; j < 8; j++) {
        float lo = 0, hi = x[32 * j];
        for (int l = 0; l < 32; l++) {
            float v = x[32 * j + l];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        scale[j] = (hi - lo) / (float)(levels - 1);
        minv[j] = -lo;
        smax = scale[j] > smax ? scale[j] : smax;
        mmax = minv[j] > mmax ? minv[j] : mmax;
    }
    wr16(b, smax / 63);
    wr16(b + 2, mmax / 63);
    float d = rd16(b), dmin = rd16(b + 2); /* quantize against the stored values */
    float id = d != 0 ? 1.0f / d : 0, idmin = dmin != 0 ? 1.0f / dmin : 0;
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)clampi((int)nearbyintf(scale[j] * id), 0, 63);
        mn[j] = (uint8_t)clampi((int)nearbyintf(minv[j] * idmin), 0, 63);
    }
    uint8_t *s = b + 4;
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
    uint8_t *qh = b + 16, *qs = levels == 32 ? b + 48 : b + 16;
    if (levels == 32)
        memset(qh, 0, 32);
    for (int j = 0; j < 8; j++) {
        float dl = d * (float)sc[j], ml = dmin * (float)mn[j], idl = dl != 0 ? 1.0f / dl : 0;
        for (int l = 0; l < 32; l++) {
            int q = clampi((int)nearbyintf((x[32 * j + l] + ml) * idl), 0, levels - 1);
            uint8_t *p = qs + 32 * (j >> 1) + l;
            if (j & 1)
                *p = (uint8_t)(*p | (q & 15) << 4);
            else
                *p = (uint8_t)(q & 15);
            if (levels == 32)
                qh[l] = (uint8_t)(qh[l] | (q >> 4) << j);
        }
    }
}

static void quant_q6k(const float *x, uint8_t *b)
{
    float scale[16], smax = 0;
    for (int g = 0; g < 16; g++) {
        float amax = 0;
        for (int l = 0; l < 16; l++)
            amax = fabsf(x[16 * g + l]) > amax ? fabsf(x[16 * g + l]) : amax;
        scale[g] = amax / 31;
        smax = scale[g] > smax ? scale[g] : smax;
    }
    wr16(b + 208, smax / 127);
    float d = rd16(b + 208), id = d != 0 ? 1.0f / d : 0;
    int8_t *sc = (int8_t *)(b + 192);
    uint8_t *ql = b, *qh = b + 128;
    memset(b, 0, 192);
    for (int g = 0; g < 16; g++)
        sc[g] = (int8_t)clampi((int)nearbyintf(scale[g] * id), 0, 127);
    for (int i = 0; i < 256; i++) {
        float dl = d * (float)sc[i / 16], idl = dl != 0 ? 1.0f / dl : 0;
        int q = clampi((int)nearbyintf(x[i] * idl), -32, 31) + 32;
        int h = i >> 7, k = i >> 5 & 3, l = i & 31;
        ql[64 * h + 32 * (k & 1) + l] |= (uint8_t)((q & 15) << 4 * (k >> 1));
        qh[32 * h + l] |= (uint8_t)((q >> 4) << 2 * k);
    }
}

void gp_quant_quantize_row(gp_dtype t, const float *src, void *dst, int64_t n)
{
    GP_ASSERT(gp_dtype_is_quant(t));
    int64_t qk = gp_dtype_block(t);
    size_t bb = gp_dtype_block_bytes(t);
    GP_ASSERT(n % qk == 0);
    for (int64_t i = 0; i < n / qk; i++) {
        const float *x = src + i * qk;
        uint8_t *b = (uint8_t *)dst + (size_t)i * bb, q[32];
        switch (t) {
        case GP_Q4_0:
            quant_sym(x, 16, b, q);
            pack_nibbles(q, b + 2);
            break;
        case GP_Q4_1:
            quant_asym(x, 16, b, b + 2, q);
            pack_nibbles(q, b + 4);
            break;
        case GP_Q5_0:
            quant_sym(x, 32, b, q);
            wr32(b + 2, pack_high(q));
            pack_nibbles(q, b + 6);
            break;
        case GP_Q5_1:
            quant_asym(x, 32, b, b + 2, q);
            wr32(b + 4, pack_high(q));
            pack_nibbles(q, b + 8);
            break;
        case GP_Q8_0: {
            float amax = 0;
            for (int l = 0; l < 32; l++)
                amax = fabsf(x[l]) > amax ? fabsf(x[l]) : amax;
            float d = amax / 127, id = d != 0 ? 1.0f / d : 0;
            wr16(b, d);
            for (int l = 0; l < 32; l++)
                b[2 + l] = (uint8_t)(int8_t)round_away(x[l] * id);
            break;
        }
        case GP_Q4_K:
            quant_k45(x, 16, b);
            break;
        case GP_Q5_K:
            quant_k45(x, 32, b);
            break;
        case GP_Q6_K:
            quant_q6k(x, b);
            break;
        default:
            GP_ASSERT(!"not a quantized dtype");
        }
    }
}

/* ---- the selector ---- */

static atomic_int cur_isa = -2; /* -2: not chosen yet */

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

/* AVX512-BF16, AMX-TILE and AMX-BF16 from CPUID, and the OS's leave to use the tile data: asked
 * once for the process (Linux's ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA; refused where the
 * kernel or a tool such as valgrind does not know it, and then no amx path). */
static int amx_ok;
static void amx_probe(void)
{
    unsigned a, b, c, d, a1, b1, c1, d1;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1))
        return;
    if (!(a1 & (1u << 5)) || !(d & (1u << 22)) || !(d & (1u << 24)))
        return;
#ifdef SYS_arch_prctl
    amx_ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
#endif
}

static int cpu_amx(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, amx_probe);
    return amx_ok;
}
/* F16C from CPUID (clang's __builtin_cpu_supports does not know "f16c"). */
static int cpu_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
/* AVX-VNNI: CPUID 7.1 EAX bit 4 (not every compiler's __builtin_cpu_supports knows it). */
static int cpu_avxvnni(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
/* FEAT_DotProd and FEAT_I8MM as the kernel reports them (HWCAP_ASIMDDP, HWCAP2_I8MM; the bit
 * values of <asm/hwcap.h>, spelled out for C libraries whose headers predate them). */
static int cpu_hwcap(int which, unsigned long bit)
{
    return (getauxval(which == 2 ? AT_HWCAP2 : AT_HWCAP) & bit) != 0;
}
#endif

int gp_quant_isa_supported(int isa)
{
    switch (isa) {
    case GP_QUANT_ISA_PORTABLE:
        return 1;
#if defined(__x86_64__) && defined(__GNUC__)
    case GP_QUANT_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_f16c();
    case GP_QUANT_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && gp_quant_isa_supported(GP_QUANT_ISA_AVX2);
    case GP_QUANT_ISA_VNNI:
        return __builtin_cpu_supports("avx512vnni") &&
               gp_quant_isa_supported(GP_QUANT_ISA_AVX512);
    case GP_QUANT_ISA_AMX:
        return gp_quant_isa_supported(GP_QUANT_ISA_VNNI) && cpu_amx();
    case GP_QUANT_ISA_AVXVNNI:
        return cpu_avxvnni() && gp_quant_isa_supported(GP_QUANT_ISA_AVX2);
#endif
#if defined(__aarch64__) && defined(__GNUC__)
    case GP_QUANT_ISA_NEON:
        return 1; /* Advanced SIMD: every ARMv8-A processor */
#endif
#if defined(__aarch64__) && defined(__linux__) && defined(__GNUC__)
    case GP_QUANT_ISA_DOTPROD:
        return cpu_hwcap(1, 1ul << 20 /* HWCAP_ASIMDDP */);
    case GP_QUANT_ISA_I8MM:
        return cpu_hwcap(2, 1ul << 13 /* HWCAP2_I8MM */) &&
               gp_quant_isa_supported(GP_QUANT_ISA_DOTPROD);
#endif
    default:
        return 0;
    }
}

static int best_isa(void)
{
    static const int order[] = {GP_QUANT_ISA_AMX,     GP_QUANT_ISA_VNNI,    GP_QUANT_ISA_AVX512,
                                GP_QUANT_ISA_AVXVNNI, GP_QUANT_ISA_AVX2,    GP_QUANT_ISA_I8MM,
                                GP_QUANT_ISA_DOTPROD, GP_QUANT_ISA_NEON};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (gp_quant_isa_supported(order[i]))
            return order[i];
    return GP_QUANT_ISA_PORTABLE;
}

int gp_quant_force_isa(int isa)
{
    if (isa == GP_QUANT_ISA_AUTO)
        isa = best_isa();
    else if (!gp_quant_isa_supported(isa))
        return -1;
    atomic_store(&cur_isa, isa);
    return 0;
}

int gp_quant_isa(void)
{
    int isa = atomic_load(&cur_isa);
    if (isa < 0) {
        isa = best_isa();
        atomic_store(&cur_isa, isa);
    }
    return isa;
}

const char *gp_quant_isa_name(int isa)
{
    static const char *names[] = {"portable", "avx2",    "avx512", "vnni", "amx",
                                  "avxvnni",  "neon",    "dotprod", "i8mm"};
    return isa >= 0 && isa < GP_QUANT_ISA_COUNT ? names[isa] : "auto";
}
