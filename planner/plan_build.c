/* IR -> gp_plan: liveness, in-place reuse, op workspaces, extras slots, the fixed regions and the
 * arena's offsets (gp_assign, always verified by the independent gp_assign_check). */
#include "planner/planner.h"
#include "cpu/moe.h"   /* gp_moe_ws (inline; no link to gp_cpu) */
#include "cpu/quant.h" /* gp_quant_matmul_ws_bytes (inline; no link to gp_cpu) */

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t round_up(int64_t x, int64_t a)
{
    return (x + a - 1) / a * a;
}

static char *dup_str(const char *s)
{
    if (!s)
        s = "";
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

int64_t gp_op_workspace_bytes(const gp_node *node, const gp_graph *g, gp_backend backend)
{
    int64_t t = 0, h = 0, d = 0, s = 0;
    if (node->op == GP_OP_MATMUL && backend == GP_BACKEND_CPU && node->n_inputs >= 2) {
        /* quantized weights: the activations' bf16 halves for AMX prompts (plan/plan.h) */
        const gp_tensor *x = &g->tensors[node->inputs[0]], *w = &g->tensors[node->inputs[1]];
        if (gp_dtype_is_quant(w->dtype) && x->ndim == 2)
            return gp_quant_matmul_ws_bytes(x->shape[0].size, x->shape[1].size);
    }
    if (node->op == GP_OP_MOE) { /* x [T, H], router [E, H], gate [E, F, H]: the CPU's only */
        const gp_tensor *x = &g->tensors[node->inputs[0]], *r = &g->tensors[node->inputs[1]];
        const gp_tensor *gt = &g->tensors[node->inputs[2]];
        if (backend != GP_BACKEND_CPU)
            return 0;
        return gp_moe_ws(x->shape[0].size, x->shape[1].size, r->shape[0].size,
                         node->attrs.i[GP_MOE_TOP_K], gt->shape[1].size,
                         gp_dtype_is_quant(gt->dtype))
            .total;
    }
    if (node->op == GP_OP_ATTENTION) {
        const gp_tensor *q = &g->tensors[node->inputs[0]]; /* [T, H, D] */
        const gp_tensor *k = &g->tensors[node->inputs[1]]; /* [S, G, D] */
        if (q->ndim != 3 || k->ndim != 3)
            return 0;
        t = q->shape[0].size, h = q->shape[1].size, d = q->shape[2].size, s = k->shape[0].size;
        if (node->n_inputs == 6) /* a ragged batch: a query scores its sequence's positions */
            s = g->tensors[node->inputs[5]].shape[1].size * node->attrs.i[GP_ATTENTION_BLOCK];
    }
    return gp_workspace_bytes(node->op, backend, t, h, d, s);
}

/* The largest workspace over the backends in `mask`, so one plan serves all of them. */
static int64_t workspace_max(const gp_node *node, const gp_graph *g, unsigned mask)
{
    int64_t m = 0;
    for (int b = 0; b < GP_BACKEND_COUNT; b++) {
        if (!(mask & GP_BACKEND_BIT(b)))
            continue;
        int64_t w = gp_op_workspace_bytes(node, g, (gp_backend)b);
        if (w > m)
            m = w;
    }
    return m;
}

/* Union-find over tensors that share one arena buffer through in-place ops. */
static int find(int *parent, int x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

static int same_dims(const gp_tensor *a, const gp_tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d].size != b->shape[d].size || a->shape[d].sym != b->shape[d].sym)
            return 0;
    return 1;
}

typedef struct {
    const gp_graph *g;
    gp_plan *p;
    gp_liveness *lv;
    int *parent;     /* [n_tensors of the plan] in-place groups */
    int *group_last; /* [n_tensors of the plan] for a group's root: its last step */
    unsigned backends; /* GP_BACKEND_BIT()s the plan is built for */
} builder;

/*
 * Node s writes into input j's storage when (docs/plan-format.md, "In-place"):
 * the output is a plain intermediate; input j's root storage is an intermediate whose last use
 * (any tensor sharing it, through views or earlier in-place ops) is step s; input j is contiguous
 * at offset 0 of that storage with the output's exact shape (symbolic dims included), dtype size and
 * byte size; and no other input of the node reads the same storage.
 */
static int inplace_ok(const builder *b, int s, int *input_out)
{
    const gp_graph *g = b->g;
    const gp_node *nd = &g->nodes[s];
    const gp_op_info *info = gp_op_get(nd->op);
    int j = info ? info->inplace : -1;
    if (j < 0 || j >= nd->n_inputs)
        return 0;
    const gp_tensor *y = &g->tensors[nd->output];
    int x = nd->inputs[j];
    const gp_tensor *xt = &g->tensors[x];
    int r = b->lv->root[x];
    const gp_tensor *rt = &g->tensors[r];
    if (y->kind != GP_TENSOR_INTERMEDIATE || y->view_src >= 0 || rt->kind != GP_TENSOR_INTERMEDIATE)
        return 0;
    int grp = find(b->parent, r);
    if (b->group_last[grp] != s)
        return 0; /* read later, directly or through a view */
    if (b->lv->root_offset[x] != 0 || !gp_tensor_is_contiguous(xt) || !same_dims(xt, y) ||
        gp_dtype_size(xt->dtype) != gp_dtype_size(y->dtype) ||
        b->p->tensors[r].size != b->p->tensors[nd->output].size ||
        b->p->tensors[x].size != b->p->tensors[nd->output].size)
        return 0;
    for (int k = 0; k < nd->n_inputs; k++)
        if (k != j && find(b->parent, b->lv->root[nd->inputs[k]]) == grp)
            return 0;
    *input_out = x;
    return 1;
}

/* 1 when node s is a matmul of the output of the layer or rms norm right before it (a backend may
 * compute such a norm inside the matmul's kernel). */
static int normed_matmul(const gp_graph *g, int s)
{
    return s > 0 && g->nodes[s].op == GP_OP_MATMUL &&
           (g->nodes[s - 1].op == GP_OP_LAYER_NORM || g->nodes[s - 1].op == GP_OP_RMS_NORM) &&
           g->nodes[s].inputs[0] == g->nodes[s - 1].output;
}

/* 1 when a backend may run node op inside the one-token attention it feeds (CUDA's attnfuse: the
 * ropes, q's copy and the K/V cache stores, and the views between them). */
static int absorbable(gp_op op)
{
    return gp_op_get(op)->is_view || op == GP_OP_ROPE || op == GP_OP_CONT || op == GP_OP_STORE;
}

/* The first step of the nodes feeding tensor t through absorbable nodes (at most `depth` deep),
 * or `first` when there is none earlier. */
static int absorbed_from(const gp_graph *g, int t, int first, int depth)
{
    int s = g->tensors[t].producer;
    if (s < 0 || depth == 0 || !absorbable(g->nodes[s].op))
        return first;
    if (s < first)
        first = s;
    for (int i = 0; i < g->nodes[s].n_inputs; i++)
        first = absorbed_from(g, g->nodes[s].inputs[i], first, depth - 1);
    return first;
}

/* The first step a backend may run inside attention node a's one-token launch: a's, or that of
 * the nodes feeding it through absorbable nodes (absorbed_from). */
static int attention_first(const gp_graph *g, int a)
{
    int first = a;
    for (int i = 0; i < g->nodes[a].n_inputs; i++)
        first = absorbed_from(g, g->nodes[a].inputs[i], first, 8);
    return first;
}

/* 1 when tensor t's bytes are a weight's (t a weight or a view of one). */
static int weight_bytes(const gp_graph *g, int t)
{
    while (g->tensors[t].view_src >= 0)
        t = g->tensors[t].view_src;
    return g->tensors[t].kind == GP_TENSOR_WEIGHT;
}

/* 1 when nodes a, a + 1 and a + 2 are a LoRA branch y = t + (x A^T) B^T on a product t:
 * u = matmul(x, A, tb=1), v = matmul(u, B, tb=1), then an add of v, A and B weights. */
static int lora_branch_at(const gp_graph *g, int a)
{
    if (a < 0 || a + 2 >= g->n_nodes)
        return 0;
    const gp_node *u = &g->nodes[a], *v = &g->nodes[a + 1], *y = &g->nodes[a + 2];
    return u->op == GP_OP_MATMUL && v->op == GP_OP_MATMUL && y->op == GP_OP_ADD &&
           y->n_inputs == 2 && !u->attrs.i[GP_MATMUL_TA] && u->attrs.i[GP_MATMUL_TB] &&
           !v->attrs.i[GP_MATMUL_TA] && v->attrs.i[GP_MATMUL_TB] && v->inputs[0] == u->output &&
           weight_bytes(g, u->inputs[1]) && weight_bytes(g, v->inputs[1]) &&
           (y->inputs[0] == v->output) != (y->inputs[1] == v->output);
}

/*
 * The first step of a normed matmul's output on CUDA (docs/plan-format.md, "Accumulated
 * outputs"): the step of the matmul before it in the schedule, or of its norm when that one is
 * normed too. That matmul's kernel may zero the output's bytes, so that the splits of a one-row
 * product add into them; none earlier: the producer's step. The two matmuls of a LoRA branch
 * (lora_branch_at) do not count: a backend may merge the branch into its product's weights
 * (CUDA's "lora"), so that they never launch and the product before them zeroes the output.
 * Starting earlier is safe where they do launch: the bytes are then merely kept longer.
 */
static int accumulated_from(const gp_graph *g, int s)
{
    int m = s - 2;
    while (m >= 0 && (g->nodes[m].op != GP_OP_MATMUL || lora_branch_at(g, m) ||
                      lora_branch_at(g, m - 1)))
        m--;
    if (m < 0)
        return s;
    return normed_matmul(g, m) ? m - 1 : m;
}

/* Copies the graph's tensors into the plan (shapes, kinds, lifetimes, sizes); offsets come later. */
static int fill_tensors(builder *b)
{
    const gp_graph *g = b->g;
    for (int i = 0; i < g->n_tensors; i++) {
        const gp_tensor *src = &g->tensors[i];
        gp_plan_tensor *t = &b->p->tensors[i];
        t->name = dup_str(src->name);
        t->weight_name = src->weight_name ? dup_str(src->weight_name) : NULL;
        if (!t->name || (src->weight_name && !t->weight_name))
            return -1;
        t->kind = src->kind;
        t->dtype = src->dtype;
        t->ndim = src->ndim;
        t->split = src->split;
        for (int d = 0; d < GP_MAX_DIMS; d++) {
            int used = d < src->ndim;
            t->dims[d] = used ? src->shape[d].size : 1;
            t->sym[d] = used ? src->shape[d].sym : -1;
            t->stride[d] = used ? src->stride[d] : 0;
        }
        t->view_src = src->view_src;
        t->view_offset = src->view_src >= 0 ? src->view_offset : 0;
        t->inplace_of = -1;
        t->producer = src->producer;
        t->first = b->lv->first[i];
        int cuda = (b->backends & GP_BACKEND_BIT(GP_BACKEND_CUDA)) && src->producer >= 0 &&
                   src->kind == GP_TENSOR_INTERMEDIATE && src->view_src < 0;
        if (cuda && normed_matmul(g, src->producer))
            t->first = accumulated_from(g, src->producer);
        else if (cuda && g->nodes[src->producer].op == GP_OP_ATTENTION)
            t->first = attention_first(g, src->producer); /* written in a launch reading those */
        /* A root keeps its bytes until the last read of anything on its storage. */
        t->last = src->view_src >= 0 ? b->lv->last[i] : b->lv->storage_last[i];
        t->size = gp_plan_tensor_span(t);
        t->line = src->loc.line;
        t->col = src->loc.col;
    }
    return 0;
}

/*
 * One arena tensor per node that needs a workspace, named ws.<output>, live at that step only; an
 * attention's from the first node a backend may run inside it (absorbed_from), since the fused
 * kernel reads those nodes' sources while it uses its workspace.
 */
static int add_workspaces(builder *b, unsigned backends)
{
    const gp_graph *g = b->g;
    int id = g->n_tensors;
    for (int s = 0; s < g->n_nodes; s++) {
        gp_plan_node *pn = &b->p->nodes[s];
        pn->workspace = -1;
        int64_t bytes = workspace_max(&g->nodes[s], g, backends);
        if (bytes <= 0)
            continue;
        gp_plan_tensor *t = &b->p->tensors[id];
        const char *out_name = g->tensors[g->nodes[s].output].name;
        size_t n = strlen(out_name) + 4;
        t->name = malloc(n);
        if (!t->name)
            return -1;
        snprintf(t->name, n, "ws.%s", out_name);
        t->kind = GP_TENSOR_INTERMEDIATE;
        t->dtype = GP_F32;
        t->ndim = 1;
        t->dims[0] = (bytes + 3) / 4;
        t->stride[0] = 1;
        for (int d = 0; d < GP_MAX_DIMS; d++) {
            t->sym[d] = -1;
            if (d > 0) {
                t->dims[d] = 1;
                t->stride[d] = 0;
            }
        }
        t->view_src = -1;
        t->inplace_of = -1;
        t->producer = s;
        t->first = t->last = s;
        if (g->nodes[s].op == GP_OP_ATTENTION)
            t->first = attention_first(g, s);
        t->size = gp_plan_tensor_span(t);
        t->line = g->nodes[s].loc.line;
        t->col = g->nodes[s].loc.col;
        pn->workspace = id++;
    }
    return 0;
}

static void fill_nodes(builder *b)
{
    const gp_graph *g = b->g;
    for (int s = 0; s < g->n_nodes; s++) {
        const gp_node *src = &g->nodes[s];
        gp_plan_node *pn = &b->p->nodes[s];
        pn->op = src->op;
        pn->n_inputs = src->n_inputs;
        for (int k = 0; k < GP_MAX_INPUTS; k++)
            pn->inputs[k] = k < src->n_inputs ? src->inputs[k] : -1;
        pn->output = src->output;
        pn->attrs = src->attrs;
        pn->line = src->loc.line;
        pn->col = src->loc.col;
    }
}

static void decide_inplace(builder *b)
{
    const gp_graph *g = b->g;
    for (int s = 0; s < g->n_nodes; s++) {
        int x;
        if (!inplace_ok(b, s, &x))
            continue;
        int y = g->nodes[s].output;
        int grp = find(b->parent, b->lv->root[x]);
        b->parent[y] = grp;
        if (b->group_last[grp] < b->group_last[y])
            b->group_last[grp] = b->group_last[y];
        b->p->tensors[y].inplace_of = x;
    }
}

/* The io region's order: the inputs first, then the outputs, smallest first (ties in id order).
 * Each direction's tensors are then adjacent, and a small output's rows lie next to the large
 * one's, so a backend can move each direction in one copy (cuda/cuda_backend.c, "Copies"). */
static int io_before(const gp_plan_tensor *a, int ia, const gp_plan_tensor *b, int ib)
{
    int oa = a->kind == GP_TENSOR_OUTPUT, ob = b->kind == GP_TENSOR_OUTPUT;
    if (oa != ob)
        return ob;
    if (oa && a->size != b->size)
        return a->size < b->size;
    return ia < ib;
}

/* Weights, state and io: packed one after another (all live for the whole session or eval);
 * weights and state in id order, io in io_before's. */
static int place_fixed_regions(builder *b, int64_t align, gp_diag *d)
{
    gp_plan *p = b->p;
    int n_io = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        gp_plan_tensor *t = &p->tensors[i];
        if (t->view_src >= 0)
            continue;
        switch (t->kind) {
        case GP_TENSOR_INPUT:
        case GP_TENSOR_OUTPUT: t->region = GP_REGION_IO; break;
        case GP_TENSOR_WEIGHT: t->region = GP_REGION_WEIGHTS; break;
        case GP_TENSOR_STATE: t->region = GP_REGION_STATE; break;
        case GP_TENSOR_INTERMEDIATE: t->region = GP_REGION_ARENA; continue;
        default: {
            gp_loc loc = {0};
            gp_diag_error(d, loc, "plan: tensor %s has kind %s and no view source", t->name,
                          gp_tensor_kind_name(t->kind));
            return -1;
        }
        }
        if (t->region == GP_REGION_IO) {
            n_io++;
            continue;
        }
        gp_plan_region *r = &p->regions[t->region];
        t->offset = r->size;
        r->size += round_up(t->size, align);
    }
    int *io = malloc((size_t)(n_io ? n_io : 1) * sizeof *io);
    if (!io) {
        gp_loc nowhere = {0};
        gp_diag_error(d, nowhere, "plan: out of memory");
        return -1;
    }
    n_io = 0;
    for (int i = 0; i < p->n_tensors; i++) /* insertion sort: a graph has a few io tensors */
        if (p->tensors[i].view_src < 0 && p->tensors[i].region == GP_REGION_IO) {
            int k = n_io++;
            for (; k > 0 && io_before(&p->tensors[i], i, &p->tensors[io[k - 1]], io[k - 1]); k--)
                io[k] = io[k - 1];
            io[k] = i;
        }
    gp_plan_region *r = &p->regions[GP_REGION_IO];
    for (int k = 0; k < n_io; k++) {
        gp_plan_tensor *t = &p->tensors[io[k]];
        t->offset = r->size;
        r->size += round_up(t->size, align);
    }
    free(io);
    return 0;
}

/* The arena: one gp_buffer per in-place group, in units of the alignment so that every offset the
 * assigner picks is aligned. */
static int place_arena(builder *b, const gp_plan_opts *o, int64_t align, gp_diag *d)
{
    gp_plan *p = b->p;
    gp_loc nowhere = {0};
    int n = p->n_tensors;
    int *buf_of = malloc((size_t)(n ? n : 1) * sizeof *buf_of);       /* [n] group root -> buffer */
    gp_buffer *bufs = calloc((size_t)(n ? n : 1), sizeof *bufs);      /* [n_bufs] */
    if (!buf_of || !bufs) {
        free(buf_of);
        free(bufs);
        gp_diag_error(d, nowhere, "plan: out of memory");
        return -1;
    }
    size_t n_bufs = 0;
    for (int i = 0; i < n; i++) {
        gp_plan_tensor *t = &p->tensors[i];
        buf_of[i] = -1;
        if (t->region != GP_REGION_ARENA || t->view_src >= 0)
            continue;
        p->naive_bytes += round_up(t->size, align);
        if (find(b->parent, i) != i)
            continue;
        gp_buffer *bf = &bufs[n_bufs];
        bf->lower = t->first;
        bf->upper = (int64_t)b->group_last[i] + 1;
        bf->size = round_up(t->size, align) / align;
        buf_of[i] = (int)n_bufs++;
    }
    int rc = 0;
    gp_assign_result res;
    memset(&res, 0, sizeof res);
    if (n_bufs > 0) {
        gp_assign_opts ao = {o->strategy, o->time_limit, 0};
        gp_assign_status st = gp_assign(bufs, n_bufs, &ao, &res);
        char why[256] = "";
        if (st != GP_ASSIGN_OK) {
            gp_diag_error(d, nowhere, "plan: offset assignment failed for %zu arena buffers "
                          "(status %d)", n_bufs, (int)st);
            rc = -1;
        } else if (gp_assign_check(bufs, n_bufs, res.peak, why, sizeof why) != 0) {
            gp_diag_error(d, nowhere, "plan: BUG: the checker found overlapping arena buffers "
                          "after %s: %s", res.method, why);
            rc = -1;
        }
        p->lower_bound = gp_assign_lower_bound(bufs, n_bufs) * align;
        p->regions[GP_REGION_ARENA].size = res.peak * align;
    }
    p->method = dup_str(n_bufs > 0 ? res.method : "none");
    if (!p->method && rc == 0) {
        gp_diag_error(d, nowhere, "plan: out of memory");
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < n; i++) {
        gp_plan_tensor *t = &p->tensors[i];
        if (t->region != GP_REGION_ARENA || t->view_src >= 0)
            continue;
        t->offset = bufs[buf_of[find(b->parent, i)]].offset * align;
    }
    free(buf_of);
    free(bufs);
    return rc;
}

/* Views sit in their root's region at the root's offset plus their window. */
static void place_views(builder *b)
{
    gp_plan *p = b->p;
    for (int i = 0; i < b->g->n_tensors; i++) {
        gp_plan_tensor *t = &p->tensors[i];
        if (t->view_src < 0)
            continue;
        const gp_plan_tensor *root = &p->tensors[b->lv->root[i]];
        t->region = root->region;
        t->offset = root->offset + b->lv->root_offset[i];
    }
}

static const char *graph_source(const gp_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].loc.file)
            return g->nodes[i].loc.file;
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].loc.file)
            return g->tensors[i].loc.file;
    return "";
}

static int check_opts(const gp_plan_opts *o, gp_diag *d)
{
    gp_loc nowhere = {0};
    if (o->alignment < 1 || (o->alignment & (o->alignment - 1)) != 0 ||
        o->alignment > GP_PLAN_MAX_ALIGNMENT) {
        gp_diag_error(d, nowhere, "plan: alignment %lld is not a power of two in [1, %lld]",
                      (long long)o->alignment, (long long)GP_PLAN_MAX_ALIGNMENT);
        return -1;
    }
    if (o->n_devices < 1 || o->n_devices > GP_PLAN_MAX_DEVICES) {
        gp_diag_error(d, nowhere, "plan: %d devices, expected 1..%d", o->n_devices,
                      GP_PLAN_MAX_DEVICES);
        return -1;
    }
    if (o->backends & ~GP_BACKENDS_ALL) {
        gp_diag_error(d, nowhere, "plan: unknown backend mask 0x%x", o->backends);
        return -1;
    }
    if ((int)o->strategy < GP_STRATEGY_AUTO || o->strategy > GP_STRATEGY_EXACT) {
        gp_diag_error(d, nowhere, "plan: unknown strategy %d", (int)o->strategy);
        return -1;
    }
    return 0;
}

int gp_plan_build(const gp_graph *g, const gp_plan_opts *opts, gp_plan **out, gp_diag *d)
{
    double t0 = now_seconds();
    gp_loc nowhere = {0};
    *out = NULL;
    gp_plan_opts o = {0};
    if (opts)
        o = *opts;
    if (o.alignment == 0)
        o.alignment = GP_PLAN_DEFAULT_ALIGNMENT;
    if (o.n_devices == 0)
        o.n_devices = 1;
    if (o.backends == 0)
        o.backends = GP_BACKENDS_ALL;
    if (check_opts(&o, d))
        return -1;

    int n_ws = 0;
    for (int s = 0; s < g->n_nodes; s++)
        n_ws += workspace_max(&g->nodes[s], g, o.backends) > 0;
    if (g->n_tensors > INT32_MAX / 2 - n_ws) {
        gp_diag_error(d, nowhere, "plan: %d tensors is too many", g->n_tensors);
        return -1;
    }
    int n = g->n_tensors + n_ws;
    int64_t rec = GP_EXTRAS_RECORD_BYTES(o.n_devices);
    char why[256];
    gp_plan *p = NULL;
    builder b = {.g = g, .backends = o.backends};
    b.lv = gp_liveness_new(g, d);
    if (!b.lv)
        return -1;
    b.p = gp_plan_alloc(g->n_syms, n, g->n_nodes);
    b.parent = malloc((size_t)(n ? n : 1) * sizeof *b.parent);
    b.group_last = malloc((size_t)(n ? n : 1) * sizeof *b.group_last);
    int rc = -1;
    if (!b.p || !b.parent || !b.group_last)
        goto oom;
    p = b.p;
    p->graph_name = dup_str(g->name);
    p->source = dup_str(graph_source(g));
    if (!p->graph_name || !p->source)
        goto oom;
    p->n_devices = o.n_devices;
    p->strategy = (int)o.strategy;
    for (int s = 0; s < g->n_syms; s++) {
        p->syms[s].name = dup_str(g->syms[s].name);
        p->syms[s].bound = g->syms[s].bound;
        if (!p->syms[s].name)
            goto oom;
    }
    if (fill_tensors(&b) || add_workspaces(&b, o.backends))
        goto oom;
    fill_nodes(&b);
    for (int i = 0; i < n; i++) {
        b.parent[i] = i;
        b.group_last[i] = p->tensors[i].last;
    }
    if (!o.no_inplace)
        decide_inplace(&b);
    for (int r = 0; r < GP_REGION_COUNT; r++)
        p->regions[r].alignment = o.alignment;
    if (place_fixed_regions(&b, o.alignment, d) || place_arena(&b, &o, o.alignment, d))
        goto done;
    place_views(&b);
    /* Extras: record i belongs to tensor i; the block is fixed by the tensor count. */
    for (int i = 0; i < n; i++)
        p->tensors[i].extras_offset = (int64_t)i * rec;
    p->regions[GP_REGION_EXTRAS].alignment = GP_EXTRAS_ALIGNMENT;
    p->regions[GP_REGION_EXTRAS].size = round_up((int64_t)n * rec, GP_EXTRAS_ALIGNMENT);
    p->plan_seconds = now_seconds() - t0;
    if (gp_plan_validate(p, why, sizeof why)) {
        gp_diag_error(d, nowhere, "plan: BUG: the built plan is invalid: %s", why);
        goto done;
    }
    *out = p;
    b.p = NULL;
    rc = 0;
    goto done;
oom:
    gp_diag_error(d, nowhere, "plan: out of memory for %d tensors", n);
done:
    gp_plan_free(b.p);
    gp_liveness_free(b.lv);
    free(b.parent);
    free(b.group_last);
    return rc;
}
