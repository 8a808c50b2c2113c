/* The CUDA moe kernels' workspace (cuda/cuda_moe.cu, GP_OP_MOE) and the host twins of their
 * routing and grouping arithmetic (run without a GPU by the cuda_host suite). The layout is
 * inline, so that the planner sizes it without a link to gp_cuda, as it does cpu/moe.h's. */
#ifndef GP_CUDA_MOE_H
#define GP_CUDA_MOE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Byte offsets of the parts, each 64-byte aligned. As on the CPU, every token runs exactly k
 * distinct experts, so the experts' rows number T k whatever the routing: all T tokens on one
 * expert takes no more than any other split. */
typedef struct {
    int64_t logits; /* f32 [T, E] router logits, then (softmax norms) probabilities */
    int64_t sel;    /* i32 [T, k] each token's experts, ascending */
    int64_t wt;     /* f32 [T, k] their weights */
    int64_t off;    /* i32 [E + 1] expert e's rows are [off[e], off[e + 1]) of xg and act */
    int64_t toff;   /* i32 [E + 1] expert e's row tiles (GP_CUDA_MOE_TM rows) [toff[e], toff[e + 1]) */
    int64_t slot;   /* i32 [T, k] the row of (t, j): token t's j-th expert */
    int64_t xg;     /* f32 [T k, H] x's rows grouped by expert; then the down products */
    int64_t act;    /* f32 [T k, F] silu(gate) * up */
    int64_t total;  /* bytes of the whole */
} gp_cuda_moe_ws_layout;

/* Rows of a tile of the prompts' expert products. */
#define GP_CUDA_MOE_TM 64

static inline int64_t gp_cuda_moe_align_(int64_t x)
{
    return (x + 63) / 64 * 64;
}

/* The layout for T tokens of H, E experts of F, k of them a token (plan/plan.h, GP_WS_*: no
 * larger than the CPU's gp_moe_ws, which has the up products' rows besides). */
static inline gp_cuda_moe_ws_layout gp_cuda_moe_ws(int64_t T, int64_t H, int64_t E, int64_t k,
                                                   int64_t F)
{
    gp_cuda_moe_ws_layout l;
    int64_t at = 0, rows = T * k;
#define GP_CUDA_MOE_PART_(field, bytes) (l.field = at, at += gp_cuda_moe_align_(bytes))
    GP_CUDA_MOE_PART_(logits, 4 * T * E);
    GP_CUDA_MOE_PART_(sel, 4 * rows);
    GP_CUDA_MOE_PART_(wt, 4 * rows);
    GP_CUDA_MOE_PART_(off, 4 * (E + 1));
    GP_CUDA_MOE_PART_(toff, 4 * (E + 1));
    GP_CUDA_MOE_PART_(slot, 4 * rows);
    GP_CUDA_MOE_PART_(xg, 4 * rows * H);
    GP_CUDA_MOE_PART_(act, 4 * rows * F);
#undef GP_CUDA_MOE_PART_
    l.total = at;
    return l;
}

/* The route kernel's arithmetic on the host: from the router logits of T tokens (f32 [T, E],
 * copied, not changed), each token's k experts ascending into sel [T, k] and their weights into
 * wt [T, k] by norm (GP_MOE_*): the same operations as the kernel (cpu_moe.c's softmax, top k with
 * ties to the lower index and a NaN never larger, the weights), its warp's lanes run one after
 * another. 0, or -1 for k outside 1..min(E, GP_MOE_MAX_K) or an unknown norm. */
int gp_cuda_moe_route_host(const float *logits, int T, int E, int k, int norm, int32_t *sel,
                           float *wt);

/* The group kernel's arithmetic on the host: from sel [n] (n = T k, experts in [0, E)), off
 * [E + 1], toff [E + 1] (tiles of GP_CUDA_MOE_TM rows) and slot [n] (expert e's rows in ascending
 * slot order, its ballots run lane by lane). 0, or -1 when an expert is out of range. */
int gp_cuda_moe_group_host(const int32_t *sel, int n, int E, int32_t *off, int32_t *toff,
                           int32_t *slot);

/* The expert whose rows (off [E + 1], nondecreasing from 0) hold row r < off[E]: the last e with
 * off[e] <= r, as the product kernels find a row's (or, over toff, a tile's) expert. */
int gp_cuda_moe_row_expert_host(const int32_t *off, int E, int r);

/* moe launches so far in this process, for tests: which 0, with the one-output-a-warp products
 * (decode); 1, in tiles (prompts). */
int64_t gp_cuda_moe_count(int which);

#ifdef __cplusplus
}
#endif

#endif
