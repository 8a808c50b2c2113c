/* The CPU moe kernel's workspace (ir/core.h, GP_OP_MOE): its layout for T tokens, shared by the
 * kernel (cpu/cpu_moe.c) and the planner, which reserves it at the bound of T. Inline, so the
 * planner needs no link to gp_cpu. */
#ifndef GP_CPU_MOE_H
#define GP_CPU_MOE_H

#include <stdint.h>

/* Byte offsets of the parts, each 64-byte aligned. Every token runs exactly k distinct experts,
 * so the rows the experts compute number T k whatever the routing: one expert taking all T tokens
 * is as big as any other split. */
typedef struct {
    int64_t sel;    /* i32 [T, k] the chosen experts of each token, ascending */
    int64_t wt;     /* f32 [T, k] their weights */
    int64_t logits; /* f32 [T, E] router logits, then probabilities */
    int64_t off;    /* i32 [E + 1] expert e's rows are [off[e], off[e + 1]) of xg, g, u */
    int64_t cur;    /* i32 [E] the next free row of each expert while grouping */
    int64_t slot;   /* i32 [T, k] the row of (t, j): token t's j-th expert */
    int64_t xg;     /* f32 [T k, H] x's rows grouped by expert; then the experts' outputs */
    int64_t g;      /* f32 [T k, F] gate products, then silu(gate) * up */
    int64_t u;      /* f32 [T k, F] up products */
    int64_t qrow;   /* i64 [E + 1] with quantized experts: expert e's rows of q from qrow[e] */
    int64_t q;      /* with quantized experts: the experts' rows of xg, then of g, quantized for
                     * the integer products (gp_quant_matmul_ws_prep), each expert's rows rounded
                     * up to 16: 4 max(H, F) bytes a row */
    int64_t total;  /* bytes of the whole */
} gp_moe_ws_layout;

static inline int64_t gp_moe_ws_align_(int64_t x)
{
    return (x + 63) / 64 * 64;
}

/* Rows of q: each used expert's rows rounded up to 16, at most T k of them over at most
 * min(E, T k) experts. */
static inline int64_t gp_moe_ws_qrows(int64_t T, int64_t E, int64_t k)
{
    int64_t rows = T * k;
    return rows + 15 * (E < rows ? E : rows);
}

/* The layout for T tokens of H, E experts of F, k of them a token; quant: the experts' weights
 * are block-quantized (q and qrow are then planned). */
static inline gp_moe_ws_layout gp_moe_ws(int64_t T, int64_t H, int64_t E, int64_t k, int64_t F,
                                         int quant)
{
    gp_moe_ws_layout l;
    int64_t at = 0, rows = T * k;
#define GP_MOE_PART_(field, bytes) (l.field = at, at += gp_moe_ws_align_(bytes))
    GP_MOE_PART_(sel, 4 * rows);
    GP_MOE_PART_(wt, 4 * rows);
    GP_MOE_PART_(logits, 4 * T * E);
    GP_MOE_PART_(off, 4 * (E + 1));
    GP_MOE_PART_(cur, 4 * E);
    GP_MOE_PART_(slot, 4 * rows);
    GP_MOE_PART_(xg, 4 * rows * H);
    GP_MOE_PART_(g, 4 * rows * F);
    GP_MOE_PART_(u, 4 * rows * F);
    GP_MOE_PART_(qrow, quant ? 8 * (E + 1) : 0);
    GP_MOE_PART_(q, quant ? 4 * (H > F ? H : F) * gp_moe_ws_qrows(T, E, k) : 0);
#undef GP_MOE_PART_
    l.total = at;
    return l;
}

#endif
