/* The CUDA backend's evals: one eval's launches enqueued on the session's stream, node by node
 * with the fusions planned at creation (run eagerly, or captured into a graph by cuda_graphs.c),
 * and gp_cuda_be_eval, which replays a graph or enqueues. */
#include <stdatomic.h>
#include <time.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_be.h"

/* Time inside the backend's evals, process-wide (cuda/cuda_backend.h). */
static double stat_seconds;
static int64_t stat_evals;

void gp_cuda_eval_stats(double *seconds, int64_t *evals)
{
    *seconds = stat_seconds;
    *evals = stat_evals;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* An all_reduce node over the ranks (the P2P kernel or NCCL), on the planned (contiguous, checked
 * at creation) buffers; rows a padded launch adds are summed too, and nothing reads them.
 * all_reduce(x, y): device 0 adds y to its term first (in out), unless the matmul before it
 * already did (added: its epilogue wrote x + y into out). With a norm planned after it
 * (plan_ar_norms), *norm_done says whether the kernel computed it. */
static int all_reduce(cuda_be *b, const cu_node *cn, const gp_plan_node *nd, int added,
                      int *norm_done)
{
    const void *src = cn->in[0].data;
    if (nd->n_inputs > 1 && b->rank == 0 && !added) {
        if (gp_cuda_compute(&b->kc, GP_OP_ADD, &nd->attrs, &cn->out, cn->in, 2, NULL, 0))
            return -1;
        src = cn->out.data;
    } else if (added) {
        src = cn->out.data;
    }
    /* Something launched since the last all-reduce: this one may read its epochs early. */
    int not_after = b->kc.launches != b->ar_at;
    b->ar_at = ++b->kc.launches;
    return gp_cuda_comm_all_reduce_norm(b->comm, b->rank, src, cn->out.data,
                                        launch_numel(b, &cn->out), cn->out.dtype, b->stream,
                                        cn->has_arnorm ? &cn->arnorm : NULL, not_after, norm_done,
                                        b->kc.err, sizeof b->kc.err);
}

/* attnfuse: node cn is an attention whose fused launch serves this launch (one token). */
static int decode_now(const cuda_be *b, const cu_node *cn)
{
    return cn->dec_on && (cn->dec_tsym < 0 || b->launch[cn->dec_tsym] == 1);
}

/* 1 when this launch runs a one-token attention that reads the rope tables. */
static int rope_tabs_now(const cuda_be *b)
{
    for (int i = 0; i < b->p->n_nodes; i++) {
        const cu_node *cn = &b->nodes[i];
        if (decode_now(b, cn) && (cn->dec.tab_q || cn->dec.tab_k))
            return 1;
    }
    return 0;
}

/* Matmul node m (its epilogue fused when it serves; pre: the norm before it, as
 * gp_cuda_matmul_fused takes it) with the requests of accumulated outputs around it
 * (plan_accumulate): it zeroes a later matmul's output, adds into its own zeroed output, or reads
 * its x as gelu(x). 0, or -1 with the context's error. */
static int matmul_node(cuda_be *b, int m, const gp_cu_prenorm *pre, int *fused, int *pre_used)
{
    cu_node *mn = &b->nodes[m];
    gp_cu_ctx *c = &b->kc;
    if (mn->zero_for >= 0) {
        const gp_cu_tensor *t = &b->nodes[mn->zero_for].epi.out;
        c->zero_p = (float *)t->data;
        c->zero_n = t->ne[t->ndim - 1]; /* one row: the matvec kernels take it with one row */
    }
    c->trig_early = mn->trig;
    c->acc = mn->acc && mn->zeroed;
    c->acc_gelu = c->acc && mn->gelu_to >= 0;
    c->x_gelu = b->gelu_for == m;
    int r = gp_cuda_matmul_fused(c, &b->p->nodes[m].attrs, &mn->out, mn->in, mn->ws,
                                 mn->ws_size, &mn->epi, pre, fused, pre_used);
    if (mn->zero_for >= 0)
        b->nodes[mn->zero_for].zeroed = !r && c->zero_done;
    if (!r && c->x_gelu && !pre) {
        snprintf(c->err, sizeof c->err, "matmul: gelu(x) not applied");
        r = -1;
    }
    if (c->x_gelu == 0 && b->gelu_for == m)
        b->gelu_for = -1;
    if (c->acc_gelu_done)
        b->gelu_for = mn->gelu_to;
    c->zero_p = NULL;
    c->zero_n = 0;
    c->trig_early = 0;
    c->acc = c->acc_gelu = c->x_gelu = 0;
    c->zero_done = c->acc_done = c->acc_gelu_done = 0;
    return r;
}

/* Group g, whose first matmul is node first, in one launch when it serves (one row): *ran is 1,
 * *i (the node being enqueued, whose event is recorded) becomes the last node the launch ran, and
 * the events of the nodes after it up to that one are recorded; else *ran is 0. 0, or -1. */
static int run_group(cuda_be *b, const gp_cu_group *g, int first, int *i, int *ran)
{
    if (gp_cuda_matvec_group(&b->kc, g, ran))
        return -1;
    if (!*ran)
        return 0;
    int last = first + g->n - 1 + g->glu;
    for (int k = *i + 1; b->ev && k <= last; k++)
        cudaEventRecord(b->ev[k], b->stream);
    *i = last;
    return 0;
}

/* Kernels and library calls enqueued by evals, every session (cuda/cuda_backend.h). */
static atomic_llong eval_launches;

int64_t gp_cuda_launch_count(void)
{
    return atomic_load(&eval_launches);
}

static int enqueue_nodes(cuda_be *b, int long_ctx, char *err, size_t err_len);

/* One eval at launch sizes b->launch onto b's stream (cuda_be.h), its launches counted. */
int gp_cuda_be_enqueue(cuda_be *b, int long_ctx, char *err, size_t err_len)
{
    int64_t l0 = b->kc.launches;
    int r = enqueue_nodes(b, long_ctx, err, err_len);
    atomic_fetch_add(&eval_launches, b->kc.launches - l0);
    return r;
}

/* The nodes of one eval, with the fusions planned at creation. */
static int enqueue_nodes(cuda_be *b, int long_ctx, char *err, size_t err_len)
{
    const gp_plan *p = b->p;
    unsigned char *hio = b->io_registered ? b->host_io : b->pin_io;
    b->kc.att_head = !(b->disable & FUSE_ATTHEAD) && !long_ctx;
    if (gp_cuda_be_copy_inputs(b, hio, err, err_len))
        return -1;
    b->argmax_now = gp_cuda_be_argmax_direct(b);
    if (b->n_rope_tabs && rope_tabs_now(b) &&
        gp_cuda_rope_tables(&b->kc, b->rope_tabs, b->n_rope_tabs)) {
        snprintf(err, err_len, "cuda: %s", b->kc.err);
        return -1;
    }
    b->gelu_for = -1;
    for (int i = 0; i < p->n_nodes; i++)
        b->nodes[i].zeroed = 0;
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        cu_node *cn = &b->nodes[i];
        int r = 0, fused = 0, pre_used = 0, norm_done = 0;
        if (b->ev)
            cudaEventRecord(b->ev[i], b->stream);
        if (cn->dec_att && decode_now(b, &b->nodes[cn->dec_att - 1]))
            continue; /* attnfuse: that attention's one-token launch runs it */
        if (cn->skip)
            continue;
        if (cn->prenorm) {
            /* The matmul after this norm computes it when its matrix-vector kernel serves. */
            cu_node *mn = &b->nodes[i + 1];
            const gp_plan_node *mm = &p->nodes[i + 1];
            r = matmul_node(b, i + 1, &cn->pre, &fused, &pre_used);
            if (!r && pre_used) {
                if (b->ev)
                    cudaEventRecord(b->ev[i + 1], b->stream);
                i++; /* now at the matmul, which ran */
                nd = mm;
                cn = mn;
                goto ran;
            }
        }
        if (cn->grpnorm) {
            /* The group after this rms_norm computes it when the group's launch serves. */
            gp_cu_group g = b->nodes[i + 1].grp;
            int ran = 0;
            g.has_norm = 1;
            g.norm = cn->pre;
            r = run_group(b, &g, i + 1, &i, &ran);
            if (!r && ran)
                continue;
        }
        if (!r && cn->grp.n > 1) {
            /* Matmuls of the same x (and their swiglu) in one launch when they have one row. */
            int ran = 0;
            r = run_group(b, &cn->grp, i, &i, &ran);
            if (!r && ran)
                continue;
        }
        if (!r && nd->op == GP_OP_ALL_REDUCE && b->comm && !b->warming)
            r = all_reduce(b, cn, nd, 0, &norm_done);
        else if (!r && decode_now(b, cn)) {
            b->kc.trig_early = cn->trig;
            r = gp_cuda_attention_decode(&b->kc, &cn->dec, &cn->out, cn->ws, cn->ws_size);
            b->kc.trig_early = 0;
        }
        else if (!r && cn->pair >= 0)
            r = gp_cuda_store2(&b->kc, cn->in, b->nodes[cn->pair].in,
                               (int)nd->attrs.i[GP_STORE_RING]);
        else if (!r && cn->embadd) {
            const cu_node *g0 = &b->nodes[i - 2], *g1 = &b->nodes[i - 1];
            r = gp_cuda_get_rows_add(&b->kc, &cn->out, &g0->in[0], &g0->in[1], &g1->in[0],
                                     &g1->in[1]);
        }
        else if (!r && i == b->argmax_copy && b->argmax_now) {
            gp_cu_tensor o = cn->out;
            o.data = b->hio_dev + p->tensors[nd->output].offset;
            r = gp_cuda_argmax_copy(&b->kc, &o, &cn->in[0],
                                    b->hio_dev + p->tensors[nd->inputs[0]].offset);
        } else if (!r && nd->op == GP_OP_MATMUL && cn->epi.n > 0)
            r = matmul_node(b, i, NULL, &fused, NULL);
        else if (!r)
            r = gp_cuda_compute(&b->kc, nd->op, &nd->attrs, &cn->out, cn->in, nd->n_inputs, cn->ws,
                                cn->ws_size);
    ran:
        if (fused) {
            for (int k = i + 1; b->ev && k <= cn->epi_end; k++)
                cudaEventRecord(b->ev[k], b->stream);

            i = cn->epi_end; /* those nodes ran inside the matmul's kernel (merged LoRA nodes
                                among them never run) */
            /* An all_reduce(x, y) ending the epilogue: its + y ran there, the sum over devices
             * has not. */
            if (!r && p->nodes[i].op == GP_OP_ALL_REDUCE && b->comm && !b->warming)
                r = all_reduce(b, &b->nodes[i], &p->nodes[i], 1, &norm_done);
        }
        if (norm_done) { /* the norm after the all-reduce ran in its kernel */
            i++;
            if (b->ev)
                cudaEventRecord(b->ev[i], b->stream);
        }
        if (r) {
            snprintf(err, err_len, "cuda: node %d (%s -> %s, line %d): %s", i,
                     gp_op_get(nd->op)->name, p->tensors[nd->output].name, nd->line, b->kc.err);
            return -1;
        }
    }
    if (b->ev)
        cudaEventRecord(b->ev[p->n_nodes], b->stream);
    return gp_cuda_be_copy_outputs(b, hio, err, err_len);
}

int gp_cuda_be_eval(void *ctx, const unsigned char *extras, char *err, size_t err_len)
{
    cuda_be *b = ctx;
    double t0 = now_s();
    const gp_plan *p = b->p;
    /* Each rank's thread drives its own device. */
    CU_TRY(cudaSetDevice(b->device));
    if (b->comm && gp_cuda_comm_failed(b->comm) >= 0) {
        snprintf(err, err_len, "cuda: rank %d: the session's collectives were stopped after rank %d "
                 "failed; create a new session", b->rank, gp_cuda_comm_failed(b->comm));
        return -1;
    }
    /* This eval's sizes, from the extras records the session wrote. Every check before the launch
     * reads what every rank reads alike, so when one rank returns here, all do, and no rank is
     * left in a collective. */
    for (int s = 0; s < p->n_syms; s++) {
        int64_t v = p->syms[s].bound;
        if (b->sym_tensor[s] >= 0) {
            const gp_plan_tensor *t = &p->tensors[b->sym_tensor[s]];
            memcpy(&v, extras + t->extras_offset + GP_EXTRAS_NE_OFF(p->n_devices) + 8 * b->sym_dim[s],
                   8);
        }
        if (v < 1 || v > p->syms[s].bound) {
            snprintf(err, err_len, "cuda: dim %s = %lld out of range [1, %lld]", p->syms[s].name,
                     (long long)v, (long long)p->syms[s].bound);
            return -1;
        }
        b->pin_syms[s] = v;
    }
    if (!b->io_registered)
        memcpy(b->pin_io, b->host_io, (size_t)p->regions[GP_REGION_IO].size);
    int long_ctx = 0;
    cu_graph *g = gp_cuda_be_pick_graph(b, &long_ctx);
    /* The launch sizes: a graph's (its top for the first dim, 1 for the others) or this eval's. */
    for (int s = 0; s < p->n_syms; s++)
        b->launch[s] = !g ? b->pin_syms[s] : s ? 1 : g->top;
    if (b->in_span)
        gp_cuda_be_stage_inputs(b, b->launch); /* at the sizes the copy has */
    if (g) {
        cudaError_t e = cudaGraphLaunch(g->exec, b->stream);
        if (e != cudaSuccess) {
            snprintf(err, err_len, "cuda: rank %d: cudaGraphLaunch: %s", b->rank,
                     cudaGetErrorString(e));
            goto launch_failed;
        }
    } else {
        if (gp_cuda_be_enqueue(b, long_ctx, err, err_len))
            goto launch_failed;
    }
    /* Several ranks: a wait that gives up when another rank fails (cuda/cuda_comm.h). */
    if (b->comm) {
        if (gp_cuda_comm_wait(b->comm, b->rank, b->stream, err, err_len))
            return -1;
    } else {
        CU_TRY(cudaStreamSynchronize(b->stream));
    }
    if (b->ev && p->n_syms >= 1 && b->pin_syms[0] == 1) {
        for (int i = 0; i < p->n_nodes; i++) {
            float ms = 0;
            if (cudaEventElapsedTime(&ms, b->ev[i], b->ev[i + 1]) == cudaSuccess) {
                b->prof_ms[p->nodes[i].op] += ms;
                b->prof_n[p->nodes[i].op]++;
            }
        }
        b->prof_evals++;
    }
    if (!b->io_registered)
        memcpy(b->host_io, b->pin_io, (size_t)p->regions[GP_REGION_IO].size);
    if (b->rank == 0) { /* rank 0 only: the ranks' evals run at once */
        stat_seconds += now_s() - t0;
        stat_evals++;
    }
    return 0;
launch_failed:
    /* Work may be queued, collectives among it: the other ranks must not wait for this one. */
    if (b->comm)
        gp_cuda_comm_fail(b->comm, b->rank);
    cudaStreamSynchronize(b->stream);
    cudaGetLastError();
    return -1;
fail:
    return -1;
}
