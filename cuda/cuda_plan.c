/* The CUDA backend's planning: the fusions decided at creation from the plan (which nodes one
 * launch runs together, what a kernel may read early, where it may add with atomics), recorded in
 * the session's cu_nodes for cuda_eval.c to launch. */
#include <stdatomic.h>
#include <stdlib.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_be.h"

/* Byte ranges of two tensors (at the bounds) overlap: same region and intersecting spans. */
static int overlaps(const gp_plan_tensor *a, const gp_plan_tensor *b)
{
    return a->region == b->region && a->size > 0 && b->size > 0 && a->offset < b->offset + b->size &&
           b->offset < a->offset + a->size;
}

/* Plans each matmul's epilogue: the elementwise nodes right after it (add or mul with one other
 * operand, gelu) that consume only the previous result, which nothing else reads. The final output
 * must not overlap what the matmul kernel reads (a, b, the workspace), since other blocks may still
 * read those while one writes; an operand may be the output itself (in place), else disjoint. */
static void plan_epilogues(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *mm = &p->nodes[i];
        if (mm->op != GP_OP_MATMUL || b->nodes[i].lora)
            continue;
        gp_cu_epilogue *e = &b->nodes[i].epi;
        int prev = mm->output, n = 0;
        int other[GP_CU_MAX_EPI], at[GP_CU_MAX_EPI]; /* at: the node of each op */
        for (int j = i + 1; j < p->n_nodes && n < GP_CU_MAX_EPI; j++) {
            const gp_plan_node *nd = &p->nodes[j];
            if (b->nodes[j].lora) {
                /* A branch merged into this product: its add leaves prev's bytes as they are
                 * (plan_lora: in place), and its output is what the next op reads. */
                if (nd->op == GP_OP_ADD && (nd->inputs[0] == prev || nd->inputs[1] == prev))
                    prev = nd->output;
                continue;
            }
            const gp_plan_tensor *pt = &p->tensors[prev], *ot = &p->tensors[nd->output];
            if (uses[prev] != 1 || pt->kind != GP_TENSOR_INTERMEDIATE || pt->view_src >= 0 ||
                ot->ndim != pt->ndim || ot->view_src >= 0)
                break;
            int same = 1;
            for (int d = 0; d < pt->ndim; d++)
                same &= ot->dims[d] == pt->dims[d] && ot->sym[d] == pt->sym[d];
            if (!same)
                break;
            if (nd->op == GP_OP_GELU && nd->inputs[0] == prev) {
                other[n] = -1;
            } else if ((nd->op == GP_OP_ADD || nd->op == GP_OP_MUL) && nd->n_inputs == 2 &&
                       (nd->inputs[0] == prev) != (nd->inputs[1] == prev)) {
                other[n] = nd->inputs[nd->inputs[0] == prev ? 1 : 0];
            } else if (nd->op == GP_OP_ALL_REDUCE && nd->n_inputs == 2 && b->rank == 0 &&
                       nd->inputs[0] == prev && nd->inputs[1] != prev) {
                /* Device 0's + y of all_reduce(x, y); the node's all-reduce still runs after
                 * the matmul (gp_cuda_be_enqueue), so nothing may follow it in the epilogue. */
                other[n] = nd->inputs[1];
                at[n] = j;
                e->op[n++] = GP_OP_ADD;
                break;
            } else {
                break;
            }
            e->op[n] = nd->op;
            at[n++] = j;
            prev = nd->output;
        }
        /* Drop trailing ops until the final output is safe to write from inside the kernel. */
        for (; n > 0; n--) {
            const gp_plan_tensor *out = &p->tensors[p->nodes[at[n - 1]].output];
            int ok = !overlaps(out, &p->tensors[mm->inputs[0]]) &&
                     !overlaps(out, &p->tensors[mm->inputs[1]]) &&
                     (mm->workspace < 0 || !overlaps(out, &p->tensors[mm->workspace]));
            for (int k = 0; k < n && ok; k++) {
                if (other[k] < 0)
                    continue;
                const gp_plan_tensor *o = &p->tensors[other[k]];
                ok = !overlaps(out, o) || (o->offset == out->offset && o->region == out->region &&
                                           o->dtype == out->dtype);
            }
            if (ok)
                break;
        }
        e->n = n;
        b->nodes[i].epi_end = n ? at[n - 1] : i;
        for (int k = 0; k < n; k++)
            if (other[k] >= 0)
                tensor_of(b, other[k], &e->other[k]);
        if (n)
            tensor_of(b, p->nodes[at[n - 1]].output, &e->out);
    }
}

/* The view's root tensor (the one that owns the bytes). */
static const gp_plan_tensor *root_of(const gp_plan *p, int id)
{
    while (p->tensors[id].view_src >= 0)
        id = p->tensors[id].view_src;
    return &p->tensors[id];
}

/*
 * embadd. An add of two lookups that only it reads (GPT-2's token and position embeddings) runs
 * as one launch (gp_cuda_get_rows_add): one kernel and one wait for the kernel before, instead
 * of three. Taken when both lookups read a weight table by an input's i32 ids (nothing in the
 * eval writes either), their rows and the sum are f32 of the same shape (the same bits as the
 * three launches), and the lookups are the two nodes right before the add.
 */
static void plan_embed_add(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int i = 2; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        if (nd->op != GP_OP_ADD || nd->n_inputs != 2)
            continue;
        int ok = 1;
        const gp_plan_tensor *ot = &p->tensors[nd->output];
        for (int k = 0; k < 2 && ok; k++) {
            int j = i - 2 + k, in = nd->inputs[k];
            const gp_plan_node *g = &p->nodes[j];
            const gp_plan_tensor *gt = &p->tensors[in];
            ok = g->op == GP_OP_GET_ROWS && g->output == in && uses[in] == 1 &&
                 gt->kind == GP_TENSOR_INTERMEDIATE && gt->view_src < 0 && gt->dtype == GP_F32 &&
                 root_of(p, g->inputs[0])->kind == GP_TENSOR_WEIGHT &&
                 !gp_dtype_is_quant(p->tensors[g->inputs[0]].dtype) &&
                 root_of(p, g->inputs[1])->kind == GP_TENSOR_INPUT &&
                 p->tensors[g->inputs[1]].dtype == GP_I32 && gt->ndim == 2 && ot->ndim == 2 &&
                 ot->dtype == GP_F32 && b->nodes[j].pair < 0 && !b->nodes[j].skip;
            for (int d = 0; d < 2 && ok; d++)
                ok = gt->dims[d] == ot->dims[d] && gt->sym[d] == ot->sym[d];
        }
        if (!ok || nd->inputs[0] == nd->inputs[1])
            continue;
        b->nodes[i].embadd = 1;
        b->nodes[i - 2].skip = b->nodes[i - 1].skip = 1;
    }
}

/*
 * copies, on rank 0: an argmax of an output into an output (GPT-2's next = argmax(logits)) runs
 * a kernel that writes both into the host's io block as it goes (gp_cuda_argmax_copy), through
 * the block's device address, so neither is copied back after it: the logits reach the host
 * while the argmax reads them, not in a copy of 201 KB after it (one of its two extra costs;
 * the other is a copy node's own). Taken for f32 rows, at launch sizes of at most
 * ARGMAX_COPY_MAX bytes of them (one-token evals).
 */
static void plan_argmax_copy(cuda_be *b)
{
    const gp_plan *p = b->p;
    unsigned char *hio = b->io_registered ? b->host_io : b->pin_io;
    void *dev = NULL;
    b->argmax_copy = -1;
    if (b->rank != 0 || (b->disable & FUSE_COPIES) ||
        cudaHostGetDevicePointer(&dev, hio, 0) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        if (nd->op != GP_OP_ARGMAX)
            continue;
        const gp_plan_tensor *x = &p->tensors[nd->inputs[0]], *o = &p->tensors[nd->output];
        int ok = x->kind == GP_TENSOR_OUTPUT && o->kind == GP_TENSOR_OUTPUT &&
                 x->view_src < 0 && o->view_src < 0 && x->region == GP_REGION_IO &&
                 o->region == GP_REGION_IO && x->dtype == GP_F32;
        if (ok) {
            b->argmax_copy = i;
            b->hio_dev = dev;
            return;
        }
    }
}

/*
 * cont(x) whose output is read only through reshapes that split its last dim (q, k and v of a fused
 * projection: reshape(cont(slice(qkv)), T, H, D)) needs no copy: its readers can read x with
 * composed strides, when x's last dim is contiguous and nothing planned over x's bytes is written
 * until the last reader has run. Those reshapes get descriptors into x; the cont is skipped.
 */
static void plan_cont_elision(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        if (nd->op != GP_OP_CONT)
            continue;
        const gp_plan_tensor *c = &p->tensors[nd->output], *x = &p->tensors[nd->inputs[0]];
        int nd_ = c->ndim, ok = c->kind == GP_TENSOR_INTERMEDIATE && c->view_src < 0 && nd_ >= 1 &&
                               nd_ <= 2 && x->ndim == nd_ && x->dtype == c->dtype &&
                               x->stride[nd_ - 1] == 1 && uses[nd->output] > 0;
        for (int d = 0; d < nd_ && ok; d++)
            ok = x->dims[d] == c->dims[d] && x->sym[d] == c->sym[d];
        int last = i, nviews = 0;
        for (int j = i + 1; j < p->n_nodes && ok; j++) {
            const gp_plan_node *r = &p->nodes[j];
            for (int k = 0; k < r->n_inputs && ok; k++) {
                if (r->inputs[k] != nd->output)
                    continue;
                const gp_plan_tensor *v = &p->tensors[r->output];
                ok = r->op == GP_OP_RESHAPE && v->ndim == nd_ + 1 && v->kind == GP_TENSOR_VIEW &&
                     v->dims[nd_ - 1] * v->dims[nd_] == c->dims[nd_ - 1];
                for (int d = 0; d < nd_ - 1 && ok; d++)
                    ok = v->dims[d] == c->dims[d] && v->sym[d] == c->sym[d];
                /* the view's readers: any kernel (they all take strides), or a store's source
                 * (read by the store's kernel, which takes strides too), but no further view */
                for (int q = j + 1; q < p->n_nodes && ok; q++)
                    for (int m = 0; m < p->nodes[q].n_inputs && ok; m++)
                        if (p->nodes[q].inputs[m] == r->output) {
                            ok = !gp_op_get(p->nodes[q].op)->is_view ||
                                 (p->nodes[q].op == GP_OP_STORE && m == 2);
                            last = q > last ? q : last;
                        }
                nviews++;
            }
        }
        if (!ok || nviews == 0 || nviews != uses[nd->output])
            continue;
        /* Nothing that starts living after the cont may share x's bytes until the last reader. */
        const gp_plan_tensor *xr = root_of(p, nd->inputs[0]);
        for (int t = 0; t < p->n_tensors && ok; t++) {
            const gp_plan_tensor *o = &p->tensors[t];
            if (o->view_src < 0 && o != xr && o->first > i - 1 && o->first <= last && overlaps(o, xr))
                ok = 0;
        }
        if (!ok)
            continue;
        gp_cu_tensor xs;
        tensor_of(b, nd->inputs[0], &xs);
        int64_t es = (int64_t)gp_dtype_size(c->dtype);
        for (int j = i + 1; j < p->n_nodes; j++) {
            const gp_plan_node *r = &p->nodes[j];
            if (r->op != GP_OP_RESHAPE || r->inputs[0] != nd->output)
                continue;
            const gp_plan_tensor *v = &p->tensors[r->output];
            gp_cu_tensor *a = &b->alias[r->output];
            *a = xs;
            a->ndim = nd_ + 1;
            a->ne[nd_ - 1] = v->dims[nd_ - 1];
            a->ne[nd_] = v->dims[nd_];
            a->sym[nd_ - 1] = v->sym[nd_ - 1];
            a->sym[nd_] = v->sym[nd_];
            a->nb[nd_ - 1] = v->dims[nd_] * es;
            a->nb[nd_] = es;
        }
        b->nodes[i].skip = 1;
    }
}

/*
 * Pairs each store with the next kernel node when that is a store too, with only views between
 * (and both rings, or neither): the two (a layer's K and V cache writes) run in one launch at the
 * first one's place. The later
 * store's inputs are ready there (views compute nothing), and it must not write what the first
 * reads or writes: different destination roots, and its source not the first one's destination.
 */
static void plan_store_pairs(cuda_be *b)
{
    const gp_plan *p = b->p;
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *a = &p->nodes[i];
        if (a->op != GP_OP_STORE || b->nodes[i].skip || b->nodes[i].pair >= 0)
            continue;
        int j = i + 1;
        while (j < p->n_nodes && gp_op_get(p->nodes[j].op)->is_view && p->nodes[j].op != GP_OP_STORE)
            j++;
        if (j >= p->n_nodes || p->nodes[j].op != GP_OP_STORE)
            continue;
        const gp_plan_node *c = &p->nodes[j];
        const gp_plan_tensor *sa = &p->tensors[a->inputs[2]], *sc = &p->tensors[c->inputs[2]];
        int ok = c->inputs[1] == a->inputs[1] && sa->ndim == sc->ndim && sa->ndim >= 1 &&
                 /* both rings, or neither */
                 (a->attrs.i[GP_STORE_RING] != 0) == (c->attrs.i[GP_STORE_RING] != 0) &&
                 sa->sym[0] == sc->sym[0] && sa->dims[0] == sc->dims[0] &&
                 root_of(p, c->inputs[0]) != root_of(p, a->inputs[0]) &&
                 root_of(p, c->inputs[2]) != root_of(p, a->inputs[0]) &&
                 root_of(p, a->inputs[2]) != root_of(p, c->inputs[0]);
        if (!ok)
            continue;
        b->nodes[i].pair = j;
        b->nodes[j].skip = 1;
    }
}

/*
 * An rms_norm right before the group at node i + 1 whose output only the group's n matmuls read
 * (Llama's attention and FFN norms): the group's launch may compute it (gp_cu_group.has_norm),
 * reading the norm's input, which nothing the group writes may overlap. Only for groups of up to
 * NORM_GROUP_MAX_BYTES of weights: the products get slower per byte with the norm inside (fewer
 * blocks per multiprocessor, more work per element), which pays only where the norm's own launch
 * weighs more: Llama-7B's groups on two GPUs, not on one (bench/gpu-notes.md).
 */
enum { NORM_GROUP_MAX_BYTES = 90 << 20 };

static void plan_group_norm(cuda_be *b, const int *uses, int i, int n)
{
    const gp_plan *p = b->p;
    const gp_plan_node *nd = &p->nodes[i];
    const gp_cu_group *g = &b->nodes[i + 1].grp;
    if (nd->op != GP_OP_RMS_NORM || nd->output != p->nodes[i + 1].inputs[0] ||
        uses[nd->output] != n || b->nodes[i].skip || b->nodes[i].tailed || b->nodes[i].prenorm)
        return;
    int64_t bytes = 0;
    for (int s = 0; s < n; s++) /* weights: no symbolic dims */
        bytes += (int64_t)(launch_numel(b, &g->w[s]) * gp_dtype_size(g->w[s].dtype));
    if (bytes > NORM_GROUP_MAX_BYTES)
        return;
    const gp_plan_tensor *h = &p->tensors[nd->output], *x = &p->tensors[nd->inputs[0]];
    const gp_plan_tensor *xr = root_of(p, nd->inputs[0]);
    if (h->kind != GP_TENSOR_INTERMEDIATE || h->view_src >= 0 || x->dtype != GP_F32)
        return;
    for (int s = 0; s < n; s++)
        if (overlaps(&p->tensors[p->nodes[i + 1 + s].output], xr))
            return;
    if (g->glu && overlaps(&p->tensors[p->nodes[i + 1 + n].output], xr))
        return;
    cu_node *cn = &b->nodes[i];
    cn->grpnorm = 1;
    memset(&cn->pre, 0, sizeof cn->pre);
    cn->pre.eps = (float)nd->attrs.f[GP_RMS_NORM_EPS];
    cn->pre.offset = (float)nd->attrs.f[GP_RMS_NORM_OFFSET]; /* the weight offset (Gemma's 1 + w) */
    tensor_of(b, nd->inputs[0], &cn->pre.x);
    tensor_of(b, nd->inputs[1], &cn->pre.w);
}

/*
 * Runs of matmuls right after each other that multiply the same x (not transposed) by different
 * weights, with no epilogue: a layer's q, k and v projections, or a SwiGLU's gate and up. When the
 * node after a pair is swiglu(first, second) (or swiglu(second, first)) and the two products have no
 * other reader, it joins (glu) and the products themselves are never written. Every output must be
 * disjoint from x (all blocks read x while others write).
 */
static void plan_matvec_groups(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *a = &p->nodes[i];
        if (a->op != GP_OP_MATMUL || a->attrs.i[GP_MATMUL_TA] != 0 || b->nodes[i].epi.n > 0 ||
            b->nodes[i].skip || (i > 0 && b->nodes[i - 1].prenorm))
            continue;
        const gp_plan_tensor *xr = root_of(p, a->inputs[0]);
        int n = 0;
        while (n < GP_CU_MAX_GROUP && i + n < p->n_nodes) {
            const gp_plan_node *m = &p->nodes[i + n];
            /* quantized weights all or none (gp_cu_quant_group takes the types it has kernels
             * for, else the group's nodes run one by one) */
            gp_dtype wt = p->tensors[m->inputs[1]].dtype, w0 = p->tensors[a->inputs[1]].dtype;
            if (m->op != GP_OP_MATMUL || m->inputs[0] != a->inputs[0] ||
                m->attrs.i[GP_MATMUL_TA] != 0 || gp_dtype_is_quant(wt) != gp_dtype_is_quant(w0) ||
                b->nodes[i + n].epi.n > 0 || b->nodes[i + n].skip ||
                overlaps(&p->tensors[m->output], xr))
                break;
            n++;
        }
        if (n < 2)
            continue;
        gp_cu_group *g = &b->nodes[i].grp;
        memset(g, 0, sizeof *g);
        const gp_plan_node *sw = i + 2 < p->n_nodes ? &p->nodes[i + 2] : NULL;
        int o0 = a->output, o1 = p->nodes[i + 1].output;
        if (n == 2 && sw && sw->op == GP_OP_SWIGLU && uses[o0] == 1 && uses[o1] == 1 &&
            ((sw->inputs[0] == o0 && sw->inputs[1] == o1) ||
             (sw->inputs[0] == o1 && sw->inputs[1] == o0)) &&
            !overlaps(&p->tensors[sw->output], xr)) {
            int first = sw->inputs[0] == o0 ? i : i + 1; /* the product silu is applied to */
            g->glu = 1;
            g->w[0] = b->nodes[first].in[1];
            g->tb[0] = p->nodes[first].attrs.i[GP_MATMUL_TB] != 0;
            g->w[1] = b->nodes[2 * i + 1 - first].in[1];
            g->tb[1] = p->nodes[2 * i + 1 - first].attrs.i[GP_MATMUL_TB] != 0;
            g->out[0] = b->nodes[i + 2].out;
        } else {
            for (int s = 0; s < n; s++) {
                g->w[s] = b->nodes[i + s].in[1];
                g->tb[s] = p->nodes[i + s].attrs.i[GP_MATMUL_TB] != 0;
                g->out[s] = b->nodes[i + s].out;
            }
        }
        g->n = n;
        g->x = b->nodes[i].in[0];
        if (i > 0)
            plan_group_norm(b, uses, i - 1, n);
        i += n - 1;
    }
}

/*
 * Norms right after an all_reduce that read its sum (Llama's rms_norm after each tensor-parallel
 * residual add): the P2P all-reduce kernel computes them when the sum is one f32 row that one
 * block can hold (gp_cuda_comm_all_reduce_norm). Weights contiguous [N]; the output disjoint from
 * the sum.
 */
static void plan_ar_norms(cuda_be *b)
{
    const gp_plan *p = b->p;
    for (int i = 0; b->comm && i + 1 < p->n_nodes; i++) {
        const gp_plan_node *ar = &p->nodes[i], *nd = &p->nodes[i + 1];
        if (ar->op != GP_OP_ALL_REDUCE || (nd->op != GP_OP_LAYER_NORM && nd->op != GP_OP_RMS_NORM) ||
            nd->inputs[0] != ar->output || b->nodes[i + 1].skip || b->nodes[i + 1].tailed)
            continue;
        const gp_plan_tensor *x = &p->tensors[ar->output], *h = &p->tensors[nd->output];
        const gp_plan_tensor *w = &p->tensors[nd->inputs[1]];
        const gp_plan_tensor *bias = nd->op == GP_OP_LAYER_NORM && nd->n_inputs > 2
                                         ? &p->tensors[nd->inputs[2]] : NULL;
        /* the kernel reads no weight offset (an rms_norm's): such norms run on their own */
        if (x->dtype != GP_F32 || x->view_src >= 0 || h->view_src >= 0 || overlaps(h, x) ||
            (nd->op == GP_OP_RMS_NORM && nd->attrs.f[GP_RMS_NORM_OFFSET] != 0) ||
            w->ndim != 1 || (bias && bias->ndim != 1) || h->ndim < 1 || x->ndim < 1 ||
            h->stride[h->ndim - 1] != 1 || w->dims[0] != x->dims[x->ndim - 1] ||
            (bias && bias->dims[0] != w->dims[0]))
            continue;
        gp_cuda_ar_norm *an = &b->nodes[i].arnorm;
        an->is_ln = nd->op == GP_OP_LAYER_NORM;
        an->eps = (float)nd->attrs.f[an->is_ln ? GP_LAYER_NORM_EPS : GP_RMS_NORM_EPS];
        an->w = tensor_addr(b, w);
        an->w_dt = w->dtype;
        an->b = bias ? tensor_addr(b, bias) : NULL;
        an->b_dt = bias ? bias->dtype : GP_F32;
        an->out = tensor_addr(b, h);
        an->out_dt = h->dtype;
        an->n = (size_t)w->dims[0];
        /* A row the kernel cannot take whole, or an all-reduce NCCL serves, keeps its norm node,
         * which the group or the matvec after it may then compute. */
        if (!gp_cuda_ar_norm_ok(an, an->n, GP_F32) ||
            !gp_cuda_comm_uses_p2p(b->comm, an->n * sizeof(float))) {
            memset(an, 0, sizeof *an);
            continue;
        }
        b->nodes[i].has_arnorm = 1;
        b->nodes[i + 1].tailed = 1;
    }
}

/*
 * Norms whose only reader is the matmul right after them, as its first operand (not transposed):
 * that matmul's matrix-vector kernel can normalize x itself. What the matmul writes (its output,
 * or its epilogue's) must not overlap x, which every block reads.
 */
static void plan_prenorms(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int i = 0; i + 1 < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i], *mm = &p->nodes[i + 1];
        if ((nd->op != GP_OP_LAYER_NORM && nd->op != GP_OP_RMS_NORM) || mm->op != GP_OP_MATMUL ||
            gp_dtype_is_quant(p->tensors[mm->inputs[1]].dtype))
            continue;
        const gp_plan_tensor *h = &p->tensors[nd->output], *x = &p->tensors[nd->inputs[0]];
        if (h->kind != GP_TENSOR_INTERMEDIATE || h->view_src >= 0 || uses[nd->output] != 1 ||
            b->nodes[i].tailed ||
            mm->inputs[0] != nd->output || mm->attrs.i[GP_MATMUL_TA] != 0 || b->nodes[i + 1].skip)
            continue;
        const gp_plan_tensor *xr = root_of(p, nd->inputs[0]);
        int last_out = p->nodes[b->nodes[i + 1].epi_end].output;
        if (overlaps(&p->tensors[mm->output], xr) || overlaps(&p->tensors[last_out], xr) ||
            x->dtype != GP_F32)
            continue;
        cu_node *cn = &b->nodes[i];
        cn->prenorm = 1;
        cn->pre.is_ln = nd->op == GP_OP_LAYER_NORM;
        cn->pre.eps = (float)nd->attrs.f[cn->pre.is_ln ? GP_LAYER_NORM_EPS : GP_RMS_NORM_EPS];
        cn->pre.offset = cn->pre.is_ln ? 0.0f : (float)nd->attrs.f[GP_RMS_NORM_OFFSET];
        tensor_of(b, nd->inputs[0], &cn->pre.x);
        tensor_of(b, nd->inputs[1], &cn->pre.w);
        if (cn->pre.is_ln && nd->n_inputs > 2)
            tensor_of(b, nd->inputs[2], &cn->pre.b);
    }
}

/*
 * The layer norms planned into the matmul after them whose weights, and the matmul's, are the
 * model's: folded (gp_cuda_fold), so that the one-row product sums x while it reduces the norm's
 * statistics. Enqueues their constants (2 N floats each) one after the other from dst on and sets
 * each norm's pre.fold; dst NULL: nothing enqueued. Returns the floats they take, or -1 with
 * b->kc.err set.
 */
static int64_t fold_all(cuda_be *b, float *dst)
{
    const gp_plan *p = b->p;
    int64_t at = 0;
    for (int i = 0; i + 1 < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i], *mm = &p->nodes[i + 1];
        cu_node *cn = &b->nodes[i];
        if (!cn->prenorm || !cn->pre.is_ln ||
            root_of(p, mm->inputs[1])->kind != GP_TENSOR_WEIGHT ||
            root_of(p, nd->inputs[1])->kind != GP_TENSOR_WEIGHT ||
            (nd->n_inputs > 2 && root_of(p, nd->inputs[2])->kind != GP_TENSOR_WEIGHT))
            continue;
        int64_t n = gp_cuda_fold(&b->kc, &cn->pre, &mm->attrs, &b->nodes[i + 1].in[1],
                                 dst ? dst + at : NULL);
        if (n < 0)
            return -1;
        if (dst && n > 0)
            cn->pre.fold = dst + at;
        at += n;
    }
    return at;
}

/* fold_all at creation, into one allocation of its own, done before the first eval. 0, or -1
 * with err set. Reloaded weights (be_reload_weights) are LoRA slots, which no folded product
 * reads: a slot's A reads a norm that the base matmul reads too, so that norm is no prenorm. */
static int plan_folds(cuda_be *b, char *err, size_t err_len)
{
    b->kc.stream = b->stream; /* not yet set: the constants must be there before the first eval */
    int64_t n = fold_all(b, NULL);
    if (n <= 0) {
        if (n < 0)
            snprintf(err, err_len, "cuda: %s", b->kc.err);
        return n < 0 ? -1 : 0;
    }
    cudaError_t e = be_malloc(b, (void **)&b->dfold, (size_t)n * sizeof(float));
    if (e == cudaSuccess && fold_all(b, b->dfold) < 0) {
        snprintf(err, err_len, "cuda: %s", b->kc.err);
        return -1;
    }
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(b->stream);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cuda: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

/* The first step from which tensor t's bytes are its own or those of the tensors it is written
 * over in place (their lifetimes, docs/plan-format.md). */
static int bytes_first(const gp_plan *p, int t)
{
    int first = p->tensors[t].first;
    for (int n = 0; p->tensors[t].inplace_of >= 0 && n < p->n_tensors; n++) {
        t = p->tensors[t].inplace_of;
        if (p->tensors[t].first < first)
            first = p->tensors[t].first;
    }
    return first;
}

/*
 * Accumulated outputs (docs/plan-format.md): a one-row product of a folded layer norm whose
 * epilogue adds only (maybe ending in a gelu) may add its splits into its output with atomics
 * (k_matvec_kc's add) when the matmul launched before it has zeroed those bytes after its wait.
 * That is safe when the plan keeps the bytes the output is written to from that launch's first
 * step on (gplan-compile does, for CUDA): nothing else lies there meanwhile. A trailing gelu is
 * then left to the only reader of the output, a matmul reading it as x (matmul_node). One device
 * only (tensor-parallel plans are not measured with it).
 */
static void plan_accumulate(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int i = 0; i < p->n_nodes; i++) {
        b->nodes[i].zero_for = b->nodes[i].gelu_to = -1;
        b->nodes[i].acc = 0;
    }
    if ((b->disable & FUSE_ACCUM) || p->n_devices > 1 || b->kc.mv_add < 2)
        return;
    for (int j = 1; j < p->n_nodes; j++) {
        cu_node *cj = &b->nodes[j];
        const gp_cu_epilogue *e = &cj->epi;
        if (p->nodes[j].op != GP_OP_MATMUL || !b->nodes[j - 1].prenorm ||
            !b->nodes[j - 1].pre.fold || e->n < 1 || cj->skip || cj->dec_att ||
            cj->grp.n > 1)
            continue;
        int n = e->n, gelu = e->op[n - 1] == GP_OP_GELU, ok = 1;
        for (int k = 0; k < n - gelu; k++)
            ok &= e->op[k] == GP_OP_ADD;
        /* the matmul launched before it, which zeroes its output: merged LoRA branches' do not
         * launch, and the planner skips them too when it starts the output's bytes there
         * (accumulated_from in planner/plan_build.c), else this product would lose its accum */
        int i = j - 2;
        while (i >= 0 && (p->nodes[i].op != GP_OP_MATMUL || b->nodes[i].lora))
            i--;
        if (!ok || i < 0 || b->nodes[i].skip || b->nodes[i].dec_att || b->nodes[i].grp.n > 1 ||
            b->nodes[i].epi.n < 1 || b->nodes[i].zero_for >= 0)
            continue;
        int out = p->nodes[cj->epi_end].output, from = i > 0 && b->nodes[i - 1].prenorm ? i - 1 : i;
        if (p->tensors[out].kind != GP_TENSOR_INTERMEDIATE || bytes_first(p, out) > from)
            continue;
        /* A node before the zeroing that an attention after it runs (attnfuse) reads its sources
         * past their planned last step, maybe over these bytes. */
        for (int s = 0; s < from && ok; s++)
            ok = !b->nodes[s].dec_att || b->nodes[s].dec_att - 1 < from;
        if (!ok)
            continue;
        int k = -1; /* with gelu: the matmul that reads out as its x */
        for (int s = cj->epi_end + 1; gelu && s < p->n_nodes && k < 0; s++)
            for (int q = 0; q < p->nodes[s].n_inputs && !b->nodes[s].lora; q++)
                if (p->nodes[s].inputs[q] == out)
                    k = s;
        if (gelu && (k < 0 || uses[out] != 1 || p->nodes[k].op != GP_OP_MATMUL ||
                     p->nodes[k].inputs[0] != out || p->nodes[k].attrs.i[GP_MATMUL_TA] ||
                     b->nodes[k].epi.n < 1 || b->nodes[k].skip || b->nodes[k].dec_att ||
                     b->nodes[k].grp.n > 1))
            continue;
        b->nodes[i].zero_for = j;
        cj->acc = 1;
        cj->gelu_to = k;
    }
}

/* ---- attnfuse: a one-token attention with its ropes and K/V cache stores in one launch ---- */

typedef struct {
    uintptr_t lo, hi; /* device bytes [lo, hi); lo == hi: none */
} dev_span;

/* The bytes t spans in a one-token launch: its dims of symbol tsym at 1, the others at their
 * bounds. */
static dev_span span_one_token(const gp_cu_tensor *t, int tsym)
{
    dev_span s = {0, 0};
    int64_t lo = 0, hi = 0;
    if (!t->data)
        return s;
    for (int d = 0; d < t->ndim; d++) {
        int64_t n = t->sym[d] >= 0 && t->sym[d] == tsym ? 1 : t->ne[d];
        if (n <= 0)
            return s;
        int64_t off = (n - 1) * t->nb[d];
        if (off < 0)
            lo += off;
        else
            hi += off;
    }
    s.lo = (uintptr_t)t->data + (uintptr_t)lo; /* lo <= 0: wraps to the lower address */
    s.hi = (uintptr_t)t->data + (uintptr_t)hi + gp_dtype_size(t->dtype);
    return s;
}

static int spans_meet(dev_span a, dev_span b)
{
    return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

/* The tensor that owns the bytes tensor id reads: its root, or for the reshape of an elided cont
 * the root of the cont's input. -1 when unknown. */
static int bytes_root(const cuda_be *b, int id)
{
    const gp_plan *p = b->p;
    if (b->alias[id].ndim > 0) {
        int c = p->tensors[id].view_src, n = c >= 0 ? p->tensors[c].producer : -1;
        if (n < 0)
            return -1;
        id = p->nodes[n].inputs[0];
    }
    return (int)(root_of(p, id) - p->tensors);
}

/* The step whose node wrote the bytes tensor id reads (bytes_root's producer), or -1 (an input, a
 * state or a weight). */
static int bytes_step(const cuda_be *b, int id)
{
    int r = bytes_root(b, id);
    return r < 0 ? b->p->n_nodes /* unknown: nothing may run before the reader */
                 : b->p->tensors[r].producer;
}

/* 1 when node j is among the n nodes of list (the nodes a fused launch absorbed). */
static int listed(const int *list, int n, int j)
{
    for (int k = 0; k < n; k++)
        if (list[k] == j)
            return 1;
    return 0;
}

/* What node j may write in a one-token launch, as spans (at most 4): its output (a store: its
 * destination; a fused attention: also its caches), its workspace. Views, elided conts and merged
 * LoRA nodes write nothing. Other fusions only move a write to an earlier step or drop it, so this
 * is a superset of what runs at step j or later. */
static int node_writes(const cuda_be *b, int j, int tsym, dev_span *w)
{
    const gp_plan_node *nd = &b->p->nodes[j];
    const cu_node *cn = &b->nodes[j];
    int n = 0;
    if (cn->lora)
        return 0; /* merged into its product: never runs */
    if (nd->op == GP_OP_STORE)
        w[n++] = span_one_token(&cn->in[0], tsym);
    else if (!gp_op_get(nd->op)->is_view && !(nd->op == GP_OP_CONT && cn->skip))
        w[n++] = span_one_token(&cn->out, tsym);
    if (cn->dec_on) {
        w[n++] = span_one_token(&cn->dec.k_cache, tsym);
        w[n++] = span_one_token(&cn->dec.v_cache, tsym);
    }
    if (cn->ws && cn->ws_size) {
        w[n].lo = (uintptr_t)cn->ws;
        w[n++].hi = (uintptr_t)cn->ws + cn->ws_size;
    }
    return n;
}

/* A rope at pos whose output (tensor id) only its one reader reads: *r its attributes, *node the
 * rope, *src its input. */
static int rope_source(const cuda_be *b, const int *uses, int id, int pos, gp_cu_rope *r, int *node,
                       int *src)
{
    const gp_plan *p = b->p;
    const gp_plan_tensor *t = &p->tensors[id];
    int n = t->producer;
    if (n < 0 || p->nodes[n].op != GP_OP_ROPE || p->nodes[n].inputs[1] != pos || uses[id] != 1 ||
        t->kind != GP_TENSOR_INTERMEDIATE || t->view_src >= 0 || b->nodes[n].dec_att)
        return 0;
    const gp_plan_node *nd = &p->nodes[n];
    *r = gp_cuda_rope_of(&nd->attrs, t->dtype);
    if (nd->n_inputs > 2) { /* freq_factors: a 1-d f32 tensor */
        r->ff = (const char *)b->nodes[n].in[2].data;
        r->ff_nb = b->nodes[n].in[2].nb[0];
    }
    *node = n;
    *src = nd->inputs[0];
    return 1;
}

/* Tensor id = reshape(c) [T, H, D] with c = cont(x [T, H * D]) not elided, each read only by its
 * one reader: *d is x seen as [T, H, D] (the cont need not run), *node the cont, *src x. */
static int cont_source(const cuda_be *b, const int *uses, int id, gp_cu_tensor *d, int *node,
                       int *src)
{
    const gp_plan *p = b->p;
    const gp_plan_tensor *v = &p->tensors[id];
    int r = v->producer;
    if (r < 0 || p->nodes[r].op != GP_OP_RESHAPE || uses[id] != 1 || v->ndim != 3 ||
        v->sym[1] >= 0 || v->sym[2] >= 0 || b->alias[id].ndim > 0)
        return 0;
    int c = p->nodes[r].inputs[0], n = p->tensors[c].producer;
    const gp_plan_tensor *ct = &p->tensors[c];
    if (n < 0 || p->nodes[n].op != GP_OP_CONT || b->nodes[n].skip || b->nodes[n].dec_att ||
        uses[c] != 1 || ct->kind != GP_TENSOR_INTERMEDIATE || ct->view_src >= 0)
        return 0;
    const gp_cu_tensor *x = &b->nodes[n].in[0];
    if (x->ndim != 2 || x->dtype != ct->dtype || x->ne[0] != v->dims[0] || x->sym[0] != v->sym[0] ||
        x->sym[1] >= 0 || x->ne[1] != v->dims[1] * v->dims[2])
        return 0;
    *d = *x;
    d->ndim = 3;
    d->ne[1] = v->dims[1];
    d->ne[2] = v->dims[2];
    d->sym[1] = d->sym[2] = -1;
    d->nb[1] = v->dims[2] * x->nb[1];
    d->nb[2] = x->nb[1];
    *node = n;
    *src = p->nodes[n].inputs[0];
    return 1;
}

/* An operand of the fused attention, *t for tensor *id: the input of the rope (at pos) that makes
 * it when rope is not NULL and there is one, else the source of the cont that makes it, else as it
 * is. *id becomes the tensor read, and the absorbed node is appended to absorbed. */
static void absorb_source(const cuda_be *b, const int *uses, int pos, int *id, gp_cu_tensor *t,
                          gp_cu_rope *rope, int *absorbed, int *n_abs)
{
    int node;
    if (rope && rope_source(b, uses, *id, pos, rope, &node, id))
        *t = b->nodes[node].in[0];
    else if (!cont_source(b, uses, *id, t, &node, id))
        return;
    absorbed[(*n_abs)++] = node;
}

static int same_desc(const gp_cu_tensor *a, const gp_cu_tensor *b)
{
    if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->ne[d] != b->ne[d] || a->nb[d] != b->nb[d] || a->sym[d] != b->sym[d])
            return 0;
    return 1;
}

/* t's first dim is the launch's token dim: symbol tsym, or a fixed 1. */
static int token_dim(const gp_cu_tensor *t, int tsym)
{
    return t->ndim >= 1 && (t->sym[0] >= 0 ? t->sym[0] == tsym : t->ne[0] == 1);
}

/* The output writes over q exactly: element (h, d) of both at one address, elements of one size
 * that share no bytes. Safe: head h's output is written (by its last split block, or by the
 * combine kernel after the launch) only after every block of head h has read q[h] into registers
 * (before its counter increment), and only head h's blocks read q[h]. */
static int over_q_exactly(const gp_cu_tensor *q, const gp_cu_tensor *o)
{
    int64_t es = (int64_t)gp_dtype_size(q->dtype);
    return q->data == o->data && q->ndim == 3 && o->ndim == 3 &&
           es == (int64_t)gp_dtype_size(o->dtype) && q->ne[1] == o->ne[1] && q->ne[2] == o->ne[2] &&
           q->nb[1] == o->nb[1] && q->nb[2] == o->nb[2] && q->nb[2] >= es &&
           q->nb[1] >= q->ne[2] * q->nb[2];
}

/* The caches' dtype when "atthead" runs the one-token attention d into out in one block a head
 * (gp_cuda_attention_head_kv), else -1: then qkvatt is not planned, since c_attn launched before
 * the attention's block a head is faster than qkvatt's clusters (bench/gpu-notes.md). */
static int head_kv(const cuda_be *b, const gp_cu_decode_att *d, const gp_cu_tensor *out)
{
    return b->disable & FUSE_ATTHEAD ? -1 : gp_cuda_attention_head_kv(d, out);
}

/* head_pos and head_rows: where the one-token attentions that atthead takes read their
 * position (one i32 input for all of them, else none: head_pos -1), and the fewest rows any of
 * them loads early. */
static void plan_head_pos(cuda_be *b)
{
    b->head_pos = -1;
    b->head_rows = 0;
    for (int i = 0; i < b->p->n_nodes; i++) {
        const gp_cu_decode_att *d = &b->nodes[i].dec;
        int kv = b->nodes[i].dec_on ? head_kv(b, d, &b->nodes[i].out) : -1;
        if (kv < 0)
            continue;
        int64_t at = (const unsigned char *)d->pos.data - b->dev[GP_REGION_IO];
        int rows = gp_cuda_attention_head_rows(kv);
        if (at < 0 || at + 4 > b->p->regions[GP_REGION_IO].size ||
            (b->head_rows && at != b->head_pos)) {
            b->head_pos = -1;
            return;
        }
        b->head_pos = at;
        b->head_rows = b->head_rows && b->head_rows < rows ? b->head_rows : rows;
    }
}

/* The node of the launch after node i's: past its epilogue, views, skipped nodes, nodes an
 * attention runs and norms the matmul after them computes (p->n_nodes: none). */
static int next_launch(const cuda_be *b, int i)
{
    const gp_plan *p = b->p;
    int j = (p->nodes[i].op == GP_OP_MATMUL ? b->nodes[i].epi_end : i) + 1;
    while (j < p->n_nodes && (gp_op_get(p->nodes[j].op)->is_view || b->nodes[j].skip ||
                              b->nodes[j].dec_att || b->nodes[j].prenorm))
        j++;
    return j;
}

/*
 * Early triggers. A matmul's [K, N] kernel lets the next kernel start at its own start, not after
 * its PDL wait, when that next launch is a matmul of at least trig_bytes of weights (GPT-2
 * 1558M's c_proj, c_fc and mlp.c_proj; 117M's products are smaller): that launch's blocks then
 * take the room this one leaves and load their first weights while the attention before runs,
 * or this product does. Its own wait still waits for this kernel, which waited for the one
 * before. An attention whose next launch is such a matmul (1558M's, before c_proj) does the same
 * in one block a head: c_proj's weights then load while c_attn ends, and c_fc's during the
 * attention. GPLAN_CUDA_TRIG=n sets the threshold (MiB), "none" none.
 */
static void plan_trig(cuda_be *b)
{
    const gp_plan *p = b->p;
    for (int i = p->n_nodes - 1; i >= 0; i--) { /* from the end: an attention reads j's */
        int j = next_launch(b, i);
        b->nodes[i].trig = 0;
        if (b->trig_bytes < 0 || j >= p->n_nodes || p->nodes[j].op != GP_OP_MATMUL)
            continue;
        const gp_plan_tensor *w = &p->tensors[p->nodes[j].inputs[1]];
        if (p->nodes[i].op == GP_OP_MATMUL)
            b->nodes[i].trig = w->kind == GP_TENSOR_WEIGHT && w->size >= b->trig_bytes;
        else if (p->nodes[i].op == GP_OP_ATTENTION)
            b->nodes[i].trig = b->nodes[j].trig;
    }
}

/*
 * qkvatt. The fused one-token attention a (d, its sources' tensors src: q, k, v) whose q, k and v
 * are columns of one tensor qkv = norm(x) @ w + bias that nothing else reads (GPT-2's c_attn: a
 * matmul with its prenorm and a bias epilogue, planned before) computes them itself, head by head
 * (gp_cuda_qkv_attention_ok): the norm, the matmul and the epilogue are absorbed too. Memory: x
 * may not be written from the norm's step to the attention (absorbed nodes write nothing), nor
 * by the launch itself.
 */
static void plan_qkv_attention(cuda_be *b, int a, gp_cu_decode_att *d, const int *src,
                               int *absorbed, int *n_abs, int tsym)
{
    const gp_plan *p = b->p;
    int qkv = bytes_root(b, src[0]);
    if (qkv < 0)
        return;
    const gp_plan_tensor *root = &p->tensors[qkv];
    int e = root->producer, mm = e - 1, nn = e - 2;
    if ((b->disable & (FUSE_QKVATT | FUSE_PLANS)) ||
        head_kv(b, d, &b->nodes[a].out) >= 0 || bytes_root(b, src[1]) != qkv ||
        bytes_root(b, src[2]) != qkv ||
        root->kind != GP_TENSOR_INTERMEDIATE || nn < 0 || p->nodes[mm].op != GP_OP_MATMUL ||
        p->nodes[e].output != qkv || !b->nodes[nn].prenorm || b->nodes[mm].epi.n != 1 ||
        b->nodes[mm].epi.op[0] != GP_OP_ADD ||
        p->nodes[mm].attrs.i[GP_MATMUL_TA] || p->nodes[mm].attrs.i[GP_MATMUL_TB] ||
        b->nodes[nn].dec_att || b->nodes[mm].dec_att || b->nodes[e].dec_att)
        return;
    /* q, k and v: f32 columns [0, C), [C, 2C), [2C, 3C) of qkv's one row, heads of 64. */
    const gp_cu_tensor *qt = &b->nodes[e].out, *sv[3] = {&d->q, &d->k, &d->v};
    int64_t H = d->q.ndim == 3 ? d->q.ne[1] : 0, C = H * 64;
    int ok = qt->dtype == GP_F32 && qt->ndim == 2 && qt->ne[1] == 3 * C && qt->nb[1] == 4;
    for (int i = 0; i < 3 && ok; i++)
        ok = sv[i]->dtype == GP_F32 && sv[i]->ndim == 3 && sv[i]->ne[1] == H &&
             sv[i]->ne[2] == 64 && sv[i]->nb[1] == 64 * 4 && sv[i]->nb[2] == 4 &&
             (char *)sv[i]->data == (char *)qt->data + i * C * 4;
    /* Nothing but the absorbed nodes and the attention reads qkv's bytes (views and elided
     * conts compute nothing). */
    for (int j = 0; j < p->n_nodes && ok; j++) {
        int none = gp_op_get(p->nodes[j].op)->is_view ||
                   (p->nodes[j].op == GP_OP_CONT && b->nodes[j].skip); /* computes nothing */
        if (j == a || j == e || none || listed(absorbed, *n_abs, j))
            continue;
        for (int k = 0; k < p->nodes[j].n_inputs && ok; k++)
            ok = bytes_root(b, p->nodes[j].inputs[k]) != qkv;
    }
    if (!ok)
        return;
    gp_cu_decode_att t = *d;
    t.has_qkv = 1;
    t.qkv_w = b->nodes[mm].in[1];
    t.qkv_b = b->nodes[mm].epi.other[0];
    t.qkv_norm = b->nodes[nn].pre;
    if (!gp_cuda_qkv_attention_ok(&b->kc, &t, &b->nodes[a].out))
        return;
    /* x: not written from the norm's step on (absorbed nodes, views and elided conts write
     * nothing), nor by the launch (its output, caches, workspace). */
    dev_span xs = span_one_token(&t.qkv_norm.x, tsym), w[4];
    for (int j = nn; j <= a && ok; j++) {
        int skipped = j == nn || j == mm || j == e || listed(absorbed, *n_abs, j);
        int n = skipped ? 0 : node_writes(b, j, tsym, w); /* a: output, workspace */
        if (j == a) {
            ok = !spans_meet(span_one_token(&t.k_cache, tsym), xs) &&
                 !spans_meet(span_one_token(&t.v_cache, tsym), xs);
        }
        for (int k = 0; k < n && ok; k++)
            ok = !spans_meet(w[k], xs);
    }
    if (!ok)
        return;
    *d = t;
    absorbed[(*n_abs)++] = nn;
    absorbed[(*n_abs)++] = mm;
    absorbed[(*n_abs)++] = e;
}

/*
 * attnfuse. An attention whose k and v are store outputs (at its pos) that nothing else reads
 * runs, in one-token launches, as one gp_cuda_attention_decode launch that also does the stores;
 * with them, when read only there: ropes (at its pos) before the stores or q, and a cont whose
 * reshape is q, k or v (GPT-2's q: read straight from qkv). Those nodes are skipped in one-token
 * launches only; launches of more tokens run them as nodes.
 * Memory, at one token's extents (device addresses): the launch reads q, k and v's sources, pos
 * and the caches, so (1) nothing that runs between the step that wrote a source's bytes and the
 * attention may write them (the skipped nodes write nothing); (2) what the launch writes (its
 * output, its split partials, the two cache rows) overlaps nothing it reads, except the output
 * laid exactly over q (over_q_exactly); (3) nothing between the stores and the attention reads the
 * caches (it would see the old rows). When a check fails, the nodes run unfused. The split
 * partials go to the attention's own workspace, which the planner keeps live from the first node
 * fused here (docs/plan-format.md, Workspaces), so it lies over none of the sources; in a plan
 * from an older compiler it may, and then the nodes run unfused too.
 */
static void plan_decode_attention(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int a = 0; a < p->n_nodes; a++) {
        const gp_plan_node *at = &p->nodes[a];
        cu_node *an = &b->nodes[a];
        if (at->op != GP_OP_ATTENTION || at->n_inputs != 4 || an->skip)
            continue;
        int pos = at->inputs[3], ik = at->inputs[1], iv = at->inputs[2];
        int sk = p->tensors[ik].producer, sv = p->tensors[iv].producer;
        /* the stores write rings when the attention reads them */
        int ring = at->attrs.i[GP_ATTENTION_RING] != 0;
        if (sk < 0 || sv < 0 || sk == sv || p->nodes[sk].op != GP_OP_STORE ||
            p->nodes[sv].op != GP_OP_STORE || (p->nodes[sk].attrs.i[GP_STORE_RING] != 0) != ring ||
            (p->nodes[sv].attrs.i[GP_STORE_RING] != 0) != ring || p->nodes[sk].inputs[1] != pos ||
            p->nodes[sv].inputs[1] != pos || uses[ik] != 1 || uses[iv] != 1 ||
            b->nodes[sk].dec_att || b->nodes[sv].dec_att)
            continue;
        /* A pair of stores runs in one launch: only with each other. */
        int ok = (b->nodes[sk].pair < 0 || b->nodes[sk].pair == sv) &&
                 (b->nodes[sv].pair < 0 || b->nodes[sv].pair == sk);
        for (int j = 0; j < p->n_nodes && ok; j++)
            ok = !((b->nodes[j].pair == sk || b->nodes[j].pair == sv) && j != sk && j != sv);
        if (!ok)
            continue;
        int tsym = an->in[0].ndim == 3 && an->in[0].sym[0] >= 0 ? an->in[0].sym[0] : -1;
        gp_cu_decode_att d;
        memset(&d, 0, sizeof d);
        int absorbed[8] = {sk, sv, -1, -1, -1, -1, -1, -1}, n_abs = 2;
        /* The sources and the tensors whose bytes they are: q, k, v, pos, k cache, v cache. */
        int src[6] = {at->inputs[0], p->nodes[sk].inputs[2], p->nodes[sv].inputs[2], pos,
                      p->nodes[sk].inputs[0], p->nodes[sv].inputs[0]};
        d.q = an->in[0];
        d.k = b->nodes[sk].in[2];
        d.v = b->nodes[sv].in[2];
        absorb_source(b, uses, pos, &src[0], &d.q, &d.rope_q, absorbed, &n_abs);
        absorb_source(b, uses, pos, &src[1], &d.k, &d.rope_k, absorbed, &n_abs);
        absorb_source(b, uses, pos, &src[2], &d.v, NULL, absorbed, &n_abs);
        d.pos = an->in[3];
        d.k_cache = b->nodes[sk].in[0];
        d.v_cache = b->nodes[sv].in[0];
        d.scale = at->attrs.f[GP_ATTENTION_SCALE];
        d.window = at->attrs.i[GP_ATTENTION_WINDOW] > 0 ? at->attrs.i[GP_ATTENTION_WINDOW] : 0;
        d.ring = ring;
        double cap = at->attrs.f[GP_ATTENTION_SOFTCAP];
        d.softcap = cap > 0 ? (float)cap : 0.0f;
        d.pos_const = root_of(p, pos)->kind == GP_TENSOR_INPUT;
        /* Shapes: one token in every operand at once; caches as the attention reads them. */
        const gp_cu_tensor *ops[5] = {&d.q, &d.k, &d.v, &d.pos, &an->out};
        for (int i = 0; i < 5 && ok; i++)
            ok = token_dim(ops[i], tsym);
        if (!ok || !same_desc(&d.k_cache, &an->in[1]) || !same_desc(&d.v_cache, &an->in[2]) ||
            (tsym < 0 && an->in[0].ne[0] != 1) || !gp_cuda_attention_decode_ok(&d, &an->out))
            continue;
        /* Memory (1): nothing written between a source's writer and the attention. */
        const gp_cu_tensor *reads[6] = {&d.q, &d.k, &d.v, &d.pos, &d.k_cache, &d.v_cache};
        dev_span rs[6], w[4];
        for (int i = 0; i < 6; i++)
            rs[i] = span_one_token(reads[i], tsym);
        for (int i = 0; i < 6 && ok; i++)
            for (int j = bytes_step(b, src[i]) + 1; j < a && ok; j++) {
                int skipped = listed(absorbed, n_abs, j);
                for (int k = skipped ? 0 : node_writes(b, j, tsym, w); k > 0 && ok; k--)
                    ok = !spans_meet(w[k - 1], rs[i]);
            }
        /* (2) What the launch writes against what it reads. */
        dev_span os = span_one_token(&an->out, tsym), ws = {0, 0};
        if (an->ws && an->ws_size) {
            ws.lo = (uintptr_t)an->ws;
            ws.hi = ws.lo + an->ws_size;
        }
        int own_ws = 1;
        for (int i = 0; i < 6 && ok; i++) {
            ok = (!spans_meet(os, rs[i]) || (i == 0 && over_q_exactly(&d.q, &an->out))) &&
                 (i >= 4 || (!spans_meet(rs[4], rs[i]) && !spans_meet(rs[5], rs[i])));
            own_ws &= !spans_meet(ws, rs[i]);
        }
        ok = ok && !spans_meet(rs[4], rs[5]);
        /* (3) No kernel between the first store and the attention reads the caches. */
        for (int j = (sk < sv ? sk : sv) + 1; j < a && ok; j++) {
            const gp_plan_node *nd = &p->nodes[j];
            if (j == sk || j == sv || (gp_op_get(nd->op)->is_view && nd->op != GP_OP_STORE))
                continue;
            for (int k = 0; k < nd->n_inputs && ok; k++) {
                dev_span s = span_one_token(&b->nodes[j].in[k], tsym);
                ok = !spans_meet(s, rs[4]) && !spans_meet(s, rs[5]);
            }
        }
        if (!ok || !own_ws)
            continue;
        plan_qkv_attention(b, a, &d, src, absorbed, &n_abs, tsym);
        an->dec = d;
        an->dec_on = 1;
        an->dec_tsym = tsym;
        for (int k = 0; k < n_abs; k++)
            b->nodes[absorbed[k]].dec_att = a + 1;
    }
}

/*
 * ropetab. The one-token attentions' rope angles depend only on the position and the rope (every
 * layer's are the same), and computed by each block of each attention they would be pow, cos and
 * sin in double on its critical path. So one launch before the first node makes a table per
 * distinct (pos, theta, n) in the param block (gp_cuda_rope_tables: the same bits), and the
 * attentions read their angles from it with their other loads. At most GP_CU_ROPE_TABS tables;
 * ropes past them, or wider than a table, keep computing their own.
 */
static void plan_rope_tables(cuda_be *b, float *tabs)
{
    b->n_rope_tabs = 0;
    if (b->disable & FUSE_PLANS)
        return; /* plan_decode_attention left every table pointer NULL */
    for (int i = 0; i < b->p->n_nodes; i++) {
        cu_node *cn = &b->nodes[i];
        for (int k = 0; k < 2 && cn->dec_on; k++) {
            const gp_cu_rope *r = k ? &cn->dec.rope_k : &cn->dec.rope_q;
            if (!r->on || r->n > ROPE_TAB_FLOATS)
                continue;
            int j = 0;
            for (; j < b->n_rope_tabs; j++) {
                const gp_cu_rope_tab *t = &b->rope_tabs[j];
                if (t->rope.theta == r->theta && t->rope.n == r->n &&
                    t->rope.orig_len == r->orig_len && t->rope.factor == r->factor &&
                    t->rope.low == r->low && t->rope.high == r->high && t->rope.ff == r->ff &&
                    t->rope.ff_nb == r->ff_nb && t->rope.mscale == r->mscale &&
                    t->pos.data == cn->dec.pos.data)
                    break;
            }
            if (j == GP_CU_ROPE_TABS)
                continue;
            if (j == b->n_rope_tabs) {
                b->rope_tabs[j].rope = *r;
                b->rope_tabs[j].pos = cn->dec.pos;
                b->rope_tabs[j].out = tabs + (size_t)j * ROPE_TAB_FLOATS;
                b->n_rope_tabs++;
            }
            *(k ? &cn->dec.tab_k : &cn->dec.tab_q) = b->rope_tabs[j].out;
        }
    }
}

/* ---- LoRA: a runtime adapter's branch merged into the product it belongs to ----
 * A branch y = t + (x A^T) B^T on a product t = x op(W) (+ an operand: its bias) costs two small
 * launches and breaks the product's fusions (x, a norm's output, gains a reader). Added to W
 * itself on the device, W + A^T B^T, it costs nothing per eval, for prompts too: the branch's
 * nodes never run, the add left in place (its output is t's bytes) and the epilogue planned
 * through them. Binding another adapter uploads W from the host again and merges it
 * (gp_cuda_be_lora_remerge). The sum is W's dtype rounded once, as merge mode's. */

/* Branches merged at creation, every session (cuda/cuda_backend.h). */
static atomic_llong lora_merged;

int64_t gp_cuda_lora_merged_count(void)
{
    return atomic_load(&lora_merged);
}

/* 1 when weight id is a contiguous 2-D tensor of fixed dims [d0, d1] and dtype dt that no view
 * reads. */
static int plain_weight(const gp_plan *p, int id, gp_dtype dt, int64_t d0, int64_t d1)
{
    const gp_plan_tensor *t = &p->tensors[id];
    if (t->kind != GP_TENSOR_WEIGHT || t->view_src >= 0 || t->size <= 0 || t->ndim != 2 ||
        t->dtype != dt || t->sym[0] >= 0 || t->sym[1] >= 0 || t->dims[0] != d0 ||
        t->dims[1] != d1 || t->stride[1] != 1 || t->stride[0] != d1)
        return 0;
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i].view_src == id)
            return 0;
    return 1;
}

/* 1 when tensors y and t are the same bytes seen the same way. */
static int same_bytes(const gp_plan *p, int y, int t)
{
    const gp_plan_tensor *a = &p->tensors[y], *c = &p->tensors[t];
    if (a->view_src >= 0 || c->view_src >= 0 || a->region != c->region || a->offset != c->offset ||
        a->size != c->size || a->dtype != c->dtype || a->ndim != c->ndim || a->size <= 0)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != c->dims[d] || a->sym[d] != c->sym[d] || a->stride[d] != c->stride[d])
            return 0;
    return 1;
}

/* The product node whose result t is (t = x op(W), or that plus an operand: its bias), reading x
 * first, t read only by the branch's add; else -1. */
static int lora_base(const cuda_be *b, const int *uses, int t, int x)
{
    const gp_plan *p = b->p;
    int m = p->tensors[t].producer;
    if (m >= 0 && p->nodes[m].op == GP_OP_ADD && p->nodes[m].n_inputs == 2) {
        const gp_plan_node *ad = &p->nodes[m];
        int k = p->tensors[ad->inputs[0]].producer >= 0 &&
                        p->nodes[p->tensors[ad->inputs[0]].producer].op == GP_OP_MATMUL
                    ? 0
                    : 1;
        int prod = ad->inputs[k];
        if (ad->inputs[1 - k] == prod || uses[prod] != 1)
            return -1;
        m = p->tensors[prod].producer;
    }
    if (m < 0 || uses[t] != 1)
        return -1;
    const gp_plan_node *mm = &p->nodes[m];
    if (mm->op != GP_OP_MATMUL || mm->inputs[0] != x || mm->attrs.i[GP_MATMUL_TA] ||
        b->nodes[m].lora)
        return -1;
    return m;
}

/* The branches: nodes u = matmul(x, A, tb=1), v = matmul(u, B, tb=1), y = t + v in a row after
 * the product t of x (lora_base), A [r, in] and B [out, r] weights of the product's dtype read
 * only there, W read only by the product, y in place of t; one device. Their nodes are marked
 * and their reads dropped from uses. */
static int plan_lora(cuda_be *b, int *uses, char *err, size_t err_len)
{
    const gp_plan *p = b->p;
    if ((b->disable & FUSE_LORA) || p->n_devices > 1)
        return 0;
    for (int ia = 1; ia + 2 < p->n_nodes; ia++) {
        const gp_plan_node *na = &p->nodes[ia], *nb = &p->nodes[ia + 1], *nc = &p->nodes[ia + 2];
        if (na->op != GP_OP_MATMUL || nb->op != GP_OP_MATMUL || nc->op != GP_OP_ADD ||
            nc->n_inputs != 2 || na->attrs.i[GP_MATMUL_TA] || !na->attrs.i[GP_MATMUL_TB] ||
            nb->attrs.i[GP_MATMUL_TA] || !nb->attrs.i[GP_MATMUL_TB] ||
            nb->inputs[0] != na->output || uses[na->output] != 1 || uses[nb->output] != 1 ||
            (nc->inputs[0] == nb->output) == (nc->inputs[1] == nb->output))
            continue;
        int t = nc->inputs[nc->inputs[0] == nb->output ? 1 : 0];
        int m = lora_base(b, uses, t, na->inputs[0]);
        if (m < 0 || !same_bytes(p, nc->output, t))
            continue;
        const gp_plan_node *mm = &p->nodes[m];
        int w = mm->inputs[1], a = na->inputs[1], bb = nb->inputs[1];
        int tb = mm->attrs.i[GP_MATMUL_TB] != 0;
        const gp_plan_tensor *wt = &p->tensors[w], *at = &p->tensors[a];
        if (wt->ndim != 2 || at->ndim != 2)
            continue;
        int64_t in = wt->dims[tb ? 1 : 0], out = wt->dims[tb ? 0 : 1], r = at->dims[0];
        gp_dtype dt = wt->dtype;
        if ((dt != GP_F32 && dt != GP_F16 && dt != GP_BF16) || uses[w] != 1 || uses[a] != 1 ||
            uses[bb] != 1 || !plain_weight(p, w, dt, wt->dims[0], wt->dims[1]) ||
            !plain_weight(p, a, dt, r, in) || !plain_weight(p, bb, dt, out, r))
            continue;
        cu_lora *l = realloc(b->lora, sizeof *l * (size_t)(b->n_lora + 1));
        if (!l) {
            snprintf(err, err_len, "cuda: out of memory");
            return -1;
        }
        b->lora = l;
        b->lora[b->n_lora++] = (cu_lora){w, a, bb, tb, in, out, r};
        for (int k = ia; k < ia + 3; k++) {
            b->nodes[k].lora = b->nodes[k].skip = 1;
            for (int q = 0; q < p->nodes[k].n_inputs; q++)
                uses[p->nodes[k].inputs[q]]--;
        }
        ia += 2;
    }
    atomic_fetch_add(&lora_merged, b->n_lora);
    return 0;
}

/* Merges branch l into its weight on b's stream (its weight's bytes as uploaded). */
static int lora_merge(cuda_be *b, const cu_lora *l)
{
    const gp_plan *p = b->p;
    return gp_cuda_lora_merge(&b->kc, tensor_addr(b, &p->tensors[l->w]),
                              tensor_addr(b, &p->tensors[l->a]), tensor_addr(b, &p->tensors[l->b]),
                              p->tensors[l->w].dtype, l->in, l->out, l->r, l->tb);
}

/* The ops without a CUDA kernel: moe (routed experts). Checked before anything is allocated, so
 * a plan holding one is refused with the node named, on hosts without a GPU too. */
int gp_cuda_be_check_ops(const gp_plan *p, char *err, size_t err_len)
{
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        if (nd->op != GP_OP_MOE)
            continue;
        snprintf(err, err_len,
                 "cuda: node %d (moe -> %s, line %d): the CUDA backend has no kernel for moe "
                 "(routed experts) yet; run this plan on the CPU backend",
                 i, p->tensors[nd->output].name, nd->line);
        return -1;
    }
    return 0;
}

/* Every fusion, in the order they depend on each other (cuda_be.h). */
int gp_cuda_be_plan(cuda_be *b, char *err, size_t err_len)
{
    const gp_plan *p = b->p;
    /* Readers of each tensor; conts that need no copy; then every node's descriptors. */
    int *uses = calloc((size_t)p->n_tensors + 1, sizeof *uses);
    b->alias = calloc((size_t)p->n_tensors + 1, sizeof *b->alias);
    if (!uses || !b->alias) {
        free(uses);
        snprintf(err, err_len, "cuda: out of memory");
        return -1;
    }
    for (int i = 0; i < p->n_nodes; i++)
        for (int j = 0; j < p->nodes[i].n_inputs; j++)
            uses[p->nodes[i].inputs[j]]++;
    for (int i = 0; i < p->n_nodes; i++) {
        b->nodes[i].pair = -1;
        b->nodes[i].epi_end = i;
    }
    /* The LoRA branches first: the other fusions see the products without them. */
    b->kc.stream = b->stream;
    if (plan_lora(b, uses, err, err_len)) {
        free(uses);
        return -1;
    }
    for (int k = 0; k < b->n_lora; k++)
        if (lora_merge(b, &b->lora[k])) {
            snprintf(err, err_len, "cuda: %s", b->kc.err);
            free(uses);
            return -1;
        }
    if (!(b->disable & FUSE_PLANS))
        plan_cont_elision(b, uses);
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        tensor_of(b, nd->output, &b->nodes[i].out);
        for (int j = 0; j < nd->n_inputs; j++)
            tensor_of(b, nd->inputs[j], &b->nodes[i].in[j]);
        if (nd->workspace >= 0) {
            const gp_plan_tensor *w = &p->tensors[nd->workspace];
            b->nodes[i].ws = tensor_addr(b, w);
            b->nodes[i].ws_size = b->nodes[i].ws ? (size_t)w->size : 0;
        }
    }

    if (!(b->disable & FUSE_PLANS)) {
        plan_epilogues(b, uses);
        plan_ar_norms(b);
        plan_prenorms(b, uses);
    }
    if (!(b->disable & FUSE_FOLD) && plan_folds(b, err, err_len)) {
        free(uses);
        return -1;
    }
    if (!(b->disable & FUSE_PLANS)) {
        plan_store_pairs(b);
        plan_matvec_groups(b, uses);
    }
    if (!(b->disable & FUSE_ATTN))
        plan_decode_attention(b, uses);
    if (!(b->disable & FUSE_PLANS))
        plan_embed_add(b, uses);
    plan_argmax_copy(b);
    plan_rope_tables(b, (float *)((char *)b->dparam + param_tabs_at()));
    plan_accumulate(b, uses);
    plan_head_pos(b);
    plan_trig(b);
    free(uses);
    return 0;
}

/* After adapter slots were uploaded again (cuda_be.h). */
int gp_cuda_be_lora_remerge(cuda_be *b, const int *ids, int n, char *err, size_t err_len)
{
    const gp_plan *p = b->p;
    int merged = 0;
    for (int k = 0; k < b->n_lora; k++) {
        const cu_lora *l = &b->lora[k];
        int hit = 0;
        for (int q = 0; q < n && !hit; q++)
            hit = ids[q] == l->w || ids[q] == l->a || ids[q] == l->b;
        if (!hit)
            continue;
        const gp_plan_tensor *w = &p->tensors[l->w];
        size_t bytes = (size_t)(numel_at(w, NULL) * (int64_t)gp_dtype_size(w->dtype));
        CU_TRY(cudaMemcpyAsync(tensor_addr(b, w), b->weight_data[l->w], bytes,
                               cudaMemcpyHostToDevice, b->stream));
        if (lora_merge(b, l))
            goto kernel_failed;
        merged++;
    }
    if (merged && b->dfold && fold_all(b, b->dfold) < 0)
        goto kernel_failed;
    CU_TRY(cudaStreamSynchronize(b->stream));
    return 0;
kernel_failed:
    snprintf(err, err_len, "cuda: %s", b->kc.err);
fail:
    return -1;
}
