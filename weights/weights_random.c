/* Deterministic random weights for running a graph without a checkpoint: each element is a pure
 * function of (seed, tensor key, index), so results never depend on threads or call order. */
#include "weights/weights.h"

#include "ir/f16.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

static uint64_t splitmix64_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define GOLDEN 0x9e3779b97f4a7c15ull

uint64_t gp_weights_name_key(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The last dotted component before ".weight" / ".bias": "ln_1" in "transformer.h.0.ln_1.weight". */
static int is_norm_component(const char *name, size_t end)
{
    size_t start = end;
    while (start > 0 && name[start - 1] != '.')
        start--;
    char comp[128];
    size_t len = end - start < sizeof comp - 1 ? end - start : sizeof comp - 1;
    for (size_t i = 0; i < len; i++)
        comp[i] = (char)tolower((unsigned char)name[start + i]);
    comp[len] = '\0';
    return strncmp(comp, "ln", 2) == 0 || strstr(comp, "norm") != NULL;
}

static int ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

gp_weights_init gp_weights_init_for(const char *name)
{
    size_t n = strlen(name);
    if (ends_with(name, n, ".bias") || strcmp(name, "bias") == 0)
        return (gp_weights_init){0.0f, 0.01f};
    if (ends_with(name, n, ".weight") && is_norm_component(name, n - strlen(".weight")))
        return (gp_weights_init){1.0f, 0.05f};
    if (strcmp(name, "weight") != 0 && !ends_with(name, n, ".weight") && is_norm_component(name, n))
        return (gp_weights_init){1.0f, 0.05f}; /* a bare norm scale, e.g. "model.norm" */
    return (gp_weights_init){0.0f, 0.02f};
}

void gp_weights_random_fill(void *dst, gp_dtype dtype, int64_t first, int64_t n, uint64_t seed,
                            uint64_t key, float center, float scale)
{
    /* Stream state of this tensor; element i is splitmix64's i-th output from it. */
    uint64_t state = splitmix64_mix(seed ^ splitmix64_mix(key + GOLDEN));
    unsigned char *out = dst;
    size_t size = gp_dtype_size(dtype);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix64_mix(state + (uint64_t)(first + i + 1) * GOLDEN);
        float u = (float)(r >> 40) * 0x1p-24f; /* [0, 1) with 24 exact bits */
        float v = center + (2.0f * u - 1.0f) * scale;
        unsigned char *p = out + (size_t)i * size;
        if (dtype == GP_F32) {
            memcpy(p, &v, 4);
        } else if (dtype == GP_F16 || dtype == GP_BF16) {
            uint16_t h = dtype == GP_F16 ? gp_f32_to_f16(v) : gp_f32_to_bf16(v);
            memcpy(p, &h, 2);
        } else if (dtype == GP_I32) {
            int32_t k = (int32_t)lrintf(v);
            memcpy(p, &k, 4);
        }
    }
}

void gp_weights_random_named(void *dst, gp_dtype dtype, int64_t n, uint64_t seed, const char *name)
{
    gp_weights_init in = gp_weights_init_for(name);
    gp_weights_random_fill(dst, dtype, 0, n, seed, gp_weights_name_key(name), in.center, in.scale);
}
